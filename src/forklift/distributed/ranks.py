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

from forklift.distributed.places import Place, laid_out_place, places
from forklift.errors import ForkliftError
from forklift.system.topology import current, format_cpu_list

JOB_VARIABLE = "TORCHELASTIC_RUN_ID"  # set by torchrun's agent: the job's rendezvous id, the same across restarts
COLLECTIVE_TIMEOUT = timedelta(minutes=30)  # rank 0 validates and evaluates while the others wait in a collective
PCI_DEVICES = Path("/sys/bus/pci/devices")


@dataclass(frozen=True)
class Ranks:
    """This process's place in the run: `rank` of `world`, `local_rank` of `local_world` on its host."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1
    job: str | None = None  # torchrun's id of the job: a run that finds its own job's files in OUT was restarted

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
            job=os.environ.get(JOB_VARIABLE),
        )
    except (KeyError, ValueError) as exc:
        raise ForkliftError(f"torchrun's environment is incomplete or not numbers: {exc}") from exc


def start(ranks: Ranks, device: str) -> str:
    """Join the process group (gloo on CPUs, NCCL on GPUs), pin this rank, and return the device it trains on.

    Each rank takes its place (`my_place`): it runs on its own CPU set with one thread per CPU, so ranks never
    share a core, and on CUDA it takes the GPU attached to its CPU set's NUMA node."""
    if not ranks.distributed:
        return device
    import torch  # here, not at the top: a verb checks its arguments before seconds of importing torch
    import torch.distributed as dist

    cuda = torch.device(device).type == "cuda"
    mine = my_place(ranks, cuda=cuda)
    os.sched_setaffinity(0, mine.cpus)
    torch.set_num_threads(len(mine.cpus))
    if mine.gpu is not None:
        device = f"cuda:{mine.gpu}"
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", timeout=COLLECTIVE_TIMEOUT)
    if ranks.leader:
        print(f"{ranks.world} ranks; rank 0 on CPUs {format_cpu_list(mine.cpus)} (node {mine.node}, "
              f"{len(mine.cpus)} threads){f', {device}' if cuda else ''}", flush=True)  # fmt: skip
    return device


def my_place(ranks: Ranks, *, cuda: bool) -> Place:
    """The place `forklift run` laid out for this rank, which it was started on (`pinned`), else (`--nproc`) its
    place among this host's ranks. Never both: a pinned rank sees only its own CPUs and would choose again."""
    laid_out = laid_out_place()
    if laid_out is not None:
        if cuda and laid_out.gpu is None:  # else every rank of the host would share GPU 0
            raise ForkliftError(
                "this rank trains on CUDA but forklift run laid it out without a GPU: give COMMAND "
                "--device cuda (or --device=cuda) so that the launcher gives each rank its own"
            )
        return laid_out
    return places(current(), ranks.local_world, gpu_nodes() if cuda else None)[ranks.local_rank]


def stop(ranks: Ranks) -> None:
    import torch.distributed as dist

    if ranks.distributed and dist.is_initialized():
        dist.destroy_process_group()


def gpu_nodes() -> list[int]:
    """The NUMA node of each CUDA device, in device order (-1 where the system does not say)."""
    import torch

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
