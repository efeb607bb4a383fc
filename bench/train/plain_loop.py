"""The plain PyTorch loop that forklift's trainer is measured against: the same net, data, loss and optimiser,
none of forklift's extras (no progress bar, schedule, gradient clipping, mixed-precision wrapper, metrics,
checkpoints or validation)."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from forklift.data.check import check_dataset, usable_images
from forklift.model_files.darknet_cfg import parse_cfg
from forklift.nets.darknet import DarknetNet
from forklift.nets.fresh_weights import initialise
from forklift.train.loader import DetectionImages, epoch_loader
from forklift.train.loss import yolo_heads, yolo_loss


def plain_images_per_s(data: Path, cfg: Path, batch: int, lr: float, steps: int | None = None, skip: int = 1) -> float:
    """Training images per second over one epoch (or its first `steps` batches), not counting the first `skip`
    batches, which pay one-off costs."""
    report = check_dataset(data)
    records = [image for image in usable_images(report) if image.split == "train"]
    net = DarknetNet(parse_cfg(cfg.read_text(encoding="utf-8"), str(cfg)))
    yolo_heads(net)
    initialise(net, 0)
    net.train()
    images = DetectionImages(report.dataset, records, (net.input_width, net.input_height), augment=True)
    optimiser = torch.optim.AdamW(net.parameters(), lr=lr)
    seen, started = 0, time.perf_counter()
    for k, (inputs, targets) in enumerate(epoch_loader(images, batch, 1, shuffle=True)):
        if k == skip:
            seen, started = 0, time.perf_counter()
        loss = yolo_loss(net, net.heads(inputs), targets).total
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        seen += len(inputs)
        if steps is not None and k + 1 >= skip + steps:
            break
    return seen / (time.perf_counter() - started)
