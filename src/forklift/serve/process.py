"""Starting `forklift serve` as a child process on loopback, waiting until healthy, stopping it cleanly."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import httpx

from forklift.errors import ForkliftError
from forklift.serve.listening import local_url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_answering(url: str, process: subprocess.Popen, log: Path, timeout: float = 180.0) -> httpx.Response:
    """Poll `url` until it answers 200 and return that answer; an error with the process's output if it dies first
    or does not answer within `timeout` (a server loading models takes seconds to bind its port)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ForkliftError(f"{url}: the process exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            response = httpx.get(url, timeout=2)
            if response.status_code == 200:
                return response
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise ForkliftError(f"{url}: not answering after {timeout:.0f} s: {log.read_text()[-2000:]}")


_HELD = {"depth": 0, "pending": False}  # a start and its record under way, and an interrupt that came meanwhile


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """A child started and recorded as one step: an interrupt that comes meanwhile (within `sigterm_as_interrupt`)
    is raised after it, so that whatever stops the children knows this one (raised inside `Popen`, or before its
    pid was kept, it left the child serving, unknown)."""
    _HELD["depth"] += 1
    try:
        yield
    finally:
        _HELD["depth"] -= 1
        if not _HELD["depth"] and _HELD["pending"]:
            _HELD["pending"] = False
            raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (`kill`, a service manager) raised as Ctrl-C's KeyboardInterrupt within the block, so the servers
    it starts are stopped as on Ctrl-C: SIGTERM's default ends this process alone and leaves them serving. Either
    signal waits for a child being started to be recorded; a second SIGTERM does not cut the stopping short."""
    stopping = False

    def interrupt(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        if signum == signal.SIGTERM and stopping:
            return
        stopping = True
        if _HELD["depth"]:
            _HELD["pending"] = True
            return
        raise KeyboardInterrupt

    previous = {number: signal.signal(number, interrupt) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


class ServerProcess:
    """A `forklift serve` child; `url` is its base address, its output goes to `log`."""

    def __init__(
        self, *args: str | Path, host: str = "127.0.0.1", port: int | None = None, timeout: float = 180.0
    ) -> None:
        self.port = port or free_port()
        self.url = local_url(host, self.port)
        command = [sys.executable, "-m", "forklift.cli", "serve", *map(str, args), "--host", host, "--port",
                   str(self.port)]  # fmt: skip
        self.log = Path(tempfile.gettempdir()) / f"forklift-serve-{self.port}.log"  # removed when it is stopped
        try:
            with self.log.open("w") as out, interrupts_held():
                self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        except BaseException:  # an interrupt held while it started: stopped, as it is known now
            if hasattr(self, "process"):
                self.stop()
            raise
        self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float = 180.0) -> dict:
        """The /healthz facts once it answers 200; an error with the server's output if it dies or hangs."""
        try:
            return wait_until_answering(f"{self.url}/healthz", self.process, self.log, timeout).json()
        except BaseException:  # Ctrl-C while it loads too: never left serving
            self.stop()
            raise

    def stop(self) -> int:
        """SIGTERM (drain), then wait; the exit code. Its log is removed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.unlink(missing_ok=True)
        return self.process.returncode

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
