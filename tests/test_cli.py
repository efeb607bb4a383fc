"""The `forklift` command as a user runs it: a real subprocess, its output, its exit code."""

from __future__ import annotations

import argparse
import json
import socket
import zipfile
from collections.abc import Iterator
from pathlib import Path

import cv2
import pytest
from helpers import CFGS, forklift, forklift_here, shared

from forklift.cli import build_parser
from forklift.model_files.model_dir import open_model_dir
from forklift.nets.darknet import build_darknet
from forklift.serve.listening import local_url


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "yolov3-tiny"
    forklift(
        "models", "new-darknet", "--cfg", shared("darknet/yolov3-tiny.cfg"), "--names",
        shared("darknet/coco.names"), "--seed", "1", out,
    )  # fmt: skip
    return out


def _verbs(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every verb and sub-verb's parser, by its words (`app user add`)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield " ".join((*path, name)), sub
                yield from _verbs(sub, (*path, name))


def test_help_has_examples() -> None:
    """Every verb and sub-verb, found by walking the parser (a list kept by hand missed `app user add` and six
    more, which had none)."""
    found = dict(_verbs(build_parser()))
    assert {"predict", "app user add", "app token remove", "ml fit", "data synth"} <= set(found)
    missing = [verb for verb, parser in found.items() if "example:\n  forklift " not in (parser.description or "")]
    assert missing == []
    text = forklift("app", "token", "add", "--help").stdout  # as printed
    assert "example:\n  forklift app token add ci --user ana" in text


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["onnx", "openvino", "torch", "opencv"])
def test_predict_json_contract(tiny: Path, runtime: str) -> None:
    photos = [shared("images/dog.jpg"), shared("images/kite.jpg")]
    out = json.loads(forklift("predict", tiny, *photos, "--runtime", runtime, "--json").stdout)
    assert out["status"] == "OK"
    assert set(out["timing"]) == {"preprocessing", "inference", "postprocessing"}
    assert [Path(r["file"]).name for r in out["results"]] == ["dog.jpg", "kite.jpg"]
    labels = set(open_model_dir(tiny).labels)
    for result, photo in zip(out["results"], photos, strict=True):
        height, width = cv2.imread(str(photo)).shape[:2]
        assert result["detections"], "seeded random weights find boxes on these photos"
        for d in result["detections"]:
            box = d["bbox"]
            assert 0 <= box["x1"] <= box["x2"] <= width and 0 <= box["y1"] <= box["y2"] <= height
            assert d["label"] in labels and d["label"] == d["label"].strip()
            assert 0.25 <= d["score"] <= 1


@pytest.mark.slow
def test_predict_table(tiny: Path) -> None:
    text = forklift("predict", tiny, shared("images/dog.jpg"), "--conf", "0.5").stdout
    assert text.splitlines()[0].startswith("file") and "timing:" in text


