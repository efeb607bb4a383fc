"""Largest differences between forklift and the independent reference (OpenCV 4.x DNN) per Darknet cfg.

The tests assert the bounds; this prints the figures they hold to, for the closing notes and the README:
decoded head outputs (box, objectness, class probability) of forklift's net in float64 and float32 against
OpenCV (Winograd off), ONNX Runtime against PyTorch float64, and final detections (box corners in pixels).

    .venv/bin/python bench/reference.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from forklift.model_files.darknet_cfg import read_cfg
from forklift.model_files.model_dir import open_model_dir
from forklift.nets.darknet import build_darknet
from forklift.nets.fresh_weights import new_darknet_dir
from forklift.runtime.base import PredictOptions
from forklift.runtime.onnx_export import export_darknet
from forklift.runtime.onnx_runtime import open_session
from forklift.runtime.opencv_darknet import OpenCVDarknetPredictor, opencv_rows, read_opencv_darknet
from forklift.runtime.torch_runtime import TorchPredictor
from forklift.shared_data import shared_data_root
from forklift.vision.images import decode_image
from forklift.vision.resize import fit

SHARED = shared_data_root()
TESTS = Path(__file__).resolve().parents[1] / "tests" / "cfgs"
CASES = {
    "yolov3-tiny": (SHARED / "darknet/yolov3-tiny.cfg", SHARED / "darknet/coco.names"),
    "yolov3": (SHARED / "darknet/yolov3.cfg", SHARED / "darknet/coco.names"),
    "yolov2-tiny-voc": (SHARED / "darknet/yolov2-tiny-voc.cfg", SHARED / "darknet/voc.names"),
    "yolov4-tiny": (SHARED / "darknet/yolov4-tiny.cfg", SHARED / "darknet/coco.names"),
    "v2-reorg-mish": (TESTS / "v2-reorg-mish.cfg", TESTS / "shapes.names"),
    "v3-spp-groups": (TESTS / "v3-spp-groups.cfg", TESTS / "shapes.names"),
}


def relative(ours: np.ndarray, reference: np.ndarray) -> float:
    """Largest |a - b| / |b| over the values, with 1e-6 absolute slack for values near zero."""
    return float(np.max(np.maximum(np.abs(ours - reference) - 1e-6, 0) / np.abs(reference).clip(1e-12)))


def heads_report(model, photos: list[np.ndarray]) -> dict[str, float]:
    net = build_darknet(model.files["cfg"], model.files["weights"])
    batch = np.stack([fit(p, net.input_width, net.input_height, "letterbox")[0].transpose(2, 0, 1) for p in photos])
    batch = batch.astype(np.float32) / 255.0
    reference = opencv_rows(read_opencv_darknet(model, exact=True), batch)
    reported = reference[..., 5:] > 0
    probabilities = reference[..., 5:] / reference[..., 4:5]
    out: dict[str, float] = {}
    with torch.inference_mode():
        exact = net.double()(torch.from_numpy(batch).double()).numpy()
        single = net.float()(torch.from_numpy(batch)).numpy()
    for name, ours in (("f64", exact), ("f32", single)):
        out[f"box {name}"] = relative(ours[..., :4], reference[..., :4])
        out[f"obj {name}"] = relative(ours[..., 4], reference[..., 4])
        out[f"cls {name}"] = relative(ours[..., 5:][reported], probabilities[reported])
    with tempfile.TemporaryDirectory() as folder:
        session = open_session(export_darknet(model, Path(folder) / "m.onnx"), threads=2)
        (onnx_out,) = session.run(None, {"images": batch})
    out["onnx vs torch f64"] = relative(onnx_out, exact)
    return out


def detections_report(model, photos: list[np.ndarray]) -> tuple[int, float]:
    """Detections compared and the largest corner difference, as the tests compare them."""
    heads = [s for s in read_cfg(model.files["cfg"]).layers if s.kind in ("yolo", "region")]
    region = any(h.kind == "region" for h in heads)
    conf = max([0.25] + [h.float("thresh", 0.2) for h in heads])  # OpenCV reports nothing under its thresh
    options = PredictOptions(conf=conf, iou=0.4 if region else 0.45, threads=2)  # OpenCV's region NMS is 0.4
    ours, theirs = TorchPredictor(model, options), OpenCVDarknetPredictor(model, options)
    count, worst = 0, 0.0

    def order(d):
        return (d.label, round(d.x1), round(d.y1))

    for photo in photos:
        a, _ = ours.predict_image("p", photo)
        b, _ = theirs.predict_image("p", photo)
        for x, y in zip(sorted(a, key=order), sorted(b, key=order), strict=True):
            assert x.label == y.label
            worst = max(worst, abs(x.x1 - y.x1), abs(x.y1 - y.y1), abs(x.x2 - y.x2), abs(x.y2 - y.y2))
            count += 1
    return count, worst


def main() -> None:
    photos = [decode_image(p.read_bytes(), p.name) for p in sorted((SHARED / "images").glob("*.jpg"))]
    with tempfile.TemporaryDirectory() as folder:
        for case, (cfg, names) in CASES.items():
            model = open_model_dir(new_darknet_dir(cfg, names, Path(folder) / case, seed=1))
            subset = photos[:4] if case == "yolov3" else photos
            figures = heads_report(model, subset)
            count, pixels = detections_report(model, subset)
            cells = "  ".join(f"{k} {v:.1e}" for k, v in figures.items())
            print(f"{case:<16} {cells}  {count} detections, max {pixels:.3f} px")


if __name__ == "__main__":
    main()
