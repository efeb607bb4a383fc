"""Verbs that serve models and measure serving: `serve`, `pod`, the load tools `post` and `sweep`, and the
placement verbs `topology` and `plan` that say which CPUs each serving instance gets."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forklift.cli.common import (
    add_json,
    add_runtime,
    count_or_auto,
    non_negative_number,
    optional,
    port,
    positive,
    positive_list,
    positive_number,
    threshold,
    verb_parser,
)
from forklift.errors import ForkliftError
from forklift.serve.config import UrlOrigin
from forklift.vocabulary import ModelFormat, Precision, Runtime

if TYPE_CHECKING:
    from forklift.serve.server import ServedModel


def register(verbs: Any) -> None:
    add_serve(verbs)
    add_post(verbs)
    add_stream(verbs)
    add_topology_and_plan(verbs)
    add_sweep(verbs)
    add_pod(verbs)


def add_serve(verbs: Any) -> None:
    serve = verb_parser(
        verbs,
        "serve",
        "Serve model directories over REST (native, PowerAI Vision, KServe v2) with pinned, batching workers.",
        "forklift serve models/yolov3-tiny=yolo --port 5000 --instances 2 --threads 1\n"
        "  forklift serve models/yolov3-tiny=yolo models/adult=adult  # and a tabular model 'forklift ml fit' wrote",
    )
    serve.add_argument("models", nargs="+", metavar="MODEL_DIR[=NAME]", help="model directories, each with a name")
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0: every interface)"
    )
    serve.add_argument("--port", type=port, default=5000, help="(default 5000)")
    serve.add_argument(
        "--instances",
        type=count_or_auto,
        default=None,
        metavar="N|auto",
        help="worker processes per model (auto: a saved sweep recommendation, else from the topology)",
    )
    serve.add_argument(
        "--threads", type=count_or_auto, default=None, metavar="T|auto", help="threads per worker (auto: its CPUs)"
    )
    serve.add_argument("--cpus-per-instance", type=positive, help="CPUs pinned to each worker")
    serve.add_argument(
        "--gpus",
        type=gpu_indices,
        metavar="0,1,...",
        help="run the workers on these CUDA devices in turn (torch engine; more workers than GPUs share them)",
    )
    add_runtime(serve)
    serve.add_argument(
        "--max-batch", type=positive, help="images (or table rows) per batch sent to a worker (default 8)"
    )
    serve.add_argument(
        "--batch-timeout-ms",
        type=non_negative_number,
        default=0.0,
        help="how long a worker waits for more requests to fill a batch (0: take what is queued)",
    )
    serve.add_argument(
        "--queue-size", type=positive, default=64, help="waiting requests per model before 503 (default 64)"
    )
    serve.add_argument(
        "--max-upload-mb", type=positive_number, default=20.0, help="largest image upload, request body (default 20)"
    )
    serve.add_argument(
        "--max-tensor-mb", type=positive_number, default=64.0, help="largest v2 inference request body (default 64)"
    )
    serve.add_argument(
        "--max-pixels", type=positive, default=100_000_000, help="refuse larger images, bombs (default 100000000)"
    )
    serve.add_argument(
        "--url-allow-host",
        action="append",
        default=[],
        type=url_origin,
        metavar="HOST[:PORT]",
        help="allow fetching images by URL from HOST at PORT (80 or 443 where none is given; repeatable; off when "
        "none)",
    )
    serve.add_argument(
        "--url-timeout", type=positive_number, default=10.0, help="seconds allowed for a URL fetch (default 10)"
    )
    serve.set_defaults(handler=run_serve)


def url_origin(text: str) -> UrlOrigin:
    try:
        return UrlOrigin.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def gpu_indices(text: str) -> list[int]:
    """`0,1` -> [0, 1]: CUDA device numbers."""
    parts = text.split(",")
    if not all(part.strip().isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of CUDA device numbers such as 0,1")
    return [int(part) for part in parts]


def run_serve(args: argparse.Namespace) -> int:
    from forklift.serve.config import ServeOptions, UrlFetch
    from forklift.serve.listening import listening_sockets
    from forklift.serve.server import serve
    from forklift.serve.worker_placement import served_models

    own = [origin for origin in args.url_allow_host if origin.admits("http", origin.host, args.port)]
    if own:
        raise ForkliftError(f"--url-allow-host {own[0].host}:{args.port}: the server's own port (it would fetch from "
                            f"itself)")  # fmt: skip
    models, advice = served_models(
        args.models,
        runtime=optional(Runtime, args.runtime),
        precision=optional(Precision, args.precision),
        instances=args.instances,
        cpus_per_instance=args.cpus_per_instance,
        threads=args.threads,
        gpus=args.gpus,
    )
    if advice is not None:
        print(
            f"layout from the saved sweep: {advice.instances} instances x {advice.threads} threads, "
            f"batch {advice.max_batch}, {advice.precision} ({advice.throughput:.1f} requests/s, "
            f"p99 {advice.p99_ms:.0f} ms measured)"
        )
    upload_bytes = int(args.max_upload_mb * 1024 * 1024)
    options = ServeOptions(
        host=args.host,
        port=args.port,
        max_batch=args.max_batch or (advice.max_batch if advice else 8),
        batch_timeout_ms=args.batch_timeout_ms,
        queue_size=args.queue_size,
        max_upload_bytes=upload_bytes,
        max_tensor_bytes=int(args.max_tensor_mb * 1024 * 1024),
        max_pixels=args.max_pixels,
        url_fetch=UrlFetch(frozenset(args.url_allow_host), upload_bytes, args.url_timeout),
    )
    listening = listening_sockets(args.host, args.port)  # a port in use is said before anything is started
    said = [_serving_line(model) for model in models]
    said.append(f"listening on http://{args.host}:{args.port} (Ctrl-C or SIGTERM drains and stops)")
    serve(models, options, listening=listening, ready=lambda: print("\n".join(said), flush=True))  # once loaded
    return 0


def _serving_line(model: ServedModel) -> str:
    """Where a served model's workers run: said once they have loaded it (a model they cannot load is one line)."""
    sets = "; ".join(",".join(map(str, place.cpus)) for place in model.places)
    precision = f" in {model.precision}" if model.precision else ""
    gpus = [place.gpu for place in model.places if place.gpu is not None]
    on_gpus = f" (GPUs {', '.join(map(str, gpus))})" if gpus else ""
    workers = f"{len(model.places)} worker{'' if len(model.places) == 1 else 's'}"
    return f"serving {model.name} from {model.model_dir}{precision}: {workers} on CPUs {sets}" + on_gpus


