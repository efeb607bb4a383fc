"""The HTTP server: protocols (native, PowerAI Vision, KServe v2), pinned worker pools, batching, metrics."""
