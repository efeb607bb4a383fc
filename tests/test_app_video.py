"""Video frames through the app's API: AVI, MOV and WebM as PyAV writes them, times that are one millisecond,
a capture that loses the race for a millisecond to another, and a video that breaks part-way through decoding."""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import pytest
from app_helpers import app_client, fresh_database, video
from fastapi.testclient import TestClient
from PIL import Image as PILImage

from forklift.app.routes import videos as video_routes
from forklift.app.tables import Image


def _uploaded(api: TestClient, clip: Path) -> dict:
    dataset = api.post("/api/datasets", json={"name": clip.stem}).json()["id"]
    answer = api.post(f"/api/datasets/{dataset}/videos", files={"file": (clip.name, clip.read_bytes())})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def _square_left(jpeg: bytes) -> int:
    """Where the generated video's bright square starts, in pixels from the left."""
    grey = np.asarray(PILImage.open(io.BytesIO(jpeg)).convert("L"))
    return int(np.nonzero((grey > 135).any(axis=0))[0][0])


@pytest.mark.parametrize(
    ("name", "codec"),
    [("clip.avi", "mpeg4"), ("clip.mov", "mpeg4"), ("clip.webm", "libvpx"), ("vp9.webm", "libvpx-vp9")],
)
@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_avi_mov_and_webm_videos_give_their_frames(name: str, codec: str, tmp_path: Path) -> None:
    """On SQLite only: the containers are FFmpeg's business, the same on either database."""
    assert codec in av.codecs_available, f"this PyAV's FFmpeg has no {codec} encoder"
    clip = video(tmp_path / name, seconds=2.0, fps=10, codec=codec)
    with app_client(tmp_path / "app", fresh_database(None, tmp_path)) as api:
        facts = _uploaded(api, clip)
        assert (facts["width"], facts["height"]) == (96, 64)
        assert facts["duration_s"] == pytest.approx(2.0, abs=0.15) and facts["fps"] == pytest.approx(10)
        captured = api.post(f"/api/videos/{facts['id']}/capture", json={"at_s": [0.0, 0.58, 1.0, 1.5]})
        assert captured.status_code == 201, captured.text
        frames = captured.json()["added"]
        assert [frame["video_time_s"] for frame in frames] == [0.0, 0.58, 1.0, 1.5]
        pictures = [api.get(frame["file"]).content for frame in frames]
        assert all(PILImage.open(io.BytesIO(p)).size == (96, 64) for p in pictures)
        lefts = [_square_left(p) for p in pictures]  # frame k's square starts at k * 80 / 19 px (app_helpers.video)
        assert lefts == pytest.approx([0, 21, 42, 63], abs=2), lefts  # at 0.58 s frame 5 is on screen, not 6


def test_times_in_one_millisecond_are_one_frame(api: TestClient, tmp_path: Path) -> None:
    facts = _uploaded(api, video(tmp_path / "clip.mp4", seconds=2.0))
    first = api.post(f"/api/videos/{facts['id']}/capture", json={"at_s": [1.0, 1.0004, 0.9996]})
    assert first.status_code == 201, first.text
    assert [i["video_time_s"] for i in first.json()["added"]] == [1.0] and first.json()["skipped"] == 2
    again = api.post(f"/api/videos/{facts['id']}/capture", json={"at_s": [1.0003]})
    assert again.status_code == 201 and again.json() == {"added": [], "skipped": 1}
    every = api.post(f"/api/videos/{facts['id']}/capture", json={"every_s": 0.5}).json()
    assert [i["video_time_s"] for i in every["added"]] == [0.0, 0.5, 1.5] and every["skipped"] == 1  # not its end
    frames = api.post(f"/api/videos/{facts['id']}/capture", json={"every_s": 0.03}).json()  # 10 frames a second
    lefts = [_square_left(api.get(i["file"]).content) for i in frames["added"]]  # each frame once, not 3 times
    assert len(set(lefts)) == len(lefts) > 15 and len(lefts) + frames["skipped"] == math.ceil(2.0 / 0.03)
    dense = api.post(f"/api/videos/{facts['id']}/capture", json={"every_s": 1e-9})
    assert dense.status_code == 422 and dense.json()["error"].endswith("at most 5000 per capture")


