"""The auto-label loop on generated shapes, scripted through a real `forklift app` process's API as a person would
click it, and the cost of the app's job system against the same `forklift train` from the command line.

Method: generated shapes (`forklift.data.synth`, --size px, --objects shapes each): --hand images labelled by
hand (their true boxes), then two batches of --batch new images. Round 1: a training job (the slim yolov3-tiny,
fresh weights, --epochs1) on the hand-labelled images; its model auto-labels batch 1 at confidence >= --threshold;
review: an image whose auto labels match the truth exactly (every true box found with its label at IoU >= .5,
nothing else) is accepted, any other is corrected to the truth in the editor's call. Round 2: "retrain" (the
round-1 model fine-tuned on everything labelled or reviewed, --epochs2), batch 2 arrives, is auto-labelled and
reviewed the same way. Reported per round: the auto labels' precision and recall against the truth, the share
of images that needed no correction, the round's model mAP@.5 on a held-out set (--test images of another
seed, forklift's evaluation), and the time of each step. Then the round-1 job's exact training command is run
again from the command line on the job's snapshot: the job's time (queued to done, as the API shows it) against
the command's wall time. Goals: >= 80 % of round 2's images need no correction; the job system adds < 5 %.

    .venv/bin/python bench/app/loop.py [--hand 30 --batch 100 --size 128 --epochs1 500 --epochs2 120]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch
from torchvision.ops import box_iou

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from app_helpers import start_app, wait_for  # noqa: E402 - the test helpers, found through the line above

from forklift.data.dataset import Dataset, ImageRecord  # noqa: E402
from forklift.data.synth import synth_shapes  # noqa: E402
from forklift.evaluation.evaluate import measure  # noqa: E402
from forklift.model_files.model_dir import open_model_dir  # noqa: E402
from forklift.serve.process import free_port  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "app"
IOU = 0.5
ENDED = ("done", "failed", "cancelled", "interrupted")  # a job's or an auto-label run's states once over
WAIT_S = 7200.0


def _shapes(record: ImageRecord) -> list[dict]:
    return [{"kind": "box", "label": b.label, "points": [b.x1, b.y1, b.x2, b.y2]} for b in record.boxes]


def _upload(client: httpx.Client, dataset: int, data: Dataset, records: list[ImageRecord]) -> dict[int, ImageRecord]:
    """The images added to the app's data set, by their id there."""
    files = [("files", (Path(r.file).name, (data.root / r.file).read_bytes())) for r in records]
    added = client.post(f"/api/datasets/{dataset}/images", files=files).json()["added"]
    return {image["id"]: record for image, record in zip(added, records, strict=True)}


def _matches(found: list[dict], truth: ImageRecord) -> tuple[int, int, int]:
    """(true positives, auto labels, true boxes): each auto label (most confident first) takes the unmatched true
    box of its label it overlaps most, at IoU >= .5."""
    if not found or not truth.boxes:
        return 0, len(found), len(truth.boxes)
    ranked = sorted(found, key=lambda s: -(s["confidence"] or 0))
    ious = box_iou(torch.tensor([s["points"] for s in ranked], dtype=torch.float32),
                   torch.tensor([[b.x1, b.y1, b.x2, b.y2] for b in truth.boxes], dtype=torch.float32))  # fmt: skip
    taken: set[int] = set()
    hits = 0
    for i, shape in enumerate(ranked):
        options = [
            (float(ious[i, j]), j) for j, b in enumerate(truth.boxes) if j not in taken and b.label == shape["label"]
        ]
        best = max(options, default=(0.0, -1))
        if best[0] >= IOU:
            taken.add(best[1])
            hits += 1
    return hits, len(found), len(truth.boxes)


def _train(client: httpx.Client, post: str, body: dict) -> tuple[dict, dict, float]:
    """(the job, its model, seconds from the request to the model in the registry)."""
    started = time.perf_counter()
    job = client.post(post, json=body)
    assert job.status_code == 201, job.text
    finished = wait_for(client, f"/api/jobs/{job.json()['id']}", ENDED, seconds=WAIT_S)
    assert finished["state"] == "done", finished
    model = next(m for m in client.get("/api/models").json() if m["job_id"] == finished["id"])
    return finished, model, time.perf_counter() - started


