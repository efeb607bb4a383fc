"""A plain folder of images as a data set of task `style` (images without labels): what style training reads
when `--data` has no dataset.json. Images are split by a seeded shuffle, a tenth (at least one) to val."""

from __future__ import annotations

from pathlib import Path

from forklift.data.dataset import Dataset, ImageRecord
from forklift.data.interchange.common import IMAGE_SUFFIXES, image_size
from forklift.data.split import assign_splits
from forklift.errors import ForkliftError
from forklift.vocabulary import Task

VAL_SHARE = 0.1


def image_folder_dataset(folder: Path, *, seed: int = 0) -> Dataset:
    """The images under `folder` (recursively; files Pillow cannot open are skipped and counted) as a style data
    set; one line when there are none."""
    if not folder.is_dir():
        raise ForkliftError(f"{folder}: no such folder of images")
    records, skipped = [], 0
    for path in sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()):
        try:
            width, height = image_size(path, str(path))
        except ForkliftError:
            skipped += 1
            continue
        records.append(ImageRecord(str(path.relative_to(folder)), width, height, "train"))
    if skipped:
        print(f"{folder}: skipping {skipped} files that are not readable images", flush=True)
    if not records:
        raise ForkliftError(f"{folder}: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) to train on")
    dataset = Dataset(Task.STYLE, [], records, folder)
    count = len(records)
    assign_splits(dataset, max(1, round(count * VAL_SHARE)) / count if count > 1 else 0.0, 0.0, seed=seed)
    return dataset
