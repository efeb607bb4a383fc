"""`pip install forklift` without extras serves and predicts exported models: a virtual environment that holds only
the distributions forklift's core requirements reach (read from the installed metadata, so a new import of a
package left out of the core fails here) runs `forklift predict` and `forklift serve` on a Darknet model directory
with its ONNX export beside it, on OpenVINO and ONNX Runtime. The verbs of an extra, run there, say in one line
which extra to install."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import venv
from pathlib import Path

import httpx
import pytest
from helpers import forklift_here, free_port, shared
from packaging.requirements import Requirement

from forklift.serve.process import wait_until_answering


def _core_distributions() -> set[str]:
    """The installed distributions that forklift's requirements without extras reach, markers evaluated."""
    reached: set[str] = set()
    seen: set[tuple[str, frozenset[str]]] = set()
    wanted = [("forklift", frozenset[str]())]
    while wanted:
        name, extras = wanted.pop()
        if (name.lower(), extras) in seen:
            continue
        seen.add((name.lower(), extras))
        reached.add(name)
        for line in importlib.metadata.distribution(name).requires or []:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is None or any(marker.evaluate({"extra": extra}) for extra in (extras or {""})):
                wanted.append((requirement.name, frozenset(requirement.extras)))
    return reached


@pytest.fixture(scope="module")
def core_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv whose site-packages links only the core's installed files: what `pip install forklift` gives."""
    root = tmp_path_factory.mktemp("core") / "venv"
    venv.create(root, with_pip=False, symlinks=True)
    site = next(root.glob("lib/python*/site-packages"))
    for name in _core_distributions():
        distribution = importlib.metadata.distribution(name)
        tops = {Path(str(file)).parts[0] for file in distribution.files or [] if not str(file).startswith("..")}
        for top in tops - {"__pycache__"}:
            source = Path(str(distribution.locate_file(top)))
            if source.exists() and not (site / top).exists():
                (site / top).symlink_to(source)
    return root / "bin" / "python"


def _forklift(python: Path, *args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [str(python), "-m", "forklift.cli", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False, cwd=cwd)


def test_the_core_leaves_out_the_extras(core_python: Path) -> None:
    extras = ("torch", "torchvision", "fastapi", "optuna", "sklearn", "numba")
    probe = f"import importlib.util as u; print([m for m in {extras} if u.find_spec(m)])"
    found = subprocess.run([core_python, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert found == "[]"


@pytest.mark.parametrize("runtime", ["openvino", "onnx"])
@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_predict_on_the_core(core_python: Path, exported_detector: Path, runtime: str) -> None:
    result = _forklift(
        core_python, "predict", exported_detector, shared("images/dog.jpg"), "--runtime", runtime, "--json"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["results"][0]["file"].endswith("dog.jpg")


@pytest.fixture(scope="module")
def two_stage_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Faster R-CNN directory (seeded random weights) as training writes it: its graph, .pt, labels, settings."""
    from forklift.model_files.two_stage_settings import TwoStageSettings
    from forklift.nets.two_stage import build_two_stage
    from forklift.runtime.two_stage_export import write_two_stage_model_dir

    settings = TwoStageSettings("fasterrcnn_mobilenet_v3_large_320_fpn", 3, 128)
    out = tmp_path_factory.mktemp("two_stage") / "model"
    net = build_two_stage(settings, seed=1).eval()
    write_two_stage_model_dir(net, out, ["circle", "square", "triangle"], settings)
    return out


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_a_two_stage_model_predicts_on_the_core_as_on_the_full_install(
    core_python: Path, two_stage_model: Path
) -> None:
    photo = shared("images/dog.jpg")
    result = _forklift(core_python, "predict", two_stage_model, photo, "--conf", "0.01", "--json")
    assert result.returncode == 0, result.stderr
    full = forklift_here("predict", two_stage_model, photo, "--conf", "0.01", "--json").stdout
    assert json.loads(result.stdout)["results"] == json.loads(full)["results"]


@pytest.mark.parametrize("which", ["darknet", "two-stage"])
@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_inspect_on_the_core_counts_the_graph(
    core_python: Path, exported_detector: Path, two_stage_model: Path, which: str
) -> None:
    """Without torch the graph (a Darknet model's export, a two-stage model's own) is what is counted: the same
    facts but the FLOPs."""
    model = exported_detector if which == "darknet" else two_stage_model
    result = _forklift(core_python, "models", "inspect", model, "--json")
    assert result.returncode == 0, result.stderr
    core = json.loads(result.stdout)
    full = json.loads(forklift_here("models", "inspect", model, "--json").stdout)
    same = ("format", "task", "classes", "labels", "input_width", "input_height")
    assert {key: core[key] for key in same} == {key: full[key] for key in same}
    assert core["flops"] is None and full["flops"] > 0
    # an export folds batch norm's scale and shift into the convolutions before it: a few values fewer
    assert 0.99 * full["parameters"] <= core["parameters"] <= full["parameters"], (core, full)


@pytest.mark.slow  # a server: seconds
def test_serve_on_the_core(core_python: Path, exported_detector: Path, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        command = [core_python, "-m", "forklift.cli", "serve", exported_detector, "--instances", "1"]
        command += ["--port", str(port)]
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until_answering(f"http://127.0.0.1:{port}/healthz", server, log, 120)
        photo = shared("images/dog.jpg").read_bytes()
        answer = httpx.post(f"http://127.0.0.1:{port}/", content=photo, headers={"content-type": "image/jpeg"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["results"][0]["file"] == "body"
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.mark.parametrize(
    ("verb", "extra"),
    [
        (["train", "--data", "data/shapes", "--cfg", "tiny.cfg", "out/x"], "train"),
        (["models", "export", "{model}", "--to", "onnx"], "train"),
        (["tune", "--help"], None),
        (["tune", "--data", "data/shapes", "--cfg", "tiny.cfg", "--trials", "2", "out/t"], "tune"),
        (["app", "--data-dir", "appdata"], "app"),
    ],
)
def test_a_verb_of_a_missing_extra_names_it(
    core_python: Path, exported_detector: Path, tmp_path: Path, verb: list[str], extra: str | None
) -> None:
    argv = [word.format(model=exported_detector) for word in verb]
    result = _forklift(core_python, *argv, cwd=tmp_path)
    if extra is None:  # --help needs no stage
        assert result.returncode == 0 and "example" in result.stdout, result.stderr
        return
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert f"which comes with the extra [{extra}]: pip install 'forklift[{extra}]'" in line, line


def test_forklift_ml_without_its_extra_names_it(core_python: Path) -> None:
    code = "from forklift.ml import LogisticRegression"
    result = subprocess.run([core_python, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].endswith("which comes with the extra [ml]: pip install 'forklift[ml]'")
