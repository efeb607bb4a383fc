"""Shared test fixtures (model directories made once per session); plain helpers are in helpers.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from postgres import postgres_server

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


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def app_database(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The app's database server for a module's tests, each run on both: None for SQLite (a file per app), or
    the URL of a real PostgreSQL server started for the module (each app makes a database of its own on it)."""
    if request.param == "sqlite":
        yield None
    else:
        with postgres_server() as url:
            yield url
