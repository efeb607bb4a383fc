"""Image-to-image (style) models: the PyTorch example's state dicts, fixed-size ONNX graphs, the three engines,
`predict --out`, the styled image served over HTTP, the WebSocket stream, the /live page in Chromium, and
training a style with a seeded random VGG16 as the loss network (ImageNet weights cannot be downloaded here)."""

from __future__ import annotations

import csv
import json
import re
import shutil
import time
from pathlib import Path

import core_parts
import cv2
import httpx
import numpy as np
import pytest
import torch
from helpers import CFGS, assert_resume_is_exact, forklift, forklift_here, shared

from forklift.data.synth import synth_shapes
from forklift.errors import ForkliftError
from forklift.model_files.model_dir import open_model_dir
from forklift.nets.style import StyleNet
from forklift.runtime.base import PredictOptions
from forklift.runtime.load import load_predictor
from forklift.runtime.onnx_export import export_onnx
from forklift.runtime.style_export import fresh_style_net, write_style_dir
from forklift.serve.process import ServerProcess
from forklift.serve.stream_client import run_stream, stream_url
from forklift.train.perceptual import random_vgg16_weights
from forklift.train.settings import TrainSettings
from forklift.train.trainer import train
from forklift.vision.style_adjust import StyleAdjust
from forklift.vocabulary import Runtime, Task

# Key names of the example's saved networks (facts of its file format), a sample of each kind of module.
EXAMPLE_KEYS = ("conv1.conv2d.weight", "in1.weight", "in1.bias", "conv3.conv2d.bias", "res1.conv1.conv2d.weight",
                "res3.in2.weight", "res5.conv2.conv2d.bias", "deconv1.conv2d.weight", "in4.bias",
                "deconv2.conv2d.bias", "in5.weight", "deconv3.conv2d.weight")  # fmt: skip
OLD_KEYS = ("in1.running_mean", "in1.running_var", "res2.in1.running_mean", "in5.running_var")  # PyTorch < 0.4
WITHIN = 255e-3  # engines agree within 1e-3 of the 0-255 range


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # where exports of state dicts go


