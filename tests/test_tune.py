"""`forklift tune`: the search space, a tiny search end to end (checked with Optuna's own `load_study`), pruning,
a killed worker, Ctrl-C and resume, CPU sets of parallel workers, and two processes sharing a study in a real
PostgreSQL server. Trials train the small Darknet classifier on generated shapes for a few short epochs."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from helpers import CFGS, forklift, forklift_here
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState
from postgres import postgres_server

from forklift.data.synth import synth_shapes
from forklift.errors import ForkliftError
from forklift.train.settings import TrainSettings
from forklift.tune.search import Plan, _check_same_search, _keep_best, tune
from forklift.tune.space import parse_dimension
from forklift.tune.training import SETTINGS, TrainingJob, training_space
from forklift.tune.trial import Search
from forklift.vocabulary import Task

CLASSIFIER = CFGS / "shapes-classifier.cfg"
LR = "lr=1e-3..1e-2:log"


def journal(out: Path) -> JournalStorage:
    return JournalStorage(JournalFileBackend(str(out / "study.journal")))


def tune_command(data: Path, out: Path, *options: str) -> list[str | Path]:
    return ["tune", "--data", data, "--cfg", CLASSIFIER, "--epochs", "2", "--space", LR, *options, out]


def started(command: list[str | Path], *, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "forklift.cli", *map(str, command)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def running_trial(out: Path, study: str, timeout: float = 120) -> optuna.trial.FrozenTrial:
    """The first trial of the search in `out` seen running with its owner recorded (waits for it to get there)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        trials = []
        if (out / "study.journal").exists():
            with contextlib.suppress(KeyError):  # the study is not created yet
                trials = optuna.load_study(study_name=study, storage=journal(out)).get_trials(deepcopy=False)
        for trial in trials:
            if trial.state == TrialState.RUNNING and "pid" in trial.user_attrs:
                return trial
        time.sleep(0.1)
    raise AssertionError(f"no trial of {study} started running within {timeout} s")


# -- the search space: fast, no training


def test_space_specs() -> None:
    lr = parse_dimension("lr=1e-4..1e-1:log", SETTINGS)
    assert (lr.low, lr.high, lr.log, lr.choices, lr.step) == (1e-4, 1e-1, True, None, None)
    assert parse_dimension("batch=8,16,32", SETTINGS).choices == (8, 16, 32)
    assert parse_dimension("img=320..416", SETTINGS).step == 32
    assert parse_dimension("weight-decay=0..0.1", SETTINGS).name == "weight_decay"
    assert parse_dimension("aug-hsv=0..2", SETTINGS).name == "aug_hsv"
    assert parse_dimension("aug_scale=0.1,0.3", SETTINGS).choices == (0.1, 0.3)
    assert parse_dimension("optimizer=sgd,adam", SETTINGS).choices == ("sgd", "adam")
    assert parse_dimension("epochs=6", SETTINGS).choices == (6,)
    assert [d.name for d in training_space([], Task.DETECT)] == ["lr", "optimizer", "momentum", "batch"]
    for spec, problem in [
        ("speed=1..2", "unknown setting 'speed'"),
        ("lr=1e-1..1e-4", "from low to high"),
        ("lr=0..1e-2:log", "must start above 0"),
        ("optimizer=adam,lbfgs", "not 'lbfgs'"),
        ("batch=8.5,16", "whole number"),
        ("img=100..300", "multiples of 32"),
        ("img=320,400", "multiples of 32"),
        ("lr", "NAME=LOW..HIGH"),
    ]:
        with pytest.raises(ForkliftError, match=problem):
            training_space([spec], Task.DETECT)
    with pytest.raises(ForkliftError, match="needs an optimizer with momentum"):
        training_space(["momentum=0.8..0.9"], Task.DETECT)
    with pytest.raises(ForkliftError, match="given twice"):
        training_space(["lr=0.1", "lr=0.2"], Task.DETECT)
    for spec, problem in [  # values `forklift train` refuses: each trial that drew one failed
        ("momentum=0.5..1.5", "--space momentum: --momentum 1.5: must be from 0 up to (not including) 1"),
        ("lr=0..0.1", "--space lr: --lr 0.0: must be a finite number above 0"),
        ("aug_shift=0.1,0.7", "--space aug_shift: --aug-shift 0.7: must be from 0 to 0.5"),
    ]:
        with pytest.raises(ForkliftError, match=re.escape(problem)):
            training_space(["optimizer=momentum", spec], Task.DETECT)