def add_post(verbs: Any) -> None:
    post = verb_parser(
        verbs,
        "post",
        "Send an image COUNT times to a server, C at a time; print latency percentiles and throughput.",
        "forklift post dog.jpg 240 --url http://127.0.0.1:5000/predict/yolo --concurrency 8",
    )
    post.add_argument(
        "image",
        type=image_list,
        metavar="IMAGE[,IMAGE...]",
        help="image(s) to post, in turn",
    )
    post.add_argument("count", type=positive, nargs="?", default=100, metavar="COUNT")
    post.add_argument("--url", default="http://127.0.0.1:5000/", help="where to POST (multipart 'files')")
    post.add_argument("--concurrency", type=positive, help="requests in flight (default: the server's workers)")
    add_json(post)
    post.set_defaults(handler=run_post)


def run_post(args: argparse.Namespace) -> int:
    from forklift.loadtest.post import post

    progress = not args.json and sys.stderr.isatty()  # a bar in a log file is a line per update
    result = post(args.image, args.count, url=args.url, concurrency=args.concurrency, show_progress=progress)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return 0 if result.errors == 0 else 1
    print(
        f"{result.requests} requests, {result.concurrency} in flight, {result.seconds:.2f} s: "
        f"{result.throughput:.1f} requests/s"
    )
    if result.ok:
        print(
            f"latency p50 {result.p50_ms:.1f} ms  p90 {result.p90_ms:.1f}  p99 {result.p99_ms:.1f}  "
            f"max {result.max_ms:.1f}  mean {result.mean_ms:.1f}"
        )
    else:  # zeros would read as measured
        print("latency: none measured (no request was answered with 200)")
    print(f"errors: {result.errors}" + (f" {result.error_codes}" if result.errors else ""))
    return 0 if result.errors == 0 else 1


