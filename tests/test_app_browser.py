"""The app end to end in Debian's Chromium (Playwright): create a data set, upload images and a generated video,
capture frames, draw a box with the mouse, change its label, reload and see it, copy a frame's boxes to the next
frame, and export COCO, checked with pycocotools; then the loop: start a training job and watch its chart grow,
deploy the model, auto-label with it and accept an image in the review queue. Each page is saved as a
screenshot in the test's folder."""

from __future__ import annotations

import io
import json
import re
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import core_parts
import httpx
import pytest
from app_helpers import FLAGS, as_drawn, chromium_page, png, shapes_dataset, start_app, video, zip_of
from helpers import forklift
from PIL import Image as PILImage
from playwright.sync_api import Error as PlaywrightError
from pycocotools.coco import COCO

from forklift.serve.process import free_port
from forklift.shared_data import shared_data_root

pytestmark = pytest.mark.slow

STATIC = Path(__file__).resolve().parents[1] / "src" / "forklift" / "app" / "static" / "index.html"


@pytest.fixture
def app_url(tmp_path: Path) -> Iterator[str]:
    if not STATIC.is_file():
        core_parts.missing("the front end is not built (make webapp)")
    port = free_port()
    server = start_app(tmp_path / "data", port)
    url = f"http://127.0.0.1:{port}"
    try:
        yield url
    finally:
        for deployment in httpx.get(f"{url}/api/deployments").json():  # deployments outlive the app by design
            httpx.delete(f"{url}/api/deployments/{deployment['id']}", timeout=60)
        server.terminate()
        server.wait(20)


def _drag(page, x: float, y: float, dx: float, dy: float) -> None:  # type: ignore[no-untyped-def]
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + dx / 2, y + dy / 2, steps=6)
    page.mouse.move(x + dx, y + dy, steps=6)
    page.mouse.up()


def _saved(page) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_timeout(400)  # the editor saves 250 ms after the last change
    page.wait_for_selector("[data-testid=save-state].is-saved", timeout=15000)


def _scale(page) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
    """Where the image is on the page and how much it is zoomed: (left, top, displayed / natural width)."""
    frame = page.locator(".zoomed img").bounding_box()
    natural = page.locator(".zoomed img").evaluate("i => i.naturalWidth")
    return frame["x"], frame["y"], frame["width"] / natural


def _draw(page, box: tuple[float, float, float, float]) -> None:  # type: ignore[no-untyped-def]
    """A drag around `box` (x1, y1, x2, y2 in image pixels)."""
    left, top, scale = _scale(page)
    x1, y1, x2, y2 = box
    _drag(page, left + x1 * scale, top + y1 * scale, (x2 - x1) * scale, (y2 - y1) * scale)


def _click(page, x: float, y: float) -> None:  # type: ignore[no-untyped-def]
    left, top, scale = _scale(page)
    page.mouse.click(left + x * scale, top + y * scale)


def _choose(page, name: str) -> None:  # type: ignore[no-untyped-def]
    """Type a label's name in the editor's label field and press Enter, as its hint says."""
    page.fill("input[aria-label='Current label']", name)
    page.press("input[aria-label='Current label']", "Enter")


def test_the_editor_labels_what_was_meant_in_chromium(app_url: str, tmp_path: Path) -> None:
    """A person labels three objects with three labels on one image by the page's own hints: the label chosen is
    the next shape's (a key or a typed name never relabels the shape just drawn), relabelling is select-then-choose,
    Escape deselects, a drag always draws, polygons are clicked point by point (double-click or Enter closes),
    each shape shows its label's colour and name, label numbers follow creation, no label is made up, a small
    image opens fitted to the canvas, and typing in the label field fires no key."""

    with httpx.Client(base_url=app_url, timeout=60) as client:
        dataset = client.post("/api/datasets", json={"name": "street"}).json()["id"]
        small = shared_data_root() / "images" / "dog.jpg"
        from PIL import Image as PILImage

        image = PILImage.open(small).resize((224, 168))
        buffer = io.BytesIO()
        image.save(buffer, "JPEG")
        (added,) = client.post(
            f"/api/datasets/{dataset}/images", files={"files": ("small.jpg", buffer.getvalue())}
        ).json()["added"]
    shapes_url = f"{app_url}/api/images/{added['id']}/annotations"
    with chromium_page(800) as (page, errors):
        page.goto(f"{app_url}/#/datasets/{dataset}/images/{added['id']}")
        page.wait_for_selector(".editor img")
        _saved(page)
        left, top, scale = _scale(page)
        assert scale > 2.5  # 224 px fitted to the canvas (about 900 x 600 here), not shown at 100 %
        assert page.locator("[data-testid=zoom]").inner_text() == f"{round(scale * 100)}%"
        page.wait_for_selector("[data-testid=needs-label]")  # no label yet: it asks for one first
        _draw(page, (10, 10, 60, 60))
        page.wait_for_timeout(500)
        assert httpx.get(shapes_url).json()["shapes"] == []  # nothing drawn, no label made up

        before = _scale(page)[1]
        _choose(page, "dog")  # the image stays where it is until the first shape is drawn (it moved up under the
        page.wait_for_selector("text=The next shape is a dog: drag around an object")  # pointer, the ask gone)
        assert _scale(page)[1] == before
        _draw(page, (20, 30, 90, 110))
        _saved(page)
        assert page.locator("[data-testid=needs-label]").count() == 0
        _choose(page, "bicycle")  # the next shape's label: the dog just drawn keeps its own
        _draw(page, (130, 20, 190, 70))
        _saved(page)
        _choose(page, "car")
        _draw(page, (140, 100, 200, 150))
        _saved(page)
        page.keyboard.press("1")  # dog, the first label made: for the next shape, not the car just drawn
        _draw(page, (4, 4, 18, 24))
        _saved(page)
        shapes = httpx.get(shapes_url).json()["shapes"]
        assert [s["label"] for s in shapes] == ["dog", "bicycle", "car", "dog"]
        for shape, want in zip(
            shapes, [(20, 30, 90, 110), (130, 20, 190, 70), (140, 100, 200, 150), (4, 4, 18, 24)], strict=True
        ):
            assert shape["points"] == pytest.approx(want, abs=1.5)
        labels = httpx.get(f"{app_url}/api/datasets/{dataset}").json()["labels"]
        assert [label["name"] for label in labels] == ["dog", "bicycle", "car"]  # numbered as made, not by name

        captions = page.locator("[data-testid=caption]")
        assert sorted(captions.all_inner_texts()) == ["bicycle", "car", "dog", "dog"]
        colours = {c.inner_text(): c.evaluate("c => getComputedStyle(c).backgroundColor") for c in captions.all()}
        assert len(set(colours.values())) == 3  # one colour a label

        _click(page, 165, 50)  # select the bicycle, then choose: an explicit relabel
        page.keyboard.press("3")
        _saved(page)
        assert [s["label"] for s in httpx.get(shapes_url).json()["shapes"]] == ["dog", "car", "car", "dog"]
        _click(page, 165, 50)  # selected again, Escape: nothing is selected any more
        page.keyboard.press("Escape")
        page.keyboard.press("2")  # bicycle, for the next shape only
        page.wait_for_timeout(500)
        assert [s["label"] for s in httpx.get(shapes_url).json()["shapes"]] == ["dog", "car", "car", "dog"]
        _click(page, 50, 70)  # select the dog, then a drag on empty canvas: it draws (and deselects)
        _draw(page, (100, 120, 125, 160))
        _saved(page)
        shapes = httpx.get(shapes_url).json()["shapes"]
        assert [s["label"] for s in shapes] == ["dog", "car", "car", "dog", "bicycle"]

        page.fill("input[aria-label='Current label']", "gg")  # typing in the field fires no key (G: polygon)
        assert "on" in (page.locator("button:has-text('Box')").get_attribute("class") or "")
        page.fill("input[aria-label='Current label']", "")
        page.locator("input[aria-label='Current label']").blur()  # out of the field: keys act again
        page.keyboard.press("g")
        for x, y in ((10, 120), (40, 120)):
            _click(page, x, y)
        left, top, scale = _scale(page)
        page.mouse.dblclick(left + 25 * scale, top + 150 * scale)  # the last point double-clicked closes it
        _saved(page)
        numbers = [label["name"] for label in httpx.get(f"{app_url}/api/datasets/{dataset}/labels").json()]
        page.keyboard.press(str(numbers.index("dog") + 1))  # the next shape's label: not the polygon just closed
        page.wait_for_timeout(500)
        _saved(page)
        polygons = [s for s in httpx.get(shapes_url).json()["shapes"] if s["kind"] == "polygon"]
        assert len(polygons) == 1 and len(polygons[0]["points"]) == 3 and polygons[0]["label"] == "bicycle"
        page.keyboard.press(str(numbers.index("bicycle") + 1))
        for x, y in ((200, 4), (220, 4), (210, 16)):
            _click(page, x, y)
        page.keyboard.press("Enter")  # Enter closes one too
        _saved(page)
        page.keyboard.press("r")
        page.keyboard.press(str(numbers.index("dog") + 1))  # again the next shape's label, not the polygon's
        page.wait_for_timeout(500)
        _saved(page)
        polygons = [s for s in httpx.get(shapes_url).json()["shapes"] if s["kind"] == "polygon"]
        assert len(polygons) == 2 and polygons[1]["label"] == "bicycle"
        assert [v for point in polygons[1]["points"] for v in point] == pytest.approx(
            [200, 4, 220, 4, 210, 16], abs=1.5
        )
        _click(page, 50, 70)  # select the dog, drag its bottom-right handle, and leave at once, still selected
        left, top, scale = _scale(page)
        _drag(page, left + 90 * scale, top + 110 * scale, 6 * scale, 6 * scale)
        page.reload()
        page.wait_for_selector(".editor img")
        _saved(page)
        assert httpx.get(shapes_url).json()["shapes"][0]["points"] == pytest.approx((20, 30, 96, 116), abs=1.5)
        fitted = page.locator("[data-testid=zoom]").inner_text()  # the room the page leaves now (no first-label ask)
        page.keyboard.press("+")
        assert page.locator("[data-testid=zoom]").inner_text() != fitted
        page.keyboard.press("0")  # 0: fitted again
        assert page.locator("[data-testid=zoom]").inner_text() == fitted
        page.screenshot(path=str(tmp_path / "editor.png"))
        assert not errors, errors


