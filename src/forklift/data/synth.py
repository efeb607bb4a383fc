"""Synthetic data sets: shapes on textured backgrounds, reproducible by seed.

They let training, evaluation and the web app be tried and tested without downloading anything: every image,
box and mask comes from a seed, so the same seed gives byte-identical files. Images are drawn with OpenCV in BGR
order. Detect and segment draw the same scenes for a seed; a segment mask holds exactly the visible pixels of each
kept shape (later shapes cover earlier ones), the same pixels its detect box is tight around.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from tqdm import tqdm

from forklift.data.dataset import Box, Dataset, ImageRecord, save_dataset
from forklift.data.masks import write_mask
from forklift.errors import ForkliftError
from forklift.vocabulary import Task, word

MIN_SIZE = 64  # smaller images leave no room for shapes above MIN_SIDE
MAX_SIZE = 8192  # larger ones are arrays of gigabytes a side each (100000 asked for 149 GiB)
MIN_SIDE = 6  # shapes whose visible part is narrower or lower than this many pixels are dropped
MIN_VISIBLE = 0.5  # shapes less visible than this (hidden by later ones or outside the image) are dropped
HELD_OUT = 0.1  # fraction of the images in each of val and test
MAX_OBJECTS = 4
DEFAULT_OBJECTS = (1, MAX_OBJECTS)  # shapes per detect or segment image


def _polygon(corners: int, start_degrees: float, radii: tuple[float, ...] = (1.0,)) -> np.ndarray:
    angles = np.radians(start_degrees + 360.0 * np.arange(corners) / corners)
    r = np.array([radii[k % len(radii)] for k in range(corners)])
    return np.stack([r * np.cos(angles), -r * np.sin(angles)], axis=1)


def _cross(arm: float) -> np.ndarray:
    """A plus sign whose arms are 2 * arm wide: one arm's corners, turned a quarter at a time."""
    corners = [np.array([(arm, 1.0), (arm, arm), (1.0, arm)])]
    for _ in range(3):
        corners.append(corners[-1] @ np.array([[0.0, -1.0], [1.0, 0.0]]))
    return np.concatenate(corners)


# Each class's outline around (0, 0) with radius about 1; a circle is a fine polygon so all draw the same way.
OUTLINES: dict[str, np.ndarray] = {
    "circle": _polygon(64, 0),
    "square": _polygon(4, 45),
    "triangle": _polygon(3, 90),
    "star": _polygon(10, 90, radii=(1.0, 0.45)),
    "cross": _cross(0.3),
}
CLASSES = list(OUTLINES)


@dataclass(frozen=True)
class _Shape:
    """A shape placed on one image: its class, the pixels it covers, their colour and its whole area."""

    label: str
    mask: np.ndarray
    colour: np.ndarray
    area: float


def synth_shapes(
    out: Path,
    n: int,
    size: int,
    *,
    seed: int = 0,
    task: Task | str = Task.DETECT,
    object_size: tuple[int, int] | None = None,
    objects: tuple[int, int] = DEFAULT_OBJECTS,
) -> Dataset:
    """Write a data set of n size x size PNG images of shapes (and for segment their PNG masks) into the new or
    empty folder out.

    `object_size` (MIN, MAX): the longer side of each shape's box in pixels, drawn uniformly (None: radii of
    6-20 % of the image, as always); `objects` (MIN, MAX): shapes per image. Small, many objects make
    a data set for small-object detectors; the defaults give the same files for a seed as before they existed.
    """
    out = Path(out)
    task = word(Task, task, where="task")
    if size < MIN_SIZE:
        raise ForkliftError(f"size {size} is too small for shapes: use at least {MIN_SIZE} pixels")
    if size > MAX_SIZE:
        raise ForkliftError(f"size {size} is too large: at most {MAX_SIZE} pixels a side")
    _check_ranges(task, size, object_size, objects)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ForkliftError(f"{out}: already exists and is not an empty folder; choose a new one")
    (out / "images").mkdir(parents=True, exist_ok=True)
    seeds = np.random.SeedSequence(seed).spawn(n + 1)  # image i's drawing does not depend on n
    splits = _splits(n, np.random.default_rng(seeds[0]))
    records = []
    for i in tqdm(range(n), desc="synth", unit="image", disable=None, leave=False):
        image, boxes, labels = _scene(np.random.default_rng(seeds[i + 1]), size, task, object_size, objects)
        record = ImageRecord(file=f"images/{i + 1:06d}.png", width=size, height=size, split=splits[i])
        if task == Task.DETECT:
            record.boxes = boxes
        elif task == Task.SEGMENT:
            record.mask = f"masks/{i + 1:06d}.png"
            write_mask(out / record.mask, labels)
        else:
            record.label = boxes[0].label
        png = cv2.imencode(".png", image, [cv2.IMWRITE_PNG_COMPRESSION, 3])[1]
        (out / record.file).write_bytes(png.tobytes())
        records.append(record)
    dataset = Dataset(task=task, classes=list(CLASSES), images=records, root=out)
    save_dataset(dataset, out)
    return dataset