def test_a_millisecond_captured_meanwhile_by_another_request_is_skipped(
    api: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another capture of the same times commits each frame between this one's look at what is taken and its own
    commit: the database's unique (video, millisecond) refuses this one's, which counts it as skipped."""
    facts = _uploaded(api, video(tmp_path / "clip.mp4", seconds=2.0))
    decode = video_routes.frames_at

    def raced(path: Path, times: list[float], *, name: str) -> Iterator[tuple[float, bytes]]:
        for moment, jpeg in decode(path, times, name=name):
            with api.app.state.sessionmaker() as other:  # type: ignore[attr-defined]
                other.add(Image(dataset_id=facts["dataset_id"], file="elsewhere.jpg", original_name="other",
                                width=96, height=64, video_id=facts["id"], video_ms=round(moment * 1000)))  # fmt: skip
                other.commit()
            yield moment, jpeg

    monkeypatch.setattr(video_routes, "frames_at", raced)
    answer = api.post(f"/api/videos/{facts['id']}/capture", json={"at_s": [0.5, 1.0]})
    assert answer.status_code == 201, answer.text
    assert answer.json() == {"added": [], "skipped": 2}
    kept = api.get(f"/api/datasets/{facts['dataset_id']}/images?video_id={facts['id']}").json()["items"]
    assert [image["original_name"] for image in kept] == ["other", "other"]
    folder = tmp_path / "app" / "datasets" / str(facts["dataset_id"]) / "images"
    assert not list(folder.glob("*.jpg"))  # the losing request's frames are not left on disk


def test_a_video_broken_part_way_is_a_422_and_keeps_the_frames_before(api: TestClient, tmp_path: Path) -> None:
    clip = video(tmp_path / "broken.webm", seconds=5.0, size=(160, 120), codec="libvpx")
    content = bytearray(clip.read_bytes())
    middle = len(content) // 2
    content[middle : middle + len(content) // 8] = bytes(len(content) // 8)  # the WebM demuxer loses its way there
    clip.write_bytes(content)
    facts = _uploaded(api, clip)  # its first frame decodes: the upload takes it
    answer = api.post(f"/api/videos/{facts['id']}/capture", json={"every_s": 0.5})
    assert answer.status_code == 422, answer.text
    said = answer.json()["error"]
    assert said.startswith("broken.webm: its frames stop at") and "damaged or cut short" in said, said
    kept = api.get(f"/api/datasets/{facts['dataset_id']}/images?video_id={facts['id']}").json()["items"]
    times = [image["video_time_s"] for image in kept]
    assert times[:2] == [0.0, 0.5] and f"the {len(kept)} frames captured before it are kept" in said


def gif_with_a_page(path: Path) -> Path:
    """A small animated GIF with an HTML page after its end: FFmpeg reads the GIF, a browser that took it for a
    page would run the script (it creates a data set named "pwned" with the viewer's session)."""
    frames = [PILImage.new("RGB", (32, 24), (40 * k, 80, 160)) for k in range(4)]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    page = (
        b"<html><body><script>document.title = 'pwned'; fetch('/api/session').then(r => r.json()).then(s => "
        b"fetch('/api/datasets', {method: 'POST', headers: {'Content-Type': 'application/json', "
        b"'X-CSRF-Token': s.csrf || ''}, body: JSON.stringify({name: 'pwned'})}))</script></body></html>"
    )
    path.write_bytes(buffer.getvalue() + page)
    return path


def test_a_video_named_as_a_page_is_stored_and_served_as_what_it_is(api: TestClient, tmp_path: Path) -> None:
    facts = _uploaded(api, gif_with_a_page(tmp_path / "clip.html"))
    assert facts["original_name"] == "clip.html"  # kept as a record of what the person uploaded
    stored = api.app.state.storage.root  # type: ignore[attr-defined]
    (kept,) = (stored / "datasets").rglob("videos/*")
    assert kept.suffix == ".gif"  # the app's name for it, from what FFmpeg read
    answer = api.get(f"/api/videos/{facts['id']}/file")
    assert answer.status_code == 200 and answer.headers["content-type"] == "image/gif"
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["content-security-policy"] == "default-src 'none'; sandbox"
    page = api.get("/")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
