"""Which rank this process is, and what it runs on: torchrun's environment read once, the process group, and
the CPU set, thread count and GPU each rank takes from forklift's placement.

A run started by torchrun (`forklift train --nproc`, `forklift run`) has WORLD_SIZE, RANK, LOCAL_RANK and
LOCAL_WORLD_SIZE in its environment; a plain run has none and is rank 0 of 1, so the trainer reads the same
`Ranks` either way and calls no collective when there is one rank.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from forklift.errors import ForkliftError
from forklift.system.placement import make_plan
from forklift.system.topology import current, format_cpu_list

RESTART_VARIABLE = "TORCHELASTIC_RESTART_COUNT"  # set by torchrun's agent: how often it restarted the workers
COLLECTIVE_TIMEOUT = timedelta(minutes=30)  # rank 0 validates and evaluates while the others wait in a collective
PCI_DEVICES = Path("/sys/bus/pci/devices")


@dataclass(frozen=True)
class Ranks:
    """This process's place in the run: `rank` of `world`, `local_rank` of `local_world` on its host."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1
    restarts: int = 0  # how often torchrun restarted the run's workers (0 on the first start)

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def leader(self) -> bool:
        """Rank 0: the one that writes checkpoints, metrics, TensorBoard and the model directory."""
        return self.rank == 0


def from_environment() -> Ranks:
    """The ranks torchrun describes in the environment, or rank 0 of 1 outside torchrun."""
    if "WORLD_SIZE" not in os.environ:
        return Ranks()
    try:
        return Ranks(
            rank=int(os.environ["RANK"]),
            world=int(os.environ["WORLD_SIZE"]),
            local_rank=int(os.environ["LOCAL_RANK"]),
            local_world=int(os.environ["LOCAL_WORLD_SIZE"]),
            restarts=int(os.environ.get(RESTART_VARIABLE, "0")),
        )
    except (KeyError, ValueError) as exc:
        raise ForkliftError(f"torchrun's environment is incomplete or not numbers: {exc}") from exc


def start(ranks: Ranks, device: str) -> str:
    """Join the process group (gloo on CPUs, NCCL on GPUs), pin this rank, and return the device it trains on.

    Each rank takes its own CPU set from `forklift.system.placement` (one NUMA node's CPUs, whole cores first,
    LOCAL_WORLD_SIZE sets per host) and runs one thread per CPU of it, so ranks never share a core. On CUDA each
    rank takes the GPU attached to its CPU set's NUMA node (`nearest_gpu`)."""
    if not ranks.distributed:
        return device
    plan = make_plan(current(), instances=ranks.local_world)
    mine = plan.instances[ranks.local_rank]
    os.sched_setaffinity(0, mine.cpus)
    torch.set_num_threads(mine.threads)
    cuda = torch.device(device).type == "cuda"
    if cuda:
        neighbours = [instance.index for instance in plan.instances if instance.node == mine.node]
        device = f"cuda:{nearest_gpu(mine.node, neighbours.index(mine.index), ranks.local_rank)}"
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", timeout=COLLECTIVE_TIMEOUT)
    if ranks.leader:
        print(f"{ranks.world} ranks; rank 0 on CPUs {format_cpu_list(mine.cpus)} (node {mine.node}, "
              f"{mine.threads} threads){f', {device}' if cuda else ''}", flush=True)  # fmt: skip
    return device


def stop(ranks: Ranks) -> None:
    if ranks.distributed and dist.is_initialized():
        dist.destroy_process_group()


def gpu_nodes() -> list[int]:
    """The NUMA node of each CUDA device, in device order (-1 where the system does not say)."""
    nodes = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        domain, bus, slot = (getattr(props, f"pci_{part}_id", 0) for part in ("domain", "bus", "device"))
        address = f"{domain:04x}:{bus:02x}:{slot:02x}.0"
        try:
            nodes.append(int((PCI_DEVICES / address / "numa_node").read_text().strip()))
        except (OSError, ValueError):
            nodes.append(-1)
    return nodes


def nearest_gpu(node: int, position: int, local_rank: int) -> int:
    """The GPU for a rank whose CPUs are on NUMA `node`, the `position`-th rank there: the ranks on a node take
    that node's GPUs in turn; with none on the node (or none known), GPUs go round by local rank."""
    nodes = gpu_nodes()
    if not nodes:
        raise ForkliftError("--device cuda: no CUDA device on this host")
    local = [gpu for gpu, gpu_node in enumerate(nodes) if gpu_node == node]
    if local:
        return local[position % len(local)]
    return local_rank % len(nodes)
