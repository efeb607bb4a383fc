"""What a model directory says about precision: its INT8 graph and, in forklift.json, what `forklift models
quantize` measured of each precision and the precision used when a caller asks for none.

The INT8 graph is `int8/model.onnx`, a QDQ ONNX file that OpenVINO and ONNX Runtime both run, or, for graphs
NNCF's ONNX backend cannot quantise (torchvision's two-stage detectors), `int8/model.xml` with `model.bin`, an
OpenVINO IR that only OpenVINO runs.

forklift.json keys: `"precision": "int8"` (optional; f32 without it) and `"precision_checked"`, one entry per
precision measured: the metric, its value in f32 and in that precision, the drop allowed, and whether it passed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from forklift.errors import ForkliftError
from forklift.model_files.model_config import load_config, save_config
from forklift.model_files.model_dir import ModelDirectory
from forklift.vocabulary import Precision, word

INT8_DIR = Path("int8")
INT8_GRAPHS = (INT8_DIR / "model.onnx", INT8_DIR / "model.xml")  # QDQ ONNX, else OpenVINO IR
DEFAULT_KEY = "precision"
CHECKED_KEY = "precision_checked"


@dataclass(frozen=True)
class PrecisionCheck:
    """One precision measured against f32 on the same val images with `forklift eval`'s metric."""

    metric: str  # map50, top1 or miou
    f32: float
    value: float
    max_drop: float
    images: int  # val images measured
    calibration: int = 0  # train images the INT8 ranges came from (0 for bf16, which needs none)

    @property
    def drop(self) -> float:
        return round(self.f32 - self.value, 6)  # the same number measured twice is no drop

    @property
    def passed(self) -> bool:
        return self.drop <= self.max_drop

    def to_json(self) -> dict:
        return {**asdict(self), "drop": self.drop, "passed": self.passed}


def find_int8_graph(model: ModelDirectory) -> Path | None:
    """The model's INT8 graph (QDQ ONNX first, then OpenVINO IR), or None."""
    return next((model.path / name for name in INT8_GRAPHS if (model.path / name).is_file()), None)


def int8_graph(model: ModelDirectory) -> Path:
    """The model's INT8 graph, or one line saying how to make it."""
    found = find_int8_graph(model)
    if found is None:
        raise ForkliftError(
            f"{model.path}: no INT8 model; make one with 'forklift models quantize {model.path} --data DATA_SET'"
        )
    return found


def default_precision(model: ModelDirectory) -> Precision:
    """forklift.json's "precision", else f32."""
    value = model.config.extra.get(DEFAULT_KEY, Precision.F32)
    return word(Precision, value, where=f"{model.files.get('config', model.path)}: precision")


def precision_checks(model: ModelDirectory) -> dict[Precision, PrecisionCheck]:
    """What `forklift models quantize` measured, by precision."""
    where = model.files.get("config", model.path)
    found = model.config.extra.get(CHECKED_KEY, {})
    if not isinstance(found, dict):
        raise ForkliftError(f"{where}: {CHECKED_KEY} must be a mapping of precision to measurements")
    checks = {}
    for name, entry in found.items():
        precision = word(Precision, name, where=f"{where}: {CHECKED_KEY}")
        try:
            checks[precision] = PrecisionCheck(**{k: v for k, v in entry.items() if k not in ("drop", "passed")})
        except TypeError as exc:
            raise ForkliftError(f"{where}: {CHECKED_KEY}.{name}: {exc}") from exc
    return checks


def record_checks(model: ModelDirectory, checks: dict[Precision, PrecisionCheck]) -> Path:
    """Write the measurements into the model's config file (forklift.json, made when there is none), replacing
    earlier ones of the same precisions and keeping every other setting."""
    check_writable(model)
    config, _ = load_config(model.path)
    recorded = dict(config.extra.get(CHECKED_KEY) or {})
    recorded.update({str(precision): check.to_json() for precision, check in checks.items()})
    config.extra[CHECKED_KEY] = recorded
    return save_config(model.path, config)


def check_writable(model: ModelDirectory) -> None:
    """Measurements go to forklift.json; a model configured in YAML would end with two config files."""
    path = model.files.get("config")
    if path is not None and path.suffix != ".json":
        raise ForkliftError(f"{path}: forklift writes its measurements to forklift.json; convert this file to JSON")


def offered_precisions(model: ModelDirectory) -> list[Precision]:
    """f32, then each precision that was measured within its allowed drop (and, for INT8, whose graph is there):
    the precisions `sweep` and `serve --instances auto` try."""
    checks = precision_checks(model)
    passed = [p for p, check in checks.items() if check.passed and p != Precision.F32]
    has_int8 = find_int8_graph(model) is not None
    return [Precision.F32, *(p for p in passed if p != Precision.INT8 or has_int8)]
