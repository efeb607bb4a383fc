"""Reassign train/val/test, reproducibly by seed, optionally keeping each class's share in every split."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from forklift.data.dataset import Dataset, ImageRecord, load_dataset, save_dataset
from forklift.data.masks import load_mask
from forklift.errors import ForkliftError
from forklift.vocabulary import Task


def split_dataset(path: Path, *, val: float, test: float, seed: int = 0, stratify: bool = False) -> Dataset:
    """Load a data set, reassign its splits and write dataset.json back (atomically, through save_dataset).

    Only the splits change: image and mask files stay where they are, and so do their paths."""
    dataset = load_dataset(path)
    assign_splits(dataset, val, test, seed=seed, stratify=stratify)
    save_dataset(dataset, dataset.root)
    return dataset


def assign_splits(dataset: Dataset, val: float, test: float, seed: int = 0, stratify: bool = False) -> None:
    """round(n * val) images to val and round(n * test) to test, the rest to train, picked at random by seed.

    Stratified, each image belongs to the group of its dominant class and every group gives its share, so a rare
    class is not left out of val by chance: the rounding goes first to groups that would otherwise give none.
    """
    if not (0 <= val < 1 and 0 <= test < 1 and val + test < 1):
        raise ForkliftError(f"--val {val} and --test {test} must be fractions that leave some images to train on")
    rng = np.random.default_rng(seed)
    groups = _groups(dataset, stratify)
    shuffled = [[group[k] for k in rng.permutation(len(group))] for group in groups]
    n = len(dataset.images)
    sizes = [len(group) for group in groups]
    val_counts = _allot(round(n * val), [size * val for size in sizes], sizes)
    left = [size - taken for size, taken in zip(sizes, val_counts, strict=True)]
    test_counts = _allot(round(n * test), [size * test for size in sizes], left)
    for group, v, t in zip(shuffled, val_counts, test_counts, strict=True):
        for k, image in enumerate(group):
            image.split = "val" if k < v else "test" if k < v + t else "train"


def _groups(dataset: Dataset, stratify: bool) -> list[list[ImageRecord]]:
    """The images in groups, in a fixed order: one group, or one per dominant class (and one for no objects)."""
    if not stratify:
        return [list(dataset.images)]
    by_class: dict[str | None, list[ImageRecord]] = {}
    for image in dataset.images:
        by_class.setdefault(_dominant(dataset, image), []).append(image)
    return [by_class[name] for name in [*dataset.classes, None] if name in by_class]


def _dominant(dataset: Dataset, image: ImageRecord) -> str | None:
    """The class with most boxes (segment: pixels) in the image, the first of the classes on a tie; its label for
    classify."""
    if dataset.task == Task.CLASSIFY:
        return image.label
    if dataset.task == Task.SEGMENT:
        if not dataset.classes:  # no class yet: nothing to stratify by
            return None
        counts = np.bincount(load_mask(dataset, image).ravel(), minlength=len(dataset.classes) + 1)
        k = int(np.argmax(counts[1 : len(dataset.classes) + 1]))
        return dataset.classes[k] if counts[k + 1] else None
    if not image.boxes:
        return None
    labels = Counter(box.label for box in image.boxes)
    return max(dataset.classes, key=lambda name: labels[name])


def _allot(total: int, quotas: list[float], room: list[int]) -> list[int]:
    """Whole counts near the quotas that add up to total (where room allows): each group's floor, then one more
    to groups that have none yet, then to those with the largest remainders."""
    counts = [min(int(quota), space) for quota, space in zip(quotas, room, strict=True)]
    order = sorted(range(len(quotas)), key=lambda g: (counts[g] > 0, counts[g] - quotas[g], g))
    extra = total - sum(counts)
    for g in order:
        if extra <= 0:
            break
        if counts[g] < room[g]:
            counts[g] += 1
            extra -= 1
    return counts
