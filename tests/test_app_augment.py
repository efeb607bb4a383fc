"""Each augmentation does what it says to the pixels and to the boxes and polygons: a flip mirrors x exactly, a
rotation and a crop keep the box and the polygon on the object that moved, a crop clips a polygon it cuts, and the
pixel-only operations (blur, sharpen, colour, noise) change pixels and leave the shapes as they were. Also that a
request's `operations` are the only ones used."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from app_helpers import app_client, fresh_database
from PIL import Image, ImageDraw

from forklift.app.augment import Shape, augmented

W, H = 160, 120
OBJECT = [20, 30, 70, 80]  # a bright rectangle, off the centre so that a flip moves it
OUTLINE = [[20, 30], [70, 30], [70, 80], [20, 80]]
SEEDS = range(3)


def _picture() -> np.ndarray:
    """A dark, slightly textured background (so blur and sharpen have something to act on) and the object."""
    pixels = np.full((H, W, 3), 40, np.uint8) + np.random.default_rng(0).integers(0, 20, (H, W, 3), dtype=np.uint8)
    x1, y1, x2, y2 = OBJECT
    pixels[y1:y2, x1:x2] = (220, 200, 180)
    return pixels


def _png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return buffer.getvalue()


def _decoded(jpeg: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB")).astype(float)


def _as_jpeg(pixels: np.ndarray) -> np.ndarray:
    """The picture through the same JPEG round trip as a variant, to compare like with like."""
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=92)
    return _decoded(buffer.getvalue())


def _object_mask(pixels: np.ndarray) -> np.ndarray:
    return np.asarray(pixels.mean(axis=2) > 130)


def _bounds(mask: np.ndarray) -> list[float]:
    ys, xs = np.nonzero(mask)
    return [float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)]


def _polygon_mask(points: list[list[float]]) -> np.ndarray:
    canvas = Image.new("1", (W, H))
    ImageDraw.Draw(canvas).polygon([tuple(p) for p in points], fill=1)
    return np.asarray(canvas, dtype=bool)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / (a | b).sum())


def _variant(operation: str, seed: int, shapes: list[Shape] | None = None) -> tuple[np.ndarray, dict[str, Shape]]:
    jpeg, moved = augmented(_png(_picture()), shapes or [Shape("box", "car", OBJECT), Shape("polygon", "car", OUTLINE)],
                            [operation], seed)  # fmt: skip
    return _decoded(jpeg), {shape.kind: shape for shape in moved}


def _edges(pixels: np.ndarray) -> float:
    """How much neighbouring pixels differ: blur lowers it, sharpening and noise raise it."""
    return float(np.abs(np.diff(pixels, axis=1)).mean())


def test_a_flip_mirrors_pixels_boxes_and_polygons_exactly() -> None:
    pixels, shapes = _variant("flip", 0)
    x1, y1, x2, y2 = OBJECT
    assert shapes["box"].points == [W - x2, y1, W - x1, y2]  # x' = W - x: [90, 30, 140, 80]
    assert shapes["polygon"].points == [[W - x, y] for x, y in OUTLINE]
    assert np.abs(pixels - _as_jpeg(_picture()[:, ::-1])).mean() < 1.0
    assert _bounds(_object_mask(pixels)) == [90, 30, 140, 80]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_rotation_keeps_the_box_and_the_polygon_around_the_object(seed: int) -> None:
    pixels, shapes = _variant("rotate", seed)
    seen = _object_mask(pixels)
    assert _bounds(seen) != [float(v) for v in OBJECT]  # it did turn
    assert shapes["box"].points == pytest.approx(_bounds(seen), abs=1.5)  # the turned object's bounds
    assert _iou(_polygon_mask(shapes["polygon"].points), seen) > 0.9


@pytest.mark.parametrize("seed", SEEDS)
def test_a_crop_moves_the_box_and_the_polygon_with_the_object(seed: int) -> None:
    pixels, shapes = _variant("crop", seed)
    seen = _object_mask(pixels)
    assert shapes["box"].points != OBJECT  # cropped and scaled back to the image's size: the object moved
    assert shapes["box"].points == pytest.approx(_bounds(seen), abs=1.5)
    assert _iou(_polygon_mask(shapes["polygon"].points), seen) > 0.9


def test_a_crop_clips_a_polygon_it_cuts() -> None:
    """The crop keeps every box whole, not polygons: one far from the box is cut, its points clipped to the frame."""
    corner = [[120, 85], [158, 85], [158, 118], [120, 118]]
    cut = 0
    for seed in range(6):
        _pixels, shapes = _variant("crop", seed, [Shape("box", "car", OBJECT), Shape("polygon", "road", corner)])
        if "polygon" not in shapes:  # cut down to fewer than 3 distinct points: dropped
            cut += 1
            continue
        points = shapes["polygon"].points
        assert all(0 <= x <= W and 0 <= y <= H for x, y in points), points
        cut += any(x in (0, W) or y in (0, H) for x, y in points)
    assert cut >= 1  # the crops left out some of the corner at least once


@pytest.mark.parametrize("operation", ["blur", "sharpen", "colour", "noise"])
@pytest.mark.parametrize("seed", SEEDS)
def test_pixel_operations_change_pixels_and_leave_the_shapes(operation: str, seed: int) -> None:
    pixels, shapes = _variant(operation, seed)
    assert shapes["box"].points == OBJECT and shapes["polygon"].points == OUTLINE
    before = _as_jpeg(_picture())
    ratio = _edges(pixels) / _edges(before)
    shift = np.abs(pixels.mean(axis=(0, 1)) - before.mean(axis=(0, 1))).max()
    if operation == "blur":
        assert ratio < 0.6 and shift < 1, (ratio, shift)
    elif operation == "sharpen":
        assert ratio > 2, ratio
    elif operation == "colour":
        assert shift > 1.5, shift
    else:
        assert ratio > 1.5 and shift < 1, (ratio, shift)


@pytest.mark.slow
def test_the_operations_asked_for_are_the_only_ones_used(tmp_path: Path) -> None:
    """On SQLite only: the operations are the same code on either database."""
    with app_client(tmp_path, fresh_database(None, tmp_path)) as client:
        dataset = client.post("/api/datasets", json={"name": "augment"}).json()["id"]
        source = client.post(f"/api/datasets/{dataset}/images", files={"files": ("a.png", _png(_picture()))})
        image = source.json()["added"][0]
        shapes = [{"kind": "box", "label": "car", "points": OBJECT}, {"kind": "polygon", "label": "car",
                                                                       "points": OUTLINE}]  # fmt: skip
        client.put(f"/api/images/{image['id']}/annotations", json={"version": 1, "shapes": shapes})
        for operations, box, outline in (
            (["flip"], [90, 30, 140, 80], [[W - x, y] for x, y in OUTLINE]),
            (["blur", "noise"], OBJECT, OUTLINE),
        ):
            made = client.post(f"/api/datasets/{dataset}/augment",
                               json={"image_ids": [image["id"]], "variants": 3, "operations": operations})  # fmt: skip
            assert made.status_code == 201, made.text
            for variant in made.json()["added"]:
                moved = client.get(f"/api/images/{variant['id']}/annotations").json()["shapes"]
                assert {s["kind"]: s["points"] for s in moved} == {"box": box, "polygon": outline}, operations
