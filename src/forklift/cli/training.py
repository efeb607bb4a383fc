"""Verbs that make and measure models: `train`, `eval`, and `demo`, the main job end to end."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from forklift.cli.common import (
    add_data,
    add_json,
    add_runtime,
    check_folder_to_write,
    non_negative_number,
    optional,
    positive,
    positive_list,
    positive_number,
    threshold,
    verb_parser,
)
from forklift.errors import ForkliftError
from forklift.extras import Extra, require
from forklift.vocabulary import LrScaling, ModelFormat, Optimizer, Precision, Runtime, Split, words


def _check_report_folder(out: Path, model_dir: Path) -> None:
    """An evaluation's report goes beside the model, not over it: the model directory's own files, and its eval/
    (the training's measure, whose epoch says which weights it holds), were overwritten unsaid."""
    check_folder_to_write(out, what="--out")
    if out.resolve() == model_dir.resolve():
        raise ForkliftError(f"--out {out}: the model directory itself; give a folder for the report")
    if out.resolve() == (model_dir / "eval").resolve():
        raise ForkliftError(f"--out {out}: the training's own measure of the model; give another folder")


def register(verbs: Any) -> None:
    add_eval(verbs)
    add_train(verbs)
    add_demo(verbs)


def add_eval(verbs: Any) -> None:
    evaluation = verb_parser(
        verbs,
        "eval",
        "Measure a model on a data set's split: COCO mAP, per-class AP, precision/recall at a threshold, "
        "confusion matrix and PR curves (top-1/top-5 for classifiers; mIoU, per-class IoU and pixel accuracy "
        "for segmentation); writes eval.json and PNGs. A tabular model ('forklift ml fit') on a table: accuracy, "
        "log-loss, AUC, confusion matrix, ROC and PR curves, or RMSE, MAE, R² and predicted against true values.",
        "forklift eval models/shapes --data data/shapes --split val --out out/eval/shapes\n"
        "  forklift eval out/income-forest --data test.csv --out out/eval/income",
    )
    evaluation.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    add_data(
        evaluation,
        flag=True,
        help="a forklift data set folder, or a table (.csv, .tsv, .parquet, .svm) for a tabular model",
    )
    evaluation.add_argument(
        "--target", metavar="COLUMN", help="a table's column to measure against (default: the model's target)"
    )
    evaluation.add_argument(
        "--split", choices=words(Split), help="the data set's split to measure on (default val; a table is all rows)"
    )
    # None where not given: a table's evaluation refuses them rather than ignore them
    evaluation.add_argument("--conf", type=threshold, help="score threshold of detections for mAP (default 0.001)")
    evaluation.add_argument("--iou", type=threshold, help="NMS overlap threshold (default 0.6)")
    evaluation.add_argument(
        "--threshold", type=threshold, help="score of the operating point for precision/recall (default 0.25)"
    )
    add_runtime(evaluation)
    evaluation.add_argument(
        "--out", type=Path, help="folder for eval.json and the PNGs (default: MODEL_DIR/eval-DATA-SPLIT, or eval-TABLE)"
    )
    add_json(evaluation, "print eval.json instead of a summary")
    evaluation.set_defaults(handler=run_eval)


def run_eval(args: argparse.Namespace) -> int:
    """A table, or a tabular model, goes to the tables' evaluation (which refuses the other of the pair)."""
    from forklift.evaluation.detection import DetectionMetrics
    from forklift.evaluation.evaluate import evaluate
    from forklift.evaluation.segmentation import SegmentationMetrics
    from forklift.model_files.model_dir import open_model_dir

    if args.data.is_file() or open_model_dir(args.model_dir).format == ModelFormat.TABULAR:
        return run_table_eval(args)
    if args.target is not None:
        raise ForkliftError(f"--target {args.target}: names a table's column; {args.data} is a data set folder")
    split = args.split or Split.VAL.value
    out = args.out or args.model_dir / f"eval-{args.data.resolve().name}-{split}"  # beside the model
    _check_report_folder(out, args.model_dir)
    given = {name: getattr(args, name) for name in ("conf", "iou", "threshold") if getattr(args, name) is not None}
    result = evaluate(
        args.model_dir,
        args.data,
        split=split,
        runtime=optional(Runtime, args.runtime),
        precision=optional(Precision, args.precision),
        out=out,
        **given,
    )
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return 0
    print(f"{result.model} on {result.data} ({result.split}): {result.images} images, {result.skipped} skipped")
    for note in result.notes:
        print(f"note: {note}")
    metrics = result.metrics

    def number(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.4f}"

    if isinstance(metrics, DetectionMetrics):
        print(
            f"mAP@[.5:.95] {number(metrics.map)}  mAP@.5 {number(metrics.map50)}  "
            f"mAP@.5 on objects under 32x32 px {number(metrics.map50_small)}"
        )
        precision = "n/a (nothing scored that much)" if metrics.precision is None else f"{metrics.precision:.4f}"
        recall = "n/a (no boxes)" if metrics.recall is None else f"{metrics.recall:.4f}"
        print(f"at score {metrics.threshold}: precision {precision}  recall {recall}")
        for name, ap in metrics.ap50.items():
            print(f"  AP@.5 {name:<20} {number(ap)}")
    elif isinstance(metrics, SegmentationMetrics):
        print(f"mIoU {number(metrics.miou)}  pixel accuracy {number(metrics.pixel_accuracy)}")
        for name, iou in metrics.iou.items():
            print(f"  IoU {name:<22} {number(iou)}")
    else:
        print(f"top-1 {metrics.top1:.4f}  top-5 {metrics.top5:.4f}")
    print("wrote " + ", ".join(str(path) for path in result.files))
    return 0


def run_table_eval(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from forklift.evaluation.tabular import evaluate_table
    from forklift.evaluation.tabular_metrics import TableClassifierMetrics

    if args.split is not None:
        raise ForkliftError(f"--split {args.split}: a data set folder's split; a table is measured on all its rows")
    for name in ("conf", "iou", "threshold", "runtime", "precision"):
        if getattr(args, name) is not None:  # an image model's option: said, not silently ignored
            raise ForkliftError(
                f"--{name} {getattr(args, name)}: an option of an image model's evaluation; a tabular model's "
                "graph runs on ONNX Runtime in f32 and is measured at its highest score"
            )
    out = args.out or args.model_dir / f"eval-{args.data.name}"  # beside the model; test.csv and test.parquet apart
    _check_report_folder(out, args.model_dir)
    result = evaluate_table(args.model_dir, args.data, target=args.target, out=out)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return 0
    metrics = result.metrics
    kind = f"{len(result.classes)} classes" if result.classes else "regression"
    print(f"{result.model} ({result.estimator}, {kind}) on {result.data}: {result.rows} rows, target {result.target!r}")
    for note in result.notes:
        print(f"note: {note}")
    print(f"{'metric':<10} {'value':>10}")
    for name, value in asdict(metrics).items():
        if value is None or isinstance(value, float):  # the one-number metrics
            print(f"{name:<10} {'n/a' if value is None else f'{value:.4f}':>10}")
    if isinstance(metrics, TableClassifierMetrics):
        width = max(8, *(len(name) + 2 for name in result.classes))
        print("confusion (rows: true, columns: predicted)")
        print(" " * width + "".join(f"{name:>{width}}" for name in result.classes))
        for name, row in zip(result.classes, metrics.confusion, strict=True):
            print(f"{name:<{width}}" + "".join(f"{count:>{width}}" for count in row))
    print("wrote " + ", ".join(str(path) for path in result.files))
    return 0


def add_train(verbs: Any) -> None:
    """Options that shape the model default to None here: the trainer fills them in from its defaults, or on
    --resume from the checkpoint, and refuses one given that contradicts the checkpoint."""
    train = verb_parser(
        verbs,
        "train",
        "Train a model on a data set: a Darknet YOLO detector (detect sets) or a Darknet classifier (classify "
        "sets), from a cfg (fresh weights) or a model directory (fine-tuning, e.g. one `forklift models pull` "
        "wrote); a torchvision segmentation architecture (segment sets, --arch, fresh or --weights coco|imagenet); a "
        "torchvision two-stage detector (detect sets, --arch fasterrcnn_..., fresh or --weights); a style network "
        "(--task style: a folder of images, --style-image, --loss-net-weights). Each epoch ends with a checkpoint, "
        "a row of "
        "metrics.csv (and TensorBoard) and, every --val-every epochs, a measure on val; OUT becomes a model "
        "directory with the best measured epoch's weights, its ONNX export and (with a val split) eval/. --resume "
        "continues with the settings saved in the checkpoint.",
        "forklift data synth shapes --n 300 --size 320 data/shapes   # a data set to train on\n"
        "  forklift train --data data/shapes --cfg ../shared/data/darknet/yolov3-tiny.cfg --epochs 30 --img 320 \\\n"
        "      out/shapes-tiny\n"
        "  forklift train --data data/shapes-seg --arch deeplabv3_mobilenet_v3_large --img 256 out/seg\n"
        "  forklift train --data data/shapes --arch fasterrcnn_mobilenet_v3_large_320_fpn --weights coco out/frcnn\n"
        "  forklift train --task style --data photos/ --style-image candy.jpg --loss-net-weights vgg16.pth out/candy\n"
        "  forklift train --resume out/shapes-tiny\n"
        "  forklift train --nproc 2 --data data/shapes --cfg ../shared/data/darknet/yolov3-tiny.cfg --batch 8 \\\n"
        "      out/shapes-ddp",
        extra=Extra.TRAIN,
    )
    train.add_argument(
        "--data", type=Path, metavar="DATA", help="a forklift data set folder (with --resume: the checkpoint's)"
    )
    add_network_source(train)
    train.add_argument(
        "--weights",
        metavar="FILE|NAME",
        help="--arch (two-stage detectors, segmenters): start from a weights file, what fits by name and shape: "
        "coco (the architecture's COCO weights), imagenet (its backbone's), a weights name of `forklift models pull "
        "--list`, or a file; a name is pulled into the cache when missing",
    )
    train.add_argument(
        "--anchor-sizes",
        type=positive_list,
        metavar="S1,S2,...",
        help="two-stage --arch: one anchor size per FPN level in input pixels, e.g. 16,32,64 for small objects",
    )
    train.add_argument(
        "--proposals", type=positive, metavar="N", help="two-stage --arch: proposals kept per image at test time"
    )
    train.add_argument(
        "--roi-samples",
        type=positive,
        metavar="N",
        help="Faster R-CNN: proposals per image its box head learns from (default 512; 64-128 train several times "
        "faster on images with a few objects)",
    )
    train.add_argument("--task", choices=("style",), help="style: train a style network on a folder of images")
    train.add_argument("--style-image", type=Path, metavar="IMAGE", help="--task style: the style to learn")
    train.add_argument(
        "--loss-net-weights",
        metavar="FILE|vgg16",
        help="--task style: VGG16's ImageNet weights (torchvision's vgg16-397923af.pth, or vgg16: pulled) for the "
        "perceptual loss",
    )
    train.add_argument("--content-weight", type=float, help="--task style: content loss weight (default 1e5)")
    train.add_argument("--style-weight", type=float, help="--task style: style loss weight (default 1e10)")
    train.add_argument("--epochs", type=positive, help="(default 30)")
    train.add_argument("--batch", type=positive, help="(default 16)")
    train.add_argument("--img", type=positive, help="input width and height (default: the cfg's; 256 for --arch)")
    train.add_argument("--lr", type=float, help="peak learning rate of the optimiser (default 0.001)")
    train.add_argument("--optimizer", choices=words(Optimizer), help="(default adamw)")
    train.add_argument(
        "--momentum", type=float, help="of --optimizer momentum or rmsprop, from 0 up to 1 (default 0.9)"
    )
    train.add_argument("--weight-decay", type=float, help="on conv and linear weights (default 0.0005)")
    train.add_argument("--aug-scale", type=float, metavar="S", help="augmentation: zoom in 1 +- S (default 0.25)")
    train.add_argument(
        "--aug-shift", type=float, metavar="S", help="augmentation: shift up to S of the input each way (default 0.1)"
    )
    train.add_argument(
        "--aug-hsv", type=float, metavar="K", help="augmentation: hue/saturation/value gains times K, 0 off (default 1)"
    )
    train.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    train.add_argument(
        "--nproc",
        type=positive,
        default=1,
        metavar="N",
        help="data-parallel: N ranks on this host (torchrun), each with its own CPU set (and GPU); --batch is per rank",
    )
    train.add_argument(
        "--sync-bn",
        action="store_true",
        default=None,
        help="data-parallel: batch norm statistics over all ranks' batches (for small per-rank batches)",
    )
    train.add_argument(
        "--lr-scaling",
        choices=words(LrScaling),
        help="data-parallel: how --lr follows the global batch: linear, sqrt, none, or auto (linear for sgd and "
        "momentum, sqrt for the others; the default); printed at the start",
    )
    train.add_argument(
        "--amp",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="mixed precision: float16 on CUDA, bfloat16 on the CPU (default: on for CUDA only)",
    )
    train.add_argument(
        "--lms",
        action="store_true",
        help="large model support: tensors saved for backward leave the GPU (pinned host memory) or, on the CPU, "
        "RAM (spill files), so bigger batches and images fit",
    )
    train.add_argument(
        "--lms-min-mib",
        type=non_negative_number,
        default=1.0,
        metavar="MIB",
        help="with --lms: tensors under this stay in place",
    )
    train.add_argument("--lms-spill-dir", type=Path, metavar="DIR", help="with --lms on the CPU: where spill files go")
    train.add_argument(
        "--mosaic", action="store_true", default=None, help="detection: tile four images into half the samples"
    )
    train.add_argument("--val-every", type=positive, metavar="N", help="measure on val every N epochs (default 1)")
    train.add_argument(
        "--minutes",
        type=positive_number,
        default=None,
        help="stop before an epoch that would end past this (judged by the last epoch's time: a start runs one)",
    )
    train.add_argument("--workers", type=int, default=0, help="data-loading processes (default 0: in the loop)")
    train.add_argument("--resume", action="store_true", help="continue OUT's run from its last checkpoint")
    train.add_argument("--seed", type=int, help="(default 0)")
    train.add_argument("out", type=Path, metavar="OUT_DIR", help="a new or empty folder (or the run to resume)")
    train.set_defaults(handler=run_train)


def add_network_source(parser: argparse.ArgumentParser) -> None:
    """`--cfg`, `--model` or `--arch`: what a run trains (which one a data set needs: its task says)."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--cfg", type=Path, metavar="CFG", help="Darknet cfg; classes (and filters) are rewritten")
    source.add_argument(
        "--model",
        type=Path,
        metavar="MODEL_DIR",
        help="model directory to fine-tune, or a pretrained one by name (yolov3-tiny, fasterrcnn_resnet50_fpn, ...: "
        "pulled into the cache; `forklift models pull --list`)",
    )
    source.add_argument(
        "--arch",
        metavar="NAME",
        help="segment sets: torchvision architecture (default lraspp_mobilenet_v3_large); detect sets: a "
        "torchvision two-stage detector such as fasterrcnn_mobilenet_v3_large_fpn (optimized for accuracy)",
    )


def run_train(args: argparse.Namespace) -> int:
    from forklift.distributed.ranks import from_environment
    from forklift.pretrained.resolve import model_directory, weights_file

    require(Extra.TRAIN)
    ranks = from_environment()
    if not ranks.distributed:  # (a rank would race its leader, which may have started writing OUT)
        _check_paths(args)
    if args.model is not None:
        args.model = model_directory(args.model)
    if args.weights is not None:  # resolved before any rank starts: a pull happens once, the ranks find it cached
        args.weights = weights_file(args.weights, arch=args.arch)
    if args.loss_net_weights is not None:
        args.loss_net_weights = weights_file(args.loss_net_weights, arch=None, option="--loss-net-weights")

    if args.nproc > 1 and not ranks.distributed:
        from forklift.launcher.local import launch_local

        return launch_local(args.argv, args.nproc)
    from forklift.train.settings import RunOptions, TrainSettings
    from forklift.train.trainer import train

    settings = TrainSettings.of(**{name: getattr(args, name) for name in TrainSettings.option_names()})
    run = RunOptions(
        device=args.device,
        resume=args.resume,
        workers=args.workers,
        time_budget_s=None if args.minutes is None else args.minutes * 60,
        lms={"min_bytes": round(args.lms_min_mib * 2**20), "spill_dir": args.lms_spill_dir} if args.lms else None,
    )
    try:
        out = train(settings, args.out, run)
    except KeyboardInterrupt:
        if ranks.leader:
            _say_stopped(args.out)
        raise
    if not ranks.leader:
        return 0
    print(f"wrote {out}: a model directory (forklift predict {out} IMAGE); per-epoch figures in {out / 'metrics.csv'}")
    return 0


def _say_stopped(out: Path) -> None:
    """Where Ctrl-C left the run, and the command that goes on from there."""
    import torch

    from forklift.train.run_dir import last_checkpoint

    checkpoint = last_checkpoint(out)
    if checkpoint.is_file():
        epoch = torch.load(checkpoint, map_location="cpu", weights_only=False)["epoch"]
        print(f"stopped after epoch {epoch}; 'forklift train --resume {out}' goes on from there", file=sys.stderr)
    else:
        print(f"stopped before the first epoch ended: nothing to resume; remove {out} to start again", file=sys.stderr)


def _check_paths(args: argparse.Namespace) -> None:
    """OUT and --data, checked before a pretrained model or weights file is pulled and before `--nproc` ranks
    start: a typo is one line at once, not a download first or the same line from N ranks."""
    from forklift.data.dataset import refuse_other_layouts
    from forklift.train.run_dir import check_out

    check_folder_to_write(args.out, what="OUT_DIR")  # a file by that name: one line, not a traceback from mkdir
    check_out(args.out, args.resume)
    if args.data is not None:
        if not args.data.exists():
            raise ForkliftError(f"--data {args.data}: no such folder")
        refuse_other_layouts(args.data)  # before the training stack is imported (seconds)


def add_demo(verbs: Any) -> None:
    demo = verb_parser(
        verbs,
        "demo",
        "The main job end to end: generate shapes, train a small YOLO for a few minutes, evaluate, serve, post.",
        "forklift demo --out out/demo",
        extra=Extra.TRAIN,
    )
    demo.add_argument("--out", type=Path, default=Path("out/demo"))
    demo.set_defaults(handler=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from forklift.demo import run_demo

    check_folder_to_write(args.out, what="--out")
    return run_demo(args.out)
