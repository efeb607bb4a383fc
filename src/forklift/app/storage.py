"""The app's files on disk: each data set's images, thumbnails and videos under the data directory, named by the
app (never by the uploader), written whole or not at all.

An upload is checked before it is kept: a file that is not an image, a truncated one, or one whose header claims
more than MAX_PIXELS (a decompression bomb: a few kilobytes that decode to gigabytes) is refused with one line
naming it. Sizes are EXIF-upright, as every engine of forklift decodes them.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from PIL import Image as PILImage
from PIL import ImageOps, UnidentifiedImageError

from forklift.app.config import size_text
from forklift.errors import ForkliftError
from forklift.vision.images import to_rgb8

MAX_PIXELS = 100_000_000  # an image header claiming more is refused before any pixel is decoded
THUMBNAIL = 256  # the longer side of a grid thumbnail, in pixels
IMAGE_SUFFIXES = {"JPEG": ".jpg", "PNG": ".png", "BMP": ".bmp", "TIFF": ".tif", "WEBP": ".webp", "GIF": ".gif"}
CHUNK = 1 << 20
DECODE_BUDGET = 200_000_000  # pixels the app decodes at once, over all requests: big images wait their turn
EXIF_ORIENTATION, TURNED = 0x0112, (5, 6, 7, 8)  # orientations that swap width and height


class PixelBudget:
    """At most `total` pixels being decoded at once in this process (an image larger than that waits for all of
    it): memory taken by decoding stays bounded however many uploads and thumbnails arrive together."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self.changed = threading.Condition()

    @contextmanager
    def held(self, pixels: int) -> Iterator[None]:
        pixels = min(pixels, self.total)
        with self.changed:
            self.changed.wait_for(lambda: self.used + pixels <= self.total)
            self.used += pixels
        try:
            yield
        finally:
            with self.changed:
                self.used -= pixels
                self.changed.notify_all()


DECODING = PixelBudget(DECODE_BUDGET)


@dataclass(frozen=True)
class StoredImage:
    file: str  # relative to the data directory
    width: int
    height: int


class Storage:
    """Files under `root` (the data directory): datasets/<id>/images, thumbs and videos."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, relative: str) -> Path:
        return self.root / relative

    def sweep_partials(self) -> int:
        """Remove the `.partial` files an app killed mid-write left behind (none was ever confirmed); at start."""
        swept = 0
        for leftover in (self.root / "datasets").glob("*/*/*.partial"):
            leftover.unlink(missing_ok=True)
            swept += 1
        return swept

    def dataset_folder(self, dataset_id: int) -> Path:
        return self.root / "datasets" / str(dataset_id)

    def remove_dataset(self, dataset_id: int) -> None:
        shutil.rmtree(self.dataset_folder(dataset_id), ignore_errors=True)

    def save_image(self, dataset_id: int, source: BinaryIO, name: str, *, limit: int) -> StoredImage:
        """Copy an uploaded image into the data set's folder, checked (see the module); one line when refused."""
        partial = self._receive(dataset_id, source, name, limit=limit)
        try:
            kind, width, height = check_image(partial, name)
        except ForkliftError:
            partial.unlink(missing_ok=True)
            raise
        final = self.keep(partial, IMAGE_SUFFIXES[kind])
        return StoredImage(str(final.relative_to(self.root)), width, height)

    def save_bytes(self, dataset_id: int, content: bytes, suffix: str, kind: str = "images") -> str:
        """Write generated content (a video frame, an augmented image) into the data set; returns its file."""
        folder = self.dataset_folder(dataset_id) / kind
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / f"{uuid.uuid4().hex}{suffix}"
        with written(final.with_suffix(final.suffix + ".partial")) as partial:
            partial.write_bytes(content)
        os.replace(partial, final)
        return str(final.relative_to(self.root))

    def receive_file(self, dataset_id: int, source: BinaryIO, name: str, *, limit: int, kind: str) -> Path:
        """Copy an upload (a video) into the data set's `kind` folder as a `.partial` file, which the caller checks
        and then `keep`s under the suffix of what it found the file to be (never the uploader's)."""
        return self._receive(dataset_id, source, name, limit=limit, kind=kind)

    @staticmethod
    def keep(partial: Path, suffix: str) -> Path:
        """A checked `.partial` file under its final name: the app's own, with `suffix`."""
        final = partial.with_name(partial.name.split(".")[0] + suffix)
        os.replace(partial, final)
        return final

    def _receive(self, dataset_id: int, source: BinaryIO, name: str, *, limit: int, kind: str = "images") -> Path:
        """The upload copied in chunks to a `.partial` file (never whole in memory), refused past `limit` bytes."""
        folder = self.dataset_folder(dataset_id) / kind
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f"{uuid.uuid4().hex}.partial"  # named by the app: the uploader's name is only a record
        copy_limited(source, partial, name, limit=limit)
        return partial

    def thumbnail(self, relative: str, image_id: int, dataset_id: int) -> Path:
        """A JPEG of at most THUMBNAIL px a side, made once and kept beside the images."""
        thumb = self.dataset_folder(dataset_id) / "thumbs" / f"{image_id}.jpg"
        if not thumb.is_file():
            thumb.parent.mkdir(parents=True, exist_ok=True)
            with PILImage.open(self.path(relative)) as image:
                image.draft("RGB", (THUMBNAIL, THUMBNAIL))  # JPEG: decoded at the least scale this big, not whole
                with DECODING.held(image.size[0] * image.size[1]):
                    small = PILImage.fromarray(to_rgb8(ImageOps.exif_transpose(image)))
                small.thumbnail((THUMBNAIL, THUMBNAIL))
                with written(thumb.with_suffix(".partial")) as partial:
                    small.save(partial, "JPEG", quality=85)
            os.replace(partial, thumb)
        return thumb


