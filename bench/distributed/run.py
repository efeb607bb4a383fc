"""Data-parallel training on this machine: forklift's DDP overhead, and `forklift run`'s start-up cost.

1. Throughput: the same slim yolov3-tiny, data and global batch trained as 1 process x 2 threads (batch 2B) and as
   2 ranks x 1 thread each (`forklift train --nproc 2`, batch B each, each rank pinned to its own CPU). Each round
   runs both, who goes first alternating; the figure is metrics.csv's images/s of each epoch after the first
   (warm-up). The issue's goal: 2 ranks lose at most 10 % against one process.
2. Start-up: two namespace hosts with their own sshd (tests/namespace_hosts.py, as the tests use), and a minimal
   DDP script (first_step.py) that prints the wall-clock time of its first step. Timed from the launch to that
   step: `forklift run -H host1,host2` (its probes and checks included) against starting torchrun by hand on each
   host over ssh at the same moment (c10d rendezvous on host1, as forklift run does). Goal: at most 2 s more.

    .venv/bin/python bench/distributed/run.py [--rounds 3] [--epochs 4] [--starts 5]    (as root, for part 2)
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from namespace_hosts import namespace_hosts  # noqa: E402 - the test helper, found through the line above

from forklift.data.synth import CLASSES, synth_shapes  # noqa: E402
from forklift.shared_data import shared_data_root  # noqa: E402
from forklift.train.small_cfg import slim_cfg  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "distributed"
SCRIPT = Path(__file__).resolve().parent / "first_step.py"
SIZE = 224


def _train(data: Path, cfg: Path, out: Path, *, nproc: int, batch: int, epochs: int) -> list[float]:
    """images/s of each epoch after the first, from metrics.csv."""
    command = [sys.executable, "-m", "forklift.cli", "train", "--data", str(data), "--cfg", str(cfg), "--epochs",
               str(epochs), "--batch", str(batch), "--val-every", "1000", "--nproc", str(nproc), "--lr-scaling",
               "none", str(out)]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, text=True)
    with (out / "metrics.csv").open(newline="") as handle:
        return [float(row["images_per_s"]) for row in csv.DictReader(handle)][1:]


def throughput(work: Path, *, rounds: int, epochs: int, batch: int) -> dict:
    data, cfg = work / "data", work / "slim.cfg"
    synth_shapes(data, 200, SIZE, seed=0)
    cfg.write_text(slim_cfg(shared_data_root() / "darknet" / "yolov3-tiny.cfg", len(CLASSES), SIZE)[0])
    seen: dict[str, list[float]] = {"1 process x 2 threads": [], "2 ranks x 1 thread": []}
    for k in range(rounds):
        order = list(seen) if k % 2 == 0 else list(reversed(seen))
        for name in order:
            nproc = 1 if name.startswith("1") else 2
            out = work / f"run-{k}-{nproc}"
            seen[name] += _train(data, cfg, out, nproc=nproc, batch=batch * (3 - nproc), epochs=epochs)
            print(f"round {k + 1}: {name}: {statistics.median(seen[name]):.1f} images/s so far", flush=True)
    one, two = (statistics.median(values) for values in seen.values())
    return {
        "global_batch": 2 * batch,
        "images_per_s": {name: _spread(values) for name, values in seen.items()},
        "ratio_2_ranks_to_1": two / one,
        "overhead_pct": 100 * (1 - two / one),
    }


def _spread(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"p50": statistics.median(ordered), "worst": ordered[0], "best": ordered[-1], "epochs": len(ordered)}


def _wait_for_step(process: subprocess.Popen[str], started: float) -> float:
    assert process.stdout is not None
    for line in process.stdout:
        if "first step at " in line:
            return float(line.rsplit(" ", 1)[1]) - started
    raise RuntimeError(f"no first step: {process.wait()} {process.stderr.read() if process.stderr else ''}")


def startup(work: Path, *, starts: int) -> dict:
    seen: dict[str, list[float]] = {"forklift run": [], "torchrun by hand": []}
    with namespace_hosts(work / "hosts", 2) as hosts:
        ssh = ["ssh", "-F", str(hosts.ssh_config)]
        for k in range(starts):
            port = str(29600 + k)
            for name in seen if k % 2 == 0 else reversed(list(seen)):
                started = time.time()
                if name == "forklift run":
                    launcher = subprocess.Popen(
                        [sys.executable, "-m", "forklift.cli", "run", "-H", "host1,host2", "--ssh-config",
                         str(hosts.ssh_config), "--nproc-per-node", "1", "--port", port, "--", "python", str(SCRIPT)],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=work,
                    )  # fmt: skip
                    seen[name].append(_wait_for_step(launcher, started))
                    launcher.wait(60)
                    continue
                run_id = uuid.uuid4().hex[:12]
                by_hand = []
                for host in hosts.names:
                    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node",
                                "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{hosts.addresses['host1']}:{port}",
                                "--rdzv-id", run_id, "--local-addr", hosts.addresses[host], str(SCRIPT)]  # fmt: skip
                    by_hand.append(subprocess.Popen([*ssh, host, " ".join(torchrun)], stdout=subprocess.PIPE,
                                                    stderr=subprocess.PIPE, text=True))  # fmt: skip
                seen[name].append(_wait_for_step(by_hand[0], started))
                for process in by_hand:
                    process.wait(60)
            print(f"start {k + 1}: " + ", ".join(f"{n} {v[-1]:.2f} s" for n, v in seen.items()), flush=True)
    medians = {name: statistics.median(values) for name, values in seen.items()}
    return {
        "seconds_to_first_step": {
            name: {"p50": medians[name], "p90": _p90(values), "max": max(values), "runs": values}
            for name, values in seen.items()
        },
        "extra_s_p50": medians["forklift run"] - medians["torchrun by hand"],
    }


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds (each trains both ways)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs per run (the first is left out)")
    parser.add_argument("--batch", type=int, default=8, help="per rank; one process takes twice this")
    parser.add_argument("--starts", type=int, default=5, help="start-up measurements of each way")
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="forklift-distributed-"))
    result: dict = {"machine": platform.machine(), "cpus": len(os.sched_getaffinity(0))}
    if not args.skip_throughput:
        result["throughput"] = throughput(work, rounds=args.rounds, epochs=args.epochs, batch=args.batch)
    result["startup"] = startup(work, starts=args.starts)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "distributed.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