def test_space_file(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text("lr: 1e-4..1e-2:log\nbatch: [8, 16]\nmosaic: [on, off]\noptimizer: [momentum]\nmomentum: 0.9\n")
    dimensions = {d.name: d for d in training_space([str(path)], Task.DETECT)}
    assert dimensions["lr"].log and dimensions["batch"].choices == (8, 16)
    assert dimensions["mosaic"].choices == ("on", "off") and dimensions["momentum"].choices == (0.9,)
    path.write_text("- lr\n")
    with pytest.raises(ForkliftError, match="a YAML mapping"):
        training_space([str(path)], Task.DETECT)


# -- searches: real trials


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tune") / "shapes"
    synth_shapes(root, 160, 64, seed=0, task="classify")
    return root


def test_a_set_without_val_images_is_refused_before_any_trial(tmp_path: Path) -> None:
    """Each trial trained, then failed on an eval.json that no val split could write."""
    data = tmp_path / "no-val"
    synth_shapes(data, 12, 64, seed=2, task="classify")
    index = json.loads((data / "dataset.json").read_text())
    index["images"] = [{**image, "split": "train"} for image in index["images"]]
    (data / "dataset.json").write_text(json.dumps(index))
    result = forklift_here(*tune_command(data, tmp_path / "out", "--trials", "2"), check=False)
    assert result.returncode == 2 and f"{data}: no val images, and each trial is measured on them" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_network_not_given_or_not_there_is_refused_before_any_trial(data: Path, tmp_path: Path) -> None:
    """Each of 20 trials failed on it, one line each, and the study kept the failures."""
    nope = tmp_path / "nope.cfg"
    none_given = "give the network to tune as train takes it: --cfg CFG, --model MODEL_DIR or --arch"
    for args, said in [(["--cfg", str(nope)], f"--cfg {nope}: no such cfg file"), ([], none_given)]:
        result = forklift_here("tune", "--data", data, *args, tmp_path / "out", check=False)
        assert result.returncode == 2 and said in result.stderr and "trial" not in result.stdout, result.stderr
        assert not (tmp_path / "out").exists()


def test_a_study_resumed_may_move_a_range_but_not_its_choices_or_settings(data: Path, tmp_path: Path) -> None:
    """Optuna takes a range moved; another list of choices, a range's scale, or another fixed setting is refused."""
    study = optuna.create_study(study_name="s", storage=journal(tmp_path))

    def search(*space: str, epochs: int = 2) -> Search:
        job = TrainingJob(TrainSettings.of(data=data, cfg=CLASSIFIER, epochs=epochs), "top1")
        return Search(job, tmp_path, tuple(parse_dimension(spec, SETTINGS) for spec in space))

    _check_same_search(study, search("lr=1e-4..1e-2:log", "batch=8,16"))
    _check_same_search(study, search("lr=1e-5..1e-1:log", "batch=8,16"))  # wider: as Optuna takes it
    for refused, words in [(search("lr=1e-4..1e-2", "batch=8,16"), "measures space"),
                           (search("lr=1e-4..1e-2:log", "batch=8,32"), "measures space"),
                           (search("lr=1e-4..1e-2:log", "batch=8,16", epochs=3), "measures settings")]:  # fmt: skip
        with pytest.raises(ForkliftError, match=words):
            _check_same_search(study, refused)


@pytest.mark.slow
def test_tiny_search_keeps_the_best_model(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "search"
    space = ["--space", "optimizer=adamw,momentum,rmsprop", "--space", "momentum=0.8..0.95", "--space", "batch=16,32"]
    result = forklift(*tune_command(data, out, "--trials", "3", "--sampler", "random", "--pruner", "none", *space))
    study = optuna.load_study(study_name="search", storage=journal(out))  # Optuna's own reader
    trials = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(trials) == 3 == len(study.trials)
    for trial in trials:
        assert f"trial {trial.number:>3} {trial.value:.4f}" in result.stdout
        assert ("momentum" in trial.params) == (trial.params["optimizer"] in ("momentum", "rmsprop"))
    with (out / "trials.csv").open(newline="", encoding="utf-8") as handle:
        rows = {int(r["trial"]): r for r in csv.DictReader(handle)}
    assert {n: float(r["top1"]) for n, r in rows.items()} == pytest.approx(
        {t.number: t.value for t in trials}, abs=1e-5
    )
    best = study.best_trial
    assert json.loads((out / "best" / "trial.json").read_text())["trial"] == best.number
    assert json.loads((out / "best" / "eval" / "eval.json").read_text())["top1"] == pytest.approx(best.value)
    assert not (out / "best" / "checkpoints").exists()
    assert sorted(p.name for p in (out / "trials").iterdir()) == [f"{best.number:04d}"]  # the others removed
    for plot in ("history.png", "parallel-coordinates.png", "importance.png", "intermediate.png"):
        assert (out / plot).stat().st_size > 10_000, plot
    predicted = forklift_here("predict", out / "best", data / "images" / "000001.png", "--json")
    assert json.loads(predicted.stdout)["results"][0]["classes"]
    assert "optuna-dashboard" in result.stdout and str(out / "study.journal") in result.stdout


@pytest.mark.slow
def test_median_pruning_stops_a_trial_that_reports_bad_values(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "pruned"
    out.mkdir()
    study = optuna.create_study(study_name="pruned", storage=journal(out), direction="maximize")
    for lr in (0.003, 0.003, 1e-7):  # two that learn, then one that cannot
        study.enqueue_trial({"lr": lr})
    dimensions = tuple(training_space(["lr=1e-8..1e-2:log"], Task.CLASSIFY))
    shared = TrainSettings.of(data=data, cfg=CLASSIFIER, epochs=5, batch=16, seed=0)
    search = Search(TrainingJob(shared, "top1"), out, dimensions)
    tune(search, Plan(study="pruned", storage=None, trials=3, pruner="median"))
    first, second, bad = study.get_trials()
    assert first.state == second.state == TrialState.COMPLETE
    assert bad.state == TrialState.PRUNED and bad.last_step is not None and bad.last_step < 5
    step = bad.last_step
    assert bad.intermediate_values[step] < first.intermediate_values[step]
    assert not search.folder(bad.number).exists()


@pytest.mark.slow
def test_a_trial_is_not_pruned_after_its_last_epoch(data: Path, tmp_path: Path) -> None:
    """Measured only at its last epoch, a bad trial has nothing left to save: it completes with its value (pruned,
    its whole training would be lost and the sampler would not learn what it reached)."""
    out = tmp_path / "last"
    out.mkdir()
    study = optuna.create_study(study_name="last", storage=journal(out), direction="maximize")
    for lr in (0.003, 0.003, 1e-7):
        study.enqueue_trial({"lr": lr})
    dimensions = tuple(training_space(["lr=1e-8..1e-2:log"], Task.CLASSIFY))
    shared = TrainSettings.of(data=data, cfg=CLASSIFIER, epochs=5, val_every=5, batch=16, seed=0)
    search = Search(TrainingJob(shared, "top1"), out, dimensions)
    tune(search, Plan(study="last", storage=None, trials=3, pruner="median"))
    first, second, bad = study.get_trials()
    assert first.state == second.state == bad.state == TrialState.COMPLETE
    assert bad.value is not None and bad.value < min(first.value or 0, second.value or 0)  # the median pruner's case
    assert list(bad.intermediate_values) == [5]


@pytest.mark.slow
def test_a_trial_cut_by_minutes_ends_pruned(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "cut"
    command = tune_command(data, out, "--trials", "1", "--epochs", "200", "--minutes", "0.15", "--pruner", "none")
    result = forklift(*command, check=False)
    (trial,) = optuna.load_study(study_name="cut", storage=journal(out)).trials
    assert trial.state == TrialState.PRUNED and 1 <= trial.user_attrs["epochs"] < 200
    assert f"trial   0 --minutes ran out after epoch {trial.user_attrs['epochs']} of 200" in result.stdout
    assert not (out / "best").exists() and not (out / "trials" / "0000").exists()
    assert result.returncode == 2 and "no trial completed" in result.stderr  # nothing to show for the time


@pytest.mark.slow
def test_a_killed_worker_fails_its_trial_and_the_search_goes_on(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    # seconds: long enough to be killed in
    search = started(tune_command(data, out, "--trials", "2", "--epochs", "3"), cwd=tmp_path)
    victim = running_trial(out, "killed")
    os.kill(victim.user_attrs["pid"], signal.SIGKILL)
    output, _ = search.communicate(timeout=600)
    assert search.returncode == 0, output
    assert f"trial {victim.number}: its worker died (exit -9); marked failed" in output
    trials = optuna.load_study(study_name="killed", storage=journal(out)).get_trials()
    assert trials[victim.number].state == TrialState.FAIL
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 2


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "resume"), [(signal.SIGINT, True), (signal.SIGTERM, False)], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_and_the_same_command_resumes(
    data: Path, tmp_path: Path, sig: signal.Signals, resume: bool
) -> None:
    """Either signal stops the search and its workers; what the same command does next does not depend on which
    one stopped it, so the resume is run once (after Ctrl-C)."""
    out = tmp_path / "resumed"
    command = tune_command(data, out, "--trials", "2", "--epochs", "3")  # seconds: long enough to be interrupted in
    search = started(command, cwd=tmp_path)
    interrupted = running_trial(out, "resumed")
    search.send_signal(sig)  # to the tune process alone, as `kill` sends it: its workers must stop too
    output, _ = search.communicate(timeout=120)
    assert search.returncode == 130, output
    assert "the same command continues" in output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output  # Optuna's, for the trial stopped
    assert not Path(f"/proc/{interrupted.user_attrs['pid']}").exists(), "a worker outlived its search"
    trials = optuna.load_study(study_name="resumed", storage=journal(out)).get_trials()
    assert trials[interrupted.number].state == TrialState.FAIL and trials[-1] == trials[interrupted.number]
    if resume:
        forklift(*command)
        trials = optuna.load_study(study_name="resumed", storage=journal(out)).get_trials()
        assert trials[interrupted.number].state == TrialState.FAIL  # kept, and the study went on after it
        assert [t.state for t in trials if t.number != interrupted.number] == [TrialState.COMPLETE] * 2
        for changed, said in [(("--space", "batch=8,16"), "measures space"), (("--img", "64"), "measures settings")]:
            refused = forklift(*command[:-1], "--trials", "4", *changed, out, check=False)
            assert refused.returncode == 2 and f"study 'resumed' {said}" in refused.stderr, refused.stderr
            assert "Traceback" not in refused.stdout + refused.stderr  # and no trial ran: the study is as it was
            assert len(optuna.load_study(study_name="resumed", storage=journal(out)).get_trials()) == len(trials)


@pytest.mark.slow
def test_parallel_workers_run_on_their_own_cpus(data: Path, tmp_path: Path) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs to give each of two workers its own")
    out = tmp_path / "parallel"
    forklift(*tune_command(data, out, "--trials", "4", "--parallel", "2", "--epochs", "1", "--pruner", "none"))
    trials = optuna.load_study(study_name="parallel", storage=journal(out)).get_trials()
    assert len(trials) == 4 and all(t.state == TrialState.COMPLETE for t in trials)
    cpus_of = {t.user_attrs["pid"]: tuple(t.user_attrs["cpus"]) for t in trials}
    assert len(cpus_of) == 2  # two worker processes
    first, second = cpus_of.values()
    assert first and second and not set(first) & set(second)


def test_cleaning_up_removes_only_the_finished_trials_own_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker killed before it recorded its folder leaves a failed trial without one: the clean-up after the
    search must not read that as the directory forklift was started in (it once removed it, files and all), nor
    touch a folder outside OUT/trials or one recorded on another host."""
    started_in, out = tmp_path / "started-in", tmp_path / "out"
    outside = tmp_path / "elsewhere"
    for folder in (started_in, out / "trials" / "0001", out / "trials" / "0002", out / "trials" / "0003", outside):
        folder.mkdir(parents=True)
        (folder / "keep.txt").write_text("data", encoding="utf-8")
    monkeypatch.chdir(started_in)
    host = socket.gethostname()
    study = optuna.create_study(direction="maximize")
    frozen = [
        ({}, TrialState.FAIL, None),  # killed before it recorded anything
        ({"host": host, "folder": ""}, TrialState.FAIL, None),
        ({"host": host, "folder": str(out / "trials" / "0001")}, TrialState.COMPLETE, 0.5),
        ({"host": host, "folder": str(out / "trials" / "0002")}, TrialState.COMPLETE, 0.9),  # the best
        ({"host": "another-host", "folder": str(out / "trials" / "0003")}, TrialState.COMPLETE, 0.1),
        ({"host": host, "folder": str(outside)}, TrialState.COMPLETE, 0.2),
    ]
    for attrs, state, value in frozen:
        study.add_trial(optuna.trial.create_trial(state=state, value=value, user_attrs=attrs))
    _keep_best(study, out, keep_all=False)
    assert (started_in / "keep.txt").exists() and (outside / "keep.txt").exists()
    assert not (out / "trials" / "0001").exists()  # a finished trial's own folder
    assert (out / "trials" / "0003" / "keep.txt").exists()  # recorded on another host: not this one's to remove
    assert (out / "best" / "keep.txt").exists()
    assert json.loads((out / "best" / "trial.json").read_text(encoding="utf-8"))["trial"] == 3


def test_sqlite_is_refused_for_parallel_trials(data: Path, tmp_path: Path) -> None:
    result = forklift_here(
        *tune_command(data, tmp_path / "s", "--parallel", "2", "--storage", "sqlite:///x.db"), check=False
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "forklift: error: --storage sqlite:///x.db: SQLite locks the whole file, so 2 parallel trials would fail "
        "with 'database is locked'; leave --storage out (a journal file in OUT) or use postgresql://"
    ]


@pytest.mark.slow
def test_two_processes_share_a_study_in_postgresql(data: Path, tmp_path: Path) -> None:
    with postgres_server() as url:
        shared = ["--trials", "4", "--epochs", "1", "--pruner", "none", "--storage", url, "--study", "shared"]
        searches = [started(tune_command(data, tmp_path / f"host{i}", *shared), cwd=tmp_path) for i in range(2)]
        outputs = [search.communicate(timeout=600)[0] for search in searches]
        assert [s.returncode for s in searches] == [0, 0], outputs
        trials = optuna.load_study(study_name="shared", storage=url).get_trials()
    finished = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(finished) >= 4
    assert len({t.user_attrs["pid"] for t in finished}) == 2  # the worker process under each command
