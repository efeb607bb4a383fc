"""The `forklift` command. Each verb parses its options and calls one function of a stage.

A bad input ends with one line naming the input and the problem, exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from forklift import __version__
from forklift.errors import ForkliftError
from forklift.runtime.load import RUNTIMES

EXIT_BAD_INPUT = 2


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples in descriptions as written."""


def _parser(subparsers: argparse._SubParsersAction, name: str, summary: str, example: str) -> argparse.ArgumentParser:
    return subparsers.add_parser(
        name, help=summary, description=f"{summary}\n\nexample:\n  {example}", formatter_class=HelpFormatter
    )


def _threshold(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive whole number")
    return value


def cmd_predict(args: argparse.Namespace) -> int:
    from forklift.predict import predict_files, print_table

    prediction = predict_files(
        args.model_dir,
        args.images,
        runtime=args.runtime,
        threads=args.threads,
        conf=args.conf,
        iou=args.iou,
        resize=args.resize,
        max_pixels=args.max_pixels,
    )
    if args.json:
        print(json.dumps(prediction.to_json(), indent=2))
    else:
        print_table(prediction)
    failures = [r for r in prediction.results if r.error is not None]
    for failure in failures:
        print(f"forklift: error: {failure.error}", file=sys.stderr)
    return EXIT_BAD_INPUT if failures else 0


def cmd_models_inspect(args: argparse.Namespace) -> int:
    from forklift.formats.model_dir import open_model_dir
    from forklift.runtime.inspect import summarise

    summary = summarise(open_model_dir(args.model_dir))
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
        return 0
    labels = ", ".join(summary.labels[:8]) + (f", ... ({summary.classes} in all)" if summary.classes > 8 else "")
    size = f"{summary.input_width}x{summary.input_height}" if summary.input_width else "any"
    rows = [
        ("name", summary.name),
        ("format", summary.format),
        ("task", summary.task),
        ("classes", f"{summary.classes}: {labels}"),
        ("input", size),
        ("parameters", f"{summary.parameters:,}" if summary.parameters is not None else "unknown"),
        ("FLOPs", f"{summary.flops / 1e9:.2f} G" if summary.flops is not None else "unknown"),
        *((f"file ({role})", path) for role, path in summary.files.items()),
    ]
    for key, value in rows:
        print(f"{key:<18} {value}")
    return 0


def cmd_models_new_darknet(args: argparse.Namespace) -> int:
    from forklift.nets.init import new_darknet_dir

    out = new_darknet_dir(args.cfg, args.names, args.out_dir, seed=args.seed)
    print(f"wrote {out} (seed {args.seed})")
    return 0


def cmd_models_export(args: argparse.Namespace) -> int:
    from forklift.formats.model_dir import open_model_dir
    from forklift.runtime.onnx_export import export_darknet

    model = open_model_dir(args.model_dir)
    if model.kind != "darknet":
        raise ForkliftError(f"{args.model_dir}: only Darknet models export to ONNX (this one is {model.kind})")
    out = args.out or model.path / f"{model.files['cfg'].stem}.onnx"
    if out.is_dir():
        out = out / f"{model.files['cfg'].stem}.onnx"
    export_darknet(model, out)
    print(f"wrote {out}")
    return 0


def _count_or_auto(text: str) -> int | None:
    if text == "auto":
        return None
    return _positive(text)


def cmd_serve(args: argparse.Namespace) -> int:
    from forklift.serve.config import ServeOptions, UrlFetch
    from forklift.serve.layout import served_models
    from forklift.serve.server import serve

    models, advice = served_models(args.models, args.runtime, args.instances, args.cpus_per_instance, args.threads)
    if advice is not None:
        print(
            f"layout from the saved sweep: {advice.instances} instances x {advice.threads} threads, "
            f"batch {advice.max_batch} ({advice.throughput:.1f} requests/s, p99 {advice.p99_ms:.0f} ms measured)"
        )
    options = ServeOptions(
        host=args.host,
        port=args.port,
        max_batch=args.max_batch or (advice.max_batch if advice else 8),
        batch_timeout_ms=args.batch_timeout_ms,
        queue_size=args.queue_size,
        max_upload_bytes=int(args.max_upload_mb * 1024 * 1024),
        max_tensor_bytes=int(args.max_tensor_mb * 1024 * 1024),
        max_pixels=args.max_pixels,
        url_fetch=UrlFetch(frozenset(args.url_allow_host), int(args.max_upload_mb * 1024 * 1024), args.url_timeout),
    )
    for model in models:
        sets = "; ".join(",".join(map(str, cpus)) for cpus, _, _ in model.cpu_sets)
        print(f"serving {model.name} from {model.model_dir}: {len(model.cpu_sets)} workers on CPUs {sets}")
    print(f"listening on http://{args.host}:{args.port} (Ctrl-C or SIGTERM drains and stops)", flush=True)
    serve(models, options)
    return 0


def cmd_post(args: argparse.Namespace) -> int:
    from forklift.bench.post import post

    result = post(args.image, args.count, args.url, args.concurrency, show_progress=not args.json)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return 0 if result.errors == 0 else 1
    print(
        f"{result.requests} requests, {result.concurrency} in flight, {result.seconds:.2f} s: "
        f"{result.throughput:.1f} requests/s"
    )
    print(
        f"latency p50 {result.p50_ms:.1f} ms  p90 {result.p90_ms:.1f}  p99 {result.p99_ms:.1f}  "
        f"max {result.max_ms:.1f}  mean {result.mean_ms:.1f}"
    )
    print(f"errors: {result.errors}" + (f" {result.error_codes}" if result.errors else ""))
    return 0 if result.errors == 0 else 1


def cmd_topology(args: argparse.Namespace) -> int:
    from forklift.system.topology import describe_topology, load_topology

    topology = load_topology(args.lscpu, args.sysfs)
    print(json.dumps(topology.to_json(), indent=2) if args.json else describe_topology(topology))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from forklift.system.placement import MODEL_PLACEHOLDER, describe_plan, emit, make_plan
    from forklift.system.topology import load_topology

    plan = make_plan(load_topology(args.lscpu, args.sysfs), args.instances, args.cpus_per_instance, args.base_port)
    if args.emit:
        print(emit(plan, args.emit, str(args.model.resolve()) if args.model else MODEL_PLACEHOLDER), end="")
    else:
        print(json.dumps(plan.to_json(), indent=2) if args.json else describe_plan(plan))
    return 0


def _positive_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole numbers") from exc
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} needs positive whole numbers")
    return values


