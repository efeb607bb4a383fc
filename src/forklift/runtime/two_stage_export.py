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
from pathlib import Path

import torch
from torch import nn
from torchvision.models.detection._utils import BoxCoder

from forklift.atomic import written_atomically
from forklift.errors import ForkliftError
from forklift.model_files.labels import write_labels
from forklift.model_files.model_config import ModelConfig, save_config
from forklift.model_files.model_dir import TWO_STAGE_KEY
from forklift.model_files.two_stage_settings import CONF, IOU, OUTPUTS, TwoStageSettings
from forklift.runtime.onnx_export import INPUT_NAME, OPSET
from forklift.vocabulary import ResizeMode, Task


class SingleImage(nn.Module):
    """A [1, 3, S, S] tensor in, (boxes, scores, labels) out: torchvision's list-of-images and dict API as tensors."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        (found,) = self.net(list(images))
        return found["boxes"], found["scores"], found["labels"]


class ShapeSafeBoxCoder(BoxCoder):
    """torchvision's box coder with one decoding path for any number of boxes, zero included.

    torchvision's `decode` reshapes with -1 only when an image has proposals and skips the reshapes when it has
    none (a reshape of zero rows with -1 is ambiguous). A trace keeps the path its example took, so a graph traced
    on either kind of image failed in ONNX Runtime on the other kind. Here the -1 stands for the rows and the
    columns are named, which holds for zero rows too; the arithmetic is torchvision's own `decode_single`.
    """

    def decode(self, rel_codes: torch.Tensor, boxes: list[torch.Tensor]) -> torch.Tensor:
        columns = rel_codes.shape[-1]  # 4 per class (box head) or 4 (RPN)
        decoded = self.decode_single(rel_codes.reshape(-1, columns), torch.cat(boxes, dim=0))
        return decoded.reshape(-1, columns // 4, 4)


def traceable(net: nn.Module) -> nn.Module:
    """A copy of `net` on the CPU in eval mode whose box coders decode on one path (`ShapeSafeBoxCoder`)."""
    copied = copy.deepcopy(net).cpu().eval()
    for module in copied.modules():
        for name, value in vars(module).items():
            if type(value) is BoxCoder:
                setattr(module, name, ShapeSafeBoxCoder(value.weights, value.bbox_xform_clip))
    return copied


def write_two_stage_model_dir(net: nn.Module, out: Path, classes: list[str], settings: TwoStageSettings) -> None:
    """Export net (built by `build_two_stage` for settings) into the folder out; other files there are left alone.

    The net is traced on seeded noise in eval mode on the CPU (a `traceable` copy; the caller's net keeps its
    device and mode).
    """
    out = Path(out)
    if len(classes) != settings.classes:
        raise ForkliftError(f"{out}: {len(classes)} class names, but the {settings.arch} net has {settings.classes}")
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu() for k, v in net.state_dict().items()}
    torch.save(state, out / f"{settings.arch}.pt")
    size = settings.image_size
    example = torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(0))
    with written_atomically(out / f"{settings.arch}.onnx") as partial, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's notes on tracing Python control flow
        torch.onnx.export(
            SingleImage(traceable(net)),
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
        extra={"architecture": settings.arch, TWO_STAGE_KEY: settings.to_json()},
    )
    save_config(out, config)
