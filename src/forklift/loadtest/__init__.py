"""Load tools that measure and tune serving: post, sweep."""
