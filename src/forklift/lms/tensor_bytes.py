"""A saved tensor as raw bytes and back, keeping its strides so backward sees exactly the tensor it saved.

Keeping strides matters for bitwise-equal gradients: some kernels (channels-last convolutions, for one) pick a
different algorithm for different strides. A dense tensor (no gaps, no overlap; any dimension order) is
copied as its memory span; anything else (a slice with gaps, an expanded view) is made contiguous first.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TensorMeta:
    """Enough to rebuild a tensor from its bytes: shape, strides, dtype and the device it came from."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    nbytes: int


def swappable(tensor: torch.Tensor) -> bool:
    """Plain strided tensors on the CPU or a GPU; sparse, quantized, nested and subclass tensors, and views with a
    lazy conjugate or negation bit (their bytes are not their values), stay where they are."""
    return (
        type(tensor) in (torch.Tensor, torch.nn.Parameter)
        and tensor.layout == torch.strided
        and not (tensor.is_quantized or tensor.is_nested or tensor.is_conj() or tensor.is_neg())
        and tensor.device.type in ("cpu", "cuda")
    )


def _dense(tensor: torch.Tensor) -> bool:
    """No gaps and no overlap: sorted by stride, each dimension's stride is the product of the smaller ones."""
    expected = 1
    for size, stride in sorted(zip(tensor.shape, tensor.stride(), strict=True), key=lambda dim: dim[1]):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def flat_bytes(tensor: torch.Tensor) -> tuple[torch.Tensor, TensorMeta]:
    """The tensor's elements in memory order as a 1-D uint8 tensor (a view when it is dense), and its meta."""
    tensor = tensor.detach()
    if not _dense(tensor):
        tensor = tensor.contiguous()
    flat = tensor.as_strided((tensor.numel(),), (1,))  # the memory span, from the tensor's storage offset
    nbytes = flat.numel() * flat.element_size()
    meta = TensorMeta(tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype, tensor.device, nbytes)
    return flat.view(torch.uint8), meta


def restore(data: torch.Tensor, meta: TensorMeta) -> torch.Tensor:
    """The tensor whose bytes `data` holds (1-D uint8, at least meta.nbytes long), as a view of them."""
    return data[: meta.nbytes].view(meta.dtype).as_strided(meta.size, meta.stride)