def _check_ranges(task: Task, size: int, object_size: tuple[int, int] | None, objects: tuple[int, int]) -> None:
    """One line for a range that cannot be drawn: a shape below MIN_SIDE or larger than the image, no shapes,
    MIN above MAX, or a range for classify (whose one shape is large and central by design)."""
    if task == Task.CLASSIFY and (object_size is not None or objects != DEFAULT_OBJECTS):
        raise ForkliftError("--object-size and --objects: only for detect and segment data sets")
    if object_size is not None:
        low, high = object_size
        if low > high:
            raise ForkliftError(f"--object-size {low}:{high}: MIN is larger than MAX")
        if low < MIN_SIDE:
            raise ForkliftError(f"--object-size {low}:{high}: shapes under {MIN_SIDE} pixels are too small to draw")
        if high > size:
            raise ForkliftError(f"--object-size {low}:{high}: larger than the {size}-pixel image")
    low, high = objects
    if low > high:
        raise ForkliftError(f"--objects {low}:{high}: MIN is larger than MAX")
    if low < 1:
        raise ForkliftError(f"--objects {low}:{high}: each image needs at least 1 shape")


def _splits(n: int, rng: np.random.Generator) -> list[str]:
    """About 80/10/10 train/val/test, the held-out images picked at random."""
    held = int(n * HELD_OUT + 0.5)
    order = rng.permutation(n)
    splits = ["train"] * n
    for k in order[:held]:
        splits[k] = "val"
    for k in order[held : 2 * held]:
        splits[k] = "test"
    return splits


def _scene(
    rng: np.random.Generator,
    size: int,
    task: Task,
    object_size: tuple[int, int] | None = None,
    objects: tuple[int, int] = DEFAULT_OBJECTS,
) -> tuple[np.ndarray, list[Box], np.ndarray]:
    """One image, the boxes of its visible shapes and its label map (0: background, k: CLASSES[k - 1]):
    `objects` shapes (1-4) for detect and segment, exactly 1 (large, central) for classify."""
    while True:
        background = _background(rng, size)
        if task != Task.CLASSIFY:
            count = int(rng.integers(objects[0], objects[1] + 1))
            if object_size is None:  # the original draws, in their order: the same files for a seed as ever
                shapes = [
                    _shape(rng, background, rng.uniform(0.06, 0.2) * size, rng.uniform(0, size, 2))
                    for _ in range(count)
                ]
            else:
                shapes = [
                    _shape(rng, background, rng.uniform(*object_size) / 2, rng.uniform(0, size, 2), exact_side=True)
                    for _ in range(count)
                ]
        else:
            shapes = [
                _shape(rng, background, rng.uniform(0.2, 0.32) * size, size * (0.5 + rng.uniform(-0.12, 0.12, 2)))
            ]
        kept, owner = _visible(shapes)
        if kept:  # a scene whose every shape fell out is drawn again
            break
    image = background.astype(np.float32)
    for i in kept:
        image[owner == i] = shapes[i].colour
    image += rng.standard_normal(image.shape, dtype=np.float32) * rng.uniform(3, 10)
    labels = np.zeros(owner.shape, np.uint8)
    for i in kept:
        labels[owner == i] = CLASSES.index(shapes[i].label) + 1
    boxes = [_box(shapes[i].label, owner == i) for i in kept]
    return np.clip(image, 0, 255).astype(np.uint8), boxes, labels


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    """A linear gradient between two colours, soft blotches of noise, and a few random lines."""
    start, end = rng.uniform(0, 255, (2, 3))
    angle = rng.uniform(0, 2 * np.pi)
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float32)
    t = xs * np.cos(angle) + ys * np.sin(angle)
    t = (t - t.min()) / np.ptp(t)
    image = start + (end - start) * t[..., None]
    cells = int(rng.integers(3, 9))
    blotches = rng.normal(0, 25, (cells, cells, 3)).astype(np.float32)
    image += cv2.resize(blotches, (size, size), interpolation=cv2.INTER_CUBIC)
    image = np.clip(image, 0, 255).astype(np.uint8)
    for _ in range(int(rng.integers(2, 9))):
        (x1, y1), (x2, y2) = rng.integers(0, size, (2, 2)).tolist()
        colour = rng.integers(0, 256, 3).tolist()
        cv2.line(image, (x1, y1), (x2, y2), colour, int(rng.integers(1, 4)), cv2.LINE_AA)
    return image