@pytest.fixture(scope="module")
def narrow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A quarter-width style model directory (style.pth and its export)."""
    return write_style_dir(fresh_style_net(seed=3, width=0.25), tmp_path_factory.mktemp("style") / "narrow")


@pytest.mark.parametrize(("suffix", "old"), [(".pth", False), (".model", True)])
@pytest.mark.slow  # over 1 s: left out of make test-fast
def test_example_state_dicts_load_and_the_engines_agree(tmp_path: Path, suffix: str, old: bool) -> None:
    state = fresh_style_net(seed=1, width=0.5).state_dict()
    assert set(EXAMPLE_KEYS) <= set(state)
    if old:  # what old PyTorch versions saved of instance norm: statistics the network never uses
        state.update({key: torch.rand(state[key.rsplit(".", 1)[0] + ".weight"].shape) for key in OLD_KEYS})
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    torch.save(state, model_dir / f"candy{suffix}")
    model = open_model_dir(model_dir)
    assert model.format == "style" and model.config.task == Task.STYLE and model.labels == []
    image = np.random.default_rng(0).integers(0, 256, (3, 96, 128)).astype(np.float32)
    outputs = {}
    for runtime in (Runtime.TORCH, Runtime.ONNX, Runtime.OPENVINO):
        predictor = load_predictor(model, runtime)  # no threads option: torch's count is global to the process
        assert predictor.runtime == runtime
        outputs[runtime] = predictor.network.run(image[None])[0]  # type: ignore[attr-defined]
    assert outputs[Runtime.TORCH].shape == (3, 96, 128) and outputs[Runtime.TORCH].std() > 10
    for runtime in (Runtime.ONNX, Runtime.OPENVINO):
        assert np.abs(outputs[runtime] - outputs[Runtime.TORCH]).max() <= WITHIN, runtime


def test_a_fixed_size_onnx_style_model_answers_any_image_size(tmp_path: Path) -> None:
    model_dir = tmp_path / "zoo"
    model_dir.mkdir()
    export_onnx(StyleNet(width=0.25).eval(), torch.zeros(1, 3, 224, 224), model_dir / "mosaic.onnx", Task.STYLE, {})
    with pytest.raises(ForkliftError, match=re.escape('say "task": "style" in forklift.json')):
        open_model_dir(model_dir)
    (model_dir / "forklift.json").write_text(json.dumps({"task": "style"}))
    predictor = load_predictor(open_model_dir(model_dir))
    for height, width in ((576, 768), (101, 333)):
        image = np.random.default_rng(1).integers(0, 256, (height, width, 3), dtype=np.uint8)
        styled, _ = predictor.predict_image("photo.jpg", image)
        assert isinstance(styled, np.ndarray) and styled.shape == (height, width, 3) and styled.dtype == np.uint8


@pytest.mark.slow  # over 1 s: left out of make test-fast
def test_strength_and_colour_preservation_adjust_the_answer(narrow: Path) -> None:
    image = cv2.imread(str(shared("images/dog.jpg")))[..., ::-1].copy()
    full, _ = load_predictor(open_model_dir(narrow)).predict_image("dog.jpg", image)
    none, _ = load_predictor(open_model_dir(narrow), options=PredictOptions(style=StyleAdjust(0.0))).predict_image(
        "dog.jpg", image
    )
    assert np.array_equal(none, image) and np.abs(full.astype(int) - image).mean() > 20  # type: ignore[union-attr]
    kept, _ = load_predictor(open_model_dir(narrow), options=PredictOptions(style=StyleAdjust(keep_colour=True))
                             ).predict_image("dog.jpg", image)  # fmt: skip
    chroma = [cv2.cvtColor(np.asarray(x), cv2.COLOR_RGB2YCrCb).astype(int) for x in (kept, image, full)]
    assert np.abs(chroma[0][..., 1:] - chroma[1][..., 1:]).mean() < 2  # the original's colour
    assert np.abs(chroma[0][..., 0] - chroma[2][..., 0]).mean() < 2  # the answer's brightness
    with pytest.raises(ForkliftError, match=r"strength 1\.5: must be from 0 to 1"):
        StyleAdjust(1.5)


@pytest.mark.slow  # a process of its own, seconds
def test_predict_writes_styled_images_of_the_input_size(narrow: Path, tmp_path: Path) -> None:
    out = tmp_path / "styled"
    result = forklift_here("predict", narrow, shared("images/dog.jpg"), "--out", out, "--json")
    (answered,) = json.loads(result.stdout)["results"]
    written = cv2.imread(answered["image"]["file"])
    original = cv2.imread(str(shared("images/dog.jpg")))
    assert written.shape == original.shape and Path(answered["image"]["file"]).parent == out
    refused = forklift_here("predict", narrow, shared("images/dog.jpg"), check=False)
    assert refused.returncode == 2 and "--out DIR" in refused.stderr
    # one name twice (a/x.jpg and b/x.jpg, or one image given twice): the second was written over the first
    twice = forklift_here("predict", narrow, shared("images/dog.jpg"), shared("images/dog.jpg"), "--out", out, "--json")
    assert [Path(a["image"]["file"]).name for a in json.loads(twice.stdout)["results"]] == ["dog.jpg", "dog_2.jpg"]
    synth_shapes(tmp_path / "shapes", 4, 64, seed=0)  # eval: what a style model is, not "shares no class"
    measured = forklift_here("eval", narrow, "--data", tmp_path / "shapes", check=False)
    assert measured.returncode == 2 and "a style model answers images, which eval has no measure of" in measured.stderr


@pytest.mark.slow  # a process of its own, seconds
def test_a_file_that_is_not_a_style_state_dict_is_one_line(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    torch.save({"fc.weight": torch.zeros(2, 2)}, model_dir / "classifier.pth")
    result = forklift_here("predict", model_dir, shared("images/dog.jpg"), "--out", tmp_path / "o", check=False)
    (line,) = [text for text in result.stderr.splitlines() if text.startswith("forklift: error:")]
    assert result.returncode == 2 and "not a fast-neural-style state dict" in line and "classifier.pth" in line


@pytest.fixture(scope="module")
def server(narrow: Path, tmp_path_factory: pytest.TempPathFactory):
    """`forklift serve` with the narrow style model (one 1-thread worker) and a detector beside it."""
    detector = tmp_path_factory.mktemp("detector") / "tiny"
    forklift_here("models", "new-darknet", "--cfg", CFGS / "tiny-detector.cfg", "--names", shared("darknet/coco.names"),
             detector)  # fmt: skip
    with ServerProcess(f"{narrow}=style", f"{detector}=yolo", "--instances", "1", "--threads", "1") as process:
        process.wait_healthy()
        yield process


@pytest.mark.slow
def test_the_server_answers_the_styled_image(server: ServerProcess) -> None:
    dog = shared("images/dog.jpg").read_bytes()
    answer = httpx.post(f"{server.url}/predict/style", files={"files": ("dog.jpg", dog)}, timeout=60)
    assert answer.status_code == 200 and answer.headers["content-type"] == "image/jpeg"
    decoded = cv2.imdecode(np.frombuffer(answer.content, np.uint8), cv2.IMREAD_COLOR)
    assert decoded.shape == (576, 768, 3) and "inference" in json.loads(answer.headers["x-forklift-timing"])
    png = httpx.post(f"{server.url}/predict/style", files={"files": ("dog.jpg", dog)}, headers={"Accept": "image/png"})
    assert png.headers["content-type"] == "image/png" and png.content[:4] == b"\x89PNG"
    two = httpx.post(f"{server.url}/predict/style", files=[("files", ("a.jpg", dog)), ("files", ("b.jpg", dog))])
    assert two.status_code == 400 and "one image with one image" in two.json()["error"]
    bad = httpx.post(f"{server.url}/predict/style?quality=0", files={"files": ("dog.jpg", dog)})
    assert bad.status_code == 400 and "quality" in bad.json()["error"]
    faint = httpx.post(f"{server.url}/predict/style?strength=0", files={"files": ("dog.jpg", dog)})
    original = cv2.imdecode(np.frombuffer(dog, np.uint8), cv2.IMREAD_COLOR).astype(int)
    unstyled = cv2.imdecode(np.frombuffer(faint.content, np.uint8), cv2.IMREAD_COLOR)
    assert np.abs(unstyled - original).mean() < 3 < np.abs(decoded - original).mean()  # JPEG's noise only
    too_strong = httpx.post(f"{server.url}/predict/style?strength=2", files={"files": ("dog.jpg", dog)})
    assert too_strong.status_code == 400 and "strength 2.0: must be from 0 to 1" in too_strong.json()["error"]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


@pytest.mark.slow
def test_the_stream_drops_stale_frames_and_holds_no_backlog(server: ServerProcess) -> None:
    """Frames of 1280x720 noise (about 2 MB as JPEG) sent as fast as the socket takes them: the model answers a
    few, the rest are dropped as newer ones arrive, the last one is answered, and the server's memory does not
    grow with the frames sent (a queue would hold hundreds of megabytes)."""
    noise = np.random.default_rng(2).integers(0, 256, (720, 1280, 3), dtype=np.uint8)
    url = stream_url(server.url, "style")
    run_stream(url, [noise] * 5)  # the workers and the stream path warm up
    before = _rss_mb(server.process.pid)
    report = run_stream(url, [noise] * 150, quality=95, flow=False)  # a client that sends every frame
    grown = _rss_mb(server.process.pid) - before
    assert report.sent == 150 and report.errors == []
    assert 1 <= report.answered < 100 and report.dropped >= 50, report.to_json()
    assert report.sent - 2 <= report.answered + report.dropped + report.stale <= report.sent  # 2 may be in flight
    assert grown < 60, f"server RSS grew by {grown:.0f} MB over {report.sent} frames"
    paced = run_stream(url, [noise] * 60, quality=95)  # flow control: at most one frame per worker unanswered
    assert paced.dropped == 0 and paced.skipped > 0 and paced.answered + paced.stale == paced.sent, paced.to_json()
    with pytest.raises(ForkliftError, match="streams are for image models"):
        run_stream(stream_url(server.url, "yolo"), [noise])
    counted = httpx.get(f"{server.url}/metrics").text
    assert 'forklift_stream_frames_total{model="style",outcome="dropped"}' in counted


def _clip(path: Path, frames: int) -> Path:
    """A short MPEG-4 file of noise frames, 96 x 64 at 25 frames/s."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 25.0, (96, 64))
    for seed in range(frames):
        writer.write(np.random.default_rng(seed).integers(0, 256, (64, 96, 3), dtype=np.uint8))
    writer.release()
    return path


