"""letterbox and stretch, and Placement.to_original mapping boxes in the network input back to the original."""

from __future__ import annotations

import numpy as np
import pytest

from forklift.vision.resize import LETTERBOX_FILL, Placement, fit, letterbox, stretch

COLOUR = (10, 200, 30)
# (width, height) of originals: landscape, portrait, square, tiny, and sizes whose padding is odd.
SIZES = [(300, 180), (180, 300), (256, 256), (20, 9), (9, 20), (641, 479), (479, 641)]
NETWORK = [(256, 256), (320, 192)]


def solid(width: int, height: int) -> np.ndarray:
    return np.full((height, width, 3), COLOUR, np.uint8)


def content_bounds(fitted: np.ndarray) -> tuple[int, int, int, int]:
    """x1, y1, x2, y2 (exclusive) of the pixels that are not the letterbox gray."""
    ys, xs = np.nonzero((fitted != LETTERBOX_FILL).any(axis=2))
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


@pytest.mark.parametrize(("net_w", "net_h"), NETWORK)
@pytest.mark.parametrize(("width", "height"), SIZES)
def test_letterbox_keeps_aspect_and_centres_on_gray(width: int, height: int, net_w: int, net_h: int) -> None:
    fitted, placement = letterbox(solid(width, height), net_w, net_h)
    assert fitted.shape == (net_h, net_w, 3) and fitted.dtype == np.uint8
    x1, y1, x2, y2 = content_bounds(fitted)
    # The image fills one side exactly and keeps its aspect ratio to within rounding to whole pixels.
    assert (x2 - x1 == net_w) or (y2 - y1 == net_h)
    assert abs((x2 - x1) / (y2 - y1) - width / height) <= width / height * (1 / (y2 - y1) + 1 / (x2 - x1))
    assert placement.scale_x == pytest.approx(placement.scale_y, rel=0.02)
    # Centred: the padding on opposite sides differs by at most one pixel.
    assert abs(x1 - (net_w - x2)) <= 1 and abs(y1 - (net_h - y2)) <= 1
    assert (placement.pad_x, placement.pad_y) == (x1, y1)
    # Inside: the image's own colour everywhere; outside: exactly the letterbox gray.
    assert (fitted[y1:y2, x1:x2] == COLOUR).all()
    outside = np.ones((net_h, net_w), bool)
    outside[y1:y2, x1:x2] = False
    assert (fitted[outside] == LETTERBOX_FILL).all()


@pytest.mark.parametrize(("net_w", "net_h"), NETWORK)
@pytest.mark.parametrize(("width", "height"), SIZES)
def test_stretch_fills_exactly(width: int, height: int, net_w: int, net_h: int) -> None:
    fitted, placement = stretch(solid(width, height), net_w, net_h)
    assert fitted.shape == (net_h, net_w, 3) and fitted.dtype == np.uint8
    assert (fitted == COLOUR).all()
    assert placement == Placement(net_w / width, net_h / height, 0.0, 0.0, width, height)


def test_fit_dispatches_by_mode() -> None:
    image = solid(300, 180)
    assert (fit(image, 256, 256, "letterbox")[0] == letterbox(image, 256, 256)[0]).all()
    assert (fit(image, 256, 256, "stretch")[0] == stretch(image, 256, 256)[0]).all()


def test_non_contiguous_input() -> None:
    """Views (flips, transposes, strides) are what numpy hands around; the resizers must take them."""
    image = np.zeros((60, 100, 3), np.uint8)
    image[:, :50] = 255
    for view in (image[:, ::-1], image.transpose(1, 0, 2), image[::2, ::3]):
        for resize in (letterbox, stretch):
            fitted, _ = resize(view, 64, 48)
            assert fitted.shape == (48, 64, 3)


# Landscape and portrait, shrunk (down to 0.64) and enlarged (2.1x); a whole fitted pixel is 1/scale original
# pixels, so finding edges to the nearest fitted pixel is within 1 original pixel only down to a scale of 0.5.
# to_original itself is exact at any scale (test_to_original_inverts_the_placement).
BOX_SIZES = [(300, 180), (180, 300), (400, 250), (250, 400), (120, 72), (72, 120)]


