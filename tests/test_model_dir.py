"""Model directories are recognised by their files; what is missing or ambiguous is a one-line error."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import CFGS, forklift

from forklift.errors import ForkliftError
from forklift.model_files.model_dir import open_model_dir
from forklift.nets.fresh_weights import new_darknet_dir
from forklift.runtime.load import load_predictor

CFG, NAMES = CFGS / "v3-spp-groups.cfg", CFGS / "shapes.names"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return new_darknet_dir(CFG, NAMES, tmp_path / "m", seed=1)


def test_darknet_directory_recognised(model: Path) -> None:
    found = open_model_dir(model)
    assert found.format == "darknet"
    assert set(found.files) == {"cfg", "weights", "labels"}
    assert found.labels == ["circle", "square", "triangle"]


@pytest.mark.parametrize("suffix", [".weights", ".names"])
def test_missing_file(model: Path, suffix: str) -> None:
    next(model.glob(f"*{suffix}")).unlink()
    with pytest.raises(ForkliftError, match=rf"missing the \w+ file \({suffix}\)"):
        open_model_dir(model)


def test_two_candidates(model: Path) -> None:
    shutil.copy(next(model.glob("*.weights")), model / "other.weights")
    with pytest.raises(ForkliftError, match=r"two candidates for the weights file \(other.weights, v3-spp"):
        open_model_dir(model)


def test_not_a_model_directory(tmp_path: Path) -> None:
    with pytest.raises(ForkliftError, match="not a model directory"):
        open_model_dir(tmp_path)
    with pytest.raises(ForkliftError, match="no such model directory"):
        open_model_dir(tmp_path / "nope")


def test_labels_count_mismatch(model: Path, tmp_path: Path) -> None:
    """predict refused it; inspect said `classes 3: circle, square` and export wrote the graph (exit 0)."""
    next(model.glob("*.names")).write_text("circle\nsquare\n")
    with pytest.raises(ForkliftError, match=r"\.names: 2 labels, but the network has 3 classes"):
        load_predictor(open_model_dir(model), "torch")
    for args in (["inspect", model], ["export", "--to", "onnx", model, tmp_path / "model.onnx"]):
        result = forklift("models", *args, check=False)
        assert result.returncode == 2 and result.stderr.strip().endswith(".names: 2 labels, but the network has 3 "
                                                                         "classes"), result.stderr  # fmt: skip
    assert not (tmp_path / "model.onnx").exists()


def test_labels_trailing_whitespace_stripped(model: Path) -> None:
    next(model.glob("*.names")).write_text("circle \r\nsquare\t\ntriangle\n\n")
    assert open_model_dir(model).labels == ["circle", "square", "triangle"]


def test_config_file_read(model: Path) -> None:
    (model / "forklift.json").write_text('{"resize": "stretch", "conf": 0.5}')
    found = open_model_dir(model)
    assert found.config.resize == "stretch" and found.config.conf == 0.5
    (model / "forklift.json").write_text('{"resize": "squash"}')
    with pytest.raises(ForkliftError, match="resize must be one of letterbox, stretch"):
        open_model_dir(model)
    (model / "forklift.json").write_text('{"task": "segmentation"}')
    with pytest.raises(
        ForkliftError, match="task must be one of detect, classify, segment, style, tabular, not 'segmentation'"
    ):
        open_model_dir(model)


def test_new_darknet_refuses_wrong_names(tmp_path: Path) -> None:
    names = tmp_path / "two.names"
    names.write_text("a\nb\n")
    with pytest.raises(ForkliftError, match=r"2 names, but v3-spp-groups\.cfg has 3 classes"):
        new_darknet_dir(CFG, names, tmp_path / "out")