def test_label_a_data_set_in_chromium(app_url: str, tmp_path: Path) -> None:

    photos = sorted((shared_data_root() / "images").glob("*.jpg"))[:4]
    clip = video(tmp_path / "street.mp4", seconds=3.0, fps=10, size=(320, 240))
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with chromium_page(800) as (page, errors):
        page.goto(app_url)
        page.fill("input[aria-label='New data set name']", "Street scenes")
        page.click("button:has-text('Create')")
        page.wait_for_selector("text=Upload images")
        page.set_input_files("input[type=file][accept='image/*']", [str(p) for p in photos])
        page.wait_for_function("() => document.querySelectorAll('.tile').length === 4")
        page.set_input_files("input[type=file][accept^='video']", str(clip))
        page.wait_for_selector(".video-panel")
        for below_its_minimum in ("0.05", ""):  # shown as wrong, nothing captured
            page.fill("input[aria-label='Seconds between frames']", below_its_minimum)
            page.click(".video-panel button:text-is('Capture')")
            assert page.locator("input[aria-label='Seconds between frames']:invalid").count() == 1
        assert httpx.get(f"{app_url}/api/datasets/1/images").json()["total"] == 4
        page.fill("input[aria-label='Seconds between frames']", "1")
        page.dblclick(".video-panel button:text-is('Capture')")  # captured once, and said so (not "0 frame(s)")
        page.wait_for_selector("text=Captured 3 frame(s).")
        page.wait_for_function("() => document.querySelectorAll('.tile').length >= 7")
        page.wait_for_function(
            "() => [...document.querySelectorAll('.tile img')].every(i => i.complete && i.naturalWidth > 0)"
        )
        page.screenshot(path=str(shots / "dataset.png"))

        # capture by hand: the player at 1.5 s, then its button
        page.eval_on_selector(
            ".video-panel video",
            "v => new Promise(done => { v.addEventListener('seeked', done, {once: true}); v.currentTime = 1.5; })",
        )
        page.click(".video-panel button:text-is('Capture this frame')")
        page.wait_for_selector("text=Captured 1 frame(s).")
        times = [i["video_time_s"] for i in httpx.get(f"{app_url}/api/datasets/1/images").json()["items"]]
        assert sorted(t for t in times if t is not None) == pytest.approx([0.0, 1.0, 1.5, 2.0])
        # a stretch of it: from 2.2 s to 2.8 s every 0.3 s; a stretch that ends before it starts is shown as wrong
        page.fill("input[aria-label='Seconds between frames']", "0.3")
        page.fill("input[aria-label='Capture from (s)']", "2.2")
        page.fill("input[aria-label='Capture to (s)']", "1")
        page.click(".video-panel button:text-is('Capture')")
        assert page.locator("input[aria-label='Capture to (s)']:invalid").count() == 1
        page.fill("input[aria-label='Capture to (s)']", "2.8")  # with 2.8 (2.2 + 2 × 0.3 is a hair past it)
        page.click(".video-panel button:text-is('Capture')")
        page.wait_for_selector("text=Captured 3 frame(s).")
        items = httpx.get(f"{app_url}/api/datasets/1/images").json()["items"]
        times = sorted(i["video_time_s"] for i in items if i["video_time_s"] is not None)
        assert times == pytest.approx([0.0, 1.0, 1.5, 2.0, 2.2, 2.5, 2.8])
        for stretch in (i for i in items if (i["video_time_s"] or 0) > 2.1):  # the rest of the walk counts 4 frames
            assert httpx.delete(f"{app_url}/api/images/{stretch['id']}").status_code == 204
        page.reload()
        page.wait_for_function("() => document.querySelectorAll('.tile').length === 8")

        # multi-select: a click, then Shift+click selects the range between; moved to val in one step
        page.click(".tile .pick >> nth=0")
        page.click(".tile .pick >> nth=3", modifiers=["Shift"])
        page.wait_for_selector("text=4 selected")
        page.select_option("select[aria-label='Move to split']", "val")
        page.wait_for_selector("text=Moved: 4 image(s).")
        in_val = httpx.get(f"{app_url}/api/datasets/1/images?split=val").json()["items"]
        assert [i["original_name"] for i in in_val] == [p.name for p in photos]

        page.click(".tile a >> nth=0")  # the first photo
        page.wait_for_selector(".editor img")
        _saved(page)
        frame = page.locator(".zoomed img").bounding_box()
        assert frame is not None
        _choose(page, "bicycle")  # the data set has no labels: the first one is named before drawing
        _draw(page, (100, 80, 250, 200))
        _saved(page)
        image_id = page.url.rsplit("/", 1)[1]
        shapes = httpx.get(f"{app_url}/api/images/{image_id}/annotations").json()["shapes"]
        assert [s["label"] for s in shapes] == ["bicycle"]
        assert shapes[0]["points"] == pytest.approx([100, 80, 250, 200], abs=3)  # image pixels, at any zoom
        page.reload()
        page.wait_for_selector(".editor img")
        _saved(page)
        page.wait_for_selector("text=bicycle")
        drawn = page.locator("svg g.a9s-annotation:not(.a9s-rubberband)")  # the rubberband is the drawing tool's
        assert drawn.count() == 1  # Annotorious draws the saved box again
        page.screenshot(path=str(shots / "editor.png"))

        # someone else changes this image meanwhile: the editor's next save is refused, and it shows theirs with the
        # box drawn here added (it showed theirs alone: the box drawn was lost)
        current = httpx.get(f"{app_url}/api/images/{image_id}/annotations").json()
        theirs = [{"kind": "box", "label": "car", "points": [300, 300, 400, 380]}]
        assert httpx.put(f"{app_url}/api/images/{image_id}/annotations",
                         json={"version": current["version"], "shapes": theirs}).status_code == 200  # fmt: skip
        _drag(page, frame["x"] + 500, frame["y"] + 60, 80, 60)
        page.wait_for_selector("text=This image was changed elsewhere", timeout=15000)
        page.wait_for_selector("text=your 1 new shape(s) were added to its saved version")
        page.wait_for_timeout(600)
        _saved(page)
        cars = next(label["count"] for label in httpx.get(f"{app_url}/api/datasets/1").json()["labels"]
                    if label["name"] == "car")  # fmt: skip
        page.wait_for_selector(f".keys button:has-text('car') .count:text-is('{cars}')")  # counted again, theirs in
        now = as_drawn(httpx.get(f"{app_url}/api/images/{image_id}/annotations").json()["shapes"])
        assert now[0] == theirs[0] and [shape["label"] for shape in now] == ["car", "bicycle"]
        assert drawn.count() == 2  # their box and the one drawn here; not the bicycle they replaced

        frames = httpx.get(f"{app_url}/api/datasets/1/images?offset=4").json()["items"]
        page.goto(f"{app_url}/#/datasets/1/images/{frames[0]['id']}")
        page.wait_for_selector(".editor img")
        _saved(page)
        _draw(page, (20, 20, 80, 60))
        _saved(page)
        page.keyboard.press("ArrowRight")  # the next frame
        page.wait_for_selector("button:has-text('Copy previous frame')")
        _saved(page)
        page.click("button:has-text('Copy previous frame')")
        _saved(page)
        copied = httpx.get(f"{app_url}/api/images/{frames[1]['id']}/annotations").json()["shapes"]
        assert len(copied) == 1 and copied[0]["points"] == pytest.approx([20, 20, 80, 60], abs=3)
        # the previous frame's box as an auto label stores it (raw coordinates), copied, then copied again: added
        # once (each press added it again: the raw numbers never matched the rounded copy), and said
        previous = f"{app_url}/api/images/{frames[0]['id']}/annotations"
        raw = {"kind": "box", "label": copied[0]["label"], "points": [20.1234, 24.0071, 80.55, 61.2]}
        assert httpx.put(previous, json={"version": httpx.get(previous).json()["version"], "shapes": [raw]}).is_success
        page.click("button:has-text('Copy previous frame')")
        page.wait_for_selector("text=Copied 1 shape(s) from the previous frame.")
        _saved(page)
        page.click("button:has-text('Copy previous frame')")
        page.wait_for_selector("text=Copied 0 shape(s) from the previous frame; 1 were here already.")
        page.wait_for_timeout(600)
        assert len(httpx.get(f"{app_url}/api/images/{frames[1]['id']}/annotations").json()["shapes"]) == 2

        page.keyboard.press("ArrowRight")  # the third frame: draw, undo, redo
        page.wait_for_url(f"**/images/{frames[2]['id']}")
        page.wait_for_selector(".editor img")
        _saved(page)
        third = page.locator(".zoomed img").bounding_box()
        assert third is not None
        _draw(page, (30, 30, 80, 80))
        _saved(page)
        shapes_now = f"{app_url}/api/images/{frames[2]['id']}/annotations"
        assert len(httpx.get(shapes_now).json()["shapes"]) == 1
        page.keyboard.press("Control+z")
        _saved(page)
        assert httpx.get(shapes_now).json()["shapes"] == []
        page.keyboard.press("Control+y")
        _saved(page)
        assert len(httpx.get(shapes_now).json()["shapes"]) == 1

        # keys: a number relabels the box clicked (selected) first, Delete removes it
        names = [label["name"] for label in httpx.get(f"{app_url}/api/datasets/1").json()["labels"]]
        _click(page, 55, 55)
        page.keyboard.press(str(names.index("car") + 1))
        _saved(page)
        assert [s["label"] for s in httpx.get(shapes_now).json()["shapes"]] == ["car"]
        _click(page, 55, 55)
        page.keyboard.press("Delete")
        _saved(page)
        assert httpx.get(shapes_now).json()["shapes"] == []

        # zoom with +, then Space + drag pans the image instead of drawing
        fitted = _scale(page)[2]
        for _ in range(3):
            page.keyboard.press("=")
        page.wait_for_selector(f"[data-testid=zoom]:text-is('{round(fitted * 1.25**3 * 100)}%')")
        canvas = page.locator("[data-testid=canvas]")
        assert canvas.evaluate("c => c.scrollWidth > c.clientWidth")
        page.keyboard.down("Space")
        _drag(page, third["x"] + 400, third["y"] + 300, -120, -80)
        page.keyboard.up("Space")
        scrolled = canvas.evaluate("c => [c.scrollLeft, c.scrollTop]")
        assert scrolled == pytest.approx([120, 80], abs=4)
        page.wait_for_timeout(400)
        assert httpx.get(shapes_now).json()["shapes"] == []  # nothing drawn by the pan
        page.keyboard.press("0")
        page.wait_for_selector(f"[data-testid=zoom]:text-is('{round(fitted * 100)}%')")

        # a box drawn and left at once (→ within the save's 250 ms) is saved all the same
        _draw(page, (30, 30, 80, 80))
        page.keyboard.press("ArrowRight")
        page.wait_for_url(f"**/images/{frames[3]['id']}")
        _saved(page)
        assert len(httpx.get(shapes_now).json()["shapes"]) == 1

        page.goto(app_url)
        page.wait_for_selector(".dataset .title")
        page.screenshot(path=str(shots / "datasets.png"))
        exported = page.request.get(f"{app_url}/api/datasets/1/export?format=coco")
        assert exported.ok
        body = exported.body()
        assert not errors, errors
    zipped = zipfile.ZipFile(io.BytesIO(body))
    (name,) = [n for n in zipped.namelist() if n.endswith("annotations.json")]
    (tmp_path / "coco.json").write_bytes(zipped.read(name))
    coco = COCO(str(tmp_path / "coco.json"))
    assert len(coco.getImgIds()) == 8  # every image: the 4 photos and 4 frames, labelled or not
    assert len({a["image_id"] for a in coco.dataset["annotations"]}) == 4  # the photo and three frames are labelled
    assert sorted(c["name"] for c in coco.loadCats(coco.getCatIds())) == ["bicycle", "car"]  # no label made up
    assert all((shots / f"{page_name}.png").stat().st_size > 20_000 for page_name in ("dataset", "editor", "datasets"))


