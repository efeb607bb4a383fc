"""`forklift run`: start one training job across hosts over ssh, as ddlrun did, on torchrun.

In order: ask every host for its facts in parallel (`remote.probe`; the first host also holds the rendezvous port
open while the others connect to it), check them (`checks`), lay out the ranks (`layout`) and print the table,
print each host's torchrun line, then run them all and stream every rank's output with its host and rank in
front. A host that fails stops the others; Ctrl-C or SIGTERM stops every rank on every host.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from forklift.deployment import scheduler
from forklift.deployment.kubernetes import RENDEZVOUS_PORT
from forklift.errors import ForkliftError
from forklift.launcher import checks, commands, layout
from forklift.launcher.hosts import HostSpec
from forklift.launcher.remote import HostProcess, Ssh, probe, start_host
from forklift.system.topology import Topology

PORT_CHECK_S = 5.0  # how long the first host holds the rendezvous port open for the others' test connections
STOP_GRACE_S = 30.0
EMITTERS = ("rankfile", "slurm", "k8s")
ROOT_CAUSE = re.compile(r"^\s*(?P<key>time|host|rank|exitcode)\s*:\s*(?P<value>.+?)\s*$")


@dataclass(frozen=True)
class LaunchOptions:
    hosts: list[HostSpec]
    nproc_per_node: int | None = None  # None: auto (layout.ranks_per_host)
    ssh: Ssh = field(default_factory=Ssh)
    port: int = RENDEZVOUS_PORT
    max_restarts: int = 0
    python: str = sys.executable
    workdir: str = os.getcwd()
    dry_run: bool = False
    skip_checks: bool = False
    emit: str | None = None
    nodes: int | None = None  # for a scheduler's job: how many nodes (None: one per host given, else 1)
    train_out: commands.TrainOut = lambda args: None  # OUT of a train command (the CLI's parser finds it)


def run_job(command: tuple[str, ...], options: LaunchOptions) -> int:
    """Check, lay out, print and run COMMAND across the hosts; returns the exit code (0: every rank succeeded)."""
    commands.worker_args(command)  # a COMMAND that cannot run is refused before any ssh
    if options.emit is not None and options.emit in scheduler.WRITERS:  # the scheduler places the ranks: no host
        print(_scheduler_job(command, options, options.emit), end="")
        return 0
    if not options.hosts:
        raise ForkliftError(f"forklift run: give the hosts (-H or --hostfile), or --emit {'|'.join(scheduler.WRITERS)}")
    started = time.perf_counter()
    names = [host.name for host in options.hosts]
    addresses = dict(zip(names, _parallel(options.ssh.address, names), strict=True))
    first = names[0]
    facts = _probe_all(command, options, addresses)
    if not options.skip_checks:
        found = checks.problems(facts, first)
        if found:
            for line in found:
                print(line, file=sys.stderr)
            raise ForkliftError(f"{len(found)} check(s) failed (see above; --skip-checks starts anyway)")
    job = commands.Job(command, len(names), f"{addresses[first]}:{options.port}", uuid.uuid4().hex[:12],
                       options.max_restarts, options.python, options.workdir)  # fmt: skip
    gpus = commands.uses_cuda(command)
    known = {name: _host_facts(name, addresses, facts) for name in names}
    counts = {host.name: layout.ranks_per_host(known[host.name], options.nproc_per_node, host.slots)
              for host in options.hosts}  # fmt: skip
    slots = layout.lay_out([(known[name], counts[name]) for name in names], gpus=gpus)
    if options.emit is not None:  # the rankfile: the one the hosts' facts shape
        print(layout.rankfile(slots), end="")
        return 0
    ranks, hosts = f"{len(slots)} rank{'s' * (len(slots) != 1)}", f"{len(names)} host{'s' * (len(names) != 1)}"
    print(f"forklift run: {ranks} on {hosts} (checked in {time.perf_counter() - started:.1f} s)")
    print(layout.describe_layout(slots))
    lines = {name: commands.torchrun_args(job, places=layout.host_places(slots, name), local_addr=addresses[name],
                                          is_host=name == first) for name in names}  # fmt: skip
    for name in names:
        print(f"{name}: {shlex.join(lines[name])}", flush=True)
    if options.dry_run:
        return 0
    return _supervise([(name, lines[name]) for name in names], options)


def _parallel(function: Callable[[str], Any], names: list[str]) -> list[Any]:
    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        return list(pool.map(function, names))


def _probe_all(command: tuple[str, ...], options: LaunchOptions, addresses: dict[str, str]) -> dict[str, dict]:
    """Every host's facts, asked in parallel; with the checks on, the paths the command needs (on every host, and
    on rank 0's those it alone reads) and the port."""
    names = [host.name for host in options.hosts]
    rank_zero = layout.rank_zero_host(addresses)

    def ask(name: str) -> dict:
        args: list[str] = []
        if not options.skip_checks:
            paths = commands.needed_paths(command)
            if name == rank_zero:
                paths += commands.rank_zero_paths(command, options.train_out)
            for path in paths:
                args += ["--path", path]
            if name == names[0]:
                args += ["--listen", str(options.port), str(PORT_CHECK_S), "--expect", str(len(names) - 1)]
            else:
                args += ["--connect", addresses[names[0]], str(options.port), str(PORT_CHECK_S)]
        return probe(options.ssh, name, python=options.python, workdir=options.workdir, args=args)

    return dict(zip(names, _parallel(ask, names), strict=True))


