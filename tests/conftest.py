"""Shared test fixtures (model directories made once per session); plain helpers are in helpers.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture
def api(app_database: str | None, tmp_path: Path) -> Iterator[Any]:
    """A test client of the app (fastapi's TestClient) over a fresh data directory (tmp_path/app) and database:
    SQLite, or a database of its own on app_database's PostgreSQL server."""
    from app_helpers import app_client, fresh_database  # the app's imports: only for the tests that use it

    data = tmp_path / "app"
    data.mkdir()
    with app_client(data, fresh_database(app_database, data)) as client:
        yield client
