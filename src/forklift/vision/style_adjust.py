"""What a caller may ask of an image-to-image answer besides the model: how strongly it is applied, and whether
the original's colours are kept (the styled image's brightness with the original's colour, the usual "colour
preservation" of style transfer, done in YCrCb)."""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from forklift.errors import ForkliftError


@dataclass(frozen=True)
class StyleAdjust:
    strength: float = 1.0  # 0: the original, 1: the model's answer, between: a blend
    keep_colour: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.strength <= 1.0:
            raise ForkliftError(f"strength {self.strength}: must be from 0 to 1")

    @property
    def changes(self) -> bool:
        return self.keep_colour or self.strength < 1.0


def adjusted(styled: np.ndarray, original: np.ndarray, adjust: StyleAdjust) -> np.ndarray:
    """The answer (RGB uint8) with `adjust` applied against the original of the same size."""
    if adjust.keep_colour:
        luma = cv2.cvtColor(styled, cv2.COLOR_RGB2YCrCb)
        luma[..., 1:] = cv2.cvtColor(original, cv2.COLOR_RGB2YCrCb)[..., 1:]
        styled = cv2.cvtColor(luma, cv2.COLOR_YCrCb2RGB)
    if adjust.strength < 1.0:
        styled = cv2.addWeighted(styled, adjust.strength, original, 1.0 - adjust.strength, 0.0)
    return styled
