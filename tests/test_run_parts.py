"""`forklift run`'s parts that need no hosts: the checks' lines, what a command needs where, the torchrun and
Slurm lines, and the wrapper that pins each rank where the layout says."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import yaml
from helpers import forklift_here, sandbox

from forklift.cli.distributed import train_out
from forklift.deployment.scheduler import SchedulerJob, slurm_script
from forklift.distributed import pinned
from forklift.distributed.places import PLACE_VARIABLE, Place, format_place, parse_place
from forklift.errors import ForkliftError
from forklift.launcher.checks import problems
from forklift.launcher.commands import Job, rank_zero_paths, torchrun_args, uses_cuda
from forklift.launcher.layout import rank_zero_host
from forklift.system.topology import format_cpu_list

TRAIN = ("forklift", "train", "--data", "data", "--cfg", "tiny.cfg", "out")


def _facts(**changed: Any) -> dict[str, Any]:
    """A host's facts as the probe reports them, with `changed` ones."""
    facts = {"python": "3.11.7", "forklift": "0.1.0", "torch": "2.14.1", "executable": "/usr/bin/python3",
             "topology": sandbox(8).to_json(), "gpus": [{"name": "H100", "node": 0}], "paths": {"data": True},
             "port": {"reached": True}}  # fmt: skip
    return facts | changed


MISMATCHES = {
    "topology": ({"topology": sandbox(2).to_json()}, ["2 threads per core, but host1 has", "8 threads per core"]),
    "unreadable topology": ({"topology": {"error": "OSError: no sysfs"}}, ["cannot read its CPU topology: OSError"]),
    "GPUs": ({"gpus": []}, ["no GPU, but host1 has 1 GPU (H100)"]),
    "Python": ({"python": "3.12.1"}, ["python 3.12.1, but host1 has 3.11.7"]),
    "torch": ({"torch": "2.5.0"}, ["torch 2.5.0, but host1 has 2.14.1"]),
    "no torch": ({"torch": None}, ["torch is not installed for /usr/bin/python3"]),
    "forklift": ({"forklift": "0.0.9"}, ["forklift 0.0.9, but host1 has 0.1.0"]),
    "missing path": ({"paths": {"data": False}}, ["data does not exist there"]),
    "port unreachable": ({"port": {"reached": False, "error": "198.18.0.11:29500 not reachable (No route to host)"}},
                         ["rendezvous: 198.18.0.11:29500 not reachable (No route to host)"]),
}  # fmt: skip


@pytest.mark.parametrize("kind", MISMATCHES)
def test_each_mismatch_is_one_line_naming_the_host_and_what_differs(kind: str) -> None:
    changed, said = MISMATCHES[kind]
    first = _facts(port={"listened": True, "connections": 2})
    (line,) = problems({"host1": first, "host2": _facts(**changed), "host3": _facts()}, "host1")
    assert line.startswith("host2: ") and all(part in line for part in said), line


def test_a_taken_port_is_the_first_hosts_line() -> None:
    taken = _facts(port={"listened": False, "error": "port 29500 is taken (Address already in use)"})
    assert problems({"host1": taken, "host2": _facts()}, "host1") == [
        "host1: rendezvous: port 29500 is taken (Address already in use)"
    ]
    assert problems({"host1": _facts(), "host2": _facts()}, "host1") == []


def test_resuming_needs_the_checkpoint_on_the_host_of_rank_zero_only() -> None:
    assert rank_zero_paths(("forklift", "train", "--resume", "out/run"), train_out) == ["out/run/checkpoints/last.pt"]
    wherever = ("forklift", "train", "--data", "d", "out/run", "--resume", "--device", "cuda")  # OUT not last
    assert rank_zero_paths(wherever, train_out) == ["out/run/checkpoints/last.pt"]
    assert rank_zero_paths(TRAIN, train_out) == []
    assert rank_zero_paths(("python", "train.py", "--resume", "x"), train_out) == []
    # the rendezvous numbers hosts by address as text: 10.0.0.10 comes before 10.0.0.2
    assert rank_zero_host({"b-host": "10.0.0.2", "a-host": "10.0.0.10"}) == "a-host"


def test_cuda_is_seen_in_either_form_of_device() -> None:
    for device in (("--device", "cuda"), ("--device", "cuda:1"), ("--device=cuda",), ("--device=cuda:0",)):
        assert uses_cuda((*TRAIN, *device)), device
    for device in ((), ("--device", "cpu"), ("--device=cpu",), ("--data", "cuda-images")):
        assert not uses_cuda((*TRAIN, *device)), device


def _job(port: int) -> Job:
    return Job(TRAIN, 2, f"198.18.0.11:{port}", "abc", 0, "/usr/bin/python3", "/work")


