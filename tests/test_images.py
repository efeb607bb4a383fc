"""decode_image: formats, EXIF orientation, odd modes to 8-bit RGB by pixel value, bombs and bad input.

Every image is made in memory with Pillow/numpy (or written byte by byte where Pillow cannot save the mode).
"""

from __future__ import annotations

import io
import random
import struct
import subprocess
import sys
import textwrap
import time
import zlib

import cv2
import numpy as np
import pytest
from core_parts import missing
from PIL import Image, ImageFile

from forklift.errors import ForkliftError
from forklift.shared_data import shared_data_root
from forklift.vision.images import ALPHA_BACKGROUND, DEFAULT_MAX_PIXELS, declared_pixels, decode_image

PHOTOS = shared_data_root() / "images"
GRAY = ALPHA_BACKGROUND[0]
RED, GREEN, BLUE, WHITE = (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255)


def encode(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def quadrants(width: int = 40, height: int = 30) -> Image.Image:
    """Red, green, blue and white quarters: any flip, rotation or channel swap shows."""
    array = np.zeros((height, width, 3), np.uint8)
    array[: height // 2, : width // 2] = RED
    array[: height // 2, width // 2 :] = GREEN
    array[height // 2 :, : width // 2] = BLUE
    array[height // 2 :, width // 2 :] = WHITE
    return Image.fromarray(array)


def quadrant_colours(rgb: np.ndarray) -> list[tuple[int, ...]]:
    """The colour at the centre of each quarter (away from edges, where lossy codecs blur)."""
    h, w = rgb.shape[:2]
    return [
        tuple(int(v) for v in rgb[y, x])
        for y, x in ((h // 4, w // 4), (h // 4, 3 * w // 4), (3 * h // 4, w // 4), (3 * h // 4, 3 * w // 4))
    ]


def png_bytes(width: int, height: int, bit_depth: int, colour_type: int, raw: bytes, *, compress: bool = True) -> bytes:
    """A PNG written chunk by chunk, for what Pillow cannot save (16-bit RGB) or must not allocate (bombs)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, 0)
    data = zlib.compress(raw) if compress else raw
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


def tiff_rgb16(pixels: np.ndarray) -> bytes:
    """An uncompressed little-endian 16-bit RGB TIFF (Pillow reads these but cannot write them)."""
    height, width = pixels.shape[:2]
    strip = pixels.astype("<u2").tobytes()
    entries = 9
    bits_at = 8 + 2 + entries * 12 + 4
    strip_at = bits_at + 6
    tags = [
        (256, 3, 1, width),
        (257, 3, 1, height),
        (258, 3, 3, bits_at),
        (259, 3, 1, 1),
        (262, 3, 1, 2),
        (273, 4, 1, strip_at),
        (277, 3, 1, 3),
        (278, 3, 1, height),
        (279, 4, 1, len(strip)),
    ]
    ifd = (
        struct.pack("<H", entries)
        + b"".join(
            struct.pack("<HHII", tag, kind, count, value)
            if kind == 4 or count > 1
            else struct.pack("<HHIHH", tag, kind, count, value, 0)
            for tag, kind, count, value in tags
        )
        + struct.pack("<I", 0)
    )
    return b"II*\x00" + struct.pack("<I", 8) + ifd + struct.pack("<HHH", 16, 16, 16) + strip


# --- formats -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "options", "tolerance"),
    [
        ("PNG", {}, 0),
        ("BMP", {}, 0),
        ("TIFF", {}, 0),
        ("TIFF", {"compression": "tiff_lzw"}, 0),
        ("WEBP", {"lossless": True}, 0),
        ("GIF", {}, 0),
        ("JPEG", {"quality": 95}, 8),
        ("WEBP", {"quality": 90}, 12),
    ],
)
def test_formats_decode_to_rgb8(fmt: str, options: dict, tolerance: int) -> None:
    rgb = decode_image(encode(quadrants(), fmt, **options), f"q.{fmt.lower()}")
    assert rgb.shape == (30, 40, 3)
    assert rgb.dtype == np.uint8
    got = np.array(quadrant_colours(rgb), dtype=int)
    assert np.abs(got - np.array([RED, GREEN, BLUE, WHITE])).max() <= tolerance


def test_grayscale_becomes_equal_channels() -> None:
    gray = np.array([[0, 1, 127, 128, 254, 255]], np.uint8)
    rgb = decode_image(encode(Image.fromarray(gray), "PNG"), "g.png")
    assert rgb.shape == (1, 6, 3)
    for channel in range(3):
        assert np.array_equal(rgb[..., channel], gray)


def test_bilevel_becomes_black_and_white() -> None:
    image = Image.new("1", (4, 1), 0)
    image.putpixel((2, 0), 1)
    rgb = decode_image(encode(image, "TIFF"), "b.tif")
    assert rgb[0, :, 0].tolist() == [0, 0, 255, 0]


GRAY16 = np.array([[0, 257, 32768, 65535, 100 * 257]], np.uint16)
GRAY16_AS_8 = [0, 1, 128, 255, 100]


@pytest.mark.parametrize("fmt", ["PNG", "TIFF"])
def test_16_bit_gray_scales_by_bit_depth(fmt: str) -> None:
    image = Image.fromarray(GRAY16)
    assert image.mode == "I;16"
    rgb = decode_image(encode(image, fmt), f"g16.{fmt.lower()}")
    assert rgb.dtype == np.uint8
    assert rgb[0, :, 0].tolist() == GRAY16_AS_8
    assert np.array_equal(rgb[..., 0], rgb[..., 2])


def test_16_bit_big_endian_tiff() -> None:
    image = Image.frombytes("I;16B", (5, 1), GRAY16.astype(">u2").tobytes())
    data = encode(image, "TIFF")
    assert Image.open(io.BytesIO(data)).mode == "I;16B"
    assert decode_image(data, "g16b.tif")[0, :, 1].tolist() == GRAY16_AS_8


def test_dark_16_bit_gray_stays_dark() -> None:
    """Scaling follows the bit depth, not the content: a 16-bit image whose brightest value is 200 is black."""
    rgb = decode_image(encode(Image.fromarray(np.full((2, 2), 200, np.uint16)), "PNG"), "dark.png")
    assert rgb.max() <= 1


def test_16_bit_rgb_png() -> None:
    raw = b"\x00" + struct.pack(">9H", 65535, 0, 0, 0, 32768, 0, 0, 0, 65535)
    rgb = decode_image(png_bytes(3, 1, 16, 2, raw), "rgb16.png")
    assert rgb[0].tolist() == [[255, 0, 0], [0, 128, 0], [0, 0, 255]]


def test_16_bit_rgb_tiff() -> None:
    pixels = np.array([[[65535, 0, 0], [0, 32768, 0], [0, 0, 65535]]], np.uint16)
    rgb = decode_image(tiff_rgb16(pixels), "rgb16.tif")
    assert rgb[0].tolist() == [[255, 0, 0], [0, 128, 0], [0, 0, 255]]


def test_32_bit_integer_and_float_gray() -> None:
    ints = Image.fromarray(np.array([[0, 32768, 65535]], np.int32))
    assert decode_image(encode(ints, "TIFF"), "i32.tif")[0, :, 0].tolist() == [0, 128, 255]
    floats = Image.fromarray(np.array([[0.0, 0.5, 1.0]], np.float32))
    assert decode_image(encode(floats, "TIFF"), "f32.tif")[0, :, 0].tolist() == [0, 128, 255]


@pytest.mark.parametrize(("fmt", "tolerance"), [("TIFF", 0), ("JPEG", 6)])
def test_cmyk_becomes_rgb(fmt: str, tolerance: int) -> None:
    inks = [(255, 0, 0, 0), (0, 255, 0, 0), (0, 0, 255, 0), (0, 0, 0, 255), (0, 0, 0, 0)]
    expected = [(0, 255, 255), (255, 0, 255), (255, 255, 0), (0, 0, 0), (255, 255, 255)]
    image = Image.new("CMYK", (16 * len(inks), 16))
    for i, ink in enumerate(inks):
        image.paste(ink, (16 * i, 0, 16 * (i + 1), 16))
    data = encode(image, fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    assert Image.open(io.BytesIO(data)).mode == "CMYK"
    rgb = decode_image(data, f"cmyk.{fmt.lower()}")
    got = np.array([rgb[8, 16 * i + 8] for i in range(len(inks))], dtype=int)
    assert np.abs(got - np.array(expected)).max() <= tolerance


def palette_image() -> Image.Image:
    """Indices 0, 1, 2 in a row, with a palette whose colours are not the indices."""
    image = Image.new("P", (3, 1))
    image.putpalette([10, 20, 30, 200, 100, 50, 0, 128, 255] + [0] * (253 * 3))
    image.putdata([0, 1, 2])
    return image


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "GIF", "TIFF"])
def test_palette_maps_to_palette_colours(fmt: str) -> None:
    rgb = decode_image(encode(palette_image(), fmt), f"p.{fmt.lower()}")
    assert rgb[0].tolist() == [[10, 20, 30], [200, 100, 50], [0, 128, 255]]


@pytest.mark.parametrize("fmt", ["PNG", "GIF"])
def test_palette_transparency_shows_the_background(fmt: str) -> None:
    data = encode(palette_image(), fmt, transparency=1)
    assert "transparency" in Image.open(io.BytesIO(data)).info
    rgb = decode_image(data, f"pt.{fmt.lower()}")
    assert rgb[0].tolist() == [[10, 20, 30], [GRAY] * 3, [0, 128, 255]]


def test_rgba_is_composited_over_gray() -> None:
    """Opaque pixels keep their colour; the hidden colour under alpha 0 (black here) does not show."""
    pixels = np.array([[[255, 0, 0, 255], [0, 0, 0, 0], [255, 0, 0, 128], [0, 0, 255, 255]]], np.uint8)
    rgb = decode_image(encode(Image.fromarray(pixels, "RGBA"), "PNG"), "rgba.png").astype(int)
    assert rgb[0, 0].tolist() == [255, 0, 0]
    assert rgb[0, 1].tolist() == [GRAY] * 3
    assert np.abs(rgb[0, 2] - [191, 63, 63]).max() <= 1  # half red over gray
    assert rgb[0, 3].tolist() == [0, 0, 255]


def test_black_text_on_transparent_stays_visible() -> None:
    """Dropping alpha would make black-on-transparent all black; compositing keeps the shape."""
    pixels = np.zeros((8, 8, 4), np.uint8)
    pixels[2:6, 2:6, 3] = 255  # an opaque black square, the rest transparent black
    rgb = decode_image(encode(Image.fromarray(pixels, "RGBA"), "WEBP", lossless=True), "text.webp")
    assert rgb[0, 0].tolist() == [GRAY] * 3
    assert rgb[3, 3].tolist() == [0, 0, 0]


def test_la_and_colour_key_transparency() -> None:
    la = Image.fromarray(np.array([[[200, 255], [0, 0]]], np.uint8), "LA")
    assert decode_image(encode(la, "PNG"), "la.png")[0].tolist() == [[200] * 3, [GRAY] * 3]
    keyed = Image.fromarray(np.array([[[0, 255, 0], [9, 9, 9]]], np.uint8))
    assert decode_image(encode(keyed, "PNG", transparency=(0, 255, 0)), "key.png")[0].tolist() == [
        [GRAY] * 3,
        [9, 9, 9],
    ]


# --- EXIF orientation ----------------------------------------------------------------------------------------------

# Where the stored top-left corner shows once upright, per orientation.
CORNER = {1: "top-left", 3: "bottom-right", 6: "top-right", 8: "bottom-left"}


def corner_of_red(rgb: np.ndarray) -> str:
    corners = {"top-left": rgb[0, 0], "top-right": rgb[0, -1], "bottom-left": rgb[-1, 0], "bottom-right": rgb[-1, -1]}
    reds = [where for where, pixel in corners.items() if pixel[0] > 200 and pixel[1] < 60 and pixel[2] < 60]
    assert len(reds) == 1, corners
    return reds[0]


@pytest.mark.parametrize("orientation", sorted(CORNER))
@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "TIFF"])
def test_exif_orientation_is_applied(fmt: str, orientation: int) -> None:
    stored = Image.new("RGB", (60, 40), WHITE)
    stored.paste(RED, (0, 0, 12, 12))
    exif = Image.Exif()
    exif[0x0112] = orientation
    options = {"lossless": True} if fmt == "WEBP" else {"quality": 95} if fmt == "JPEG" else {}
    rgb = decode_image(encode(stored, fmt, exif=exif, **options), f"o{orientation}.{fmt.lower()}")
    assert rgb.shape == ((60, 40, 3) if orientation in (6, 8) else (40, 60, 3))
    assert corner_of_red(rgb) == CORNER[orientation]


# --- multi-frame files ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fmt", "options"), [("GIF", {}), ("TIFF", {}), ("WEBP", {"lossless": True}), ("MPO", {})])
def test_multi_frame_file_gives_the_first_frame(fmt: str, options: dict) -> None:
    first, second = Image.new("RGB", (20, 10), RED), Image.new("RGB", (20, 10), BLUE)
    if fmt == "TIFF":
        second = Image.new("RGB", (7, 5), BLUE)  # TIFF pages may differ in size
    data = encode(first, fmt, save_all=True, append_images=[second], **options)
    assert getattr(Image.open(io.BytesIO(data)), "n_frames", 1) == 2
    rgb = decode_image(data, f"frames.{fmt.lower()}")
    assert rgb.shape == (10, 20, 3)
    assert np.abs(rgb.astype(int) - RED).max() <= 3


# --- decompression bombs -------------------------------------------------------------------------------------------


def test_pixel_limit_is_configurable() -> None:
    data = encode(Image.new("RGB", (100, 80)), "PNG")
    assert decode_image(data, "ok.png", max_pixels=8000).shape == (80, 100, 3)
    with pytest.raises(ForkliftError, match=r"^big\.png: 100x80 is 8000 pixels, over the limit of 7999"):
        decode_image(data, "big.png", max_pixels=7999)


def test_our_limit_not_pillows_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pillow refuses over 2 x Image.MAX_IMAGE_PIXELS inside Image.open; a larger configured limit must win."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    assert decode_image(encode(Image.new("RGB", (100, 80)), "PNG"), "ok.png").shape == (80, 100, 3)


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
@pytest.mark.parametrize("side", [12_000, 20_000, 100_000])
def test_declared_bomb_is_refused_from_the_header(side: int) -> None:
    bomb = png_bytes(side, side, 8, 2, zlib.compress(b"\x00" * 1000), compress=False)
    assert len(bomb) < 100
    start = time.perf_counter()
    refusal = rf"^bomb\.png: .*limit of {DEFAULT_MAX_PIXELS}.*decompression bomb"
    with pytest.raises(ForkliftError, match=refusal) as said:
        decode_image(bomb, "bomb.png")
    assert time.perf_counter() - start < 0.5
    assert f"{side * side} pixels, over" in str(said.value) and "exceeds limit" not in str(said.value)  # one limit
    assert declared_pixels(bomb) == side * side  # past Pillow's own limit too: a server's 413 counts it


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the address-space limit needs Linux rlimits")
def test_bomb_is_refused_without_allocating() -> None:
    """In a child with 512 MiB of address space to spare, a 20000x20000 PNG (1.2 GB of RGB) is refused cleanly."""
    script = textwrap.dedent(
        f"""
        import resource, struct, zlib
        from forklift.errors import ForkliftError
        from forklift.vision.images import decode_image

        def chunk(kind, body):
            return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

        bomb = (b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(b"\\x00" * 60001 * 20)) + chunk(b"IEND", b""))
        in_use = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (in_use + 512 * 2**20, resource.RLIM_INFINITY))
        for limit in ({DEFAULT_MAX_PIXELS}, 10**9):  # under our check, and past it into Pillow's own
            try:
                decode_image(bomb, "bomb.png", limit)
            except ForkliftError as exc:
                print("refused:", exc)
            except MemoryError:
                print("MemoryError")
            else:
                print("decoded")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    refused, allowed = result.stdout.splitlines()
    assert refused.startswith("refused: bomb.png: 400000000 pixels, over the limit of 100000000 (a decompression")
    # With a limit of 10**9 the header passes and Pillow's allocation of the image fails within the rlimit:
    # the rlimit is real, so the refusal above came before any allocation.
    assert allowed == "MemoryError"


# --- bad input -----------------------------------------------------------------------------------------------------


def test_loading_truncated_images_stays_off() -> None:
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False


def test_empty_file() -> None:
    with pytest.raises(ForkliftError, match=r"^x: empty file, not an image$"):
        decode_image(b"", "x")


@pytest.mark.parametrize(
    "data",
    [b"hello, world\n", b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n", b"\x00" * 64, b"P6\n2 1\n255\n" + bytes(6)],
    ids=["text", "pdf", "zeros", "ppm"],
)
def test_not_an_image(data: bytes) -> None:
    with pytest.raises(ForkliftError, match=r"^x\.txt: not an image in a supported format \(JPEG, PNG") as info:
        decode_image(data, "x.txt")
    assert "\n" not in str(info.value)


def test_truncated_jpeg_is_an_error() -> None:
    data = encode(quadrants(200, 150), "JPEG")
    for cut in (len(data) // 2, len(data) - 2):  # half the scan; only the end-of-image marker missing
        with pytest.raises(ForkliftError, match=r"^x\.jpg: corrupt or truncated image: "):
            decode_image(data[:cut], "x.jpg")


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "BMP", "TIFF", "WEBP", "GIF"])
def test_truncated_header_is_corrupt_not_foreign(fmt: str) -> None:
    data = encode(quadrants(), fmt)
    with pytest.raises(ForkliftError, match=r"^x: corrupt or truncated image: "):
        decode_image(data[:14], "x")


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "TIFF", "WEBP"])
def test_truncated_pixels_are_an_error(fmt: str) -> None:
    data = encode(Image.fromarray(np.random.default_rng(0).integers(0, 256, (60, 80, 3), np.uint8)), fmt)
    with pytest.raises(ForkliftError, match=r"^x: corrupt or truncated image: "):
        decode_image(data[: len(data) // 2], "x")


def test_corrupt_png_checksum() -> None:
    data = bytearray(encode(quadrants(), "PNG"))
    at = data.index(b"IDAT") + 10
    data[at] ^= 0xFF
    with pytest.raises(ForkliftError, match=r"^x\.png: corrupt or truncated image: "):
        decode_image(bytes(data), "x.png")


@pytest.mark.filterwarnings("ignore::UserWarning")  # Pillow's notes on bad TIFF tags
@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "BMP", "TIFF", "WEBP", "GIF"])
def test_damaged_files_give_only_forklift_errors(fmt: str) -> None:
    """Cuts and flipped bytes anywhere: a clean ForkliftError or a decoded image, never another exception."""
    data = encode(quadrants(48, 32), fmt)
    rng = random.Random(fmt)
    damaged = [data[:cut] for cut in range(1, len(data), max(1, len(data) // 40))]
    for _ in range(60):
        flipped = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            flipped[rng.randrange(len(flipped))] = rng.randrange(256)
        damaged.append(bytes(flipped))
    for sample in damaged:
        try:
            rgb = decode_image(sample, "x")
        except ForkliftError as exc:
            assert str(exc).startswith("x: ") and "\n" not in str(exc)
        else:
            assert rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3


# --- real photos ---------------------------------------------------------------------------------------------------


def test_real_photos_match_opencv() -> None:
    """An independent decoder (OpenCV's libjpeg) agrees with ours on the reference photos."""
    photos = sorted(PHOTOS.glob("*.jpg")) if PHOTOS.is_dir() else []
    if not photos:
        missing(f"reference photos in {PHOTOS} are missing (see ../shared/data/README.md)")
    for photo in photos:
        data = photo.read_bytes()
        rgb = decode_image(data, photo.name)
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        assert rgb.shape == bgr.shape, photo.name
        difference = np.abs(rgb.astype(int) - bgr[:, :, ::-1].astype(int))
        assert difference.mean() < 1.0, photo.name
