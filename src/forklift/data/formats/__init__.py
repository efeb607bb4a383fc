"""Import and export between forklift's data-set layout and foreign ones: COCO, Pascal VOC, YOLO, PowerAI Vision,
and a folder of PNG masks.

One module per format, each with `read` (into a DatasetBuilder, which copies images, clips boxes and writes masks)
and `write`. COCO carries either task; masks is segment only; the others are detect only.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from forklift.data.dataset import load_dataset
from forklift.data.formats import coco, png_masks, powerai, voc, yolo
from forklift.data.formats.common import DatasetBuilder, ExportSummary, ImportSummary
from forklift.errors import ForkliftError

FORMATS = ("coco", "voc", "yolo", "powerai", "masks")
IMPORT_TASKS = {"coco": ("detect", "segment"), "masks": ("segment",)}  # the rest: detect

__all__ = ["FORMATS", "ExportSummary", "ImportSummary", "export_dataset", "import_dataset"]


def import_dataset(
    format_name: str, source: Path, out: Path, images: Path | None = None, task: str | None = None
) -> ImportSummary:
    """Make the forklift data set OUT from SOURCE (COCO JSON, VOC folder, YOLO data.yaml, PowerAI zip or masks
    folder). task is what to read from COCO: its boxes (detect, the default) or its segmentations (segment).

    images is where COCO's file names and VOC's images are found (default: the JSON's folder, SOURCE/JPEGImages).
    On a bad input OUT is removed again, so a failed import leaves nothing half-made behind.
    """
    source, out = Path(source), Path(out)
    if format_name not in FORMATS:
        raise ForkliftError(f"unknown format {format_name!r}: expected one of {', '.join(FORMATS)}")
    if images is not None and format_name not in ("coco", "voc"):
        raise ForkliftError(f"--images applies to coco and voc only: {format_name} names its own images")
    tasks = IMPORT_TASKS.get(format_name, ("detect",))
    task = task or tasks[0]
    if task not in tasks:
        raise ForkliftError(f"--task {task}: {format_name} imports {' or '.join(tasks)} data sets")
    builder = DatasetBuilder(out, task)
    try:
        if format_name == "masks":
            png_masks.read(source, builder)
        elif format_name == "coco":
            coco.read(source, builder, images or source.parent)
        elif format_name == "voc":
            voc.read(source, builder, images or source / "JPEGImages")
        elif format_name == "yolo":
            yolo.read(source, builder)
        else:
            powerai.read(source, builder)
        return builder.finish()
    except ForkliftError:
        shutil.rmtree(out)  # it was new or empty: nothing of the user's is lost
        raise


def export_dataset(format_name: str, data: Path, out: Path) -> ExportSummary:
    """Write the forklift data set DATA in a foreign layout at OUT (a new folder; for powerai a new .zip)."""
    writers = {
        "coco": coco.write,
        "voc": voc.write,
        "yolo": yolo.write,
        "powerai": powerai.write,
        "masks": png_masks.write,
    }
    if format_name not in writers:
        raise ForkliftError(f"unknown format {format_name!r}: expected one of {', '.join(FORMATS)}")
    return writers[format_name](load_dataset(Path(data)), Path(out))
