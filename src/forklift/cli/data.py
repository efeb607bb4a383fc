"""`forklift data`: make data sets in forklift's own folder format (DATA/dataset.json + DATA/images/): generate,
check, count, split, and import from or export to other tools' formats."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from forklift.cli.common import add_data, add_json, add_seed, positive, threshold, verb_parser
from forklift.vocabulary import DataFormat, Task, words


def register(verbs: Any) -> None:
    data = verb_parser(
        verbs,
        "data",
        "Make data sets in forklift's layout (DATA/dataset.json + DATA/images/).",
        "forklift data synth shapes --n 200 --size 320 data/shapes",
    )
    actions = data.add_subparsers(dest="data_verb", metavar="ACTION", required=True)
    add_synth(actions)
    add_check(actions)
    add_stats(actions)
    add_split(actions)
    add_import(actions)
    add_export(actions)


def add_synth(actions: Any) -> None:
    synth = verb_parser(
        actions,
        "synth",
        "Generate a synthetic data set: shapes on textured backgrounds, the same files for the same seed.",
        "forklift data synth shapes --n 200 --size 320 --seed 1 --task detect data/shapes",
    )
    synth.add_argument("kind", choices=("shapes",), help="what to draw")
    synth.add_argument("--n", type=positive, required=True, help="how many images")
    synth.add_argument(
        "--size", type=positive, required=True, help="width and height of each image, pixels (64 to 8192)"
    )
    add_seed(synth)
    synth.add_argument(
        "--task",
        choices=[task for task in words(Task) if task in (Task.DETECT, Task.CLASSIFY, Task.SEGMENT)],
        default=Task.DETECT.value,  # a style network trains on any folder of images: none to make
        help="detect: boxes of 1-4 shapes; classify: one shape's label; segment: PNG masks of 1-4 shapes (DATA/masks/)",
    )
    synth.add_argument(
        "--object-size",
        type=span,
        metavar="MIN:MAX",
        help="detect, segment: longer side of each shape's box in pixels (default: radius 6-20%% of SIZE)",
    )
    synth.add_argument(
        "--objects",
        type=span,
        metavar="MIN:MAX",
        help="detect, segment: shapes per image (default 1:4); many small ones make a small-object set",
    )
    synth.add_argument("out", type=Path, metavar="OUT", help="a new or empty folder")
    synth.set_defaults(handler=run_synth)


def span(text: str) -> tuple[int, int]:
    """`MIN:MAX` (or one number N for N:N) of whole numbers; whether the range can be drawn is synth's to say."""
    low, _, high = text.partition(":")
    try:
        return int(low), int(high or low)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not MIN:MAX in whole numbers") from exc


def run_synth(args: argparse.Namespace) -> int:
    from forklift.data.dataset import describe
    from forklift.data.synth import synth_shapes

    ranges = {"object_size": args.object_size} | ({"objects": args.objects} if args.objects else {})
    dataset = synth_shapes(args.out, args.n, args.size, seed=args.seed, task=Task(args.task), **ranges)
    print(f"wrote {args.out}: {describe(dataset)}")
    return 0


def add_check(actions: Any) -> None:
    check = verb_parser(
        actions,
        "check",
        "Report every problem of a data set: unreadable, missing or duplicate images, wrong sizes, bad boxes and "
        "labels. Exit 0 when clean, 1 when problems were found (training skips those images), 2 for bad input.",
        "forklift data check data/shapes --json",
    )
    add_data(check)
    add_json(check)
    check.set_defaults(handler=run_check)


def run_check(args: argparse.Namespace) -> int:
    from forklift.data.check import check_dataset, print_report

    report = check_dataset(args.data)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print_report(report)
    return 1 if report.findings else 0


def add_stats(actions: Any) -> None:
    stats = verb_parser(
        actions,
        "stats",
        "Show images per split, objects per class and split, boxes per image, relative box sizes and image sizes.",
        "forklift data stats data/shapes --json",
    )
    add_data(stats)
    add_json(stats)
    stats.set_defaults(handler=run_stats)


