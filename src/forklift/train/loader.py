"""Images of a data set as training batches: letterboxed like predict does it, augmented on train.

Inputs are RGB in [0, 1], letterboxed to the network size with the runtime's own `letterbox`, so the net sees
at training what it sees when served. Targets are rows (image in batch, class, cx, cy, w, h) in fractions of the
input. Augmentation draws from a generator seeded by (seed, epoch, image), and the shuffle from (seed, epoch):
an epoch's batches are the same whether or not the run was interrupted before it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import torch
from torch.utils.data import DataLoader

from forklift.data.dataset import Dataset, ImageRecord
from forklift.vision.resize import LETTERBOX_FILL, letterbox

HSV_GAINS = (0.015, 0.5, 0.3)  # hue, saturation, value: gains drawn in 1 +- these (YOLOv5's), times Augmentation.hsv
MIN_KEPT = 0.3  # a box cut by the image edge is kept if this much of its area remains
MIN_SIDE = 2.0  # pixels
MOSAIC_SHARE = 0.5  # of augmented samples, with mosaic on
MOSAIC_SCALE = (0.5, 1.0)  # the mosaic window, scaled to the input size by this


@dataclass(frozen=True)
class Augmentation:
    """How strongly training samples vary, a setting of the run (and a dimension a search can draw): the zoom is
    drawn in 1 +- `scale`, the shift up to `shift` of the input each way, the hue, saturation and value gains in
    1 +- HSV_GAINS times `hsv` (0 leaves colours alone); `mosaic` (detection) tiles four images into MOSAIC_SHARE
    of the samples."""

    scale: float = 0.25
    shift: float = 0.1
    hsv: float = 1.0
    mosaic: bool = False


DEFAULT_AUGMENTATION = Augmentation()


class AugmentedImages(torch.utils.data.Dataset, ABC):
    """The records of one split as (input, target) pairs at the input size, the skeleton every task's training
    images share. With `augment`, each sample is drawn from a generator seeded by (seed, epoch, index), so an
    epoch's samples are the same whether or not the run was interrupted; the trainer sets `epoch`."""

    def __init__(
        self,
        dataset: Dataset,
        records: list[ImageRecord],
        size: tuple[int, int],
        *,
        augment: bool,
        seed: int = 0,
        augmentation: Augmentation = DEFAULT_AUGMENTATION,
    ) -> None:
        self.dataset, self.records = dataset, records
        self.width, self.height = size
        self.augment, self.seed, self.epoch = augment, seed, 0
        self.augmentation = augmentation
        self.class_index = {name: i for i, name in enumerate(dataset.classes)}

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, Any]:
        rng = np.random.default_rng([self.seed, self.epoch, index]) if self.augment else None
        return self.sample(index, rng)

    @abstractmethod
    def sample(self, index: int, rng: np.random.Generator | None) -> tuple[torch.Tensor, Any]:
        """Record `index` as (input, target); augmented with `rng` when one is given."""

    def decoded(self, index: int) -> np.ndarray:
        """Record `index`'s image as RGB uint8, upright."""
        return self.dataset.decoded(self.records[index])


def as_input(fitted: np.ndarray) -> torch.Tensor:
    """An RGB uint8 HxWx3 image -> [3, H, W] float in [0, 1], as the Darknet runtimes feed the network."""
    return torch.from_numpy(np.ascontiguousarray(fitted.transpose(2, 0, 1))).float() / 255.0


