"""Where the reference data lives (the Darknet cfgs, sample photos, Caffe files and topology fixtures of
`shared/data`), found one way everywhere: the demo, the CLI's defaults, the tests and the benchmarks.

`FORKLIFT_SHARED_DATA` names the folder when set; otherwise `../shared/data` from the working folder, then the one
beside this checkout (for an editable install run from elsewhere).
"""

from __future__ import annotations

import os
from pathlib import Path

from forklift.errors import ForkliftError

ENVIRONMENT = "FORKLIFT_SHARED_DATA"
CHECKOUT_ROOT = Path(__file__).resolve().parents[2]  # src/forklift/shared_data.py -> the repository


def shared_data_root() -> Path:
    """The reference data folder; the first candidate when none exists, so that errors name where it was sought."""
    if os.environ.get(ENVIRONMENT):
        return Path(os.environ[ENVIRONMENT])
    candidates = [Path("../shared/data"), CHECKOUT_ROOT.parent / "shared" / "data"]
    return next((path for path in candidates if path.is_dir()), candidates[0])


def shared_data_path(relative: str) -> Path:
    """A file of the reference data, or one line saying where it was sought and how to point elsewhere."""
    path = shared_data_root() / relative
    if not path.exists():
        raise ForkliftError(f"{path}: not found; set {ENVIRONMENT} to the shared/data folder")
    return path