@pytest.mark.slow
def test_bad_images_reported_others_processed(tiny: Path, tmp_path: Path) -> None:
    dog = shared("images/dog.jpg")
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes(dog.read_bytes()[:5000])
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    text = tmp_path / "notes.txt"
    text.write_text("not a picture")
    corrupt = tmp_path / "corrupt.png"
    corrupt.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    missing = tmp_path / "missing.jpg"
    result = forklift("predict", tiny, truncated, dog, empty, text, corrupt, missing, "--json", check=False)
    assert result.returncode == 2
    out = json.loads(result.stdout)
    by_name = {Path(r["file"]).name: r for r in out["results"]}
    assert by_name["dog.jpg"]["detections"]
    for name in ("truncated.jpg", "empty.jpg", "notes.txt", "corrupt.png", "missing.jpg"):
        assert name in by_name[name]["error"]
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 5 and all(line.startswith("forklift: error: ") for line in errors)
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["predict", "/nonexistent/model", "x.jpg"], "/nonexistent/model: no such model directory"),
        (["models", "inspect", "EMPTY"], "not a model directory"),
        (["predict", "MODEL", "x.jpg", "--runtime", "tensorrt"], "invalid choice: 'tensorrt'"),
        (["predict", "MODEL", "x.jpg", "--conf", "2"], "2 is not between 0 and 1"),
        (
            ["predict", "MODEL", "x.jpg", "--threshold", "0.5"],  # the verb's own usage, not the top level's
            "forklift predict: error: unrecognized arguments: --threshold 0.5 (see 'forklift predict --help')",
        ),
        (["serve", "MODEL", "--url-allow-host", "h:99999"], "'h:99999': the port is not a number from 1 to 65535"),
        (["serve", "MODEL", "--port", "5001", "--url-allow-host", "127.0.0.1:5001"], "the server's own port"),
        (
            ["run", "--port", "70000", "python", "x.py"],
            "forklift run: error: argument --port: 70000 is not a port (1..65535)",
        ),
        (["serve", "MODEL", "--max-upload-mb", "-1"], "forklift serve: error: argument --max-upload-mb: -1 is not a"),
        (["serve", "MODEL", "--batch-timeout-ms", "nan"], "argument --batch-timeout-ms: nan is not a finite number"),
        (["train", "--minutes", "0", "--data", "EMPTY", "OUT"], "argument --minutes: 0 is not a number above 0"),
        (["serve", "MODEL=a", "MODEL=a"], "two served models have the same name (a, a); name them with DIR=NAME"),
        (["serve", "MODEL=a/b"], "the model name 'a/b' is not one URL path segment; name it with DIR=NAME"),
        (["train", "--epochs", "0", "--data", "EMPTY", "OUT"], "forklift train: error: argument --epochs: 0 is"),
        (["train", "--data", "ZIP", "OUT"], "a zip, not a data set folder: unpack"),
        (
            ["train", "--data", "COCO", "OUT"],
            "it looks like a coco export: make a data set of it with 'forklift data import --from coco",
        ),
        # a file where a folder is written: each a traceback (NotADirectoryError, FileExistsError), exit 1
        (["train", "--data", "EMPTY", "--cfg", "CFG", "ZIP"], "OUT_DIR ZIP: a file, not a folder to write in"),
        (["models", "new-darknet", "--cfg", "CFG", "--names", "NAMES", "ZIP"], "OUT_DIR ZIP: a file, not a folder"),
        (["models", "new-style", "ZIP"], "OUT ZIP: a file, not a folder to write in"),
        (["predict", "MODEL", "x.jpg", "--out", "ZIP"], "--out ZIP: a file, not a folder to write in"),
        (["tune", "--data", "EMPTY", "ZIP"], "OUT_DIR ZIP: a file, not a folder to write in"),
        (["app", "--data-dir", "ZIP"], "--data-dir ZIP: a file, not a folder to write in"),
        (["demo", "--out", "ZIP"], "--out ZIP: a file, not a folder to write in"),
        (["stream", "--model", "m", "--video", "EMPTY"], "--video EMPTY: a folder, not a video file"),  # no such file
        (["pod", "/nonexistent/model"], "/nonexistent/model: no such model directory"),  # it said -n was needed
        (["data", "synth", "shapes", "--n", "2", "--size", "64", "--task", "style", "OUT"], "invalid choice: 'style'"),
        (["data", "synth", "shapes", "--n", "2", "--size", "100000", "OUT"], "size 100000 is too large: at most 8192"),
    ],
)
def test_bad_arguments_one_line_exit_2(tiny: Path, tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "coco").mkdir()
    (tmp_path / "coco" / "annotations.json").write_text("{}")
    with zipfile.ZipFile(tmp_path / "export.zip", "w") as archive:
        archive.writestr("dataset.json", "{}")
    stand_ins = {"MODEL": str(tiny), "EMPTY": str(tmp_path / "empty"), "ZIP": str(tmp_path / "export.zip"),
                 "COCO": str(tmp_path / "coco"), "OUT": str(tmp_path / "out"), "MODEL=a": f"{tiny}=a",
                 "MODEL=a/b": f"{tiny}=a/b", "CFG": str(CFGS / "tiny-detector.cfg"),
                 "NAMES": str(CFGS / "shapes.names")}  # fmt: skip
    result = forklift(*[stand_ins.get(a, a) for a in args], check=False)
    assert result.returncode == 2
    message = message.replace("ZIP", stand_ins["ZIP"]).replace("EMPTY", stand_ins["EMPTY"])
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # one line, no usage block before it
    assert "listening" not in result.stdout  # refused before anything starts