BADGE_APART_FROM_CHART = """() => {
    window.apart = [];  // every render where the progress badge counts other epochs than the chart's caption says
    new MutationObserver(() => {
        const seen = document.querySelector('[data-testid=epochs-seen]')?.textContent.match(/^epoch (\\d+) of/);
        const badge = document.querySelector('.page-head .progress em')?.textContent;
        if (seen && badge && !badge.startsWith(seen[1] + '/')) window.apart.push([seen[0], badge]);
    }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def test_train_deploy_auto_label_and_review_in_chromium(app_url: str, tmp_path: Path) -> None:

    with httpx.Client(base_url=app_url, timeout=60) as client:
        dataset, _, _ = shapes_dataset(client, tmp_path / "shapes", 24, labelled=16)
    shots = tmp_path / "shots"
    shots.mkdir()
    with chromium_page(860) as (page, errors):
        page.goto(f"{app_url}/#/datasets/{dataset}")
        page.get_by_role("button", name="Train…").click()
        for name, value in (("epochs", "3"), ("batch", "8"), ("size", "64")):
            page.get_by_label(name, exact=True).fill(value)
        page.wait_for_selector("[data-testid=estimate]")  # how long, said before it starts
        page.get_by_role("button", name="Start").dblclick()  # one job, not one a click
        page.wait_for_url("**/#/jobs/*")
        page.evaluate(BADGE_APART_FROM_CHART)
        # the set's Delete, pressed while its job is queued or runs: said, nothing asked
        sets = page.context.browser.new_page()  # type: ignore[union-attr]
        asked: list[str] = []
        sets.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
        sets.goto(app_url)
        sets.locator(".card button:has-text('Delete')").click()
        sets.wait_for_selector(".message.error:has-text('cannot be deleted while 1 training job(s) or auto-label')")
        assert asked == [] and len(httpx.get(f"{app_url}/api/datasets").json()) == 1
        sets.close()
        job = page.url.rsplit("/", 1)[-1]
        page.wait_for_function("() => document.querySelector('[data-testid=job-state]')?.textContent === 'running'",
                               timeout=120_000)  # fmt: skip
        page.wait_for_selector("[data-testid=epochs-seen]:has-text('epoch 3 of 3')", timeout=240_000)  # the events
        page.wait_for_selector("[data-testid=job-state]:has-text('done')", timeout=240_000)
        assert page.evaluate("window.apart") == []  # not while a poll of the runner catches up
        page.wait_for_selector("[data-testid=evaluation] img", timeout=30_000)
        evaluated = page.locator("[data-testid=evaluated-epoch]").inner_text()
        assert re.fullmatch(r"The model holds the weights of epoch [123] of 3, the best on val\.", evaluated), evaluated
        page.screenshot(path=str(shots / "job.png"), full_page=True)

        page.goto(f"{app_url}/#/models")
        assert page.locator("[data-testid=headline]").inner_text().startswith("mAP@.5 0.")  # the figure, named
        page.get_by_role("button", name="Deploy").click()
        page.wait_for_selector(".deployment pre", timeout=120_000)
        assert "/predict/" in page.locator(".deployment pre").inner_text()
        described = page.get_attribute(".deployment a", "href")  # the server's own API description (it has no /docs)
        assert described is not None and httpx.get(described).json()["openapi"].startswith("3.")
        tried = tmp_path / "shapes" / "images" / sorted(p.name for p in (tmp_path / "shapes" / "images").iterdir())[0]
        page.set_input_files(".deployment input[type=file]", str(tried))  # Try an image: drawn with its boxes
        page.wait_for_selector(f"[data-testid=tried]:has-text('{tried.name}: ') svg")
        page.wait_for_function("() => document.querySelector('[data-testid=tried] img').naturalWidth > 0")
        page.fill(".deployment input[aria-label='Confidence threshold']", "0.001")  # asked again at a low threshold
        page.keyboard.press("Tab")
        page.wait_for_selector("[data-testid=tried] svg rect")  # drawn: boxes with their labels and scores
        page.screenshot(path=str(shots / "models.png"), full_page=True)
        assert len(httpx.get(f"{app_url}/api/jobs").json()) == 1  # Start pressed twice
        text = tmp_path / "notes.jpg"
        text.write_text("not a picture")
        page.set_input_files(".deployment input[type=file]", str(text))  # said, not the last picture left standing
        page.wait_for_selector(".message.error:has-text('notes.jpg: not an image')")
        assert page.locator("[data-testid=tried]").count() == 0
        with PILImage.open(tried) as picture:  # the server reads a TIFF, Chromium draws none: said (it waited for ever)
            picture.save(tmp_path / "shape.tiff")
        page.set_input_files(".deployment input[type=file]", str(tmp_path / "shape.tiff"))
        page.wait_for_selector(".message.error:has-text('shape.tiff: the model answered')")
        page.set_input_files(".deployment input[type=file]", str(tried))  # and a try that works takes it away
        page.wait_for_selector(f"[data-testid=tried]:has-text('{tried.name}: ')")
        assert page.locator(".message.error").count() == 0
        page.once("dialog", lambda dialog: dialog.accept("abc"))  # a typo for the epochs: nothing starts
        page.get_by_role("button", name="Retrain").click()
        page.wait_for_selector(".message.error:has-text('“abc” epochs: give a whole number from 1 to 10000')")
        assert len(httpx.get(f"{app_url}/api/jobs").json()) == 1 and page.url.endswith("#/models")
        cell_bottoms = "() => new Set([...document.querySelectorAll('table.jobs tbody tr:first-child td')]" \
                       ".map((td) => td.getBoundingClientRect().bottom)).size"  # fmt: skip
        assert page.evaluate(cell_bottoms) == 1  # the row's cells end on one line

        page.goto(f"{app_url}/#/datasets/{dataset}")
        page.get_by_role("button", name="Train…").click()  # the next job's time, from the pace of the one that ran
        for name, value in (("epochs", "3"), ("size", "64")):
            page.get_by_label(name, exact=True).fill(value)
        page.wait_for_selector(f"[data-testid=estimate]:has-text('from the pace of job {job} at 64 px')")
        assert re.match(r"About \d+ s ", page.locator("[data-testid=estimate]").inner_text())
        start_from = page.get_by_label("Start from")  # COCO's weights are offered where the model has them
        start_from.select_option("coco")
        page.get_by_label("Model").select_option("yolov3-tiny-slim")  # none for the slim one: back to fresh
        assert start_from.input_value() == "" and "COCO" not in start_from.inner_text()
        page.get_by_role("button", name="Close").click()
        page.get_by_role("button", name="Auto-label…").click()
        page.get_by_label("Confidence threshold").fill("0.01")
        page.get_by_role("button", name="Start").click()
        page.wait_for_selector(".message:has-text('Auto-labelled 8 image(s)')", timeout=120_000)
        page.get_by_role("link", name="Review 8 auto-labelled").click()
        page.wait_for_selector("[data-testid=review-left]:has-text('8 to review')")
        page.wait_for_selector(".review-figure svg")
        page.screenshot(path=str(shots / "review.png"), full_page=True)
        first = page.locator(".side h2").inner_text()
        nothing_found = page.locator("text=The model found nothing here").count() > 0
        page.keyboard.press("a")
        if nothing_found:  # Accept on an image where nothing was found asks to be pressed again
            page.wait_for_selector(".message:has-text('press Accept (A) again')")
            assert page.locator("[data-testid=review-left]").inner_text().startswith("8 to review")
            page.keyboard.press("a")
        page.wait_for_selector("[data-testid=review-left]:has-text('7 to review')")
        assert page.locator(".side h2").inner_text() != first
        page.keyboard.press("u")  # undo: it waits for review again, shown first
        page.wait_for_selector("[data-testid=review-left]:has-text('8 to review')")
        assert page.locator(".side h2").inner_text() == first
        page.keyboard.press("u")  # once only: said, not the last undo's message again
        page.wait_for_selector(".message:has-text('Nothing to undo')")
        page.wait_for_selector("section.review[data-ready]")  # its labels loaded again
        page.keyboard.press("a")
        if nothing_found:
            page.keyboard.press("a")
        page.wait_for_selector("[data-testid=review-left]:has-text('7 to review')")
        page.get_by_label("Review first").select_option("nothing")  # kept over Correct's round trip to the editor
        page.wait_for_selector("section.review[data-ready]")
        page.keyboard.press("e")
        page.wait_for_selector(".editor img")
        page.go_back()
        page.wait_for_selector("section.review[data-ready]")
        assert page.get_by_label("Review first").input_value() == "nothing"
        assert not errors, errors
    with httpx.Client(base_url=app_url, timeout=60) as client:
        reviewed = client.get(f"/api/datasets/{dataset}/images?status=reviewed").json()
        assert reviewed["total"] == 1 and reviewed["items"][0]["original_name"] == first


def test_log_in_and_out_in_chromium(tmp_path: Path) -> None:
    """With --login (as anywhere but loopback) the app opens on its login page: a wrong password is a message in
    the page, the right one shows the account, and Log out ends the session (its cookie no longer works)."""
    chromium = str(core_parts.chromium())
    if not STATIC.is_file():
        core_parts.missing("the front end is not built (make webapp)")
    from playwright.sync_api import sync_playwright

    data = tmp_path / "data"
    for name, role in (("root", "admin"), ("ana", "editor"), ("vi", "viewer")):  # --login needs an admin
        forklift("app", "user", "add", name, "--role", role, "--password-stdin", "--data-dir", str(data),
                 input="correct horse\n")  # fmt: skip
    port = free_port()
    server = start_app(data, port, login=True)
    url = f"http://127.0.0.1:{port}"
    shots = tmp_path / "screenshots"
    shots.mkdir()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=FLAGS)
            try:
                page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()  # tabs: its context's
                page.goto(url)
                page.fill("form.login input >> nth=0", "ana")
                page.fill("form.login input[type=password]", "wrong")
                page.click("button:text-is('Log in')")
                page.wait_for_selector("[role=alert]")
                page.screenshot(path=str(shots / "login.png"))
                page.fill("form.login input[type=password]", "correct horse")
                page.click("button:text-is('Log in')")
                page.wait_for_selector("text=ana · editor")
                (cookie,) = page.context.cookies()
                signed_in = httpx.get(f"{url}/api/datasets", cookies={cookie["name"]: cookie["value"]})
                assert signed_in.status_code == 200
                page.click("button:text-is('Log out')")
                page.wait_for_selector("button:text-is('Log in')")
                after = httpx.get(f"{url}/api/datasets", cookies={cookie["name"]: cookie["value"]})
                assert after.status_code == 401
                _a_session_ended_in_another_tab_loses_nothing(page, url)
                _a_viewers_keys_say_view_only(browser, url)
                _the_api_page_tries_a_change_with_nothing_from_elsewhere(page, url)
            finally:
                browser.close()
    finally:
        server.terminate()
        server.wait(20)
    assert (shots / "login.png").stat().st_size > 5_000


def _the_api_page_tries_a_change_with_nothing_from_elsewhere(page, url: str) -> None:  # type: ignore[no-untyped-def]
    """/docs is Swagger UI served by the app (it loaded from a CDN: a blank page without internet), under the pages'
    content policy, and its "Try it out" sends the session's CSRF token: a data set made there is made."""
    asked: list[str] = []
    refused: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
    page.goto(f"{url}/docs")
    made = page.locator(".opblock-post", has=page.locator(".opblock-summary-path[data-path='/api/datasets']"))
    made.locator(".opblock-summary").click()
    made.locator("button.try-out__btn").click()
    made.locator("textarea.body-param__text").fill(json.dumps({"name": "tried in /docs", "task": "detect"}))
    made.locator("button.execute").click()
    assert made.locator(".live-responses-table .response .response-col_status").inner_text().strip() == "201"
    assert "tried in /docs" in [d["name"] for d in page.request.get(f"{url}/api/datasets").json()]
    assert asked and all(where.startswith(f"{url}/") for where in asked) and not refused, (asked, refused)


