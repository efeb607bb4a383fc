"""Training: the loop, its loss, checkpoints and evaluation of what it makes."""
