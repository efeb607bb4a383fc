"""Pretrained models: the catalogue of public ones, fetched and checked into a cache, made ready to use, and
mirrored for sites without internet."""
