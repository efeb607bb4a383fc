"""`forklift serve` of tabular model directories (`forklift ml fit`) over loopback, with real clients: JSON rows and
v2 tensors answered as the fitted estimator answers, concurrent callers' rows batched and split back, bad input
refused in one line naming the row and the feature, and a detector served beside a tabular model.

The models are fitted here on generated rows: a boosting classifier with a category column and missing values, a
ridge regressor, and an SVM (a classifier that gives scores, not probabilities).
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import pickle
import re
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest
import schemathesis
import tritonclient.http as triton
import xgboost
from helpers import CFGS, Server, shared
from hypothesis import HealthCheck, settings
from tritonclient.utils import InferenceServerException

from forklift.cli import main
from forklift.errors import ForkliftError
from forklift.model_files.model_dir import open_model_dir, tabular_settings
from forklift.model_files.tabular import TabularSettings, encode_columns
from forklift.serve.openapi import openapi
from forklift.serve.worker_placement import served_models

COLOURS = ("red", "green", "blue")
NAMES = ("a", "b", "colour")
Row = dict[str, Any]


def _estimator(model: Path) -> Any:
    """The fitted estimator model.pkl holds: the reference the served answers are checked against."""
    return pickle.loads((model / "model.pkl").read_bytes())


def _rows(count: int, *, seed: int, missing: bool) -> list[Row]:
    """Rows of two numbers (b sometimes missing) and a colour; rounded, so CSV and JSON carry the same values."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(count):
        a, b = (round(float(v), 3) for v in rng.normal(size=2))
        rows.append({"a": a, "b": None if missing and rng.random() < 0.15 else b, "colour": COLOURS[rng.integers(3)]})
    return rows


def _label(row: Row) -> str:
    return "yes" if row["a"] + (row["b"] or 0.0) + (1.5 if row["colour"] == "red" else 0.0) > 0.5 else "no"


def _value(row: Row) -> float:
    return round(2 * row["a"] - row["b"] + COLOURS.index(row["colour"]), 3)


