"""`forklift tune --ml`: searches of a forklift.ml model's parameters on a generated table, end to end through the
command (checked with Optuna's own `load_study`), pruning a boosting machine by its rounds, the boosting hook that
shows the model so far, the space of an estimator's parameters, and bad input in one line. Every search runs in
the test's own folder."""

from __future__ import annotations

import csv
import datetime
import json
import os
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest
from helpers import forklift, forklift_here
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.study import StudyDirection
from optuna.trial import TrialState
from sklearn.base import clone
from tqdm import tqdm

from forklift.ml import BoostingMachineClassifier, RandomForestClassifier
from forklift.ml.boosting import RoundHook
from forklift.ml.model_directory import MODELS, make_estimator
from forklift.tune import CLASSIFIER_METRICS
from forklift.tune.report import describe_trial, write_report
from forklift.tune.search import _show_ended
from forklift.tune.space import parse_space
from forklift.tune.tabular import DEFAULT_SPACES, TabularJob, parameter_settings
from forklift.tune.trial import StepUnit

ROWS = 400


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a search (and its clean-up) starts in the test's folder, never the repository's


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A training and a validation table: numbers and a category, a yes/no label that depends on both."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, 3))
    colour = rng.choice(["red", "green", "blue"], ROWS)
    signal = 2 * x[:, 0] - x[:, 1] + (colour == "red") + rng.normal(scale=0.7, size=ROWS)
    frame = pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2], "colour": colour})
    frame["label"] = np.where(signal > 0, "yes", "no")
    root = tmp_path_factory.mktemp("tables")
    frame[:300].to_csv(root / "train.csv", index=False)
    frame[300:].to_csv(root / "val.csv", index=False)
    return root / "train.csv", root / "val.csv"


def journal(out: Path) -> JournalStorage:
    return JournalStorage(JournalFileBackend(str(out / "study.journal")))


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_a_forest_search_keeps_the_best_model_directory(tables: tuple[Path, Path], tmp_path: Path) -> None:
    train, val = tables
    out = tmp_path / "forest"
    space = ["--space", "n_estimators=5..40:log", "--space", "max_depth=2..8", "--space", "max_features=sqrt,0.5,1.0"]
    result = forklift(
        "tune", "--ml", "forest", "--data", train, "--test", val, "--target", "label", "--trials", "3",
        "--parallel", "2", "--sampler", "random", *space, out,
    )  # fmt: skip
    study = optuna.load_study(study_name="forest", storage=journal(out))  # Optuna's own reader
    trials = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(trials) == 3 == len(study.trials) and study.direction == StudyDirection.MINIMIZE  # log-loss
    for trial in trials:
        assert f"trial {trial.number:>3} {trial.value:.4f}" in result.stdout
        assert set(trial.params) == {"n_estimators", "max_depth", "max_features"} and not trial.intermediate_values
    with (out / "trials.csv").open(newline="", encoding="utf-8") as handle:
        rows = {int(r["trial"]): r for r in csv.DictReader(handle)}
    assert {n: float(r["log_loss"]) for n, r in rows.items()} == pytest.approx(
        {t.number: t.value for t in trials}, abs=1e-5
    )
    best = study.best_trial
    assert best.value == min(t.value for t in trials if t.value is not None)
    assert json.loads((out / "best" / "trial.json").read_text())["params"] == best.params
    tabular = json.loads((out / "best" / "forklift.json").read_text())["tabular"]
    assert tabular["estimator"] == "RandomForestClassifier" and tabular["target"] == "label"
    assert tabular["metrics"]["test_log_loss"] == pytest.approx(best.value, rel=1e-12)
    assert {k.removeprefix("test_") for k in tabular["metrics"] if k.startswith("test_")} == set(CLASSIFIER_METRICS)
    assert sorted(p.name for p in (out / "trials").iterdir()) == [f"{best.number:04d}"]  # the others removed
    assert (out / "history.png").is_file() and not (out / "intermediate.png").exists()  # a forest reports no rounds
    assert f"forklift ml predict {out / 'best'} TABLE" in result.stdout
    if len(os.sched_getaffinity(0)) >= 2:  # two workers, each on its own CPUs
        cpus = {t.user_attrs["pid"]: frozenset(t.user_attrs["cpus"]) for t in trials}
        assert len(cpus) == 2 and not frozenset.intersection(*cpus.values())
    predicted = json.loads(forklift_here("ml", "predict", out / "best", val, "--json").stdout)
    assert len(predicted) == 100 and {row["prediction"] for row in predicted} <= {"yes", "no"}


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_settings_drawn_again_take_the_first_trials_value_without_running(
    tables: tuple[Path, Path], tmp_path: Path
) -> None:
    """Two depths and four trials: at least two trials draw settings a complete trial had; they take its value and
    run nothing (no log, no folder), and the search still ends with its best model."""
    train, val = tables
    out = tmp_path / "tree"
    result = forklift_here("tune", "--ml", "tree", "--data", train, "--test", val, "--trials", "4", "--sampler",
                           "random", "--space", "max_depth=2,3", out)  # fmt: skip
    trials = optuna.load_study(study_name="tree", storage=journal(out)).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4
    first: dict[int, optuna.trial.FrozenTrial] = {}
    for trial in trials:
        first.setdefault(trial.params["max_depth"], trial)
    repeats = [t for t in trials if t.number != first[t.params["max_depth"]].number]
    assert len(repeats) >= 2
    for trial in repeats:
        twin = first[trial.params["max_depth"]]
        assert trial.user_attrs["same_as"] == twin.number and trial.value == twin.value
        assert f"trial {trial.number:>3} {trial.value:.4f} (trial {twin.number}'s settings: not run again)" in (
            result.stdout
        )
    ran = sorted(path.name for path in (out / "logs").iterdir())
    assert ran == sorted(f"trial-{t.number:04d}.log" for t in first.values())
    assert json.loads((out / "best" / "trial.json").read_text())["trial"] in {t.number for t in first.values()}


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_a_hopeless_boosting_trial_is_pruned_by_its_rounds(tables: tuple[Path, Path], tmp_path: Path) -> None:
    """40 rounds, reported every 2 (a twentieth of the most rounds), judged from round 20 once two trials are
    complete: a learning rate that cannot learn in 40 rounds trails the median there and is stopped."""
    train, val = tables
    out = tmp_path / "boost"
    out.mkdir()
    study = optuna.create_study(study_name="boost", storage=journal(out), direction="minimize")
    for rate in (0.3, 0.3, 1e-5):
        study.enqueue_trial({"learning_rate": rate})
    space = ["--space", "learning_rate=1e-5..0.5:log", "--space", "num_round=40", "--space", "max_depth=3"]
    result = forklift("tune", "--ml", "boosting", "--data", train, "--test", val, "--trials", "3", *space, out)
    first, second, bad = study.get_trials()
    assert first.state == second.state == TrialState.COMPLETE
    assert list(first.intermediate_values) == list(range(2, 40, 2))  # every 2 rounds but the last
    assert first.intermediate_values[38] == pytest.approx(first.value, abs=0.05)
    assert bad.state == TrialState.PRUNED and bad.last_step == 20
    assert list(bad.intermediate_values) == list(range(2, 22, 2))
    assert all(bad.intermediate_values[r] > first.intermediate_values[r] for r in bad.intermediate_values)
    assert "trial   2 pruned after round 20" in result.stdout
    assert not (out / "trials" / "0002").exists() and (out / "intermediate.png").is_file()