def add_stream(verbs: Any) -> None:
    stream = verb_parser(
        verbs,
        "stream",
        "Stream a camera or a video file to a served image-to-image model (WebSocket /stream/MODEL) and show, or "
        "write, its answers; prints frames/s and latency. In a browser, open the server's /live page instead.",
        "forklift stream --model style --video clip.mp4 --out styled.mp4",
    )
    stream.add_argument("--model", required=True, help="the served model's name")
    source = stream.add_mutually_exclusive_group()
    source.add_argument("--camera", type=int, metavar="INDEX", help="camera index (default: 0 without --video)")
    source.add_argument("--video", type=Path, metavar="FILE", help="a video file, sent at its frame rate")
    stream.add_argument("--url", default="http://127.0.0.1:5000", help="the server (default: %(default)s)")
    stream.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="write the answers as a video (.mp4, .avi, .mkv) at the source's rate (a frame skipped while the "
        "server was busy is not in it)",
    )
    stream.add_argument("--frames", type=positive, help="stop after this many frames")
    stream.add_argument("--fps", type=positive_number, help="send at this rate (default: the file's, or the camera's)")
    stream.add_argument("--quality", type=int, default=80, choices=range(1, 101), metavar="1-100", help="JPEG")
    stream.add_argument("--strength", type=threshold, help="0 (the original) to 1 (the model's answer, default)")
    stream.add_argument("--keep-colour", action="store_true", help="keep the original's colours")
    add_json(stream)
    stream.set_defaults(handler=run_stream_verb)


def run_stream_verb(args: argparse.Namespace) -> int:
    from forklift.serve.stream_client import run_stream, stream_url, video_frames, write_video

    source = args.video if args.video is not None else (args.camera or 0)
    if isinstance(source, Path) and not source.is_file():
        raise ForkliftError(f"--video {source}: {'a folder, not a video file' if source.is_dir() else 'no such file'}")
    # FFmpeg's own log lines ("[mjpeg @ 0x...] No JPEG data") say less than the one line a bad file gets; read when
    # OpenCV first opens a video, so set here. A person may set it to debug a file (its levels are FFmpeg's).
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")
    video = video_frames(source, fps=args.fps, limit=args.frames)
    with write_video(args.out, fps=video.fps) as on_answer:
        settings = {
            **({"strength": args.strength} if args.strength is not None else {}),
            **({"keep_colour": True} if args.keep_colour else {}),
        }
        url = stream_url(args.url, args.model)
        report = run_stream(url, video.frames, quality=args.quality, settings=settings, on_answer=on_answer)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(
            f"{report.sent} frames sent ({report.skipped} skipped while every worker was busy), {report.answered} "
            f"answered ({report.dropped} dropped as newer ones came, {report.stale} stale): {report.fps:.1f} "
            f"frames/s; latency p50 {report.percentile(0.5):.0f} ms, p99 {report.percentile(0.99):.0f} ms"
            + (f"; wrote {args.out}" if args.out else "")
        )
    for error in report.errors[:5]:
        print(f"forklift: error: {error}", file=sys.stderr)
    return 1 if report.errors or not report.answered else 0


PLAN_EPILOG = (
    "A plan says which CPUs and which NUMA memory node each serving instance gets, and why:\n"
    "- each instance is pinned to CPUs of one NUMA node and uses that node's memory, so its memory stays\n"
    "  local and its caches warm (a set straddling nodes would fetch part of its memory across the link);\n"
    "- whole cores come before SMT siblings, because siblings share a core's execution units: an instance\n"
    "  of K CPUs gets K separate cores' first threads while its node has cores enough, siblings only after;\n"
    "- instances are spread over the nodes in proportion to their size;\n"
    "- --instances N alone: the largest CPU count at which N fit, a multiple of the threads per core where\n"
    "  N fit so (no core split between two instances);\n"
    "- threads = CPUs: each instance runs one thread per CPU, so nothing is oversubscribed.\n"
    "--instances auto with no --cpus-per-instance: instances of one whole core each (all its SMT threads),\n"
    "as many as each node holds. Instance i listens on BASE_PORT + i; NGINX on port 5000 balances them\n"
    "(--emit nginx, and inside the podman and docker scripts)."
)


def image_list(text: str) -> list[Path]:
    """IMAGE[,IMAGE...] as paths; an empty name (`dog.jpg,`, a comma too many) said as such, not as the folder
    '.' that Path('') is."""
    names = text.split(",")
    if not all(name.strip() for name in names):
        raise argparse.ArgumentTypeError(f"{text!r} holds an empty image name (a comma too many?)")
    return [Path(name) for name in names]