def _write_csv(path: Path, rows: list[Row]) -> Path:
    with path.open("w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)  # None is an empty cell: a missing value
    return path


def _fit(root: Path, name: str, model: str, target: str, rows: list[Row]) -> Path:
    data = _write_csv(root / f"{name}.csv", rows)
    assert main(["ml", "fit", "--data", str(data), "--target", target, "--model", model, str(root / name)]) == 0
    return root / name


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tabular")
    classified = [row | {"label": _label(row)} for row in _rows(300, seed=0, missing=True)]
    complete = _rows(300, seed=1, missing=False)
    return {
        "clf": _fit(root, "clf", "boosting", "label", classified),
        "reg": _fit(root, "reg", "ridge", "value", [row | {"value": _value(row)} for row in complete]),
        "svm": _fit(root, "svm", "svm", "label", [row | {"label": _label(row)} for row in complete]),
        "imp": _imported(root, classified),
    }


def _numbers(rows: list[Row]) -> np.ndarray:
    return np.array([[row["a"], np.nan if row["b"] is None else row["b"]] for row in rows])


def _imported(root: Path, rows: list[Row]) -> Path:
    """An XGBoost classifier fitted on the rows' numbers (a and b), saved by XGBoost and made a model directory by
    `forklift ml import`."""
    labels = [int(row["label"] == "yes") for row in rows]
    booster = xgboost.XGBClassifier(n_estimators=10, max_depth=3, n_jobs=1)
    booster.fit(pd.DataFrame(_numbers(rows), columns=["a", "b"]), labels).save_model(root / "booster.json")
    assert main(["ml", "import", str(root / "booster.json"), str(root / "imp")]) == 0
    return root / "imp"


@pytest.fixture(scope="module")
def server(fitted: dict[str, Path]):
    running = Server(f"{fitted['clf']}=clf", f"{fitted['reg']}=reg", "--instances", "1", "--max-batch", "64")
    yield running
    assert running.stop() == 0


def _settings(model: Path) -> TabularSettings:
    return tabular_settings(open_model_dir(model).config, model)


def _matrix(model: Path, rows: list[Row]) -> np.ndarray:
    """The rows as the estimator was fitted on them: the table's encoding (columns), not the JSON rows' one."""
    columns = {
        "a": np.array([r["a"] for r in rows], dtype=np.float64),
        "b": np.array([np.nan if r["b"] is None else r["b"] for r in rows], dtype=np.float64),
        "colour": np.array([r["colour"] for r in rows], dtype=object),
    }
    return encode_columns(_settings(model), columns)


def _predict(url: str, body: Any) -> dict:
    response = httpx.post(url, json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def assert_error(response: httpx.Response, status: int, words: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["status"] == "error" and words in body["error"] and "\n" not in body["error"], body


# ---- native protocol ---------------------------------------------------------------------------------------------


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_rows_by_name_and_as_arrays_answer_as_the_estimator(server: Server, fitted, tmp_path: Path, capsys) -> None:
    rows = _rows(40, seed=7, missing=True)
    by_name = _predict(f"{server.url}/predict/clf", {"rows": rows})
    as_arrays = _predict(f"{server.url}/predict/clf", [[row[name] for name in NAMES] for row in rows])
    assert set(by_name) == {"status", "predictions", "probabilities", "classes", "timing"}
    assert by_name["status"] == "OK" and by_name["classes"] == ["no", "yes"]
    assert by_name["predictions"] == as_arrays["predictions"] and by_name["probabilities"] == as_arrays["probabilities"]
    estimator = _estimator(fitted["clf"])
    expected = estimator.predict_proba(_matrix(fitted["clf"], rows))
    np.testing.assert_allclose(by_name["probabilities"], expected, atol=1e-5)
    assert by_name["predictions"] == list(estimator.predict(_matrix(fitted["clf"], rows)))
    assert main(["ml", "predict", str(fitted["clf"]), str(_write_csv(tmp_path / "rows.csv", rows)), "--json"]) == 0
    predicted = json.loads(capsys.readouterr().out)
    assert by_name["predictions"] == [p["prediction"] for p in predicted]
    scored = [[p["score_no"], p["score_yes"]] for p in predicted]
    np.testing.assert_allclose(by_name["probabilities"], scored, atol=1e-6)
    assert set(by_name["timing"]) == {"preprocessing", "inference", "postprocessing"}


def test_the_try_it_page_of_tables_only_says_how_to_send_rows(server: Server) -> None:
    """It offered an image upload every answer to which was an error."""
    page = httpx.get(f"{server.url}/test")
    assert page.status_code == 200 and "No image model is served here" in page.text and "<form" not in page.text


def test_a_regressor_answers_values(server: Server, fitted) -> None:
    rows = _rows(25, seed=8, missing=False)
    body = _predict(f"{server.url}/predict/reg", {"rows": rows})
    assert set(body) == {"status", "predictions", "timing"}
    expected = _estimator(fitted["reg"]).predict(_matrix(fitted["reg"], rows))
    np.testing.assert_allclose(body["predictions"], expected, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(body["predictions"], [_value(row) for row in rows], atol=0.05)  # what it learnt


@pytest.mark.slow  # a server of its own (the module's holds the two instances this machine's CPUs fit)
def test_an_imported_xgboost_model_answers_as_xgboost(fitted) -> None:
    rows = [{"a": row["a"], "b": row["b"]} for row in _rows(30, seed=9, missing=True)]
    with Server(f"{fitted['imp']}=imp", "--instances", "1") as running:
        body = _predict(f"{running.url}/predict/imp", {"rows": rows})
        missing_b = httpx.post(f"{running.url}/predict/imp", json={"rows": [{"a": 1.0}]})
    assert body["classes"] == [0, 1]
    booster = xgboost.Booster(model_file=str(fitted["imp"].parent / "booster.json"))
    expected = booster.predict(xgboost.DMatrix(_numbers(rows), feature_names=["a", "b"]))
    np.testing.assert_allclose(np.array(body["probabilities"])[:, 1], expected, atol=1e-5)
    assert_error(missing_b, 400, "'b'")


# ---- KServe v2 with a real v2 client -----------------------------------------------------------------------------


def test_v2_with_tritonclient(server: Server, fitted) -> None:
    client = triton.InferenceServerClient(url=server.url.removeprefix("http://"))
    assert client.is_model_ready("clf") and client.is_model_ready("reg")
    width = _settings(fitted["clf"]).width
    metadata = client.get_model_metadata("clf")
    assert metadata["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [-1, width]}]
    assert metadata["outputs"] == [{"name": "probabilities", "datatype": "FP32", "shape": [-1, 2]}]
    regression = {"name": "predictions", "datatype": "FP32", "shape": [-1, 1]}
    assert client.get_model_metadata("reg")["outputs"] == [regression]
    matrix = _matrix(fitted["clf"], _rows(30, seed=9, missing=True))
    complete = ~np.isnan(matrix).any(axis=1)
    assert not complete.all()  # missing values are NaN, which JSON lacks: the binary form carries them
    expected = _estimator(fitted["clf"]).predict_proba(matrix)
    for binary, kept in ((True, np.ones_like(complete)), (False, complete)):
        tensor = triton.InferInput("X", [int(kept.sum()), matrix.shape[1]], "FP32")
        tensor.set_data_from_numpy(matrix[kept], binary_data=binary)
        wanted = [triton.InferRequestedOutput("probabilities", binary_data=binary)]
        result = client.infer("clf", [tensor], outputs=wanted).as_numpy("probabilities")
        np.testing.assert_allclose(result, expected[kept], atol=1e-5)
    values = _matrix(fitted["reg"], _rows(5, seed=10, missing=False))
    tensor = triton.InferInput("X", list(values.shape), "FP32")
    tensor.set_data_from_numpy(values)
    result = client.infer("reg", [tensor]).as_numpy("predictions")
    np.testing.assert_allclose(result[:, 0], _estimator(fitted["reg"]).predict(values), rtol=1e-5, atol=1e-4)
    assert client.infer("reg", [tensor], model_version="1").as_numpy("predictions").shape == result.shape
    assert client.is_model_ready("reg", model_version="1") and not client.is_model_ready("reg", model_version="99")
    for asked in (lambda: client.infer("reg", [tensor], model_version="99"),
                  lambda: client.get_model_metadata("reg", model_version="abc")):  # fmt: skip
        with pytest.raises(InferenceServerException, match="model 'reg' has no version"):
            asked()  # the one version it has is 1: another is not answered as if it were


def test_a_client_builds_the_v2_tensor_from_the_models_description(server: Server, fitted) -> None:
    """The description (GET /predict/{model}) names the v2 tensor's columns in order: a client that knows only it
    turns rows of features into the tensor, and v2 answers what JSON rows get."""
    described = httpx.get(f"{server.url}/predict/clf").json()
    categories = list(_settings(fitted["clf"]).features[2].categories)
    assert sorted(categories) == sorted(COLOURS)
    assert described["features"] == [
        {"name": "a", "kind": "number"},
        {"name": "b", "kind": "number"},
        {"name": "colour", "kind": "category", "categories": categories},
    ]
    assert described["v2_columns"] == ["a", "b", *(f"colour={value}" for value in categories)]
    assert described["task"] == "tabular" and described["classes"] == ["no", "yes"] and described["target"] == "label"
    assert described["missing_values"] and described["estimator"] == "BoostingMachineClassifier"

    def column(row: Row, name: str) -> float:
        feature, is_value, value = name.partition("=")
        if is_value:
            return float(row[feature] == value)
        return np.nan if row[feature] is None else row[feature]

    rows = _rows(20, seed=11, missing=True)
    matrix = np.array([[column(row, name) for name in described["v2_columns"]] for row in rows], dtype=np.float32)
    tensor = triton.InferInput("X", list(matrix.shape), "FP32")
    tensor.set_data_from_numpy(matrix, binary_data=True)
    client = triton.InferenceServerClient(url=server.url.removeprefix("http://"))
    result = client.infer("clf", [tensor]).as_numpy("probabilities")
    np.testing.assert_allclose(
        result, _predict(f"{server.url}/predict/clf", {"rows": rows})["probabilities"], atol=1e-6
    )
    regression = httpx.get(f"{server.url}/predict/reg").json()
    assert regression["classes"] == [] and regression["v2_columns"] == list(_settings(fitted["reg"]).columns)
    assert_error(httpx.get(f"{server.url}/predict/nope"), 404, "unknown model 'nope'")


@pytest.mark.parametrize(
    ("name", "rows", "columns", "datatype", "wanted", "message"),
    [
        ("X", 2, 1, "FP32", "probabilities", "input 'X': shape [2, 6] does not match [-1, 5]"),
        ("X", 2, 0, "INT32", "probabilities", "input 'X': datatype 'INT32' is not supported"),
        ("images", 2, 0, "FP32", "probabilities", "unknown input 'images': this model takes 'X'"),
        ("X", 0, 0, "FP32", "probabilities", "input 'X': shape [0, 5] holds no rows; send a batch of 1 or more"),
        ("X", 2, 0, "FP32", "scores", "unknown output 'scores': this model gives 'probabilities'"),
    ],
)
def test_v2_wrong_input(
    server: Server, fitted, name: str, rows: int, columns: int, datatype: str, wanted: str, message: str
) -> None:
    client = triton.InferenceServerClient(url=server.url.removeprefix("http://"))
    shape = [rows, _settings(fitted["clf"]).width + columns]
    tensor = triton.InferInput(name, shape, datatype)
    tensor.set_data_from_numpy(np.zeros(shape, dtype=np.float32 if datatype == "FP32" else np.int32))
    with pytest.raises(InferenceServerException, match=re.escape(message)) as error:
        client.infer("clf", [tensor], outputs=[triton.InferRequestedOutput(wanted)])
    assert error.value.status() == "400"


@pytest.mark.parametrize(
    ("model", "value", "message"),
    [
        ("clf", 1e300, "input 'X': 1e+300 at [1, 0] is not a finite float32 number (NaN is a missing value)"),
        ("reg", None, "input 'X': nan at [1, 0] is not a finite float32 number (this model takes no missing values)"),
        ("clf", -(10**400), "input 'X': -inf at [1, 0] is not a finite float32 number"),  # was a 500
        ("clf", True, "input 'X': data value 5 is true, not a number"),  # was read as 1
        ("clf", "39", "input 'X': data value 5 is \"39\", not a number"),  # was read as 39
        ("clf", "NaN", "input 'X': data value 5 is \"NaN\", not a number"),  # was a missing value
    ],
)
def test_v2_json_values_beyond_float32_are_named_by_position(
    server: Server, fitted, model: str, value: object, message: str
) -> None:
    """JSON data as sent: a number float32 cannot hold, or NaN (JSON's null) for a model without missing values;
    a value that is no JSON number at all, as the rows route refuses it."""
    width = _settings(fitted[model]).width
    assert width == 5
    data: list[object] = [0.5] * (2 * width)
    data[width] = value
    tensor = {"name": "X", "datatype": "FP32", "shape": [2, width], "data": data}
    response = httpx.post(f"{server.url}/v2/models/{model}/infer", json={"inputs": [tensor]})
    assert_error(response, 400, message)
    log = server.log.read_text()
    assert "RuntimeWarning" not in log and "overflow" not in log


def test_v2_nested_data_follows_its_shape(server: Server, fitted) -> None:
    """Rows of 6 and 4 values were taken as a [2, 5] tensor, flattened; rows of 5 and 5 are, as they were."""
    url = f"{server.url}/v2/models/clf/infer"
    ragged, even = ([[0.5] * 6, [0.5] * 4], [[0.5] * 5, [0.5] * 5])
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [2, 5], "data": ragged}]}
    assert_error(httpx.post(url, json=body), 400, "input 'X': its nested data is not shaped [2, 5] (or give it flat)")
    body["inputs"][0]["data"] = even
    assert httpx.post(url, json=body).status_code == 200


def test_v2_binary_bytes_that_do_not_match_their_header_are_named(server: Server, fitted) -> None:
    """Fewer bytes than binary_data_size (it said the size, not what came), more (ignored), none at all."""
    width = _settings(fitted["clf"]).width
    header = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, width]}]}
    sized = {"inputs": [{**header["inputs"][0], "parameters": {"binary_data_size": 4 * width}}]}
    inline = {"inputs": [{**header["inputs"][0], "data": [0.5] * width}]}
    rows = np.zeros(width, dtype="<f4").tobytes()
    cases = [
        (sized, rows[:8], f"input 'X': 8 bytes follow the JSON header, where binary_data_size says {4 * width}"),
        (sized, rows + b"junk", f"input 'X': {4 * width + 4} bytes follow the JSON header"),
        (header, b"", "input 'X': no data (give data, or binary_data_size and the bytes after the JSON)"),
        (inline, b"junk", "input 'X': its data is in the JSON, and 4 bytes follow it that no input claims"),
        (
            {"inputs": [{**inline["inputs"][0], "parameters": {"binary_data_size": 4 * width}}]},
            rows,
            "input 'X': give data or binary_data_size, not both",
        ),  # the JSON's data was dropped unsaid
        (
            {"inputs": [{**header["inputs"][0], "parameters": {"binary_data_size": str(4 * width)}}]},
            rows,
            f"input 'X': binary_data_size '{4 * width}' is not a number of bytes",
        ),
        (
            {**sized, "parameters": {"binary_data_output": "false"}},
            rows,
            'binary_data_output: "false" is not true or false',
        ),  # was an answer in binary, to a JSON client
        (
            {**sized, "outputs": [{"name": "probabilities", "parameters": {"binary_data": 0}}]},
            rows,
            "outputs 'probabilities': binary_data: 0 is not true or false",
        ),
    ]
    for body, binary, message in cases:
        text = json.dumps(body).encode()
        answer = httpx.post(f"{server.url}/v2/models/clf/infer", content=text + binary,
                            headers={"Inference-Header-Content-Length": str(len(text))})  # fmt: skip
        assert_error(answer, 400, message)


