"""Every model format has one registry entry (`forklift.runtime.formats`), and one directory of each answers
`forklift models inspect`, `predict` and `models export` as a person runs them."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from helpers import CFGS, SHARED, shared

from forklift.cli import main
from forklift.model_files.caffemodel import write_random_caffemodel
from forklift.model_files.model_dir import open_model_dir
from forklift.model_files.two_stage_settings import TwoStageSettings
from forklift.nets.two_stage import build_two_stage
from forklift.runtime.formats import FORMATS
from forklift.runtime.onnx_export import export_darknet
from forklift.runtime.style_export import fresh_style_net, write_style_dir
from forklift.runtime.two_stage_export import write_two_stage_model_dir
from forklift.vocabulary import ModelFormat, Task

SHAPES = ["circle", "square", "triangle"]


def _caffe(out: Path) -> None:
    """py-faster-rcnn's ZF test net with every layer narrowed (a caffemodel of a few MB instead of 237)."""
    text = shared("caffe/zf_faster_rcnn_end2end_test.prototxt").read_text(encoding="utf-8")
    narrowed = re.sub(r"num_output: (96|256|384)\b", "num_output: 16", text)
    narrowed = narrowed.replace("num_output: 4096", "num_output: 64")
    out.mkdir()
    (out / "zf.prototxt").write_text(narrowed, encoding="utf-8")
    write_random_caffemodel(out / "zf.prototxt", out / "zf.caffemodel")
    shutil.copy(shared("darknet/voc.names"), out / "zf.labels")


def _tabular(out: Path) -> None:
    """A small forest of forklift.ml as `forklift ml fit` writes it."""
    from forklift.ml import RandomForestClassifier
    from forklift.ml.model_directory import write_directory
    from forklift.model_files.tabular import Feature, TabularSettings

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    forest = RandomForestClassifier(n_estimators=3, max_depth=3, random_state=0).fit(X, (X[:, 0] > 0).astype(int))
    features = tuple(Feature(name) for name in ("a", "b", "c"))
    write_directory(forest, TabularSettings("RandomForestClassifier", features, (0, 1), probabilities=True), out)


def _onnx(darknet: Path, out: Path) -> None:
    out.mkdir()
    export_darknet(open_model_dir(darknet), out / "tiny.onnx")
    shutil.copy(next(darknet.glob("*.names")), out / "tiny.names")


@pytest.fixture(scope="module")
def directories(darknet_models, tmp_path_factory: pytest.TempPathFactory) -> dict[ModelFormat, Path]:
    root = tmp_path_factory.mktemp("formats")
    darknet = darknet_models(CFGS / "v3-spp-groups.cfg", CFGS / "shapes.names")
    _onnx(darknet, root / "onnx")
    _caffe(root / "caffe")
    write_style_dir(fresh_style_net(seed=0, width=0.25), root / "style", onnx=False)
    settings = TwoStageSettings("fasterrcnn_mobilenet_v3_large_320_fpn", len(SHAPES), 160)
    write_two_stage_model_dir(build_two_stage(settings, seed=1).eval(), root / "two_stage", SHAPES, settings)
    _tabular(root / "tabular")
    return {
        ModelFormat.DARKNET: darknet,
        ModelFormat.CAFFE: root / "caffe",
        ModelFormat.ONNX: root / "onnx",
        ModelFormat.STYLE: root / "style",
        ModelFormat.TWO_STAGE: root / "two_stage",
        ModelFormat.TABULAR: root / "tabular",
    }


def test_every_format_has_one_entry() -> None:
    assert set(FORMATS) == set(ModelFormat)
    for format, entry in FORMATS.items():
        assert entry.format == format and entry.default_runtime in entry.runtimes
        assert entry.files.needed and set(entry.files.sources) <= {r.role for r in entry.files.needed}
        assert (entry.export is None) == bool(entry.no_export)


def _run(capsys, *args: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    printed = capsys.readouterr()
    return code, printed.out, printed.err


@pytest.mark.parametrize("format", list(ModelFormat))
@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_inspect_predict_and_export(directories, format: ModelFormat, tmp_path: Path, capsys) -> None:
    directory = directories[format]
    assert open_model_dir(directory).format == format

    code, out, err = _run(capsys, "models", "inspect", directory, "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["format"] == format and summary["parameters"] > 0
    code, out, err = _run(capsys, "models", "inspect", directory)
    assert code == 0 and f"format             {format}" in out, err

    styled = ["--out", tmp_path] if format == ModelFormat.STYLE else []
    code, out, err = _run(capsys, "predict", directory, SHARED / "images" / "dog.jpg", "--json", *styled)
    if format == ModelFormat.TABULAR:  # rows, not images: `forklift ml predict` and `serve` take them
        assert code == 2 and err.count("\n") == 1 and "a tabular model answers rows of features" in err, err
    else:
        assert code == 0, err
        (result,) = json.loads(out)["results"]
        assert result["file"].endswith("dog.jpg") and "error" not in result
        answer = {Task.DETECT: "detections", Task.CLASSIFY: "classes", Task.STYLE: "image"}[Task(summary["task"])]
        assert answer in result, result
    if format == ModelFormat.DARKNET:  # a style model's option given to one that answers labels: refused, not ignored
        code, _, err = _run(capsys, "predict", directory, SHARED / "images" / "dog.jpg", "--keep-colour")
        assert code == 2 and "--keep-colour: " in err and "answers labels, not images" in err, err

    exported = tmp_path / "exported.onnx"
    code, out, err = _run(capsys, "models", "export", directory, exported, "--to", "onnx")
    if FORMATS[format].export is None:
        assert code == 2 and err.count("\n") == 1 and "has no ONNX export" in err, err
        assert not exported.exists()
        return
    assert code == 0 and f"wrote {exported}" in out, err
    onnx.checker.check_model(str(exported))
    session = onnxruntime.InferenceSession(str(exported))
    shape = [d if isinstance(d, int) else 1 for d in session.get_inputs()[0].shape]
    if format == ModelFormat.STYLE:
        shape[2:] = [32, 48]
    outputs = session.run(None, {session.get_inputs()[0].name: np.zeros(shape, np.float32)})
    assert outputs and all(np.isfinite(o).all() for o in outputs if o.size)
