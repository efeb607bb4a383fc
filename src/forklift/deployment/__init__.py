"""What runs forklift elsewhere: the files `forklift plan --emit` and `forklift run --emit` write."""
