"""CPU topology: which CPUs share a core, a socket, a NUMA node; read from sysfs, `lscpu -p` or `lscpu | grep NUMA`.

Placement needs three facts per CPU: its core (SMT siblings share a core's execution units), its NUMA node (memory
is fastest from the node's own CPUs) and whether it is online. Every reader here produces the same `Topology`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from forklift.errors import ForkliftError

SYSFS = Path("/sys")
LSCPU_P_COLUMNS = ("CPU", "CORE", "SOCKET", "NODE")  # what `lscpu -p` prints first when no header names them
SMT_STRIDES = (2, 4, 8)  # hardware threads per core that the NUMA-text reader may infer from numbering holes
NUMA_COUNT = re.compile(r"NUMA node\(s\):\s*(\d+)$")
NUMA_NODE = re.compile(r"NUMA node(\d+) CPU\(s\):\s*(.*)$")


def parse_cpu_list(text: str, source: str = "CPU list") -> list[int]:
    """`0-7,16-23` -> [0..7, 16..23]: the kernel's cpulist format (sysfs, lscpu, --cpuset-cpus), sorted."""
    text = text.strip()
    if not text:
        return []
    cpus: set[int] = set()
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\s*-\s*(\d+))?\s*", part)
        if match is None or int(match[2] or match[1]) < int(match[1]):
            raise ForkliftError(f"{source}: {text!r} is not a CPU list like 0-7,16-23")
        cpus.update(range(int(match[1]), int(match[2] or match[1]) + 1))
    return sorted(cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 3, 8] -> `0-3,8`: the inverse of parse_cpu_list, short enough for cpusets and for people."""
    runs: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{first}-{last}" if last > first else f"{first}" for first, last in runs)


@dataclass(frozen=True)
class Cpu:
    """One logical CPU (a hardware thread) and where it sits; `core` is unique within its socket."""

    id: int
    core: int
    socket: int
    node: int
    online: bool = True


@dataclass(frozen=True)
class Topology:
    """The CPUs of a machine, or of what a process may use, with the groupings placement needs.

    Everything derived counts online CPUs only: an offline CPU can run nothing.
    """

    cpus: tuple[Cpu, ...]
    source: str
    cores_known: bool = True  # False: the source names no cores (NUMA text without SMT holes), each CPU counted one

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.cpus, key=lambda cpu: cpu.id))
        twice = next((a.id for a, b in pairwise(ordered) if a.id == b.id), None)
        if twice is not None:
            raise ForkliftError(f"{self.source}: CPU {twice} is listed twice")
        if not any(cpu.online for cpu in ordered):
            raise ForkliftError(f"{self.source}: no online CPUs")
        object.__setattr__(self, "cpus", ordered)

    @property
    def online_cpus(self) -> list[int]:
        return [cpu.id for cpu in self.cpus if cpu.online]

    @property
    def sockets(self) -> list[int]:
        return sorted({cpu.socket for cpu in self.cpus if cpu.online})

    @property
    def nodes(self) -> dict[int, list[int]]:
        """NUMA node -> its online CPUs."""
        nodes: dict[int, list[int]] = {}
        for cpu in self.cpus:
            if cpu.online:
                nodes.setdefault(cpu.node, []).append(cpu.id)
        return dict(sorted(nodes.items()))

    @property
    def cores(self) -> dict[tuple[int, int], list[int]]:
        """(socket, core) -> its online CPUs: the SMT siblings that share the core's execution units."""
        cores: dict[tuple[int, int], list[int]] = {}
        for cpu in self.cpus:
            if cpu.online:
                cores.setdefault((cpu.socket, cpu.core), []).append(cpu.id)
        return cores

    @property
    def threads_per_core(self) -> int:
        """Online SMT threads of the busiest core (what lscpu calls threads per core)."""
        return max(len(siblings) for siblings in self.cores.values())

    def node_cores(self, node: int) -> list[list[int]]:
        """The cores of a NUMA node, each as its online CPUs, in CPU order."""
        nodes = {cpu.id: cpu.node for cpu in self.cpus}
        cores = ([cpu for cpu in siblings if nodes[cpu] == node] for siblings in self.cores.values())
        return [siblings for siblings in cores if siblings]

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "sockets": self.sockets,
            "nodes": {str(node): cpus for node, cpus in self.nodes.items()},
            "cores": len(self.cores),
            "threads_per_core": self.threads_per_core,
            "online": self.online_cpus,
            "cpus": [asdict(cpu) for cpu in self.cpus],
        }

    @staticmethod
    def from_json(saved: dict[str, Any], source: str | None = None) -> Topology:
        """The topology `to_json` wrote (another host's, as `forklift run` reads it over ssh)."""
        try:
            cpus = tuple(Cpu(**cpu) for cpu in saved["cpus"])
        except (KeyError, TypeError) as exc:
            raise ForkliftError(f"{source or 'topology'}: not a topology as forklift writes it ({exc})") from exc
        return Topology(cpus, source or str(saved.get("source", "topology")))


