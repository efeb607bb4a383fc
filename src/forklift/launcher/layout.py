"""Where every rank of a `forklift run` job runs: its host, CPU set, memory node and GPU, as a table for people
and as an MPI rankfile.

Each host's ranks take `forklift.distributed.places` of that host's topology, and torchrun starts each rank
pinned to its row (`pinned`: CPUs, threads, memory node), whatever the command, so the table is what will
happen. Global ranks follow torch's c10d rendezvous, which numbers the hosts by the address each agent gives
(`--local-addr`, compared as text) and the ranks of a host by local rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from forklift.distributed.places import Place, places
from forklift.errors import ForkliftError
from forklift.system.topology import Topology, format_cpu_list


@dataclass(frozen=True)
class HostFacts:
    """What the launcher knows of a host: its ssh name, the address it is reached at, its topology and the NUMA
    node of each GPU."""

    name: str
    address: str
    topology: Topology
    gpu_nodes: tuple[int, ...] = ()


@dataclass(frozen=True)
class RankSlot:
    rank: int
    host: str
    address: str
    local_rank: int
    cpus: tuple[int, ...]
    node: int
    gpu: int | None


def ranks_per_host(facts: HostFacts, asked: int | None, slots: int | None) -> int:
    """A host's ranks: its SLOTS from -H or the hostfile, else `--nproc-per-node`, else ("auto") one per GPU, or
    on a host without GPUs one per NUMA node (each rank a node's cores and memory, as ddlrun placed them)."""
    if slots is not None:
        return slots
    if asked is not None:
        return asked
    return len(facts.gpu_nodes) or len(facts.topology.nodes)


def rank_zero_host(addresses: dict[str, str]) -> str:
    """The host of rank 0 among hosts by name -> address: the rendezvous numbers hosts by address as text."""
    return min(addresses, key=lambda name: addresses[name])


def lay_out(hosts: list[tuple[HostFacts, int]], *, gpus: bool) -> list[RankSlot]:
    """Every rank's slot for `hosts` (each with its rank count), numbered as the rendezvous will number them."""
    slots: list[RankSlot] = []
    for facts, count in sorted(hosts, key=lambda pair: pair[0].address):
        if gpus and not facts.gpu_nodes:
            raise ForkliftError(f"{facts.name}: no GPU, and the command trains on CUDA")
        if gpus and count > len(facts.gpu_nodes):
            raise ForkliftError(f"{facts.name}: {count} ranks for {len(facts.gpu_nodes)} GPUs; give HOST:SLOTS")
        chosen = places(facts.topology, count, list(facts.gpu_nodes) if gpus else None)
        for local_rank, place in enumerate(chosen):
            slots.append(RankSlot(len(slots), facts.name, facts.address, local_rank, place.cpus, place.node,
                                  place.gpu))  # fmt: skip
    return slots


def host_places(slots: list[RankSlot], host: str) -> list[Place]:
    """The places of `host`'s ranks in `slots`, by local rank: what its torchrun pins them to."""
    mine = sorted((slot for slot in slots if slot.host == host), key=lambda slot: slot.local_rank)
    return [Place(slot.cpus, slot.node, slot.gpu) for slot in mine]


def describe_layout(slots: list[RankSlot]) -> str:
    """The layout as a table: one row per rank."""
    rows = [("rank", "host", "local", "cpus", "node", "gpu")]
    rows += [(str(s.rank), s.host, str(s.local_rank), format_cpu_list(s.cpus), str(s.node),
              "-" if s.gpu is None else str(s.gpu)) for s in slots]  # fmt: skip
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
                     for row in rows)  # fmt: skip


def rankfile(slots: list[RankSlot]) -> str:
    """The layout as an Open MPI rankfile (`mpirun --rankfile FILE`): each rank bound to its host's CPUs."""
    lines = ["# forklift run --emit rankfile: one line per rank, bound to its CPUs (logical CPU numbers)"]
    lines += [f"rank {s.rank}={s.host} slot={format_cpu_list(s.cpus)}" for s in slots]
    return "\n".join(lines) + "\n"
