"""`forklift serve` over loopback: every protocol, bad input and overload, crashes and draining.

Each test talks to a real server process with real clients (httpx, and tritonclient for the v2 protocol),
and checks that the server still answers afterwards.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest
import schemathesis
import tritonclient.http as triton
from helpers import CFGS, Server, free_port, shared
from hypothesis import HealthCheck, settings
from PIL import Image
from tritonclient.utils import InferenceServerException

from forklift.model_files.model_dir import open_model_dir
from forklift.runtime.base import PredictOptions
from forklift.runtime.torch_runtime import TorchPredictor
from forklift.serve.openapi import openapi

UPLOAD_LIMIT_MB = 2


@pytest.fixture(scope="module")
def models(darknet_models) -> dict[str, Path]:
    return {
        "tiny": darknet_models(shared("darknet/yolov3-tiny.cfg"), shared("darknet/coco.names")),
        "shapes": darknet_models(CFGS / "v3-spp-groups.cfg", CFGS / "shapes.names"),
    }


@pytest.fixture(scope="module")
def image_host(tmp_path_factory: pytest.TempPathFactory):
    """A plain HTTP server on loopback holding the sample photos, for URL fetches."""
    port = free_port()
    folder = shared("images")
    process = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    for _ in range(100):
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    process.wait()


@pytest.fixture(scope="module")
def server(models, image_host: str):
    running = Server(
        f"{models['tiny']}=tiny", f"{models['shapes']}=shapes", "--instances", "1",
        "--max-upload-mb", str(UPLOAD_LIMIT_MB), "--url-allow-host", image_host.removeprefix("http://"),
        "--url-timeout", "5",
    )  # fmt: skip
    yield running
    assert running.stop() == 0


def dog() -> bytes:
    return shared("images/dog.jpg").read_bytes()


def assert_still_answers(server: Server) -> None:
    response = httpx.post(f"{server.url}/predict/tiny", files={"files": ("dog.jpg", dog())}, timeout=60)
    assert response.status_code == 200 and response.json()["status"] == "OK"


def assert_error(response: httpx.Response, status: int, words: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["status"] == "error" and words in body["error"], body


# ---- native protocol ---------------------------------------------------------------------------------------


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_native_matches_in_process_prediction(server: Server, models) -> None:
    response = httpx.post(f"{server.url}/predict/tiny", files={"files": ("dog.jpg", dog())}, timeout=60)
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"status", "results", "timing"} and body["status"] == "OK"
    local = TorchPredictor(open_model_dir(models["tiny"]), PredictOptions()).predict([("dog.jpg", dog())]).to_json()
    served = body["results"][0]["detections"]
    expected = local["results"][0]["detections"]
    assert [d["label"] for d in served] == [d["label"] for d in expected] and served
    for a, b in zip(served, expected, strict=True):
        assert all(abs(a["bbox"][k] - b["bbox"][k]) <= 1 for k in a["bbox"])


def test_native_several_files_raw_body_and_models(server: Server) -> None:
    photos = [("files", (p.name, p.read_bytes())) for p in (shared("images/dog.jpg"), shared("images/horses.jpg"))]
    body = httpx.post(f"{server.url}/predict/tiny", files=photos, timeout=60).json()
    assert [r["file"] for r in body["results"]] == ["dog.jpg", "horses.jpg"]
    raw = httpx.post(f"{server.url}/predict/shapes", content=dog(), headers={"content-type": "image/jpeg"}, timeout=60)
    assert raw.status_code == 200 and raw.json()["results"][0]["file"] == "body"
    labels = {d["label"] for d in raw.json()["results"][0]["detections"]}
    assert labels <= {"circle", "square", "triangle"}
    assert_error(httpx.post(f"{server.url}/", content=dog(), timeout=60), 400, "several models are served")


def test_healthz_and_pinning(server: Server) -> None:
    facts = httpx.get(f"{server.url}/healthz").json()
    assert facts["status"] == "OK" and set(facts["models"]) == {"tiny", "shapes"}
    tiny, shapes = facts["models"]["tiny"], facts["models"]["shapes"]
    assert tiny["runtime"] == "openvino" and tiny["task"] == "detect"  # the default engine for Darknet models
    for model in (tiny, shapes):
        for pid, cpus in zip(model["pids"], model["cpus"], strict=True):
            assert sorted(os.sched_getaffinity(pid)) == cpus  # each worker runs on its CPU set only
    assert not set(tiny["cpus"][0]) & set(shapes["cpus"][0])  # models do not share CPUs


# ---- PowerAI Vision ----------------------------------------------------------------------------------------


def test_powerai_vision_api(server: Server, image_host: str) -> None:
    response = httpx.post(
        f"{server.url}/api/dlapis/tiny", files={"files": ("dog.jpg", dog())}, data={"confthre": "0.5"}, timeout=60
    )
    body = response.json()
    assert response.status_code == 200 and body["result"] == "success" and body["webAPIId"] == "tiny"
    assert body["classified"] and all(c["confidence"] >= 0.5 for c in body["classified"])
    assert set(body["classified"][0]) == {"label", "confidence", "xmin", "ymin", "xmax", "ymax"}
    lower = httpx.post(
        f"{server.url}/api/dlapis/tiny", files={"files": ("dog.jpg", dog())}, data={"confthre": "0.3"}, timeout=60
    ).json()
    assert len(lower["classified"]) > len(body["classified"])
    by_url = httpx.get(f"{server.url}/api/dlapis/tiny", params={"imageUrl": f"{image_host}/dog.jpg"}, timeout=60)
    assert by_url.status_code == 200 and by_url.json()["classified"]
    upload = httpx.post(f"{server.url}/detect_upload", files={"files": ("d.jpg", dog())}, data={"model": "tiny"})
    assert upload.status_code == 200 and upload.json()["result"] == "success"
    unnamed = httpx.post(f"{server.url}/detect_upload", files={"files": ("d.jpg", dog())})  # says how to name one
    assert_error(unnamed, 400, "several models are served (shapes, tiny): name one, with the form field model")
    fetched = httpx.get(f"{server.url}/detect_url", params={"url": f"{image_host}/horses.jpg", "model": "shapes"})
    assert fetched.status_code == 200 and fetched.json()["webAPIId"] == "shapes"


def test_the_test_page_sends_an_image_to_the_model_chosen_in_chromium(server: Server, tmp_path: Path) -> None:
    """PowerAI Vision's try-it page, as a person uses it: with two models served, it had no way to name one, and
    every image sent from it was refused."""
    from app_helpers import chromium_page

    photo = tmp_path / "dog.jpg"
    photo.write_bytes(dog())
    with chromium_page(600) as (page, errors):
        page.goto(f"{server.url}/test")
        assert page.locator("select[name=model] option").all_inner_texts() == ["shapes", "tiny"]
        page.select_option("select[name=model]", "tiny")
        page.set_input_files("input[type=file]", str(photo))
        page.click("input[type=submit]")
        page.wait_for_url("**/detect_upload")
        answer = json.loads(page.inner_text("body"))
        assert answer["result"] == "success" and answer["webAPIId"] == "tiny" and not errors


def test_a_method_a_path_does_not_take_is_a_405_with_the_methods_it_does(server: Server) -> None:
    """RFC 9110's Allow on every 405 (it was missing), naming each method of the path (two routes for the GET and
    the POST of PowerAI Vision's)."""
    for method, path, allowed in [("PUT", "/api/dlapis/tiny", "GET, HEAD, POST"), ("GET", "/v2/models/tiny/infer",
                                  "POST"), ("DELETE", "/predict/shapes", "GET, HEAD, POST")]:  # fmt: skip
        refused = httpx.request(method, f"{server.url}{path}")
        assert_error(refused, 405, f"{method} {path}: Method Not Allowed")
        assert refused.headers["allow"] == allowed