def test_slurm_uses_the_rendezvous_port_given() -> None:
    job = SchedulerJob(("-m", "forklift.cli", "train"), nodes=2, nproc=2, gpus=0, port=29514, max_restarts=0,
                       python="/usr/bin/python3", workdir="/work")  # fmt: skip
    sbatch = slurm_script(job)
    assert '--rdzv-endpoint "$head:29514"' in sbatch and "29500" not in sbatch


def test_a_schedulers_job_is_written_without_hosts_and_hosts_are_asked_for_otherwise() -> None:
    train = ["--", "forklift", "train", "--data", "d", "--cfg", "c.cfg", "out"]
    sbatch = forklift_here("run", "--emit", "slurm", "--nodes", "3", "--nproc-per-node", "2", *train).stdout
    assert "#SBATCH --nodes=3" in sbatch and "#SBATCH --exclusive" in sbatch and "--nproc-per-node 2" in sbatch
    job = yaml.safe_load(forklift_here("run", "--emit", "pytorchjob", "--nodes", "2", *train).stdout)
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2 and job["spec"]["nprocPerNode"] == "1"
    for args, said in ((train, "give the hosts (-H or --hostfile)"), (["--nodes", "2", *train], "only for --emit")):
        refused = forklift_here("run", *args, check=False)
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr


def test_each_host_runs_its_ranks_through_the_wrapper_with_its_places() -> None:
    line = torchrun_args(_job(29500), places=[Place((0, 1), 0), Place((2, 3), 1, 1)], local_addr="198.18.0.11",
                         is_host=True)  # fmt: skip
    assert line[line.index("--nproc-per-node") + 1] == "2"
    assert line[-11:] == ["-m", "forklift.distributed.pinned", "0-1@0/2-3@1:1", "-m", "forklift.cli", *TRAIN[1:]]


def test_places_as_text() -> None:
    for place in (Place((0, 1, 2, 3, 8), 0), Place((4,), 1, 3)):
        assert parse_place(format_place(place), "test") == place
    assert format_place(Place((0, 1, 2, 3, 8), 0)) == "0-3,8@0"
    for bad in ("0-3", "0-3@", "a@0", "3-1@0", "0@0:x"):
        with pytest.raises(ForkliftError, match=f"test: '{bad}' is not"):
            parse_place(bad, "test")


PRINT_PLACE = """
import os
from forklift.distributed.ranks import Ranks, my_place
print(sorted(os.sched_getaffinity(0)), os.environ["OMP_NUM_THREADS"], os.environ["MKL_NUM_THREADS"])
print(my_place(Ranks(rank=1, world=2, local_rank=1, local_world=2), cuda=False))
"""


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_a_rank_runs_pinned_to_its_place_and_forklift_keeps_that_place() -> None:
    """The wrapper's rank is on its CPUs with as many threads, then execs the command; forklift's own ranks take
    the same place (pinned, they would lay out again on the one CPU they see)."""
    allowed = sorted(os.sched_getaffinity(0))
    places = [Place(tuple(allowed[:-1]) or (allowed[0],), 0), Place((allowed[-1],), 0)]
    env = os.environ | {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    done = subprocess.run([sys.executable, *pinned.wrapped(places, ["-c", PRINT_PLACE])], env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    affinity, place = done.stdout.splitlines()
    assert affinity == f"[{allowed[-1]}] 1 1"
    assert place == repr(Place((allowed[-1],), 0))


def test_the_wrapper_refuses_in_one_line() -> None:
    def run(places: str, **env: str) -> str:
        done = subprocess.run([sys.executable, "-m", pinned.MODULE, places, "-c", "print('ran')"], env=os.environ | env,
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
        return done.stderr

    assert "LOCAL_RANK and LOCAL_WORLD_SIZE are not set" in run("0@0")
    assert "1 places for the 2 ranks torchrun started here" in run("0@0", LOCAL_RANK="0", LOCAL_WORLD_SIZE="2")
    unknown = max(os.sched_getaffinity(0)) + 64
    assert f"place {unknown}@0: cannot run on its CPUs" in run(f"{unknown}@0", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")


def test_pinning_sets_threads_and_prefers_the_places_memory_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory binding is the serve workers' own (libnuma); this machine may have one node, so it is watched."""
    import forklift.system.pinning

    pinned_to: list[tuple[int, ...]] = []
    nodes: list[int] = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: pinned_to.append(tuple(cpus)))
    monkeypatch.setattr(forklift.system.pinning, "bind_memory", nodes.append)
    for name in (*forklift.system.pinning.THREAD_VARIABLES, PLACE_VARIABLE):
        monkeypatch.setenv(name, "unset")
    pinned.pin(Place((8, 9, 10, 11), 1))
    assert pinned_to == [(8, 9, 10, 11)] and nodes == [1]
    assert [os.environ[name] for name in forklift.system.pinning.THREAD_VARIABLES] == ["4", "4", "4"]
    assert os.environ[PLACE_VARIABLE] == f"{format_cpu_list((8, 9, 10, 11))}@1"
