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
    max_image_bytes: int = 50 * MIB  # one image file
    max_video_bytes: int = 2048 * MIB  # one video file
    max_zip_bytes: int = 4096 * MIB  # one zip (an import of a data set or a model)
    max_batch_bytes: int = 4096 * MIB  # one image upload request, all its files together
    max_json_bytes: int = 16 * MIB  # the body of any other request
    session_hours: int = 12
    jobs_per_device: int = 1  # training jobs at once on the CPU and on each GPU (forklift.app.devices)
    login: bool = False  # accounts even on loopback: a machine several people log in to

    @property
    def local(self) -> bool:
        """Served on loopback only and no login asked for: one local user, no login (anyone who can reach it is
        on this machine)."""
        return is_loopback(self.host) and not self.login


def make_data_dir(path: Path) -> None:
    """The app's data directory, made its owner's alone (0700) where the app makes it: it holds every upload and
    the accounts' hashes, which the default umask left readable to every user of the machine. A folder that is
    there already keeps the permissions its owner gave it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir(mode=0o700, exist_ok=True)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def size_text(size: int) -> str:
    """A limit as a person reads it: whole MiB where it is some, else bytes."""
    if size >= MIB and size % MIB == 0:
        return f"{size // MIB} MiB"
    return f"{size / MIB:.1f} MiB" if size >= MIB else f"{size:,} bytes"
