"""OpenVINO runs the same ONNX graph as ONNX Runtime and must answer the same: outputs within 1e-4 relative
(float32 on both; OpenVINO would compute in bf16 on CPUs that have it unless told f32), the same detections,
classes and masks, in process and through `forklift serve --runtime openvino`."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
from agreement import assert_same_detections, assert_same_label_maps
from helpers import CFGS, SHARED, Server, shared

from forklift.errors import ForkliftError
from forklift.model_files.model_dir import open_model_dir
from forklift.runtime.base import PredictOptions
from forklift.runtime.load import load_predictor
from forklift.runtime.onnx_graph import graph_path
from forklift.runtime.onnx_runtime import OnnxRuntimeNetwork
from forklift.runtime.openvino_runtime import OpenVinoNetwork
from forklift.runtime.segment_export import write_segment_model_dir
from forklift.vision.images import decode_image
from forklift.vision.masks import labels_from_segments
from forklift.vision.results import Detection

CONF, IOU = 0.25, 0.45  # forklift's defaults, which these models' directories keep
OPTIONS = PredictOptions(threads=2)


@pytest.fixture(scope="module", params=["yolov3-tiny", "yolov4-tiny", "v2-reorg-mish", "classifier"])
def model_dir(request, darknet_models) -> Path:
    if (CFGS / f"{request.param}.cfg").exists():
        return darknet_models(CFGS / f"{request.param}.cfg", CFGS / "shapes.names")
    return darknet_models(shared(f"darknet/{request.param}.cfg"), shared("darknet/coco.names"))


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_outputs_match_onnx_runtime(model_dir: Path) -> None:
    path = graph_path(open_model_dir(model_dir))
    reference, network = OnnxRuntimeNetwork(path, OPTIONS), OpenVinoNetwork(path, OPTIONS)
    assert network.input_shape == reference.input_shape  # (OpenVINO infers output sizes ONNX Runtime leaves open)
    batch = np.random.default_rng(0).random((3, *network.input_shape[1:]), dtype=np.float32)
    for size in (1, 3):  # the batch axis stays dynamic
        np.testing.assert_allclose(network.run(batch[:size]), reference.run(batch[:size]), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_answers_match_onnx_runtime_on_photos(model_dir: Path) -> None:
    model = open_model_dir(model_dir)
    photos = [(p.name, p.read_bytes()) for p in sorted((SHARED / "images").glob("*.jpg"))]
    expected = load_predictor(model, "onnx", OPTIONS).predict(photos).results
    predictor = load_predictor(model, "openvino", OPTIONS)
    assert predictor.runtime == "openvino"
    for got, want in zip(predictor.predict(photos).results, expected, strict=True):
        assert got.error is None
        if want.classes is not None:
            assert [c.label for c in got.classes] == [c.label for c in want.classes]
            assert np.allclose([c.score for c in got.classes], [c.score for c in want.classes], atol=1e-3)
            continue
        assert_same_detections(got.detections, want.detections, conf=CONF, iou=IOU)


def test_segmentation_model(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3, padding=1))
    model = open_model_dir(write_segment_model_dir(net.eval(), tmp_path, ["a", "b", "c"], (64, 48)))
    photo = [("kite.jpg", shared("images/kite.jpg").read_bytes())]
    predictor = load_predictor(model, "openvino", OPTIONS)
    assert predictor.runtime == "openvino" and predictor.task == "segment"
    (got,) = predictor.predict(photo).results
    (want,) = load_predictor(model, "onnx", OPTIONS).predict(photo).results
    assert got.segments and [s.label for s in got.segments] == [s.label for s in want.segments]
    height, width = decode_image(photo[0][1], "kite.jpg").shape[:2]
    assert_same_label_maps(
        labels_from_segments(got.segments, model.labels, height, width),
        labels_from_segments(want.segments, model.labels, height, width),
    )


def test_unreadable_model_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"not a graph")
    with pytest.raises(ForkliftError, match=r"model\.onnx: OpenVINO cannot load it: "):
        OpenVinoNetwork(tmp_path / "model.onnx", OPTIONS)


@pytest.mark.slow
def test_serve_answers_as_onnx_runtime(darknet_models) -> None:
    tiny = darknet_models(shared("darknet/yolov3-tiny.cfg"), shared("darknet/coco.names"))
    dog = shared("images/dog.jpg").read_bytes()
    with Server(f"{tiny}=tiny", "--instances", "1", "--threads", "1", "--runtime", "openvino") as server:
        assert server.wait_healthy()["models"]["tiny"]["runtime"] == "openvino"
        response = httpx.post(f"{server.url}/predict/tiny", files={"files": ("dog.jpg", dog)}, timeout=60)
    assert response.status_code == 200
    served = [
        Detection(**d["bbox"], label=d["label"], score=d["score"]) for d in response.json()["results"][0]["detections"]
    ]
    (expected,) = load_predictor(open_model_dir(tiny), "onnx", OPTIONS).predict([("dog.jpg", dog)]).results
    assert served
    assert_same_detections(served, expected.detections, conf=CONF, iou=IOU)