# ---- batching ----------------------------------------------------------------------------------------------------


def _metric(text: str, name: str) -> float:
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


async def _burst(url: str, bodies: list[list[Row]]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=len(bodies))) as client:
        return await asyncio.gather(*(client.post(url, json={"rows": rows}) for rows in bodies))


def test_concurrent_callers_rows_are_batched_and_split_back(server: Server, fitted) -> None:
    """Callers of one to three rows each, at once: their rows share batches (fewer batches than requests), and each
    caller gets its own rows' answers."""
    rows = _rows(120, seed=11, missing=True)
    expected = _predict(f"{server.url}/predict/clf", {"rows": rows})["probabilities"]
    bodies, starts, start = [], [], 0
    while start < len(rows):
        size = 1 + len(bodies) % 3
        bodies.append(rows[start : start + size])
        starts.append(start)
        start += size
    batches = 'forklift_worker_batches_total{model="clf"'
    for _ in range(3):  # the merging depends on timing: a burst in which every request went alone is sent again
        before = _metric(httpx.get(f"{server.url}/metrics").text, batches)
        responses = asyncio.run(_burst(f"{server.url}/predict/clf", bodies))
        for response, first, sent in zip(responses, starts, bodies, strict=True):
            assert response.status_code == 200, response.text
            np.testing.assert_allclose(response.json()["probabilities"], expected[first : first + len(sent)], atol=1e-6)
        if _metric(httpx.get(f"{server.url}/metrics").text, batches) - before < len(bodies):
            break
    else:
        pytest.fail(f"{len(bodies)} concurrent requests never shared a batch")


