"""Pascal VOC folders: Annotations/*.xml, JPEGImages/ and ImageSets/Main/{train,val,test}.txt for the splits.

VOC keeps no list of classes, so an import orders them by name.
"""

from __future__ import annotations

import glob
from pathlib import Path

from forklift.data.dataset import SPLITS, Dataset
from forklift.data.interchange.common import (
    MALFORMED_ANNOTATION,
    ORPHAN_ANNOTATION,
    DatasetBuilder,
    ExportSummary,
    checked_size,
    detect_only,
    labelled_images,
    new_folder,
    outlines_as_boxes,
    place_image,
)
from forklift.data.interchange.voc_xml import MalformedXml, VocAnnotation, parse_voc_xml, voc_xml
from forklift.errors import ForkliftError


def read(source: Path, builder: DatasetBuilder, images: Path) -> None:
    """Import a VOC folder; images not named in any ImageSets/Main split file are "train". An XML that cannot be
    read, or whose image is not there, is skipped and reported."""
    folder = source / "Annotations"
    if not folder.is_dir():
        raise ForkliftError(f"{source}: not a VOC folder (no Annotations/ in it)")
    splits = _splits(source / "ImageSets" / "Main")
    found = [entry for xml in sorted(folder.glob("*.xml")) if (entry := _entry(xml, images, builder))]
    for name in sorted({box[0] for _, _, annotation in found for box in annotation.boxes}):
        builder.add_class(name)
    for xml, path, annotation in found:
        split = splits.get(xml.stem, "train")
        builder.add_image(path.name, path, annotation.width, annotation.height, split, annotation.boxes, str(xml))
        builder.summary.difficult += annotation.difficult


def _entry(xml: Path, images: Path, builder: DatasetBuilder) -> tuple[Path, Path, VocAnnotation] | None:
    """One XML with its image and the image's size; None (and a skip recorded) when either cannot be had."""
    try:
        annotation = parse_voc_xml(xml.read_bytes(), str(xml))
    except MalformedXml as exc:
        builder.skip(MALFORMED_ANNOTATION, f"{xml.name} ({exc.reason})")
        return None
    path = images / annotation.filename if annotation.filename else _by_stem(images, xml.stem)
    if path is None or not (builder.holds(path) and path.is_file()):
        builder.skip(ORPHAN_ANNOTATION, f"{xml.name} -> {annotation.filename or xml.stem + '.*'}")
        return None
    size = checked_size(path, builder, path.name, width=annotation.width, height=annotation.height)
    if size is None:
        return None
    annotation.width, annotation.height = size
    return xml, path, annotation


def write(dataset: Dataset, out: Path) -> ExportSummary:
    """A VOC folder: one XML per image named after it, the images flat in JPEGImages/, one list per split."""
    detect_only(dataset, "VOC")
    images, notes = labelled_images(dataset)
    folder = new_folder(out)
    for sub in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (folder / sub).mkdir(parents=True)
    taken: set[str] = set()
    ids: dict[str, list[str]] = {split: [] for split in SPLITS}
    for image in images:
        name = place_image(dataset, image, folder / "JPEGImages", taken)
        stem = Path(name).stem
        (folder / "Annotations" / f"{stem}.xml").write_bytes(voc_xml(name, image.width, image.height, image.boxes))
        ids[image.split].append(stem)
    for split, names in ids.items():
        (folder / "ImageSets" / "Main" / f"{split}.txt").write_text("".join(f"{n}\n" for n in names))
    boxes = sum(len(image.boxes) for image in images)
    notes += outlines_as_boxes(images)
    return ExportSummary(folder, "voc", len(images), boxes, len(dataset.classes), notes=notes)


def _splits(folder: Path) -> dict[str, str]:
    """Image id -> split from whichever of the split files exist."""
    found: dict[str, str] = {}
    for split in SPLITS:
        path = folder / f"{split}.txt"
        if path.is_file():
            found.update((line.strip(), split) for line in path.read_text().splitlines() if line.strip())
    return found


def _by_stem(images: Path, stem: str) -> Path | None:
    """The image an XML without <filename> belongs to: the one of the same name, if there is one."""
    matches = sorted(p for p in images.glob(f"{glob.escape(stem)}.*") if p.is_file())
    return matches[0] if matches else None
