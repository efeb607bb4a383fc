"""PyTorch modules built from a model format."""