def test_url_fetch_refusals(server: Server, image_host: str) -> None:
    port = image_host.rsplit(":", 1)[1]
    other_host = httpx.get(f"{server.url}/detect_url", params={"url": f"http://localhost:{port}/dog.jpg"})
    assert_error(other_host, 403, f"localhost:{port} is not on this server's URL allow-list")
    own = httpx.get(f"{server.url}/detect_url", params={"url": f"{server.url}/metrics"})  # another port, same host
    assert_error(own, 403, f"127.0.0.1:{server.url.rsplit(':', 1)[1]} is not on this server's URL allow-list")
    tab = httpx.get(f"{server.url}/detect_url", params={"url": f"{image_host}/dog\t.jpg"})
    assert_error(tab, 400, "is not an http(s) URL")
    missing = httpx.get(f"{server.url}/detect_url", params={"url": f"{image_host}/nothing.jpg", "model": "tiny"})
    assert_error(missing, 502, "answered 404")
    assert_error(httpx.get(f"{server.url}/detect_url", params={"url": "file:///etc/passwd"}), 400, "not an http(s) URL")
    assert all(answer.json()["result"] == "fail" for answer in (other_host, missing))  # as PowerAI Vision clients read
    assert "result" not in httpx.post(f"{server.url}/predict/nothing", content=dog()).json()  # the native protocol
    assert_still_answers(server)


