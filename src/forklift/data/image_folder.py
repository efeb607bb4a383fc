"""A plain folder of images as a data set of task `style` (images without labels): what style training reads
when `--data` has no dataset.json. Images are split by a seeded shuffle, a tenth (at least one) to val."""

from __future__ import annotations

import random
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from forklift.data.dataset import Dataset, ImageRecord
from forklift.errors import ForkliftError
from forklift.vocabulary import Task

SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
VAL_SHARE = 0.1


def image_folder_dataset(folder: Path, *, seed: int = 0) -> Dataset:
    """The images under `folder` (recursively; files Pillow cannot open are skipped and counted) as a style data
    set; one line when there are none."""
    if not folder.is_dir():
        raise ForkliftError(f"{folder}: no such folder of images")
    records, skipped = [], 0
    for path in sorted(p for p in folder.rglob("*") if p.suffix.lower() in SUFFIXES and p.is_file()):
        try:
            with Image.open(path) as image:
                width, height = image.size
        except (UnidentifiedImageError, OSError):
            skipped += 1
            continue
        records.append(ImageRecord(str(path.relative_to(folder)), width, height, "train"))
    if skipped:
        print(f"{folder}: skipping {skipped} files that are not readable images", flush=True)
    if not records:
        raise ForkliftError(f"{folder}: no images ({', '.join(SUFFIXES)}) to train on")
    order = list(range(len(records)))
    random.Random(seed).shuffle(order)
    val = set(order[: max(1, round(len(records) * VAL_SHARE))]) if len(records) > 1 else set()
    for index in val:
        records[index].split = "val"
    return Dataset(Task.STYLE, [], records, folder)