def test_the_boosting_hook_sees_the_model_of_the_rounds_so_far() -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 3))
    y = (X[:, 0] + rng.normal(scale=0.5, size=200) > 0).astype(int)
    seen: dict[int, np.ndarray] = {}

    def look(rounds: int, model: BoostingMachineClassifier) -> None:
        assert model.n_rounds_ == rounds
        seen[rounds] = model.predict_proba(X)

    model = BoostingMachineClassifier(num_round=10, max_depth=3)
    model.fit(X, y, on_rounds=RoundHook(3, look))
    assert list(seen) == [3, 6, 9] and model.n_rounds_ == 10  # not after the last: that model is the fit's
    shorter = clone(model).set_params(num_round=6).fit(X, y)
    np.testing.assert_allclose(seen[6], shorter.predict_proba(X), rtol=1e-6)
    assert "on_rounds" not in model.get_params()


def test_the_space_of_an_estimators_parameters() -> None:
    forest = parameter_settings(RandomForestClassifier())
    specs = ["n_estimators=10..200:log", "max_depth=2..12", "max_features=sqrt,0.5,null", "bootstrap=true,false"]
    n_estimators, max_depth, max_features, bootstrap = parse_space(specs, forest)
    assert (n_estimators.step, n_estimators.log, max_depth.step) == (1, True, 1)  # whole: by default, by the text
    assert max_features.choices == ("sqrt", 0.5, None) and bootstrap.choices == (True, False)
    (lambda_l2,) = parse_space(["lambda_l2=0..10"], parameter_settings(BoostingMachineClassifier()))
    assert lambda_l2.step is None  # a real number, as its default is, though written whole
    for model, kind in MODELS.items():  # every default space names the estimator's own parameters
        for classification in (c for c, name in ((True, kind.classifier), (False, kind.regressor)) if name):
            estimator = make_estimator(model, classification=classification, params={}, threads=1)
            assert parse_space(DEFAULT_SPACES[model], parameter_settings(estimator))
    job = TabularJob("boosting", Path("a"), Path("b"), "y", "regress", "r2", seed=0, rounds=300)
    assert job.direction == StudyDirection.MAXIMIZE and (job.steps.every, job.steps.last) == (15, 300)