class DetectionImages(AugmentedImages):
    """(image [3, H, W] float, targets [n, 5] class, cx, cy, w, h) for each usable image of a split.

    With `mosaic`, half of the augmented samples are four images (this one and three drawn at random) tiled
    around a random centre and cut back to the input size: more objects per sample, more of them cut by an edge
    and at more places in the frame, which helps small data sets.
    """

    def sample(self, index: int, rng: np.random.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        if rng is None:
            fitted, boxes, classes = self._letterboxed(index)
        else:
            if self.augmentation.mosaic and rng.random() < MOSAIC_SHARE:
                fitted, boxes, classes = self._mosaic(index, rng)
            else:
                fitted, boxes, classes = random_affine(*self._letterboxed(index), rng, self.augmentation)
            if rng.random() < 0.5:
                fitted = fitted[:, ::-1]
                boxes = boxes.copy()
                boxes[:, [0, 2]] = fitted.shape[1] - boxes[:, [2, 0]]
            fitted = hsv_jitter(fitted, rng, self.augmentation.hsv)
        return as_input(fitted), self._targets(boxes, classes)

    def _letterboxed(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The image letterboxed to the input size as predict does it, its boxes (x1, y1, x2, y2) and classes."""
        record = self.records[index]
        fitted, placement = letterbox(self.decoded(index), self.width, self.height)
        boxes = np.array([[b.x1, b.y1, b.x2, b.y2] for b in record.boxes], dtype=np.float64).reshape(-1, 4)
        boxes[:, 0::2] = boxes[:, 0::2] * placement.scale_x + placement.pad_x
        boxes[:, 1::2] = boxes[:, 1::2] * placement.scale_y + placement.pad_y
        classes = np.array([self.class_index[b.label] for b in record.boxes], dtype=np.int64)
        return fitted, boxes, classes

    def _mosaic(self, index: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Four letterboxed images on a 2W x 2H canvas meeting at a random centre, then a window of the input size
        around that centre, scaled by a random factor of MOSAIC_SCALE."""
        w, h = self.width, self.height
        canvas = np.full((2 * h, 2 * w, 3), LETTERBOX_FILL, dtype=np.uint8)
        centre = rng.uniform(0.5, 1.5, 2) * (w, h)
        cx, cy = int(centre[0]), int(centre[1])
        picks = [index, *rng.integers(0, len(self.records), 3).tolist()]
        corners = [(cx - w, cy - h), (cx, cy - h), (cx - w, cy), (cx, cy)]  # top-left of each tile on the canvas
        all_boxes, all_classes = [], []
        for pick, (x0, y0) in zip(picks, corners, strict=True):
            tile, boxes, classes = self._letterboxed(pick)
            left, top = max(x0, 0), max(y0, 0)
            right, bottom = min(x0 + w, 2 * w), min(y0 + h, 2 * h)
            canvas[top:bottom, left:right] = tile[top - y0 : bottom - y0, left - x0 : right - x0]
            all_boxes.append(boxes + np.array([x0, y0, x0, y0], dtype=np.float64))
            all_classes.append(classes)
        scale = rng.uniform(*MOSAIC_SCALE)
        matrix = np.array([[scale, 0, w / 2 - scale * cx], [0, scale, h / 2 - scale * cy]])
        return warp(canvas, np.concatenate(all_boxes), np.concatenate(all_classes), matrix, (w, h))

    def _targets(self, boxes: np.ndarray, classes: np.ndarray) -> torch.Tensor:
        size = np.array([self.width, self.height], dtype=np.float64)
        centre = (boxes[:, 0:2] + boxes[:, 2:4]) / 2 / size
        extent = (boxes[:, 2:4] - boxes[:, 0:2]) / size
        rows = np.concatenate([classes[:, None].astype(np.float64), centre, extent], axis=1)
        return torch.from_numpy(rows).float().reshape(-1, 5)


def random_affine(
    image: np.ndarray, boxes: np.ndarray, classes: np.ndarray, rng: np.random.Generator, augmentation: Augmentation
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scale about the centre and shift; boxes follow, are clipped, and dropped when mostly cut off."""
    h, w = image.shape[:2]
    return warp(image, boxes, classes, random_scale_shift(w, h, rng, augmentation), (w, h))


def random_scale_shift(width: int, height: int, rng: np.random.Generator, augmentation: Augmentation) -> np.ndarray:
    """A 2x3 affine matrix that scales a width x height image about its centre and shifts it, as strongly as
    `augmentation` says; shared so that a mask can follow its image through the same warp."""
    scale = rng.uniform(1 - augmentation.scale, 1 + augmentation.scale)
    shift = rng.uniform(-augmentation.shift, augmentation.shift, 2) * (width, height)
    return np.array([[scale, 0, (1 - scale) * width / 2 + shift[0]], [0, scale, (1 - scale) * height / 2 + shift[1]]])


def warp(
    image: np.ndarray, boxes: np.ndarray, classes: np.ndarray, matrix: np.ndarray, size: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The image through a scale-and-shift `matrix` into `size`; boxes follow, are clipped to it, and are dropped
    when thinner than MIN_SIDE or left with less than MIN_KEPT of their area."""
    w, h = size
    warped = cv2.warpAffine(image, matrix, (w, h), borderValue=(LETTERBOX_FILL,) * 3)
    moved = boxes * matrix[0, 0] + np.tile(matrix[:, 2], 2)
    clipped = moved.copy()
    clipped[:, 0::2] = clipped[:, 0::2].clip(0, w)
    clipped[:, 1::2] = clipped[:, 1::2].clip(0, h)
    sides = clipped[:, 2:4] - clipped[:, 0:2]
    area = sides.prod(1)
    keep = (sides.min(1) >= MIN_SIDE) & (area >= MIN_KEPT * (moved[:, 2:4] - moved[:, 0:2]).prod(1))
    return warped, clipped[keep], classes[keep]


def hsv_jitter(image: np.ndarray, rng: np.random.Generator, strength: float) -> np.ndarray:
    """Random hue, saturation and brightness gains (HSV_GAINS times `strength`), on an RGB uint8 image; at strength
    0 the image as it is (a round trip through HSV would still move some values by one)."""
    if strength == 0:
        return image
    gains = 1 + rng.uniform(-1, 1, 3) * np.multiply(HSV_GAINS, strength)
    hue, sat, val = cv2.split(cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2HSV))
    ramp = np.arange(256, dtype=np.float64)
    hue = cv2.LUT(hue, ((ramp * gains[0]) % 180).astype(np.uint8))
    sat = cv2.LUT(sat, (ramp * gains[1]).clip(0, 255).astype(np.uint8))
    val = cv2.LUT(val, (ramp * gains[2]).clip(0, 255).astype(np.uint8))
    return cv2.cvtColor(cv2.merge((hue, sat, val)), cv2.COLOR_HSV2RGB)


def collate(batch: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack images; prefix each target row with its image's position in the batch -> [N, 6]."""
    images = torch.stack([image for image, _ in batch])
    rows = [torch.cat([torch.full((len(t), 1), float(i)), t], dim=1) for i, (_, t) in enumerate(batch)]
    return images, torch.cat(rows) if rows else torch.zeros(0, 6)


def epoch_loader(
    images: AugmentedImages,
    batch: int,
    epoch: int,
    shuffle: bool,
    workers: int = 0,
    collate_fn: Callable[[list[Any]], Any] = collate,
    *,
    rank: int = 0,
    world: int = 1,
) -> DataLoader:
    """The batches of one epoch for `rank` of `world`: shuffled by (seed, epoch), augmented by (seed, epoch,
    image); `batch` is this rank's share of each global batch (`global_batches`)."""
    images.epoch = epoch
    generator = torch.Generator().manual_seed(images.seed * 100_003 + epoch)
    # The draw a shuffling DataLoader makes from its generator (its workers' base seed) before the permutation:
    # taken here too, so the order is the one forklift's runs always had (an older checkpoint resumes unchanged).
    torch.empty((), dtype=torch.int64).random_(generator=generator)
    order = torch.randperm(len(images), generator=generator).tolist() if shuffle else list(range(len(images)))
    return DataLoader(
        images,
        batch_sampler=global_batches(order, batch, rank=rank, world=world),
        collate_fn=collate_fn,
        num_workers=workers,
    )


def global_batches(order: list[int], batch: int, *, rank: int, world: int) -> list[list[int]]:
    """Rank `rank`'s batches: the epoch's `order` cut into global batches of `batch` x `world` images, of which
    each rank takes its own contiguous share. So the ranks together see exactly the batches one process of
    `batch` x `world` would (what makes N ranks train like one process with N times the batch), and no image
    twice. The order is first padded to a multiple of `world` with its own first images, so every rank takes
    the same number of steps (a rank with nothing to do would stall the others' gradient exchange)."""
    padded = order + [order[k % len(order)] for k in range(-len(order) % world)] if order else order
    size = batch * world
    batches = []
    for start in range(0, len(padded), size):
        chunk = padded[start : start + size]
        share = len(chunk) // world
        batches.append(chunk[rank * share : (rank + 1) * share])
    return batches


def steps_per_epoch(images: int, batch: int, world: int = 1) -> int:
    """How many steps `global_batches` makes of an epoch of `images` images."""
    return len(global_batches(list(range(images)), batch, rank=0, world=world))