async def _spaced(url: str, count: int, gap_s: float) -> list[httpx.Response]:
    """``count`` one-row requests, each sent ``gap_s`` after the one before (none waits for an answer)."""
    async with httpx.AsyncClient(timeout=60) as client:

        async def send(index: int) -> httpx.Response:
            await asyncio.sleep(index * gap_s)
            return await client.post(url, json={"rows": _rows(1, seed=index, missing=False)})

        return await asyncio.gather(*(send(index) for index in range(count)))


@pytest.mark.parametrize(("timeout_ms", "batches"), [(0, 4), (1500, 1)])
@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_a_batch_timeout_waits_for_requests_that_come_later(fitted, timeout_ms: int, batches: int) -> None:
    """Four requests 100 ms apart: without a timeout each goes alone (the queue is empty when the worker takes it);
    with 1.5 s the worker waits for the later ones and runs the four rows as one batch."""
    with Server(f"{fitted['clf']}=clf", "--instances", "1", "--batch-timeout-ms", str(timeout_ms)) as running:
        responses = asyncio.run(_spaced(f"{running.url}/predict/clf", 4, 0.1))
        assert [response.status_code for response in responses] == [200] * 4
        metrics = httpx.get(f"{running.url}/metrics").text
        assert _metric(metrics, 'forklift_batch_images_count{model="clf"}') == batches
        assert _metric(metrics, 'forklift_batch_images_sum{model="clf"}') == 4


