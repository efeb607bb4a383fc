"""Exports as other tools and forklift's app hand them over: a folder, or a zip of one. A zip is unpacked safely
(an entry is refused when its name is absolute or climbs out with `..`, when it is a symlink, or when it is a zip
bomb's part: more than MAX_RATIO times its compressed size, or past MAX_UNPACKED in all; the other entries are
unpacked and each refusal is one line naming the entry), and the format's own file is found inside."""

from __future__ import annotations

import shutil
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from forklift.errors import ForkliftError, out_of_space
from forklift.vocabulary import DataFormat

MAX_RATIO = 100  # uncompressed / compressed, per entry
MAX_UNPACKED = 8 * 2**30  # bytes, all entries together
OWN_FILES = {DataFormat.COCO: "*.json", DataFormat.VOC: "Annotations", DataFormat.YOLO: "data.yaml"}


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
            for entry in zipped.infolist():
                name = entry.filename
                path = PurePosixPath(name)
                mode = entry.external_attr >> 16
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


def located_source(kind: DataFormat, folder: Path, named: Path) -> Path:
    """What the format's reader takes, found in a folder (an export, or a zip unpacked): COCO's JSON, VOC's folder
    (the one with Annotations/), YOLO's data.yaml, the one nearest the top; `named` is what the person gave."""
    pattern = OWN_FILES[kind]
    found = sorted(folder.rglob(pattern), key=lambda p: (len(p.parts), str(p)))
    if not found:
        raise ForkliftError(f"{named}: no {pattern} in it for a {kind} import")
    return found[0].parent if kind == DataFormat.VOC else found[0]
