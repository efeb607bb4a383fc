"""Fine-tuning from a pretrained model against training from fresh weights, in equal time on a small data set.

Real COCO weights cannot be fetched here, so the pretrained model is made here: each detector is first trained on
a large generated "source" set (its own shapes, seed 1), then a small "target" set (other images, seed 2, objects
of other sizes, two of its five classes renamed so that their head weights start fresh, as a user's new classes
do) is trained for the same wall-clock budget twice: from the pretrained model directory (`--model DIR`, what
`--model NAME` resolves a pulled model to: the same code path, classes matched by name) and from fresh weights.
Both are measured on the target's val split. Writes bench/results/train/pretrained.json and prints a table.

    .venv/bin/python bench/train/pretrained.py [--pretrain-minutes 6] [--minutes 2] [--models yolo,frcnn]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from two_stage import train_within, write_results

from forklift.data.synth import CLASSES, synth_shapes
from forklift.shared_data import shared_data_path
from forklift.train.small_cfg import slim_cfg

SIZE = 128
SOURCE, TARGET = 480, 120  # images generated (80 % train, 10 % val, 10 % test)
RENAMED = {"star": "sprocket", "cross": "plus"}  # target classes the pretrained model does not know by name
FRCNN = "fasterrcnn_mobilenet_v3_large_320_fpn"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrain-minutes", type=float, default=6.0, help="training budget on the source set")
    parser.add_argument("--minutes", type=float, default=2.0, help="budget of each run on the target set")
    parser.add_argument("--models", default="yolo", help="comma-separated: yolo (slim yolov3-tiny), frcnn")
    parser.add_argument("--work", type=Path, default=None, help="folder for the data and the runs (default: temp)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="forklift-pretrained-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    source, target = work / "source", work / "target"
    if not (source / "dataset.json").is_file():
        synth_shapes(source, SOURCE, SIZE, seed=1)
    if not (target / "dataset.json").is_file():
        synth_shapes(target, TARGET, SIZE, seed=2, object_size=(12, 40))
        _rename_classes(target, RENAMED)
    cfg = work / "yolov3-tiny-slim.cfg"
    cfg.write_text(slim_cfg(shared_data_path("darknet/yolov3-tiny.cfg"), len(CLASSES), SIZE)[0], encoding="utf-8")
    fresh: dict[str, dict[str, Any]] = {
        "yolo": {"cfg": cfg, "batch": 8, "lr": 0.004, "img": SIZE},
        "frcnn": {"arch": FRCNN, "batch": 4, "lr": 0.002, "img": SIZE},
    }
    rows: dict[str, dict[str, Any]] = {}
    for model in args.models.split(","):
        options = fresh[model]
        budget = args.minutes * 60
        pretrained = work / f"{model}-source"
        rows[f"{model}: pretraining on the source set"] = train_within(
            f"{model} source", options, data=source, folder=pretrained, budget=args.pretrain_minutes * 60
        )
        tuned = {k: v for k, v in options.items() if k not in ("cfg", "arch")} | {"model": pretrained}
        rows[f"{model}: fine-tuned from it"] = train_within(
            f"{model} fine-tuned", tuned, data=target, folder=work / f"{model}-tuned", budget=budget
        )
        rows[f"{model}: from fresh weights"] = train_within(
            f"{model} fresh", options, data=target, folder=work / f"{model}-fresh", budget=budget
        )
    summary = {
        "data": {"size": SIZE, "source": SOURCE, "target": TARGET, "renamed": RENAMED},
        "pretrain_minutes": args.pretrain_minutes,
        "budget_minutes": args.minutes,
        "runs": rows,
        "work": str(work),
    }
    write_results("pretrained.json", summary)
    print(f"\ntarget: {TARGET} images of {SIZE} px, {args.minutes:g} min each; source: {SOURCE} images")
    print(f"{'run':<40} {'epochs':>6} {'mAP@.5':>7} {'mAP':>7} {'recall':>7}")
    for name, r in rows.items():
        print(f"{name:<40} {r['epochs']:>6} {r['map50']:>7.3f} {r['map']:>7.3f} {r['recall']:>7.3f}")


def _rename_classes(folder: Path, renamed: dict[str, str]) -> None:
    """The data set's classes and boxes renamed in its dataset.json."""
    path = folder / "dataset.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["classes"] = [renamed.get(name, name) for name in data["classes"]]
    for image in data["images"]:
        for box in image.get("boxes", []):
            box["label"] = renamed.get(box["label"], box["label"])
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
