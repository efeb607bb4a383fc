"""A style network -> a model directory: its state dict (`style.pth`, the PyTorch example's key names, which
PyTorch alone reads) and its ONNX export beside it (any batch, height and width) for ONNX Runtime and OpenVINO.
The export records the state dict's digest, so an export beside changed weights is made again."""

from __future__ import annotations

from pathlib import Path

import torch

from forklift.atomic import written_atomically
from forklift.model_files.model_dir import open_model_dir
from forklift.nets.style import StyleNet
from forklift.runtime.onnx_export import export_style

OUTPUT_SPREAD = 50.0  # standard deviation of fresh weights' output around mid-grey, on the 0-255 scale


def write_style_dir(net: StyleNet, out: Path, *, name: str = "style", onnx: bool = True) -> Path:
    """Save `net` into the folder `out` (made if missing) as `{name}.pth` and (unless `onnx` is False)
    `{name}.onnx`; returns `out`."""
    out.mkdir(parents=True, exist_ok=True)
    with written_atomically(out / f"{name}.pth") as partial:
        torch.save({key: value.detach().cpu() for key, value in net.state_dict().items()}, partial)
    if onnx:
        export_style(open_model_dir(out), out / f"{name}.onnx")
    return out


def fresh_style_net(*, seed: int = 0, width: float = 1.0) -> StyleNet:
    """A style network with seeded random weights whose output sits around mid-grey with a visible spread (the
    default initialisation answers a nearly black image, which shows nothing in a test or a demo)."""
    torch.manual_seed(seed)
    net = StyleNet(width=width).eval()
    noise = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(seed)) * 255
    last = net.deconv3.conv2d
    assert last.bias is not None  # every convolution of the network has one
    with torch.no_grad():
        last.bias.zero_()
        spread = float(net(noise).std())
        last.weight.mul_(OUTPUT_SPREAD / max(spread, 1e-6))
        last.bias.fill_(127.5)
    return net