@pytest.mark.slow  # over 1.5 s: left out of make test-fast
def test_a_trial_that_fails_says_why_in_one_line(tables: tuple[Path, Path], tmp_path: Path) -> None:
    """Each depth range is valid beside some value of the other, so the search starts; the one combination that is
    not fails its trial with the estimator's line, no traceback, and the others complete."""
    train, val = tables
    out = tmp_path / "depths"
    space = ["--space", "min_max_depth=2,5", "--space", "max_max_depth=3,6", "--space", "max_depth=None"]
    result = forklift_here("tune", "--ml", "boosting", "--data", train, "--test", val, "--trials", "4", "--sampler",
                           "grid", *space, "--space", "num_round=5", "--pruner", "none", out)  # fmt: skip
    states = [t.state for t in optuna.load_study(study_name="depths", storage=journal(out)).get_trials()]
    assert sorted(states, key=str) == sorted([TrialState.COMPLETE] * 3 + [TrialState.FAIL], key=str)
    (failed,) = [line for line in result.stdout.splitlines() if " failed: " in line]
    assert "BoostingMachineClassifier: min_max_depth=5 is above max_max_depth=3" in failed
    assert "Traceback" not in result.stdout + result.stderr and "failed with value" not in result.stderr


@pytest.mark.parametrize(
    ("options", "line"),
    [
        (["--ml", "forest", "--test", "VAL", "--space", "depth=2..5"], "--space depth=2..5: unknown setting 'depth'"),
        (["--ml", "forest", "--test", "VAL", "--space", "n_estimators=5.5..10"], "n_estimators needs a whole number"),
        (
            ["--ml", "forest", "--test", "VAL", "--metric", "rmse"],
            "rmse: RandomForestClassifier is measured by log_loss",
        ),
        (["--ml", "svm", "--test", "VAL", "--metric", "log_loss"], "SupportVectorMachine is measured by accuracy, auc"),
        (["--ml", "forest", "--test", "VAL", "--epochs", "3"], "--epochs: not with --ml"),
        (["--ml", "forest"], "--ml: give --test FILE"),
        (["--test", "VAL"], "--test: only with --ml"),
        (["--ml", "forest", "--test", "NO_B"], "no_b.csv: no column 'b', a feature of the training table"),
        (["--ml", "forest", "--test", "NEW_CLASS"], "new_class.csv: row 1: 'maybe' is not a class of the training"),
        (["--ml", "tree", "--test", "VAL", "--space", "max_depth=0,3"], "--space max_depth: DecisionTreeClassifier: "),
        (["--ml", "forest", "--test", "VAL", "--space", "bootstrap=true,maybe"], "bootstrap='maybe': expected True"),
        (
            ["--ml", "boosting", "--test", "VAL", "--space", "min_max_depth=3..9", "--space", "max_max_depth=4..8"],
            "--space min_max_depth: BoostingMachineClassifier: min_max_depth=9 is above max_max_depth=",
        ),
        (
            ["--ml", "tree", "--test", "VAL", "--space", "max_features=0.5,2.0"],
            "--space max_features: DecisionTreeClassifier: max_features=2.0: expected None, 'auto', 'sqrt', 'log2', "
            "an integer in 1..",
        ),
        (["--ml", "forest", "--test", "VAL", "--metric", "map50"], "--metric map50: a forklift.ml model is measured"),
        (["--ml", "forest", "--test", "VAL", "--minutes", "-1"], "argument --minutes: -1 is not a number above 0"),
        (["--ml", "forest", "--test", "VAL", "--sampler", "grid"], "but n_estimators is a range (without --space, the"),
    ],
    ids=[
        "unknown-parameter",
        "not-whole",
        "metric-of-regressors",
        "no-probabilities",
        "epochs",
        "no-test",
        "test",
        "test-table-lacks-a-feature",
        "test-table-has-a-new-class",
        "value-out-of-range",
        "flag-not-true-or-false",
        "never-valid-beside-the-others",
        "too-wide-for-the-table",
        "a-detectors-metric",
        "negative-minutes",
        "grid-of-the-default-ranges",
    ],
)
def test_bad_input_is_one_line(tables: tuple[Path, Path], tmp_path: Path, options: list[str], line: str) -> None:
    """Refused before any trial starts (a test table that every trial would fail on included)."""
    train, val = tables
    frame = pd.read_csv(val)
    frame.drop(columns="b").to_csv(tmp_path / "no_b.csv", index=False)
    frame.assign(label=["maybe", *frame["label"][1:]]).to_csv(tmp_path / "new_class.csv", index=False)
    files = {"VAL": val, "NO_B": tmp_path / "no_b.csv", "NEW_CLASS": tmp_path / "new_class.csv"}
    given = [str(files.get(option, option)) for option in options]
    result = forklift_here("tune", "--data", train, *given, tmp_path / "out", check=False)
    assert result.returncode == 2
    (printed,) = result.stderr.strip().splitlines()
    assert printed.startswith(("forklift: error: ", "forklift tune: error: ")) and line in printed, printed
    assert not (tmp_path / "out").exists()


