"""PowerAI Vision's data-set zip: at the top level, each image with a VOC XML of the same name and a prop.json.

PowerAI Vision keeps no splits, so an import makes every image "train". Members whose names would land outside
the folder they are read into (absolute, `..`) are refused rather than skipped: such a zip is not trustworthy.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path, PurePosixPath

from forklift.data.dataset import Dataset
from forklift.data.formats.common import DatasetBuilder, ExportSummary, detect_only, image_size, unique_name
from forklift.data.formats.voc_xml import parse_voc_xml, voc_xml
from forklift.errors import ForkliftError

PROP = "prop.json"


def read(source: Path, builder: DatasetBuilder) -> None:
    """Import a PowerAI Vision zip; classes from prop.json first, then any others the XMLs name, by name."""
    try:
        archive = zipfile.ZipFile(source)
    except FileNotFoundError:
        raise ForkliftError(f"{source}: no such file") from None
    except zipfile.BadZipFile:
        raise ForkliftError(f"{source}: not a zip file") from None
    with archive:
        members = {_safe(source, info.filename): info for info in archive.infolist() if not info.is_dir()}
        for name in _categories(archive, members.get(PurePosixPath(PROP)), source):
            builder.add_class(name)
        parsed = [
            (member, parse_voc_xml(archive.read(members[member]), f"{source}:{member}"))
            for member in sorted(members)
            if member.suffix.lower() == ".xml"
        ]
        for name in sorted({box[0] for _, annotation in parsed for box in annotation.boxes}):
            builder.add_class(name)
        for member, annotation in parsed:
            where = f"{source}:{member}"
            image = member.with_name(annotation.filename) if annotation.filename else None
            if image not in members:
                raise ForkliftError(f"{where}: its image {annotation.filename!r} is not in the zip")
            content = archive.read(members[image])
            width, height = annotation.width, annotation.height
            if not width or not height:
                width, height = image_size(content, where)
            builder.add_image(image.name, content, width, height, "train", annotation.boxes, where)


def write(dataset: Dataset, out: Path) -> ExportSummary:
    """The zip at OUT (a new file), written aside and renamed so a half-written zip never looks complete."""
    detect_only(dataset, "PowerAI Vision")
    out = Path(out)
    if out.exists():
        raise ForkliftError(f"{out}: already exists; choose a new file name")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    taken: set[str] = {PurePosixPath(PROP).stem}
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        prop = {"name": dataset.root.name, "type": 0, "categories": list(dataset.classes)}
        archive.writestr(PROP, json.dumps(prop, indent=1) + "\n")
        for image in dataset.images:
            name = unique_name(PurePosixPath(image.file).name, taken)
            archive.write(dataset.path(image), name)
            xml = voc_xml(name, image.width, image.height, image.boxes, folder="")
            archive.writestr(f"{PurePosixPath(name).stem}.xml", xml)
    partial.replace(out)
    boxes = sum(len(image.boxes) for image in dataset.images)
    return ExportSummary(out, "powerai", len(dataset.images), boxes, len(dataset.classes))


def _safe(source: Path, name: str) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or ":" in path.parts[0]:
        raise ForkliftError(f"{source}: member {name!r} points outside the archive's folder; refusing this zip")
    return path


def _categories(archive: zipfile.ZipFile, prop: zipfile.ZipInfo | None, source: Path) -> list[str]:
    """prop.json's category names, as strings or objects with a name; none when there is no prop.json."""
    if prop is None:
        return []
    try:
        document = json.loads(archive.read(prop))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ForkliftError(f"{source}:{PROP}: not valid JSON: {exc}") from None
    categories = document.get("categories", []) if isinstance(document, dict) else None
    if not isinstance(categories, list):
        raise ForkliftError(f"{source}:{PROP}: 'categories' must be a list")
    names = [c.get("name") if isinstance(c, dict) else c for c in categories]
    if not all(isinstance(name, str) and name for name in names):
        raise ForkliftError(f"{source}:{PROP}: every category must be a name (or an object with a name)")
    return names
