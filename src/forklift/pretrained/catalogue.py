"""The catalogue of pretrained models: what each is, the files it is made of, and what a download of each file is
checked against. Read from catalogue.yaml beside this module, or from a site's own file in the same layout."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from forklift.errors import ForkliftError
from forklift.vocabulary import PretrainedKind, Task, word

BUILT_IN = Path(__file__).with_name("catalogue.yaml")
CATALOGUE_VARIABLE = "FORKLIFT_CATALOGUE"
_HASH_IN_NAME = re.compile(r"-([a-f0-9]{8,})\.")  # torch.hub's rule: NAME-<first hex digits of the SHA-256>.EXT
_SHA256 = re.compile(r"[a-f0-9]{64}")


@dataclass(frozen=True)
class RemoteFile:
    """One published file. `sha256` is the full digest where one is published, else the digits a torchvision file
    name carries (a prefix); `size` is exact where known, `mib` torchvision's rounded size otherwise."""

    url: str
    sha256: str | None = None
    size: int | None = None
    mib: float | None = None
    member: str | None = None  # the file wanted inside a zip archive
    save_as: str | None = None  # its name in a model directory, where the URL's does not say what it is
    lines: int | None = None  # a names file of which only the first lines name this model's classes

    @property
    def file_name(self) -> str:
        """The name of the file in the URL's path."""
        return Path(urlsplit(self.url).path).name

    @property
    def placed_name(self) -> str:
        """What a model directory calls the file."""
        return self.save_as or self.member or self.file_name

    @property
    def relative_path(self) -> Path:
        """Where the file lies in a cache or a mirror: its host, then its URL's path (query left out)."""
        parts = urlsplit(self.url)
        return Path(parts.netloc) / parts.path.lstrip("/")

    @property
    def approximate_bytes(self) -> int | None:
        if self.size is not None:
            return self.size
        return None if self.mib is None else round(self.mib * 2**20)


@dataclass(frozen=True)
class Pretrained:
    name: str
    kind: PretrainedKind
    task: Task
    about: str
    files: tuple[RemoteFile, ...]
    labels: dict[int, str] | None = None  # a whole net's class outputs by index (0, the background, left out)
    image_size: int | None = None  # the side of the square inputs a ready directory made from the net takes

    @property
    def makes_directory(self) -> bool:
        """Whether pulling it writes a ready model directory (a weights file does when its labels are known)."""
        return self.kind is not PretrainedKind.WEIGHTS or self.labels is not None

    @property
    def approximate_bytes(self) -> int | None:
        """The known sizes of its files together (a names file or a cfg without one adds little), or None."""
        sizes = [f.approximate_bytes for f in {f.url: f for f in self.files}.values()]
        known = [size for size in sizes if size is not None]
        return sum(known) if known else None


def catalogue_path(given: Path | None = None) -> Path:
    """The catalogue in use: the one given, else $FORKLIFT_CATALOGUE, else forklift's own."""
    if given is not None:
        return given
    return Path(os.environ[CATALOGUE_VARIABLE]) if os.environ.get(CATALOGUE_VARIABLE) else BUILT_IN