def read_sysfs(root: Path = SYSFS, allowed: Collection[int] | None = None) -> Topology:
    """The topology the kernel shows under ROOT/devices/system; CPUs outside `allowed` are left out."""
    cpu_dir = root / "devices" / "system" / "cpu"
    ids = sorted(int(path.name[3:]) for path in cpu_dir.glob("cpu*") if path.name[3:].isdigit())
    if not ids:
        raise ForkliftError(f"{root}: no CPUs under devices/system/cpu (not a sysfs root?)")
    online_file = cpu_dir / "online"
    online = set(parse_cpu_list(_read(online_file), str(online_file))) if online_file.exists() else set(ids)
    node_of = _sysfs_nodes(root)
    cpus = []
    for cpu in ids:
        topology_dir = cpu_dir / f"cpu{cpu}" / "topology"
        if (allowed is not None and cpu not in allowed) or (cpu not in online and not topology_dir.is_dir()):
            continue  # the kernel drops an offline CPU's topology, and `lscpu -p` leaves such a CPU out too
        core, socket = _read_int(topology_dir / "core_id"), _read_int(topology_dir / "physical_package_id")
        cpus.append(Cpu(cpu, core, socket, node_of.get(cpu, 0), cpu in online))
    # messages and plans name where the CPUs were read: this machine's, said as such ("/sys: 4 instances do not fit")
    return Topology(tuple(cpus), "this machine (/sys)" if root == SYSFS else str(root))


def _sysfs_nodes(root: Path) -> dict[int, int]:
    """CPU -> NUMA node from node*/cpulist; empty on kernels without NUMA, where everything is node 0."""
    node_of: dict[int, int] = {}
    for path in (root / "devices" / "system" / "node").glob("node*/cpulist"):
        node = path.parent.name[4:]
        if node.isdigit():
            node_of.update(dict.fromkeys(parse_cpu_list(_read(path), str(path)), int(node)))
    return node_of


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise ForkliftError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except UnicodeDecodeError:
        raise ForkliftError(f"{path}: not a text file") from None


def _read_int(path: Path) -> int:
    text = _read(path).strip()
    try:
        return int(text)
    except ValueError:
        raise ForkliftError(f"{path}: {text!r} is not a number") from None


def parse_lscpu_p(text: str, source: str = "lscpu -p") -> Topology:
    """`lscpu -p` rows. A `# CPU,Core,Socket,Node` header names the columns (and may add ONLINE, Y/N); without it
    the first four are CPU,CORE,SOCKET,NODE as lscpu prints them. An empty core makes the CPU its own core; an empty
    socket or node (machines without NUMA) is 0. Offline CPUs may be absent, as `lscpu -p` leaves them out.
    """
    columns = {name: index for index, name in enumerate(LSCPU_P_COLUMNS)}
    cpus = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        names = [name.strip().upper() for name in line.lstrip("#").split(",")]
        if line.startswith("#") and names[0] == "CPU":
            columns = {name: index for index, name in enumerate(names) if name}
        elif line and not line.startswith("#"):
            cpus.append(_lscpu_row(line, columns, f"{source} line {number}"))
    if not cpus:
        raise ForkliftError(f"{source}: no CPU rows (expected `lscpu -p` output)")
    return Topology(tuple(cpus), source)


def _lscpu_row(line: str, columns: dict[str, int], where: str) -> Cpu:
    fields = [value.strip() for value in line.split(",")]

    def value(name: str) -> str:
        index = columns.get(name)
        return fields[index] if index is not None and index < len(fields) else ""

    def number(name: str, unknown: int) -> int:
        text = value(name)
        if text.isdigit() or (text in ("", "-") and name != "CPU"):
            return int(text) if text.isdigit() else unknown
        raise ForkliftError(f"{where}: {line!r} is neither an `lscpu -p` row (CPU,CORE,SOCKET,NODE) nor NUMA text")

    cpu = number("CPU", 0)
    return Cpu(cpu, number("CORE", cpu), number("SOCKET", 0), number("NODE", 0), value("ONLINE").upper() != "N")


@dataclass
class _Listing:
    """One `lscpu | grep NUMA` listing while it is read: its first line, declared node count, node -> CPUs."""

    line: int
    declared: int | None
    nodes: dict[int, list[int]] = field(default_factory=dict)