@pytest.mark.parametrize("resize", [letterbox, stretch])
@pytest.mark.parametrize(("width", "height"), BOX_SIZES)
def test_box_in_fitted_image_maps_back_to_original_pixels(resize, width: int, height: int) -> None:
    """A white rectangle drawn in the original, found in the fitted image, maps back to where it was (±1 px)."""
    box = (int(width * 0.23), int(height * 0.31), int(width * 0.71), int(height * 0.87))  # x1, y1, x2 (exclusive), y2
    image = np.zeros((height, width, 3), np.uint8)
    image[box[1] : box[3], box[0] : box[2]] = 255
    fitted, placement = resize(image, 256, 256)
    ys, xs = np.nonzero(fitted[:, :, 0] > 127)  # the rectangle's edges fall where interpolation crosses half-way
    found = np.array([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], np.float32)
    back = placement.to_original(found)
    assert back.shape == (1, 4)
    assert np.abs(back[0] - np.array(box)).max() <= 1.0, (back, box)


@pytest.mark.parametrize(("net_w", "net_h"), NETWORK)
@pytest.mark.parametrize(("width", "height"), SIZES)
def test_letterboxed_area_maps_back_to_the_whole_image(width: int, height: int, net_w: int, net_h: int) -> None:
    """The box around the image's area in the letterboxed input is the whole original image."""
    fitted, placement = letterbox(solid(width, height), net_w, net_h)
    area = np.array([content_bounds(fitted)], np.float64)
    assert np.abs(placement.to_original(area)[0] - [0, 0, width, height]).max() < 1e-9


@pytest.mark.parametrize("resize", [letterbox, stretch])
@pytest.mark.parametrize(("width", "height"), [(300, 180), (180, 300), (20, 9), (641, 479), (479, 641)])
def test_to_original_inverts_the_placement(resize, width: int, height: int) -> None:
    """input = original * scale + pad, exactly, for boxes anywhere inside the image."""
    _, placement = resize(solid(width, height), 320, 192)
    rng = np.random.default_rng(width * height)
    corners = np.sort(rng.uniform(0, 1, (50, 2, 2)), axis=1)  # (box, corner, x/y) with corner 0 <= corner 1
    original = (corners * [width, height]).reshape(50, 4)  # x1, y1, x2, y2
    fitted = original.copy()
    fitted[:, 0::2] = original[:, 0::2] * placement.scale_x + placement.pad_x
    fitted[:, 1::2] = original[:, 1::2] * placement.scale_y + placement.pad_y
    assert np.allclose(placement.to_original(fitted), original, atol=1e-6)


@pytest.mark.parametrize(("width", "height"), [(300, 180), (180, 300)])
def test_to_original_clips_to_the_image(width: int, height: int) -> None:
    _, placement = letterbox(solid(width, height), 256, 256)
    boxes = np.array(
        [
            [-50.0, -50.0, 400.0, 400.0],  # past every edge of the network input
            [0.0, 0.0, 3.0, 3.0],  # inside the top-left padding (for one of the two orientations)
            [100.0, 100.0, 120.0, 130.0],  # well inside
        ]
    )
    back = placement.to_original(boxes)
    assert back.dtype == np.float64
    assert (back[:, 0::2] >= 0).all() and (back[:, 0::2] <= width).all()
    assert (back[:, 1::2] >= 0).all() and (back[:, 1::2] <= height).all()
    assert back[0].tolist() == [0.0, 0.0, width, height]
    pad = np.array([placement.pad_x, placement.pad_y] * 2)
    scale = np.array([placement.scale_x, placement.scale_y] * 2)
    inside = (boxes[2] - pad) / scale
    assert np.allclose(back[2], inside)


def test_to_original_takes_no_boxes() -> None:
    _, placement = stretch(solid(30, 20), 64, 64)
    assert placement.to_original(np.zeros((0, 4), np.float32)).shape == (0, 4)
