"""ONNX export (opset >= 17, dynamic batch) and ONNX Runtime agree with PyTorch within 1e-4 relative.

ONNX Runtime's float32 output is compared with PyTorch's float64 forward of the same net, the exact value:
float32 PyTorch and ONNX Runtime each round differently (ONNX Runtime folds batch norm into the
convolutions) and can differ from each other by slightly more than either differs from the exact value.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from helpers import CFGS, shared

from forklift.model_files.model_dir import open_model_dir
from forklift.nets.darknet import build_darknet
from forklift.runtime.base import PredictOptions, RequestOptions
from forklift.runtime.onnx_export import (
    EXPORT_VERSION,
    META_EXPORT,
    META_SOURCE,
    export_darknet,
    exported_onnx,
    metadata,
)
from forklift.runtime.onnx_runtime import OnnxPredictor, open_session
from forklift.runtime.torch_runtime import TorchPredictor


@pytest.fixture(params=["yolov3-tiny", "yolov4-tiny", "v2-reorg-mish", "classifier"])
def model_dir(request, darknet_models) -> Path:
    if (CFGS / f"{request.param}.cfg").exists():
        return darknet_models(CFGS / f"{request.param}.cfg", CFGS / "shapes.names")
    return darknet_models(shared(f"darknet/{request.param}.cfg"), shared("darknet/coco.names"))


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_onnx_matches_pytorch(model_dir: Path, tmp_path: Path) -> None:
    model = open_model_dir(model_dir)
    path = export_darknet(model, tmp_path / "model.onnx")
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    assert max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) >= 17
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"

    net = build_darknet(model.files["cfg"], model.files["weights"])
    batch = torch.rand(3, 3, net.input_height, net.input_width, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        expected = net.double()(batch.double()).numpy()
    session = open_session(path, threads=2)
    for size in (1, 3):  # the batch axis is dynamic
        (got,) = session.run(None, {"images": batch[:size].numpy()})
        np.testing.assert_allclose(got, expected[:size], rtol=1e-4, atol=1e-6)


def test_predictions_match_between_onnx_and_torch(model_dir: Path) -> None:
    model = open_model_dir(model_dir)
    options = PredictOptions(threads=2)
    photo = shared("images/horses.jpg").read_bytes()
    onnx_result = OnnxPredictor(model, options).predict([("horses.jpg", photo)]).results[0]
    torch_result = TorchPredictor(model, options).predict([("horses.jpg", photo)]).results[0]
    if onnx_result.classes is not None:
        assert [c.label for c in onnx_result.classes] == [c.label for c in torch_result.classes]
        return
    assert [d.label for d in onnx_result.detections] == [d.label for d in torch_result.detections]
    for a, b in zip(onnx_result.detections, torch_result.detections, strict=True):
        assert abs(a.x1 - b.x1) <= 1 and abs(a.y2 - b.y2) <= 1


def test_stale_export_beside_model_not_used(darknet_models, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model_dir = darknet_models(CFGS / "v3-spp-groups.cfg", CFGS / "shapes.names", seed=5)
    model = open_model_dir(model_dir)
    beside = export_darknet(model, model_dir / "model.onnx")
    assert exported_onnx(open_model_dir(model_dir)) == beside
    weights = model.files["weights"]
    data = bytearray(weights.read_bytes())
    data[-4:] = np.float32(0.5).tobytes()
    weights.write_bytes(bytes(data))
    chosen = exported_onnx(open_model_dir(model_dir))
    assert chosen != beside and chosen.parent == tmp_path / "cache" / "forklift" / "onnx"
    assert metadata(chosen)[META_SOURCE] != metadata(beside)[META_SOURCE]
    beside.unlink()


def test_export_by_an_older_forklift_not_used(darknet_models, tmp_path: Path, monkeypatch) -> None:
    """An export written before forklift's graphs changed (version 1 had a -inf Pad before each pool, which INT8
    engines run in float) is exported again rather than used."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model_dir = darknet_models(CFGS / "v3-spp-groups.cfg", CFGS / "shapes.names", seed=6)
    beside = export_darknet(open_model_dir(model_dir), model_dir / "model.onnx")
    proto = onnx.load(str(beside))
    for entry in proto.metadata_props:
        if entry.key == META_EXPORT:
            entry.value = "1"
    onnx.save(proto, str(beside))
    try:
        chosen = exported_onnx(open_model_dir(model_dir))
        assert chosen != beside and metadata(chosen)[META_EXPORT] == EXPORT_VERSION
    finally:
        beside.unlink()


def test_a_requests_threshold_holds_for_that_call_only(darknet_models) -> None:
    """A served predictor answers many callers: `predict(inputs, RequestOptions(conf=...))` changes the threshold
    of that call, and the next call without options answers at the predictor's own again."""
    tiny = open_model_dir(darknet_models(shared("darknet/yolov3-tiny.cfg"), shared("darknet/coco.names")))
    predictor = OnnxPredictor(tiny, PredictOptions(conf=0.25, threads=2))
    photo = [("giraffe.jpg", shared("images/giraffe.jpg").read_bytes())]

    def found(request: RequestOptions | None = None) -> list:
        (result,) = predictor.predict(photo, request).results
        return result.detections or []

    before = found()
    stricter = found(RequestOptions(conf=0.5))
    assert 0 < len(stricter) < len(before) and all(d.score > 0.5 for d in stricter)
    assert found() == before
    assert found(RequestOptions(conf=0.25)) == before
