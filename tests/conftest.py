"""Shared test fixtures (model directories made once per session); plain helpers are in helpers.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from image_build import IMAGE_BUILD, start_build
from postgres import postgres_server

from forklift.nets.fresh_weights import new_darknet_dir


def pytest_collection_finish(session: pytest.Session) -> None:
    """The image test's build starts now, in the background (tests/image_build.py), when that test will run; under
    pytest-xdist the controller starts it, once (the next hook), not each worker."""
    worker = hasattr(session.config, "workerinput")
    if not worker and any(item.path.name == "test_container_images.py" for item in session.items):
        session.config.stash[IMAGE_BUILD] = start_build()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """pytest-xdist's controller, told what a worker collected: the image build starts with the first worker's list."""
    if IMAGE_BUILD not in node.config.stash and any(i.startswith("tests/test_container_images.py") for i in ids):
        node.config.stash[IMAGE_BUILD] = start_build()


def pytest_sessionfinish(session: pytest.Session) -> None:
    build = session.config.stash.get(IMAGE_BUILD, None)
    if build is not None and build.poll() is None:  # the run stopped before the image test waited for it
        build.terminate()
        build.wait()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked gpu run only when `-m` names them: no machine of CI has a GPU, and a skip would read as passed.
    Tests marked images run last, so the background build they wait for has had the whole run to finish."""
    items.sort(key=lambda item: item.get_closest_marker("images") is not None)  # stable: the rest keep their order
    if "gpu" in (config.getoption("markexpr") or ""):
        return
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if gpu:
        config.hook.pytest_deselected(items=gpu)
        items[:] = [item for item in items if not item.get_closest_marker("gpu")]


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


@pytest.fixture(scope="session")
def tiny_detector(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny detector trained once for the session, 15 epochs on 300 generated 96x96 images (about 10 s here;
    mAP@.5 about 0.3): (model directory, data). Tests that change it work on a copy."""
    from helpers import CFGS

    from forklift.data.synth import synth_shapes
    from forklift.train.settings import TrainSettings
    from forklift.train.trainer import train

    root = tmp_path_factory.mktemp("tiny-detector")
    synth_shapes(root / "data", 300, 96, seed=0)
    settings = TrainSettings.of(data=root / "data", cfg=CFGS / "tiny-detector.cfg", epochs=15, batch=8, lr=0.01,
                                val_every=15)  # fmt: skip
    return train(settings, root / "run"), root / "data"


@pytest.fixture(scope="session")
def exported_detector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Darknet detector directory (seeded random weights, COCO's names) with its ONNX export beside it, readable by
    any user (the images run as uid 1000)."""
    from helpers import CFGS, forklift_here, shared

    model = tmp_path_factory.mktemp("exported") / "model"
    forklift_here("models", "new-darknet", "--cfg", CFGS / "tiny-detector.cfg", "--names",
                  shared("darknet/coco.names"), model)  # fmt: skip
    forklift_here("models", "export", model, "--to", "onnx")
    model.chmod(0o755)
    for file in model.iterdir():
        file.chmod(0o644)
    return model


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
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
