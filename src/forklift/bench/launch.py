"""Starting `forklift serve` as a child process on loopback, waiting until healthy, stopping it cleanly."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from forklift.errors import ForkliftError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A `forklift serve` child; `url` is its base address, its output goes to `log`."""

    def __init__(self, *args: str | Path, port: int | None = None, timeout: float = 180.0) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "forklift.cli", "serve", *map(str, args), "--port", str(self.port)]
        self.log = Path(tempfile.gettempdir()) / f"forklift-serve-{self.port}.log"
        with self.log.open("w") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float = 180.0) -> dict:
        """The /healthz facts once it answers 200; an error with the server's output if it dies or hangs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ForkliftError(f"forklift serve exited with {self.process.returncode}: {self.log.read_text()}")
            try:
                response = httpx.get(f"{self.url}/healthz", timeout=2)
                if response.status_code == 200:
                    return response.json()
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise ForkliftError(f"forklift serve was not healthy within {timeout:.0f} s: {self.log.read_text()}")

    def stop(self) -> int:
        """SIGTERM (drain), then wait; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
