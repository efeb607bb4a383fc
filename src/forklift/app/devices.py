"""The devices training jobs queue for: the CPU and each GPU torch sees. Each runs `slots` jobs at once (one unless
the app is started with --jobs-per-device): two trainings sharing a device each run at about half speed, so
running them one after the other gives the first result sooner and the last no later.

Jobs sharing the CPU are pinned to CPU sets of forklift's placement (whole cores, one NUMA node each), with as
many threads as CPUs, so they do not oversubscribe the cores; a job alone on the CPU uses all of it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from forklift.errors import ForkliftError

CPU = "cpu"


@dataclass(frozen=True)
class Device:
    name: str  # as `forklift train --device` takes it: cpu or cuda:N
    label: str  # for people: "CPU: 16 CPUs" or "GPU 0"
    cpu_sets: tuple[tuple[int, ...], ...] = ()  # a CPU job's pinning, one per slot (none: a job alone, or a GPU's)


def machine_devices(slots: int) -> list[Device]:
    """The CPU and this machine's GPUs (torch's numbering), GPUs first: on a machine with GPUs they are the default."""
    import torch

    from forklift.system.placement import make_plan
    from forklift.system.topology import current

    try:
        cpu_sets = tuple(i.cpus for i in make_plan(current(), instances=slots).instances) if slots > 1 else ()
    except ForkliftError as exc:
        raise ForkliftError(f"--jobs-per-device {slots}: jobs sharing the CPU each need a CPU set, and {exc}") from exc
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0  # counted without a CUDA context here
    gpus = [Device(f"cuda:{k}", f"GPU {k}") for k in range(count)]
    return [*gpus, Device(CPU, f"CPU: {len(os.sched_getaffinity(0))} CPUs", cpu_sets)]
