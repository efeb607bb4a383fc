"""Verbs on model directories: `predict` runs one on images; `models inspect`, `models new-darknet`,
`models export` and `models quantize` look inside, make, convert and quantise them."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forklift.cli.common import (
    EXIT_BAD_INPUT,
    add_data,
    add_json,
    add_runtime,
    add_seed,
    check_folder_to_write,
    optional,
    positive,
    threshold,
    verb_parser,
)
from forklift.cli.pretrained import add_mirror, add_pull
from forklift.errors import ForkliftError
from forklift.extras import Extra
from forklift.vocabulary import Precision, ResizeMode, Runtime, Task, words

if TYPE_CHECKING:
    from forklift.model_files.precision import PrecisionCheck


def register(verbs: Any) -> None:
    add_predict(verbs)
    models = verb_parser(
        verbs, "models", "Inspect, create, export and pull model directories.", "forklift models inspect models/yolov3"
    )
    actions = models.add_subparsers(dest="models_verb", metavar="ACTION", required=True)
    add_inspect(actions)
    add_new_darknet(actions)
    add_new_style(actions)
    add_export(actions)
    add_quantize(actions)
    add_pull(actions)
    add_mirror(actions)


def add_predict(verbs: Any) -> None:
    predict = verb_parser(
        verbs,
        "predict",
        "Run a model directory on images and print the detections (pixel boxes on the original image).",
        "forklift predict models/yolov3-tiny dog.jpg horses.jpg --json",
    )
    predict.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    predict.add_argument("images", type=Path, nargs="+", metavar="IMAGE")
    add_runtime(predict, "engine (default: openvino for Darknet, onnx for ONNX, opencv for Caffe)")
    predict.add_argument("--threads", type=positive, help="CPU threads of the engine (default: all available)")
    predict.add_argument("--conf", type=threshold, help="score threshold (default: the model's, else 0.25)")
    predict.add_argument("--iou", type=threshold, help="NMS overlap threshold (default: the model's, else 0.45)")
    predict.add_argument("--resize", choices=words(ResizeMode), help="fit to the input (default: the model's)")
    predict.add_argument("--max-pixels", type=positive, default=100_000_000, help="refuse larger images (bombs)")
    predict.add_argument("--out", type=Path, metavar="DIR", help="style models: write the styled images here")
    predict.add_argument("--strength", type=threshold, help="style models: 0 (original) to 1 (default)")
    predict.add_argument("--keep-colour", action="store_true", help="style models: keep the original's colours")
    add_json(predict, "print the result JSON instead of a table")
    predict.set_defaults(handler=run_predict)


def run_predict(args: argparse.Namespace) -> int:
    from forklift.predict import predict_files, print_table, save_images
    from forklift.vision.style_adjust import StyleAdjust

    if args.out is not None:  # before the model runs
        check_folder_to_write(args.out, what="--out")
    prediction = predict_files(
        args.model_dir,
        args.images,
        runtime=optional(Runtime, args.runtime),
        precision=optional(Precision, args.precision),
        threads=args.threads,
        conf=args.conf,
        iou=args.iou,
        resize=optional(ResizeMode, args.resize),
        max_pixels=args.max_pixels,
        style=StyleAdjust(1.0 if args.strength is None else args.strength, args.keep_colour),
    )
    if any(result.image is not None for result in prediction.results):
        if args.out is None:
            raise ForkliftError(f"{args.model_dir}: a style model answers images; say where to write them: --out DIR")
        save_images(prediction, args.out)
    else:  # a style model's options given to one that answers labels: refused, not ignored
        given = [o for o, v in (("--out", args.out), ("--strength", args.strength), ("--keep-colour", args.keep_colour))
                 if v not in (None, False)]  # fmt: skip
        if given:
            raise ForkliftError(f"{given[0]}: {args.model_dir} answers labels, not images (--json writes its answers)")
    if args.json:
        print(json.dumps(prediction.to_json(), indent=2))
    else:
        print_table(prediction)
    failures = [r for r in prediction.results if r.error is not None]
    for failure in failures:
        print(f"forklift: error: {failure.error}", file=sys.stderr)
    return EXIT_BAD_INPUT if failures else 0


def add_inspect(actions: Any) -> None:
    inspect = verb_parser(
        actions,
        "inspect",
        "Show a model's format, task, classes, input size, parameter count and FLOPs.",
        "forklift models inspect models/yolov3-tiny --json",
    )
    inspect.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    add_json(inspect)
    inspect.set_defaults(handler=run_inspect)


def run_inspect(args: argparse.Namespace) -> int:
    from forklift.model_files.model_dir import open_model_dir
    from forklift.model_files.precision import precision_checks
    from forklift.runtime.formats import summarise

    model = open_model_dir(args.model_dir)
    summary, checks = summarise(model), precision_checks(model)
    if args.json:
        print(json.dumps({**summary.to_json(), "precisions": {p: c.to_json() for p, c in checks.items()}}, indent=2))
        return 0
    labels = ", ".join(summary.labels[:8]) + (f", ... ({summary.classes} in all)" if summary.classes > 8 else "")
    size = f"{summary.input_width}x{summary.input_height}" if summary.input_width else "any"
    if summary.task == Task.TABULAR:  # a row of features, not an image
        size = f"{summary.input_width} features"
    rows = [
        ("name", summary.name),
        ("format", summary.format),
        ("task", summary.task),
        ("classes", f"{summary.classes}: {labels}"),
        ("input", size),
        ("parameters", f"{summary.parameters:,}" if summary.parameters is not None else "unknown"),
        ("FLOPs", f"{summary.flops / 1e9:.2f} G" if summary.flops is not None else "unknown"),
        *((f"file ({role})", path) for role, path in summary.files.items()),
        *((f"precision {p}", _checked(c)) for p, c in checks.items()),
    ]
    for key, value in rows:
        print(f"{key:<18} {value}")
    return 0


def _checked(check: PrecisionCheck) -> str:
    verdict = "within" if check.passed else "over"
    return (
        f"{check.metric} {check.value:.4f} against f32 {check.f32:.4f} on {check.images} val images "
        f"(drop {check.drop:.4f}, {verdict} {check.max_drop:g})"
    )


def add_new_darknet(actions: Any) -> None:
    new = verb_parser(
        actions,
        "new-darknet",
        "Make a Darknet model directory with freshly initialised weights, reproducible by seed.",
        "forklift models new-darknet --cfg ../shared/data/darknet/yolov3-tiny.cfg \\\n"
        "      --names ../shared/data/darknet/coco.names --seed 1 models/yolov3-tiny",
    )
    new.add_argument("--cfg", type=Path, required=True)
    new.add_argument("--names", type=Path, required=True)
    add_seed(new)
    new.add_argument("out_dir", type=Path, metavar="OUT_DIR")
    new.set_defaults(handler=run_new_darknet)


def run_new_darknet(args: argparse.Namespace) -> int:
    from forklift.nets.fresh_weights import new_darknet_dir

    check_folder_to_write(args.out_dir, what="OUT_DIR")
    out = new_darknet_dir(args.cfg, args.names, args.out_dir, seed=args.seed)
    print(f"wrote {out} (seed {args.seed})")
    return 0


def add_new_style(actions: Any) -> None:
    new = verb_parser(
        actions,
        "new-style",
        "Make a style model directory (fast neural style, image in, image out) with seeded random weights: for "
        "tests and demos, or to start training from; --width 0.5 or 0.25 makes the narrower networks for CPUs.",
        "forklift models new-style models/style-half --width 0.5 && forklift predict models/style-half photo.jpg "
        "--out styled/",
    )
    new.add_argument("out", type=Path, metavar="OUT", help="the model directory to write")
    new.add_argument("--seed", type=int, default=0)
    new.add_argument("--width", type=float, choices=(1.0, 0.5, 0.25), default=1.0, help="channels, as a share")
    new.set_defaults(handler=run_new_style)


def run_new_style(args: argparse.Namespace) -> int:
    from forklift.runtime.style_export import fresh_style_net, write_style_dir

    check_folder_to_write(args.out, what="OUT")
    if args.out.exists() and any(args.out.iterdir()):
        raise ForkliftError(f"{args.out}: exists and is not empty; choose a new folder")
    out = write_style_dir(fresh_style_net(seed=args.seed, width=args.width), args.out)
    print(f"wrote {out}: style.pth (PyTorch state dict) and style.onnx (any image size)")
    return 0


def add_export(actions: Any) -> None:
    export = verb_parser(
        actions,
        "export",
        "Write the model as one ONNX file: a Darknet model's graph (opset 17, dynamic batch, decode included), a "
        "style network's (any image size), or an ONNX or two-stage model's own graph, copied.",
        "forklift models export models/yolov3-tiny --to onnx",
        extra=Extra.TRAIN,
    )
    export.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    export.add_argument("--to", choices=("onnx",), required=True)
    export.add_argument(
        "out",
        nargs="?",
        metavar="OUT",
        help="file, or folder (one that exists, or a name ending in /); default: in MODEL_DIR, for Darknet and style",
    )
    export.set_defaults(handler=run_export)


def run_export(args: argparse.Namespace) -> int:
    from forklift.model_files.model_dir import open_model_dir
    from forklift.runtime.formats import format_entry

    model = open_model_dir(args.model_dir)
    entry = format_entry(model)
    if entry.export is None:
        raise ForkliftError(f"{args.model_dir}: a {model.format} model has no ONNX export: {entry.no_export}")
    name = f"{model.files[entry.files.sources[0]].stem}.onnx"
    out = Path(args.out) if args.out else model.path / name
    if args.out and args.out.endswith(("/", os.sep)):  # a folder, made if need be (Path drops the slash)
        out.mkdir(parents=True, exist_ok=True)
    if out.is_dir():
        out = out / name
    own = {path.resolve() for path in model.files.values()} - {(model.path / name).resolve()}
    if out.exists() and (out.suffix.lower() != ".onnx" or out.resolve() in own):  # an earlier export: replaced
        what = "one of the model's own files" if out.resolve() in own else "a file that is not an ONNX graph"
        raise ForkliftError(f"{out}: exists and is {what}; give another OUT")
    try:
        entry.export(model, out)
    except OSError as exc:  # a folder in its path is a file, or not writable
        blocker = next((folder for folder in out.parents if folder.exists() and not folder.is_dir()), None)
        why = f"{blocker} is a file, not a folder" if blocker else exc.strerror or str(exc)
        raise ForkliftError(f"{out}: cannot write it there ({why})") from exc
    print(f"wrote {out}")
    return 0


def add_quantize(actions: Any) -> None:
    quantize = verb_parser(
        actions,
        "quantize",
        "Make the model's INT8 graph (NNCF, calibrated on the data set's train images) and keep it only if its "
        "metric on val (mAP@.5, top-1 or mIoU) is within --max-drop of f32's; bf16 is measured alongside. "
        "Then: --precision int8 on predict, eval, serve and sweep.",
        "forklift models quantize out/shapes-detector --data data/shapes --samples 300 --max-drop 0.01",
        extra=Extra.TRAIN,
    )
    quantize.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    add_data(quantize, flag=True)
    quantize.add_argument("--samples", type=positive, default=300, help="train images to calibrate on (default 300)")
    quantize.add_argument(
        "--max-drop", type=threshold, default=0.01, help="largest metric drop from f32 allowed (default 0.01)"
    )
    quantize.add_argument(
        "--runtime",
        choices=(Runtime.OPENVINO, Runtime.ONNX),
        default=Runtime.OPENVINO,
        help="engine that measures (default openvino; onnx measures no bf16)",
    )
    add_seed(quantize)
    add_json(quantize)
    quantize.set_defaults(handler=run_quantize)


def run_quantize(args: argparse.Namespace) -> int:
    from forklift.quantize.check import quantize_model_dir

    result = quantize_model_dir(
        args.model_dir,
        args.data,
        samples=args.samples,
        max_drop=args.max_drop,
        runtime=Runtime(args.runtime),
        seed=args.seed,
    )
    some = next(iter(result.checks.values()))
    if some.f32 == 0:  # nothing found in f32 (random or barely trained weights): nothing to drop from
        print(f"forklift: warning: f32 scores {some.metric} 0 on val, so 'within --max-drop' says nothing of INT8's "
              "accuracy: quantize a trained model to check it", file=sys.stderr)  # fmt: skip
    if args.json:
        print(json.dumps({str(p): c.to_json() for p, c in result.checks.items()}, indent=2))
        return 0
    print(f"{'precision':<10} {some.metric:>8} {'drop':>8}  within --max-drop {some.max_drop:g}")
    print(f"{'f32':<10} {some.f32:>8.4f} {'':>8}")
    for precision, check in result.checks.items():
        print(f"{precision:<10} {check.value:>8.4f} {check.drop:>8.4f}  {'yes' if check.passed else 'no'}")
    kept = " (accuracy control kept some layers in float)" if result.controlled else ""
    print(f"wrote {result.graph}{kept}; run it with --precision int8")
    return 0
