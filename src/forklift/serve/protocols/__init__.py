"""The HTTP protocols forklift speaks: native, PowerAI Vision and KServe/Triton v2."""
