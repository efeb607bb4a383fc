"""`forklift run` across real hosts: network namespaces on this machine, each with its own sshd and address
(`namespace_hosts`). It trains across them, its checks catch a host with another forklift and a missing data
path, a killed rank stops the job with one line, and `--max-restarts` resumes and finishes."""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from helpers import CFGS
from namespace_hosts import Hosts, namespace_hosts, require_namespace_hosts

import forklift
from forklift.data.synth import synth_shapes

pytestmark = pytest.mark.slow

CLASSIFIER = CFGS / "shapes-classifier.cfg"


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("run")
    synth_shapes(root / "data", 64, 64, seed=0, task="classify")
    return root


@pytest.fixture(scope="module")
def hosts(work: Path) -> Iterator[Hosts]:
    require_namespace_hosts()
    with namespace_hosts(work / "hosts", 2) as made:
        yield made


def _train(epochs: int, out: str) -> list[str]:
    return ["forklift", "train", "--data", "data", "--cfg", str(CLASSIFIER), "--epochs", str(epochs), "--batch", "8",
            "--sync-bn", out]  # fmt: skip


def _run(hosts: Hosts, *args: str, cwd: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "forklift.cli", "run", "-H", ",".join(hosts.names), "--ssh-config",
            str(hosts.ssh_config), "--nproc-per-node", "1", "--port", str(port), *args]  # fmt: skip


def _epochs(out: Path) -> list[str]:
    with (out / "metrics.csv").open(newline="") as handle:
        return [row["epoch"] for row in csv.DictReader(handle)]


def test_trains_across_two_hosts(hosts: Hosts, work: Path) -> None:
    done = subprocess.run(_run(hosts, "--", *_train(2, "out-two"), cwd=work, port=29510), cwd=work,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("forklift run: 2 ranks on 2 hosts (checked in ")
    assert lines[1].split() == ["rank", "host", "local", "cpus", "node", "gpu"]
    assert lines[2].split()[:3] == ["0", "host1", "0"] and lines[3].split()[:3] == ["1", "host2", "0"]
    assert (
        lines[4].startswith("host1: env TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 ")
        and "--rdzv-endpoint 198.18." in lines[4]
        and "is_host=true" in lines[4]
    )
    assert "host1 [rank0] 2 ranks; rank 0 on CPUs" in done.stdout  # the layout's numbering is the rendezvous's
    assert "host1 [rank0] epoch 2/2:" in done.stdout and "[rank1] epoch" not in done.stdout
    assert _epochs(work / "out-two") == ["1", "2"]
    assert (work / "out-two" / "shapes-classifier.onnx").is_file()


def test_checks_name_the_host_and_what_differs(hosts: Hosts, work: Path, tmp_path: Path) -> None:
    """A second pair of hosts where host2 has an older forklift first on its Python path and cannot see the data."""
    real = Path(forklift.__file__).parent
    shadow = tmp_path / "old" / "forklift"
    shadow.mkdir(parents=True)
    for entry in real.iterdir():
        if entry.name != "__init__.py":
            (shadow / entry.name).symlink_to(entry)
    init = (real / "__init__.py").read_text().replace(f'"{forklift.__version__}"', '"0.0.9"')
    (shadow / "__init__.py").write_text(init)
    hidden = work / "only-on-host1"  # an empty folder over it on host2
    shutil.copytree(work / "data", hidden / "data", dirs_exist_ok=True)
    old = {"PYTHONPATH": str(shadow.parent)}
    with namespace_hosts(tmp_path / "hosts", 2, env={2: old}, hidden={2: [hidden]}) as odd:
        command = _run(odd, "--dry-run", "--", *_train(2, "out-x")[:3], "only-on-host1/data", *_train(2, "out-x")[4:],
                       cwd=work, port=29511)  # fmt: skip
        refused = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=120, check=False)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        said = refused.stderr.strip().splitlines()
        assert f"host2: forklift 0.0.9, but host1 has {forklift.__version__}" in said
        assert "host2: only-on-host1/data does not exist there" in said
        assert said[-1] == "forklift: error: 2 check(s) failed (see above; --skip-checks starts anyway)"
        assert refused.stdout == ""  # nothing laid out, nothing run
        skipped = subprocess.run([*command[:6], "--skip-checks", *command[6:]], cwd=work, capture_output=True,
                                 text=True, timeout=120, check=False)  # fmt: skip
        assert skipped.returncode == 0 and "2 ranks on 2 hosts" in skipped.stdout, skipped.stderr


