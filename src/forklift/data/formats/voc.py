"""Pascal VOC folders: Annotations/*.xml, JPEGImages/ and ImageSets/Main/{train,val,test}.txt for the splits.

VOC keeps no list of classes, so an import orders them by name.
"""

from __future__ import annotations

from pathlib import Path

from forklift.data.dataset import SPLITS, Dataset
from forklift.data.formats.common import DatasetBuilder, ExportSummary, detect_only, image_size, new_folder, place_image
from forklift.data.formats.voc_xml import VocAnnotation, parse_voc_xml, voc_xml
from forklift.errors import ForkliftError


def read(source: Path, builder: DatasetBuilder, images: Path) -> None:
    """Import a VOC folder; images not named in any ImageSets/Main split file are "train"."""
    folder = source / "Annotations"
    if not folder.is_dir():
        raise ForkliftError(f"{source}: not a VOC folder (no Annotations/ in it)")
    splits = _splits(source / "ImageSets" / "Main")
    parsed: list[tuple[Path, VocAnnotation]] = [
        (xml, parse_voc_xml(xml.read_bytes(), str(xml))) for xml in sorted(folder.glob("*.xml"))
    ]
    for name in sorted({box[0] for _, annotation in parsed for box in annotation.boxes}):
        builder.add_class(name)
    for xml, annotation in parsed:
        path = images / annotation.filename if annotation.filename else _by_stem(images, xml.stem)
        width, height = annotation.width, annotation.height
        if not width or not height:
            width, height = image_size(path, str(xml))
        builder.add_image(path.name, path, width, height, splits.get(xml.stem, "train"), annotation.boxes, str(xml))


def write(dataset: Dataset, out: Path) -> ExportSummary:
    """A VOC folder: one XML per image named after it, the images flat in JPEGImages/, one list per split."""
    detect_only(dataset, "VOC")
    folder = new_folder(out)
    for sub in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (folder / sub).mkdir(parents=True)
    taken: set[str] = set()
    ids: dict[str, list[str]] = {split: [] for split in SPLITS}
    for image in dataset.images:
        name = place_image(dataset, image, folder / "JPEGImages", taken)
        stem = Path(name).stem
        (folder / "Annotations" / f"{stem}.xml").write_bytes(voc_xml(name, image.width, image.height, image.boxes))
        ids[image.split].append(stem)
    for split, names in ids.items():
        (folder / "ImageSets" / "Main" / f"{split}.txt").write_text("".join(f"{n}\n" for n in names))
    boxes = sum(len(image.boxes) for image in dataset.images)
    return ExportSummary(folder, "voc", len(dataset.images), boxes, len(dataset.classes))


def _splits(folder: Path) -> dict[str, str]:
    """Image id -> split from whichever of the split files exist."""
    found: dict[str, str] = {}
    for split in SPLITS:
        path = folder / f"{split}.txt"
        if path.is_file():
            found.update((line.split()[0], split) for line in path.read_text().splitlines() if line.strip())
    return found


def _by_stem(images: Path, stem: str) -> Path:
    """The image an XML without <filename> belongs to: the one of the same name."""
    matches = sorted(p for p in images.glob(f"{stem}.*") if p.is_file())
    if not matches:
        raise ForkliftError(f"{images}: no image named {stem}.* for {stem}.xml")
    return matches[0]
