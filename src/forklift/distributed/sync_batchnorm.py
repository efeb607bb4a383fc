"""Batch norm over the whole global batch (`--sync-bn`): the statistics of every rank's batch together.

torch's own `SyncBatchNorm` refuses CPU tensors (gloo) and is not a `BatchNorm2d` (the Darknet writer and the
exports expect one), so each `BatchNorm2d` becomes an `AllRanksBatchNorm2d` instead, on every device: the
per-channel count, sum and sum of squares are summed over the ranks with a differentiable
all-reduce (`SummedOverRanks`), so the gradients flow through the shared statistics exactly as
they would through one process's batch of all the ranks' images. The module keeps BatchNorm2d's parameters and
buffers under their names, so checkpoints, Darknet weights and ONNX export see an ordinary batch norm.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


class SummedOverRanks(torch.autograd.Function):
    """A tensor summed over all ranks, and in backward the gradient summed the same way: each rank's statistics
    feed every rank's loss, so each rank's share of the gradient is what all ranks' losses send back."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, tensor: torch.Tensor) -> torch.Tensor:
        summed = tensor.clone()
        dist.all_reduce(summed)
        return summed

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, gradient: torch.Tensor) -> torch.Tensor:
        summed = gradient.clone()
        dist.all_reduce(summed)
        return summed


class AllRanksBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d whose training statistics are those of all ranks' batches; in eval mode an ordinary one."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not self.training or not dist.is_initialized() or dist.get_world_size() == 1:
            return super().forward(input)
        values = input.float()
        count = torch.full((1,), values.numel() / values.shape[1], dtype=values.dtype, device=values.device)
        local = torch.cat([count, values.sum((0, 2, 3)), (values * values).sum((0, 2, 3))])
        total = SummedOverRanks.apply(local)
        channels = values.shape[1]
        n, sums, squares = total[0], total[1 : 1 + channels], total[1 + channels :]
        mean = sums / n
        variance = (squares / n - mean * mean).clamp_min(0)
        if self.track_running_stats and self.running_mean is not None and self.running_var is not None:
            with torch.no_grad():
                assert self.num_batches_tracked is not None
                self.num_batches_tracked.add_(1)
                momentum = self.momentum if self.momentum is not None else 1 / float(self.num_batches_tracked)
                self.running_mean.lerp_(mean.detach(), momentum)
                self.running_var.lerp_((variance * n / (n - 1)).detach(), momentum)
        shape = (1, channels, 1, 1)
        normalised = (values - mean.view(shape)) * torch.rsqrt(variance.view(shape) + self.eps)
        if self.affine:
            normalised = normalised * self.weight.view(shape) + self.bias.view(shape)
        return normalised.to(input.dtype)


def synchronise_batchnorm(net: nn.Module) -> int:
    """Make every BatchNorm2d of `net` compute its training statistics over all ranks, in place (the modules,
    parameters and running statistics stay the same objects); returns how many were converted."""
    converted = 0
    for module in net.modules():
        if type(module) is nn.BatchNorm2d:
            module.__class__ = AllRanksBatchNorm2d
            converted += 1
    return converted
