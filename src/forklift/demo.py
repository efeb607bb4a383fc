"""`forklift demo` (`make demo`): the main job end to end, on this machine, with nothing downloaded.

Generates a shapes data set, trains a small YOLO on it for a few minutes (progress bar showing), evaluates it
with pycocotools, serves it on port 5000 and posts validation images to it, printing the detections, draws
them with the true boxes into pictures to look at, and ends in the app: the data set, the model registered and
deployed, held-back images auto-labelled for review (`forklift.app.demo`). A second run reuses the data set and
the trained model.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from forklift.app.demo import show_in_app
from forklift.data.dataset import Box, load_dataset
from forklift.data.synth import CLASSES, synth_shapes
from forklift.evaluation.detection import DetectionMetrics
from forklift.evaluation.evaluate import evaluate
from forklift.model_files.model_dir import open_model_dir
from forklift.serve.process import ServerProcess
from forklift.shared_data import shared_data_path
from forklift.train.run_dir import last_checkpoint
from forklift.train.settings import RunOptions, TrainSettings
from forklift.train.small_cfg import slim_cfg
from forklift.train.trainer import train
from forklift.vision.drawing import draw_boxes, write_grid, write_image
from forklift.vision.images import decode_image

DEMO_PORT = 5000
# The recipe, measured on the 2 idle CPU cores: val mAP@.5 0.81 after 3.7 minutes of training (the earlier 320 px,
# batch 16, lr 0.002 got 0.30). 224-px images train twice as fast as 320-px ones (46 against 24 images/s) and
# leave the smallest shapes ~27 px wide; batch 8 gives twice the steps of 16 for 10 % fewer images/s (batch 16,
# lr 0.003, 10 epochs got 0.57; lr 0.006 got 0.80). The cosine schedule spans EPOCHS, 3.7 minutes on idle cores;
# MINUTES is a ceiling for a busy machine (a run cut by it ends weaker). Validation takes ~2 s, every VAL_EVERY
# epochs and the last.
IMAGES, SIZE = 1000, 224
EPOCHS, BATCH, LR, VAL_EVERY = 12, 8, 0.004, 4
MINUTES = 6.0
POSTED = 12
TRUTH_COLOUR = "white"  # thin and unlabelled; predictions get their class's colour, a width of 2 and a tag
CLASS_COLOURS = dict(zip(CLASSES, ("#ff4b4b", "#3cdc5a", "#4b8cff", "#ffb400", "#dc50ff"), strict=True))


@dataclass(frozen=True)
class Posted:
    """A validation image sent to the server: its file, its true boxes and the detections the server answered."""

    path: Path
    truth: list[Box]
    found: list[dict]


def run_demo(out: Path) -> int:
    data = out / f"shapes-{IMAGES}x{SIZE}"  # named by its parameters, so that other ones are generated anew
    model_dir = out / f"{data.name}-tiny"
    source_cfg = shared_data_path("darknet/yolov3-tiny.cfg")
    if (data / "dataset.json").is_file():
        print(f"[1/6] reusing the data set {data}")
    else:
        print(f"[1/6] generating {IMAGES} shapes images of {SIZE}x{SIZE} in {data}")
        synth_shapes(data, IMAGES, SIZE, seed=0)
    if (model_dir / "forklift.json").is_file():
        print(f"[2/6] reusing the trained model {model_dir}")
    else:
        text, _ = slim_cfg(source_cfg, len(CLASSES), SIZE)
        cfg = out / f"{model_dir.name}.cfg"
        cfg.write_text(text, encoding="utf-8")
        print(f"[2/6] training a slim yolov3-tiny from scratch: {EPOCHS} epochs, about 4 minutes on 2 idle cores")
        started = time.perf_counter()
        settings = TrainSettings.of(data=data, cfg=cfg, epochs=EPOCHS, batch=BATCH, lr=LR, val_every=VAL_EVERY)
        resume = last_checkpoint(model_dir).is_file()
        if not resume and model_dir.exists():  # a run stopped before its first epoch: the demo's own, begun again
            shutil.rmtree(model_dir)
        train(settings, model_dir, RunOptions(resume=resume, time_budget_s=MINUTES * 60))
        print(f"trained in {(time.perf_counter() - started) / 60:.1f} minutes")
    result = evaluate(model_dir, data, split="val", out=out / "eval")
    metrics = result.metrics
    assert isinstance(metrics, DetectionMetrics)  # the shapes set is a detection set
    print(f"[3/6] val mAP@.5 {metrics.map50:.3f}, mAP@[.5:.95] {metrics.map:.3f}, recall {metrics.recall:.2f} at "
          f"score {metrics.threshold:g} on {result.images} images (plots in {out / 'eval'})")  # fmt: skip
    posted = serve_and_post(model_dir, data)
    folder = out / "predictions"
    grid = write_pictures(posted, folder)
    print(f"[5/6] drew the detections (coloured, with class and score) and the true boxes (thin white) of the "
          f"posted images into {folder}/*.png; all of them on one sheet: {grid}")  # fmt: skip
    print(f"[6/6] the app over {out / 'app'}: the data set, the model registered and deployed, auto-labels to review")
    show_in_app(out, data, model_dir, interactive=sys.stdin.isatty() and sys.stdout.isatty())
    return 0


def serve_and_post(model_dir: Path, data: Path, port: int = DEMO_PORT) -> list[Posted]:
    """`forklift serve` on the port of the original deployment, and some validation images posted to it."""
    name = open_model_dir(model_dir).name
    dataset = load_dataset(data)
    chosen = [image for image in dataset.images if image.split == "val"][:POSTED]
    print(f"[4/6] serving {model_dir} on http://127.0.0.1:{port} and posting {len(chosen)} validation images")
    posted = []
    with ServerProcess(model_dir, port=port) as server:
        for image in chosen:
            path = dataset.path(image)
            upload = {"files": (path.name, path.read_bytes())}
            response = httpx.post(f"{server.url}/predict/{name}", files=upload, timeout=120)
            found = response.json()["results"][0].get("detections", [])
            truth = ", ".join(sorted(box.label for box in image.boxes))
            seen = ", ".join(f"{d['label']} {d['score']:.2f}" for d in found) or "nothing"
            print(f"  POST {path.name}: HTTP {response.status_code}; found {seen}  (truth: {truth})")
            posted.append(Posted(path, image.boxes, found))
    print("server stopped")
    return posted


def write_pictures(posted: list[Posted], folder: Path) -> Path:
    """One PNG per posted image with its true boxes and the server's detections drawn, and a contact sheet of
    them all (returned): what the numbers mean is easier to judge by eye."""
    pictures = []
    for post in posted:
        pixels = decode_image(post.path.read_bytes(), post.path.name)
        truth = draw_boxes(pixels, [(b.x1, b.y1, b.x2, b.y2) for b in post.truth], colours=TRUTH_COLOUR, width=1)
        found = sorted(post.found, key=lambda d: d["score"])  # the best drawn last: its tag stays readable on top
        boxes = [tuple(d["bbox"][k] for k in ("x1", "y1", "x2", "y2")) for d in found]
        picture = draw_boxes(truth, boxes, colours=[CLASS_COLOURS[d["label"]] for d in found],
                             labels=[f"{d['label']} {d['score']:.2f}" for d in found])  # fmt: skip
        write_image(picture, folder / f"{post.path.stem}.png")
        pictures.append(picture)
    return write_grid(pictures, folder / "grid.png", columns=4)