def without_folder(message: str, folder: Path, *, called: str) -> str:
    """`message` (a reader's error) with the paths under the server's `folder` relative to it, as a person knows
    them (in her zip); the folder itself unnamed as a message's subject, else `called`."""
    return message.replace(f"{folder}: ", "").replace(f"{folder}/", "").replace(str(folder), called)


def copy_limited(source: BinaryIO, target: Path, name: str, *, limit: int) -> None:
    """Copy an upload to `target` in chunks (never whole in memory); past `limit` bytes the copy is removed and
    one line names the upload."""
    size = 0
    with written(target), target.open("wb") as out:
        while chunk := source.read(CHUNK):
            size += len(chunk)
            if size > limit:
                raise ForkliftError(f"{name}: larger than the upload limit of {size_text(limit)}")
            out.write(chunk)


@contextmanager
def written(path: Path) -> Iterator[Path]:
    """A file being written, removed where the writing fails (past a limit, a full disk): none is left half
    written."""
    try:
        yield path
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def check_image(path: Path, name: str) -> tuple[str, int, int]:
    """(format, width, height upright) of a whole, decodable image of at most MAX_PIXELS; else one line."""
    try:
        with PILImage.open(path) as image:
            kind = image.format or ""
            width, height = image.size
            if width * height > MAX_PIXELS:
                raise ForkliftError(f"{name}: {width}x{height} pixels is more than {MAX_PIXELS:,} (a decompression "
                                    f"bomb?)")  # fmt: skip
            if kind == "JPEG":  # the whole stream is read at an eighth of the side: a truncated file still fails
                image.draft("RGB", (max(1, width // 8), max(1, height // 8)))
            with DECODING.held(image.size[0] * image.size[1]):
                image.load()  # decodes every pixel: a truncated file fails here
            if image.getexif().get(EXIF_ORIENTATION) in TURNED:
                width, height = height, width
    except ForkliftError:
        raise
    except UnidentifiedImageError as exc:
        raise ForkliftError(f"{name}: not an image (JPEG, PNG, BMP, TIFF, WebP or GIF)") from exc
    except PILImage.DecompressionBombError as exc:
        raise ForkliftError(f"{name}: too many pixels to decode safely (a decompression bomb?)") from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise ForkliftError(f"{name}: a broken or truncated image ({exc})") from exc
    if kind not in IMAGE_SUFFIXES:
        raise ForkliftError(f"{name}: a {kind or 'unknown'} image; give JPEG, PNG, BMP, TIFF, WebP or GIF")
    return kind, width, height
