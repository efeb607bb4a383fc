"""A real Slurm job: a one-node cluster started here (Debian's munged, slurmctld and slurmd on ports of their own,
state in a temp folder, all stopped by pid), the sbatch script `forklift run --emit slurm` writes (asking no
host), submitted with sbatch: its two torchrun ranks train, and `forklift predict` loads the model they wrote."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import core_parts
import pytest
from helpers import CFGS, forklift_here, free_port, shared

from forklift.data.synth import synth_shapes

MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
pytestmark = pytest.mark.slow  # a cluster and a training job: a minute


def _binary(name: str) -> str:
    found = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None)
    if found is None:
        core_parts.missing(f"{name} is not installed (.ci/run installs slurmctld, slurmd, slurm-client and munge)")
    return str(found)


def _munge_answers() -> bool:
    with socket.socket(socket.AF_UNIX) as probe:
        return probe.connect_ex(str(MUNGE_SOCKET)) == 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment that reaches a one-node Slurm cluster (SLURM_CONF), its daemons stopped afterwards."""
    binaries = {name: _binary(name) for name in ("munged", "slurmctld", "slurmd", "sbatch", "sinfo")}
    if os.geteuid() != 0:
        core_parts.missing("the Slurm test starts slurmd, which runs as root")
    folder = tmp_path_factory.mktemp("slurm")
    host = socket.gethostname().split(".")[0]
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    conf = folder / "slurm.conf"
    conf.write_text(
        "\n".join([
            "ClusterName=forklift", f"SlurmctldHost={host}", f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}", "SlurmUser=root", "AuthType=auth/munge",
            f"StateSaveLocation={folder}/state", f"SlurmdSpoolDir={folder}/spool",
            f"SlurmctldPidFile={folder}/slurmctld.pid", f"SlurmdPidFile={folder}/slurmd.pid",
            f"SlurmctldLogFile={folder}/slurmctld.log", f"SlurmdLogFile={folder}/slurmd.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU", "ReturnToService=2", "MpiDefault=none",
            f"NodeName={host} CPUs={os.cpu_count()} RealMemory={memory * 9 // 10} State=UNKNOWN",
            f"PartitionName=main Nodes={host} Default=YES MaxTime=INFINITE State=UP",
        ]) + "\n"
    )  # fmt: skip
    (folder / "state").mkdir()
    (folder / "spool").mkdir()
    environment = {**os.environ, "SLURM_CONF": str(conf)}
    daemons: list[subprocess.Popen[bytes]] = []
    log = (folder / "daemons.log").open("ab")
    try:
        if not _munge_answers():  # munged as the munge user, on Debian's socket and key
            subprocess.run(["install", "-d", "-o", "munge", "-g", "munge", "-m", "0755", "/run/munge"], check=True)
            daemons.append(subprocess.Popen(["setpriv", "--reuid=munge", "--regid=munge", "--init-groups",
                                             binaries["munged"], "--foreground"], stdout=log, stderr=log))  # fmt: skip
            _wait(_munge_answers, "munged", folder)
        for daemon in ("slurmctld", "slurmd"):
            daemons.append(subprocess.Popen([binaries[daemon], "-D"], env=environment, stdout=log, stderr=log))
        _wait(lambda: _node_state(binaries["sinfo"], environment) == "idle", "the Slurm node", folder)
        yield environment
    finally:
        for daemon in reversed(daemons):
            daemon.terminate()
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
        log.close()


def _node_state(sinfo: str, environment: dict[str, str]) -> str:
    done = subprocess.run([sinfo, "-h", "-o", "%t"], env=environment, capture_output=True, text=True, check=False)
    return done.stdout.strip()


def _wait(ready, what: str, folder: Path, seconds: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted(folder.glob("*.log")))
            pytest.fail(f"{what} did not come up in {seconds:.0f} s:\n{logs}")
        time.sleep(0.5)


def _finished_state(job: str, environment: dict[str, str], seconds: float = 600) -> str:
    """The job's record once it has ended, polled every half second (`sbatch --wait` polls at growing intervals,
    up to half a minute after the job ended)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        shown = subprocess.run(["scontrol", "show", "job", "-o", job], env=environment, capture_output=True,
                               text=True, check=False).stdout  # fmt: skip
        if any(f"JobState={s} " in shown for s in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")):
            return shown
        time.sleep(0.5)
    pytest.fail(f"job {job} did not end in {seconds:.0f} s")


def test_the_emitted_sbatch_script_trains_two_ranks_on_slurm(
    cluster: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dog = shared("images/dog.jpg").resolve()
    monkeypatch.chdir(tmp_path)  # where the job runs: `forklift run` writes its folder into the script
    synth_shapes(tmp_path / "data", 16, 64, seed=0)
    train = ["forklift", "train", "--data", "data", "--cfg", str(CFGS / "tiny-detector.cfg"), "--epochs", "1",
             "--batch", "4", "--img", "64", "--device", "cpu", "out"]  # fmt: skip
    emitted = forklift_here("run", "--emit", "slurm", "--nproc-per-node", "2", "--port", str(free_port()), "--",
                            *train)  # fmt: skip  # no host named: no ssh
    script = tmp_path / "job.sbatch"
    script.write_text(emitted.stdout)
    assert "#SBATCH --nodes=1" in emitted.stdout and "--nproc-per-node 2" in emitted.stdout
    submit = ["sbatch", "--parsable", "--output", str(tmp_path / "job.out"), str(script)]
    job = subprocess.run(submit, env=cluster, capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    state = _finished_state(job.split(";")[0], cluster)
    output = (tmp_path / "job.out").read_text(errors="replace") if (tmp_path / "job.out").exists() else ""
    assert "JobState=COMPLETED" in state and "ExitCode=0:0" in state, f"{state}\n{output[-3000:]}"
    assert "= 2 ranks x 4)" in output, output[-3000:]  # the run's first line: both ranks met
    predicted = forklift_here("predict", tmp_path / "out", dog, "--json")
    assert json.loads(predicted.stdout)["status"] == "OK"
