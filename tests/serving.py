"""Real `forklift serve` processes on loopback for tests (the same launcher `forklift sweep` uses)."""

from forklift.bench.launch import ServerProcess as Server
from forklift.bench.launch import free_port

__all__ = ["Server", "free_port"]
