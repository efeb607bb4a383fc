"""A torchvision detector's model directory without torchvision: the settings forklift.json keeps under
"two_stage" (what rebuilds the net, for training and `models inspect`) and the graph's contract with the engines
that run it, so that predicting and serving one needs no torch (the core install)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from forklift.errors import ForkliftError
from forklift.model_files.model_dir import TWO_STAGE_KEY

ARCHITECTURE_NAMES = (
    "fasterrcnn_mobilenet_v3_large_fpn",
    "fasterrcnn_mobilenet_v3_large_320_fpn",
    "fasterrcnn_resnet50_fpn",
    "fasterrcnn_resnet50_fpn_v2",
    "retinanet_resnet50_fpn",
    "retinanet_resnet50_fpn_v2",
    "fcos_resnet50_fpn",
)  # forklift.nets.two_stage builds each
OUTPUTS = ("boxes", "scores", "labels")  # the graph's outputs, in this order
CONF, IOU = 0.25, 0.5  # IOU: torchvision's NMS threshold inside the graph (box_nms_thresh)


@dataclass(frozen=True)
class TwoStageSettings:
    """What rebuilds the same net: the architecture and the settings that shape its layers or its answers."""

    arch: str
    classes: int  # the data set's classes, background not counted
    image_size: int  # inputs are letterboxed squares of this side
    anchor_sizes: tuple[int, ...] | None = None  # one size per FPN level (None: torchvision's)
    proposals: int | None = None  # RPN proposals kept after NMS at test time (None: torchvision's)

    def __post_init__(self) -> None:
        if self.arch not in ARCHITECTURE_NAMES:
            raise ForkliftError(f"unknown architecture {self.arch!r}; one of {', '.join(ARCHITECTURE_NAMES)}")
        if self.classes < 1 or self.image_size < 32:
            raise ForkliftError(
                f"{self.arch}: needs at least 1 class and 32 px, not {self.classes} and {self.image_size}"
            )

    def to_json(self) -> dict:
        data = asdict(self)
        data["anchor_sizes"] = list(self.anchor_sizes) if self.anchor_sizes is not None else None
        return data

    @staticmethod
    def from_json(data: dict) -> TwoStageSettings:
        try:
            anchors = data.get("anchor_sizes")
            return TwoStageSettings(
                arch=str(data["arch"]),
                classes=int(data["classes"]),
                image_size=int(data["image_size"]),
                anchor_sizes=tuple(int(s) for s in anchors) if anchors is not None else None,
                proposals=int(data["proposals"]) if data.get("proposals") is not None else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ForkliftError(f"two_stage settings {data!r}: {type(exc).__name__}: {exc}") from exc


def two_stage_settings(extra: dict, where: object) -> TwoStageSettings:
    """The settings forklift.json keeps under "two_stage", or one line naming the file."""
    data = extra.get(TWO_STAGE_KEY)
    if not isinstance(data, dict):
        raise ForkliftError(f'{where}: no "two_stage" settings; not a model write_two_stage_model_dir wrote')
    try:
        return TwoStageSettings.from_json(data)
    except ForkliftError as exc:
        raise ForkliftError(f"{where}: {exc}") from exc