@pytest.mark.slow
def test_the_stream_verb_sends_a_video_files_frames_and_writes_the_answers(
    server: ServerProcess, tmp_path: Path
) -> None:
    clip = _clip(tmp_path / "clip.mp4", 12)
    result = forklift("stream", "--model", "style", "--video", clip, "--url", server.url, "--out",
                      tmp_path / "styled.mp4", "--json", "--fps", "50")  # fmt: skip
    report = json.loads(result.stdout)
    assert report["sent"] + report["skipped"] == 12 and report["answered"] >= 1 and report["errors"] == [], report
    written = cv2.VideoCapture(str(tmp_path / "styled.mp4"))
    assert written.isOpened() and int(written.get(cv2.CAP_PROP_FRAME_COUNT)) == report["answered"]
    assert written.get(cv2.CAP_PROP_FPS) == pytest.approx(50.0)  # the rate sent at (it was 30, whatever the source)
    written.release()
    paced = json.loads(forklift("stream", "--model", "style", "--video", clip, "--url", server.url, "--json", "--fps",
                                "5", "--frames", "6", "--out", tmp_path / "own.avi").stdout)  # fmt: skip
    assert paced["answered"] == 6 and 4.0 < paced["frames_per_s"] < 5.5, paced  # 6 answers, 5 intervals of 0.2 s
    assert cv2.VideoCapture(str(tmp_path / "own.avi")).get(cv2.CAP_PROP_FPS) == pytest.approx(5.0)


