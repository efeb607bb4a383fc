"""How an app instance runs: where its files and records are, who may use it, and its limits."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

MIB = 2**20


@dataclass(frozen=True)
class AppConfig:
    data_dir: Path
    db_url: str
    host: str = "127.0.0.1"
    port: int = 8080
    max_image_bytes: int = 50 * MIB
    max_video_bytes: int = 2048 * MIB
    max_zip_bytes: int = 4096 * MIB
    session_hours: int = 12
    jobs_per_device: int = 1  # training jobs at once on the CPU and on each GPU (forklift.app.devices)

    @property
    def local(self) -> bool:
        """Served on loopback only: one local user, no login (anyone who can reach it is on this machine)."""
        return is_loopback(self.host)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
