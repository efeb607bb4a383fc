"""Data sets in forklift's own layout (dataset.json + images/), and synthetic data to start from."""