# ---- bad input ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "body", "words"),
    [
        ("clf", {"rows": [{"a": 1.0, "colour": "red"}]}, "row 0: missing feature 'b'"),
        ("clf", {"rows": [{"a": 1, "b": 2, "colour": "red", "d": 3}]}, "row 0: unknown feature 'd' (features: a, b,"),
        ("clf", {"rows": [{"a": 1, "bb": 2, "colour": "red"}]}, "row 0: missing feature 'b', and 'bb' is not one"),
        ("clf", [[1, 2, "red"], ["x", 2, "red"]], "row 1: feature 'a': \"x\" is not a number"),
        ("clf", [[1, 2, "red"], [3, 4, "blue"], [5, True, "red"]], "row 2: feature 'b': true is not a number"),
        ("clf", {"rows": [{"a": 1, "b": [2], "colour": "red"}]}, "row 0: feature 'b': [2] is not a number"),
        ("clf", [[1, 2, "purple"]], "row 0: feature 'colour': unknown category 'purple' (the model knows 'blue'"),
        ("clf", [[1, 2]], "row 0: 2 values for 3 features (a, b, colour)"),
        ("clf", [[1e39, 2, "red"]], "row 0: feature 'a': 1e+39 is not a finite float32 number"),
        ("reg", [[1, None, "red"]], "row 0: feature 'b' is empty or null, and this model takes no missing values"),
        ("clf", {"rows": 3}, "the rows are a JSON array"),
        ("clf", {"rows": []}, "no rows"),
        ("clf", {"row": [[1, 2, "red"]]}, "unknown key 'row'"),
        ("clf", b'{"rows": [[1, 2, ', "the body is not JSON (unexpected end of data: line 1 column 18"),
        ("clf", b"[" * 100_000, "the body is not JSON (depth limit exceeded"),
        (
            "clf",
            b'[[NaN, 2, "red"]]',
            "the body is not JSON (unexpected character, expected a JSON value: line 1 "
            "column 3 (char 2)): NaN and Infinity are no JSON numbers; send null for a "
            "missing value",
        ),
        ("clf", b'[[1, -Infinity, "red"]]', "(char 6)): NaN and Infinity are no JSON numbers"),
        ("clf", '[{"c": "rouge\u00e9\u00e9\u00e9", "a": NaN}]'.encode(), "NaN and Infinity are no JSON numbers"),
    ],
)
def test_bad_rows_are_refused_in_one_line(server: Server, model: str, body: Any, words: str) -> None:
    url = f"{server.url}/predict/{model}"
    response = httpx.post(url, content=body) if isinstance(body, bytes) else httpx.post(url, json=body)
    assert_error(response, 400, words)


