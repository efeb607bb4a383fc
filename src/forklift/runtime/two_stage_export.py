"""A torchvision detector (`forklift.nets.two_stage`) -> a model directory `forklift predict`, `eval` and `serve` use.

The directory holds <arch>.onnx, <arch>.pt (the state dict, for fine-tuning and `forklift models inspect`),
<arch>.names (the classes, without background) and forklift.json (task detect, the square input, letterbox,
conf 0.25, iou 0.5 and the net's settings under "two_stage"), the layout
`forklift.runtime.two_stage.TwoStagePredictor` reads.

The graph takes one image, `images` [1, 3, S, S] RGB in [0, 1]: torchvision's detectors loop over the images of
a batch in Python (proposals, ROI pooling and NMS per image), so a trace holds exactly the example's batch. Its
outputs are `boxes` [K, 4] (x1, y1, x2, y2 in input pixels), `scores` [K] and `labels` [K] (1-based: label k is
class k - 1), K varying per image (at most the net's detections per image), best first after per-class NMS.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn
from torchvision.models.detection import FasterRCNN

from forklift.atomic import written_atomically
from forklift.errors import ForkliftError
from forklift.model_files.labels import write_labels
from forklift.model_files.model_config import ModelConfig, save_config
from forklift.nets.two_stage import TwoStageSettings
from forklift.runtime.onnx_export import INPUT_NAME, OPSET
from forklift.vocabulary import ResizeMode, Task

OUTPUTS = ("boxes", "scores", "labels")
CONF, IOU = 0.25, 0.5  # IOU: torchvision's NMS threshold inside the graph (box_nms_thresh)


class SingleImage(nn.Module):
    """A [1, 3, S, S] tensor in, (boxes, scores, labels) out: torchvision's list-of-images and dict API as tensors."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        (found,) = self.net(list(images))
        return found["boxes"], found["scores"], found["labels"]


def trace_example(net: nn.Module, size: int, examples: Sequence[torch.Tensor] = ()) -> torch.Tensor:
    """The first of `examples` ([3, S, S] each), then seeded noise, then flat gray, on which a Faster R-CNN net
    (eval mode) proposes a region, as [1, 3, S, S].

    torchvision's box decoding skips two reshapes when an image has no proposals, and a trace keeps the path it
    took: a graph traced on such an image fails on every image that has some.
    """
    noise = torch.rand(3, size, size, generator=torch.Generator().manual_seed(0))
    candidates = [*examples, noise, torch.full((3, size, size), 0.5)]
    if not isinstance(net, FasterRCNN):  # one-stage nets decode without such a branch
        return candidates[0][None]
    counts: list[int] = []
    hook = net.rpn.register_forward_hook(lambda _module, _args, output: counts.append(len(output[0][0])))
    try:
        for candidate in candidates:
            with torch.no_grad():
                net([candidate])
            if counts[-1]:
                return candidate[None]
    finally:
        hook.remove()
    raise ForkliftError(
        f"cannot export the {type(net).__name__}: it proposes no region on any of {len(candidates)} images "
        "(did training diverge? metrics.csv has its losses)"
    )


def write_two_stage_model_dir(
    net: nn.Module,
    out: Path,
    classes: list[str],
    settings: TwoStageSettings,
    *,
    examples: Sequence[torch.Tensor] = (),
) -> None:
    """Export net (built by `build_two_stage` for settings) into the folder out; other files there are left alone.

    The net is traced in eval mode on the CPU (a copy; the caller's net keeps its device and mode), on the first of
    `examples` (images of the data set, [3, S, S] RGB in [0, 1]) that `trace_example` accepts.
    """
    out = Path(out)
    if len(classes) != settings.classes:
        raise ForkliftError(f"{out}: {len(classes)} class names, but the {settings.arch} net has {settings.classes}")
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu() for k, v in net.state_dict().items()}
    torch.save(state, out / f"{settings.arch}.pt")
    cpu_net = copy.deepcopy(net).cpu().eval()
    size = settings.image_size
    example = trace_example(cpu_net, size, [image.cpu() for image in examples])
    with written_atomically(out / f"{settings.arch}.onnx") as partial, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's notes on tracing Python control flow
        torch.onnx.export(
            SingleImage(cpu_net),
            (example,),
            str(partial),
            input_names=[INPUT_NAME],
            output_names=list(OUTPUTS),
            opset_version=OPSET,
            dynamic_axes={name: {0: "detections"} for name in OUTPUTS},
            dynamo=False,
        )
    write_labels(out / f"{settings.arch}.names", list(classes))
    config = ModelConfig(
        task=Task.DETECT,
        input_width=size,
        input_height=size,
        resize=ResizeMode.LETTERBOX,
        conf=CONF,
        iou=IOU,
        extra={"architecture": settings.arch, "two_stage": settings.to_json()},
    )
    save_config(out, config)