# ---- the API as its OpenAPI description admits it ---------------------------------------------------------------


DESCRIPTION = openapi(["shapes", "tiny"])  # what the module's server serves at /openapi.json
described = schemathesis.openapi.from_dict(DESCRIPTION)


def test_the_server_describes_its_routes(server: Server) -> None:
    assert httpx.get(f"{server.url}/openapi.json").json() == json.loads(json.dumps(DESCRIPTION))


@described.parametrize()
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_no_request_the_description_admits_makes_the_server_fail(server: Server, case: schemathesis.Case) -> None:
    """Every route, with what its description admits and what it does not (schemathesis's negative cases too):
    never a 5xx."""
    response = case.call(base_url=server.url, timeout=60)
    said = f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:300]}"
    assert response.status_code < 500, said


# ---- KServe v2 with a real v2 client -----------------------------------------------------------------------


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_v2_with_tritonclient(server: Server, models) -> None:
    client = triton.InferenceServerClient(url=server.url.removeprefix("http://"))
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("tiny")
    metadata = client.get_model_metadata("tiny")
    assert metadata["inputs"][0] == {"name": "images", "datatype": "FP32", "shape": [-1, 3, 416, 416]}
    described = httpx.get(f"{server.url}/predict/tiny").json()  # forklift's own description of the model
    coco = shared("darknet/coco.names").read_text().splitlines()
    assert described == {"name": "tiny", "task": "detect", "labels": coco, "input_size": [416, 416]}
    predictor = TorchPredictor(open_model_dir(models["tiny"]), PredictOptions())
    for binary, size in ((True, 3), (False, 1)):  # JSON tensors are ten times larger: one image
        batch = np.random.default_rng(size).random((size, 3, 416, 416), dtype=np.float32)
        expected = np.stack(predictor.infer(list(batch)))
        tensor = triton.InferInput("images", list(batch.shape), "FP32")
        tensor.set_data_from_numpy(batch, binary_data=binary)
        result = client.infer("tiny", [tensor], outputs=[triton.InferRequestedOutput("detections", binary_data=binary)])
        np.testing.assert_allclose(result.as_numpy("detections"), expected, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize(
    ("shape", "datatype", "message"),
    [([1, 3, 32, 32], "FP32", "shape [1, 3, 32, 32] does not match"), ([1, 3, 416, 416], "INT32", "datatype 'INT32'")],
)
def test_v2_wrong_shape_or_datatype(server: Server, shape, datatype, message) -> None:
    client = triton.InferenceServerClient(url=server.url.removeprefix("http://"))
    tensor = triton.InferInput("images", shape, datatype)
    tensor.set_data_from_numpy(np.zeros(shape, dtype=np.float32 if datatype == "FP32" else np.int32))
    with pytest.raises(InferenceServerException, match=re.escape(message)) as error:
        client.infer("tiny", [tensor])
    assert error.value.status() == "400"
    assert_still_answers(server)


def test_v2_malformed_requests_are_refused_by_field(server: Server) -> None:
    url = f"{server.url}/v2/models/tiny/infer"
    nan = struct.pack("<f", float("nan")) * (3 * 416 * 416)
    tensor = {"name": "images", "datatype": "FP32", "shape": [1, 3, 416, 416]}
    cases = [
        (
            {"inputs": [{**tensor, "shape": [1.5, 3, 416, 416]}]},
            b"",
            "inputs.0.shape.0: Input should be a valid integer",
        ),
        ({"inputs": [{**tensor, "shape": [2**70, 3, 416, 416]}]}, b"", "inputs.0.shape.0: Input should be less than"),
        ({"inputs": [1, 2]}, b"", "inputs.0: Input should be an object"),
        ({"inputs": [tensor], "parameters": []}, b"", "parameters: Input should be an object"),
        ({"inputs": "images"}, b"", "inputs: Input should be a valid array"),
        (
            {"inputs": [{**tensor, "parameters": {"binary_data_size": len(nan)}}]},
            nan,
            "input 'images': nan at [0, 0, 0, 0] is not a finite float32 number (this model takes no missing values)",
        ),
    ]
    for request, binary, message in cases:
        header = json.dumps(request).encode()
        answer = httpx.post(url, content=header + binary, headers={"Inference-Header-Content-Length": str(len(header))})
        assert_error(answer, 400, message)
    assert_still_answers(server)


# ---- metrics -----------------------------------------------------------------------------------------------


def test_metrics_prometheus_text(server: Server) -> None:
    assert_still_answers(server)
    text = httpx.get(f"{server.url}/metrics").text
    for name in (
        'forklift_requests_total{code="200",model="tiny",protocol="native"}',
        'forklift_stage_seconds_count{model="tiny",stage="inference"}',
        'forklift_batch_images_count{model="tiny"}',
        'forklift_queue_depth{model="tiny"}',
        'forklift_worker_batches_total{model="tiny",worker="0"}',
        "forklift_request_seconds_bucket",
    ):
        assert name in text, name


# ---- bad input ---------------------------------------------------------------------------------------------


def _png_declaring(width: int, height: int) -> bytes:
    """A tiny PNG whose header claims width x height pixels: a decompression bomb's calling card."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + header
    ihdr = struct.pack(">I", len(header)) + chunk + struct.pack(">I", zlib.crc32(chunk))
    data = zlib.compress(b"\0" * 64)
    idat = struct.pack(">I", len(data)) + b"IDAT" + data + struct.pack(">I", zlib.crc32(b"IDAT" + data))
    return b"\x89PNG\r\n\x1a\n" + ihdr + idat


def _big_jpeg(megabytes: float) -> bytes:
    noise = np.random.default_rng(0).integers(0, 255, (1500, 1500, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(noise).save(out, "BMP")
    data = out.getvalue()
    return data * int(megabytes * 1024 * 1024 // len(data) + 1)


@pytest.mark.parametrize(
    ("name", "payload", "status", "words"),
    [
        ("empty", None, 400, "empty request body"),
        ("text", b"just some text, not a picture", 400, "not an image"),
        ("truncated", "truncated", 400, "corrupt or truncated image"),
        ("bomb", _png_declaring(30_000, 30_000), 413, "900,000,000 pixels together, over the limit of 100,000,000"),
        (
            "too big",
            _big_jpeg(UPLOAD_LIMIT_MB + 1),
            413,
            "over this server's limit of 2,097,152 bytes (--max-upload-mb)",
        ),
    ],
)
def test_bad_uploads(server: Server, name: str, payload, status: int, words: str) -> None:
    url = f"{server.url}/predict/tiny"
    if payload is None:
        response = httpx.post(url, timeout=60)
    else:
        content = dog()[:4000] if payload == "truncated" else payload
        response = httpx.post(url, files={"files": (f"{name}.jpg", content)}, timeout=60)
    assert_error(response, status, words)
    if status == 400 and payload is not None:
        assert f"{name}.jpg" in response.json()["error"]  # the error names the file
    assert_still_answers(server)


def test_a_form_without_an_image_file_says_what_it_holds(server: Server) -> None:
    """`-F files=hello` (text, not a file) was told it had no 'files' field, listing 'files'; a body cut after a
    part's headers was told its fields were 'none'."""
    url = f"{server.url}/predict/tiny"
    cut = b'--b\r\nContent-Disposition: form-data; name="files"; filename="a.jpg"\r\n'
    multipart = {"content-type": "multipart/form-data; boundary=b"}
    for response, words in [
        (httpx.post(url, data={"files": "hello"}, files={"x": ("x.txt", b"x")}),
         "the multipart form's 'files' field is text, not a file"),
        (httpx.post(url, content=cut, headers=multipart), "the multipart form holds no field: is the body cut short"),
        (httpx.post(url, files={"image": ("a.jpg", dog())}),
         "no 'files' field with an image in the multipart form (fields: image)"),
    ]:  # fmt: skip
        assert_error(response, 400, words)


def test_a_request_may_declare_at_most_max_pixels_together(server: Server) -> None:
    """Each image is under the limit, together they are over it: refused from the headers, before any decoding
    (a worker decodes all of a request's images before it infers)."""
    files = [("files", (f"part{k}.png", _png_declaring(8000, 5000))) for k in range(3)]
    response = httpx.post(f"{server.url}/predict/tiny", files=files, timeout=60)
    assert_error(response, 413, "the request's 3 image(s) have 120,000,000 pixels together, over the limit of "
                                 "100,000,000 a request may have")  # fmt: skip
    assert_still_answers(server)


def test_a_chunked_upload_is_counted_as_it_arrives(server: Server) -> None:
    """No Content-Length to check first: the bytes are counted, and the form is refused once they pass the limit."""
    boundary = "forklift-test"
    megabyte = b"\0" * (1 << 20)

    def chunks():  # type: ignore[no-untyped-def]
        yield (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"big.jpg\"\r\n"
               "Content-Type: image/jpeg\r\n\r\n").encode()  # fmt: skip
        for _ in range(UPLOAD_LIMIT_MB + 2):
            yield megabyte
        yield f"\r\n--{boundary}--\r\n".encode()

    response = httpx.post(f"{server.url}/predict/tiny", content=chunks(), timeout=60,
                          headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})  # fmt: skip
    assert_error(response, 413, "over this server's limit of")
    assert_still_answers(server)


