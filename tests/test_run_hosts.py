"""`forklift run` across real hosts: network namespaces on this machine, each with its own sshd and address
(`namespace_hosts`). It trains across them, runs any script's ranks where the printed layout says, its checks
catch a host with another forklift, a missing path and a taken port (also in a dry run, over another ssh port), a
killed rank stops the job with one line, SIGTERM and Ctrl-C stop every rank, `--max-restarts` resumes and
finishes, and a forklift.ml fit across the hosts ends with one process's model."""

from __future__ import annotations

import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import CFGS
from namespace_hosts import Hosts, namespace_hosts, require_namespace_hosts
from sklearn.datasets import dump_svmlight_file

import forklift
from forklift.data.synth import synth_shapes
from forklift.ml import LogisticRegression
from forklift.ml.datasets import make_sparse_clicks
from forklift.system.topology import current, parse_cpu_list

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


def _run(hosts: Hosts, *args: str, cwd: Path, port: int, at: Sequence[str] = ()) -> list[str]:
    """`forklift run` on `hosts`: one rank on each, or as the options `at` say (-H, --hostfile, --nproc-per-node)."""
    at = at or ["-H", ",".join(hosts.names), "--nproc-per-node", "1"]
    return [sys.executable, "-m", "forklift.cli", "run", *at, "--ssh-config", str(hosts.ssh_config), "--port",
            str(port), *args]  # fmt: skip


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
        and " -m forklift.distributed.pinned 0-1@0 -m forklift.cli train " in lines[4]
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


WHERE = """
import os
print("runs on", os.environ["RANK"], sorted(os.sched_getaffinity(0)), os.environ["OMP_NUM_THREADS"], flush=True)
"""


def test_any_script_runs_where_the_layout_says(hosts: Hosts, work: Path) -> None:
    """A plain script's ranks, two on host1 and one on host2 by a hostfile's HOST:SLOTS: each runs on the CPUs of
    its row of the printed layout, with as many threads."""
    (work / "where.py").write_text(WHERE)
    (work / "hosts.txt").write_text("# two ranks on host1, one on host2\nhost1:2\nhost2:1\n")
    done = subprocess.run(_run(hosts, "--", "python", "where.py", cwd=work, port=29516, at=["--hostfile", "hosts.txt"]),
                          cwd=work, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("forklift run: 3 ranks on 2 hosts (checked in ")
    rows = [line.split() for line in lines[2:5]]  # rank, host, local, cpus, node, gpu
    assert [row[:3] for row in rows] == [["0", "host1", "0"], ["1", "host1", "1"], ["2", "host2", "0"]]
    assert not set(parse_cpu_list(rows[0][3])) & set(parse_cpu_list(rows[1][3]))  # host1's ranks share no CPU
    seen = {}
    for line in lines:
        match = re.fullmatch(r"(host\d) \[rank(\d)\] runs on (\d) \[([\d, ]+)\] (\d+)", line)
        if match is not None:
            assert match[2] == match[3]
            seen[match[3]] = (match[1], [int(cpu) for cpu in match[4].split(", ")], int(match[5]))
    cpus = {row[0]: parse_cpu_list(row[3]) for row in rows}
    assert seen == {row[0]: (row[1], cpus[row[0]], len(cpus[row[0]])) for row in rows}, done.stdout


def test_a_linear_model_fits_across_two_hosts(hosts: Hosts, work: Path) -> None:
    """forklift.ml across hosts: each rank reads its part of one libsvm file and both end with the model one
    process fits (truncated Newton, its products added over the network)."""
    X, y = make_sparse_clicks(n_samples=4000, n_features=300, n_fields=6, random_state=7)
    dump_svmlight_file(X, y, str(work / "clicks.svm"), zero_based=False)
    shutil.copy(Path(__file__).with_name("ml_cocoa_worker.py"), work / "ml_worker.py")
    (work / "ml-out").mkdir()
    command = _run(hosts, "--", "python", "ml_worker.py", "clicks.svm", "ml-out", "logistic", "1", cwd=work, port=29519)
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    rank0, rank1 = (np.load(work / "ml-out" / f"coef-{rank}.npy") for rank in (0, 1))
    np.testing.assert_array_equal(rank0, rank1)
    rows = [int(np.load(work / "ml-out" / f"rows-{rank}.npy")[0]) for rank in (0, 1)]
    assert sum(rows) == X.shape[0] and min(rows) > 0.4 * X.shape[0]
    alone = np.ravel(LogisticRegression(tol=1e-9, max_iter=5000).fit(X, y).coef_)
    np.testing.assert_allclose(rank0, alone, atol=2e-4 * np.abs(alone).max())


HOLD_PORT = """
import socket, sys, time
server = socket.create_server(("", int(sys.argv[1])))
print("holding", flush=True)
time.sleep(120)
"""


def test_a_checked_dry_run_over_another_ssh_port(work: Path, tmp_path: Path) -> None:
    """Hosts whose sshd listens on port 2222 only, where host2 does not see OUT: a resumed run needs OUT's
    checkpoint on rank 0's host alone (rank 0 reads it and sends it to the others). The dry run checks, lays out
    (auto: one rank per NUMA node on hosts without GPUs) and prints, and runs nothing."""
    resumable = work / "resumable"
    (resumable / "out" / "checkpoints").mkdir(parents=True, exist_ok=True)
    (resumable / "out" / "checkpoints" / "last.pt").write_bytes(b"")
    with namespace_hosts(tmp_path / "hosts", 2, port=2222, hidden={2: [resumable]}) as other:

        def dry_run(*args: str, out: str = "resumable/out") -> subprocess.CompletedProcess[str]:
            command = _run(other, *args, "--dry-run", "--", "forklift", "train", "--resume", out, cwd=work,
                           port=29517, at=["-H", "host1,host2", "--nproc-per-node", "auto"])  # fmt: skip
            return subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=120, check=False)

        unreached = dry_run()  # no --ssh-port: ssh tries port 22
        assert unreached.returncode == 2 and "port 22: Connection refused" in unreached.stderr, unreached.stderr
        done = dry_run("--ssh-port", "2222")
        assert done.returncode == 0, done.stdout + done.stderr
        ranks = 2 * len(current().nodes)
        lines = done.stdout.splitlines()
        assert lines[0].startswith(f"forklift run: {ranks} ranks on 2 hosts (checked in ") and len(lines) == 4 + ranks
        assert lines[-2].startswith("host1: env ") and lines[-1].startswith("host2: env ")
        assert not any(re.match(r"host\d \[rank", line) for line in lines) and done.stderr == ""  # nothing ran

        missing = dry_run("--ssh-port", "2222", out="nowhere")
        assert missing.returncode == 2 and missing.stdout == ""
        assert missing.stderr.splitlines()[:-1] == ["host1: nowhere/checkpoints/last.pt does not exist there"]
        holder = other.popen_in("host1", [sys.executable, "-c", HOLD_PORT, "29517"], stdout=subprocess.PIPE, text=True)
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        taken = dry_run("--ssh-port", "2222")
        assert taken.returncode == 2 and taken.stderr.splitlines()[0].startswith(
            "host1: rendezvous: port 29517 is taken"
        ), taken.stderr


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


