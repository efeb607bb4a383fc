"""Shared test fixtures: the reference data in ../shared/data and model directories made from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from forklift.nets.init import new_darknet_dir

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
CFGS = Path(__file__).resolve().parent / "cfgs"


def shared(relative: str) -> Path:
    """A file of the reference data, or a skip that says it is missing."""
    path = SHARED / relative
    if not path.exists():
        pytest.skip(f"reference data {path} is missing (see ../shared/data/README.md)")
    return path


@pytest.fixture(scope="session")
def darknet_models(tmp_path_factory: pytest.TempPathFactory):
    """Model directories with seeded random weights, made once per session: name -> directory."""
    made: dict[str, Path] = {}
    root = tmp_path_factory.mktemp("models")

    def make(cfg: Path, names: Path, seed: int = 1) -> Path:
        key = f"{cfg.stem}-{seed}"
        if key not in made:
            made[key] = new_darknet_dir(cfg, names, root / key, seed=seed)
        return made[key]

    return make