def test_unknown_model_missing_field_unknown_route(server: Server) -> None:
    assert_error(
        httpx.post(f"{server.url}/predict/nope", content=dog()), 404, "unknown model 'nope' (served: shapes, tiny)"
    )
    missing = httpx.post(f"{server.url}/predict/tiny", files={"image": ("dog.jpg", dog())})
    assert_error(missing, 400, "no 'files' field")
    assert_error(httpx.get(f"{server.url}/no/such/route"), 404, "/no/such/route")
    assert_error(httpx.post(f"{server.url}/predict/tiny", params={"conf": "high"}, content=dog()), 400, "not a number")
    assert_still_answers(server)


# ---- overload, crashes, draining ---------------------------------------------------------------------------


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def _burst(url: str, count: int) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=count)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        return await asyncio.gather(*(client.post(url, files={"files": ("dog.jpg", dog())}) for _ in range(count)))


@pytest.mark.slow  # a server of its own
def test_burst_over_capacity_gets_503_and_memory_stays_bounded(models) -> None:
    server = Server(f"{models['tiny']}=tiny", "--instances", "1", "--queue-size", "4", "--max-batch", "2")
    try:
        asyncio.run(_burst(f"{server.url}/predict/tiny", 200))  # the allocator's peak for 200 open requests
        before = _rss_kib(server.process.pid)
        for _ in range(3):  # were the ~190 refused bodies kept, each burst would add over 30 MB
            responses = asyncio.run(_burst(f"{server.url}/predict/tiny", 200))
        codes = [r.status_code for r in responses]
        assert set(codes) <= {200, 503} and codes.count(503) > 100 and codes.count(200) >= 4
        refused = next(r for r in responses if r.status_code == 503)
        assert refused.headers["retry-after"] == "1" and "requests already waiting" in refused.json()["error"]
        assert _rss_kib(server.process.pid) - before < 48 * 1024  # the refused bodies were not kept
        assert_still_answers(server)
        assert 'forklift_rejected_total{model="tiny"}' in httpx.get(f"{server.url}/metrics").text
    finally:
        assert server.stop() == 0


