"""intake: the one codec of what reporters send (an observation document: attribution/intake/codec.py)."""
