"""Shared test fixtures: the reference data in ../shared/data and model directories made from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

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


def assert_resume_is_exact(monkeypatch: pytest.MonkeyPatch, whole: Path, out: Path, **settings: Any) -> None:
    """Train into `out` with `settings` (3 epochs), crash at the start of epoch 3, resume: the last checkpoint must
    hold exactly the weights of the uninterrupted run `whole`, and metrics.csv one row per epoch."""
    from forklift.train import trainer

    real_loader = trainer.epoch_loader

    def crash_in_epoch_3(images, batch, epoch, **kwargs):
        if epoch == 3:
            raise KeyboardInterrupt
        return real_loader(images, batch, epoch, **kwargs)

    monkeypatch.setattr(trainer, "epoch_loader", crash_in_epoch_3)
    with pytest.raises(KeyboardInterrupt):
        trainer.train(out=out, **settings)
    assert torch.load(out / "checkpoints" / "last.pt", weights_only=False)["epoch"] == 2
    monkeypatch.setattr(trainer, "epoch_loader", real_loader)
    trainer.train(out=out, resume=True, **settings)
    resumed = torch.load(out / "checkpoints" / "last.pt", weights_only=False)
    expected = torch.load(whole / "checkpoints" / "last.pt", weights_only=False)
    assert resumed["epoch"] == 3
    assert [line.split(",")[0] for line in (out / "metrics.csv").read_text().splitlines()[1:]] == ["1", "2", "3"]
    for key, value in expected["model"].items():
        assert torch.equal(resumed["model"][key], value), key
