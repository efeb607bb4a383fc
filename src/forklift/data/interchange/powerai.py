"""PowerAI Vision's data-set zip: at the top level, each image with a VOC XML of the same name and a prop.json.

PowerAI Vision keeps no splits, so an import makes every image "train". Members whose names would land outside
the folder they are read into (absolute, `..`) are refused rather than skipped: such a zip is not trustworthy.
"""

from __future__ import annotations

import json
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from forklift.atomic import written_atomically
from forklift.data.dataset import Dataset
from forklift.data.interchange.archives import entry_name, mac_metadata
from forklift.data.interchange.common import (
    MALFORMED_ANNOTATION,
    ORPHAN_ANNOTATION,
    UNREADABLE_IMAGE,
    DatasetBuilder,
    ExportSummary,
    SkipKind,
    checked_size,
    detect_only,
    export_name,
    exported_image,
    labelled_images,
    outlines_as_boxes,
)
from forklift.data.interchange.voc_xml import MalformedXml, VocAnnotation, parse_voc_xml, voc_xml
from forklift.errors import ForkliftError

PROP = "prop.json"


def read(source: Path, builder: DatasetBuilder) -> None:
    """Import a PowerAI Vision zip; classes from prop.json first, then any others the XMLs name, by name. An XML
    that cannot be read, or whose image is not in the zip, is skipped and reported."""
    try:
        archive = zipfile.ZipFile(source)
    except FileNotFoundError:
        raise ForkliftError(f"{source}: no such file") from None
    except zipfile.BadZipFile:
        raise ForkliftError(f"{source}: not a zip file") from None
    with archive:
        named = ((_safe(source, entry_name(info)), info) for info in archive.infolist() if not info.is_dir())
        members = {path: info for path, info in named if not mac_metadata(path)}
        props = sorted((path for path in members if path.name == PROP), key=lambda path: len(path.parts))
        for name in _categories(archive, members[props[0]] if props else None, source):
            builder.add_class(name)
        found = [
            entry
            for member in sorted(members)
            if member.suffix.lower() == ".xml" and (entry := _entry(archive, members, member, builder))
        ]
        for name in sorted({box[0] for _, _, annotation in found for box in annotation.boxes}):
            builder.add_class(name)
        for member, image, annotation in found:
            content = _member(archive, members[image], builder, UNREADABLE_IMAGE)
            if content is None:
                continue
            size = checked_size(content, builder, str(image), width=annotation.width, height=annotation.height)
            if size is not None:
                builder.add_image(image.name, content, *size, "train", annotation.boxes, f"{source}:{member}")
                builder.summary.difficult += annotation.difficult


def _entry(
    archive: zipfile.ZipFile,
    members: dict[PurePosixPath, zipfile.ZipInfo],
    member: PurePosixPath,
    builder: DatasetBuilder,
) -> tuple[PurePosixPath, PurePosixPath, VocAnnotation] | None:
    """One XML member with its image member; None (and a skip recorded) when either cannot be had."""
    data = _member(archive, members[member], builder, MALFORMED_ANNOTATION)
    if data is None:
        return None
    try:
        annotation = parse_voc_xml(data, f"{archive.filename}:{member}")
    except MalformedXml as exc:
        builder.skip(MALFORMED_ANNOTATION, f"{member} ({exc.reason})")
        return None
    image = member.with_name(annotation.filename) if annotation.filename else None
    if image not in members:
        builder.skip(ORPHAN_ANNOTATION, f"{member} -> {annotation.filename or '(no <filename>)'}")
        return None
    return member, image, annotation


def _member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, builder: DatasetBuilder, kind: SkipKind) -> bytes | None:
    """A member's bytes; None (and a skip of kind recorded) when the zip holds it damaged."""
    try:
        return archive.read(info)
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        builder.skip(kind, f"{info.filename} (damaged in the zip: {exc})")
        return None


def write(dataset: Dataset, out: Path) -> ExportSummary:
    """The zip at OUT (a new file), written aside and renamed so a half-written zip never looks complete."""
    detect_only(dataset, "PowerAI Vision")
    images, notes = labelled_images(dataset)
    out = Path(out)
    if out.exists():
        raise ForkliftError(f"{out}: already exists; choose a new file name")
    taken: set[str] = {PurePosixPath(PROP).stem}
    with written_atomically(out) as partial, zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        prop = {"name": dataset.title, "type": 0, "categories": list(dataset.classes)}
        archive.writestr(PROP, json.dumps(prop, indent=1) + "\n")
        for image in images:
            name = export_name(image, taken)
            archive.write(exported_image(dataset, image), name)
            xml = voc_xml(name, image.width, image.height, image.boxes, folder="")
            archive.writestr(f"{PurePosixPath(name).stem}.xml", xml)
    boxes = sum(len(image.boxes) for image in images)
    notes += outlines_as_boxes(images)
    split = sum(image.split != "train" for image in images)
    if split:
        notes.append(f"{split} val and test images go in as the others (PowerAI Vision's zip has no splits)")
    return ExportSummary(out, "powerai", len(images), boxes, len(dataset.classes), notes=notes)


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
    given = [c.get("name") if isinstance(c, dict) else c for c in categories]
    names = [name for name in given if isinstance(name, str) and name]
    if len(names) != len(given):
        raise ForkliftError(f"{source}:{PROP}: every category must be a name (or an object with a name)")
    return names