def cmd_sweep(args: argparse.Namespace) -> int:
    from forklift.bench.sweep import keep, layouts, recommend, run_sweep, write_results

    args.image = args.image or [Path("../shared/data/images/dog.jpg")]
    candidates, skipped = layouts(args.instances, args.threads, args.max_batch)
    for layout in skipped:
        print(f"skipping {layout}: needs more CPUs than this machine gives", file=sys.stderr)
    if not candidates:
        raise ForkliftError("no layout fits this machine's CPUs: lower --instances or --threads")
    rows = run_sweep(args.model_dir, args.image, candidates, args.concurrency, args.requests, args.runtime)
    written = write_results(rows, args.out)
    print(f"{'layout':<28} {'in flight':>9} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6}")
    for r in rows:
        layout = f"{r.instances} x {r.threads} threads, batch {r.max_batch}"
        print(f"{layout:<28} {r.concurrency:>9} {r.throughput:>8.1f} {r.p50_ms:>8.1f} {r.p99_ms:>8.1f} {r.errors:>6}")
    print("wrote " + ", ".join(str(p) for p in written))
    best = recommend(rows, args.slo_ms)
    if best is None:
        print(f"no layout met the SLO of p99 <= {args.slo_ms} ms without errors; nothing saved")
        return 1
    saved = keep(args.model_dir, best)
    print(
        f"recommended: {best.instances} instances x {best.threads} threads, batch {best.max_batch}: "
        f"{best.throughput:.1f} requests/s at {best.concurrency} in flight, p99 {best.p99_ms:.0f} ms "
        f"(saved in {saved} for 'forklift serve --instances auto')"
    )
    return 0


