"""The hosts of a `forklift run` job: `-H host1:4,host2` or a hostfile, as mpirun and ddlrun took them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from forklift.errors import ForkliftError

HOSTFILE_LINE = re.compile(r"^(?P<name>[^\s:#]+)(?::(?P<colon>\d+)|\s+slots\s*=\s*(?P<slots>\d+))?\s*$")


@dataclass(frozen=True)
class HostSpec:
    """A host as the user named it (an ssh destination: a name, an ssh config alias or user@address) and the
    ranks it may run (None: as `--nproc-per-node` says)."""

    name: str
    slots: int | None = None


def parse_host_list(text: str) -> list[HostSpec]:
    """`-H host1:4,host2` -> the hosts in order; the first is where the rendezvous runs."""
    return _unique([_one(item.strip(), "-H") for item in text.split(",") if item.strip()], "-H")


def read_hostfile(path: Path) -> list[HostSpec]:
    """A hostfile: one host per line, `name`, `name:SLOTS` or `name slots=SLOTS` (mpirun's form); `#` comments."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ForkliftError(f"--hostfile {path}: cannot be read ({exc.strerror})") from exc
    hosts = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if text:
            hosts.append(_one(text, f"{path}:{number}"))
    return _unique(hosts, f"--hostfile {path}")


def _one(text: str, where: str) -> HostSpec:
    match = HOSTFILE_LINE.match(text)
    if match is None:
        raise ForkliftError(f"{where}: {text!r} is not HOST, HOST:SLOTS or 'HOST slots=SLOTS'")
    slots = match["colon"] or match["slots"]
    if slots is not None and int(slots) < 1:
        raise ForkliftError(f"{where}: {text!r}: slots must be at least 1")
    return HostSpec(match["name"], None if slots is None else int(slots))


def _unique(hosts: list[HostSpec], where: str) -> list[HostSpec]:
    if not hosts:
        raise ForkliftError(f"{where}: no hosts")
    names = [host.name for host in hosts]
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:
        raise ForkliftError(f"{where}: {twice} is named twice (give its ranks as {twice}:SLOTS)")
    return hosts