def test_a_port_in_use_or_an_address_not_here_is_one_line_before_anything_starts(tiny: Path, tmp_path: Path) -> None:
    """serve and app bind before they say where they listen (uvicorn alone said so, then exited 3)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for args in (["serve", tiny], ["app", "--data-dir", tmp_path / "app"]):
            result = forklift(*args, "--port", port, check=False, timeout=120)
            assert result.returncode == 2 and result.stderr.strip().endswith(
                f"--port {port}: 127.0.0.1:{port} is in use (another server listens there); choose another --port or "
                f"stop that server"), result.stderr  # fmt: skip
            assert len(result.stderr.strip().splitlines()) == 1 and "listening" not in result.stdout, result.stdout
        pod = forklift("pod", tiny, "-n", "1", "--port", port - 1, check=False)  # its instance's port is the one taken
        assert pod.returncode == 2 and f"--port {port - 1}: instance 0 of the pod takes port {port} (instances take " \
            f"the ports after --port): 127.0.0.1:{port} is in use" in pod.stderr, pod.stderr  # fmt: skip
    last = forklift("pod", tiny, "-n", "2", "--port", "65534", check=False)  # it named --base-port, and port 5000
    assert last.returncode == 2 and last.stderr.strip().endswith(
        "--port 65534: the pod's instances take the ports after it, here 2 ports, 65535-65536, past 65535; choose a "
        "lower --port"), last.stderr  # fmt: skip
    assert not (tmp_path / "app").exists()  # the app made no data directory for a run that could not start
    elsewhere = forklift("serve", tiny, "--host", "192.0.2.1", "--port", port, check=False, timeout=120)  # TEST-NET-1
    assert elsewhere.returncode == 2 and "--host 192.0.2.1: not an address of this machine" in elsewhere.stderr
    # where a server on every address is reached here, as `app` and `pod` print it: a server on :: is IPv6 only
    assert [local_url(host, 5000) for host in ("0.0.0.0", "::", "127.0.0.2")] == [
        "http://127.0.0.1:5000", "http://[::1]:5000", "http://127.0.0.2:5000"]  # fmt: skip


def test_a_model_its_workers_cannot_load_is_one_line_and_no_listening(tiny: Path) -> None:
    """A precision the model has no file for is found by the workers as they load it: the server stops and says so
    in one line, exit 2 (it was uvicorn's traceback, exit 3, after "listening on")."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = forklift(
        "serve", tiny, "--port", port, "--precision", "int8", "--instances", "1", check=False, timeout=120
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"forklift: error: {tiny}: no INT8 model; make one with 'forklift models quantize {tiny} --data DATA_SET'"
    ]
    assert "listening" not in result.stdout and "serving" not in result.stdout  # said once the workers have loaded


def test_wrong_runtime_for_caffe_is_clear(tmp_path: Path) -> None:
    (tmp_path / "net.prototxt").write_text("name: 'x'\n")
    (tmp_path / "net.caffemodel").write_bytes(b"")
    (tmp_path / "net.labels").write_text("a\n")
    result = forklift("predict", tmp_path, shared("images/dog.jpg"), "--runtime", "onnx", check=False)
    assert result.returncode == 2
    assert "a caffe model runs with --runtime opencv, not onnx" in result.stderr