def test_a_video_that_gives_no_frame_is_one_line_before_any_stream_opens(tmp_path: Path) -> None:
    """Said before connecting (nothing listens at the URL): an empty file, a cut one, and text named as a JPEG."""
    clip = _clip(tmp_path / "clip.mp4", 12).read_bytes()
    (tmp_path / "empty.mp4").write_bytes(b"")
    (tmp_path / "cut.mp4").write_bytes(clip[: len(clip) // 3])
    (tmp_path / "notes.jpg").write_text("not a picture")
    (tmp_path / "clip.mp4").write_bytes(clip)
    for name, out in [("empty.mp4", ()), ("cut.mp4", ()), ("notes.jpg", ()), ("clip.mp4", ("--out", "styled.txt")),
                      ("clip.mp4", ("--out", tmp_path / "nowhere" / "styled.mp4"))]:  # fmt: skip
        result = forklift("stream", "--model", "style", "--video", tmp_path / name, "--url", "http://127.0.0.1:9",
                          *out, check=False, timeout=120)  # fmt: skip
        named = f"--out {out[1]}: " if out else f"{tmp_path / name}: "
        assert result.returncode == 2 and result.stderr.startswith(f"forklift: error: {named}"), result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # no FFmpeg log lines before it
        assert "Traceback" not in result.stderr and "frames sent" not in result.stdout, result.stderr


@pytest.mark.slow
def test_the_live_page_streams_a_fake_camera_in_chromium(server: ServerProcess, tmp_path: Path) -> None:
    chromium = str(core_parts.chromium())
    from playwright.sync_api import sync_playwright

    flags = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--use-fake-device-for-media-stream",
             "--use-fake-ui-for-media-stream"]  # fmt: skip
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=flags)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 520})
            page.goto(f"{server.url}/live")
            page.wait_for_function("document.querySelector('#model').options.length > 0")
            assert page.eval_on_selector_all("#model option", "options => options.map(o => o.value)") == ["style"]
            page.click("#start")
            page.wait_for_function("Number(document.querySelector('#answer').dataset.frames || 0) >= 5", timeout=60000)
            time.sleep(1)
            stats = page.text_content("#stats") or ""
            page.screenshot(path=str(tmp_path / "live.png"))
            width = page.eval_on_selector("#answer", "img => img.naturalWidth")
            message = page.text_content("#message")
        finally:
            browser.close()
    assert width == 320 and "frames/s" in stats and not message, (stats, message)
    assert (tmp_path / "live.png").stat().st_size > 10_000


