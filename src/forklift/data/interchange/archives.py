"""Exports as other tools and forklift's app hand them over: a folder, or a zip of one. A zip is unpacked safely
(an entry is refused when its name is absolute or climbs out with `..`, when it is a symlink, or when it is a zip
bomb's part: more than MAX_RATIO times its compressed size, or past MAX_UNPACKED in all; the other entries are
unpacked and each refusal is one line naming the entry; the copies of file metadata macOS adds, `__MACOSX/` and
`._name`, are not data and are left out), and the format's own file is found inside."""

from __future__ import annotations

import re
import shutil
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from forklift.errors import ForkliftError, out_of_space
from forklift.vocabulary import DataFormat, Split

MAX_RATIO = 100  # uncompressed / compressed, per entry and over the whole zip
RATIO_FLOOR = 64 * 2**20  # bytes unpacked under which the whole zip's ratio is not asked (small text zips)
MAX_UNPACKED = 8 * 2**30  # bytes, all entries together
OWN_FILES = {DataFormat.COCO: "*.json", DataFormat.VOC: "Annotations", DataFormat.YOLO: "data.yaml"}
UTF8_NAME = 0x800  # a zip entry's flag: its name is UTF-8 (else, by the format, code page 437)
SPLIT_WORDS = {"train": Split.TRAIN, "training": Split.TRAIN, "val": Split.VAL, "valid": Split.VAL,
               "validation": Split.VAL, "test": Split.TEST, "testing": Split.TEST}  # fmt: skip


class Source(NamedTuple):
    """The file (or folder) a format's reader takes, and the split its images are in where its name says so (a
    COCO export of one JSON per split: `train/_annotations.coco.json`, `instances_val2017.json`)."""

    path: Path
    split: Split | None = None


def entry_name(entry: zipfile.ZipInfo) -> str:
    """An entry's name as its zip meant it: UTF-8 where the entry says so, else as UTF-8 where its bytes are that
    (Info-ZIP and others store UTF-8 names without the flag), else code page 437 as the format says."""
    if entry.flag_bits & UTF8_NAME:
        return entry.filename
    try:
        return entry.filename.encode("cp437").decode("utf-8")
    except UnicodeError:
        return entry.filename


def mac_metadata(path: PurePosixPath) -> bool:
    """Whether a zip entry is the copy of a file's metadata macOS adds beside it (`__MACOSX/`, `._name`)."""
    return path.parts[:1] == ("__MACOSX",) or path.name.startswith("._")


@dataclass
class Extracted:
    folder: Path
    refused: list[str] = field(default_factory=list)


def safe_extract(archive: Path, folder: Path) -> Extracted:
    """Unpack the zip's safe entries into `folder`; each unsafe one is one line in `refused`."""
    done = Extracted(folder)
    unpacked = 0
    try:
        with zipfile.ZipFile(archive) as zipped:
            _refuse_bomb(archive, zipped.infolist())
            for entry in zipped.infolist():
                name = entry_name(entry)
                path = PurePosixPath(name)
                mode = entry.external_attr >> 16
                if path.parts and mac_metadata(path):
                    continue
                if not path.parts:  # "", ".", "./": no file's name
                    done.refused.append(f"{name!r}: not a file's name")
                elif path.is_absolute() or ".." in path.parts or name.startswith(("\\", "/")) or ":" in path.parts[0]:
                    done.refused.append(f"{name}: an absolute path or one that climbs out with '..'")
                elif stat.S_ISLNK(mode):
                    done.refused.append(f"{name}: a symlink")
                elif entry.is_dir():
                    continue
                elif entry.file_size > MAX_RATIO * max(entry.compress_size, 1) and entry.file_size > 2**20:
                    done.refused.append(f"{name}: unpacks to {entry.file_size:,} bytes from {entry.compress_size:,} "
                                        f"(a zip bomb?)")  # fmt: skip
                elif unpacked + entry.file_size > MAX_UNPACKED:
                    done.refused.append(f"{name}: the zip unpacks to more than {MAX_UNPACKED // 2**30} GiB")
                else:
                    target = folder.joinpath(*path.parts)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with zipped.open(entry) as source, target.open("wb") as out:
                        shutil.copyfileobj(source, out, 1 << 20)
                    unpacked += entry.file_size
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        if out_of_space(exc):
            raise
        raise ForkliftError(f"{archive.name}: not a readable zip ({exc})") from exc
    return done


def _refuse_bomb(archive: Path, entries: list[zipfile.ZipInfo]) -> None:
    """A zip that unpacks to more than MAX_RATIO times its size is refused whole: a bomb of many small entries
    (2,000 of 1 MiB of zeros, 2 MB packed) passes any one entry's check."""
    unpacked, packed = sum(e.file_size for e in entries), sum(e.compress_size for e in entries)
    if unpacked > RATIO_FLOOR and unpacked > MAX_RATIO * max(packed, 1):
        raise ForkliftError(f"{archive.name}: unpacks to {unpacked:,} bytes from {packed:,}, over {MAX_RATIO} times "
                            f"its size (a zip bomb?); refused")  # fmt: skip


def located_sources(kind: DataFormat, folder: Path, named: Path) -> list[Source]:
    """What the format's reader takes, found in a folder (an export, or a zip unpacked): COCO's JSON, VOC's folder
    (the one with Annotations/), YOLO's data.yaml, the one nearest the top; `named` is what the person gave. COCO
    exports may hold a JSON per split (Roboflow's train/, valid/ and test/ folders): where several lie nearest
    the top, each is read, in the split its name says; where names do not tell their splits apart (COCO's own
    captions_, instances_ and person_keypoints_ files of one split), the import is refused naming them."""
    pattern = OWN_FILES[kind]
    found = sorted(folder.rglob(pattern), key=lambda p: (len(p.parts), str(p)))
    if not found:
        raise ForkliftError(f"{named}: no {pattern} in it for a {kind} import")
    if kind == DataFormat.VOC:
        return [Source(found[0].parent)]
    nearest = [path for path in found if len(path.parts) == len(found[0].parts)]
    if kind != DataFormat.COCO or len(nearest) == 1:
        return [Source(found[0])]
    splits = [_split_named(path) for path in nearest]
    if None in splits or len(set(splits)) < len(splits):
        listed = ", ".join(str(path.relative_to(folder)) for path in nearest)
        raise ForkliftError(f"{named}: {len(nearest)} COCO JSONs ({listed}) whose names do not say one split each "
                            f"(train, val, test); import one of them on its own")  # fmt: skip
    return [Source(path, split) for path, split in zip(nearest, splits, strict=True)]


def _split_named(path: Path) -> Split | None:
    """The split a file's name says (`instances_val2017.json`), else its folder's (`valid/`); None if neither."""
    for name in (path.stem, path.parent.name):
        for token in re.split(r"[^a-z]+", name.lower()):
            if token in SPLIT_WORDS:
                return SPLIT_WORDS[token]
    return None
