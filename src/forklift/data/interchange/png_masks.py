"""A folder of PNG masks, the layout of most segmentation sets: `images/`, `masks/` (a mask per image, the same
stem, `.png`) and `classes.txt` (one name a line: line k names pixel value k; 0 is background, 255 ignore).

Masks may be gray or palette PNGs (Pascal VOC's are palette; the palette indices are the values). The layout has
no splits: imported images are all "train" (`forklift data split` assigns them), and export writes none.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import numpy as np

from forklift.data.dataset import Dataset
from forklift.data.interchange.common import (
    IMAGE_SUFFIXES,
    DatasetBuilder,
    ExportSummary,
    SkipKind,
    checked_size,
    new_folder,
    place_image,
    segment_only,
)
from forklift.data.masks import (
    MASK_SIZE,
    MASK_VALUES,
    MISSING_MASK,
    UNREADABLE_MASK,
    MaskProblem,
    load_mask,
    read_mask,
    write_mask,
)
from forklift.errors import ForkliftError
from forklift.model_files.labels import read_labels, write_labels
from forklift.vision.masks import IGNORE
from forklift.vocabulary import Task

CLASSES = "classes.txt"
ORPHAN_MASK = SkipKind("mask without an image", "masks without an image")
MASK_KINDS = {  # read_mask's problems as an import reports the images it skips for them
    MISSING_MASK: SkipKind("image without a mask", "images without a mask"),
    MASK_SIZE: SkipKind("mask of another size than its image", "masks of another size than their image"),
    UNREADABLE_MASK: SkipKind("unreadable mask", "unreadable masks"),
    MASK_VALUES: SkipKind("mask with values that are no class", "masks with values that are no class"),
}


def read(source: Path, builder: DatasetBuilder) -> None:
    """Import SOURCE/images/* with SOURCE/masks/<stem>.png each. An image without a usable mask (missing, another
    size, unreadable, values that are no class) and a mask without an image are skipped and reported."""
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
        size = checked_size(path, builder, path.name)
        if size is None:
            continue
        mask = _mask(path, size, builder, masks=source / "masks", classes=len(names))
        if mask is not None:
            builder.add_image(path.name, path, *size, "train", [], str(path), mask=mask)
    stems = {path.stem for path in images}
    for mask_path in sorted((source / "masks").glob("*.png")):
        if mask_path.stem not in stems:
            builder.skip(ORPHAN_MASK, mask_path.name)


def _mask(
    image: Path, size: tuple[int, int], builder: DatasetBuilder, *, masks: Path, classes: int
) -> np.ndarray | None:
    """image's label map from masks/<stem>.png; None (and a skip recorded, with the reason) when it is missing or
    unusable."""
    path = masks / f"{image.stem}.png"
    try:
        return read_mask(path, *size, classes)
    except MaskProblem as exc:
        reason = str(exc).removeprefix(f"{path}: ")
        builder.skip(MASK_KINDS[exc.problem], image.name if exc.problem == MISSING_MASK else f"{path.name} ({reason})")
        return None


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
    return ExportSummary(folder, "masks", count, count, len(dataset.classes), task=Task.SEGMENT)
