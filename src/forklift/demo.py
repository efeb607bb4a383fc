"""`forklift demo` (`make demo`): the main job end to end, on this machine, with nothing downloaded.

Generates a shapes data set, trains a small YOLO on it for a few minutes (progress bar showing), evaluates it
with pycocotools, serves it on port 5000 and posts validation images to it, printing the detections. A second
run reuses the data set and the trained model.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from forklift.data.dataset import load_dataset
from forklift.data.synth import CLASSES, synth_shapes
from forklift.evaluation.detection import DetectionMetrics
from forklift.evaluation.evaluate import evaluate
from forklift.model_files.model_dir import open_model_dir
from forklift.serve.process import ServerProcess
from forklift.shared_data import shared_data_path
from forklift.train.small_cfg import slim_cfg
from forklift.train.trainer import train

DEMO_PORT = 5000
IMAGES, SIZE = 400, 320
EPOCHS, MINUTES = 12, 4.0  # about 4 minutes of training on 2 CPU cores
POSTED = 6


def run_demo(out: Path) -> int:
    data, model_dir = out / "shapes", out / "shapes-tiny"
    source_cfg = shared_data_path("darknet/yolov3-tiny.cfg")
    if (data / "dataset.json").is_file():
        print(f"[1/4] reusing the data set {data}")
    else:
        print(f"[1/4] generating {IMAGES} shapes images of {SIZE}x{SIZE} in {data}")
        synth_shapes(data, IMAGES, SIZE, seed=0)
    if (model_dir / "forklift.json").is_file():
        print(f"[2/4] reusing the trained model {model_dir}")
    else:
        text, _ = slim_cfg(source_cfg, len(CLASSES), SIZE)
        cfg = out / "shapes-tiny.cfg"
        cfg.write_text(text, encoding="utf-8")
        print(f"[2/4] training a slim yolov3-tiny from scratch for up to {MINUTES:g} minutes ({EPOCHS} epochs)")
        train(data, model_dir, cfg=cfg, epochs=EPOCHS, batch=16, lr=0.002, resume=(model_dir / "checkpoints").is_dir(),
              time_budget_s=MINUTES * 60)  # fmt: skip
    result = evaluate(model_dir, data, split="val", out=out / "eval")
    metrics = result.metrics
    assert isinstance(metrics, DetectionMetrics)  # the shapes set is a detection set
    print(f"[3/4] val mAP@.5 {metrics.map50:.3f}, mAP@[.5:.95] {metrics.map:.3f} on {result.images} images "
          f"(plots in {out / 'eval'})")  # fmt: skip
    serve_and_post(model_dir, data)
    return 0


def serve_and_post(model_dir: Path, data: Path, port: int = DEMO_PORT) -> None:
    """`forklift serve` on the port of the original deployment, and some validation images posted to it."""
    name = open_model_dir(model_dir).name
    dataset = load_dataset(data)
    chosen = [image for image in dataset.images if image.split == "val"][:POSTED]
    print(f"[4/4] serving {model_dir} on http://127.0.0.1:{port} and posting {len(chosen)} validation images")
    with ServerProcess(model_dir, port=port) as server:
        for image in chosen:
            path = dataset.path(image)
            upload = {"files": (path.name, path.read_bytes())}
            response = httpx.post(f"{server.url}/predict/{name}", files=upload, timeout=120)
            found = response.json()["results"][0].get("detections", [])
            truth = ", ".join(sorted(box.label for box in image.boxes))
            seen = ", ".join(f"{d['label']} {d['score']:.2f}" for d in found) or "nothing"
            print(f"  POST {path.name}: HTTP {response.status_code}; found {seen}  (truth: {truth})")
    print("server stopped")
