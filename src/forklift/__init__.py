"""forklift: an open deep-learning platform for computer vision."""

__version__ = "0.1.0"