def test_a_search_that_completes_no_trial_says_so_and_fails(tables: tuple[Path, Path], tmp_path: Path) -> None:
    """--minutes over before a trial could finish: no best model, no empty plots, and an exit that is not 0."""
    train, val = tables
    out = tmp_path / "no-time"
    result = forklift_here("tune", "--ml", "forest", "--data", train, "--test", val, "--trials", "2", "--minutes",
                           "0.0001", out, check=False)  # fmt: skip
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()[-1:]
    assert line == f"forklift: error: no trial completed, so there is no {out / 'best'}: {out / 'trials.csv'} lists " \
        "the trials (a failed one's reason is printed above; a pruned one stopped early)"  # fmt: skip
    assert "no complete trials" not in (result.stdout + result.stderr).lower()  # Optuna's own warnings
    assert (out / "trials.csv").is_file() and not list(out.glob("*.png")) and not (out / "best").exists()


def test_the_report_tells_a_whole_fraction_from_a_count() -> None:
    """max_features=1.0 (every feature) and max_features=1 (one feature) are different settings."""
    trials = [
        optuna.trial.create_trial(params={"max_features": value, "max_depth": 3}, distributions={
            "max_features": optuna.distributions.CategoricalDistribution([1, 1.0, 0.25]),
            "max_depth": optuna.distributions.IntDistribution(2, 8)}, value=0.5)
        for value in (1.0, 1, 0.25)
    ]  # fmt: skip
    lines = [describe_trial(trial, None, StepUnit.ROUND) for trial in trials]
    for line, written in zip(lines, ("1.0", "1", "0.25"), strict=True):
        assert f"  max_features={written} max_depth=3  " in line


def test_each_trial_that_was_the_best_when_it_ended_is_marked_so(capsys: pytest.CaptureFixture[str]) -> None:
    """Trials that end between two looks of the search are each marked by the best of those ended before them:
    the best of the whole batch alone was marked, so a log-loss that fell 0.5499, 0.5426, 0.5401 had one unmarked."""
    study = optuna.create_study(direction="minimize")
    for value in (0.5499, 0.5426, 0.6, 0.5401):
        study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=value))
    with tqdm(disable=True) as bar:
        shown = _show_ended(study, set(), bar, StepUnit.ROUND)
        study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=0.55))  # after the next look
        assert _show_ended(study, shown, bar, StepUnit.ROUND) == {0, 1, 2, 3, 4}
    marked = ["(best so far)" in line for line in capsys.readouterr().out.splitlines()]
    assert marked == [True, True, False, True, False]


def test_close_small_values_and_short_trials_are_told_apart() -> None:
    """0.007282 and 0.007336 both read 0.0073, each 'best so far'; a trial of 0.4 s read '0 s'."""
    start = datetime.datetime(2026, 1, 1)
    trials = [
        optuna.trial.create_trial(params={}, distributions={}, value=value, user_attrs={},
                                  system_attrs={}) for value in (0.007282, 0.007336, 0.26091)
    ]  # fmt: skip
    for trial, seconds in zip(trials, (0.4, 12.6, 3.0), strict=True):
        trial.datetime_start, trial.datetime_complete = start, start + datetime.timedelta(seconds=seconds)
    lines = [describe_trial(trial, None, StepUnit.ROUND) for trial in trials]
    assert [line.split()[2] for line in lines] == ["0.007282", "0.007336", "0.2609"]
    assert [line.rsplit("  ", 1)[1] for line in lines] == ["0.4 s", "13 s", "3.0 s"]


def test_the_printed_table_gives_each_value_four_decimals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Values of 6 significant digits were printed as written to trials.csv: 0.69532 beside 0.486569."""
    study = optuna.create_study(direction="minimize")
    for value, depth in ((0.69532, 2), (0.486569, 3), (0.5, 4)):
        study.add_trial(optuna.trial.create_trial(
            params={"max_depth": depth}, distributions={"max_depth": optuna.distributions.IntDistribution(2, 8)},
            value=value))  # fmt: skip
    write_report(study, tmp_path, "log_loss", StepUnit.ROUND)
    table = capsys.readouterr().out.split("best trials by log_loss:\n", 1)[1].splitlines()
    assert [line.split()[2] for line in table[1:]] == ["0.4866", "0.5000", "0.6953"]
    assert len({len(line) for line in table}) == 1  # the columns aligned
    assert "0.486569" in (tmp_path / "trials.csv").read_text()  # the file keeps the digits
