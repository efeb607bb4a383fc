"""A trained PyTorch segmentation network -> a model directory `forklift predict`, `eval` and `serve` use as it is.

The directory holds model.onnx (logits [N, 1 + classes, H, W] named "masks", dynamic batch), model.names (the
classes, without background) and forklift.json (task segment, input size, stretch, mean/scale, colour order),
the layout `forklift.runtime.segment.SegmentPredictor` reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from forklift.errors import ForkliftError
from forklift.model_files.labels import write_labels
from forklift.model_files.model_config import ModelConfig, save_config
from forklift.runtime.onnx_export import META_CLASSES, export_onnx
from forklift.vision.masks import IGNORE
from forklift.vocabulary import ResizeMode, Task

# torchvision's ImageNet normalisation as forklift.json says it: RGB on the 0..255 scale, scale = 1 / (255 * std)
IMAGENET_MEAN = [123.675, 116.28, 103.53]
IMAGENET_SCALE = [1 / 58.395, 1 / 57.12, 1 / 57.375]


class SegmentationLogits(nn.Module):
    """The logits tensor of a segmentation net: torchvision's models answer a dict {"out": ..., "aux": ...}."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        out = self.net(images)
        return out["out"] if isinstance(out, dict) else out


def write_segment_model_dir(
    net: nn.Module,
    out: Path,
    classes: Sequence[str],
    input_size: tuple[int, int],
    mean: Sequence[float] = IMAGENET_MEAN,
    scale: float | Sequence[float] = IMAGENET_SCALE,
    color_order: str = "rgb",
    name: str = "model",
) -> Path:
    """Export net (taking [N, 3, H, W] with (pixel - mean) * scale, giving logits of background + classes at any
    resolution, or torchvision's dict) for input_size = (width, height) into the folder out; returns out.

    The net is traced in eval mode on the device of its parameters; other files in out are left alone.
    """
    out = Path(out)
    if not classes or len(classes) >= IGNORE:
        raise ForkliftError(f"{out}: a segmentation model needs 1 to {IGNORE - 1} classes, not {len(classes)}")
    width, height = input_size
    device = next(net.parameters()).device
    wrapped = SegmentationLogits(net).eval()
    example = torch.zeros(1, 3, height, width, device=device)
    with torch.no_grad():
        channels = wrapped(example).shape[1]
    if channels != len(classes) + 1:
        raise ForkliftError(f"{out}: the net gives {channels} channels, but background + {len(classes)} classes")
    out.mkdir(parents=True, exist_ok=True)
    export_onnx(wrapped, example, out / f"{name}.onnx", Task.SEGMENT, {META_CLASSES: str(len(classes))})
    write_labels(out / f"{name}.names", list(classes))
    scale_value = float(scale) if isinstance(scale, int | float) else [float(v) for v in scale]
    config = ModelConfig(
        task=Task.SEGMENT,
        input_width=width,
        input_height=height,
        resize=ResizeMode.STRETCH,
        mean=[float(v) for v in mean],
        scale=scale_value,
        color_order=color_order,
    )
    save_config(out, config)
    return out