def _shape(
    rng: np.random.Generator, background: np.ndarray, radius: float, centre: np.ndarray, *, exact_side: bool = False
) -> _Shape:
    """A shape of a random class, stretched a little, rotated, in a colour that stands out from what is under it.
    With `exact_side` the outline is scaled so that its box's longer side is 2 * radius, so that an asked object
    size holds for every class and rotation."""
    label = CLASSES[int(rng.integers(len(CLASSES)))]
    angle = rng.uniform(0, 2 * np.pi)
    rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    stretch = radius * rng.uniform(0.85, 1.15, 2)
    outline = (OUTLINES[label] * stretch) @ rotation.T
    if exact_side:
        outline *= 2 * radius / np.ptp(outline, axis=0).max()
    points = outline + centre
    mask = np.zeros(background.shape[:2], np.uint8)
    cv2.fillPoly(mask, [np.round(points * 16).astype(np.int32)], 1, cv2.LINE_8, shift=4)
    mask = mask.astype(bool)
    under = background[mask].mean(axis=0) if mask.any() else background.mean(axis=(0, 1))
    candidates = rng.integers(0, 256, (8, 3))
    distance = np.linalg.norm(candidates - under, axis=1)
    pick = int(np.argmax(distance >= 90)) if (distance >= 90).any() else int(np.argmax(distance))
    return _Shape(label, mask, candidates[pick].astype(np.float32), float(cv2.contourArea(points.astype(np.float32))))


def _visible(shapes: list[_Shape]) -> tuple[list[int], np.ndarray]:
    """The shapes that stay (drawn in order, later on top) and the map of which one owns each pixel (-1: none).

    Dropping a shape only uncovers those under it, so repeating until nothing more drops keeps every kept shape's
    box exactly its visible pixels.
    """
    kept = list(range(len(shapes)))
    while True:
        owner = np.full(shapes[0].mask.shape, -1, np.int16)
        for i in kept:
            owner[shapes[i].mask] = i
        still = [i for i in kept if _shows(owner == i, shapes[i].area)]
        if still == kept:
            return kept, owner
        kept = still


def _shows(visible: np.ndarray, area: float) -> bool:
    if visible.sum() < MIN_VISIBLE * area:
        return False
    ys, xs = np.nonzero(visible)
    return int(xs.max() - xs.min()) + 1 >= MIN_SIDE and int(ys.max() - ys.min()) + 1 >= MIN_SIDE


def _box(label: str, visible: np.ndarray) -> Box:
    """The tight bounds of a shape's visible pixels: x1, y1 of the first pixel, x2, y2 just past the last."""
    ys, xs = np.nonzero(visible)
    return Box(label, float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1))
