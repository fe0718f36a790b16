"""attribution: for every failed GPU training job, what actually broke."""

__version__ = "0.1.0"