def cmd_pod(args: argparse.Namespace) -> int:
    from forklift.serve.pod import start_pod, stop_pod

    if args.model_dir == Path("stop"):
        stopped = stop_pod(args.port)
        print(f"stopped the pod on port {args.port} ({len(stopped)} processes)")
        return 0
    if args.instances is None:
        raise ForkliftError("forklift pod MODEL_DIR needs -n/--instances N")
    state = start_pod(args.model_dir, args.instances, args.port, args.cpus_per_instance)
    print(f"pod of {len(state['instances'])} instances of {args.model_dir} behind NGINX on port {args.port}")
    for instance in state["instances"]:
        cpus = ",".join(map(str, instance["cpus"]))
        print(f"  instance on port {instance['port']}, CPUs {cpus}, pid {instance['pid']}")
    print(f"post to http://127.0.0.1:{args.port}/ ; stop with 'forklift pod stop --port {args.port}'")
    return 0


def cmd_data_import(args: argparse.Namespace) -> int:
    from forklift.data.formats import import_dataset

    print(import_dataset(args.source_format, args.source, args.out, images=args.images, task=args.task).line())
    return 0


def cmd_data_export(args: argparse.Namespace) -> int:
    from forklift.data.formats import export_dataset

    print(export_dataset(args.target_format, args.data, args.out).line())
    return 0


def cmd_data_check(args: argparse.Namespace) -> int:
    from forklift.data.check import check_dataset, print_report

    report = check_dataset(args.data)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print_report(report)
    return 1 if report.findings else 0


def cmd_data_stats(args: argparse.Namespace) -> int:
    from forklift.data.dataset import load_dataset
    from forklift.data.stats import dataset_stats, print_stats

    stats = dataset_stats(load_dataset(args.data))
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        print_stats(stats)
    return 0


def cmd_data_split(args: argparse.Namespace) -> int:
    from forklift.data.dataset import describe
    from forklift.data.split import split_dataset

    dataset = split_dataset(args.data, args.val, args.test, seed=args.seed, stratify=args.stratify)
    print(f"wrote {dataset.root}: {describe(dataset)}")
    return 0


