"""Shared test fixtures (model directories made once per session); plain helpers are in helpers.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from forklift.nets.fresh_weights import new_darknet_dir


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
