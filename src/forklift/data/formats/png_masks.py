"""A folder of PNG masks, the layout of most segmentation sets: `images/`, `masks/` (a mask per image, the same
stem, `.png`) and `classes.txt` (one name a line: line k names pixel value k; 0 is background, 255 ignore).

Masks may be gray or palette PNGs (Pascal VOC's are palette; the palette indices are the values). The layout has
no splits: imported images are all "train" (`forklift data split` assigns them), and export writes none.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from forklift.data.dataset import Dataset
from forklift.data.formats.common import (
    IMAGE_SUFFIXES,
    DatasetBuilder,
    ExportSummary,
    image_size,
    new_folder,
    place_image,
    segment_only,
)
from forklift.data.masks import load_mask, read_mask, write_mask
from forklift.errors import ForkliftError
from forklift.formats.labels import read_labels, write_labels
from forklift.vision.masks import IGNORE

CLASSES = "classes.txt"


def read(source: Path, builder: DatasetBuilder) -> None:
    """Import SOURCE/images/* with SOURCE/masks/<stem>.png each; a missing or bad mask names its file."""
    names = read_labels(source / CLASSES)
    if len(names) >= IGNORE:
        raise ForkliftError(f"{source / CLASSES}: {len(names)} classes do not fit 8-bit masks (at most {IGNORE - 1})")
    for name in names:
        builder.add_class(name)
    folder = source / "images"
    if not folder.is_dir():
        raise ForkliftError(f"{source}: no images/ folder (this layout is images/, masks/ and {CLASSES})")
    images = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    for path in images:
        width, height = image_size(path, str(path))
        mask = read_mask(source / "masks" / f"{path.stem}.png", width, height, len(names))
        builder.add_image(path.name, path, width, height, "train", [], str(path), mask=mask)


def write(dataset: Dataset, out: Path) -> ExportSummary:
    """OUT/images/, OUT/masks/ (each image's mask under its stem) and OUT/classes.txt."""
    segment_only(dataset, "masks")
    folder = new_folder(out)
    (folder / "images").mkdir()
    taken: set[str] = set()
    for image in dataset.images:
        name = place_image(dataset, image, folder / "images", taken)
        write_mask(folder / "masks" / f"{PurePosixPath(name).stem}.png", load_mask(dataset, image))
    write_labels(folder / CLASSES, dataset.classes)
    count = len(dataset.images)
    return ExportSummary(folder, "masks", count, count, len(dataset.classes), task="segment")
