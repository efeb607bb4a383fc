"""Where the ranks of one host run: each its own CPU set on one NUMA node, and the GPU nearest it. Torch-free, so
that `forklift run` lays out a job without importing torch, and each rank pins itself with the same answer."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from forklift.errors import ForkliftError
from forklift.system.placement import make_plan
from forklift.system.topology import Topology, format_cpu_list, parse_cpu_list

# A rank started by `forklift run` finds the place the launcher laid out for it here (`pinned` sets it).
PLACE_VARIABLE = "FORKLIFT_PLACE"
PLACE_TEXT = re.compile(r"^(?P<cpus>[0-9,-]+)@(?P<node>\d+)(?::(?P<gpu>\d+))?$")


@dataclass(frozen=True)
class Place:
    """Where one rank of a host runs: its CPUs (one NUMA node's), that node, and its GPU (None on CPUs)."""

    cpus: tuple[int, ...]
    node: int
    gpu: int | None = None


def format_place(place: Place) -> str:
    """CPUS@NODE or CPUS@NODE:GPU, e.g. `0-3,8-11@0:1`: how a place travels on the torchrun line and in
    PLACE_VARIABLE (`parse_place` reads it back)."""
    return f"{format_cpu_list(place.cpus)}@{place.node}" + ("" if place.gpu is None else f":{place.gpu}")


def parse_place(text: str, source: str) -> Place:
    """A place as `format_place` writes it; one line naming `source` when it is not one."""
    match = PLACE_TEXT.match(text)
    try:
        cpus = tuple(parse_cpu_list(match["cpus"])) if match is not None else ()
    except ForkliftError:
        cpus = ()
    if match is None or not cpus:
        raise ForkliftError(f"{source}: {text!r} is not a place like 0-3,8-11@0 or 0-3@0:1 (CPUS@NODE[:GPU])")
    return Place(cpus, int(match["node"]), None if match["gpu"] is None else int(match["gpu"]))


def laid_out_place() -> Place | None:
    """The place `forklift run` laid out for this rank (PLACE_VARIABLE), or None when it was started otherwise."""
    text = os.environ.get(PLACE_VARIABLE)
    return None if text is None else parse_place(text, PLACE_VARIABLE)


def places(topology: Topology, count: int, gpus: list[int] | None = None) -> list[Place]:
    """The places of a host's `count` ranks, by local rank. With one rank per GPU whose NUMA nodes are known
    (`gpus`: the node of each GPU), rank k takes GPU k and a CPU set on that GPU's node (`_per_gpu`). Otherwise
    CPU sets come from `forklift.system.placement` (one NUMA node's CPUs each, whole cores first, none shared)
    and, with `gpus`, each takes the GPU nearest its set (`nearest_gpu`). `forklift run` lays out its table with
    this, and each rank pins itself with it."""
    if gpus is not None and len(gpus) == count and all(node in topology.nodes for node in gpus):
        return _per_gpu(topology, gpus)
    plan = make_plan(topology, instances=count)
    chosen = []
    for instance in plan.instances:
        gpu = None
        if gpus is not None:
            neighbours = [other.index for other in plan.instances if other.node == instance.node]
            gpu = nearest_gpu(gpus, instance.node, neighbours.index(instance.index), instance.index)
        chosen.append(Place(instance.cpus, instance.node, gpu))
    return chosen


def _per_gpu(topology: Topology, gpus: list[int]) -> list[Place]:
    """One rank per GPU on the GPU's own NUMA node: each node's CPUs are shared out (by placement's rules) among
    the ranks whose GPUs hang off it, so the host-to-GPU copies never cross the socket link."""
    sets: dict[int, list[tuple[int, ...]]] = {}
    for node in sorted(set(gpus)):
        node_only = Topology(tuple(cpu for cpu in topology.cpus if cpu.node == node), topology.source)
        plan = make_plan(node_only, instances=gpus.count(node))
        sets[node] = [instance.cpus for instance in plan.instances]
    taken: dict[int, int] = {}
    chosen = []
    for gpu, node in enumerate(gpus):
        chosen.append(Place(sets[node][taken.get(node, 0)], node, gpu))
        taken[node] = taken.get(node, 0) + 1
    return chosen


def nearest_gpu(nodes: list[int], node: int, position: int, local_rank: int) -> int:
    """The GPU for a rank whose CPUs are on NUMA `node`, the `position`-th rank there: the ranks on a node take
    that node's GPUs in turn; with none on the node (or none known), GPUs go round by local rank. `nodes`: the
    NUMA node of each GPU (`gpu_nodes`)."""
    if not nodes:
        raise ForkliftError("--device cuda: no CUDA device on this host")
    local = [gpu for gpu, gpu_node in enumerate(nodes) if gpu_node == node]
    if local:
        return local[position % len(local)]
    return local_rank % len(nodes)
