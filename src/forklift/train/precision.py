"""Mixed precision where a run asks for it, and the gradient step every run takes."""

from __future__ import annotations

import contextlib

import torch
from torch.optim import Optimizer as TorchOptimizer

CLIP_NORM = 10.0


class MixedPrecision:
    """float16 with a gradient scaler on CUDA (its range needs one), bfloat16 on the CPU (same range as float32,
    no scaler), else plain float32. Also clips gradients before each step."""

    def __init__(self, device: str, amp: bool | None) -> None:
        self.device_type = torch.device(device).type
        self.enabled = self.device_type == "cuda" if amp is None else amp
        self.dtype = torch.float16 if self.device_type == "cuda" else torch.bfloat16
        self.scaler = torch.amp.GradScaler(self.device_type, enabled=self.enabled and self.device_type == "cuda")

    def autocast(self) -> contextlib.AbstractContextManager:
        return torch.autocast(self.device_type, dtype=self.dtype, enabled=self.enabled)

    def step(self, loss: torch.Tensor, net: torch.nn.Module, optimiser: TorchOptimizer) -> None:
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(optimiser)
        torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP_NORM)
        self.scaler.step(optimiser)
        self.scaler.update()