@pytest.fixture(scope="module")
def style_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A folder of the sample photos, a style image, and a seeded random VGG16 (no ImageNet weights here)."""
    root = tmp_path_factory.mktemp("style-training")
    photos = root / "photos"
    photos.mkdir()
    for photo in sorted(shared("images").glob("*.jpg")):
        shutil.copy(photo, photos / photo.name)
    vgg16 = random_vgg16_weights(root / "vgg16.pth")
    return {"data": photos, "style_image": shared("images/dog.jpg"), "loss_net_weights": vgg16}


STYLE_SETTINGS = {"task": "style", "img": 64, "epochs": 3, "batch": 4, "lr": 0.01, "seed": 0}


@pytest.mark.slow
def test_a_short_style_training_lowers_its_loss_and_writes_a_style_model(style_data: dict, tmp_path: Path) -> None:
    out = train(TrainSettings.of(**style_data, **STYLE_SETTINGS), tmp_path / "run")
    with (out / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    losses = [float(row["loss"]) for row in rows]
    assert losses[-1] < 0.5 * losses[0], losses
    assert float(rows[-1]["val_score"]) > float(rows[0]["val_score"])  # minus the val loss: it fell too
    model = open_model_dir(out)
    assert model.format == "style" and "onnx" in model.files and not (out / "eval").exists()
    styled, _ = load_predictor(model).predict_image("dog.jpg", cv2.imread(str(shared("images/dog.jpg")))[..., ::-1])
    assert isinstance(styled, np.ndarray) and styled.shape == (576, 768, 3)


@pytest.mark.slow
def test_an_interrupted_style_training_resumes_to_the_same_weights(
    style_data: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = TrainSettings.of(**style_data, **STYLE_SETTINGS)
    whole = train(settings, tmp_path / "whole")
    assert_resume_is_exact(monkeypatch, whole, tmp_path / "interrupted", settings)


@pytest.mark.slow  # a process of its own, seconds
def test_style_training_without_the_loss_network_is_one_line(style_data: dict, tmp_path: Path) -> None:
    result = forklift("train", "--task", "style", "--data", style_data["data"], "--style-image",
                      style_data["style_image"], tmp_path / "run", check=False)  # fmt: skip
    (line,) = [text for text in result.stderr.splitlines() if text.startswith("forklift: error:")]
    assert result.returncode == 2 and "--loss-net-weights FILE" in line and "nothing is downloaded" in line
    refused = forklift("train", "--data", style_data["data"], "--style-image", style_data["style_image"],
                       tmp_path / "other", check=False)  # fmt: skip
    assert refused.returncode == 2 and "forklift: error:" in refused.stderr


@pytest.mark.slow  # a process of its own, seconds
def test_gpus_that_are_not_there_are_one_line(narrow: Path) -> None:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    result = forklift("serve", f"{narrow}=style", "--gpus", f"0,{count}", check=False)
    have = f"devices 0-{count - 1}" if count else "no CUDA device"
    assert result.returncode == 2 and f"--gpus 0,{count}: this machine has {have}" in result.stderr
    with pytest.raises(ForkliftError, match="only --runtime torch runs on a GPU"):
        load_predictor(open_model_dir(narrow), Runtime.ONNX, PredictOptions(device="cuda:0"))