def load_catalogue(path: Path) -> dict[str, Pretrained]:
    """Every model of the catalogue file, by name; a malformed entry is refused naming the file and the entry."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ForkliftError(f"catalogue {path}: cannot read: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ForkliftError(f"catalogue {path}: not YAML: {str(exc).splitlines()[0]}") from exc
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict) or not models:
        raise ForkliftError(f"catalogue {path}: expected a mapping 'models' of NAME: entry")
    label_sets = data.get("label_sets") or {}
    if not isinstance(label_sets, dict):
        raise ForkliftError(f"catalogue {path}: expected 'label_sets' to map a name to {{index: class name}}")
    sets = {str(name): _label_set(f"catalogue {path}: label set {name}", labels) for name, labels in label_sets.items()}
    return {str(name): _entry(f"catalogue {path}: {name}", str(name), entry, sets) for name, entry in models.items()}


def _label_set(where: str, labels: Any) -> dict[int, str]:
    if not isinstance(labels, dict) or not labels:
        raise ForkliftError(f"{where}: expected a mapping of output index to class name")
    if not all(isinstance(i, int) and i > 0 and isinstance(n, str) and n.strip() for i, n in labels.items()):
        raise ForkliftError(f"{where}: indices must be whole numbers above 0 (0 is the background), names not empty")
    if len(set(labels.values())) != len(labels):
        raise ForkliftError(f"{where}: a class name appears twice")
    return dict(sorted(labels.items()))


def _entry(where: str, name: str, entry: Any, label_sets: dict[str, dict[int, str]]) -> Pretrained:
    if not isinstance(entry, dict) or not isinstance(entry.get("files"), list) or not entry["files"]:
        raise ForkliftError(f"{where}: expected kind, task, about and a list of files")
    files = tuple(_file(f"{where}: file {i + 1}", item) for i, item in enumerate(entry["files"]))
    kind = word(PretrainedKind, entry.get("kind"), where=f"{where}: kind")
    labels, size = entry.get("labels"), entry.get("image_size")
    if labels is not None and labels not in label_sets:
        raise ForkliftError(f"{where}: labels {labels!r} is not one of the label_sets ({', '.join(label_sets)})")
    if (labels is None) != (size is None) or (labels is not None and kind is not PretrainedKind.WEIGHTS):
        raise ForkliftError(f"{where}: labels and image_size go together, on a weights entry")
    if size is not None and (not isinstance(size, int) or size < 32):
        raise ForkliftError(f"{where}: image_size must be a whole number of pixels, 32 or more, not {size!r}")
    return Pretrained(
        name=name,
        kind=kind,
        task=word(Task, entry.get("task"), where=f"{where}: task"),
        about=str(entry.get("about", "")),
        files=files,
        labels=None if labels is None else label_sets[labels],
        image_size=size,
    )


def _file(where: str, item: Any) -> RemoteFile:
    if not isinstance(item, dict) or not isinstance(item.get("url"), str):
        raise ForkliftError(f"{where}: expected a mapping with a url")
    url = item["url"]
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).path.strip("/"):
        raise ForkliftError(f"{where}: {url!r} is not an http(s) URL of a file")
    sha256 = item.get("sha256")
    if sha256 is None and (in_name := _HASH_IN_NAME.search(Path(urlsplit(url).path).name)):
        sha256 = in_name.group(1)
    if sha256 is not None and not (isinstance(sha256, str) and re.fullmatch(r"[a-f0-9]{8,64}", sha256)):
        raise ForkliftError(f"{where}: sha256 must be 8 to 64 lower-case hex digits, not {sha256!r}")
    size, mib = item.get("size"), item.get("mib")
    if size is not None and (not isinstance(size, int) or size <= 0):
        raise ForkliftError(f"{where}: size must be a whole number of bytes above 0, not {size!r}")
    if mib is not None and not isinstance(mib, int | float):
        raise ForkliftError(f"{where}: mib must be a number, not {mib!r}")
    member, save_as, lines = item.get("member"), item.get("save_as"), item.get("lines")
    if save_as is not None and (not isinstance(save_as, str) or Path(save_as).name != save_as or not save_as):
        raise ForkliftError(f"{where}: save_as must be a plain file name, not {save_as!r}")
    if lines is not None and (not isinstance(lines, int) or lines <= 0):
        raise ForkliftError(f"{where}: lines must be a whole number above 0, not {lines!r}")
    return RemoteFile(url=url, sha256=sha256, size=size, mib=mib, member=None if member is None else str(member),
                      save_as=save_as, lines=lines)  # fmt: skip


def full_digest(file: RemoteFile) -> bool:
    """Whether the catalogue holds the file's whole SHA-256 (not just the digits of its name)."""
    return file.sha256 is not None and _SHA256.fullmatch(file.sha256) is not None


def find(catalogue: dict[str, Pretrained], name: str, *, where: Path) -> Pretrained:
    if name not in catalogue:
        raise ForkliftError(
            f"{name}: not in the catalogue {where}; `forklift models pull --list` shows its {len(catalogue)} models"
        )
    return catalogue[name]
