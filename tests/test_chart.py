"""The Helm chart (deploy/helm/forklift) and the Kubernetes files `forklift plan|run --emit` write: the chart lints
strictly, every object it renders from the default and two other value sets, and every emitted one, is valid for the
targeted Kubernetes versions by their published schemas (kubernetes-validate), and the chart renders exactly the
objects `--emit` prints for the same values, since both come from forklift.deployment.kubernetes."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from core_parts import helm
from helpers import forklift_here, shared

from forklift.deployment.chart import templates

CHART = Path(__file__).resolve().parent.parent / "deploy" / "helm" / "forklift"
VALUE_SETS = [None, CHART / "ci" / "everything-values.yaml", CHART / "ci" / "operator-values.yaml"]
VERSIONS = ["1.29.0", "1.33.0", "1.35.0"]  # the oldest kept by the schemas we target, the current, the newest
TRAIN = ["--", "forklift", "train", "--data", "data/shapes", "--cfg", "tiny.cfg", "out/ddp"]


def _render(*args: str | Path) -> list[dict[str, Any]]:
    done = subprocess.run([helm(), "template", "forklift", CHART, *map(str, args)], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [document for document in yaml.safe_load_all(done.stdout) if document]


def _by_kind(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """In one order (helm template writes Services before the Deployments and Jobs that use them)."""
    return sorted(objects, key=lambda document: (document["kind"], document["metadata"]["name"]))


def _values(path: Path, values: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(values))
    return path


def _valid(objects: list[dict[str, Any]]) -> list[str]:
    """The kinds checked; an invalid object fails (a custom resource, with no published schema, is left out)."""
    checked = []
    for document in objects:
        if document["apiVersion"].startswith("kubeflow.org/"):
            continue
        for version in VERSIONS:
            kubernetes_validate.validate(document, version, strict=True)
        checked.append(document["kind"])
    return checked


def test_the_generated_templates_are_current() -> None:
    for name, body in templates().items():
        assert (CHART / "templates" / name).read_text() == body, f"{name}: run `make chart`"


@pytest.mark.parametrize("values", VALUE_SETS, ids=["default", "everything", "operator"])
@pytest.mark.slow  # over 1 s: left out of make test-fast
def test_the_chart_lints_and_renders_valid_objects(values: Path | None) -> None:
    options = ["-f", str(values)] if values else []
    lint = subprocess.run([helm(), "lint", "--strict", CHART, *options], capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert lint.returncode == 0, lint.stdout + lint.stderr
    checked = _valid(_render(*options))
    expected = {
        "default": ["Secret", "PersistentVolumeClaim", "Deployment", "Service"],
        "everything": ["Secret", "PersistentVolumeClaim", "Deployment", "Service", "Secret", "Service", "StatefulSet",
                       "Deployment", "Service", "Deployment", "Service", "Service", "Job", "Job"],
        "operator": ["Job"],
    }[values.stem.removesuffix("-values") if values else "default"]  # fmt: skip
    assert sorted(checked) == sorted(expected)


def test_the_validator_rejects_a_wrong_object() -> None:
    deployment = next(d for d in _render() if d["kind"] == "Deployment")
    for change in ({"replicas": "one"}, {"replica": 1}):
        wrong = copy.deepcopy(deployment)
        wrong["spec"].update(change)
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(wrong, VERSIONS[1], strict=True)


def test_tuning_without_postgresql_is_refused() -> None:
    done = subprocess.run([helm(), "template", "forklift", CHART, "--set", "tuning.enabled=true"], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode != 0 and "share one study in PostgreSQL" in done.stderr


def test_plan_emit_k8s_is_what_the_chart_renders(tmp_path: Path) -> None:
    lscpu = shared("topology/power10-sandbox-smt2.lscpu-p")
    emitted = forklift_here("plan", "--lscpu", lscpu, "--cpus-per-instance", "4", "--emit", "k8s", "--model",
                            "/srv/models/yolo").stdout  # fmt: skip
    objects = list(yaml.safe_load_all(emitted))
    assert _valid(objects) == ["Deployment", "Service"]
    deployment = objects[0]
    model = {"replicas": deployment["spec"]["replicas"], "cpus": 4, "memory": "4Gi",
             "volume": {"hostPath": {"path": "/srv/models/yolo", "type": "Directory"}}}  # fmt: skip
    values = _values(tmp_path / "values.yaml", {"app": {"enabled": False}, "serving": {"models": {"yolo": model}}})
    assert _by_kind(_render("-f", values)) == _by_kind(objects)
    assert deployment["spec"]["replicas"] == 7  # 7 instances of 4 CPUs on this topology
    # a model on another machine is named as given, and said so; a folder here that is no model is refused
    noted = forklift_here("plan", "--lscpu", lscpu, "--emit", "k8s", "--model", "/srv/models/yolo")
    assert noted.stderr == "forklift: note: /srv/models/yolo is not on this machine; the files name it as given\n"
    refused = forklift_here("plan", "--lscpu", lscpu, "--emit", "k8s", "--model", tmp_path, check=False)
    assert refused.returncode == 2 and refused.stderr.startswith(f"forklift: error: {tmp_path}: not a model directory")


@pytest.mark.parametrize("kind", ["k8s", "pytorchjob"])
def test_run_emit_is_what_the_chart_renders(tmp_path: Path, kind: str) -> None:
    emitted = forklift_here("run", "--emit", kind, "--nodes", "3", "--nproc-per-node", "2", "--max-restarts", "1",
                            *TRAIN).stdout  # fmt: skip
    objects = list(yaml.safe_load_all(emitted))
    assert _valid(objects) == (["Service", "Job"] if kind == "k8s" else [])
    container = objects[-1]["spec"]["template"]["spec"]["containers"][0] if kind == "k8s" else None
    training = {"enabled": True, "kind": "job" if kind == "k8s" else kind, "nodes": 3, "nprocPerNode": 2,
                "gpusPerNode": 0, "maxRestarts": 1, "workdir": str(Path.cwd()),
                "args": ["-m", "forklift.cli", *TRAIN[2:]],
                "volume": {"persistentVolumeClaim": {"claimName": "forklift-work"}}}  # fmt: skip
    values = _values(tmp_path / "values.yaml", {"app": {"enabled": False}, "training": training})
    assert _by_kind(_render("-f", values)) == _by_kind(objects)
    if container is not None:  # the ranks meet on pod 0, named through the headless Service
        endpoint = container["command"][container["command"].index("--rdzv-endpoint") + 1]
        assert endpoint == "forklift-train-0.forklift-train:29500"
        assert objects[-1]["spec"]["template"]["spec"]["subdomain"] == objects[0]["metadata"]["name"]
