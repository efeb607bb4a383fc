"""A minimal data-parallel training script for the launcher's start-up figure: join the process group, wrap a small
convolutional net in DistributedDataParallel, take one step, and (rank 0) print the wall-clock time of that first
step. Any launcher that runs Python scripts under torchrun can start it (`forklift run -- python THIS.py`)."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2))
    model = DistributedDataParallel(net)
    loss = model(torch.rand(4, 3, 32, 32)).square().mean()
    loss.backward()
    if dist.get_rank() == 0:
        print(f"first step at {time.time():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