@pytest.mark.slow  # a server of its own
def test_crashed_worker_fails_its_requests_then_restarts(models) -> None:
    server = Server(f"{models['tiny']}=tiny", "--instances", "1")
    try:
        (pid,) = server.wait_healthy()["models"]["tiny"]["pids"]
        os.kill(pid, signal.SIGKILL)
        start = time.monotonic()
        response = httpx.post(f"{server.url}/predict/tiny", files={"files": ("dog.jpg", dog())}, timeout=120)
        assert time.monotonic() - start < 60  # answered, not hung
        assert_error(response, 500, "died while answering; it is being restarted")
        deadline = time.monotonic() + 120
        while (new := server.wait_healthy()["models"]["tiny"]["pids"]) in ([pid], [None]):
            assert time.monotonic() < deadline
            time.sleep(0.5)
        assert new != [pid]
        assert_still_answers(server)
        assert 'forklift_worker_restarts_total{model="tiny"} 1.0' in httpx.get(f"{server.url}/metrics").text
    finally:
        assert server.stop() == 0


@pytest.mark.slow  # a server of its own
@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl-C"])
def test_sigterm_or_ctrl_c_drains_in_flight_requests(models, how: str) -> None:
    """SIGTERM to the server; Ctrl-C: SIGINT to the terminal's whole foreground group, its workers too."""
    server = Server(f"{models['tiny']}=tiny", "--instances", "1", "--max-batch", "1")

    async def scenario() -> list[httpx.Response]:
        pending = asyncio.ensure_future(_burst(f"{server.url}/predict/tiny", 12))
        async with httpx.AsyncClient() as client:  # wait until the server holds all 12: one running, 11 queued
            for _ in range(200):
                text = (await client.get(f"{server.url}/metrics")).text
                depth = [float(x.split()[-1]) for x in text.splitlines() if x.startswith("forklift_queue_depth{")]
                waiting = depth[0] if depth else 0.0
                if waiting >= 11:
                    break
                await asyncio.sleep(0.05)
        if how == "SIGTERM":
            server.process.send_signal(signal.SIGTERM)
        else:
            workers = psutil.Process(server.process.pid).children(recursive=True)
            for pid in [server.process.pid, *(worker.pid for worker in workers)]:
                os.kill(pid, signal.SIGINT)
        return await pending

    responses = asyncio.run(scenario())
    assert [r.status_code for r in responses] == [200] * 12
    assert server.process.wait(timeout=60) == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/healthz")
    assert "Traceback" not in server.log.read_text()


@pytest.mark.slow  # a server of its own
def test_single_model_root_and_json_errors_are_json(models) -> None:
    server = Server(models["shapes"], "--instances", "1")
    try:
        response = httpx.post(f"{server.url}/", files={"files": ("dog.jpg", dog())}, timeout=60)
        assert response.status_code == 200 and json.loads(response.text)["status"] == "OK"
        assert_error(httpx.delete(f"{server.url}/predict/shapes"), 405, "Method Not Allowed")
    finally:
        assert server.stop() == 0