def _a_viewers_keys_say_view_only(browser, url: str) -> None:  # type: ignore[no-untyped-def]
    """A viewer pressing a key that changes (a label's number, Delete) is told the page is view only: it did
    nothing, and said nothing."""
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.goto(url)
    _log_in(page, url, account="vi")
    page.wait_for_selector("text=vi · viewer")
    image = page.request.get(f"{url}/api/datasets/1/images").json()["items"][0]
    page.goto(f"{url}/#/datasets/1/images/{image['id']}")
    page.wait_for_selector(".editor img")
    for key in ("1", "Delete"):
        page.keyboard.press(key)
        page.wait_for_selector("text=View only: this account looks at the data set; an editor or admin changes it.")
    page.goto(f"{url}/#/datasets/1")  # files dropped on the grid: said, where they were ignored
    page.wait_for_selector(".grid-column")
    assert page.locator("[data-testid=view-only]").inner_text() == "View only"  # the page said nothing of it
    assert "type the first label's name" not in page.inner_text(".dataset-page")  # what she cannot do, unsaid
    dropped = page.evaluate_handle("() => { const d = new DataTransfer(); d.items.add(new File(['x'], 'a.png', "
                                   "{ type: 'image/png' })); return d; }")  # fmt: skip
    page.dispatch_event(".grid-column", "drop", {"dataTransfer": dropped})
    page.wait_for_selector("text=View only: this account looks at the data set; an editor or admin adds images to it.")
    page.goto(f"{url}/#/datasets/1/review")  # the review queue's keys too, and the page says it is view only
    page.wait_for_selector(".page-head >> text=view only")
    page.keyboard.press("a")
    page.wait_for_selector("text=View only: this account looks at the review queue; an editor or admin decides.")
    page.context.close()


def _log_in(page, url: str, where: str = "", account: str = "ana") -> None:  # type: ignore[no-untyped-def]
    page.fill(f"{where} form.login input >> nth=0", account)
    page.fill(f"{where} form.login input[type=password]", "correct horse")
    page.click(f"{where} form.login button:text-is('Log in')")


def _a_session_ended_in_another_tab_loses_nothing(page, url: str) -> None:  # type: ignore[no-untyped-def]
    """A box drawn after a logout in another tab is not lost: the app asks to log in again over the page, then sends
    it; logged out and in again in the other tab, this tab's next save goes with the new session's token (it was
    refused with a CSRF message no person could act on, and leaving the image dropped what waited)."""
    _log_in(page, url)
    page.wait_for_selector("text=ana · editor")
    headers = {"X-CSRF-Token": page.request.get(f"{url}/api/session").json()["csrf"]}
    dataset = page.request.post(f"{url}/api/datasets", data={"name": "team"}, headers=headers).json()["id"]
    picture = {"name": "a.png", "mimeType": "image/png", "buffer": png(400, 300)}
    (image,) = page.request.post(f"{url}/api/datasets/{dataset}/images", multipart={"files": picture},
                                 headers=headers).json()["added"]  # fmt: skip
    page.request.post(f"{url}/api/datasets/{dataset}/labels", data={"name": "car"}, headers=headers)
    shapes = f"{url}/api/images/{image['id']}/annotations"
    page.goto(f"{url}/#/datasets/{dataset}/images/{image['id']}")
    page.wait_for_selector(".editor img")
    _saved(page)
    other = page.context.new_page()
    other.goto(url)
    other.click("button:text-is('Log out')")
    other.wait_for_selector("button:text-is('Log in')")
    page.keyboard.press("1")
    _draw(page, (40, 40, 200, 150))
    page.wait_for_selector(".overlay >> text=Logged out here")
    assert page.request.get(shapes).status == 401  # nothing saved meanwhile, and the box still drawn in the page
    _log_in(page, url, ".overlay")
    page.wait_for_selector(".overlay", state="detached")
    _saved(page)
    assert len(page.request.get(shapes).json()["shapes"]) == 1
    other.reload()
    other.click("button:text-is('Log out')")  # and in again, there: this tab's token is the ended session's
    _log_in(other, url)
    other.wait_for_selector("text=ana · editor")
    _draw(page, (220, 40, 380, 150))
    _saved(page)
    assert len(page.request.get(shapes).json()["shapes"]) == 2 and page.locator(".overlay").count() == 0
    other.click("button:text-is('Log out')")  # another account logged in there: this tab does not act as it
    _log_in(other, url, account="root")
    other.wait_for_selector("text=root · admin")
    _draw(page, (40, 170, 200, 280))
    page.wait_for_selector(".overlay >> text=root logged in in another tab")
    assert len(page.request.get(shapes).json()["shapes"]) == 2
    _log_in(page, url, ".overlay")
    _saved(page)
    assert len(page.request.get(shapes).json()["shapes"]) == 3
    page.goto(f"{url}/#/datasets/{dataset}")  # a page that does not keep what it could not send does not promise to
    page.wait_for_selector("input[aria-label='New label']")
    other.reload()  # it asks root to log in again over its page: ana's session, as this tab's, ends there
    other.click("button:text-is('Log out')")
    other.wait_for_selector("form.login")
    page.fill("input[aria-label='New label']", "bus")
    page.click("form.inline button:has-text('Add')")
    page.wait_for_selector(".overlay >> text=what it could not send (a decision, a form) was not done, so do it again")
    _log_in(page, url, ".overlay")
    page.wait_for_selector(".overlay", state="detached")
    assert [label["name"] for label in page.request.get(f"{url}/api/datasets/{dataset}/labels").json()] == ["car"]


def test_a_folders_images_are_added_in_the_order_of_their_names_in_chromium(app_url: str, tmp_path: Path) -> None:
    """frame_2 before frame_10, as a file manager lists them: the grid and the editor's Next follow the order of
    adding, and the browser hands a folder over in its own order."""
    folder = tmp_path / "clip"
    (folder / "b").mkdir(parents=True)
    names = ["frame_10.png", "frame_2.png", "b/frame_1.png", "frame_1.png", "notes.txt"]
    for seed, name in enumerate(names):
        (folder / name).write_bytes(png(seed=seed) if name.endswith(".png") else b"not a picture")
    with httpx.Client(base_url=app_url, timeout=60) as client:
        dataset = client.post("/api/datasets", json={"name": "frames"}).json()["id"]
        with chromium_page(800) as (page, errors):
            page.goto(f"{app_url}/#/datasets/{dataset}")
            page.set_input_files("input[type=file][webkitdirectory]", str(folder))
            page.wait_for_selector("text=Added 4 image(s). Not images, not sent: notes.txt.")
            assert not errors
        added = [image["original_name"] for image in client.get(f"/api/datasets/{dataset}/images").json()["items"]]
        assert added == ["clip/b/frame_1.png", "clip/frame_1.png", "clip/frame_2.png", "clip/frame_10.png"], added


def test_a_script_in_an_uploaded_file_does_not_run(app_url: str, tmp_path: Path) -> None:
    """A video that is also a page, named clip.html, opened by the person whose session it wants."""
    from test_app_video import gif_with_a_page

    with httpx.Client(base_url=app_url, timeout=60) as client:
        dataset = client.post("/api/datasets", json={"name": "clips"}).json()["id"]
        clip = gif_with_a_page(tmp_path / "clip.html")
        video = client.post(f"/api/datasets/{dataset}/videos", files={"file": (clip.name, clip.read_bytes())}).json()
        with chromium_page(600) as (page, errors):
            page.goto(f"{app_url}/api/videos/{video['id']}/file")
            page.wait_for_timeout(1500)  # time for a script, had one run, to post
            assert page.title() != "pwned"
            errors.clear()  # Chromium's own image view styles itself inline, which the file's policy refuses
            page.goto(f"{app_url}/#/datasets/{dataset}")  # the app's own page still runs under its policy
            page.wait_for_selector("text=clip.html")
            assert errors == [], errors
        assert [d["name"] for d in client.get("/api/datasets").json()] == ["clips"]


def test_quick_next_and_previous_go_where_pressed_in_chromium(app_url: str) -> None:
    """N pressed twice before the next image knows its neighbours goes two images on, N then P comes back, and at
    the last image N stays: each key is a step from where the one before led. The neighbours' answers are held
    back by the test until the keys are pressed, as on a slow connection."""
    with httpx.Client(base_url=app_url, timeout=60) as client:
        dataset = client.post("/api/datasets", json={"name": "steps"}).json()["id"]
        files = [("files", (f"{index}.png", png(seed=index))) for index in range(4)]
        added = client.post(f"/api/datasets/{dataset}/images", files=files).json()["added"]
    ids = [image["id"] for image in added]

    def on(page, image: int) -> None:  # type: ignore[no-untyped-def]
        page.wait_for_function(
            f"() => location.hash === '#/datasets/{dataset}/images/{image}' && "
            f"document.querySelector('.editor img')?.src.includes('/images/{image}/')",
            timeout=15000,
        )

    def pressed_while_held(page, keys: list[str]) -> None:  # type: ignore[no-untyped-def]
        held: list = []

        def hold(route) -> None:  # type: ignore[no-untyped-def]
            if held:  # only the first step's answer is held
                route.continue_()
            else:
                held.append(route)

        page.route("**/neighbours", hold)
        for key in keys:
            page.keyboard.press(key)
        for _ in range(100):  # the first step's image asks for its neighbours: held
            if held:
                break
            page.wait_for_timeout(50)
        assert len(held) == 1
        held[0].continue_()
        page.unroute("**/neighbours", hold)

    with chromium_page(800) as (page, errors):
        page.goto(f"{app_url}/#/datasets/{dataset}/images/{ids[0]}")
        on(page, ids[0])
        _saved(page)
        pressed_while_held(page, ["n", "n"])
        on(page, ids[2])
        pressed_while_held(page, ["n", "p"])
        on(page, ids[2])
        _saved(page)
        pressed_while_held(page, ["n", "n", "n"])  # one image left: the rest go nowhere
        on(page, ids[3])
        page.wait_for_timeout(500)
        assert page.url.endswith(f"/images/{ids[3]}")
    assert not errors