described = schemathesis.openapi.from_dict(openapi(["clf", "reg"])).include(path="/predict/{model}")


@described.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@pytest.mark.slow  # over 1 s: left out of make test-fast
def test_no_body_the_description_admits_makes_the_server_fail(server: Server, case: schemathesis.Case) -> None:
    """JSON rows (and images) as the description admits them, and as it does not: a 200 or a 4xx, never a 5xx."""
    response = case.call(base_url=server.url, timeout=60)
    assert response.status_code < 500, f"{case.media_type} {case.body!r:.300}: {response.text[:300]}"


def test_images_sent_to_a_tabular_model_are_refused(server: Server) -> None:
    photo = shared("images/dog.jpg").read_bytes()
    words = "model 'clf' is a tabular model: it takes JSON rows ({\"rows\": [...]}), not images"
    assert_error(httpx.post(f"{server.url}/predict/clf", files={"files": ("dog.jpg", photo)}), 400, words)
    assert_error(httpx.post(f"{server.url}/predict/clf", content=photo, headers={"content-type": "image/jpeg"}), 400,
                 words)  # fmt: skip
    assert_error(httpx.post(f"{server.url}/predict/clf", content=photo), 400, "the body is not JSON")
    powerai = httpx.post(f"{server.url}/api/dlapis/clf", files={"files": ("dog.jpg", photo)})
    assert_error(powerai, 400, "a tabular model answers rows of features (JSON rows or v2 tensor 'X'), not images")
    assert _predict(f"{server.url}/predict/clf", [[1, None, "red"]])["predictions"] == ["yes"]  # still answers


# ---- /healthz, /metrics, /openapi.json, and what the serving processes load ----------------------------------------


