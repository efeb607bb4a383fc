"""The Pascal VOC annotation XML, read and written in one place for both VOC folders and PowerAI zips.

VOC pixel coordinates are 1-based and inclusive (xmin=1, xmax=10 covers the first ten columns); forklift's are
0-based with x2 just past the last column, so x1 = xmin - 1 and x2 = xmax, and back.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from forklift.data.dataset import Box
from forklift.data.interchange.common import RawBox
from forklift.errors import ForkliftError


class MalformedXml(ForkliftError):
    """An annotation that cannot be read (not XML, an object without a name, a corner that is not a number): an
    import skips its image and reports the reason, where an unsafe XML is refused outright."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.reason = reason


@dataclass
class VocAnnotation:
    """One image's annotation: its file name, size (0 when the XML does not say) and boxes in forklift pixels."""

    filename: str | None
    width: int
    height: int
    boxes: list[RawBox] = field(default_factory=list)
    difficult: int = 0  # of its boxes, the objects marked <difficult>1</difficult> (kept as the others)


def parse_voc_xml(data: bytes, where: str) -> VocAnnotation:
    """Read one annotation; a document type declaration is refused, so no entity is ever expanded or fetched.
    Elements VOC does not define (CVAT's <attributes>, <occluded>, ...) are ignored."""
    lowered = data.lower()
    if b"<!doctype" in lowered or b"<!entity" in lowered:
        raise ForkliftError(f"{where}: XML with a DOCTYPE or ENTITY declaration is refused (entities are unsafe)")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise MalformedXml(where, f"not valid XML: {exc}") from None
    annotation = VocAnnotation(
        filename=(root.findtext("filename") or "").strip() or None,
        width=_int(root.findtext("size/width"), where),
        height=_int(root.findtext("size/height"), where),
    )
    for i, obj in enumerate(root.iter("object")):
        name = (obj.findtext("name") or "").strip()
        if not name:
            raise MalformedXml(where, f"object {i + 1} has no <name>")
        corners = [_float(obj.findtext(f"bndbox/{key}"), where, f"object {i + 1} <{key}>") for key in _CORNERS]
        xmin, ymin, xmax, ymax = corners
        at = f"{PurePosixPath(where).name} object {i + 1}"  # the file's name: the app's import names no server path
        annotation.boxes.append(RawBox(name, xmin - 1, ymin - 1, xmax, ymax, where=at))
        annotation.difficult += (obj.findtext("difficult") or "").strip() == "1"
    return annotation


def voc_xml(filename: str, width: int, height: int, boxes: list[Box], folder: str = "JPEGImages") -> bytes:
    """One image's annotation XML, coordinates 1-based inclusive."""
    root = ET.Element("annotation")
    _child(root, "folder", folder)
    _child(root, "filename", filename)
    size = _child(root, "size")
    for key, count in (("width", width), ("height", height), ("depth", 3)):
        _child(size, key, str(count))
    _child(root, "segmented", "0")
    for box in boxes:
        obj = _child(root, "object")
        for key, text in (("name", box.label), ("pose", "Unspecified"), ("truncated", "0"), ("difficult", "0")):
            _child(obj, key, text)
        bndbox = _child(obj, "bndbox")
        for key, corner in zip(_CORNERS, (box.x1 + 1, box.y1 + 1, box.x2, box.y2), strict=True):
            _child(bndbox, key, _number(corner))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


_CORNERS = ("xmin", "ymin", "xmax", "ymax")


def _child(parent: ET.Element, tag: str, text: str | None = None) -> ET.Element:
    element = ET.SubElement(parent, tag)
    element.text = text
    return element


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _float(text: str | None, where: str, field_name: str) -> float:
    try:
        return float((text or "").strip())
    except ValueError:
        raise MalformedXml(where, f"{field_name}: {text!r} is not a number") from None


def _int(text: str | None, where: str) -> int:
    """A size field; absent or empty means unknown (0), as some tools write it."""
    if not (text or "").strip():
        return 0
    value = _float(text, where, "<size>")
    if not value.is_integer() or value < 0:
        raise MalformedXml(where, f"<size> value {text!r} is not a whole number of pixels")
    return int(value)