def run_stats(args: argparse.Namespace) -> int:
    from forklift.data.dataset import load_dataset
    from forklift.data.stats import dataset_stats, print_stats

    stats = dataset_stats(load_dataset(args.data))
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        print_stats(stats)
    return 0


def add_split(actions: Any) -> None:
    split = verb_parser(
        actions,
        "split",
        "Reassign train/val/test at random by seed, optionally by each image's dominant class; rewrite dataset.json.",
        "forklift data split data/shapes --val 0.1 --test 0.1 --seed 0 --stratify",
    )
    add_data(split)
    split.add_argument("--val", type=threshold, required=True, help="fraction of the images for val")
    split.add_argument("--test", type=threshold, default=0.0, help="fraction of the images for test (default 0)")
    add_seed(split)
    split.add_argument("--stratify", action="store_true", help="keep each dominant class's share in every split")
    split.set_defaults(handler=run_split)


def run_split(args: argparse.Namespace) -> int:
    from forklift.data.dataset import describe
    from forklift.data.split import split_dataset

    dataset = split_dataset(args.data, val=args.val, test=args.test, seed=args.seed, stratify=args.stratify)
    print(f"wrote {dataset.root}: {describe(dataset)}")
    return 0


def add_import(actions: Any) -> None:
    data_import = verb_parser(
        actions,
        "import",
        "Make a forklift data set from COCO JSON, a Pascal VOC folder, a YOLO data.yaml, a PowerAI Vision zip or a "
        "folder of PNG masks (images/, masks/, classes.txt); boxes outside their image are clipped, empty ones "
        "dropped, and both counted. COCO segmentations (polygons, RLE) become masks with --task segment.",
        "forklift data import --from coco instances_val2017.json --images val2017 --task segment data/coco-val",
    )
    data_import.add_argument("--from", dest="source_format", choices=words(DataFormat), required=True)
    data_import.add_argument(
        "source",
        type=Path,
        metavar="SOURCE",
        help="COCO .json, VOC folder, YOLO data.yaml, PowerAI .zip or masks folder",
    )
    data_import.add_argument(
        "--task",
        choices=(Task.DETECT.value, Task.SEGMENT.value),
        help="coco: boxes (detect, default) or segmentations as masks",
    )
    data_import.add_argument(
        "--images",
        type=Path,
        metavar="DIR",
        help="coco: folder of the file names (default: the JSON's folder); "
        "voc: the images (default: SOURCE/JPEGImages)",
    )
    data_import.add_argument("out", type=Path, metavar="OUT", help="a new or empty folder")
    data_import.set_defaults(handler=run_import)


def run_import(args: argparse.Namespace) -> int:
    from forklift.data.interchange import import_dataset

    summary = import_dataset(args.source_format, args.source, args.out, images=args.images, task=args.task)
    print("\n".join(summary.lines()))
    return 1 if summary.skipped else 0  # as `data check`: 1 says some of the input was left out


def add_export(actions: Any) -> None:
    data_export = verb_parser(
        actions,
        "export",
        "Write a forklift data set as COCO JSON (segment: RLE masks), a Pascal VOC folder, a YOLO data.yaml + "
        "labels, a PowerAI zip or a folder of PNG masks (segment).",
        "forklift data export --to yolo data/shapes out/shapes-yolo",
    )
    data_export.add_argument("--to", dest="target_format", choices=words(DataFormat), required=True)
    add_data(data_export)
    data_export.add_argument("out", type=Path, metavar="OUT", help="a new or empty folder (powerai: a new .zip)")
    data_export.set_defaults(handler=run_export)


def run_export(args: argparse.Namespace) -> int:
    from forklift.data.interchange import export_dataset

    print(export_dataset(args.target_format, args.data, args.out).line())
    return 0
