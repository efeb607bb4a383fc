"""Import and export between forklift's data-set format and other tools' ones: COCO, Pascal VOC, YOLO, PowerAI Vision,
and a folder of PNG masks.

One module per format, each with `read` (into a DatasetBuilder, which copies images, clips boxes and writes masks)
and `write`. COCO carries either task; masks is segment only; the others are detect only.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from forklift.data.dataset import Dataset, load_dataset
from forklift.data.interchange import coco, png_masks, powerai, voc, yolo
from forklift.data.interchange.archives import OWN_FILES, Source, located_sources, safe_extract
from forklift.data.interchange.common import UNSAFE_ENTRY, DatasetBuilder, ExportSummary, ImportSummary
from forklift.errors import ForkliftError
from forklift.vocabulary import DataFormat, Task, word


@dataclass(frozen=True)
class Interchange:
    """One format: how it is read into a DatasetBuilder, how it is written, the tasks an import of it can make (the
    first is the default) and, for the formats whose files name images elsewhere (--images), where those are by
    default."""

    read: Callable[[Path, DatasetBuilder, Path], None]  # (source, builder, images folder)
    write: Callable[[Dataset, Path], ExportSummary]
    tasks: tuple[Task, ...] = (Task.DETECT,)
    default_images: Callable[[Path], Path] | None = None  # None: the format holds or names its own images


def _own_images(read: Callable[[Path, DatasetBuilder], None]) -> Callable[[Path, DatasetBuilder, Path], None]:
    """A reader of a format that carries its images, in the shape of the others (the images folder goes unused)."""
    return lambda source, builder, _images: read(source, builder)


FORMATS: dict[DataFormat, Interchange] = {
    DataFormat.COCO: Interchange(coco.read, coco.write, (Task.DETECT, Task.SEGMENT), lambda source: source.parent),
    DataFormat.VOC: Interchange(voc.read, voc.write, default_images=lambda source: source / "JPEGImages"),
    DataFormat.YOLO: Interchange(_own_images(yolo.read), yolo.write),
    DataFormat.POWERAI: Interchange(_own_images(powerai.read), powerai.write),
    DataFormat.MASKS: Interchange(_own_images(png_masks.read), png_masks.write, (Task.SEGMENT,)),
}

__all__ = ["FORMATS", "ExportSummary", "ImportSummary", "export_dataset", "import_dataset"]


def import_dataset(
    format_name: DataFormat | str,
    source: Path,
    out: Path,
    *,
    images: Path | None = None,
    task: Task | str | None = None,
) -> ImportSummary:
    """Make the forklift data set OUT from SOURCE (COCO JSON, VOC folder, YOLO data.yaml, PowerAI zip or masks
    folder; for COCO, VOC and YOLO also the folder or zip an export comes as, its own file found inside). task is
    what to read from COCO: its boxes (detect, the default) or its segmentations (segment).

    images is where COCO's file names and VOC's images are found (default: the JSON's folder, SOURCE/JPEGImages).
    Real exports have a few bad items (an image missing, an annotation naming an unknown id): those are skipped and
    reported by kind in summary.lines(), and summary.skipped counts them. A source that is unusable as a whole (not
    the format, no image importable) is a ForkliftError, and OUT is removed again so nothing half-made is left.
    """
    source, out = Path(source), Path(out)
    kind = _format(format_name)
    interchange = FORMATS[kind]
    if images is not None and interchange.default_images is None:
        raise ForkliftError(f"--images applies to coco and voc only: {kind} names its own images")
    chosen = task or interchange.tasks[0]
    if chosen not in interchange.tasks:
        raise ForkliftError(f"--task {chosen}: {kind} imports {' or '.join(interchange.tasks)} data sets")
    if not source.exists():
        raise ForkliftError(f"{source}: no such file or folder")
    # what the import may read: --images, else the folder given (or the JSON's or yaml's folder) or the zip
    builder = DatasetBuilder(out, Task(chosen), root=images or (source if source.is_dir() else source.parent))
    unpacked, given = None, source
    try:
        sources = [Source(source)]
        if kind in OWN_FILES and zipfile.is_zipfile(source) and source.is_file():
            unpacked = Path(tempfile.mkdtemp(prefix=f".{out.name}-unpacked-", dir=out.parent))
            builder.root = (images or unpacked).resolve()
            extracted = safe_extract(source, unpacked)
            for refusal in extracted.refused:
                builder.skip(UNSAFE_ENTRY, refusal)
            sources = located_sources(kind, unpacked, source)
        elif kind in OWN_FILES and source.is_dir():
            sources = located_sources(kind, source, source)
        for source, split in sources:
            builder.split = split or "train"
            folder = images or (interchange.default_images(source) if interchange.default_images else source)
            interchange.read(source, builder, folder)
        return builder.finish(given)
    except (ForkliftError, OSError) as exc:
        shutil.rmtree(out)  # it was new or empty: nothing of the user's is lost
        if isinstance(exc, OSError):
            raise ForkliftError(f"{source}: cannot read it as a {kind} export ({exc.strerror or exc})") from exc
        raise
    finally:
        if unpacked is not None:
            shutil.rmtree(unpacked, ignore_errors=True)


def export_dataset(format_name: DataFormat | str, data: Path, out: Path) -> ExportSummary:
    """Write the forklift data set DATA in another tool's format at OUT (a new folder; for powerai a new .zip). An
    export that fails half way (an image missing) leaves no half-written OUT behind: it was new or empty."""
    write, dataset, out = FORMATS[_format(format_name)].write, load_dataset(Path(data)), Path(out)
    was_empty = out.is_dir() and not any(out.iterdir())
    made = not out.exists()
    try:
        return write(dataset, out)
    except BaseException as exc:  # Ctrl-C too
        if out.is_dir() and not out.is_symlink() and (made or was_empty):
            shutil.rmtree(out, ignore_errors=True)
            if was_empty:
                out.mkdir(exist_ok=True)
        if isinstance(exc, OSError):
            where = exc.filename or out
            raise ForkliftError(
                f"{where}: the export stopped: {exc.strerror or exc}; nothing was left in {out}"
            ) from exc
        raise


def _format(name: DataFormat | str) -> DataFormat:
    return word(DataFormat, name, where="format")
