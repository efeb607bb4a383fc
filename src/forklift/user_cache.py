"""forklift's folder in the user's cache directory (XDG): ONNX exports, saved recommendations, pretrained files."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache() -> Path:
    """$XDG_CACHE_HOME/forklift, else ~/.cache/forklift."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "forklift"
