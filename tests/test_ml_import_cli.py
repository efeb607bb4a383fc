"""`forklift ml import`: models XGBoost, LightGBM and skl2onnx saved become model directories that `ml predict` and
`eval` take as `ml fit`'s (`forklift serve` of one: tests/test_serve_tabular.py); the features named as the file
names them, by --features, or f0, f1 ...; bad input one line each."""

from __future__ import annotations

import json
from pathlib import Path

import lightgbm
import numpy as np
import pandas as pd
import pytest
import xgboost
from helpers import forklift_here
from skl2onnx import to_onnx
from sklearn.ensemble import RandomForestRegressor
from sklearn.metrics import log_loss

from forklift.cli.ml import IMPORT_CHOICES
from forklift.ml.tree_import import IMPORT_TYPES
from forklift.model_files.model_dir import open_model_dir, tabular_settings


def rows(count: int, seed: int) -> pd.DataFrame:
    """Two numbers (b missing in a tenth of the rows) and a label that depends on both."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=count).round(3), rng.normal(size=count).round(3)
    label = (a + 0.5 * b + 0.3 * rng.normal(size=count) > 0).astype(int)
    b[rng.random(count) < 0.1] = np.nan
    return pd.DataFrame({"age": a, "hours": b, "label": label})


def predicted(model: Path, data: Path) -> list[dict]:
    return json.loads(forklift_here("ml", "predict", model, data, "--json").stdout)


def test_an_xgboost_booster_predicts_and_is_measured_as_xgboost_predicts(tmp_path: Path) -> None:
    train, test = rows(400, 0), rows(150, 1)
    booster = xgboost.XGBClassifier(n_estimators=20, max_depth=3, n_jobs=1).fit(train[["age", "hours"]], train.label)
    booster.save_model(tmp_path / "booster.json")
    test.to_csv(tmp_path / "test.csv", index=False)
    out = tmp_path / "imported"
    said = forklift_here("ml", "import", tmp_path / "booster.json", "--target", "label", out).stdout
    assert said.startswith("BoostingMachineClassifier (2 classes, 2 features) from ")
    assert "\ninput              2 features\n" in forklift_here("models", "inspect", out).stdout  # a row, not WxH
    settings = tabular_settings(open_model_dir(out).config, out)
    assert settings.names == ("age", "hours") and settings.classes == (0, 1) and settings.target == "label"
    expected = booster.predict_proba(test[["age", "hours"]])
    scores = [[row["score_0"], row["score_1"]] for row in predicted(out, tmp_path / "test.csv")]
    np.testing.assert_allclose(scores, expected, atol=1e-5)
    measured = forklift_here("eval", out, "--data", tmp_path / "test.csv", "--out", tmp_path / "eval", "--json")
    report = json.loads(measured.stdout)
    assert report["target"] == "label" and report["log_loss"] == pytest.approx(log_loss(test.label, expected), abs=1e-5)


def test_a_lightgbm_regressor_with_named_features_and_an_onnx_graph_of_another_suffix(tmp_path: Path) -> None:
    train = rows(300, 2)
    X, y = train[["age", "hours"]].to_numpy(), train.age * 2 - train.hours.fillna(0)
    lightgbm.LGBMRegressor(n_estimators=10, verbose=-1).fit(X, y).booster_.save_model(tmp_path / "lgb.txt")
    forest = RandomForestRegressor(n_estimators=4, max_depth=4, random_state=0).fit(np.nan_to_num(X), y)
    (tmp_path / "forest.bin").write_bytes(to_onnx(forest, np.nan_to_num(X[:1]).astype(np.float32)).SerializeToString())
    complete = train.fillna(0.0)
    complete.to_csv(tmp_path / "rows.csv", index=False)
    forklift_here("ml", "import", tmp_path / "lgb.txt", "--features", "age, hours", tmp_path / "lgb")
    forklift_here("ml", "import", tmp_path / "forest.bin", "--type", "onnx", tmp_path / "forest")
    booster = lightgbm.Booster(model_file=tmp_path / "lgb.txt")
    lgb_values = [row["prediction"] for row in predicted(tmp_path / "lgb", tmp_path / "rows.csv")]
    np.testing.assert_allclose(lgb_values, booster.predict(complete[["age", "hours"]].to_numpy()), rtol=1e-5, atol=1e-5)
    complete.rename(columns={"age": "f0", "hours": "f1"}).to_csv(tmp_path / "f.csv", index=False)  # unnamed: f0, f1
    forest_values = [row["prediction"] for row in predicted(tmp_path / "forest", tmp_path / "f.csv")]
    np.testing.assert_allclose(forest_values, forest.predict(complete[["age", "hours"]].to_numpy()), rtol=1e-5)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["model.bin"], "model.bin: its suffix does not say what it holds; give --type (xgb_json, lightgbm"),
        (["booster.json", "--features", "a,b,c"], "--features gives 3 names; the model in "),
        (["booster.json", "--features", "a,a"], "--features names 'a' twice"),
        (["absent.json"], "absent.json: no such file"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, arguments: list[str], message: str) -> None:
    train = rows(100, 3)
    xgboost.XGBRegressor(n_estimators=2).fit(train[["age", "hours"]].to_numpy(), train.age).save_model(
        tmp_path / "booster.json"
    )
    (tmp_path / "model.bin").write_bytes(b"\x00")
    result = forklift_here("ml", "import", *[tmp_path / arguments[0], *arguments[1:]], tmp_path / "out", check=False)
    assert result.returncode == 2 and result.stdout == ""
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_the_verbs_choices_are_the_readers_types() -> None:
    assert IMPORT_CHOICES == IMPORT_TYPES