def test_the_data_set_page_says_what_it_did_not_do_in_chromium(app_url: str, tmp_path: Path) -> None:
    """A file that is no image, a label that exists already and a blank name: each is said in the page, in words
    a person reads (not the API's field path)."""
    notes = tmp_path / "readme.txt"
    notes.write_text("not a picture")
    photo = sorted((shared_data_root() / "images").glob("*.jpg"))[0]
    with chromium_page(800) as (page, errors):
        page.goto(app_url)
        page.fill("input[aria-label='New data set name']", "Checks")
        page.click("button:has-text('Create')")
        page.wait_for_selector("text=Upload images")
        page.set_input_files("input[type=file][accept='image/*']", [str(photo), str(notes)])
        page.wait_for_selector("text=Added 1 image(s). Not images, not sent: readme.txt.")
        for said in ("Added dog.", "Label “dog” exists already."):
            page.fill("input[aria-label='New label']", "dog ")
            page.click("form.inline button:has-text('Add')")
            page.wait_for_selector(f"text={said}")
        assert [label["name"] for label in httpx.get(f"{app_url}/api/datasets/1/labels").json()] == ["dog"]
        page.select_option("select[aria-label='Status filter']", "labelled")  # none is: the filter's, not the set's
        page.wait_for_selector("text=No images match these filters: clear one to see more.")
        assert page.locator("text=No images here yet").count() == 0
        page.select_option("select[aria-label='Status filter']", "")
        page.wait_for_selector(".grid .tile")
        page.fill("input[aria-label='New label']", "   ")
        page.click("form.inline button:has-text('Add')")
        page.wait_for_selector("text=The name is empty: type one.")
        held: list = []  # type: ignore[type-arg]  # the list of data sets, kept back the first time
        for listed in ("held back", "loaded"):  # before the page has the list, the server's refusal says the same
            if listed == "held back":
                page.route("**/api/datasets", lambda r: held.append(r) if r.request.method == "GET" else r.continue_())
            page.goto(app_url)
            page.fill("input[aria-label='New data set name']", "Checks")
            page.click("button:has-text('Create')")
            page.wait_for_selector("text=A data set named “Checks” exists already: give this one another name.")
            while held:
                held.pop().continue_()
            page.unroute("**/api/datasets")
        assert len(httpx.get(f"{app_url}/api/datasets").json()) == 1
        httpx.post(f"{app_url}/api/datasets", json={"name": "Other"})
        page.reload()
        page.wait_for_selector("text=Other")
        page.once("dialog", lambda dialog: dialog.accept("Checks"))  # renamed as the first: refused too
        page.locator(".card", has_text="Other").locator("button:has-text('Rename')").click()
        page.wait_for_selector("text=A data set named “Checks” exists already: give this one another name.")
        assert sorted(d["name"] for d in httpx.get(f"{app_url}/api/datasets").json()) == ["Checks", "Other"]
        asked: list[str] = []

        def cancel(dialog) -> None:  # type: ignore[no-untyped-def]
            asked.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", cancel)  # Delete double-clicked, then Cancel: asked once (it asked twice, two DELETEs)
        page.locator(".card", has_text="Other").locator("button:has-text('Delete')").dblclick()
        page.wait_for_timeout(1000)
        page.remove_listener("dialog", cancel)
        assert asked == ["Delete “Other”, its 0 images? This cannot be undone."]
        assert sorted(d["name"] for d in httpx.get(f"{app_url}/api/datasets").json()) == ["Checks", "Other"]
        page.locator(".card", has_text="Other").locator("button:has-text('Duplicate')").dblclick()  # one copy
        page.wait_for_selector("text=Other (copy)")
        page.wait_for_timeout(500)
        copies = [d for d in httpx.get(f"{app_url}/api/datasets").json() if d["name"].startswith("Other (copy")]
        assert [d["name"] for d in copies] == ["Other (copy)"]
        assert httpx.delete(f"{app_url}/api/datasets/{copies[0]['id']}").status_code == 204
        page.reload()
        card = page.locator(".card", has_text="Checks")
        card.locator("select[aria-label='Export format']").select_option("voc")  # VOC holds labelled images only
        page.wait_for_selector("text=data set 'Checks': no images to export in voc format")
        assert page.url == f"{app_url}/"  # the page stays
        with page.expect_download() as download:
            card.locator("button:has-text('Export COCO')").click()
        assert download.value.suggested_filename.endswith("-coco.zip")
        with page.expect_download() as download:  # the app's own format, imported again in another set
            card.locator("select[aria-label='Export format']").select_option("forklift")
        download.value.save_as(tmp_path / "checks.zip")
        other = page.locator(".card", has_text="Other")
        other.locator("select[name=format]").select_option("forklift")
        other.locator("input[type=file][accept='.zip']").set_input_files(str(tmp_path / "checks.zip"))
        page.wait_for_selector("text=Imported 1 images.")
        (imported,) = [d for d in httpx.get(f"{app_url}/api/datasets").json() if d["name"] == "Other"]
        assert (imported["images"], imported["labelled"]) == (1, 0)  # nobody labelled it: unlabelled still
        parts = [[1, 1, 9, 1, 5, 8], [20, 20, 30, 20, 25, 28]]  # one cow in two parts, and a crowd of them
        annotations = [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 29, 27], "segmentation": parts},
                       {"id": 2, "image_id": 1, "category_id": 1, "bbox": [40, 5, 9, 9], "iscrowd": 1}]  # fmt: skip
        coco = {"images": [{"id": 1, "file_name": "c.png", "width": 64, "height": 48}],
                "categories": [{"id": 1, "name": "cow"}], "annotations": annotations}  # fmt: skip
        (tmp_path / "cows.zip").write_bytes(zip_of({"instances.json": json.dumps(coco).encode(), "c.png": png(64, 48)}))
        other.locator("select[name=format]").select_option("coco")  # what the import changed: said, not only a count
        other.locator("input[type=file][accept='.zip']").set_input_files(str(tmp_path / "cows.zip"))
        page.wait_for_selector("text=Imported 1 images; 1 crowd regions (iscrowd: 1) skipped: their objects are not "
                               "labelled; 1 outlines kept as their boxes only (an RLE mask, or an object in several "
                               "parts).")  # fmt: skip
        for missing, said in (("jobs/77", "no job 77"), ("datasets/99", "no data set 99")):  # an old link
            page.goto(f"{app_url}/#/{missing}")
            page.wait_for_selector(f"text={said}")
            assert (
                page.locator("text=Loading…").count() == 0 and page.locator("text=waiting for the first").count() == 0
            )
    assert not errors, errors


def _one_image_labelled_car(app_url: str, name: str) -> tuple[int, int]:
    """A data set `name` of one 400 × 300 image and the label "car": (data set, image)."""
    with httpx.Client(base_url=app_url, timeout=60) as client:
        dataset = client.post("/api/datasets", json={"name": name}).json()["id"]
        image = client.post(f"/api/datasets/{dataset}/images", files=[("files", ("a.png", png(400, 300)))]).json()
        client.post(f"/api/datasets/{dataset}/labels", json={"name": "car"})
    return dataset, image["added"][0]["id"]


def test_a_box_dragged_past_the_images_edge_ends_at_the_edge_in_chromium(app_url: str) -> None:
    """An object at the image's edge: the drag is let go beyond it (on the border, or the panel beside it), and
    the box ends at the edge, where it was let go off the image; the next drag draws a box of its own, even when the
    first box's save comes back while it is drawn (its recount of the labels renewed the page's pointer handlers,
    which forgot the drag: let go past the edge, the box was lost)."""
    dataset, image_id = _one_image_labelled_car(app_url, "edges")
    shapes_url = f"{app_url}/api/images/{image_id}/annotations"
    with chromium_page(800) as (page, errors):
        page.goto(f"{app_url}/#/datasets/{dataset}/images/{image_id}")
        page.wait_for_selector(".editor img")
        _saved(page)
        page.keyboard.press("1")
        left, top, scale = _scale(page)
        recounts: list = []  # the data set read again after a save (its labels' counts), held
        page.route("**/api/datasets/*", lambda r: recounts.append(r) if r.request.method == "GET" else r.continue_())
        _drag(page, left + 240 * scale, top + 120 * scale, 400 * scale, 300 * scale)  # let go past bottom right
        for _ in range(150):
            if recounts:
                break
            page.wait_for_timeout(100)
        page.mouse.move(left + 100 * scale, top + 100 * scale)  # the next box begun before the recount is back
        page.mouse.down()
        page.mouse.move(left + 60 * scale, top + 60 * scale, steps=4)
        recounts[0].continue_()
        page.unroute("**/api/datasets/*")
        page.wait_for_timeout(500)
        page.mouse.move(left - 100 * scale, top - 100 * scale, steps=6)  # and let go past top left after it
        page.mouse.up()
        boxes = [shape["points"] for shape in _shapes_on_the_server(shapes_url, 2)]
        assert boxes == [pytest.approx([240, 120, 400, 300], abs=0.5), pytest.approx([0, 0, 100, 100], abs=0.5)]
        before = page.locator(".zoomed img").bounding_box()
        _click(page, 50, 50)  # select the second box and choose its label again: a message shows
        page.keyboard.press("1")
        page.wait_for_selector("text=Relabelled 1 shape(s)")
        assert page.locator(".zoomed img").bounding_box() == before  # the image did not move under the pointer
    assert not errors, errors


def test_leaving_the_page_before_a_box_is_saved_asks_first_in_chromium(app_url: str, tmp_path: Path) -> None:
    """A box drawn and the page reloaded (or closed, or left for another site) while its save is still on its way:
    the browser asks whether to leave. Staying, the save lands; once everything is saved, it goes without asking.
    The same for an upload of images."""
    dataset, image_id = _one_image_labelled_car(app_url, "closing")
    shapes_url = f"{app_url}/api/images/{image_id}/annotations"
    with chromium_page(800) as (page, errors):
        held: list = []  # type: ignore[type-arg]  # the save, kept back until the question was asked
        page.route("**/annotations", lambda r: held.append(r) if r.request.method == "PUT" else r.continue_())
        asked: list[str] = []
        page.on("dialog", lambda dialog: (asked.append(dialog.type), dialog.dismiss()))
        page.goto(f"{app_url}/#/datasets/{dataset}/images/{image_id}")
        page.wait_for_selector(".editor img")
        page.wait_for_selector("[data-testid=save-state].is-saved")
        page.keyboard.press("1")
        _draw(page, (40, 40, 200, 150))
        page.wait_for_timeout(600)  # the save is sent 250 ms after the box
        assert len(held) == 1 and httpx.get(shapes_url).json()["shapes"] == []
        with pytest.raises(PlaywrightError, match="Timeout"):  # asked, and the person stayed: no reload
            page.reload(timeout=2000)
        assert asked == ["beforeunload"]
        held[0].continue_()
        _saved(page)
        assert [shape["points"] for shape in httpx.get(shapes_url).json()["shapes"]] == [
            pytest.approx([40, 40, 200, 150], abs=0.5)
        ]
        page.reload()  # nothing left to save: not asked again
        page.wait_for_selector(".editor img")
        assert asked == ["beforeunload"]
        # an upload on its way: the same question, and staying, the upload lands
        picture = tmp_path / "b.png"
        picture.write_bytes(png(200, 100))
        page.route("**/images", lambda r: held.append(r) if r.request.method == "POST" else r.continue_())
        page.goto(f"{app_url}/#/datasets/{dataset}")
        page.set_input_files("input[type=file][accept='image/*']", [str(picture)])
        page.wait_for_selector("text=Uploading 1 image(s)")
        page.wait_for_timeout(300)
        assert len(held) == 2
        with pytest.raises(PlaywrightError, match="Timeout"):
            page.reload(timeout=2000)
        assert asked == ["beforeunload"] * 2
        held[1].continue_()
        page.wait_for_selector("text=Added 1 image(s).")
        page.reload()
        assert (
            asked == ["beforeunload"] * 2
            and len(httpx.get(f"{app_url}/api/datasets/{dataset}/images").json()["items"]) == 2
        )
    assert not errors, errors


def test_a_classification_set_without_classes_takes_its_first_class_in_the_editor_in_chromium(app_url: str) -> None:
    """A new classification data set has no classes: its page says how to make one, and the image page takes a
    typed class name (the image's class, and a class of the data set), then numbers keys as for the others; Del (or
    the grid's "no class") takes a class given by mistake away."""
    with httpx.Client(base_url=app_url, timeout=60) as client:
        dataset = client.post("/api/datasets", json={"name": "pets", "task": "classify"}).json()["id"]
        files = [("files", (f"{index}.png", png(seed=index))) for index in range(2)]
        first, second = (
            image["id"] for image in client.post(f"/api/datasets/{dataset}/images", files=files).json()["added"]
        )
    with chromium_page(800) as (page, errors):
        page.goto(f"{app_url}/#/datasets/{dataset}")
        page.wait_for_selector("text=No classes yet: open an image and name its class")
        page.goto(f"{app_url}/#/datasets/{dataset}/images/{first}")
        page.wait_for_selector(".editor img")
        page.fill("input[aria-label='New class']", "cat")
        page.press("input[aria-label='New class']", "Enter")
        _saved(page)
        assert httpx.get(f"{app_url}/api/images/{first}/annotations").json()["class_label"] == "cat"
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"() => location.hash.endsWith('/images/{second}')")
        page.wait_for_selector(".editor img")
        _saved(page)
        page.keyboard.press("2")  # no such class: said, where nothing happened
        page.wait_for_selector("text=No class 2: this data set has 1 (keys 1–1); type a new class's name in the field")
        page.keyboard.press("1")  # the class made on the first image
        _saved(page)
        assert httpx.get(f"{app_url}/api/images/{second}/annotations").json()["class_label"] == "cat"
        page.keyboard.press("Delete")  # given by mistake: taken away, the image unlabelled again
        _saved(page)
        shown = httpx.get(f"{app_url}/api/images/{second}/annotations").json()
        assert (shown["class_label"], shown["status"]) == (None, "unlabelled")
        for key, back in (("Control+z", "cat"), ("Control+y", None), ("Control+z", "cat")):  # Del undone, as a shape
            page.keyboard.press(key)
            _saved(page)
            assert httpx.get(f"{app_url}/api/images/{second}/annotations").json()["class_label"] == back, key
        page.keyboard.press("Delete")
        _saved(page)
        page.goto(f"{app_url}/#/datasets/{dataset}")  # and from the grid, for the images chosen
        page.click(".tile .pick >> nth=0")
        asked: list[str] = []
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))  # changed her mind
        page.select_option("select[aria-label='Assign class']", label="no class (unlabelled)")
        page.wait_for_timeout(500)
        assert asked == ["Take the class off the 1 image(s) chosen? They become unlabelled."]
        assert httpx.get(f"{app_url}/api/images/{first}/annotations").json()["class_label"] == "cat"
        page.once("dialog", lambda dialog: dialog.accept())
        page.select_option("select[aria-label='Assign class']", label="no class (unlabelled)")
        page.wait_for_selector("text=Unlabelled: 1 image(s).")
        assert httpx.get(f"{app_url}/api/images/{first}/annotations").json()["class_label"] is None
    assert not errors, errors


