"""precision-doctor: a preflight doctor for deep-learning training jobs."""

__version__ = "0.1.0"
