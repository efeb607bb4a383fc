"""A PyTorch module built from a Darknet cfg, with `.weights` loading and saving.

`DarknetNet.forward` returns decoded detections for detectors, `[B, N, 5 + classes]` with rows
`cx, cy, w, h` (fractions of the network input), objectness and class probabilities, ordered as OpenCV's
Darknet importer orders them (per head: grid row, grid column, anchor); classifiers return `[B, classes]`.
`DarknetNet.heads` gives the raw head maps that training needs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from forklift.errors import ForkliftError
from forklift.model_files.darknet_cfg import DarknetConfig, Section, read_cfg
from forklift.model_files.darknet_weights import DarknetWeights, WeightsHeader, read_weights, write_weights

BN_EPS = 1e-6  # what OpenCV's Darknet importer uses; Darknet adds 1e-6 to the square root


def activate(x: torch.Tensor, name: str) -> torch.Tensor:
    if name == "leaky":
        return F.leaky_relu(x, 0.1)
    if name == "logistic":
        return torch.sigmoid(x)
    if name == "relu":
        return F.relu(x)
    if name == "mish":
        return F.mish(x)
    if name == "swish":
        return F.silu(x)
    return x


class Convolutional(nn.Module):
    """[convolutional]: convolution, optional batch norm, activation."""

    def __init__(self, section: Section, in_channels: int) -> None:
        super().__init__()
        filters = section.int("filters", 1)
        size = section.int("size", 1)
        stride = section.int("stride", 1)
        padding = section.int("padding", size // 2 if section.int("pad", 0) else 0)
        groups = section.int("groups", 1)
        if in_channels % groups or filters % groups:
            raise ForkliftError(f"{section.where('groups')}: groups={groups} does not divide the channels")
        batch_normalize = bool(section.int("batch_normalize", 0))
        self.conv = nn.Conv2d(in_channels, filters, size, stride, padding, groups=groups, bias=not batch_normalize)
        self.bn = nn.BatchNorm2d(filters, eps=BN_EPS) if batch_normalize else None
        self.activation = section.activation()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        if self.bn is not None:
            x = self.bn(x)
        return activate(x, self.activation)

    def parameter_arrays(self) -> list[torch.Tensor]:
        """Tensors in the order Darknet stores them."""
        if self.bn is not None:
            bn = self.bn
            assert bn.running_mean is not None and bn.running_var is not None
            return [bn.bias, bn.weight, bn.running_mean, bn.running_var, self.conv.weight]
        assert self.conv.bias is not None
        return [self.conv.bias, self.conv.weight]


class MaxPool(nn.Module):
    """[maxpool] with Darknet's padding: `padding` (default size-1) split left/top first, rest right/bottom.

    Padding that changes no output (stride-2 pools on even sizes) is left out, and the rest repeats the edge
    rather than adding -inf, which gives the same maxima while any pad is narrower than the window (every window
    that holds padding also holds the edge value it repeats): graphs without -inf pads are ones INT8 engines
    can run end to end (OpenVINO runs a convolution after a -inf Pad in float)."""

    def __init__(self, section: Section) -> None:
        super().__init__()
        self.size = section.int("size", 2)
        self.stride = section.int("stride", self.size)
        padding = section.int("padding", self.size - 1)
        self.pad = (padding // 2, padding - padding // 2, padding // 2, padding - padding // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._changes_output(int(x.shape[-2]), int(x.shape[-1])):
            if max(self.pad) < self.size:
                x = F.pad(x, self.pad, mode="replicate")
            else:
                x = F.pad(x, self.pad, value=float("-inf"))
        return F.max_pool2d(x, self.size, self.stride)

    def _changes_output(self, height: int, width: int) -> bool:
        left, right, top, bottom = self.pad
        if left or top:
            return True
        return any((n + extra - self.size) // self.stride != (n - self.size) // self.stride
                   for n, extra in ((height, bottom), (width, right)))  # fmt: skip


class Upsample(nn.Module):
    def __init__(self, section: Section) -> None:
        super().__init__()
        self.stride = section.int("stride", 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=self.stride, mode="nearest")


class Reorg(nn.Module):
    """[reorg]: Darknet's space-to-depth, which reads the input buffer as if it had the output's layout."""

    def __init__(self, section: Section) -> None:
        super().__init__()
        self.stride = section.int("stride", 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        s = self.stride
        out = x.reshape(b, c // (s * s), h, s, w, s).permute(0, 3, 5, 1, 2, 4)
        return out.reshape(b, c * s * s, h // s, w // s)


class GlobalAvgPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3), keepdim=True)


class ChannelSoftmax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x.flatten(1), dim=1)


class Identity(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


# Layers whose output has as many channels as their input, built from their section alone.
CHANNEL_KEEPING: dict[str, Callable[[Section], nn.Module]] = {
    "maxpool": MaxPool,
    "upsample": Upsample,
    "avgpool": lambda _: GlobalAvgPool(),
    "softmax": lambda _: ChannelSoftmax(),
    "dropout": lambda _: Identity(),  # inference and the reference ignore it
    "cost": lambda _: Identity(),
}


class DetectionHead(nn.Module):
    """[yolo] (anchors in input pixels, logistic classes) or [region] (YOLOv2: anchors in grid cells, softmax)."""

    anchors: torch.Tensor  # [A, 2] width, height; a buffer, so it follows the module's device

    def __init__(self, section: Section, in_channels: int) -> None:
        super().__init__()
        self.kind = section.kind
        self.classes = section.int("classes", 20 if section.kind == "region" else 80)
        anchors = section.floats("anchors")
        if len(anchors) % 2:
            raise ForkliftError(f"{section.where('anchors')}: anchors come in pairs (width,height)")
        pairs = np.asarray(anchors, dtype=np.float32).reshape(-1, 2)
        if self.kind == "yolo":
            mask = section.ints("mask", list(range(len(pairs))))
            if any(m < 0 or m >= len(pairs) for m in mask):
                raise ForkliftError(f"{section.where('mask')}: mask names an anchor that does not exist")
            pairs = pairs[mask]
            if section.int("new_coords", 0):
                raise ForkliftError(f"{section.where('new_coords')}: new_coords=1 (scaled YOLOv4) is not supported")
            self.scale_x_y = section.float("scale_x_y", 1.0)
            self.softmax = False
        else:
            if section.int("num", len(pairs)) != len(pairs):
                raise ForkliftError(f"{section.where('num')}: num does not match the number of anchor pairs")
            if section.int("coords", 4) != 4:
                raise ForkliftError(f"{section.where('coords')}: only coords=4 is supported")
            self.scale_x_y = 1.0
            self.softmax = bool(section.int("softmax", 0))
        self.register_buffer("anchors", torch.from_numpy(pairs.copy()), persistent=False)
        self.num_anchors = len(pairs)
        expected = self.num_anchors * (5 + self.classes)
        if in_channels != expected:
            raise ForkliftError(
                f"{section.where()}: the layer before [{self.kind}] has {in_channels} filters, but "
                f"{self.num_anchors} anchors x (5 + {self.classes} classes) needs {expected}"
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x  # the raw map; `decode` turns it into boxes

    def decode(self, raw: torch.Tensor, input_height: int, input_width: int) -> torch.Tensor:
        b, _, h, w = raw.shape
        p = raw.reshape(b, self.num_anchors, 5 + self.classes, h, w).permute(0, 3, 4, 1, 2)
        gy, gx = torch.meshgrid(
            torch.arange(h, device=raw.device, dtype=raw.dtype),
            torch.arange(w, device=raw.device, dtype=raw.dtype),
            indexing="ij",
        )
        s = self.scale_x_y
        xy = torch.sigmoid(p[..., 0:2]) * s - (s - 1) / 2
        cx = (xy[..., 0] + gx[..., None]) / w
        cy = (xy[..., 1] + gy[..., None]) / h
        norm_w, norm_h = (input_width, input_height) if self.kind == "yolo" else (w, h)
        bw = torch.exp(p[..., 2]) * self.anchors[:, 0] / norm_w
        bh = torch.exp(p[..., 3]) * self.anchors[:, 1] / norm_h
        objectness = torch.sigmoid(p[..., 4])
        logits = p[..., 5:]
        probs = torch.softmax(logits, dim=-1) if self.softmax else torch.sigmoid(logits)
        out = torch.cat([torch.stack([cx, cy, bw, bh, objectness], dim=-1), probs], dim=-1)
        return out.reshape(b, h * w * self.num_anchors, 5 + self.classes)


class DarknetNet(nn.Module):
    """The layers of a cfg, run in order with Darknet's route and shortcut wiring."""

    def __init__(self, config: DarknetConfig) -> None:
        super().__init__()
        self.config = config
        self.input_width, self.input_height = config.width, config.height
        self.layers = nn.ModuleList()
        self.sources: list[list[int]] = []  # per layer: the earlier layers it reads (route, shortcut)
        self.route_groups: list[tuple[int, int]] = []
        channels: list[int] = []
        current = config.channels
        for index, section in enumerate(config.layers):
            layer, sources, current, groups = self._build(section, index, current, channels)
            self.layers.append(layer)
            self.sources.append(sources)
            self.route_groups.append(groups)
            channels.append(current)
        self.keep = {i for sources in self.sources for i in sources}
        self.head_indices = [i for i, layer in enumerate(self.layers) if isinstance(layer, DetectionHead)]
        self.classes = self._class_count(config, channels)

    @staticmethod
    def _absolute(section: Section, key: str, index: int, offsets: list[int]) -> list[int]:
        absolute = [index + o if o < 0 else o for o in offsets]
        if any(i < 0 or i >= index for i in absolute):
            raise ForkliftError(f"{section.where(key)}: '{key}' points to a layer that does not come before it")
        return absolute

    def _build(
        self, section: Section, index: int, current: int, channels: list[int]
    ) -> tuple[nn.Module, list[int], int, tuple[int, int]]:
        kind = section.kind
        if kind == "convolutional":
            layer = Convolutional(section, current)
            return layer, [], layer.conv.out_channels, (1, 0)
        if kind == "route":
            sources = self._absolute(section, "layers", index, section.ints("layers"))
            groups, group_id = section.int("groups", 1), section.int("group_id", 0)
            if not 0 <= group_id < groups:
                raise ForkliftError(f"{section.where('group_id')}: group_id must be in 0..{groups - 1}")
            return Identity(), sources, sum(channels[i] // groups for i in sources), (groups, group_id)
        if kind == "shortcut":
            sources = self._absolute(section, "from", index, section.ints("from"))
            if any(channels[i] != current for i in sources):
                raise ForkliftError(f"{section.where('from')}: [shortcut] joins layers of different channel counts")
            section.activation()
            return Identity(), sources, current, (1, 0)
        if kind in ("yolo", "region"):
            return DetectionHead(section, current), [], current, (1, 0)
        if kind == "reorg":
            stride = section.int("stride", 2)
            return Reorg(section), [], current * stride * stride, (1, 0)
        return CHANNEL_KEEPING[kind](section), [], current, (1, 0)

    @staticmethod
    def _class_count(config: DarknetConfig, channels: list[int]) -> int:
        heads = [s for s in config.layers if s.kind in ("yolo", "region")]
        if heads:
            counts = {s.int("classes", 20 if s.kind == "region" else 80) for s in heads}
            if len(counts) > 1:
                raise ForkliftError(f"{config.source}: the detection heads disagree on the number of classes")
            return counts.pop()
        return channels[-1]

    @property
    def is_detector(self) -> bool:
        return bool(self.head_indices)

    @property
    def detection_heads(self) -> list[DetectionHead]:
        """The [yolo] or [region] layers, those at `head_indices`, in order."""
        return [layer for layer in self.layers if isinstance(layer, DetectionHead)]

    def heads(self, x: torch.Tensor, softmax: bool = True) -> list[torch.Tensor]:
        """Raw outputs of the detection heads (or the classifier's output, alone in the list). `softmax=False`
        passes [softmax] layers by, giving a classifier's logits (what a cross-entropy loss wants)."""
        outputs: dict[int, torch.Tensor] = {}
        raw: list[torch.Tensor] = []
        for index, layer in enumerate(self.layers):
            sources = self.sources[index]
            kind = self.config.layers[index].kind
            if kind == "route":
                groups, group_id = self.route_groups[index]
                parts = [outputs[i] if groups == 1 else outputs[i].chunk(groups, dim=1)[group_id] for i in sources]
                x = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
            elif kind == "shortcut":
                x = x + sum(outputs[i] for i in sources)
                x = activate(x, self.config.layers[index].activation())
            elif softmax or kind != "softmax":
                x = layer(x)
            if index in self.keep:
                outputs[index] = x
            if index in self.head_indices:
                raw.append(x)
        return raw if self.is_detector else [x.flatten(1)]

    def decode(self, raw: list[torch.Tensor], input_height: int, input_width: int) -> torch.Tensor:
        heads = self.detection_heads
        return torch.cat([h.decode(r, input_height, input_width) for h, r in zip(heads, raw, strict=True)], dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raw = self.heads(x)
        if not self.is_detector:
            return raw[0]
        return self.decode(raw, x.shape[2], x.shape[3])

    def parameter_arrays(self) -> list[torch.Tensor]:
        return [t for layer in self.layers if isinstance(layer, Convolutional) for t in layer.parameter_arrays()]

    def weights_count(self) -> int:
        return sum(t.numel() for t in self.parameter_arrays())


def load_weights(net: DarknetNet, path: Path) -> WeightsHeader:
    """Copy a `.weights` file into the net; its size must match the cfg to the byte."""
    weights = read_weights(path)
    _check_count(weights, net.weights_count(), path, net.config)
    return _copy_weights(net, weights)


def _check_count(weights: DarknetWeights, expected: int, path: Path, config: DarknetConfig) -> None:
    found = weights.values.size
    if found != expected:
        problem = "truncated" if found < expected else "too long"
        raise ForkliftError(
            f"{path}: {problem} for {Path(config.source).name}: expected "
            f"{weights.header.size + 4 * expected} bytes, found {weights.header.size + 4 * found}"
        )


def _copy_weights(net: DarknetNet, weights: DarknetWeights) -> WeightsHeader:
    offset = 0
    with torch.no_grad():
        for tensor in net.parameter_arrays():
            count = tensor.numel()
            values = weights.values[offset : offset + count].reshape(tensor.shape)
            tensor.copy_(torch.from_numpy(values))
            offset += count
    return weights.header


def save_weights(net: DarknetNet, path: Path, header: WeightsHeader | None = None) -> None:
    arrays = [t.detach().cpu().float().numpy().ravel() for t in net.parameter_arrays()]
    values = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.float32)
    write_weights(path, DarknetWeights(header or WeightsHeader(), values))


def build_darknet(cfg_path: Path, weights_path: Path | None = None) -> DarknetNet:
    """The net of a cfg, in eval mode, with the weights file loaded when one is given: its size is checked against
    the cfg's count, taken from a net built on no memory ("meta"), before any tensor is made (an imported cfg of
    8,000-filter layers over a 1 KB weights file took gigabytes to be found truncated)."""
    config = read_cfg(cfg_path)
    if weights_path is None:
        return DarknetNet(config).eval()
    weights = read_weights(weights_path)
    with torch.device("meta"):
        _check_count(weights, DarknetNet(config).weights_count(), weights_path, config)
    net = DarknetNet(config)
    _copy_weights(net, weights)
    return net.eval()