def _rank_pid(hosts: Hosts, host: str) -> int | None:
    """The pid of the forklift rank on `host` (not torchrun's agent), or None."""
    for pid in hosts.pids(host):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"forklift.cli" in argv and b"torch.distributed.run" not in argv and b"train" in argv:
            return pid
    return None


def _wait_for_first_checkpoint(out: Path, running: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not (out / "checkpoints" / "last.pt").is_file():
        assert running.poll() is None, "the job ended before its first checkpoint"
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _no_rank_left(hosts: Hosts) -> None:
    deadline = time.monotonic() + 30
    while any(_rank_pid(hosts, name) for name in hosts.names):  # every rank on every host has ended
        assert time.monotonic() < deadline
        time.sleep(0.2)


def _kill_rank_after_first_checkpoint(hosts: Hosts, out: Path, running: subprocess.Popen[str]) -> None:
    _wait_for_first_checkpoint(out, running)
    pid = _rank_pid(hosts, "host2")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)


def test_a_killed_rank_stops_the_job_with_one_line(hosts: Hosts, work: Path) -> None:
    running = subprocess.Popen(_run(hosts, "--", *_train(40, "out-killed"), cwd=work, port=29512), cwd=work,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    _kill_rank_after_first_checkpoint(hosts, work / "out-killed", running)
    stdout, stderr = running.communicate(timeout=120)
    assert running.returncode == 2, stdout + stderr
    assert stderr.strip().splitlines()[-1] == (
        "forklift: error: rank 1 on host2 failed (killed by SIGKILL); stopped the other ranks"
    ), stderr[-3000:]
    _no_rank_left(hosts)


def test_sigterm_stops_every_rank_on_every_host(hosts: Hosts, work: Path) -> None:
    running = subprocess.Popen(_run(hosts, "--", *_train(40, "out-terminated"), cwd=work, port=29515), cwd=work,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    _wait_for_first_checkpoint(work / "out-terminated", running)
    running.send_signal(signal.SIGTERM)
    stdout, stderr = running.communicate(timeout=120)
    assert running.returncode == 128 + signal.SIGTERM, stdout + stderr
    assert stderr.strip().splitlines()[-1] == "forklift run: stopped by SIGTERM; every host's ranks ended"
    _no_rank_left(hosts)


def test_max_restarts_resumes_and_finishes(hosts: Hosts, work: Path) -> None:
    running = subprocess.Popen(_run(hosts, "--max-restarts", "1", "--", *_train(6, "out-restarted"), cwd=work,
                                    port=29513), cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)  # fmt: skip
    _kill_rank_after_first_checkpoint(hosts, work / "out-restarted", running)
    stdout, stderr = running.communicate(timeout=300)
    assert running.returncode == 0, stdout + stderr
    assert "host1 [rank0] restarted: resuming out-restarted from its last checkpoint" in stdout
    assert _epochs(work / "out-restarted") == ["1", "2", "3", "4", "5", "6"]
    assert (work / "out-restarted" / "shapes-classifier.onnx").is_file()


def test_emits_the_job_for_mpirun_slurm_and_kubernetes(hosts: Hosts, work: Path) -> None:
    def emit(kind: str) -> str:
        done = subprocess.run(_run(hosts, "--emit", kind, "--", *_train(2, "out-e"), cwd=work, port=29514),
                              cwd=work, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    ranks = emit("rankfile").splitlines()
    assert ranks[1:] == ["rank 0=host1 slot=0-1", "rank 1=host2 slot=0-1"]
    sbatch = emit("slurm")
    assert "#SBATCH --nodes=2" in sbatch and '--rdzv-endpoint "$head:29500"' in sbatch
    assert subprocess.run(["bash", "-n"], input=sbatch, text=True, check=False).returncode == 0
    job = yaml.safe_load(emit("k8s"))
    assert job["kind"] == "PyTorchJob" and job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["command"][:5] == ["python", "-m", "torch.distributed.run", "-m", "forklift.cli"]