def _host_facts(name: str, addresses: dict[str, str], facts: dict[str, dict]) -> layout.HostFacts:
    seen = facts[name]
    if "error" in seen["topology"]:
        raise ForkliftError(f"{name}: cannot read its CPU topology: {seen['topology']['error']}")
    return layout.HostFacts(name, addresses[name], Topology.from_json(seen["topology"], name),
                            tuple(gpu["node"] for gpu in seen.get("gpus", [])))  # fmt: skip


def _scheduler_job(command: tuple[str, ...], options: LaunchOptions, writer: str) -> str:
    """The job as a scheduler takes it, written without asking any host: `nodes` nodes of `--nproc-per-node`
    ranks (1 where not given; with CUDA, a GPU per rank)."""
    nproc = options.nproc_per_node or 1
    job = scheduler.SchedulerJob(
        rank_args=tuple(commands.worker_args(command)),
        nodes=options.nodes or len(options.hosts) or 1,
        nproc=nproc,
        gpus=nproc if commands.uses_cuda(command) else 0,
        port=options.port,
        max_restarts=options.max_restarts,
        python=options.python,
        workdir=options.workdir,
    )
    return scheduler.WRITERS[writer](job)


def _supervise(lines: list[tuple[str, list[str]]], options: LaunchOptions) -> int:
    """Run every host's torchrun; the first host to fail (or a signal) stops the rest. Returns 0 when all end
    well, 128 + the signal when stopped by one; a failure raises one line naming the rank that failed first."""
    lock = threading.Lock()
    running = [start_host(options.ssh, name, workdir=options.workdir, python=options.python, command=line,
                          lock=lock) for name, line in lines]  # fmt: skip
    stopped: list[int] = []

    def on_signal(number: int, frame: FrameType | None) -> None:
        stopped.append(number)
        for host in running:
            host.stop()

    previous = {number: signal.signal(number, on_signal) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        failed = _wait_first_failure(running)
        if failed is not None:
            for host in running:
                host.stop()
        deadline = time.monotonic() + STOP_GRACE_S
        for host in running:
            try:
                host.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                host.process.kill()
            for reader in host.readers:
                reader.join(5)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if stopped:
        print(f"forklift run: stopped by {signal.Signals(stopped[0]).name}; every host's ranks ended", file=sys.stderr)
        return 128 + stopped[0]
    if failed is not None:
        raise ForkliftError(_failure(failed, running))
    return 0


def _wait_first_failure(running: list[HostProcess]) -> HostProcess | None:
    """Wait until every host ends well (None) or one fails (that one)."""
    while True:
        codes = [host.process.poll() for host in running]
        failed = next((host for host, code in zip(running, codes, strict=True) if code not in (None, 0)), None)
        if failed is not None or all(code == 0 for code in codes):
            return failed
        time.sleep(0.1)


def _failure(failed: HostProcess, running: list[HostProcess]) -> str:
    """One line on the failure: the rank torchrun reported as the first to fail (the earliest root cause of any
    host), its host and exit code, or the host whose torchrun ended when none was reported."""
    causes = [cause for host in running for cause in _root_causes(host)]
    if not causes:
        return (
            f"{failed.host}: its part of the job ended with exit code {failed.process.returncode}; stopped the others"
        )
    first = min(causes, key=lambda cause: cause.get("time", ""))
    code = first.get("exitcode", "?")
    how = f"exit code {code}"
    number = code.split()[0]
    if number.lstrip("-").isdigit() and int(number) < 0:
        how = f"killed by {signal.Signals(-int(number)).name}"
    return f"rank {first.get('rank', '?').split()[0]} on {first['on']} failed ({how}); stopped the other ranks"


def _root_causes(host: HostProcess) -> list[dict[str, str]]:
    """The failures torchrun's agent on `host` reported ("Root Cause" / "Other Failures" blocks)."""
    causes: list[dict[str, str]] = []
    for line in host.lines:
        match = ROOT_CAUSE.match(line)
        if match is None:
            continue
        if match["key"] == "time":
            causes.append({"on": host.host})
        if causes:
            causes[-1][match["key"]] = match["value"]
    return [cause for cause in causes if "exitcode" in cause]
