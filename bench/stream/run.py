"""Live video to a style model: REST with a new connection per frame (the ported demo's client), REST with a
kept-alive connection (its fix), and forklift's WebSocket stream, side by side in one run.

The "camera" is a generated 320x240 video at 30 frames/s (moving shapes on a gradient, JPEG quality 80). A REST
client takes the newest camera frame whenever its previous answer has come back, as the demo's client did; the
stream client (flow control on) sends a frame as the camera makes it while fewer frames are unanswered than the
server has workers, and skips it otherwise.
Latency is from the frame's capture to its answer decoded; frames/s counts answered frames over the run.
The server is `forklift serve MODEL --instances 2 --threads 1 --runtime openvino` on loopback (with `--gpu`:
`--runtime torch --gpus 0`, the workers on the first CUDA GPU); the three clients take turns for `--rounds`
rounds of `--seconds` each and the medians are reported, with (c) / (b).
Also frames/s of one 1-thread predictor of the same engine (and device) for each `--widths` variant at 320x240.

    .venv/bin/python bench/stream/run.py [--seconds 8] [--rounds 5] [--widths 1.0,0.5,0.25] [--gpu]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import httpx
import numpy as np

from forklift.model_files.model_dir import open_model_dir
from forklift.runtime.base import PredictOptions
from forklift.runtime.load import load_predictor
from forklift.runtime.style_export import fresh_style_net, write_style_dir
from forklift.serve.process import ServerProcess
from forklift.serve.stream_client import StreamReport, run_stream, stream_url
from forklift.vocabulary import Runtime

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "stream"
FPS, WIDTH, HEIGHT, QUALITY = 30.0, 320, 240, 80


def camera_frames(count: int) -> list[np.ndarray]:
    """A generated clip: a gradient with a circle and a square moving across it (BGR)."""
    x = np.linspace(0, 255, WIDTH, dtype=np.float32)
    frames = []
    for index in range(count):
        frame = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
        frame[..., 0] = x[None, :]
        frame[..., 1] = np.linspace(40, 200, HEIGHT, dtype=np.float32)[:, None]
        frame[..., 2] = 255 - x[None, :]
        cv2.circle(frame, ((20 + 4 * index) % WIDTH, 120), 34, (255, 255, 255), -1)
        cv2.rectangle(frame, (200, (30 + 2 * index) % 180), (250, (30 + 2 * index) % 180 + 50), (20, 160, 20), -1)
        frames.append(frame)
    return frames


class Camera:
    """Frames at FPS from the moment it starts; `latest()` is the newest one and when it was captured."""

    def __init__(self, frames: list[np.ndarray]) -> None:
        self.frames, self.start = frames, time.perf_counter()

    def latest(self) -> tuple[np.ndarray, float]:
        index = int((time.perf_counter() - self.start) * FPS)
        return self.frames[index % len(self.frames)], self.start + index / FPS


def rest(url: str, frames: list[np.ndarray], seconds: float, *, keep_alive: bool) -> StreamReport:
    """One frame at a time over REST: a new connection each (keep_alive False) or one kept open."""
    report, camera = StreamReport(), Camera(frames)
    client = httpx.Client(timeout=30) if keep_alive else None
    end = camera.start + seconds
    while time.perf_counter() < end:
        frame, captured = camera.latest()
        _, encoded = cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, QUALITY])
        files = {"files": ("frame.jpg", encoded.tobytes(), "image/jpeg")}
        if client is None:
            with httpx.Client(timeout=30) as once:
                answer = once.post(url, files=files)
        else:
            answer = client.post(url, files=files)
        report.sent += 1
        if answer.status_code != 200:
            report.errors.append(answer.text[:200])
            continue
        cv2.imdecode(np.frombuffer(answer.content, np.uint8), cv2.IMREAD_COLOR)
        report.answered += 1
        report.latencies_ms.append((time.perf_counter() - captured) * 1000)
    report.seconds = time.perf_counter() - camera.start
    if client is not None:
        client.close()
    return report


def streamed(url: str, frames: list[np.ndarray], seconds: float) -> StreamReport:
    """Every camera frame sent as it is captured; the answers decoded as they come."""
    count = int(seconds * FPS)

    def paced():
        start = time.perf_counter()
        for index in range(count):
            time.sleep(max(0.0, start + index / FPS - time.perf_counter()))
            yield frames[index % len(frames)]

    return run_stream(url, paced(), quality=QUALITY, on_answer=lambda image: None)


def summary(reports: list[StreamReport]) -> dict:
    return {
        "frames_per_s": statistics.median(r.fps for r in reports),
        "p50_ms": statistics.median(r.percentile(0.5) for r in reports),
        "p99_ms": statistics.median(r.percentile(0.99) for r in reports),
        "answered": [r.answered for r in reports],
        "errors": sum(len(r.errors) for r in reports),
    }


def in_process_fps(model_dir: Path, frames: list[np.ndarray], gpu: bool, count: int = 40) -> float:
    runtime, device = (Runtime.TORCH, "cuda:0") if gpu else (Runtime.OPENVINO, "cpu")
    predictor = load_predictor(open_model_dir(model_dir), runtime, PredictOptions(threads=1, device=device))
    rgb = [cv2.cvtColor(frame, cv2.COLOR_BGR2RGB) for frame in frames[:count]]
    for image in rgb[:3]:
        predictor.predict_image("warm", image)
    start = time.perf_counter()
    for image in rgb:
        predictor.predict_image("frame", image)
    return len(rgb) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--widths", default="1.0,0.5,0.25")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for results.json")
    parser.add_argument("--gpu", action="store_true", help="the torch engine on the first CUDA GPU, not OpenVINO")
    args = parser.parse_args()
    engine = ["--runtime", "torch", "--gpus", "0"] if args.gpu else ["--runtime", "openvino"]
    server_layout = f"2 instances x 1 thread, {' '.join(engine[1::2])}"
    work = Path(tempfile.mkdtemp(prefix="forklift-stream-bench-"))
    frames = camera_frames(int(FPS * 4))
    widths = [float(w) for w in args.widths.split(",")]
    dirs = {w: write_style_dir(fresh_style_net(seed=0, width=w), work / f"style-{w}") for w in widths}
    per_width = {str(w): round(in_process_fps(d, frames, args.gpu), 2) for w, d in dirs.items()}
    print(f"one 1-thread {engine[1]} predictor, frames/s at 320x240:", per_width, flush=True)
    results: dict[str, list[StreamReport]] = {"a_rest_new_connection": [], "b_rest_kept_alive": [], "c_stream": []}
    model = dirs[widths[0]]
    with ServerProcess(f"{model}=style", "--instances", "2", "--threads", "1", *engine) as server:
        server.wait_healthy()
        predict_url, ws_url = f"{server.url}/predict/style", stream_url(server.url, "style")
        clients: dict[str, Callable[[str], StreamReport]] = {
            "a_rest_new_connection": lambda _: rest(predict_url, frames, args.seconds, keep_alive=False),
            "b_rest_kept_alive": lambda _: rest(predict_url, frames, args.seconds, keep_alive=True),
            "c_stream": lambda _: streamed(ws_url, frames, args.seconds),
        }
        rest(predict_url, frames, 2.0, keep_alive=True)  # warm-up
        for round_index in range(args.rounds):
            for name, client in clients.items():
                report = client(name)
                results[name].append(report)
                print(f"round {round_index + 1} {name}: {json.dumps(report.to_json())}", flush=True)
    table = {name: summary(reports) for name, reports in results.items()}
    b, c = table["b_rest_kept_alive"], table["c_stream"]
    ratios = {
        "c_over_b_frames_per_s": c["frames_per_s"] / b["frames_per_s"],
        "c_p99_over_b_p99": c["p99_ms"] / b["p99_ms"],
    }
    out = {
        "machine": {"platform": platform.platform(), "cpus": len(os.sched_getaffinity(0))},
        "method": {"seconds": args.seconds, "rounds": args.rounds, "frame": [WIDTH, HEIGHT], "camera_fps": FPS,
                   "server": server_layout, "model_width": widths[0]},
        "in_process_fps_by_width": per_width,
        "clients": table,
        "ratios": ratios,
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(out, indent=2))
    print(f"\n{'client':<24} {'frames/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for name, row in table.items():
        print(f"{name:<24} {row['frames_per_s']:>9.2f} {row['p50_ms']:>8.1f} {row['p99_ms']:>8.1f}")
    print(f"(c)/(b): frames/s x{ratios['c_over_b_frames_per_s']:.2f}, p99 x{ratios['c_p99_over_b_p99']:.2f}")


if __name__ == "__main__":
    main()
