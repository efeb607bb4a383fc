"""`forklift ml fit` and `forklift ml predict` end to end on generated tables: the model directory they write (the
graph predicts what the estimator predicts, categories one-hot, missing values), CSV, Parquet and libsvm input,
the metrics against scikit-learn's, and bad input as one line each."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import forklift, forklift_here
from sklearn.base import ClassifierMixin
from sklearn.compose import ColumnTransformer
from sklearn.datasets import dump_svmlight_file
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss, root_mean_squared_error
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

from forklift.cli.ml import parse_params
from forklift.model_files.model_dir import open_model_dir
from forklift.model_files.tabular import FeatureKind
from forklift.vocabulary import ModelFormat


def income_table(rows: int, seed: int) -> pd.DataFrame:
    """An income table: numbers with missing cells, a text category, a text target."""
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 80, rows).astype(float)
    hours = rng.normal(40, 10, rows)
    job = rng.choice(["clerk", "engineer", "nurse", "farmer"], rows)
    score = 0.05 * age + 0.04 * hours + np.select([job == "engineer", job == "nurse"], [1.5, 0.5], 0.0) - 4.5
    income = np.where(rng.random(rows) < 1 / (1 + np.exp(-score)), ">50K", "<=50K")
    age[rng.random(rows) < 0.05] = np.nan
    return pd.DataFrame({"age": age, "hours": hours, "job": job, "income": income})


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tables")
    income_table(1500, 0).to_csv(folder / "train.csv", index=False)
    income_table(500, 1).to_parquet(folder / "test.parquet")
    return folder / "train.csv", folder / "test.parquet"


def test_fit_writes_a_model_directory_whose_graph_predicts_as_the_estimator(
    tables: tuple[Path, Path], tmp_path: Path
) -> None:
    train, test = tables
    out = tmp_path / "income"
    result = forklift_here(
        "ml", "fit", "--data", train, "--test", test, "--model", "boosting", "--param", "num_round=30",
        "--param", "max_depth=3", out,
    )  # fmt: skip
    assert "BoostingMachineClassifier (2 classes, 3 features, 6 columns)" in result.stdout
    model = open_model_dir(out)
    assert model.format == ModelFormat.TABULAR and model.labels == ["<=50K", ">50K"]
    settings = json.loads((out / "forklift.json").read_text())["tabular"]
    assert [f["name"] for f in settings["features"]] == ["age", "hours", "job"]
    assert settings["features"][2] == {"name": "job", "kind": FeatureKind.CATEGORY, "categories": [
        "clerk", "engineer", "farmer", "nurse"]}  # fmt: skip
    estimator = pickle.loads((out / "model.pkl").read_bytes())
    assert estimator.get_params()["num_round"] == 30 and settings["parameters"] == {"num_round": 30, "max_depth": 3}
    frame = pd.read_parquet(test)
    jobs = ["clerk", "engineer", "farmer", "nurse"]
    encoded = np.column_stack([frame["age"], frame["hours"], *[(frame["job"] == job).astype(float) for job in jobs]])
    expected = estimator.predict_proba(encoded)
    assert abs(settings["metrics"]["test_log_loss"] - log_loss(frame["income"], expected)) < 1e-6
    predicted = forklift_here("ml", "predict", out, test, "--json")
    rows = json.loads(predicted.stdout)
    assert len(rows) == 500
    np.testing.assert_allclose([r["score_>50K"] for r in rows], expected[:, 1], atol=1e-5)
    assert [r["prediction"] for r in rows] == list(estimator.predict(encoded))


def test_a_tree_fit_and_predict_do_not_import_torch(tables: tuple[Path, Path], tmp_path: Path) -> None:
    """torch is the linear models' (1.3 s of every command): a tree's fit and predict go without it."""
    train, test = tables
    script = (
        "import sys; from forklift.cli import main; "
        f"main(['ml', 'fit', '--data', {str(train)!r}, '--model', 'tree', {str(tmp_path / 'tree')!r}]); "
        f"main(['ml', 'predict', {str(tmp_path / 'tree')!r}, {str(test)!r}, '--out', {str(tmp_path / 'p.csv')!r}]); "
        "print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300)
    assert result.stdout.strip().splitlines()[-1] == "False" and (tmp_path / "p.csv").exists()


@pytest.mark.parametrize(
    ("model", "tol", "reference", "within"),
    [
        ("logistic", "1e-6", LogisticRegression(solver="liblinear", C=1.0, tol=1e-10, max_iter=10_000), 2e-3),
        ("svm", "1e-5", LinearSVC(loss="hinge", C=1.0, tol=1e-10, max_iter=1_000_000), 2e-2),
    ],
    ids=["logistic", "svm"],
)
def test_a_linear_model_fits_standardised_numbers_and_reads_them_as_given(
    model: str, tol: str, reference: ClassifierMixin, within: float, tmp_path: Path
) -> None:
    """Ages and salaries, units four orders of magnitude apart: the linear models fit an intercept on standardised
    numbers (the SVM's dual reaches its tol instead of stopping at max_iter), and the model written reads the
    numbers as given. Reference: liblinear (regularizer 1 is C = 1, its intercept penalised alike) after
    scikit-learn's StandardScaler of the two number columns. (On the raw numbers the SVM's dual was still at 0.58
    training accuracy after 100,000 epochs; standardised, it reaches tol 1e-5 in about 260, at liblinear's 0.71.)"""
    rng = np.random.default_rng(3)
    rows = 2000
    age = rng.integers(18, 80, rows).astype(float)
    salary = rng.lognormal(10.5, 0.6, rows)
    job = rng.choice(["clerk", "engineer", "nurse"], rows)
    score = 0.04 * (age - 45) + 1.5 * np.log(salary / 36_000) + np.where(job == "engineer", 1.0, 0.0)
    label = np.where(rng.random(rows) < 1 / (1 + np.exp(-score)), "yes", "no")
    pd.DataFrame({"age": age, "salary": salary, "job": job, "label": label}).to_csv(tmp_path / "t.csv", index=False)
    out = tmp_path / model
    result = forklift_here("ml", "fit", "--data", tmp_path / "t.csv", "--target", "label", "--model", model,
                           "--param", f"tol={tol}", out)  # fmt: skip
    assert "max_iter" not in result.stderr
    assert json.loads((out / "forklift.json").read_text())["tabular"]["parameters"]["fit_intercept"] is True
    estimator = pickle.loads((out / "model.pkl").read_bytes())
    X = np.column_stack([age, salary, *[(job == name).astype(float) for name in ("clerk", "engineer", "nurse")]])
    scaled = ColumnTransformer([("numbers", StandardScaler(), [0, 1])], remainder="passthrough")
    expected = make_pipeline(scaled, reference).fit(X, label).decision_function(X)
    # the dual's rows are dealt at random: a run's error grows with the row's distance from the boundary
    np.testing.assert_allclose(estimator.decision_function(X), expected, atol=within, rtol=within)
    rows_read = json.loads(forklift_here("ml", "predict", out, tmp_path / "t.csv", "--json").stdout)
    assert [r["prediction"] for r in rows_read] == list(estimator.predict(X))


def test_a_regression_on_a_libsvm_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(800, 5))
    y = X @ np.array([1.0, -2.0, 0.5, 0.0, 3.0]) + rng.normal(scale=0.1, size=800)
    dump_svmlight_file(X, y, str(tmp_path / "train.svm"), zero_based=True)
    X_test = rng.normal(size=(50, 5))
    X_test[:, 0] = 0.0  # no index 0 in the file: read alone it would be taken as 1-based, each feature one over
    y_test = X_test @ np.array([1.0, -2.0, 0.5, 0.0, 3.0])
    dump_svmlight_file(X_test, y_test, str(tmp_path / "test.svm"), zero_based=True)
    out = tmp_path / "ridge"
    forklift_here(
        "ml", "fit", "--data", tmp_path / "train.svm", "--test", tmp_path / "test.svm", "--model", "ridge",
        "--param", "regularizer=0.01", out,
    )  # fmt: skip
    settings = json.loads((out / "forklift.json").read_text())["tabular"]
    assert [f["name"] for f in settings["features"]] == [f"f{i}" for i in range(5)] and settings["classes"] == []
    assert settings["libsvm_zero_based"] is True  # the training file's base, for the files the model reads later
    estimator = pickle.loads((out / "model.pkl").read_bytes())
    rmse = root_mean_squared_error(y, estimator.predict(X))
    assert abs(settings["metrics"]["train_rmse"] - rmse) < 1e-6  # the fit measured X read as float32
    assert settings["metrics"]["train_r2"] > 0.99
    rows = json.loads(forklift_here("ml", "predict", out, tmp_path / "train.svm", "--json").stdout)
    np.testing.assert_allclose([r["prediction"] for r in rows], estimator.predict(X), rtol=1e-5, atol=1e-4)
    assert settings["metrics"]["test_rmse"] < 0.1  # read one column over, the test rows would miss by about 3
    rows = json.loads(forklift_here("ml", "predict", out, tmp_path / "test.svm", "--json").stdout)
    np.testing.assert_allclose([r["prediction"] for r in rows], estimator.predict(X_test), rtol=1e-5, atol=1e-4)
    wrong = ["--target", "price", tmp_path / "p"]
    result = forklift_here("ml", "fit", "--data", tmp_path / "train.svm", *wrong, check=False)
    assert result.returncode == 2 and "train.svm: a libsvm file has no column 'price': its target is" in result.stderr
    (tmp_path / "one.svm").write_text("1 1:2 2:1\n0 2:3\n")  # 1-based: no index 0
    (tmp_path / "zero.svm").write_text("1 1:2\n0 0:1 2:3\n")
    result = forklift_here("ml", "fit", "--data", tmp_path / "one.svm", "--test", tmp_path / "zero.svm",
                           tmp_path / "q", check=False)  # fmt: skip
    said = "zero.svm:2: index 0 in a file read as 1-based (as the model's training file, which holds no index 0)"
    assert result.returncode == 2 and said in result.stderr
    (tmp_path / "wide.svm").write_text("1 0:1 5:2\n")  # index 5 of a 0-based file: a sixth feature the model has not
    (tmp_path / "empty.svm").write_text("# no rows\n")
    for data, test, said in [
        ("train.svm", "wide.svm", "wide.svm: index 5 is beyond the 5 features the model takes (0-based, as the file"),
        ("empty.svm", None, "empty.svm: no rows or no features"),
    ]:
        options = ["--test", tmp_path / test] if test else []
        result = forklift_here("ml", "fit", "--data", tmp_path / data, *options, tmp_path / "w", check=False)
        assert result.returncode == 2 and said in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_predict_writes_a_csv(tables: tuple[Path, Path], tmp_path: Path) -> None:
    train, test = tables
    out = tmp_path / "tree"
    forklift_here("ml", "fit", "--data", train, "--model", "tree", "--param", "max_depth=3", out)
    result = forklift("ml", "predict", out, test, "--out", tmp_path / "p.csv")  # the installed command
    assert "left out" not in result.stderr  # the model's own target beside its features: nothing to say
    written = pd.read_csv(tmp_path / "p.csv")
    assert list(written.columns) == ["prediction", "score_<=50K", "score_>50K"] and len(written) == 500


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--model", "ridge", "--task", "classify"], "--task classify: --model ridge does not classify"),
        (["--param", "depth"], "--param 'depth': expected NAME=VALUE"),
        (["--param", "max_depht=3"], "--param max_depht: BoostingMachineClassifier has no such parameter"),
        (["--param", "num_round=0"], "forklift: error: BoostingMachineClassifier: num_round=0: expected"),
        (["--target", "salary"], "no column 'salary' (columns: age, hours, job, income)"),
        (["--model", "logistic"], "train.csv: row 3: feature 'age' is empty or null, and this model takes no missing"),
        (["--target", "hours", "--model", "svm"], "train.csv: the target 'hours' holds values (1500 distinct, e.g."),
        (["--model", "logistic", "--param", "fit_intercept=maybe"], "LogisticRegression: fit_intercept='maybe': expec"),
        (["--model", "logistic", "--param", "use_gpu=yes"], "LogisticRegression: use_gpu='yes': expected True or"),
        (["--param", "random_state=abc"], "random_state='abc' is not valid: expected None, an integer or a numpy"),
        (["--param", "learning_rate=.inf"], "learning_rate=inf: expected a finite number > 0"),
        (["--model", "logistic", "--param", "regularizer=.nan"], "regularizer=nan is not valid: expected a finite"),
        (  # ridge rounds read every feature
            ["--param", "tree_select_probability=0.5"],
            "train.csv: row 3: feature 'age' is empty or null, and this model takes no missing",
        ),
    ],
)
def test_bad_input_is_one_line(tables: tuple[Path, Path], tmp_path: Path, arguments: list[str], message: str) -> None:
    train, _ = tables
    result = forklift_here("ml", "fit", "--data", train, *arguments, tmp_path / "out", check=False)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()[-1:]
    assert message in line and "Traceback" not in result.stderr


