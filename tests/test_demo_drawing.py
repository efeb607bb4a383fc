"""forklift.vision.drawing, which the demo uses to show its predictions: boxes land on their edges in their colour,
the rest of the image is left alone, and the pictures written are files Pillow reads back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from forklift.vision.drawing import draw_boxes, write_grid, write_image

GRAY, RED, BLUE = (90, 90, 90), (255, 0, 0), (0, 0, 255)


def gray(height: int = 60, width: int = 80) -> np.ndarray:
    return np.full((height, width, 3), GRAY, np.uint8)


def test_box_edges_take_the_colour_and_far_pixels_stay() -> None:
    image = gray()
    drawn = draw_boxes(image, [(10, 12, 40, 30)], colours=RED, width=2)
    for y, x in [(12, 25), (13, 25), (30, 25), (20, 10), (20, 40)]:  # top (two pixels thick), bottom, left, right
        assert tuple(drawn[y, x]) == RED, (y, x)
    assert tuple(drawn[20, 25]) == GRAY  # inside, away from the edges
    assert tuple(drawn[50, 70]) == GRAY  # far from any box
    assert (image == GRAY).all()  # the input is not drawn on


def test_each_box_its_colour_and_labels_on_tags() -> None:
    drawn = draw_boxes(gray(), [(2, 2, 38, 28), (44, 30, 78, 58)], colours=[RED, BLUE], labels=["circle 0.91", "x"])
    assert tuple(drawn[15, 2]) == RED
    assert tuple(drawn[45, 78]) == BLUE
    tag = drawn[6:16, 5:30]  # the first label's tag: red ground, dark (anti-aliased black) letters
    assert (tag == RED).all(axis=2).any() and (tag.max(axis=2) < 60).any()


def test_no_boxes_gives_an_unchanged_copy() -> None:
    image = gray()
    drawn = draw_boxes(image, [], colours=RED)
    assert drawn is not image and (drawn == image).all()


def test_pictures_are_written_and_read_back(tmp_path: Path) -> None:
    picture = draw_boxes(gray(), [(10, 12, 40, 30)], colours=RED)
    single = write_image(picture, tmp_path / "predictions" / "one.png")
    with Image.open(single) as read:
        assert read.size == (80, 60)
        assert (np.asarray(read.convert("RGB")) == picture).all()  # PNG: lossless
    grid = write_grid([picture] * 5, tmp_path / "grid.jpg", columns=2, padding=4)
    with Image.open(grid) as read:
        read.load()
        assert read.format == "JPEG"
        assert read.size == (2 * (80 + 4) + 4, 3 * (60 + 4) + 4)