@pytest.mark.slow
def test_inspect_counts_against_opencv(tiny: Path) -> None:
    """Parameters: the weights file's values less batch norm's running statistics; FLOPs: OpenCV's own count."""
    facts = json.loads(forklift("models", "inspect", tiny, "--json").stdout)
    assert facts["format"] == "darknet" and facts["task"] == "detect" and facts["classes"] == 80
    assert (facts["input_width"], facts["input_height"]) == (416, 416)
    model = open_model_dir(tiny)
    weights_values = (model.files["weights"].stat().st_size - 20) // 4
    running_stats = 2 * sum(
        m.num_features for m in build_darknet(model.files["cfg"]).modules() if hasattr(m, "running_var")
    )
    assert facts["parameters"] == weights_values - running_stats
    net = cv2.dnn.readNetFromDarknet(str(model.files["cfg"]), str(model.files["weights"]))
    reference = net.getFLOPS((1, 3, 416, 416))
    assert facts["flops"] == pytest.approx(reference, rel=0.02)
    assert "FLOPs" in forklift("models", "inspect", tiny).stdout


@pytest.mark.slow
def test_new_darknet_reproducible_and_export(tmp_path: Path) -> None:
    cfg, names = CFGS / "v3-spp-groups.cfg", CFGS / "shapes.names"
    for name in ("a", "b"):
        forklift("models", "new-darknet", "--cfg", cfg, "--names", names, "--seed", "4", tmp_path / name)
    weights = "v3-spp-groups.weights"
    assert (tmp_path / "a" / weights).read_bytes() == (tmp_path / "b" / weights).read_bytes()
    again = forklift("models", "new-darknet", "--cfg", cfg, "--names", names, tmp_path / "a", check=False)
    assert again.returncode == 2 and "not empty" in again.stderr
    forklift("models", "export", tmp_path / "a", "--to", "onnx")
    assert (tmp_path / "a" / "v3-spp-groups.onnx").stat().st_size > 10_000
    assert open_model_dir(tmp_path / "a").files["onnx"].name == "v3-spp-groups.onnx"
    # OUT after --to, as the usage line has it (argparse's first pass left it over); a new folder named with a /
    # (it was written as a file of that name); OUT under a file: one line
    forklift_here("models", "export", tmp_path / "a", "--to", "onnx", tmp_path / "x.onnx")
    forklift_here("models", "export", tmp_path / "a", "--to", "onnx", f"{tmp_path / 'new'}/")
    assert (tmp_path / "x.onnx").is_file() and (tmp_path / "new" / "v3-spp-groups.onnx").is_file()
    under = forklift_here(
        "models", "export", tmp_path / "a", "--to", "onnx", tmp_path / "x.onnx" / "y.onnx", check=False
    )
    assert under.returncode == 2 and under.stderr.strip().splitlines() == [
        f"forklift: error: {tmp_path}/x.onnx/y.onnx: cannot write it there ({tmp_path}/x.onnx is a file, not a folder)"
    ]
    extra = forklift_here("models", "export", tmp_path / "a", "--to", "onnx", tmp_path / "x.onnx", "more", check=False)
    assert extra.returncode == 2 and "forklift models export: error: unrecognized arguments: more" in extra.stderr
    forklift_here("models", "export", tmp_path / "a", "--to", "onnx", tmp_path / "x.onnx")  # an export: replaced
    (tmp_path / "photo.jpg").write_bytes(b"a picture")
    for out, what in [(tmp_path / "a" / weights, "one of the model's own files"),
                      (tmp_path / "photo.jpg", "a file that is not an ONNX graph")]:  # fmt: skip
        kept = out.read_bytes()  # it wrote the graph over them: the weights' model no longer loaded
        refused = forklift_here("models", "export", tmp_path / "a", "--to", "onnx", out, check=False)
        assert refused.returncode == 2 and f"{out}: exists and is {what}; give another OUT" in refused.stderr
        assert out.read_bytes() == kept
