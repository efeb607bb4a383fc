"""The machine under forklift: CPU topology, placement plans for serving instances, and their emitters."""
