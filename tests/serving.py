"""Starting a real `forklift serve` on loopback for tests: a free port, wait until healthy, stop it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A `forklift serve` subprocess; `url` is its base address."""

    def __init__(self, *args: str | Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "forklift.cli", "serve", *map(str, args), "--port", str(self.port)]
        self.log = Path(os.environ.get("TMPDIR", "/tmp")) / f"forklift-serve-{self.port}.log"
        self.process = subprocess.Popen(command, stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        self.wait_healthy()

    def wait_healthy(self, timeout: float = 120.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited {self.process.returncode}: {self.log.read_text()}")
            try:
                response = httpx.get(f"{self.url}/healthz", timeout=2)
                if response.status_code == 200:
                    return response.json()
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"server not healthy in {timeout} s: {self.log.read_text()}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode
