"""ssh to the hosts of a `forklift run` job: ask each host for its facts, and run each host's part of the job with
its output streamed back line by line.

A host's part runs under a small guard (`GUARD`) that holds torchrun in a process group of its own and ends that
group when its stdin closes: when the launcher stops a job, or dies, or loses the connection, every rank on
every host stops, with no stray process left behind to hold the GPUs or the rendezvous port.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from forklift.errors import ForkliftError
from forklift.launcher import probe_script

PROBE_TIMEOUT_S = 60
KEPT_LINES = 400  # of each host's output, for the failure summary
GUARD = """
import os, signal, subprocess, sys, threading
child = subprocess.Popen(sys.argv[1:], start_new_session=True)
def stop_on_eof():
    sys.stdin.read()
    if child.poll() is None:
        os.killpg(child.pid, signal.SIGTERM)
        try:
            child.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
threading.Thread(target=stop_on_eof, daemon=True).start()
code = child.wait()
sys.exit(code if code >= 0 else 128 - code)
"""


@dataclass(frozen=True)
class Ssh:
    """How to reach the hosts: ssh with an optional config file and port, never asking for a password."""

    config: Path | None = None
    port: int | None = None

    def command(self, host: str, remote: str) -> list[str]:
        args = ["ssh", "-T", "-o", "BatchMode=yes"]
        if self.config is not None:
            args += ["-F", str(self.config)]
        if self.port is not None:
            args += ["-p", str(self.port)]
        return [*args, host, remote]

    def address(self, host: str) -> str:
        """The address ssh connects to for `host` (its config's HostName, else the name itself): what the other
        hosts use to reach this one."""
        args = ["ssh", "-G", *(["-F", str(self.config)] if self.config is not None else []), host]
        try:
            shown = subprocess.run(args, capture_output=True, text=True, timeout=10, check=True).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise ForkliftError(f"{host}: ssh cannot resolve it ({exc})") from exc
        return next((line.split()[1] for line in shown.splitlines() if line.startswith("hostname ")), host)


def probe(ssh: Ssh, host: str, *, python: str, workdir: str, args: list[str]) -> dict:
    """The host's facts (`probe_script`), read in `workdir` by `python` there; one line when it cannot answer."""
    remote = f"cd {shlex.quote(workdir)} && {shlex.quote(python)} - {shlex.join(args)}"
    script = Path(probe_script.__file__).read_text(encoding="utf-8")
    try:
        done = subprocess.run(ssh.command(host, remote), input=script, capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, check=False)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise ForkliftError(f"{host}: did not answer within {PROBE_TIMEOUT_S} s") from exc
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise ForkliftError(f"{host}: cannot run {python} in {workdir} over ssh: {said}")
    try:
        facts: dict = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError) as exc:
        raise ForkliftError(f"{host}: answered something that is not forklift's probe: {done.stdout[-200:]!r}") from exc
    return facts


@dataclass
class HostProcess:
    """One host's part of a running job: the ssh process and the last lines it printed."""

    host: str
    process: subprocess.Popen[str]
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=KEPT_LINES))
    readers: list[threading.Thread] = field(default_factory=list)

    def stop(self) -> None:
        """Close its stdin: the guard on the host ends torchrun and every rank there."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()


def start_host(ssh: Ssh, host: str, *, workdir: str, python: str, command: list[str],
               lock: threading.Lock) -> HostProcess:  # fmt: skip
    """Run `command` on `host` (in `workdir`, under the guard), its output printed as it comes, each line with
    the host in front."""
    remote = f"cd {shlex.quote(workdir)} && exec {shlex.quote(python)} -u -c {shlex.quote(GUARD)} {shlex.join(command)}"
    # ssh in a session of its own: Ctrl-C reaches the launcher alone, which stops the hosts and waits for their
    # ranks to end (ssh killed by the terminal's SIGINT would leave them ending unwatched)
    process = subprocess.Popen(ssh.command(host, remote), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, bufsize=1, start_new_session=True)  # fmt: skip
    running = HostProcess(host, process)
    for stream, sink in ((process.stdout, sys.stdout), (process.stderr, sys.stderr)):
        assert stream is not None
        reader = threading.Thread(target=_relay, args=(stream, sink, running, lock), daemon=True)
        reader.start()
        running.readers.append(reader)
    return running


def _relay(stream: IO[str], sink: IO[str], running: HostProcess, lock: threading.Lock) -> None:
    for line in stream:
        text = line.rstrip("\n")
        running.lines.append(text)
        with lock:
            print(f"{running.host} {text}", file=sink, flush=True)