def cmd_data_synth(args: argparse.Namespace) -> int:
    from forklift.data.dataset import describe
    from forklift.data.synth import synth_shapes

    dataset = synth_shapes(args.out, args.n, args.size, seed=args.seed, task=args.task)
    print(f"wrote {args.out}: {describe(dataset)}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from forklift.train.evaluate import DetectionMetrics, SegmentationMetrics, evaluate

    out = args.out or Path("out/eval") / args.model_dir.resolve().name
    result = evaluate(args.model_dir, args.data, args.split, args.conf, args.iou, args.threshold, args.runtime, out)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return 0
    print(f"{result.model} on {result.data} ({result.split}): {result.images} images, {result.skipped} skipped")
    metrics = result.metrics

    def number(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.4f}"

    if isinstance(metrics, DetectionMetrics):
        print(f"mAP@[.5:.95] {number(metrics.map)}  mAP@.5 {number(metrics.map50)}")
        print(f"at score {metrics.threshold}: precision {metrics.precision:.4f}  recall {metrics.recall:.4f}")
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


def cmd_train(args: argparse.Namespace) -> int:
    from forklift.train.trainer import train

    out = train(
        args.data,
        args.out,
        cfg=args.cfg,
        model=args.model,
        arch=args.arch,
        epochs=args.epochs,
        batch=args.batch,
        img=args.img,
        lr=args.lr,
        device=args.device,
        resume=args.resume,
        seed=args.seed,
        workers=args.workers,
        time_budget_s=None if args.minutes is None else args.minutes * 60,
        val_every=args.val_every,
        mosaic=args.mosaic,
        amp=args.amp,
        lms={"min_bytes": round(args.lms_min_mib * 2**20), "spill_dir": args.lms_spill_dir} if args.lms else None,
    )
    print(f"wrote {out}: a model directory (forklift predict {out} IMAGE); per-epoch figures in {out / 'metrics.csv'}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from forklift.demo import run_demo

    return run_demo(args.out)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="forklift",
        description="forklift: train big, serve fast. An open deep-learning platform for computer vision.",
        formatter_class=HelpFormatter,
        epilog="Run 'forklift VERB --help' for a verb's options and an example.",
    )
    parser.add_argument("--version", action="version", version=f"forklift {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    predict = _parser(
        verbs,
        "predict",
        "Run a model directory on images and print the detections (pixel boxes on the original image).",
        "forklift predict models/yolov3-tiny dog.jpg horses.jpg --json",
    )
    predict.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    predict.add_argument("images", type=Path, nargs="+", metavar="IMAGE")
    predict.add_argument(
        "--runtime", choices=RUNTIMES, help="engine (default: openvino for Darknet, onnx for ONNX, opencv for Caffe)"
    )
    predict.add_argument("--threads", type=_positive, help="CPU threads of the engine (default: all available)")
    predict.add_argument("--conf", type=_threshold, help="score threshold (default: the model's, else 0.25)")
    predict.add_argument("--iou", type=_threshold, help="NMS overlap threshold (default: the model's, else 0.45)")
    predict.add_argument("--resize", choices=("letterbox", "stretch"), help="fit to the input (default: the model's)")
    predict.add_argument("--max-pixels", type=_positive, default=100_000_000, help="refuse larger images (bombs)")
    predict.add_argument("--json", action="store_true", help="print the result JSON instead of a table")
    predict.set_defaults(handler=cmd_predict)

    models = _parser(
        verbs, "models", "Inspect, create and export model directories.", "forklift models inspect models/yolov3"
    )
    model_verbs = models.add_subparsers(dest="models_verb", metavar="ACTION", required=True)
    inspect = _parser(
        model_verbs,
        "inspect",
        "Show a model's format, task, classes, input size, parameter count and FLOPs.",
        "forklift models inspect models/yolov3-tiny --json",
    )
    inspect.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    inspect.add_argument("--json", action="store_true")
    inspect.set_defaults(handler=cmd_models_inspect)

    new = _parser(
        model_verbs,
        "new-darknet",
        "Make a Darknet model directory with freshly initialised weights, reproducible by seed.",
        "forklift models new-darknet --cfg yolov3-tiny.cfg --names coco.names --seed 1 models/yolov3-tiny",
    )
    new.add_argument("--cfg", type=Path, required=True)
    new.add_argument("--names", type=Path, required=True)
    new.add_argument("--seed", type=int, default=0)
    new.add_argument("out_dir", type=Path, metavar="OUT_DIR")
    new.set_defaults(handler=cmd_models_new_darknet)

    export = _parser(
        model_verbs,
        "export",
        "Export a Darknet model to ONNX (opset 17, dynamic batch, decode included).",
        "forklift models export models/yolov3-tiny --to onnx",
    )
    export.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    export.add_argument("--to", choices=("onnx",), required=True)
    export.add_argument("out", type=Path, nargs="?", metavar="OUT", help="file or folder (default: in MODEL_DIR)")
    export.set_defaults(handler=cmd_models_export)

    serve = _parser(
        verbs,
        "serve",
        "Serve model directories over REST (native, PowerAI Vision, KServe v2) with pinned, batching workers.",
        "forklift serve models/yolov3-tiny=yolo --port 5000 --instances 2 --threads 1",
    )
    serve.add_argument("models", nargs="+", metavar="MODEL_DIR[=NAME]", help="model directories, each with a name")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    serve.add_argument("--port", type=_positive, default=5000)
    serve.add_argument(
        "--instances",
        type=_count_or_auto,
        default=None,
        metavar="N|auto",
        help="worker processes per model (auto: a saved sweep recommendation, else from the topology)",
    )
    serve.add_argument(
        "--threads", type=_count_or_auto, default=None, metavar="T|auto", help="threads per worker (auto: its CPUs)"
    )
    serve.add_argument("--cpus-per-instance", type=_positive, help="CPUs pinned to each worker")
    serve.add_argument("--runtime", choices=RUNTIMES, help="engine (default: by model kind)")
    serve.add_argument("--max-batch", type=_positive, help="images per batch sent to a worker (default 8)")
    serve.add_argument(
        "--batch-timeout-ms",
        type=float,
        default=0.0,
        help="how long a worker waits for more requests to fill a batch (0: take what is queued)",
    )
    serve.add_argument("--queue-size", type=_positive, default=64, help="waiting requests per model before 503")
    serve.add_argument("--max-upload-mb", type=float, default=20.0, help="largest image upload (request body)")
    serve.add_argument("--max-tensor-mb", type=float, default=64.0, help="largest v2 inference request body")
    serve.add_argument("--max-pixels", type=_positive, default=100_000_000, help="refuse larger images (bombs)")
    serve.add_argument(
        "--url-allow-host",
        action="append",
        default=[],
        metavar="HOST",
        help="allow fetching images by URL from HOST (repeatable; off when none)",
    )
    serve.add_argument("--url-timeout", type=float, default=10.0, help="seconds allowed for a URL fetch")
    serve.set_defaults(handler=cmd_serve)

    post_verb = _parser(
        verbs,
        "post",
        "Send an image COUNT times to a server, C at a time; print latency percentiles and throughput.",
        "forklift post dog.jpg 240 --url http://127.0.0.1:5000/predict/yolo --concurrency 8",
    )
    post_verb.add_argument(
        "image",
        type=lambda text: [Path(p) for p in text.split(",")],
        metavar="IMAGE[,IMAGE...]",
        help="image(s) to post, in turn",
    )
    post_verb.add_argument("count", type=_positive, nargs="?", default=100, metavar="COUNT")
    post_verb.add_argument("--url", default="http://127.0.0.1:5000/", help="where to POST (multipart 'files')")
    post_verb.add_argument("--concurrency", type=_positive, help="requests in flight (default: the server's workers)")
    post_verb.add_argument("--json", action="store_true")
    post_verb.set_defaults(handler=cmd_post)

    from forklift.system.placement import BASE_PORT, EMITTERS

    topology = _parser(
        verbs,
        "topology",
        "Show the CPU topology placement works with: sockets, NUMA nodes and their CPUs, cores, SMT threads.",
        "forklift topology --lscpu lscpu-p.txt --json",
    )
    plan = _parser(
        verbs,
        "plan",
        "Plan serving instances: CPUs and NUMA memory node of each, as a table, JSON or podman/docker/k8s files.",
        "forklift plan --cpus-per-instance 4 --model models/yolov3-tiny --emit podman > serve.sh",
    )
    plan.epilog = (
        "A plan says which CPUs and which NUMA memory node each serving instance gets, and why:\n"
        "- each instance is pinned to CPUs of one NUMA node and uses that node's memory, so its memory stays\n"
        "  local and its caches warm (a set straddling nodes would fetch part of its memory across the link);\n"
        "- whole cores come before SMT siblings, because siblings share a core's execution units: an instance\n"
        "  of K CPUs gets K separate cores' first threads while its node has cores enough, siblings only after;\n"
        "- instances are spread over the nodes in proportion to their size;\n"
        "- threads = CPUs: each instance runs one thread per CPU, so nothing is oversubscribed.\n"
        "--instances auto with no --cpus-per-instance: instances of one whole core each (all its SMT threads),\n"
        "as many as each node holds. Instance i listens on BASE_PORT + i; NGINX on port 5000 balances them\n"
        "(--emit nginx, and inside the podman and docker scripts)."
    )
    for verb in (topology, plan):
        source = verb.add_mutually_exclusive_group()
        source.add_argument(
            "--lscpu", type=Path, metavar="FILE", help="`lscpu -p` output or `lscpu | grep NUMA` text to read"
        )
        source.add_argument("--sysfs", type=Path, metavar="ROOT", help="a sysfs tree to read, like /sys")
    topology.add_argument("--json", action="store_true")
    topology.set_defaults(handler=cmd_topology)
    plan.add_argument(
        "--instances", type=_count_or_auto, default="auto", metavar="N|auto", help="how many (default: auto)"
    )
    plan.add_argument("--cpus-per-instance", type=_positive, metavar="K", help="CPUs each (default: derived)")
    plan.add_argument(
        "--base-port", type=_positive, default=BASE_PORT, metavar="PORT", help="instance 0's port (%(default)s)"
    )
    plan.add_argument("--model", type=Path, metavar="MODEL_DIR", help="the model directory the emitted files serve")
    output = plan.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true")
    output.add_argument("--emit", choices=EMITTERS, help="print the files that run the plan instead")
    plan.set_defaults(handler=cmd_plan)

    sweep = _parser(
        verbs,
        "sweep",
        "Serve a model in each layout, load it at each concurrency, plot, and save the best layout.",
        "forklift sweep models/yolov3-tiny --instances 1,2 --threads 1,2 --concurrency 1,2,4,8 --requests 240",
    )
    sweep.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    sweep.add_argument(
        "--image",
        type=Path,
        action="append",
        help="image to post (repeatable; default: dog.jpg of ../shared/data/images)",
    )
    sweep.add_argument("--instances", type=_positive_list, default=[1, 2], help="worker counts to try")
    sweep.add_argument("--threads", type=_positive_list, default=[1, 2], help="threads (= CPUs) per worker")
    sweep.add_argument("--max-batch", type=_positive_list, default=[8], help="batch limits to try")
    sweep.add_argument("--concurrency", type=_positive_list, default=[1, 2, 4, 8], help="requests in flight")
    sweep.add_argument("--requests", type=_positive, default=240, help="requests per point")
    sweep.add_argument("--slo-ms", type=float, help="p99 latency the recommendation must meet")
    sweep.add_argument("--runtime", choices=RUNTIMES, help="engine (default: by model kind)")
    sweep.add_argument("--out", type=Path, default=Path("out/sweep"), help="folder for sweep.csv and the plots")
    sweep.set_defaults(handler=cmd_sweep)

    pod = _parser(
        verbs,
        "pod",
        "Run N single-model instances, each on its own port and CPU set, behind NGINX (least connections).",
        "forklift pod models/yolov3-tiny -n 2 --port 5000   # later: forklift pod stop --port 5000",
    )
    pod.add_argument("model_dir", type=Path, metavar="MODEL_DIR|stop")
    pod.add_argument("-n", "--instances", type=_positive, help="instances to start")
    pod.add_argument("--port", type=_positive, default=5000, help="NGINX's port; instances use the next ones")
    pod.add_argument("--cpus-per-instance", type=_positive, help="CPUs of each instance (default: from the plan)")
    pod.set_defaults(handler=cmd_pod)

    data = _parser(
        verbs,
        "data",
        "Make data sets in forklift's layout (DATA/dataset.json + DATA/images/).",
        "forklift data synth shapes --n 200 --size 320 data/shapes",
    )
    data_verbs = data.add_subparsers(dest="data_verb", metavar="ACTION", required=True)
    synth = _parser(
        data_verbs,
        "synth",
        "Generate a synthetic data set: shapes on textured backgrounds, the same files for the same seed.",
        "forklift data synth shapes --n 200 --size 320 --seed 1 --task detect data/shapes",
    )
    synth.add_argument("kind", choices=("shapes",), help="what to draw")
    synth.add_argument("--n", type=_positive, required=True, help="how many images")
    synth.add_argument("--size", type=_positive, required=True, help="width and height of each image, pixels (>= 64)")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument(
        "--task",
        choices=("detect", "classify", "segment"),
        default="detect",
        help="boxes of 1-4 shapes, one shape's label, or PNG masks of 1-4 shapes (DATA/masks/)",
    )
    synth.add_argument("out", type=Path, metavar="OUT", help="a new or empty folder")
    synth.set_defaults(handler=cmd_data_synth)
    check = _parser(
        data_verbs,
        "check",
        "Report every problem of a data set: unreadable, missing or duplicate images, wrong sizes, bad boxes and "
        "labels. Exit 0 when clean, 1 when problems were found (training skips those images), 2 for bad input.",
        "forklift data check data/shapes --json",
    )
    check.add_argument("data", type=Path, metavar="DATA", help="a forklift data set folder")
    check.add_argument("--json", action="store_true")
    check.set_defaults(handler=cmd_data_check)
    stats = _parser(
        data_verbs,
        "stats",
        "Show images per split, objects per class and split, boxes per image, relative box sizes and image sizes.",
        "forklift data stats data/shapes --json",
    )
    stats.add_argument("data", type=Path, metavar="DATA", help="a forklift data set folder")
    stats.add_argument("--json", action="store_true")
    stats.set_defaults(handler=cmd_data_stats)
    split = _parser(
        data_verbs,
        "split",
        "Reassign train/val/test at random by seed, optionally by each image's dominant class; rewrite dataset.json.",
        "forklift data split data/shapes --val 0.1 --test 0.1 --seed 0 --stratify",
    )
    split.add_argument("data", type=Path, metavar="DATA", help="a forklift data set folder")
    split.add_argument("--val", type=_threshold, required=True, help="fraction of the images for val")
    split.add_argument("--test", type=_threshold, default=0.0, help="fraction of the images for test (default 0)")
    split.add_argument("--seed", type=int, default=0)
    split.add_argument("--stratify", action="store_true", help="keep each dominant class's share in every split")
    split.set_defaults(handler=cmd_data_split)
    formats = ("coco", "voc", "yolo", "powerai", "masks")
    data_import = _parser(
        data_verbs,
        "import",
        "Make a forklift data set from COCO JSON, a Pascal VOC folder, a YOLO data.yaml, a PowerAI Vision zip or a "
        "folder of PNG masks (images/, masks/, classes.txt); boxes outside their image are clipped, empty ones "
        "dropped, and both counted. COCO segmentations (polygons, RLE) become masks with --task segment.",
        "forklift data import --from coco instances_val2017.json --images val2017 --task segment data/coco-val",
    )
    data_import.add_argument("--from", dest="source_format", choices=formats, required=True)
    data_import.add_argument(
        "source",
        type=Path,
        metavar="SOURCE",
        help="COCO .json, VOC folder, YOLO data.yaml, PowerAI .zip or masks folder",
    )
    data_import.add_argument(
        "--task", choices=("detect", "segment"), help="coco: boxes (detect, default) or segmentations as masks"
    )
    data_import.add_argument(
        "--images",
        type=Path,
        metavar="DIR",
        help="coco: folder of the file names (default: the JSON's folder); "
        "voc: the images (default: SOURCE/JPEGImages)",
    )
    data_import.add_argument("out", type=Path, metavar="OUT", help="a new or empty folder")
    data_import.set_defaults(handler=cmd_data_import)
    data_export = _parser(
        data_verbs,
        "export",
        "Write a forklift data set as COCO JSON (segment: RLE masks), a Pascal VOC folder, a YOLO data.yaml + "
        "labels, a PowerAI zip or a folder of PNG masks (segment).",
        "forklift data export --to yolo data/shapes out/shapes-yolo",
    )
    data_export.add_argument("--to", dest="target_format", choices=formats, required=True)
    data_export.add_argument("data", type=Path, metavar="DATA", help="a forklift data set folder")
    data_export.add_argument("out", type=Path, metavar="OUT", help="a new or empty folder (powerai: a new .zip)")
    data_export.set_defaults(handler=cmd_data_export)

    evaluation = _parser(
        verbs,
        "eval",
        "Measure a model on a data set's split: COCO mAP, per-class AP, precision/recall at a threshold, "
        "confusion matrix and PR curves (top-1/top-5 for classifiers; mIoU, per-class IoU and pixel accuracy "
        "for segmentation); writes eval.json and PNGs.",
        "forklift eval models/shapes --data data/shapes --split val --out out/eval/shapes",
    )
    evaluation.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    evaluation.add_argument("--data", type=Path, required=True, help="a forklift data set folder")
    evaluation.add_argument("--split", choices=("train", "val", "test"), default="val")
    evaluation.add_argument("--conf", type=_threshold, default=0.001, help="score threshold of detections for mAP")
    evaluation.add_argument("--iou", type=_threshold, default=0.6, help="NMS overlap threshold (default 0.6)")
    evaluation.add_argument(
        "--threshold", type=_threshold, default=0.25, help="score of the operating point for precision/recall"
    )
    evaluation.add_argument("--runtime", choices=RUNTIMES, help="engine (default: by model kind)")
    evaluation.add_argument("--out", type=Path, help="folder for eval.json and the PNGs (default: out/eval/MODEL)")
    evaluation.add_argument("--json", action="store_true", help="print eval.json instead of a summary")
    evaluation.set_defaults(handler=cmd_eval)

    train = _parser(
        verbs,
        "train",
        "Train a model on a data set: a Darknet YOLO detector (detect sets) or a Darknet classifier (classify "
        "sets), from a cfg (fresh weights) or a model directory (fine-tuning); a torchvision segmentation "
        "architecture (segment sets, --arch, fresh weights). Each epoch ends with a checkpoint, a row of "
        "metrics.csv (and TensorBoard) and, every --val-every epochs, a measure on val; OUT becomes a model "
        "directory with the best measured epoch's weights, its ONNX export and eval/.",
        "forklift train --data data/shapes --cfg yolov3-tiny.cfg --epochs 30 --batch 16 --img 320 out/shapes-tiny\n"
        "  forklift train --data data/shapes-seg --arch deeplabv3_mobilenet_v3_large --img 256 out/seg",
    )
    train.add_argument("--data", type=Path, required=True, metavar="DATA", help="a forklift data set folder")
    source = train.add_mutually_exclusive_group()  # which one a data set needs: its task says
    source.add_argument("--cfg", type=Path, metavar="CFG", help="Darknet cfg; classes (and filters) are rewritten")
    source.add_argument("--model", type=Path, metavar="MODEL_DIR", help="Darknet model directory to fine-tune")
    source.add_argument(
        "--arch", metavar="NAME", help="segment sets: torchvision architecture (default lraspp_mobilenet_v3_large)"
    )
    train.add_argument("--epochs", type=_positive, default=30)
    train.add_argument("--batch", type=_positive, default=16)
    train.add_argument(
        "--img", type=_positive, default=None, help="input width and height (default: the cfg's; 256 for --arch)"
    )
    train.add_argument("--lr", type=float, default=0.001, help="peak learning rate of AdamW (default 0.001)")
    train.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
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
        "--lms-min-mib", type=float, default=1.0, metavar="MIB", help="with --lms: tensors under this stay in place"
    )
    train.add_argument("--lms-spill-dir", type=Path, metavar="DIR", help="with --lms on the CPU: where spill files go")
    train.add_argument("--mosaic", action="store_true", help="detection: tile four images into half the samples")
    train.add_argument("--val-every", type=_positive, default=1, metavar="N", help="measure on val every N epochs")
    train.add_argument("--minutes", type=float, default=None, help="stop before an epoch that would end past this")
    train.add_argument("--workers", type=int, default=0, help="data-loading processes (default 0: in the loop)")
    train.add_argument("--resume", action="store_true", help="continue OUT's run from its last checkpoint")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("out", type=Path, metavar="OUT_DIR", help="a new or empty folder (or the run to resume)")
    train.set_defaults(handler=cmd_train)

    demo = _parser(
        verbs,
        "demo",
        "The main job end to end: generate shapes, train a small YOLO for a few minutes, evaluate, serve, post.",
        "forklift demo --out out/demo",
    )
    demo.add_argument("--out", type=Path, default=Path("out/demo"))
    demo.set_defaults(handler=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except ForkliftError as exc:
        print(f"forklift: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and closed early: not an error of ours
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