def test_healthz_metrics_and_description(server: Server) -> None:
    facts = httpx.get(f"{server.url}/healthz").json()
    assert facts["status"] == "OK"
    for name in ("clf", "reg"):
        model = facts["models"][name]
        assert model["ready"] and model["task"] == "tabular" and model["runtime"] == "onnx"
        assert model["features"] == list(NAMES) and model["input"] is None and model["device"] == "cpu"
    _predict(f"{server.url}/predict/reg", [[0.5, 0.5, "blue"]])
    text = httpx.get(f"{server.url}/metrics").text
    for line in (
        'forklift_requests_total{code="200",model="reg",protocol="native"}',
        'forklift_stage_seconds_count{model="reg",stage="inference"}',
        'forklift_batch_images_count{model="reg"}',
        'forklift_worker_batches_total{model="reg",worker="0"}',
    ):
        assert line in text, line
    described = httpx.get(f"{server.url}/openapi.json").json()["paths"]["/predict/{model}"]["post"]["requestBody"]
    assert "rows" in json.dumps(described["content"]["application/json"])


def test_serving_loads_no_torch_scikit_learn_or_pandas(server: Server) -> None:
    """The core install serves tabular models: the server and its workers map none of the training libraries."""
    pids = [server.process.pid] + [pid for model in httpx.get(f"{server.url}/healthz").json()["models"].values()
                                   for pid in model["pids"]]  # fmt: skip
    for pid in pids:
        maps = Path(f"/proc/{pid}/maps").read_text()
        for library in ("torch", "sklearn", "xgboost", "pandas"):
            assert f"/{library}/" not in maps, (pid, library)


# ---- a detector beside a tabular model ---------------------------------------------------------------------------


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_a_detector_and_a_tabular_model_side_by_side(darknet_models, fitted) -> None:
    detector = darknet_models(CFGS / "tiny-detector.cfg", shared("darknet/coco.names"))
    with Server(f"{detector}=detector", f"{fitted['svm']}=svm", "--instances", "1") as running:
        photo = shared("images/dog.jpg").read_bytes()
        detected = httpx.post(f"{running.url}/predict/detector", files={"files": ("dog.jpg", photo)}, timeout=60)
        assert detected.status_code == 200 and "detections" in detected.json()["results"][0]
        rows = _rows(10, seed=12, missing=False)
        scored = _predict(f"{running.url}/predict/svm", {"rows": rows})
        assert set(scored) == {"status", "predictions", "scores", "classes", "timing"}  # an SVM has no probabilities
        assert scored["predictions"] == list(_estimator(fitted["svm"]).predict(_matrix(fitted["svm"], rows)))
        assert_error(httpx.post(f"{running.url}/predict/detector", json={"rows": rows}), 400,
                     "model 'detector' takes images (multipart 'files' or an image body), not JSON rows")  # fmt: skip
        client = triton.InferenceServerClient(url=running.url.removeprefix("http://"))
        assert client.get_model_metadata("svm")["outputs"][0]["name"] == "scores"
        assert client.get_model_metadata("detector")["inputs"][0]["name"] == "images"
        tasks = {name: model["task"] for name, model in httpx.get(f"{running.url}/healthz").json()["models"].items()}
        assert tasks == {"detector": "detect", "svm": "tabular"}


# ---- placement ---------------------------------------------------------------------------------------------------


def test_models_without_instances_given_get_one_each_or_are_refused_saying_why(fitted, monkeypatch) -> None:
    """Models never share CPUs: on two CPUs the automatic plan (one instance of both) makes way for one instance of
    one CPU per model; three models do not fit, which the error says with what to do."""
    two = sorted(os.sched_getaffinity(0))[:2]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(two))
    models, _ = served_models([str(fitted["clf"]), str(fitted["reg"])], runtime=None, instances=None,
                              cpus_per_instance=None, threads=None)  # fmt: skip
    assert [[place.cpus for place in model.places] for model in models] == [[(two[0],)], [(two[1],)]]
    with pytest.raises(ForkliftError, match=r"3 models need an instance each, and models never share CPUs: .*3 "
                       r"instances of 1 CPU do not fit; 2 fit .*; serve them from separate servers"):  # fmt: skip
        served_models([f"{fitted['clf']}=a", f"{fitted['clf']}=b", f"{fitted['reg']}=c"], runtime=None,
                      instances=None, cpus_per_instance=None, threads=None)  # fmt: skip
