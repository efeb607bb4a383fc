"""`forklift demo` (`make demo`): what exists, end to end, on the sample photos of ../shared/data.

Makes a YOLOv3-tiny model directory with seeded weights (no download: random weights until a trained
model exists), exports it to ONNX, inspects it, predicts on every photo (printing the result JSON), then
serves it on port 5000 and posts every photo to the server. A second run reuses the model directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx

from forklift.bench.launch import ServerProcess
from forklift.errors import ForkliftError
from forklift.formats.model_dir import open_model_dir
from forklift.nets.init import new_darknet_dir
from forklift.predict import predict_files
from forklift.runtime.inspect import summarise
from forklift.runtime.onnx_export import export_darknet

DEMO_PORT = 5000
SHARED_DATA = Path(os.environ.get("FORKLIFT_SHARED_DATA", "../shared/data"))
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")


def run_demo(out: Path) -> int:
    darknet, images = SHARED_DATA / "darknet", SHARED_DATA / "images"
    if not darknet.is_dir() or not images.is_dir():
        raise ForkliftError(f"{SHARED_DATA}: sample data not found; set FORKLIFT_SHARED_DATA to the shared/data folder")
    model_dir = out / "yolov3-tiny"
    if not model_dir.exists():
        print(f"[1/5] making {model_dir} (yolov3-tiny, 80 COCO classes, seeded random weights)")
        new_darknet_dir(darknet / "yolov3-tiny.cfg", darknet / "coco.names", model_dir, seed=1)
    else:
        print(f"[1/5] reusing {model_dir}")
    model = open_model_dir(model_dir)
    if "onnx" not in model.files:
        print("[2/5] exporting to ONNX")
        export_darknet(model, model_dir / "yolov3-tiny.onnx")
    else:
        print("[2/5] ONNX export already there")
    summary = summarise(open_model_dir(model_dir))
    print(
        f"[3/5] {summary.format} {summary.task} model, {summary.classes} classes, "
        f"{summary.input_width}x{summary.input_height}, {summary.parameters:,} parameters, "
        f"{summary.flops / 1e9:.2f} GFLOPs"
    )
    photos = sorted(p for p in images.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    print(f"[4/5] predicting {len(photos)} photos with ONNX Runtime (random weights: the boxes mean nothing yet)")
    prediction = predict_files(model_dir, photos, conf=0.5)
    print(json.dumps(prediction.to_json(), indent=2))
    seconds = prediction.timing.total
    print(f"predicted {len(photos)} photos in {seconds:.2f} s ({1000 * seconds / len(photos):.0f} ms a photo)")
    serve_and_post(model_dir, photos)
    return 0


def serve_and_post(model_dir: Path, photos: list[Path], port: int = DEMO_PORT) -> None:
    """`forklift serve` on the port of the original deployment, and every photo posted to it."""
    print(f"[5/5] serving {model_dir} on http://127.0.0.1:{port} and posting the photos")
    with ServerProcess(model_dir, port=port) as server:
        for photo in photos:
            upload = {"files": (photo.name, photo.read_bytes())}
            url = f"{server.url}/predict/{model_dir.name}"
            response = httpx.post(url, files=upload, data={"conf": "0.5"}, timeout=120)
            body = response.json()
            found = body["results"][0].get("detections", [])
            kinds = sorted({d["label"] for d in found})
            labels = ", ".join(kinds[:5]) + (", ..." if len(kinds) > 5 else "") if kinds else "nothing"
            print(f"  POST {photo.name}: HTTP {response.status_code}, {len(found)} boxes ({labels})")
    print("server stopped")
