"""`forklift eval` of tabular models (`forklift ml fit`'s) on generated tables: a binary classifier, a 3-class one
and a regressor; the metrics against scikit-learn's on model.pkl's own predictions, the pictures, and bad input
as one line each."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers import forklift_here
from PIL import Image
from sklearn.datasets import dump_svmlight_file
from sklearn.metrics import (
    accuracy_score,
    average_precision_score,
    confusion_matrix,
    log_loss,
    mean_absolute_error,
    r2_score,
    roc_auc_score,
    root_mean_squared_error,
)

from forklift.data.synth import synth_shapes
from forklift.ml.metrics import classifier_scores

CLASSIFIER_PLOTS = ["confusion.png", "roc-curves.png", "pr-curves.png"]
CLOSE = 1e-6


def table(rows: int, seed: int, *, kind: str) -> pd.DataFrame:
    """Two numbers and a colour; the target: yes/no (binary), one of three species (three), or a value."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=rows), rng.normal(size=rows)
    colour = rng.choice(["blue", "green", "red"], rows)
    signal = a - 0.5 * b + (colour == "red") + rng.normal(scale=0.7, size=rows)
    target: Any = {
        "binary": np.where(signal > 0, "yes", "no"),
        "three": np.select([signal < -0.5, signal < 0.7], ["ant", "bee"], "cat"),
        "values": 0.3 * signal + 1.0,
    }[kind]
    return pd.DataFrame({"a": a, "b": b, "colour": colour, "label": target})


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """(model directory, test table) of each kind, fitted by `forklift ml fit`."""
    folder = tmp_path_factory.mktemp("tables")
    fits = {"binary": ["--model", "logistic"], "three": ["--model", "boosting", "--param", "num_round=20"],
            "values": ["--model", "forest", "--param", "n_estimators=10", "--task", "regress"]}  # fmt: skip
    made = {}
    for kind, options in fits.items():
        train, test = folder / f"{kind}-train.csv", folder / f"{kind}-test.csv"
        table(300, 0, kind=kind).to_csv(train, index=False)
        table(150, 1, kind=kind).to_csv(test, index=False)
        forklift_here("ml", "fit", "--data", train, "--target", "label", *options, folder / kind)
        made[kind] = (folder / kind, test)
    return made


def evaluated(model: Path, data: Path, out: Path) -> dict[str, Any]:
    """`forklift eval --json`: what it prints, which must be what it wrote in eval.json."""
    result = forklift_here("eval", model, "--data", data, "--out", out, "--json")
    report: dict[str, Any] = json.loads(result.stdout)
    assert json.loads((out / "eval.json").read_text()) == report
    return report


def estimator_answers(model: Path, data: Path) -> tuple[Any, pd.Series, np.ndarray]:
    """model.pkl, the table's target, and its rows encoded by hand: numbers, then the colour one-hot."""
    estimator = pickle.loads((model / "model.pkl").read_bytes())
    frame = pd.read_csv(data)
    colours = [(frame["colour"] == c).to_numpy(float) for c in ("blue", "green", "red")]
    encoded = np.column_stack([frame["a"], frame["b"], *colours]).astype(np.float32)
    return estimator, frame["label"], encoded


def assert_pictures(out: Path, names: list[str]) -> None:
    for name in names:
        with Image.open(out / name) as picture:
            assert picture.format == "PNG" and min(picture.size) >= 300 and max(picture.size) <= 1200, picture.size


@pytest.mark.parametrize("kind", ["binary", "three"])
@pytest.mark.slow  # over 1 s: left out of make test-fast
def test_a_classifier_is_measured_as_scikit_learn_measures_its_estimator(
    models: dict[str, tuple[Path, Path]], tmp_path: Path, kind: str
) -> None:
    model, data = models[kind]
    report = evaluated(model, data, tmp_path / "eval")
    estimator, truth, encoded = estimator_answers(model, data)
    classes = list(estimator.classes_)
    probabilities = estimator.predict_proba(encoded)
    assert report["task"] == "tabular" and report["rows"] == 150 and report["target"] == "label"
    assert report["classes"] == classes and report["notes"] == []
    assert report["accuracy"] == pytest.approx(accuracy_score(truth, estimator.predict(encoded)), abs=CLOSE)
    assert report["log_loss"] == pytest.approx(log_loss(truth, probabilities, labels=classes), abs=CLOSE)
    drawn = classes[1:] if kind == "binary" else classes  # of two classes, the positive one
    overall = probabilities[:, 1] if kind == "binary" else probabilities
    assert report["auc"] == pytest.approx(roc_auc_score(truth, overall, multi_class="ovr"), abs=CLOSE)
    assert report["confusion"] == confusion_matrix(truth, estimator.predict(encoded), labels=classes).tolist()
    for name in drawn:
        positive, score = truth == name, probabilities[:, classes.index(name)]
        assert report["class_auc"][name] == pytest.approx(roc_auc_score(positive, score), abs=CLOSE)
        assert report["average_precision"][name] == pytest.approx(average_precision_score(positive, score), abs=CLOSE)
    assert list(report["class_auc"]) == drawn
    assert report["plots"] == CLASSIFIER_PLOTS
    assert_pictures(tmp_path / "eval", CLASSIFIER_PLOTS)


