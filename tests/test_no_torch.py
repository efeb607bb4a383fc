"""Running a model that is already exported needs no PyTorch: `forklift predict` and `forklift serve` on a Darknet
model directory with its ONNX export beside it, on OpenVINO and ONNX Runtime, never import torch or torchvision
(seconds of start-up saved in every such process), traced in the real processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import CFGS, Server, forklift_here, shared

TRACE = """
import json, sys
from forklift.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "imported": sorted({m.split(".")[0] for m in sys.modules} & {"torch", "torchvision"})}))
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = tmp_path_factory.mktemp("exported") / "model"
    forklift_here("models", "new-darknet", "--cfg", CFGS / "tiny-detector.cfg", "--names",
                  shared("darknet/coco.names"), model)  # fmt: skip
    forklift_here("models", "export", model, "--to", "onnx")
    return model


@pytest.mark.parametrize("runtime", ["openvino", "onnx"])
def test_predict_imports_no_torch(exported: Path, runtime: str) -> None:
    command = [sys.executable, "-c", TRACE, "predict", str(exported), str(shared("images/dog.jpg")), "--runtime",
               runtime, "--json"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    answer, trace = result.stdout.strip().rsplit("\n", 1)
    assert json.loads(trace) == {"code": 0, "imported": []}, result.stderr
    assert json.loads(answer)["results"][0]["file"].endswith("dog.jpg")


@pytest.mark.slow  # a server: seconds
def test_serve_maps_no_torch_library(exported: Path) -> None:
    with Server(exported, "--instances", "1") as server:
        server.wait_healthy()
        pids = [server.process.pid]
        for task in Path(f"/proc/{server.process.pid}/task").iterdir():  # its worker processes too
            pids += [int(child) for child in (task / "children").read_text().split()]
        maps = {pid: Path(f"/proc/{pid}/maps").read_text() for pid in pids}
    assert len(maps) >= 2, pids  # the server and its worker
    assert not [pid for pid, mapped in maps.items() if "libtorch" in mapped or "torchvision" in mapped]
    assert any("libopenvino" in mapped for mapped in maps.values())  # an engine was loaded, and it is this one