def test_a_word_in_a_target_of_numbers_and_an_output_under_a_file_are_one_line(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    frame = pd.DataFrame({"size": rng.uniform(10, 90, 60).round(1)}).assign(price=lambda f: f["size"] * 3.1)
    frame.to_csv(tmp_path / "train.csv", index=False)
    typo = frame.astype({"price": object})
    typo.loc[6, "price"] = "abc"  # the seventh data row
    typo.to_csv(tmp_path / "typo.csv", index=False)
    for task, said in [
        ([], f"row 7: the target 'price' holds 'abc' among {frame['price'].drop(index=6).nunique()} distinct numbers"),
        (["--task", "regress"], "typo.csv: row 7: the target 'price' holds 'abc', not a number"),
    ]:  # a classifier of 59 classes, one a value, was fitted without a word before
        result = forklift_here("ml", "fit", "--data", tmp_path / "typo.csv", *task, tmp_path / "m", check=False)
        assert result.returncode == 2 and said in result.stderr, result.stderr
    out = tmp_path / "model"
    forklift_here("ml", "fit", "--data", tmp_path / "train.csv", "--model", "tree", out)
    result = forklift_here("eval", out, "--data", tmp_path / "typo.csv", check=False)
    assert result.returncode == 2 and "typo.csv: row 7: the target 'abc' is not a finite number" in result.stderr
    huge = frame.astype({"price": object})
    huge.loc[2, "price"] = "1e400"  # read as infinity: scikit-learn's RMSE was a traceback
    huge.to_csv(tmp_path / "huge.csv", index=False)
    result = forklift_here("eval", out, "--data", tmp_path / "huge.csv", check=False)
    assert result.returncode == 2 and "huge.csv: row 3: the target inf is not a finite number" in result.stderr, (
        result.stderr
    )
    (tmp_path / "afile").write_text("")
    for command, said in [
        (["ml", "fit", "--data", tmp_path / "train.csv", tmp_path / "afile" / "sub"], "OUT_DIR"),
        (["eval", out, "--data", tmp_path / "train.csv", "--out", tmp_path / "afile" / "x"], "--out"),
    ]:  # refused before the work, not a NotADirectoryError after it
        result = forklift_here(*command, check=False)
        assert result.returncode == 2 and f"{said} {tmp_path / 'afile'}" in result.stderr
        assert f"cannot be made, {tmp_path / 'afile'} is a file" in result.stderr


def test_predict_with_an_image_model_says_it_takes_a_tabular_one(tables: tuple[Path, Path], tmp_path: Path) -> None:
    """Not the labels file an image model without one lacks: the model is the wrong kind."""
    _, test = tables
    (tmp_path / "detector").mkdir()
    (tmp_path / "detector" / "model.onnx").write_bytes(b"")
    result = forklift_here("ml", "predict", tmp_path / "detector", test, check=False)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert f"{tmp_path / 'detector'}: not a tabular model; 'forklift ml predict' takes what" in result.stderr


def test_a_bad_param_is_refused_before_the_table_is_read(tmp_path: Path) -> None:
    (tmp_path / "ragged.csv").write_text("a,b,y\n1,2,0\n3,4\n")
    for model, param in (("tree", "max_depth=0"), ("ridge", "tol=-1")):
        result = forklift_here("ml", "fit", "--data", tmp_path / "ragged.csv", "--model", model, "--param", param,
                               tmp_path / "out", check=False)  # fmt: skip
        assert result.returncode == 2 and param.replace("=", "=") in result.stderr and "ragged" not in result.stderr


def test_a_bad_file_names_its_row_and_column(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    frame = income_table(50, 4)
    frame["hours"] = frame["hours"].astype(object)
    frame.loc[7, "hours"] = "forty"
    frame.to_csv(tmp_path / "typo.csv", index=False)
    result = forklift_here("ml", "fit", "--data", tmp_path / "typo.csv", tmp_path / "out", check=False)
    assert result.returncode == 2
    assert result.stderr.strip().endswith("row 8, column 'hours': 'forty' is not a number")
    ragged = {  # pandas reads the last two silently: a short row's end as missing, one more field a row as an index
        "long.csv": ("a,b,y\n1,2,0\n3,4,5,6\n", "row 2 has 4 fields where the header line has 3: '3,4,5,6'"),
        "short.csv": ("a,b,y\n1,2,0\n\n3,4\n5,6,1\n", "row 2 has 2 fields where the header line has 3: '3,4'"),
        "wide.csv": ("a,b,y\n1,2,0,9\n3,4,1,9\n", "row 1 has 4 fields where the header line has 3: '1,2,0,9'"),
        "semicolons-quoted.csv": (
            'a;b;y\n1;"x, z";0\n3;4;1\n',
            "row 1 has 2 fields where the header line has 1: "
            "'1;\"x, z\";0'; its header line holds ';': forklift reads CSV separated by commas",
        ),
    }
    for name, (text, message) in ragged.items():
        (tmp_path / name).write_text(text)
        result = forklift_here("ml", "fit", "--data", tmp_path / name, tmp_path / "out2", check=False)
        assert result.returncode == 2 and result.stderr.strip().endswith(f"{name}: {message}"), result.stderr
    (tmp_path / "quoted.csv").write_text('a,b,y\n1,"x\ny",0\n3,,1\n5,"z",\n')  # a newline in a value, empty cells
    fitted = forklift_here("ml", "fit", "--data", tmp_path / "quoted.csv", "--target", "a", tmp_path / "quoted")
    assert fitted.returncode == 0
    (tmp_path / "spaced.csv").write_text('a, b, y\n1, "x, z", 0\n3, "x, z", 1\n5, w,\n')  # refused as ragged
    fitted = forklift_here("ml", "fit", "--data", tmp_path / "spaced.csv", "--target", "a", tmp_path / "spaced")
    features = json.loads((tmp_path / "spaced" / "forklift.json").read_text())["tabular"]["features"]
    assert [feature.get("categories") for feature in features] == [["w", "x, z"], None]
    (tmp_path / "predict-short.csv").write_text("a,b,y\n1\n")
    result = forklift_here("ml", "predict", tmp_path / "quoted", tmp_path / "predict-short.csv", check=False)
    assert result.returncode == 2 and "row 1 has 1 fields where the header line has 3: '1'" in result.stderr
    income_table(50, 4).dropna().to_csv(tmp_path / "headless.csv", index=False, header=False)
    result = forklift_here("ml", "fit", "--data", tmp_path / "headless.csv", tmp_path / "headless", check=False)
    assert result.returncode == 0  # said, not refused: a table may name its columns by numbers
    assert "headless.csv: 2 of its 4 column names are numbers" in caplog.text
    assert "if the file has no header line, its first row was read as the names" in caplog.text
    (tmp_path / "semicolons.csv").write_text("a;b;y\n1;2;0\n3;4;1\n")
    (tmp_path / "empty.csv").write_text("")
    for name, message in (("semicolons.csv", "one column, named 'a;b;y': its values are separated by ';'"),
                          ("empty.csv", "empty (not even a header line)")):  # fmt: skip
        result = forklift_here("ml", "fit", "--data", tmp_path / name, tmp_path / "out3", check=False)
        assert result.returncode == 2 and f"{name}: {message}" in result.stderr, result.stderr
    result = forklift_here("ml", "fit", "--data", tmp_path / "typo.csv", tmp_path / "empty.csv", check=False)
    assert result.returncode == 2 and "empty.csv: exists and is a file; give a new OUT_DIR" in result.stderr


def test_a_saved_index_and_a_trailing_comma_are_no_features_and_text_not_utf8_is_named_by_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """pandas' `to_csv` writes its index as a column with no name, and a comma at each line's end makes an empty
    one: both were features (a model of row numbers; serving asked every row for 'Unnamed: 4')."""
    frame = income_table(80, 6)
    frame.to_csv(tmp_path / "indexed.csv")
    (tmp_path / "trailing.csv").write_text(
        "".join(f"{line}," + "\n" for line in frame.to_csv(index=False).splitlines())
    )
    for name in ("indexed.csv", "trailing.csv"):
        forklift_here("ml", "fit", "--data", tmp_path / name, "--target", "income", tmp_path / name.replace(".", "-"))
        features = json.loads((tmp_path / name.replace(".", "-") / "forklift.json").read_text())["tabular"]["features"]
        assert [feature["name"] for feature in features] == [str(c) for c in frame.columns if c != "income"]
    column = len(frame.columns) + 1
    assert "indexed.csv: column 1 has no name in the header line" in caplog.text
    assert f"trailing.csv: column {column} has no name in the header line (a row index, or a comma" in caplog.text
    latin = tmp_path / "latin.csv"
    latin.write_bytes("job,y\nclerk,a\nclerk,b\ncr\u00e8me,a\n".encode("latin-1"))
    utf16 = tmp_path / "utf16.csv"
    utf16.write_bytes("job,y\nclerk,a\n".encode("utf-16"))
    for path, message in [(latin, "latin.csv: line 4: byte 0xe8 is not UTF-8 text; save the file as UTF-8"),
                          (utf16, "utf16.csv: UTF-16 text (as a spreadsheet's 'Unicode text' is saved); save it as "
                                  "CSV in UTF-8"),
                          (tmp_path, f"{tmp_path}: a folder; give a table's file (.csv, ")]:  # fmt: skip
        result = forklift_here("ml", "fit", "--data", path, tmp_path / "out", check=False)
        assert result.returncode == 2 and message in result.stderr, result.stderr


def test_words_for_missing_are_missing_among_numbers_and_values_among_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """pandas read a region 'NA' (North America) as a missing value: a third of the rows lost their region, unsaid,
    while a served row's "NA" was refused as a category never seen. Among numbers, R's NA stays a missing value."""
    rng = np.random.default_rng(7)
    frame = pd.DataFrame({"hours": rng.integers(20, 60, 90).astype(str), "region": ["NA", "EU", "APAC"] * 30,
                          "y": ["<=50K", ">50K"] * 45})  # fmt: skip
    frame.loc[4, "hours"] = "NA"
    frame.to_csv(tmp_path / "regions.csv", index=False)
    forklift_here("ml", "fit", "--data", tmp_path / "regions.csv", "--model", "tree", tmp_path / "m")
    features = json.loads((tmp_path / "m" / "forklift.json").read_text())["tabular"]["features"]
    assert [(f["name"], f.get("categories")) for f in features] == [("hours", None), ("region", ["APAC", "EU", "NA"])]
    assert "regions.csv: column 'region' holds 30 cells such as 'NA' (row 1), read as a value, not as missing" in (
        caplog.text
    )
    predicted = forklift_here("ml", "predict", tmp_path / "m", tmp_path / "regions.csv")
    assert "never saw" not in predicted.stderr and "unknown" not in predicted.stderr, predicted.stderr
    frame.loc[7, "hours"] = "abc"  # a typo among numbers and NAs: the typo is named, not the NA, nor a category made
    frame.to_csv(tmp_path / "typo.csv", index=False)
    result = forklift_here("ml", "fit", "--data", tmp_path / "typo.csv", tmp_path / "t", check=False)
    assert result.returncode == 2 and "typo.csv: row 8, column 'hours': 'abc' is not a number" in result.stderr
    (tmp_path / "spaced.csv").write_text('y, "a, b", c,\n1, 2, 3,\n0, 5, 6,\n' * 5)  # the header split as pandas does
    forklift_here("ml", "fit", "--data", tmp_path / "spaced.csv", "--target", "y", tmp_path / "s")
    features = json.loads((tmp_path / "s" / "forklift.json").read_text())["tabular"]["features"]
    assert [feature["name"] for feature in features] == ["a, b", "c"]


def test_compressed_tables_are_read_as_their_plain_ones(tmp_path: Path) -> None:
    """train.csv.gz and train.svm.bz2 were refused by their suffix, where the chunked writer read them."""
    import bz2
    import gzip

    frame = income_table(80, 9)
    frame.to_csv(tmp_path / "train.csv", index=False)
    (tmp_path / "train.csv.gz").write_bytes(gzip.compress((tmp_path / "train.csv").read_bytes()))
    forklift_here("ml", "fit", "--data", tmp_path / "train.csv", "--model", "tree", tmp_path / "plain")
    forklift_here("ml", "fit", "--data", tmp_path / "train.csv.gz", "--model", "tree", tmp_path / "packed")
    plain, packed = (json.loads((tmp_path / name / "forklift.json").read_text()) for name in ("plain", "packed"))
    assert plain["tabular"] == packed["tabular"]
    evaluated = forklift_here("eval", tmp_path / "packed", "--data", tmp_path / "train.csv.gz", "--json")
    assert json.loads(evaluated.stdout)["rows"] == 80
    X, y = np.array([[0.5, 1.0], [0.1, 0.0], [0.7, 0.2], [0.0, 0.9]] * 10), np.array([1, 0, 1, 0] * 10)
    dump_svmlight_file(X, y, str(tmp_path / "train.svm"), zero_based=True)
    (tmp_path / "train.svm.bz2").write_bytes(bz2.compress((tmp_path / "train.svm").read_bytes()))
    forklift_here("ml", "fit", "--data", tmp_path / "train.svm.bz2", "--model", "logistic", tmp_path / "svm")
    assert json.loads((tmp_path / "svm" / "forklift.json").read_text())["tabular"]["libsvm_zero_based"] is True


def test_a_tsv_file_is_read_separated_by_tabs_and_a_file_named_for_the_other_separator_is_said(
    tmp_path: Path,
) -> None:
    """A .tsv table was refused by its suffix; named .csv, a tab-separated file is one column, and the other way."""
    frame = income_table(80, 10)
    frame.to_csv(tmp_path / "train.csv", index=False)
    frame.to_csv(tmp_path / "train.tsv", index=False, sep="\t")
    frame.to_csv(tmp_path / "commas.tsv", index=False)
    frame.to_csv(tmp_path / "tabs.csv", index=False, sep="\t")
    forklift_here("ml", "fit", "--data", tmp_path / "train.csv", "--model", "tree", tmp_path / "csv")
    forklift_here("ml", "fit", "--data", tmp_path / "train.tsv", "--model", "tree", tmp_path / "tsv")
    from_csv, from_tsv = (json.loads((tmp_path / name / "forklift.json").read_text()) for name in ("csv", "tsv"))
    assert from_csv["tabular"] == from_tsv["tabular"]
    predicted = [forklift_here("ml", "predict", tmp_path / "tsv", tmp_path / name).stdout
                 for name in ("train.csv", "train.tsv")]  # fmt: skip
    assert predicted[0] == predicted[1] and len(predicted[0].splitlines()) == 81
    header = "\t".join(frame.columns)
    for name, message in (
        ("commas.tsv", "a .tsv file is read as separated by tabs (name the file .csv if it is separated by ',')"),
        ("tabs.csv", "forklift reads CSV separated by commas (name the file .tsv if it is separated by '\\t')"),
    ):
        result = forklift_here("ml", "fit", "--data", tmp_path / name, tmp_path / "out", check=False)
        assert result.returncode == 2 and result.stderr.strip().endswith(message), result.stderr
        assert ("'" + header.replace("\t", "\\t") + "'" in result.stderr) == (name == "tabs.csv")
    (tmp_path / "short.tsv").write_text("a\tb\ty\n1\t2\t0\n3\t4\n")
    result = forklift_here("ml", "fit", "--data", tmp_path / "short.tsv", tmp_path / "out", check=False)
    assert result.returncode == 2 and "short.tsv: row 2 has 2 fields where the header line has 3" in result.stderr


def test_a_forest_on_separable_rows_gives_probabilities_within_zero_and_one(tmp_path: Path) -> None:
    """Ten trees' float32 leaf shares sum to 1.0000001: the model must still answer probabilities."""
    rows = 200
    pd.DataFrame({"x": np.arange(rows) % 4, "y": (np.arange(rows) % 4 > 1).astype(int)}).to_csv(
        tmp_path / "separable.csv", index=False
    )
    forklift_here("ml", "fit", "--data", tmp_path / "separable.csv", "--model", "forest", tmp_path / "forest")
    rows_out = json.loads(
        forklift_here("ml", "predict", tmp_path / "forest", tmp_path / "separable.csv", "--json").stdout
    )
    scores = np.array([[r["score_0"], r["score_1"]] for r in rows_out])
    assert scores.min() >= 0.0 and scores.max() <= 1.0


def test_bad_cells_of_the_target_the_test_table_and_a_predicted_table_are_one_line(
    tables: tuple[Path, Path], tmp_path: Path
) -> None:
    train, _ = tables
    frame = income_table(60, 5)
    frame.loc[4, "income"] = None
    frame.to_csv(tmp_path / "empty-target.csv", index=False)
    cases = [
        (["--data", tmp_path / "empty-target.csv"], "empty-target.csv: row 5: the target 'income' is empty"),
        (["--data", train, "--param", "base_score=abc"], "base_score='abc': expected None or a finite number"),
    ]
    income_table(40, 6).drop(columns="hours").to_csv(tmp_path / "no-hours.csv", index=False)
    cases.append((["--data", train, "--test", tmp_path / "no-hours.csv"], "no-hours.csv: no column 'hours'"))
    other = income_table(40, 7)
    other.loc[2, "income"] = "unknown"
    other.to_csv(tmp_path / "other-class.csv", index=False)
    cases.append((["--data", train, "--test", tmp_path / "other-class.csv"], "row 3: 'unknown' is not a class"))
    for index, (arguments, message) in enumerate(cases):
        result = forklift_here("ml", "fit", *arguments, tmp_path / f"out{index}", check=False)
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / f"out{index}").exists()
    forklift_here("ml", "fit", "--data", train, "--model", "tree", tmp_path / "tree")
    typo = income_table(20, 8)
    typo["age"] = typo["age"].astype(object)
    typo.loc[3, "age"] = "forty"
    typo.loc[[0, 1, 2], "age"] = "x"  # mostly text: read as a column of text, refused as the model's number feature
    typo.to_csv(tmp_path / "typo.csv", index=False)
    result = forklift_here("ml", "predict", tmp_path / "tree", tmp_path / "typo.csv", check=False)
    assert result.returncode == 2 and "typo.csv: row 1: feature 'age': 'x' is not a number" in result.stderr
    for name, value in (("inf", np.inf), ("huge", 1e300)):  # refused as a request's row is, not predicted from
        endless = income_table(20, 8)
        endless.loc[2, "hours"] = value
        endless.to_csv(tmp_path / f"{name}.csv", index=False)
        result = forklift_here("ml", "predict", tmp_path / "tree", tmp_path / f"{name}.csv", check=False)
        assert result.returncode == 2 and f"{name}.csv: row 3: feature 'hours': {value!r} is not a finite" in (
            result.stderr
        )
    for out, problem in ((tmp_path / "nowhere" / "p.csv", "does not exist"), (tmp_path / "tree", "is a folder")):
        result = forklift_here("ml", "predict", tmp_path / "tree", train, "--out", out, check=False)
        assert result.returncode == 2 and f"--out {out}: " in result.stderr and problem in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_cells_as_people_write_them_are_read_as_meant(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """What a walk through messy tables found: a True/False column with an empty cell, category codes that are
    numbers (a file of only `1` and `2` read them as 1.0 and 2.0, values the model never saw), a number column with
    many words in it (it became a category of 72 values without a word), Parquet's decimals and dates, a header
    naming one column twice, a libsvm file's classes (1.0 for 1)."""
    rng = np.random.default_rng(3)
    rows = 300
    code = rng.choice(["A", "1", "2"], rows)
    member = pd.Series(rng.random(rows) < 0.5, dtype=object)
    member[9] = None
    frame = pd.DataFrame({"code": code, "member": member, "x": rng.normal(size=rows)})
    frame["y"] = np.where((code == "1") ^ (rng.random(rows) < 0.1), "yes", "no")
    frame.to_csv(tmp_path / "codes.csv", index=False)
    out = tmp_path / "codes"
    forklift_here("ml", "fit", "--data", tmp_path / "codes.csv", "--model", "tree", "--param", "max_depth=3", out)
    settings = json.loads((out / "forklift.json").read_text())["tabular"]
    assert [f["categories"] for f in settings["features"][:2]] == [["1", "2", "A"], ["False", "True"]]
    (tmp_path / "ones.csv").write_text("code,member,x\n1,True,0\n2,,0\n1,False,0\n")
    (tmp_path / "with-a.csv").write_text("code,member,x\n1,True,0\n2,,0\n1,False,0\nA,True,0\n")
    pd.DataFrame({"code": [1, 2, 1], "member": [True, None, False], "x": [0.0] * 3}).to_parquet(tmp_path / "ones.pq")
    alone, beside, typed = (
        json.loads(forklift_here("ml", "predict", out, tmp_path / name, "--json").stdout)
        for name in ("ones.csv", "with-a.csv", "ones.pq")
    )
    assert alone == beside[:3] == typed and [row["prediction"] for row in alone] == ["yes", "no", "yes"]

    ages = np.round(rng.uniform(18, 80, rows)).astype(object)
    ages[::7] = "unknown"  # one cell in seven: a column of numbers whose missing values are not empty, or codes?
    frame.drop(columns="y").assign(age=ages, y=frame["y"]).to_csv(tmp_path / "unknown.csv", index=False)
    pd.DataFrame({"amount": pd.array([Decimal("1.50"), None, Decimal("2.25")] * 20, dtype=object),
                  "y": ["yes", "no", "yes"] * 20}).to_parquet(tmp_path / "decimals.pq")  # fmt: skip
    pd.DataFrame({"when": pd.date_range("2026-01-01", periods=60), "y": ["yes", "no"] * 30}).to_parquet(
        tmp_path / "dates.pq"
    )
    (tmp_path / "twice.csv").write_text("a,b,a,y\n1,2,3,yes\n4,5,6,no\n")
    refused = {
        "dates.pq": "dates.pq: column 'when' holds dates or times, which are not features forklift reads",
        "twice.csv": "twice.csv: two columns are named 'a'; rename one",
    }
    for name, message in refused.items():
        result = forklift_here("ml", "fit", "--data", tmp_path / name, "--model", "tree", tmp_path / "no", check=False)
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    forklift_here("ml", "fit", "--data", tmp_path / "unknown.csv", "--model", "tree", tmp_path / "unknown")
    assert (
        "unknown.csv: column 'age' is read as a category: 86% of its cells are numbers, of 62 values, and 43 are "
        "words, the first 'unknown' in row 1; if they stand for missing values, leave those cells empty"
    ) in caplog.text
    zips = [f"{k:05d}" for k in range(40)] + ["unknown"] * 10  # text by the file's own types: codes, not numbers
    pd.DataFrame({"zip": zips, "y": ["yes", "no"] * 25}).to_parquet(tmp_path / "zips.pq")
    forklift_here("ml", "fit", "--data", tmp_path / "zips.pq", "--model", "tree", tmp_path / "zips")
    feature = json.loads((tmp_path / "zips" / "forklift.json").read_text())["tabular"]["features"][0]
    assert feature["categories"] == sorted(set(zips)) and "zip" not in caplog.text
    forklift_here("ml", "fit", "--data", tmp_path / "decimals.pq", "--model", "tree", tmp_path / "decimals")
    amount = json.loads((tmp_path / "decimals" / "forklift.json").read_text())["tabular"]["features"][0]
    assert amount == {"name": "amount", "kind": FeatureKind.NUMBER}

    dump_svmlight_file(rng.normal(size=(50, 3)), rng.integers(0, 2, 50), str(tmp_path / "classes.svm"))
    forklift_here("ml", "fit", "--data", tmp_path / "classes.svm", "--model", "tree", tmp_path / "svm")
    assert json.loads((tmp_path / "svm" / "forklift.json").read_text())["tabular"]["classes"] == [0, 1]


def test_a_boosting_machine_with_ridge_rounds_refuses_a_row_with_a_missing_value(
    tables: tuple[Path, Path], tmp_path: Path
) -> None:
    """A ridge round reads every feature: the model directory says it takes no missing values, so a table with an
    empty cell is refused by row, as for a linear model, where the scores would be NaN."""
    train, _ = tables
    complete = pd.read_csv(train).dropna()
    complete.to_csv(tmp_path / "complete.csv", index=False)
    out = tmp_path / "mixed"
    options = ["--param", "tree_select_probability=0.5", "--param", "num_round=10", "--param", "random_state=3"]
    forklift_here("ml", "fit", "--data", tmp_path / "complete.csv", "--model", "boosting", *options, out)
    assert json.loads((out / "forklift.json").read_text())["tabular"]["missing_values"] is False
    assert pickle.loads((out / "model.pkl").read_bytes()).ensemble_.fourier is not None  # it drew ridge rounds
    result = forklift_here("ml", "predict", out, train, check=False)
    assert result.returncode == 2 and "train.csv: row 3: feature 'age' is empty or null" in result.stderr
    predicted = json.loads(forklift_here("ml", "predict", out, tmp_path / "complete.csv", "--json").stdout)
    assert len(predicted) == len(complete) and all(np.isfinite(row["score_>50K"]) for row in predicted)


def test_a_category_value_a_table_adds_sets_none_of_its_columns(
    tables: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A rare value in a later table (scikit-learn's handle_unknown="ignore"), said on the log; served JSON refuses
    it instead."""
    train, _ = tables
    later = income_table(30, 9)
    later.loc[0, "job"] = "pilot"
    later.to_csv(tmp_path / "later.csv", index=False)
    out = tmp_path / "forest"
    forklift_here("ml", "fit", "--data", train, "--test", tmp_path / "later.csv", "--model", "forest", out)
    estimator = pickle.loads((out / "model.pkl").read_bytes())
    rows = json.loads(forklift_here("ml", "predict", out, tmp_path / "later.csv", "--json").stdout)
    none_of_them = np.array([[later.loc[0, "age"], later.loc[0, "hours"], 0.0, 0.0, 0.0, 0.0]])
    np.testing.assert_allclose(rows[0]["score_>50K"], estimator.predict_proba(none_of_them)[0, 1], atol=1e-5)
    said = [r.getMessage() for r in caplog.records if "never saw" in r.getMessage()]
    assert said and all(
        "later.csv: feature 'job': 1 row holds a value the model never saw ('pilot'): it sets" in m for m in said
    )


def test_a_category_column_empty_in_every_row_is_missing_not_unknown(tables: tuple[Path, Path], tmp_path: Path) -> None:
    """pandas reads a column with no text as numbers (NaN): its cells are missing values, as an empty cell among
    text is, not a category the model never saw."""
    train, _ = tables
    out = tmp_path / "forest"
    forklift_here("ml", "fit", "--data", train, "--model", "forest", "--param", "random_state=0", out)
    row = {"age": 41.0, "hours": 52.5, "job": None}
    pd.DataFrame([row]).to_csv(tmp_path / "alone.csv", index=False)
    pd.DataFrame([row, {**row, "job": "nurse"}]).to_csv(tmp_path / "mixed.csv", index=False)
    alone, mixed = (
        json.loads(forklift_here("ml", "predict", out, tmp_path / name, "--json").stdout)
        for name in ("alone.csv", "mixed.csv")
    )
    assert alone[0] == mixed[0]
    estimator = pickle.loads((out / "model.pkl").read_bytes())
    missing = np.array([[41.0, 52.5, np.nan, np.nan, np.nan, np.nan]])  # the job's four one-hot columns missing
    np.testing.assert_allclose(alone[0]["score_>50K"], estimator.predict_proba(missing)[0, 1], atol=1e-5)


def test_param_values_are_read_as_yaml_and_none_is_null() -> None:
    assert parse_params(["max_depth=None", "base_score=null", "max_features=none", "num_round=3", "lr=0.1",
                         "objective=mse", "x=", "tol=1e-6", "regularizer=2.5E+3", "name=e5"]) == {
        "max_depth": None, "base_score": None, "max_features": None, "num_round": 3, "lr": 0.1, "objective": "mse",
        "x": None, "tol": 1e-6, "regularizer": 2500.0, "name": "e5",
    }  # fmt: skip


def test_a_column_named_as_a_category_value_column_is_refused(tmp_path: Path) -> None:
    """`colour=red` beside colour's value red would be two input columns of one name (v2 clients go by the names)."""
    table = pd.DataFrame({"colour": ["red", "blue"] * 10, "colour=red": np.arange(20.0), "y": ["a", "b"] * 10})
    table.to_csv(tmp_path / "t.csv", index=False)
    result = forklift_here("ml", "fit", "--data", tmp_path / "t.csv", "--model", "tree", tmp_path / "out", check=False)
    assert result.returncode == 2 and not (tmp_path / "out").exists()
    assert result.stderr.strip().endswith(
        "t.csv: two of the model's input columns would be named 'colour=red' (a category's value 'NAME=VALUE' and a "
        "column of that name); rename the column"
    )
