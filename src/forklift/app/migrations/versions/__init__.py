"""One module per schema change, in order (down_revision)."""