def add_topology_and_plan(verbs: Any) -> None:
    """`topology` and `plan`, which read the same topology sources."""
    from forklift.deployment.serving import EMITTERS
    from forklift.system.placement import BASE_PORT

    topology = verb_parser(
        verbs,
        "topology",
        "Show the CPU topology placement works with: sockets, NUMA nodes and their CPUs, cores, SMT threads.",
        "forklift topology --lscpu lscpu-p.txt --json",
    )
    plan = verb_parser(
        verbs,
        "plan",
        "Plan serving instances: CPUs and NUMA memory node of each, as a table, JSON or podman/docker/k8s files.",
        "forklift plan --model models/yolov3-tiny --emit podman > serve.sh   # instances for this machine's CPUs",
    )
    plan.epilog = PLAN_EPILOG
    for verb in (topology, plan):
        source = verb.add_mutually_exclusive_group()
        source.add_argument(
            "--lscpu", type=Path, metavar="FILE", help="`lscpu -p` output or `lscpu | grep NUMA` text to read"
        )
        source.add_argument("--sysfs", type=Path, metavar="ROOT", help="a sysfs tree to read, like /sys")
    add_json(topology)
    topology.set_defaults(handler=run_topology)
    plan.add_argument(
        "--instances", type=count_or_auto, default="auto", metavar="N|auto", help="how many (default: auto)"
    )
    plan.add_argument("--cpus-per-instance", type=positive, metavar="K", help="CPUs each (default: derived)")
    plan.add_argument(
        "--base-port", type=positive, default=BASE_PORT, metavar="PORT", help="instance 0's port (%(default)s)"
    )
    plan.add_argument("--model", type=Path, metavar="MODEL_DIR", help="the model directory the emitted files serve")
    output = plan.add_mutually_exclusive_group()
    add_json(output)
    output.add_argument("--emit", choices=EMITTERS, help="print the files that run the plan instead")
    plan.set_defaults(handler=run_plan)


def run_topology(args: argparse.Namespace) -> int:
    from forklift.system.topology import describe_topology, load_topology

    topology = load_topology(args.lscpu, args.sysfs)
    print(json.dumps(topology.to_json(), indent=2) if args.json else describe_topology(topology))
    return 0


def run_plan(args: argparse.Namespace) -> int:
    from forklift.deployment.serving import MODEL_PLACEHOLDER, emit
    from forklift.model_files.model_dir import open_model_dir
    from forklift.system.placement import describe_plan, make_plan
    from forklift.system.topology import UNKNOWN_CORES, load_topology

    topology = load_topology(args.lscpu, args.sysfs)
    if not topology.cores_known:  # instances of "separate cores" may share cores
        print(f"forklift: warning: {topology.source}: {UNKNOWN_CORES}", file=sys.stderr)
    plan = make_plan(
        topology,
        instances=args.instances,
        cpus_per_instance=args.cpus_per_instance,
        base_port=args.base_port,
    )
    if args.emit:
        if args.model is not None and args.model.exists():
            open_model_dir(args.model)  # a data set or any other folder: one line, not files that serve nothing
        elif args.model is not None:  # planned for another machine (its --lscpu), where the model may well be
            print(f"forklift: note: {args.model} is not on this machine; the files name it as given", file=sys.stderr)
        print(emit(plan, args.emit, str(args.model.resolve()) if args.model else MODEL_PLACEHOLDER), end="")
    else:
        print(json.dumps(plan.to_json(), indent=2) if args.json else describe_plan(plan))
    return 0