def test_keys_in_a_field_stay_there_and_an_unfinished_polygon_is_not_left_behind_in_chromium(app_url: str) -> None:
    """Ctrl+Z typed in the label field undoes the typing, not the last box; a label the server would refuse is
    said at once; a polygon of a few points keeps the image from being left (→, ‹ ›, a link) until it is closed or
    dropped with Esc; and in the grid a selection goes with the filter it was made under."""
    with httpx.Client(base_url=app_url, timeout=60) as client:
        dataset = client.post("/api/datasets", json={"name": "keys"}).json()["id"]
        files = [("files", (f"{index}.png", png(400, 300, seed=index))) for index in range(2)]
        first, second = (
            image["id"] for image in client.post(f"/api/datasets/{dataset}/images", files=files).json()["added"]
        )
        client.post(f"/api/datasets/{dataset}/labels", json={"name": "car"})
    shapes_url = f"{app_url}/api/images/{first}/annotations"
    field = "input[aria-label='Current label']"
    with chromium_page(800) as (page, errors):
        page.goto(f"{app_url}/#/datasets/{dataset}/images/{first}")
        page.wait_for_selector(".editor img")
        _saved(page)
        page.keyboard.press("1")
        _draw(page, (40, 40, 200, 150))
        _saved(page)
        page.click(field)
        page.keyboard.type("horsee")
        page.keyboard.press("Control+z")  # the field's own undo
        page.wait_for_timeout(600)  # a save, had the box been undone, is sent 250 ms after
        assert len(httpx.get(shapes_url).json()["shapes"]) == 1
        assert page.locator("svg g.a9s-annotation:not(.a9s-rubberband)").count() == 1
        for typed, said in (("   ", "The name is empty: type one."),
                            ("x" * 201, "The name is too long: at most 200 characters.")):  # fmt: skip
            page.fill(field, typed)
            page.press(field, "Enter")
            page.wait_for_selector(f"text={said}")
        page.locator(field).blur()

        page.keyboard.press("g")
        for x, y in ((250, 50), (350, 60), (330, 200)):
            _click(page, x, y)
        for leave in (lambda: page.keyboard.press("ArrowRight"), lambda: page.click("button[title^='Next image']"),
                      lambda: page.click(f".page-head a[href='#/datasets/{dataset}']")):  # fmt: skip
            leave()
            page.wait_for_selector("text=Finish the shape first")
            page.wait_for_timeout(300)
            assert page.url.endswith(f"/images/{first}")
        page.keyboard.press("Escape")  # dropped: now the image may be left
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"() => location.hash.endsWith('/images/{second}')")

        page.goto(f"{app_url}/#/datasets/{dataset}")
        page.click(".tile .pick >> nth=1")  # the unlabelled image
        page.wait_for_selector("text=1 selected")
        page.select_option("select[aria-label='Status filter']", "labelled")
        page.wait_for_selector("[data-testid=shown]:has-text('1–1 of 1')")
        assert page.locator("text=1 selected").count() == 0  # nothing left to act on out of view
    assert not errors, errors


def _shapes_on_the_server(url: str, count: int, seconds: float = 20) -> list[dict]:
    """The image's shapes once the server has `count` of them (or as they are after `seconds`)."""
    deadline = time.monotonic() + seconds
    while len(shapes := httpx.get(url).json()["shapes"]) != count and time.monotonic() < deadline:
        time.sleep(0.2)
    return shapes


def _shapes_once_saved(page, url: str) -> list[dict]:  # type: ignore[no-untyped-def]
    """The image's shapes as drawn, in one order, once the page has sent its save (sent 250 ms after a change)."""
    page.wait_for_timeout(600)
    _saved(page)
    return sorted(as_drawn(httpx.get(url).json()["shapes"]), key=lambda shape: (shape["kind"], str(shape["points"])))


def test_a_polygon_begun_is_drawn_as_clicked_and_ctrl_z_leaves_the_one_before_alone_in_chromium(
    app_url: str,
) -> None:
    """Ctrl+Z pressed while a polygon was being drawn deleted the polygon finished before it (saved so); Enter on a
    polygon of two points did nothing, unsaid, and repeated its last point each time (saved with it later)."""
    dataset, image_id = _one_image_labelled_car(app_url, "outlines")
    shapes_url = f"{app_url}/api/images/{image_id}/annotations"
    with chromium_page(800) as (page, errors):
        page.goto(f"{app_url}/#/datasets/{dataset}/images/{image_id}")
        page.wait_for_selector(".editor img")
        _saved(page)
        page.keyboard.press("1")
        page.keyboard.press("g")
        for x, y in ((250, 50), (350, 60), (330, 200)):
            _click(page, x, y)
        page.keyboard.press("Enter")
        (first,) = _shapes_once_saved(page, shapes_url)
        for x, y in ((40, 40), (120, 50)):
            _click(page, x, y)
        page.keyboard.press("Control+z")
        page.wait_for_selector("text=Undo and redo are for finished shapes: finish this one first")
        assert _shapes_once_saved(page, shapes_url) == [first]
        left, top, scale = _scale(page)
        page.mouse.move(left + 300 * scale, top + 250 * scale)  # the mouse elsewhere: no point of hers
        for _ in range(2):
            page.keyboard.press("Enter")
        page.wait_for_selector("text=A polygon needs 3 points or more around an area to close")
        _click(page, 80, 150)
        page.keyboard.press("Enter")
        drawn = _shapes_once_saved(page, shapes_url)
        second = next(shape for shape in drawn if shape != first)
        assert [v for point in second["points"] for v in point] == pytest.approx([40, 40, 120, 50, 80, 150], abs=1.5)
    assert not errors, errors


def test_ctrl_wheel_zooms_about_the_pointer_in_chromium(app_url: str) -> None:
    """The pixel under the pointer stays under it, wherever the image can scroll: Ctrl+wheel zoomed about the
    image's corner, and what she pointed at went off the canvas."""
    with httpx.Client(base_url=app_url, timeout=60) as client:
        dataset = client.post("/api/datasets", json={"name": "zoom"}).json()["id"]
        files = [("files", ("big.png", png(1600, 1200, seed=8)))]
        (image,) = client.post(f"/api/datasets/{dataset}/images", files=files).json()["added"]
    with chromium_page(800) as (page, errors):
        page.goto(f"{app_url}/#/datasets/{dataset}/images/{image['id']}")
        page.wait_for_selector(".editor img")
        _saved(page)
        for _ in range(2):
            page.keyboard.press("+")  # zoomed in past the canvas: it scrolls both ways
        left, top, scale = _scale(page)
        x, y = left + 700 * scale, top + 500 * scale  # the pointer over pixel (700, 500)
        page.mouse.move(x, y)
        page.keyboard.down("Control")
        for _ in range(3):
            page.mouse.wheel(0, -100)
            page.wait_for_timeout(150)
        page.keyboard.up("Control")
        page.wait_for_timeout(300)
        left, top, zoomed = _scale(page)
        assert zoomed == pytest.approx(scale * 1.1**3, rel=1e-4)  # read from the image's width in whole pixels
        assert ((x - left) / zoomed, (y - top) / zoomed) == pytest.approx((700, 500), abs=2)
    assert not errors, errors


def test_a_fitted_image_is_whole_in_the_window_and_stays_put_as_it_loads_in_chromium(app_url: str) -> None:
    """Fit ran the image below the window's bottom edge (a fixed allowance for what stands above the canvas), and
    the badge's "loading" took the page's loading padding, so that the image jumped up 70 px once loaded."""
    with httpx.Client(base_url=app_url, timeout=60) as client:
        dataset = client.post("/api/datasets", json={"name": "fit"}).json()["id"]
        files = [("files", ("wide.png", png(1600, 1200, seed=9)))]
        (image,) = client.post(f"/api/datasets/{dataset}/images", files=files).json()["added"]
    for height in (720, 900):
        with chromium_page(height) as (page, errors):
            page.goto(f"{app_url}/#/datasets/{dataset}/images/{image['id']}")
            page.wait_for_function("() => document.querySelector('.editor img')?.complete")
            first = page.locator("[data-testid=canvas]").bounding_box()
            _saved(page)
            box = page.locator(".editor img").bounding_box()
            assert first is not None and box is not None
            assert page.locator("[data-testid=canvas]").bounding_box() == first  # nothing moved as it loaded
            assert box["y"] + box["height"] <= height and box["x"] + box["width"] <= 1280  # the whole image
            assert page.evaluate("document.documentElement.scrollHeight") <= height  # and no page to scroll
            assert box["height"] >= height - 320  # not fitted into a smaller room than the window leaves
            assert not errors, errors