def test_a_regressor_is_measured_as_scikit_learn_measures_its_estimator(
    models: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    model, data = models["values"]
    report = evaluated(model, data, tmp_path / "eval")
    estimator, truth, encoded = estimator_answers(model, data)
    predicted = estimator.predict(encoded)
    assert report["estimator"] == "RandomForestRegressor" and report["classes"] == []
    assert report["rmse"] == pytest.approx(root_mean_squared_error(truth, predicted), abs=CLOSE)
    assert report["mae"] == pytest.approx(mean_absolute_error(truth, predicted), abs=CLOSE)
    assert report["r2"] == pytest.approx(r2_score(truth, predicted), abs=CLOSE)
    assert report["plots"] == ["predicted-vs-true.png"]
    assert_pictures(tmp_path / "eval", report["plots"])


def test_the_summary_a_person_reads_and_another_target_column(
    models: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    """Without --json: the metrics and the confusion matrix, and the default --out beside the model; --target names
    a column other than the one the model was fitted on; a Parquet file measures as the CSV of the same rows."""
    model, data = models["three"]
    renamed = tmp_path / "renamed.parquet"
    pd.read_csv(data).rename(columns={"label": "species"}).to_parquet(renamed)
    printed = forklift_here("eval", model, "--data", renamed, "--target", "species").stdout.splitlines()
    assert printed[0] == f"three (BoostingMachineClassifier, 3 classes) on {renamed}: 150 rows, target 'species'"
    report = json.loads((model / "eval-renamed.parquet" / "eval.json").read_text())
    assert report == {**evaluated(model, data, tmp_path / "eval"), "data": str(renamed), "target": "species"}
    assert printed[2].split() == ["accuracy", f"{report['accuracy']:.4f}"]
    assert printed[4].split() == ["auc", f"{report['auc']:.4f}"]
    assert [line.split() for line in printed[7:10]] == [[name, *map(str, row)] for name, row in zip(
        ["ant", "bee", "cat"], report["confusion"], strict=True)]  # fmt: skip
    fitted = forklift_here("ml", "fit", "--data", data, "--test", data, "--target", "label", "--model", "boosting",
                           "--param", "num_round=5", tmp_path / "again").stdout.splitlines()  # fmt: skip
    assert [line.split()[0] for line in fitted[2:]] == [line.split()[0] for line in printed[2:5]]  # one order


def test_the_log_loss_of_a_float32_graph_is_the_estimators() -> None:
    """A pure leaf's 0 as the graph answers it (float32) counts what the estimator's float64 0 counts: eval's
    log-loss equals the one `ml fit` recorded."""
    truth = np.array([0, 1, 1, 0])
    probabilities = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.25, 0.75]])  # the third row: wrong and sure
    as_fitted = classifier_scores(truth, probabilities.argmax(axis=1), probabilities, labels=[0, 1], probabilities=True)
    as_served = classifier_scores(
        truth, probabilities.argmax(axis=1), probabilities.astype(np.float32), labels=[0, 1], probabilities=True
    )
    assert as_served.log_loss == pytest.approx(as_fitted.log_loss, rel=1e-6)
    assert as_fitted.log_loss == pytest.approx(-(np.log(np.finfo(np.float64).eps) + np.log(0.25)) / 4)