def _left_running(hosts: Hosts) -> list[str]:
    """The command lines of what runs on the hosts besides sshd: a job's ranks, torchrun agents and guards."""
    left = []
    for pid in (pid for name in hosts.names for pid in hosts.pids(name)):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv[0].startswith(b"sshd"):
            left.append(b" ".join(argv).decode(errors="replace")[:200])
    return left


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


@pytest.mark.parametrize(("how", "port"), [("SIGTERM", 29515), ("Ctrl-C", 29518)])
def test_a_signal_stops_every_rank_on_every_host(hosts: Hosts, work: Path, how: str, port: int) -> None:
    """SIGTERM to forklift run, or Ctrl-C: SIGINT to the terminal's whole foreground group, ssh clients too."""
    out = f"out-{how}"
    running = subprocess.Popen(_run(hosts, "--", *_train(40, out), cwd=work, port=port), cwd=work,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)  # fmt: skip
    _wait_for_first_checkpoint(work / out, running)
    number = signal.SIGTERM if how == "SIGTERM" else signal.SIGINT
    if how == "SIGTERM":
        running.send_signal(number)
    else:
        os.killpg(running.pid, number)
    stdout, stderr = running.communicate(timeout=120)
    assert running.returncode == 128 + number, stdout + stderr
    assert stderr.strip().splitlines()[-1] == f"forklift run: stopped by {number.name}; every host's ranks ended"
    assert _left_running(hosts) == []  # the ranks, their torchrun and its guard ended before it said so


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
    assert "#SBATCH --nodes=2" in sbatch and '--rdzv-endpoint "$head:29514"' in sbatch  # --port
    assert subprocess.run(["bash", "-n"], input=sbatch, text=True, check=False).returncode == 0
    service, job = yaml.safe_load_all(emit("k8s"))
    assert service["spec"]["clusterIP"] == "None" and job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:3] == ["python", "-m", "torch.distributed.run"]
    assert container["args"][:2] == ["-m", "forklift.cli"]
    assert "forklift-train-0.forklift-train:29514" in container["command"]  # --port