def test_undo_and_redo_bring_the_shapes_back_and_leave_the_label_field_alone_in_chromium(app_url: str) -> None:
    """Ctrl+Z and Ctrl+Y outside a field are the editor's: the browser's own undo and redo of the label typed
    earlier stayed on too, so a redo put the name in the field again ("carcar") and took the focus there, where the
    next redo went, and a shape undone stayed gone, saved so. Back, or a reload, with a polygon begun asks first."""
    with httpx.Client(base_url=app_url, timeout=60) as client:
        dataset = client.post("/api/datasets", json={"name": "undo"}).json()["id"]
        files = [("files", ("a.png", png(400, 300, seed=3)))]
        (image,) = client.post(f"/api/datasets/{dataset}/images", files=files).json()["added"]
        client.post(f"/api/datasets/{dataset}/labels", json={"name": "car"})  # typed below: chosen, not made
    shapes_url = f"{app_url}/api/images/{image['id']}/annotations"
    field = "input[aria-label='Current label']"
    with chromium_page(800) as (page, errors):
        page.goto(f"{app_url}/#/datasets/{dataset}")
        page.click(".tile a")  # the image, opened from the grid (where Back leads)
        page.wait_for_selector(".editor img")
        _saved(page)
        page.click(field)
        page.keyboard.type("car")
        page.keyboard.press("Enter")
        _draw(page, (40, 40, 200, 150))
        _saved(page)
        page.keyboard.press("g")
        for x, y in ((250, 50), (350, 60), (330, 200)):
            _click(page, x, y)
        page.keyboard.press("Enter")
        drawn = _shapes_once_saved(page, shapes_url)
        assert [shape["kind"] for shape in drawn] == ["box", "polygon"]
        page.keyboard.press("Control+z")
        page.keyboard.press("Control+z")
        assert _shapes_once_saved(page, shapes_url) == []
        page.keyboard.press("Control+y")
        page.keyboard.press("Control+y")
        assert _shapes_once_saved(page, shapes_url) == drawn
        assert page.input_value(field) == "" and page.evaluate("document.activeElement.tagName") != "INPUT"
        _click(page, 120, 95)  # the box, relabelled and the relabel undone: the word on it goes (it stayed)
        _choose(page, "truck")
        page.wait_for_selector("text=Relabelled 1 shape(s) as truck.")
        _saved(page)
        page.evaluate("document.activeElement.blur()")  # out of the label field, whose Ctrl+Z is its typing's
        page.keyboard.press("Control+z")
        page.wait_for_selector("text=Undone (Ctrl+Y redoes it).")
        assert _shapes_once_saved(page, shapes_url) == drawn

        page.keyboard.press("g")  # a polygon begun: Back does not drop it unasked
        for x, y in ((60, 200), (120, 210), (90, 280)):
            _click(page, x, y)
        page.go_back()
        page.wait_for_selector("text=Finish the shape first")
        page.wait_for_timeout(300)
        assert page.url.endswith(f"/images/{image['id']}")
        asked: list[str] = []
        page.once("dialog", lambda dialog: (asked.append(dialog.type), dialog.dismiss()))
        with pytest.raises(PlaywrightError, match="Timeout"):
            page.reload(timeout=2000)  # the reload asks first; dismissed, the page stays
        assert asked == ["beforeunload"] and page.url.endswith(f"/images/{image['id']}")
        page.keyboard.press("Escape")
        page.go_back()  # nothing begun now: Back goes back
        page.wait_for_function(f"() => location.hash === '#/datasets/{dataset}'")
        page.go_forward()
        page.wait_for_selector(".editor img")
        _saved(page)
        page.click(f".page-head a[href='#/datasets/{dataset}']")  # the grid, ahead of the image in the history
        page.wait_for_function(f"() => location.hash === '#/datasets/{dataset}'")
        page.go_back()
        page.wait_for_selector(".editor img")
        _saved(page)
        page.keyboard.press("g")
        for x, y in ((60, 200), (120, 210), (90, 280)):
            _click(page, x, y)
        page.go_forward()  # held too, and the history left as it was: the grid still ahead, nothing added
        page.wait_for_selector("text=Finish the shape first")
        page.wait_for_timeout(300)
        assert page.url.endswith(f"/images/{image['id']}")
        page.keyboard.press("Escape")
        page.go_forward()
        page.wait_for_function(f"() => location.hash === '#/datasets/{dataset}'")
        assert len(httpx.get(shapes_url).json()["shapes"]) == 2
    assert not errors, errors


def _two_images_labelled_car_and_bus(app_url: str) -> tuple[int, list[int]]:
    """A data set of two 400 × 300 images, labels car and bus, a box on the first: (data set, images)."""
    with httpx.Client(base_url=app_url, timeout=60) as client:
        dataset = client.post("/api/datasets", json={"name": "street"}).json()["id"]
        files = [("files", (f"{name}.png", png(400, 300, seed))) for seed, name in enumerate("ab")]
        images = [image["id"] for image in client.post(f"/api/datasets/{dataset}/images", files=files).json()["added"]]
        for name in ("car", "bus"):
            client.post(f"/api/datasets/{dataset}/labels", json={"name": name})
        shapes = [{"kind": "box", "label": "car", "points": [10, 10, 50, 50]}]
        assert client.put(f"/api/images/{images[0]}/annotations", json={"version": 1, "shapes": shapes}).is_success
    return dataset, images


def test_numbers_typed_key_by_key_are_sent_as_typed_in_chromium(app_url: str) -> None:
    """The Train form's fields typed as a person types them, key by key: "0.0005" was sent as 5 (the field's "0."
    reads as no number until its next digit, and was written back as 0), "0.3" as 30."""
    dataset, _ = _two_images_labelled_car_and_bus(app_url)
    with chromium_page(800) as (page, errors):
        sent: list[dict] = []
        page.route("**/jobs", lambda r: (sent.append(r.request.post_data_json),
                                         r.fulfill(status=422, json={"error": "held by the test"})))  # fmt: skip
        page.goto(f"{app_url}/#/datasets/{dataset}")
        page.get_by_role("button", name="Train…").click()
        for name, typed in (("lr", "0.0005"), ("weight decay", "0.001"), ("validation share", "0.3"), ("epochs", "2")):
            field = page.get_by_label(name, exact=True)
            field.click()
            page.keyboard.press("Control+A")
            page.keyboard.press("Backspace")
            page.keyboard.type(typed, delay=30)
            assert field.input_value() == typed
        page.get_by_role("button", name="Start").click()
        page.wait_for_selector("text=held by the test")
        (body,) = sent
        assert (body["lr"], body["weight_decay"], body["val_share"], body["epochs"]) == (0.0005, 0.001, 0.3, 2)
    assert not errors, errors


def test_the_label_chosen_goes_on_to_the_next_image_and_follows_a_rename_in_chromium(app_url: str) -> None:
    """Bus chosen on one image, → to the next: its box is a bus (the next image's editor went back to the set's
    first label, car, and saved the box so, unsaid). Renamed in another tab, the label chosen follows the rename
    when the page comes back into view (drawn with the old name, it came back beside the renamed one)."""
    dataset, (first, second) = _two_images_labelled_car_and_bus(app_url)
    with chromium_page(800) as (page, errors):
        page.goto(f"{app_url}/#/datasets/{dataset}/images/{first}")
        page.wait_for_selector(".editor img")
        page.keyboard.press("2")  # bus
        page.keyboard.press("g")  # and the polygon tool
        page.keyboard.press("ArrowRight")
        page.wait_for_url(f"**/images/{second}")
        page.wait_for_selector(".editor img")
        assert page.locator("input[aria-label='Current label']").get_attribute("placeholder") == "bus"
        assert page.get_by_role("button", name="⬠ Polygon").get_attribute("class") == "on"
        page.keyboard.press("r")
        _draw(page, (100, 100, 200, 180))
        second_url = f"{app_url}/api/images/{second}/annotations"
        assert [shape["label"] for shape in _shapes_on_the_server(second_url, 1)] == ["bus"]
        _saved(page)
        labels = {label["name"]: label["id"] for label in httpx.get(f"{app_url}/api/datasets/{dataset}/labels").json()}
        assert httpx.patch(f"{app_url}/api/labels/{labels['bus']}", json={"name": "coach"}).is_success  # another tab
        page.evaluate("dispatchEvent(new Event('focus'))")  # the page in view again
        page.wait_for_selector("text=The label bus was renamed coach elsewhere")
        _draw(page, (250, 100, 350, 180))
        page.wait_for_timeout(600)
        _saved(page)
        assert sorted(shape["label"] for shape in httpx.get(second_url).json()["shapes"]) == ["coach", "coach"]
        names = [label["name"] for label in httpx.get(f"{app_url}/api/datasets/{dataset}/labels").json()]
        assert names == ["car", "coach"]  # no bus made again
        labels = {label["name"]: label["id"] for label in httpx.get(f"{app_url}/api/datasets/{dataset}/labels").json()}
        merged = httpx.patch(f"{app_url}/api/labels/{labels['coach']}", json={"merge_into": labels["car"]})
        assert merged.is_success  # in another tab: the label chosen follows the merge (it was taken for deleted)
        page.evaluate("dispatchEvent(new Event('focus'))")
        page.wait_for_selector("text=The label coach was merged into car elsewhere: the next shape is a car.")
        _draw(page, (100, 200, 200, 280))
        page.wait_for_timeout(600)
        _saved(page)
        assert sorted(shape["label"] for shape in httpx.get(second_url).json()["shapes"]) == ["car", "car", "car"]
    assert not errors, errors


def test_a_save_that_cannot_reach_the_server_is_said_once_and_taken_back_in_chromium(app_url: str) -> None:
    """The network down as a box is saved: the page says so in words (the browser's "Failed to fetch" said
    nothing), and that the change goes with the next one; it does, and the red message goes with it. Leaving an
    image whose change was not saved asks once (it asked twice, and a second answer overrode the first)."""
    dataset, (first, second) = _two_images_labelled_car_and_bus(app_url)
    with chromium_page(800) as (page, errors):
        asked: list[str] = []
        page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
        page.goto(f"{app_url}/#/datasets/{dataset}/images/{first}")
        page.wait_for_selector(".editor img")
        _saved(page)
        page.route("**/annotations", lambda r: r.abort() if r.request.method == "PUT" else r.continue_())
        _draw(page, (100, 100, 200, 180))
        message = page.wait_for_selector(".message.error:has-text('could not be reached')")
        said = "The server could not be reached (it is stopped, or the network is down). Your last change is not "
        assert message.inner_text() == said + "saved yet: it is sent with your next one."
        page.unroute("**/annotations")
        _draw(page, (250, 100, 350, 180))
        page.wait_for_timeout(600)
        _saved(page)
        assert page.locator(".message.error").count() == 0
        assert len(httpx.get(f"{app_url}/api/images/{first}/annotations").json()["shapes"]) == 3  # both went
        page.route("**/annotations", lambda r: r.abort() if r.request.method == "PUT" else r.continue_())
        _draw(page, (300, 200, 380, 280))
        page.wait_for_selector(".message.error:has-text('could not be reached')")
        page.keyboard.press("ArrowRight")  # leave it: asked, answered "leave", and gone, asked once
        page.wait_for_url(f"**/images/{second}")
        page.wait_for_selector(".editor img")
        page.wait_for_timeout(300)
        assert len(asked) == 1 and asked[0].startswith("This image's last change was not saved")
    assert not errors, errors


def test_emptying_the_last_page_shows_the_last_page_there_is_in_chromium(app_url: str) -> None:
    """The three images of page 2 deleted: the grid shows page 1 of 1, not an empty grid that says the set has no
    images yet beside "Page 2 of 1" (the set still held 100)."""
    with httpx.Client(base_url=app_url, timeout=60) as client:
        dataset = client.post("/api/datasets", json={"name": "pages"}).json()["id"]
        files = [("files", (f"{k:03d}.png", png(8, 8, k))) for k in range(103)]
        assert len(client.post(f"/api/datasets/{dataset}/images", files=files).json()["added"]) == 103
    with chromium_page(800) as (page, errors):
        page.on("dialog", lambda dialog: dialog.accept())
        page.goto(f"{app_url}/#/datasets/{dataset}")
        page.wait_for_selector("[data-testid=shown]:has-text('1–100 of 103')")
        page.get_by_role("button", name="Next ›").click()
        page.wait_for_selector("[data-testid=shown]:has-text('101–103 of 103')")
        page.get_by_role("button", name="Select page").click()
        page.get_by_role("button", name="Delete").click()
        page.wait_for_selector("text=Deleted: 3 image(s).")
        page.wait_for_selector("[data-testid=shown]:has-text('1–100 of 100')")
        assert page.locator("text=Page 1 of 1").count() == 1 and page.locator("text=No images here yet").count() == 0
    assert not errors, errors


