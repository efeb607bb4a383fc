"""Image decoding through Pillow: EXIF orientation, odd modes to 8-bit RGB, and a decompression-bomb limit."""

from __future__ import annotations

import io
import re
import struct
import sys

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from forklift.errors import ForkliftError

DEFAULT_MAX_PIXELS = 100_000_000

# Only these Pillow plugins see user bytes: the formats we promise, and none of the rarely used ones
# (EPS, for one, hands the file to Ghostscript). Multi-picture camera JPEGs (MPO) open through "JPEG".
FORMATS = ("JPEG", "PNG", "BMP", "TIFF", "WEBP", "GIF")
FORMAT_NAMES = "JPEG, PNG, BMP, TIFF, WebP or GIF"

# Magic numbers of FORMATS: bytes that start like one of them but do not open are a damaged image,
# which deserves a different message from a text file or a PDF.
_SIGNATURES = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"BM", b"II*\x00", b"MM\x00*", b"GIF87a", b"GIF89a")

# Transparent pixels are composited over the letterbox gray: whatever colour hides under alpha 0 is
# arbitrary (often black, which would swallow black text or outlines), and mid-gray keeps both dark and
# light shapes visible, as it does for the padding the model sees around a letterboxed image.
ALPHA_BACKGROUND = (127, 127, 127, 255)

_ALPHA_MODES = ("RGBA", "RGBa", "LA", "La", "PA")


def _looks_like_image(data: bytes) -> bool:
    return data.startswith(_SIGNATURES) or (data[:4] == b"RIFF" and data[8:12] == b"WEBP")


def _gray16_to_rgb8(image: Image.Image) -> np.ndarray:
    """16/32-bit integer and float gray -> 8-bit, scaled by the bit depth where the mode says it."""
    values = np.asarray(image)
    if image.mode.startswith("I;16"):
        # Exact rounding in integers: 65535 -> 255, 32768 -> 128, and no float64 copy of a big image.
        gray = ((values.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)
    else:
        # "I" (32-bit) and "F" do not say their range: "I" is 8-bit if its values fit, else 16-bit;
        # "F" is 0..1, or stretched to its maximum when that is larger.
        if image.mode == "F":
            top = max(float(values.max(initial=0)), 1.0)
        else:
            top = 255.0 if values.max(initial=0) <= 255 else 65535.0
        gray = np.clip(values.astype(np.float32) * np.float32(255.0 / top) + 0.5, 0, 255).astype(np.uint8)
    return np.repeat(gray[:, :, None], 3, axis=2)


def to_rgb8(image: Image.Image) -> np.ndarray:
    """Grayscale, 16/32-bit, float, palette, alpha and CMYK images become HxWx3 uint8 RGB, as training and serving
    see them (Pillow's own convert("RGB") clips 16-bit gray at 255: a white picture)."""
    if image.mode.startswith("I") or image.mode == "F":
        return _gray16_to_rgb8(image)
    if image.mode in _ALPHA_MODES or "transparency" in image.info:
        # convert() turns palette and colour-key (tRNS) transparency into an alpha channel first.
        background = Image.new("RGBA", image.size, ALPHA_BACKGROUND)
        image = Image.alpha_composite(background, image.convert("RGBA"))
    return np.asarray(image.convert("RGB"))


def _allow_in_pillow(max_pixels: int) -> None:
    """Let Pillow's own bomb check (at 2 x Image.MAX_IMAGE_PIXELS, inside Image.open) admit our limit.

    Otherwise a limit configured above Pillow's (~179 MP) would still refuse what the user allowed.
    Only ever raised, so concurrent calls cannot lower it under one another.
    """
    if Image.MAX_IMAGE_PIXELS is not None and max_pixels > Image.MAX_IMAGE_PIXELS:
        Image.MAX_IMAGE_PIXELS = max_pixels


def decode_image(data: bytes, name: str, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Encoded bytes (JPEG, PNG, BMP, TIFF, WebP, GIF) -> HxWx3 uint8 RGB, upright as EXIF says.

    The pixel limit is checked on the header, before any pixel is decoded, so a small file that declares
    a huge image costs nothing. A multi-frame file (GIF, TIFF, WebP) gives its first frame. A truncated
    file is an error: Pillow's ImageFile.LOAD_TRUNCATED_IMAGES must stay False (its default).
    """
    if not data:
        raise ForkliftError(f"{name}: empty file, not an image")
    _allow_in_pillow(max_pixels)
    try:
        with Image.open(io.BytesIO(data), formats=FORMATS) as image:  # reads the header only
            width, height = image.size
            if width * height > max_pixels:
                raise ForkliftError(
                    f"{name}: {width}x{height} is {width * height} pixels, over the limit of {max_pixels}"
                    " (a decompression bomb?)"
                )
            image.load()
            ImageOps.exif_transpose(image, in_place=True)
            return to_rgb8(image)
    except UnidentifiedImageError as exc:
        if _looks_like_image(data):
            raise ForkliftError(f"{name}: corrupt or truncated image: unreadable header") from exc
        raise ForkliftError(f"{name}: not an image in a supported format ({FORMAT_NAMES})") from exc
    except Image.DecompressionBombError as exc:  # Pillow's own refusal, at twice its limit: said in ours
        raise ForkliftError(
            f"{name}: {_bomb_pixels(exc)} pixels, over the limit of {max_pixels} (a decompression bomb?)"
        ) from exc
    except (OSError, SyntaxError, ValueError, EOFError, struct.error) as exc:
        raise ForkliftError(f"{name}: corrupt or truncated image: {exc}") from exc


def declared_pixels(data: bytes) -> int:
    """Width x height as the image's header declares them, read without decoding a pixel (0: no header read)."""
    try:
        with Image.open(io.BytesIO(data), formats=FORMATS) as image:
            width, height = image.size
            return width * height
    except Image.DecompressionBombError as exc:  # Pillow will not even open it: its size is in the refusal
        return _bomb_pixels(exc)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError, struct.error):
        return 0  # decoding it says what is wrong, by name


def _bomb_pixels(exc: Image.DecompressionBombError) -> int:
    """The pixels Pillow's refusal says the image has ("Image size (900000000 pixels) exceeds limit ..."); where it
    does not say, more than any limit."""
    said = re.search(r"\((\d+) pixels\)", str(exc))
    return int(said.group(1)) if said else sys.maxsize


IMAGE_FORMATS = {"jpeg": (".jpg", "image/jpeg"), "png": (".png", "image/png")}  # format -> suffix, media type


def encode_image(rgb: np.ndarray, *, image_format: str = "jpeg", quality: int = 90) -> bytes:
    """An RGB uint8 image as JPEG (at `quality`, 1-100) or PNG bytes (OpenCV's libjpeg-turbo and libpng)."""
    import cv2

    suffix = IMAGE_FORMATS[image_format][0]
    params = [cv2.IMWRITE_JPEG_QUALITY, quality] if image_format == "jpeg" else []
    ok, encoded = cv2.imencode(suffix, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), params)
    if not ok:
        raise ForkliftError(f"cannot encode a {rgb.shape} image as {image_format}")
    return encoded.tobytes()