def test_a_model_without_probabilities_has_curves_and_an_auc_but_no_log_loss(
    models: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    """An SVM's decision values rank the rows as well as probabilities would: its AUC is the ROC curve's (it said
    n/a beside a curve labelled with it), as `ml fit` records it, and what scikit-learn computes from them."""
    _, data = models["binary"]
    forklift_here("ml", "fit", "--data", data, "--target", "label", "--model", "svm", tmp_path / "svm")
    report = evaluated(tmp_path / "svm", data, tmp_path / "eval")
    assert report["log_loss"] is None and 0.5 < report["auc"] == pytest.approx(report["class_auc"]["yes"])
    fitted = json.loads((tmp_path / "svm" / "forklift.json").read_text())["tabular"]["metrics"]
    estimator = pickle.loads((tmp_path / "svm" / "model.pkl").read_bytes())
    frame = pd.read_csv(data)
    colours = [(frame["colour"] == colour).astype(float) for colour in ("blue", "green", "red")]  # its categories
    encoded = np.column_stack([frame["a"], frame["b"], *colours])
    expected = roc_auc_score(frame["label"] == "yes", estimator.decision_function(encoded))
    assert fitted["train_auc"] == pytest.approx(expected) and report["auc"] == pytest.approx(expected, abs=1e-6)
    assert report["plots"] == CLASSIFIER_PLOTS


def test_a_class_without_rows_and_a_value_never_seen_are_noted(
    models: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    model, data = models["three"]
    frame = pd.read_csv(data)
    frame = frame[frame["label"] != "cat"].reset_index(drop=True)
    frame.loc[[0, 4], "colour"] = "mauve"
    frame["id"] = range(len(frame))
    frame.to_csv(tmp_path / "no-cat.csv", index=False)
    report = evaluated(model, tmp_path / "no-cat.csv", tmp_path / "eval")
    assert report["notes"] == [
        f"{tmp_path / 'no-cat.csv'}: a column that is not a feature of the model, left out: 'id'",
        f"{tmp_path / 'no-cat.csv'}: feature 'colour': 2 rows hold values the model never saw ('mauve'): they set "
        "none of its columns",
        "class 'cat' has no row in the table: it has no curve, and there is no AUC over all classes",
    ]
    assert report["auc"] is None and list(report["class_auc"]) == ["ant", "bee"] and report["plots"] == CLASSIFIER_PLOTS


def test_a_libsvm_file_is_measured_against_its_labels(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 3))
    dump_svmlight_file(X, X @ np.array([0.5, -1.0, 0.2]) + 1.0, str(tmp_path / "train.svm"), zero_based=True)
    forklift_here("ml", "fit", "--data", tmp_path / "train.svm", "--model", "ridge", tmp_path / "ridge")
    report = evaluated(tmp_path / "ridge", tmp_path / "train.svm", tmp_path / "eval")
    fitted = json.loads((tmp_path / "ridge" / "forklift.json").read_text())["tabular"]["metrics"]
    assert report["target"] == "label" and report["r2"] == pytest.approx(fitted["train_r2"], abs=CLOSE)


@pytest.fixture(scope="module")
def bad_inputs(models: dict[str, tuple[Path, Path]], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tables that are wrong for their model, an image data set folder, and an image model's directory."""
    folder = tmp_path_factory.mktemp("bad")
    binary, values = pd.read_csv(models["binary"][1]), pd.read_csv(models["values"][1])
    wrong_class, empty_value = binary.copy(), values.copy()
    wrong_class.loc[4, "label"] = "maybe"
    empty_value.loc[6, "label"] = None
    tables = {"no-b": binary.drop(columns="b"), "no-label": binary.drop(columns="label"),
              "maybe": wrong_class, "empty": empty_value}  # fmt: skip
    for name, bad in tables.items():
        bad.to_csv(folder / f"{name}.csv", index=False)
    synth_shapes(folder / "shapes", n=2, size=64, seed=0)
    (folder / "onnx").mkdir()  # an image model: its files' names tell its format before it is loaded
    (folder / "onnx" / "model.onnx").write_bytes(b"")
    (folder / "onnx" / "labels.txt").write_text("circle\n")
    (folder / "no-labels").mkdir()  # one that open_model_dir would refuse for its missing labels
    (folder / "no-labels" / "model.onnx").write_bytes(b"")
    folders = {name: folder / name for name in ("shapes", "onnx", "no-labels")}
    return {name: folder / f"{name}.csv" for name in tables} | folders


@pytest.mark.parametrize(
    ("model", "data", "message"),
    [
        ("binary", "no-b", "no-b.csv: no column 'b', a feature of the model"),
        ("binary", "no-label", "no-label.csv: no target column 'label' (columns: a, b, colour)"),
        ("binary", "maybe", "maybe.csv: row 5: the target 'maybe' is not one of the model's classes (no, yes)"),
        ("values", "empty", "empty.csv: row 7: the target is empty"),
        ("binary", "shapes", "shapes: a folder; "),
        ("onnx", "maybe", "maybe.csv: a table measures only tabular models ('forklift ml fit');"),
        ("no-labels", "maybe", "maybe.csv: a table measures only tabular models ('forklift ml fit');"),
    ],
)
def test_bad_input_is_one_line(
    models: dict[str, tuple[Path, Path]], bad_inputs: dict[str, Path], model: str, data: str, message: str
) -> None:
    directory = models[model][0] if model in models else bad_inputs[model]
    result = forklift_here("eval", directory, "--data", bad_inputs[data], check=False)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--split", "val"], "--split val: a data set folder's split; a table is measured on all its rows"),
        (["--threshold", "0.7"], "--threshold 0.7: an option of an image model's evaluation; a tabular model's"),
        (["--runtime", "openvino"], "--runtime openvino: an option of an image model's evaluation"),
    ],
)
def test_an_image_models_option_given_for_a_table_is_one_line(
    models: dict[str, tuple[Path, Path]], option: list[str], message: str
) -> None:
    directory, table = models["binary"]
    result = forklift_here("eval", directory, "--data", table, *option, check=False)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr


def test_sweep_and_quantize_refuse_a_tabular_model_in_one_line(
    models: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    """sweep posted images to it, 240 errors a layout, and plotted zeros; quantize said its labels share no class
    with the data set given."""
    model, _ = models["binary"]
    refusals = [
        (["sweep", model, "--instances", "1"], "a tabular model answers rows; sweep posts images"),
        (["models", "quantize", model, "--data", tmp_path], "a tabular model answers rows, and quantize"),
    ]
    for args, said in refusals:
        result = forklift_here(*args, check=False)
        assert result.returncode == 2 and said in result.stderr and result.stderr.count("\n") == 1, result.stderr