def test_a_box_drawn_as_its_label_changes_elsewhere_is_kept_under_the_label_as_it_is_now_in_chromium(
    app_url: str,
) -> None:
    """A label renamed in another tab while the editor is open on an image with it: the next box drawn was refused
    (409), the image reloaded and the box gone, and the only message said the label was renamed. Deleted while open
    on an image without it: the box's save made the label again, unsaid. Now the box is added to the image as saved,
    under the label's new name, or the label chosen now, and the page says so in one message."""
    dataset, (first, second) = _two_images_labelled_car_and_bus(app_url)
    labels = {label["name"]: label["id"] for label in httpx.get(f"{app_url}/api/datasets/{dataset}/labels").json()}
    first_url, second_url = (f"{app_url}/api/images/{image}/annotations" for image in (first, second))
    with chromium_page(800) as (page, errors):
        page.goto(f"{app_url}/#/datasets/{dataset}/images/{first}")
        page.wait_for_selector(".editor img")
        _saved(page)
        assert httpx.patch(f"{app_url}/api/labels/{labels['car']}", json={"name": "auto"}).is_success  # another tab
        _draw(page, (100, 100, 200, 180))  # as a car, the label chosen
        message = page.wait_for_selector(".message:has-text('were added to its saved version')")
        assert message.inner_text().startswith("This image was changed elsewhere (by someone else, in another tab, "
                                               "or by a label renamed, merged or deleted): your 1 new shape(s) were "
                                               "added to its saved version.")  # fmt: skip
        assert "The label car is now auto: the next shape is a auto." in message.inner_text()
        assert sorted(shape["label"] for shape in _shapes_on_the_server(first_url, 2)) == ["auto", "auto"]
        _saved(page)
        page.goto(f"{app_url}/#/datasets/{dataset}/images/{second}")
        page.wait_for_selector(".editor img")
        page.keyboard.press("2")  # bus, which another tab deletes: the image holds no bus, its version stays
        assert httpx.delete(f"{app_url}/api/labels/{labels['bus']}").is_success
        _draw(page, (100, 100, 200, 180))
        message = page.wait_for_selector(".message:has-text('was deleted elsewhere')")
        said = "The label bus was deleted elsewhere: your new shape is a auto now (relabel it)."
        assert said in message.inner_text()
        assert [shape["label"] for shape in _shapes_on_the_server(second_url, 1)] == ["auto"]
        _saved(page)
        names = [label["name"] for label in httpx.get(f"{app_url}/api/datasets/{dataset}/labels").json()]
        assert names == ["auto"]  # neither car nor bus made again
        (lorry,) = [label for label in httpx.post(f"{app_url}/api/datasets/{dataset}/labels", json={"name": "lorry"})
                    .json() if label["name"] == "lorry"]  # fmt: skip
        page.reload()
        page.wait_for_selector(".editor img")
        page.keyboard.press("2")  # lorry, which another tab merges into auto: followed there, as a rename is
        assert httpx.patch(f"{app_url}/api/labels/{lorry['id']}", json={"merge_into": labels["car"]}).is_success
        _draw(page, (20, 20, 60, 60))
        message = page.wait_for_selector(".message:has-text('were added to its saved version')")
        assert "The label lorry is now auto: the next shape is a auto." in message.inner_text()
        assert [shape["label"] for shape in _shapes_on_the_server(second_url, 2)] == ["auto", "auto"]
        _saved(page)
        names = [label["name"] for label in httpx.get(f"{app_url}/api/datasets/{dataset}/labels").json()]
        assert names == ["auto"]  # lorry not made again, the shape not given another label
    assert not errors, errors


def test_a_change_that_could_not_go_offline_goes_when_the_network_is_back_in_chromium(app_url: str) -> None:
    """Offline as a box was saved: back online, it stayed unsaved, and leaving asked to throw it away."""
    dataset, (first, _) = _two_images_labelled_car_and_bus(app_url)
    url = f"{app_url}/api/images/{first}/annotations"
    with chromium_page(800) as (page, errors):
        page.goto(f"{app_url}/#/datasets/{dataset}/images/{first}")
        page.wait_for_selector(".editor img")
        _saved(page)
        page.context.set_offline(True)
        _draw(page, (100, 100, 200, 180))
        page.wait_for_selector(".message.error:has-text('could not be reached')")
        page.context.set_offline(False)
        assert len(_shapes_on_the_server(url, 2)) == 2
        _saved(page)
        assert page.locator(".message.error").count() == 0
    assert not errors, errors


def _auto_labelled_set(app_url: str) -> tuple[int, list[int]]:
    """A data set of three images imported from COCO with a model's unreviewed boxes (cat and dog) on each."""
    images = [{"id": k, "file_name": f"a{k}.png", "width": 400, "height": 300} for k in range(3)]
    auto = {"source": "auto", "model": "m", "confidence": 0.5}
    annotations = [{"id": 10 * k + j, "image_id": k, "category_id": j + 1, "bbox": [20 + 100 * j, 20, 60, 60],
                    "attributes": auto} for k in range(3) for j in range(2)]  # fmt: skip
    coco = {"images": images, "annotations": annotations, "categories": [{"id": 1, "name": "cat"},
                                                                          {"id": 2, "name": "dog"}]}  # fmt: skip
    archive = zip_of({"annotations.json": json.dumps(coco).encode(),
                      **{f"a{k}.png": png(400, 300, k) for k in range(3)}})  # fmt: skip
    with httpx.Client(base_url=app_url, timeout=60) as client:
        dataset = client.post("/api/datasets", json={"name": "auto"}).json()["id"]
        added = client.post(f"/api/datasets/{dataset}/import", data={"format": "coco"},
                            files={"file": ("auto.zip", archive)}).json()["added"]  # fmt: skip
    return dataset, [image["id"] for image in added]


def test_a_label_renamed_elsewhere_is_followed_by_the_review_queue_and_the_editors_history_in_chromium(
    app_url: str,
) -> None:
    """The review queue's A kept answering 409 on an image a label's rename had changed, until the page was
    reloaded; its U after a reject made the label renamed since again under its old name. After the editor loaded
    another version of its image, Ctrl+Y brought back a box on top of its twin."""
    dataset, images = _auto_labelled_set(app_url)
    labels = {label["name"]: label["id"] for label in httpx.get(f"{app_url}/api/datasets/{dataset}/labels").json()}

    def names() -> list[str]:
        return sorted(label["name"] for label in httpx.get(f"{app_url}/api/datasets/{dataset}/labels").json())

    def shapes(image: int) -> list[str]:
        found = httpx.get(f"{app_url}/api/images/{image}/annotations").json()["shapes"]
        return sorted(shape["label"] for shape in found)

    with chromium_page(860) as (page, errors):
        page.goto(f"{app_url}/#/datasets/{dataset}/review")
        shown = page.wait_for_selector("section.review[data-ready]").get_attribute("data-ready")  # image and labels
        assert httpx.patch(f"{app_url}/api/labels/{labels['cat']}", json={"name": "kitty"}).is_success  # elsewhere
        page.keyboard.press("a")
        page.wait_for_selector("text=it is shown as it is now; decide again")
        page.keyboard.press("a")  # decided again: it takes
        page.wait_for_selector("text=Accepted")
        page.wait_for_selector(f"section.review[data-ready]:not([data-ready='{shown}'])")  # the next one, loaded
        page.keyboard.press("r")
        page.wait_for_selector("text=Rejected")
        rejected = next(image for image in images if shapes(image) == [])
        assert httpx.patch(f"{app_url}/api/labels/{labels['cat']}", json={"name": "puss"}).is_success
        page.keyboard.press("u")
        page.wait_for_selector("text=waits for review again")
        assert shapes(rejected) == ["dog", "puss"] and names() == ["dog", "puss"]  # kitty not made again

        page.goto(f"{app_url}/#/datasets/{dataset}/images/{rejected}")
        page.wait_for_selector(".editor img")
        _saved(page)
        page.keyboard.press("1")  # puss, the cat renamed twice
        _draw(page, (250, 150, 330, 230))
        _saved(page)
        current = httpx.get(f"{app_url}/api/images/{rejected}/annotations").json()
        theirs = [*current["shapes"], {"kind": "box", "label": "dog", "points": [10, 200, 60, 280]}]
        assert httpx.put(f"{app_url}/api/images/{rejected}/annotations",
                         json={"version": current["version"], "shapes": theirs}).is_success  # fmt: skip
        _draw(page, (150, 150, 220, 230))
        page.wait_for_selector("text=were added to its saved version")
        _saved(page)
        before = shapes(rejected)
        page.keyboard.press("Control+z")
        page.wait_for_selector("text=go back no further than the image's saved version")
        page.keyboard.press("Control+y")
        page.wait_for_timeout(800)
        _saved(page)
        assert shapes(rejected) == before and len(before) == 5  # 2 auto, theirs, the two drawn: none twice
    assert not errors, errors


def test_the_labels_panel_and_a_classification_editor_act_on_labels_as_they_are_now_in_chromium(
    app_url: str,
) -> None:
    """The labels panel confirmed deleting a label "and its 1 use(s)" when it had grown to 3 elsewhere, and deleted
    a label renamed elsewhere under its old name, unsaid; a class given by its key as the class was renamed
    elsewhere was dropped, said as "changed elsewhere"."""
    dataset, (_, second) = _two_images_labelled_car_and_bus(app_url)
    labels = {label["name"]: label["id"] for label in httpx.get(f"{app_url}/api/datasets/{dataset}/labels").json()}

    def delete(page, name: str) -> None:  # type: ignore[no-untyped-def]
        row = page.locator(".label-list li", has=page.locator("span.name", has_text=re.compile(f"^{name}$")))
        row.locator("button[title=Delete]").click()

    with chromium_page(800) as (page, errors):
        page.goto(f"{app_url}/#/datasets/{dataset}")
        page.wait_for_selector(".label-list")
        cars = [{"kind": "box", "label": "car", "points": [10 + 60 * k, 10, 50 + 60 * k, 50]} for k in range(2)]
        version = httpx.get(f"{app_url}/api/images/{second}/annotations").json()["version"]
        assert httpx.put(f"{app_url}/api/images/{second}/annotations",
                         json={"version": version, "shapes": cars}).is_success  # fmt: skip
        asked: list[str] = []
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
        delete(page, "car")
        page.wait_for_timeout(500)
        assert asked == ["Delete car and its 3 use(s)?"]  # the count as it is now (the page had 1)
        assert httpx.patch(f"{app_url}/api/labels/{labels['bus']}", json={"name": "coach"}).is_success
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
        delete(page, "bus")
        page.wait_for_selector("text=The label bus was renamed coach elsewhere")
        kept = [label["name"] for label in httpx.get(f"{app_url}/api/datasets/{dataset}/labels").json()]
        assert len(asked) == 1 and "coach" in kept  # not asked, not deleted
    with httpx.Client(base_url=app_url, timeout=60) as client:
        pets = client.post("/api/datasets", json={"name": "pets", "task": "classify"}).json()["id"]
        (photo,) = client.post(f"/api/datasets/{pets}/images", files=[("files", ("p.png", png(200, 150, 1)))]).json()[
            "added"
        ]
        classes = {
            name: client.post(f"/api/datasets/{pets}/labels", json={"name": name}).json() for name in ("cat", "dog")
        }
    cat = next(label["id"] for label in classes["dog"] if label["name"] == "cat")
    with chromium_page(800) as (page, errors):
        page.goto(f"{app_url}/#/datasets/{pets}/images/{photo['id']}")
        page.wait_for_selector(".editor img")
        _saved(page)
        assert httpx.patch(f"{app_url}/api/labels/{cat}", json={"name": "kitty"}).is_success  # elsewhere
        page.keyboard.press("1")  # cat, as the page loaded it
        page.wait_for_selector("text=The class cat was renamed kitty elsewhere: this image is a kitty now.")
        page.wait_for_timeout(600)
        _saved(page)
        assert httpx.get(f"{app_url}/api/images/{photo['id']}/annotations").json()["class_label"] == "kitty"
    assert not errors, errors