def parse_lscpu_numa(text: str, source: str = "lscpu") -> list[Topology]:
    """Each `lscpu | grep NUMA` listing in TEXT (a file may hold several, as before and after an SMT change).

    The text names no cores or sockets, so this assumes one socket (0), and each CPU its own core unless the
    numbers show SMT the way Linux on Power numbers CPUs: core k owns the aligned block k*S..k*S+S-1 (S = 2, 4 or
    8), and an SMT mode below S leaves the same holes at the end of every block (`0,1,8,9,...` is SMT=2 on cores of
    8 threads). Without holes (all threads online, or x86's `0-7,16-23` numbering) SMT cannot be told apart from
    separate cores, and threads per core is 1. Lines other than the NUMA ones are ignored, so whole `lscpu` output
    reads too.
    """
    listings: list[_Listing] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if match := NUMA_COUNT.match(line):
            listings.append(_Listing(number, int(match[1])))
        elif match := NUMA_NODE.match(line):
            node = int(match[1])
            if not listings or node in listings[-1].nodes:
                listings.append(_Listing(number, None))
            listings[-1].nodes[node] = parse_cpu_list(match[2], f"{source} line {number}")
    if not listings:
        raise ForkliftError(f"{source}: no `NUMA nodeN CPU(s):` lines")
    return [_numa_topology(listing, source if len(listings) == 1 else f"{source} line {listing.line}")
            for listing in listings]  # fmt: skip


def _numa_topology(listing: _Listing, source: str) -> Topology:
    if listing.declared is not None and listing.declared != len(listing.nodes):
        raise ForkliftError(f"{source}: NUMA node(s) says {listing.declared} but {len(listing.nodes)} are listed")
    node_of: dict[int, int] = {}
    for node, cpus in listing.nodes.items():
        for cpu in cpus:
            if cpu in node_of:  # a dict would keep the later node, unsaid
                raise ForkliftError(f"{source}: CPU {cpu} is listed in node{node_of[cpu]} and node{node}")
            node_of[cpu] = node
    core_of = _infer_cores(sorted(node_of))
    known = len(set(core_of.values())) < len(core_of)  # SMT read from the numbering's holes
    return Topology(tuple(Cpu(cpu, core_of[cpu], 0, node) for cpu, node in node_of.items()), source, known)


def _infer_cores(cpus: list[int]) -> dict[int, int]:
    """CPU -> core index from the holes of Power-style numbering (see parse_lscpu_numa), else each CPU its own."""
    for stride in SMT_STRIDES:
        blocks: dict[int, list[int]] = {}
        for cpu in cpus:
            blocks.setdefault(cpu // stride, []).append(cpu % stride)
        shapes = {tuple(offsets) for offsets in blocks.values()}
        threads = max(map(len, shapes), default=0)
        if len(blocks) > 1 and 1 < threads < stride and shapes == {tuple(range(threads))}:
            index = {block: core for core, block in enumerate(sorted(blocks))}
            return {cpu: index[cpu // stride] for cpu in cpus}
    return {cpu: core for core, cpu in enumerate(cpus)}


def parse_lscpu(text: str, source: str = "lscpu") -> Topology:
    """Either form lscpu prints, told apart by their lines: `NUMA nodeN CPU(s):` text or `lscpu -p` rows."""
    if not re.search(r"^\s*NUMA node", text, re.MULTILINE):
        return parse_lscpu_p(text, source)
    listings = parse_lscpu_numa(text, source)
    if len(listings) > 1:
        where = ", ".join(listing.source.removeprefix(f"{source} ") for listing in listings)
        raise ForkliftError(f"{source}: holds {len(listings)} `lscpu | grep NUMA` listings ({where}); keep one")
    return listings[0]


def read_lscpu(path: Path) -> Topology:
    """A file of `lscpu -p` output or `lscpu | grep NUMA` text (see parse_lscpu)."""
    return parse_lscpu(_read(path), str(path))


def available_cpus() -> int:
    """CPUs this process may run on (its affinity, which containers and pinning narrow), not the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def current() -> Topology:
    """This machine as this process may use it: sysfs, narrowed to the CPU affinity (a container's cpuset)."""
    return read_sysfs(SYSFS, os.sched_getaffinity(0))


def load_topology(lscpu: Path | None = None, sysfs: Path | None = None) -> Topology:
    """The topology the CLI's `--lscpu FILE` or `--sysfs ROOT` names, else the current machine's."""
    if lscpu is not None:
        return read_lscpu(lscpu)
    return read_sysfs(sysfs) if sysfs is not None else current()


UNKNOWN_CORES = "names no cores: each CPU is counted as a core of its own (`lscpu -p` names them)"


def describe_topology(topology: Topology) -> str:
    """The topology for people: what placement will work with, as lscpu would summarise it."""
    nodes, online = topology.nodes, topology.online_cpus
    rows = [
        ("source", topology.source),
        ("sockets", f"{len(topology.sockets)} ({', '.join(map(str, topology.sockets))})"),
        ("NUMA nodes", str(len(nodes))),
        *((f"  node{node}", f"{len(cpus)} CPUs: {format_cpu_list(cpus)}") for node, cpus in nodes.items()),
        ("cores", str(len(topology.cores))),
        (
            "threads per core",
            f"{topology.threads_per_core}{'' if topology.cores_known else f'; the source {UNKNOWN_CORES}'}",
        ),
        ("online CPUs", f"{len(online)}: {format_cpu_list(online)}"),
    ]
    return "\n".join(f"{key:<18} {value}" for key, value in rows)
