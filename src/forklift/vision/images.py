"""Image decoding through Pillow: EXIF orientation, odd modes to 8-bit RGB, and a decompression-bomb limit."""

from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from forklift.errors import ForkliftError

DEFAULT_MAX_PIXELS = 100_000_000


def _to_rgb8(image: Image.Image) -> np.ndarray:
    """Grayscale, 16/32-bit, float, palette, alpha and CMYK images become HxWx3 uint8 RGB."""
    mode = image.mode
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        values = np.asarray(image, dtype=np.float64)
        top = 65535.0 if mode.startswith("I;16") or values.max(initial=0) > 255 else 255.0
        if mode == "F":
            top = max(values.max(initial=0), 1.0)
        gray = np.clip(values / top * 255.0 + 0.5, 0, 255).astype(np.uint8)
        return np.repeat(gray[:, :, None], 3, axis=2)
    if mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    if image.mode != "RGB":
        image = image.convert("RGB")
    return np.asarray(image)


def decode_image(data: bytes, name: str, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Encoded bytes (JPEG, PNG, BMP, TIFF, WebP, ...) -> HxWx3 uint8 RGB, upright as EXIF says."""
    if not data:
        raise ForkliftError(f"{name}: empty file, not an image")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            width, height = image.size
            if width * height > max_pixels:
                raise ForkliftError(
                    f"{name}: {width}x{height} is {width * height} pixels, over the limit of {max_pixels}"
                    " (a decompression bomb?)"
                )
            image.load()
            image = ImageOps.exif_transpose(image)
            return _to_rgb8(image)
    except UnidentifiedImageError as exc:
        raise ForkliftError(f"{name}: not an image (no known image format)") from exc
    except Image.DecompressionBombError as exc:
        raise ForkliftError(f"{name}: {exc}") from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise ForkliftError(f"{name}: corrupt or truncated image: {exc}") from exc