def _round(client: httpx.Client, dataset: int, model: dict, batch: dict[int, ImageRecord], threshold: float) -> dict:
    """Auto-label the data set's unlabelled images (the batch), then review every one: accept or correct."""
    started = time.perf_counter()
    run = client.post(f"/api/datasets/{dataset}/autolabel", json={"model_id": model["id"], "threshold": threshold})
    assert run.status_code == 201, run.text
    finished = wait_for(client, f"/api/autolabel/{run.json()['id']}", ENDED, seconds=WAIT_S)
    assert finished["state"] == "done" and finished["done"] == len(batch), finished
    labelling = time.perf_counter() - started

    started = time.perf_counter()
    hits = found = true = clean = 0
    queue = []
    while page := client.get(f"/api/datasets/{dataset}/review?offset={len(queue)}&limit=500").json()["items"]:
        queue += page
    assert len(queue) == len(batch), len(queue)
    for item in queue:
        image = item["image"]["id"]
        doc = client.get(f"/api/images/{image}/annotations").json()
        h, f, t = _matches(doc["shapes"], batch[image])
        hits, found, true = hits + h, found + f, true + t
        if h == f == t:
            clean += 1
            answer = client.post(f"/api/images/{image}/review", json={"action": "accept", "version": doc["version"]})
        else:
            answer = client.put(f"/api/images/{image}/annotations",
                                json={"version": doc["version"], "shapes": _shapes(batch[image])})  # fmt: skip
        assert answer.status_code == 200 and answer.json()["status"] == "reviewed", answer.text
    return {
        "images": len(batch),
        "auto_labels": found,
        "precision": hits / found if found else 0.0,
        "recall": hits / true if true else 0.0,
        "no_correction_share": clean / len(batch),
        "autolabel_s": labelling,
        "review_s": time.perf_counter() - started,
    }


def _held_out_map50(model_dir: Path, test: Dataset) -> float:
    metrics = measure(open_model_dir(model_dir), test, test.images)
    return float(getattr(metrics, "map50", None) or 0.0)


def _cli_seconds(job_dir: Path, settings: dict, work: Path) -> float:
    """The job's own training command from the command line: its snapshot of the data set, its cfg."""
    command = [sys.executable, "-m", "forklift.cli", "train", "--data", str(job_dir / "data"),
               "--cfg", str(job_dir / "yolov3-tiny-slim.cfg"),
               *[part for key in ("epochs", "batch", "img", "lr", "val_every")
                 for part in (f"--{key.replace('_', '-')}", str(settings[key]))],
               str(work / "cli-model")]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hand", type=int, default=30)
    parser.add_argument("--batch", type=int, default=100, help="images per auto-label round")
    parser.add_argument("--test", type=int, default=100, help="held-out images")
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--objects", default="1:3")
    parser.add_argument("--epochs1", type=int, default=500)
    parser.add_argument("--epochs2", type=int, default=120)
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--lr", type=float, default=0.004)
    parser.add_argument("--train-batch", type=int, default=8)
    parser.add_argument("--val-every", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-cli", action="store_true", help="skip the command-line comparison")
    parser.add_argument("--keep", type=Path, help="keep the app's data directory here (to open it with forklift app)")
    args = parser.parse_args()
    low, high = (int(v) for v in args.objects.split(":"))
    work = Path(tempfile.mkdtemp(prefix="forklift-loop-"))
    data = synth_shapes(work / "shapes", args.hand + 2 * args.batch, args.size, seed=args.seed, objects=(low, high))
    test = synth_shapes(work / "test", args.test, args.size, seed=args.seed + 1000, objects=(low, high))
    hand, first, second = (data.images[: args.hand], data.images[args.hand : args.hand + args.batch],
                           data.images[args.hand + args.batch :])  # fmt: skip
    port = free_port()
    server = start_app(work / "app", port)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600)
    result: dict = {"machine": platform.node(), "settings": vars(args), "rounds": []}
    try:
        dataset = client.post("/api/datasets", json={"name": "shapes loop"}).json()["id"]
        started = time.perf_counter()
        for image, record in _upload(client, dataset, data, hand).items():
            client.put(f"/api/images/{image}/annotations", json={"version": 1, "shapes": _shapes(record)})
        result["hand_labelling_s"] = time.perf_counter() - started
        settings = {
            "model": "yolov3-tiny-slim",
            "epochs": args.epochs1,
            "batch": args.train_batch,
            "img": args.size,
            "lr": args.lr,
            "val_every": args.val_every,
        }
        job, model, train_s = _train(client, f"/api/datasets/{dataset}/jobs", settings)
        for number, batch_records in ((1, first), (2, second)):
            batch = _upload(client, dataset, data, batch_records)
            measured = _round(client, dataset, model, batch, args.threshold)
            map50 = _held_out_map50(work / "app" / "jobs" / str(job["id"]) / "model", test)
            measured.update(round=number, model_id=model["id"], train_s=train_s, held_out_map50=map50)
            result["rounds"].append(measured)
            print(json.dumps(measured), flush=True)
            if number == 1:
                first_job = job
                job, model, train_s = _train(client, f"/api/models/{model['id']}/retrain", {"epochs": args.epochs2})
        if not args.no_cli:
            job_s = result["rounds"][0]["train_s"]
            cli_s = _cli_seconds(work / "app" / "jobs" / str(first_job["id"]), settings, work)
            result["job_system"] = {"job_s": job_s, "cli_s": cli_s, "overhead": job_s / cli_s - 1}
            print(json.dumps(result["job_system"]), flush=True)
    finally:
        server.terminate()
        server.wait(30)
        client.close()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "loop.json").write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    if args.keep is not None:
        shutil.move(work / "app", args.keep)
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {RESULTS / 'loop.json'}")


if __name__ == "__main__":
    main()
