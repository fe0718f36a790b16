"""Watchers: failed jobs diagnosed and stored as they end, without anyone asking (`attribution watch kueue`)."""