def add_sweep(verbs: Any) -> None:
    sweep = verb_parser(
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
    sweep.add_argument("--instances", type=positive_list, default=[1, 2], help="worker counts to try")
    sweep.add_argument("--threads", type=positive_list, default=[1, 2], help="threads (= CPUs) per worker")
    sweep.add_argument("--max-batch", type=positive_list, default=[8], help="batch limits to try")
    sweep.add_argument("--concurrency", type=positive_list, default=[1, 2, 4, 8], help="requests in flight")
    sweep.add_argument("--requests", type=positive, default=240, help="requests per point")
    sweep.add_argument("--slo-ms", type=positive_number, help="p99 latency the recommendation must meet")
    add_runtime(sweep)
    sweep.add_argument("--out", type=Path, default=Path("out/sweep"), help="folder for sweep.csv and the plots")
    sweep.set_defaults(handler=run_sweep)


def run_sweep(args: argparse.Namespace) -> int:
    from forklift.loadtest.post import read_images
    from forklift.loadtest.sweep import keep, layouts, recommend, run_sweep, write_results
    from forklift.model_files.model_dir import open_model_dir
    from forklift.model_files.precision import offered_precisions
    from forklift.serve.process import sigterm_as_interrupt
    from forklift.shared_data import shared_data_path

    model = open_model_dir(args.model_dir)
    if model.format == ModelFormat.TABULAR:  # it posted images, 240 errors a layout, and plotted zeros
        raise ForkliftError(f"{args.model_dir}: a tabular model answers rows; sweep posts images (time rows with "
                            "forklift serve and a client of its /v2 or /predict route)")  # fmt: skip
    images = args.image or [shared_data_path("images/dog.jpg")]
    read_images(images)  # each an image, before minutes of layouts post it
    precision = optional(Precision, args.precision)
    precisions = [precision] if precision else offered_precisions(model)
    candidates, skipped = layouts(args.instances, args.threads, args.max_batch, precisions)
    for unfit in skipped:
        print(f"skipping {unfit}: needs more CPUs than this machine gives", file=sys.stderr)
    if not candidates:
        raise ForkliftError("no layout fits this machine's CPUs: lower --instances or --threads")
    with sigterm_as_interrupt():  # each layout's server stopped, as on Ctrl-C
        rows = run_sweep(
            args.model_dir,
            images,
            candidates,
            concurrency=args.concurrency,
            requests=args.requests,
            runtime=optional(Runtime, args.runtime),
        )
    written = write_results(rows, args.out)
    print(f"{'layout':<34} {'in flight':>9} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6}")
    for r in rows:
        layout = f"{r.instances} x {r.threads} threads, batch {r.max_batch}, {r.precision}"
        print(f"{layout:<34} {r.concurrency:>9} {r.throughput:>8.1f} {r.p50_ms:>8.1f} {r.p99_ms:>8.1f} {r.errors:>6}")
    print("wrote " + ", ".join(str(p) for p in written))
    best = recommend(rows, args.slo_ms)
    if best is None:
        slo = f"met the SLO of p99 <= {args.slo_ms} ms" if args.slo_ms else "ran"
        print(f"no layout {slo} without errors; nothing saved")
        return 1
    saved = keep(args.model_dir, best)
    print(
        f"recommended: {best.instances} instances x {best.threads} threads, batch {best.max_batch}, "
        f"{best.precision}: "
        f"{best.throughput:.1f} requests/s at {best.concurrency} in flight, p99 {best.p99_ms:.0f} ms "
        f"(saved in {saved} for 'forklift serve --instances auto')"
    )
    return 0


def add_pod(verbs: Any) -> None:
    pod = verb_parser(
        verbs,
        "pod",
        "Run N single-model instances, each on its own port and CPU set, behind NGINX (least connections).",
        "forklift pod models/yolov3-tiny -n 2 --port 5000   # later: forklift pod stop --port 5000",
    )
    pod.add_argument("model_dir", type=Path, metavar="MODEL_DIR|stop")
    pod.add_argument("-n", "--instances", type=positive, help="instances to start")
    pod.add_argument("--port", type=port, default=5000, help="NGINX's port; instances use the next ones")
    pod.add_argument(
        "--host", default="127.0.0.1", help="NGINX's address (0.0.0.0: every interface; instances stay on 127.0.0.1)"
    )
    pod.add_argument("--cpus-per-instance", type=positive, help="CPUs of each instance (default: from the plan)")
    pod.set_defaults(handler=run_pod)


def run_pod(args: argparse.Namespace) -> int:
    from forklift.model_files.model_dir import open_model_dir
    from forklift.serve.listening import local_url
    from forklift.serve.pod import start_pod, stop_pod
    from forklift.serve.process import sigterm_as_interrupt

    if args.model_dir == Path("stop"):
        stopped = stop_pod(args.port)
        print(f"stopped the pod on port {args.port} ({len(stopped)} processes)")
        return 0
    if args.instances is None:  # after the model: a wrong MODEL_DIR is the first thing to say
        open_model_dir(args.model_dir)
        raise ForkliftError("forklift pod MODEL_DIR needs -n/--instances N")
    with sigterm_as_interrupt():  # the instances started so far stopped, as on Ctrl-C
        state = start_pod(args.model_dir, instances=args.instances, port=args.port, host=args.host,
                          cpus_per_instance=args.cpus_per_instance)  # fmt: skip
    count = len(state["instances"])
    print(f"pod of {count} instance{'s' * (count > 1)} of {args.model_dir} behind NGINX on {args.host}:{args.port}")
    for instance in state["instances"]:
        cpus = ",".join(map(str, instance["cpus"]))
        print(f"  instance on port {instance['port']}, CPUs {cpus}, pid {instance['pid']}")
    print(f"post to {local_url(args.host, args.port)}/ ; stop with 'forklift pod stop --port {args.port}'")
    return 0
