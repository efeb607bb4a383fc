"""Style networks (fast neural style: image in, styled image out): the PyTorch example's state dict (`.pth` or
`.model`), recognised by its keys. OpenVINO and ONNX Runtime run an export made once (any image size); PyTorch
runs the state dict itself (and on GPUs)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from forklift.model_files.model_dir import ModelDirectory
from forklift.runtime.formats.registry import FormatEntry, graph_predictor, register
from forklift.runtime.summary import ModelFacts
from forklift.vocabulary import ModelFormat, Runtime, Task

if TYPE_CHECKING:
    from forklift.runtime.base import PredictOptions, Predictor


def _predictor(model: ModelDirectory, runtime: Runtime, options: PredictOptions) -> Predictor:
    from forklift.runtime.style import StylePredictor, TorchStyleNetwork

    network = TorchStyleNetwork if runtime == Runtime.TORCH else graph_predictor(runtime).network_type
    return StylePredictor(model, options, network)


def _summary(model: ModelDirectory) -> ModelFacts:
    """Any image size: the parameters, and no FLOPs (they grow with the image)."""
    from forklift.nets.style import load_style_net

    net = load_style_net(model.files["state_dict"])
    parameters = sum(p.numel() for p in net.parameters())
    return ModelFacts(
        task=Task.STYLE, classes=0, input_width=None, input_height=None, parameters=parameters, flops=None
    )


def _export(model: ModelDirectory, out: Path) -> Path:
    from forklift.runtime.onnx_export import export_style

    return export_style(model, out)


ENTRY = register(
    FormatEntry(
        ModelFormat.STYLE,
        runtimes=(Runtime.OPENVINO, Runtime.ONNX, Runtime.TORCH),
        predictor=_predictor,
        summary=_summary,
        export=_export,
    )
)
