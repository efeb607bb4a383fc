"""`forklift tune`: an Optuna study whose trials are training runs or fits of a table, in K worker processes,
watched from here.

Each worker is a spawned process pinned to its own CPU set of this machine's placement plan (or given its own
GPU) that takes trials from the shared study until the study holds `trials` finished ones (complete or pruned)
or the time is up. This process starts them, prints each trial as it ends with a progress bar over the trials,
and at the end writes the report and keeps the best trial's model directory as OUT/best. Ctrl-C stops the
workers (their running trials are marked failed) and the same command resumes the study.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import multiprocessing
import os
import re
import shutil
import signal
import socket
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from multiprocessing.process import BaseProcess
from pathlib import Path

import optuna
from optuna.storages import BaseStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState
from tqdm import tqdm

from forklift.errors import ForkliftError
from forklift.tune import PRUNERS, SAMPLERS
from forklift.tune.report import describe_trial, write_report
from forklift.tune.space import Dimension
from forklift.tune.storage import fail_dead_trials, open_storage
from forklift.tune.trial import Search, StepUnit, run_trial

MEDIAN_STARTUP_TRIALS = 2  # complete trials before the median pruner judges others (small searches prune too)
MEDIAN_WARMUP_SHARE = 0.5  # a trial is judged from half its steps on: before that its mAP is noise (bench/tune)
POLL_S = 1.0
FAILED_WITHOUT_VALUE = re.compile(r"Trial \d+ failed with value None\.")  # Optuna's second line of a failed trial
STOP_GRACE_S = 60.0
MAX_RESTARTS = 3  # workers that die (not trials that fail) before the search gives up
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


@dataclass(frozen=True)
class Plan:
    """How the study is searched: its storage and name, the sampler and pruner, and the workers."""

    study: str
    storage: str | None  # None: the journal file in OUT
    sampler: str = "tpe"
    pruner: str = "median"
    trials: int = 20
    parallel: int = 1
    seed: int = 0
    device: str = "cpu"


def tune(search: Search, plan: Plan, *, keep_all: bool = False) -> optuna.Study:
    """Run (or resume) the search to `plan.trials` finished trials; returns the study."""
    ranges = [d.name for d in search.dimensions if not d.is_grid]
    if plan.sampler == "grid" and ranges:
        raise ForkliftError(
            f"--sampler grid: every --space must be a list of values (NAME=A,B,C), but {ranges[0]} is a range "
            "(without --space, the default space's are ranges)"
        )
    storage = open_storage(plan.storage, search.out, parallel=plan.parallel)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(
            study_name=plan.study, storage=storage, direction=search.job.direction, load_if_exists=True
        )
    _check_same_search(study, search)
    for number in fail_dead_trials(storage, plan.study):
        print(f"trial {number}: its process is gone; marked failed", flush=True)
    done = _finished(study)
    if done < plan.trials:
        _run_workers(search, plan, study, storage, done)
    write_report(study, search.out, search.job.metric, search.job.steps.unit)
    _keep_best(study, search.out, keep_all=keep_all)
    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        raise ForkliftError(
            f"no trial completed, so there is no {search.out / 'best'}: {search.out / 'trials.csv'} lists the "
            "trials (a failed one's reason is printed above; a pruned one stopped early)"
        )
    return study


def _check_same_search(study: optuna.Study, search: Search) -> None:
    """A study remembers what it measures and over what space; resuming it with another metric, data set, fixed
    setting (--epochs, --img) or --space is refused before a trial starts (another space's choices failed each
    trial in Optuna, and other settings' trials would be ranked against the old ones)."""
    space = " ".join(sorted(_kept(dimension) for dimension in search.dimensions))
    recorded = {"metric": search.job.metric} | search.job.inputs() | {"space": space}
    differing = [key for key, value in recorded.items() if study.user_attrs.get(key, value) != value]
    if differing:
        key = differing[0]
        raise ForkliftError(
            f"study {study.study_name!r} measures {key} {study.user_attrs[key]}, not {recorded[key]}; "
            "give another --study (or OUT) for a new search"
        )
    for key, value in recorded.items():
        if key not in study.user_attrs:
            study.set_user_attr(key, value)


def _kept(dimension: Dimension) -> str:
    """What a study keeps of a dimension: its choices, or a range's kind; a range may move (Optuna takes that),
    a list of choices or a range's scale may not (each trial failed)."""
    if dimension.choices is not None:
        return str(dimension)
    kind = "whole" if dimension.step is not None else "real"
    return f"{dimension.name}={kind} range{':log' if dimension.log else ''}"


def _finished(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=FINISHED))


def _run_workers(search: Search, plan: Plan, study: optuna.Study, storage: BaseStorage, done: int) -> None:
    """Start the workers and follow the study until they end; a worker that dies (killed, out of memory) has its
    trial marked failed and another takes its place; Ctrl-C stops them all and is raised again."""
    places = worker_places(plan.parallel, plan.device)
    remaining = plan.trials - done
    shares = [remaining // len(places) + (i < remaining % len(places)) for i in range(len(places))]
    context = multiprocessing.get_context("spawn")  # no forked torch state; also how other hosts join

    def start(index: int, share: int) -> BaseProcess:
        cpus, device = places[index]
        seed = plan.seed + 1000 * index + len(study.get_trials(deepcopy=False))
        worker = context.Process(target=work, args=(search, plan, cpus, device, share, seed), daemon=True)
        worker.start()
        return worker

    workers = {index: start(index, share) for index, share in enumerate(shares) if share > 0}
    restarts = 0
    shown: set[int] = {t.number for t in study.get_trials(deepcopy=False) if t.state.is_finished()}
    bar = tqdm(total=plan.trials, initial=done, desc=f"study {plan.study}", unit="trial", disable=None)
    with _interrupt_flag() as interrupted:
        while any(worker.is_alive() for worker in workers.values()) and not interrupted.is_set():
            interrupted.wait(POLL_S)  # wakes at once on Ctrl-C
            for index, worker in list(workers.items()):
                if worker.is_alive() or not worker.exitcode or _finished(study) >= plan.trials:
                    continue
                for number in fail_dead_trials(storage, plan.study):
                    bar.write(f"trial {number}: its worker died (exit {worker.exitcode}); marked failed")
                restarts += 1
                if restarts > MAX_RESTARTS:
                    raise ForkliftError(f"tuning workers died {restarts} times (last exit {worker.exitcode})")
                workers[index] = start(index, plan.trials - _finished(study))
            shown |= _show_ended(study, shown, bar, search.job.steps.unit)
        _show_ended(study, shown, bar, search.job.steps.unit)  # those that ended since the last look
        bar.close()
        if interrupted.is_set():
            _stop(list(workers.values()))
            finished = _finished(study)
            print(f"stopped: {finished} of {plan.trials} trials finished; the same command continues", flush=True)
            raise KeyboardInterrupt


@contextlib.contextmanager
def _interrupt_flag() -> Iterator[threading.Event]:
    """Ctrl-C (SIGINT) or SIGTERM (`kill`, a scheduler) sets the flag the watch loop checks, instead of raising
    inside whatever library call the loop is in (a storage's file lock, a database driver), so the workers are
    stopped too (SIGTERM's default would end this process alone and leave them training); installed explicitly, it
    also works where the process was started with SIGINT ignored (a background job, nohup ... &)."""
    flag = threading.Event()
    previous = {sig: signal.signal(sig, lambda _signum, _frame: flag.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _show_ended(study: optuna.Study, shown: set[int], bar: tqdm, unit: StepUnit) -> set[int]:
    """Print the trials that ended since the last look, in the order they ended, each marked "best so far" when it
    was the best when it ended (several can be, between two looks); their numbers."""
    trials = study.get_trials(deepcopy=False)
    finished = sorted((t for t in trials if t.state.is_finished()), key=_ended_at)
    for at, trial in enumerate(finished):
        if trial.number not in shown:
            bar.write(describe_trial(trial, _best(finished[: at + 1], study.direction), unit))
    best = _best(trials, study.direction)
    bar.n = sum(1 for t in trials if t.state in FINISHED)
    if best is not None and best.value is not None:
        bar.set_postfix(best=f"{best.value:.4f} (trial {best.number})", refresh=False)
    bar.refresh()
    return {t.number for t in finished}


def _ended_at(trial: FrozenTrial) -> tuple[datetime.datetime, int]:
    return trial.datetime_complete or datetime.datetime.max, trial.number


def _best(trials: list[FrozenTrial], direction: StudyDirection) -> FrozenTrial | None:
    """The complete trial of the best value (the first of equals)."""
    sign = 1.0 if direction == StudyDirection.MAXIMIZE else -1.0
    complete = [(t.value, t) for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    return max(complete, key=lambda pair: (sign * pair[0], -pair[1].number))[1] if complete else None


def _stop(workers: Sequence[BaseProcess]) -> None:
    """Interrupt the workers at once (a terminal's Ctrl-C reaches them already, a signal to this process alone does
    not; a worker ignores the second one), give them time to mark their trials failed, then end what is left."""
    for worker in workers:
        if worker.is_alive() and worker.pid is not None:
            os.kill(worker.pid, signal.SIGINT)
    deadline = time.monotonic() + STOP_GRACE_S
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            worker.terminate()


def worker_places(parallel: int, device: str) -> list[tuple[tuple[int, ...] | None, str]]:
    """Each worker's CPU set (None: all, for one worker) and device: GPUs in turn, or this host's placement plan."""
    if device.startswith("cuda") and ":" not in device:
        import torch

        count = max(1, torch.cuda.device_count())
        return [(None, f"cuda:{index % count}") for index in range(parallel)]
    if parallel == 1:
        return [(None, device)]
    from forklift.system.placement import make_plan
    from forklift.system.topology import current

    return [(instance.cpus, device) for instance in make_plan(current(), instances=parallel).instances]


def work(search: Search, plan: Plan, cpus: tuple[int, ...] | None, device: str, share: int, seed: int) -> None:
    """A worker process: take trials from the study until `share` are done here or the study is complete."""
    import torch

    # Interruptible even when started from a shell's background job, which leaves SIGINT ignored in its children:
    # the parent's SIGINT must end the running trial (marked failed) and this worker.
    signal.signal(signal.SIGINT, _interrupt_once)
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
        torch.set_num_threads(len(cpus))
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("optuna.study._optimize").addFilter(_without_forklift_failures)
    storage = open_storage(plan.storage, search.out, parallel=plan.parallel)
    study = optuna.load_study(
        study_name=plan.study,
        storage=storage,
        sampler=make_sampler(plan.sampler, search, seed=seed),
        pruner=make_pruner(plan.pruner, search),
    )
    timeout = None if search.deadline is None else max(0.0, search.deadline - time.time())
    enough = optuna.study.MaxTrialsCallback(plan.trials, states=FINISHED)
    with contextlib.suppress(KeyboardInterrupt):  # the trial is marked failed; the parent reports the stop
        study.optimize(
            partial(run_trial, search, device),
            n_trials=share,
            timeout=timeout,
            callbacks=[enough],
            catch=(ForkliftError,),
            gc_after_trial=True,
        )


def _without_forklift_failures(record: logging.LogRecord) -> bool:
    """Keep Optuna's record of a trial unless the trial failed with a ForkliftError (the search prints that
    trial's one line itself, where Optuna would add the traceback and a line saying its value was None) or was
    stopped by Ctrl-C (the search says it stopped, and how to go on)."""
    if record.exc_info is not None and isinstance(record.exc_info[1], ForkliftError | KeyboardInterrupt):
        return False
    return not FAILED_WITHOUT_VALUE.fullmatch(record.getMessage())


def _interrupt_once(_signum: int, _frame: object) -> None:
    """A worker's first SIGINT ends its trial; a second (the terminal's Ctrl-C and the parent's forward of it) is
    ignored, so it cannot cut Optuna's marking of that trial failed short."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def make_sampler(name: str, search: Search, *, seed: int) -> optuna.samplers.BaseSampler:
    """Optuna's sampler for `--sampler name`."""
    samplers = optuna.samplers
    if name == "tpe":
        # group: momentum, drawn only for some optimisers, is modelled with them instead of on its own; the first
        # 10 trials are random (Optuna's default; fewer leave a 7-way optimiser choice barely seen). bench/tune
        return samplers.TPESampler(seed=seed, multivariate=True, group=True)
    if name == "random":
        return samplers.RandomSampler(seed=seed)
    if name == "grid":
        return samplers.GridSampler({d.name: list(d.choices or ()) for d in search.dimensions}, seed=seed)
    if name == "cmaes":
        return samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if name == "gp":
        return samplers.GPSampler(seed=seed)
    raise ForkliftError(f"--sampler {name}: one of {', '.join(SAMPLERS)}")


def make_pruner(name: str, search: Search) -> optuna.pruners.BasePruner:
    """Optuna's pruner for `--pruner name`; the step and Hyperband's resource are the job's (epoch, round)."""
    steps = search.job.steps
    if name == "median":
        warmup = int(steps.last * MEDIAN_WARMUP_SHARE)
        return optuna.pruners.MedianPruner(n_startup_trials=MEDIAN_STARTUP_TRIALS, n_warmup_steps=warmup)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=steps.every, max_resource=steps.last)
    if name == "none":
        return optuna.pruners.NopPruner()
    raise ForkliftError(f"--pruner {name}: one of {', '.join(PRUNERS)}")


def _keep_best(study: optuna.Study, out: Path, *, keep_all: bool) -> None:
    """OUT/best becomes a copy of the best trial's model directory (without its checkpoints); the finished
    trials' other folders on this host are removed unless `keep_all`."""
    trials = study.get_trials(deepcopy=False)
    best = _best(trials, study.direction)
    if best is not None:
        folder = _own_folder(best, out)
        if folder is not None:
            staged = out / ".best-partial"
            shutil.rmtree(staged, ignore_errors=True)
            shutil.copytree(folder, staged, ignore=shutil.ignore_patterns("checkpoints"))
            (staged / "trial.json").write_text(
                json.dumps({"trial": best.number, "value": best.value, "params": best.params}, indent=2) + "\n",
                encoding="utf-8",
            )
            shutil.rmtree(out / "best", ignore_errors=True)
            staged.rename(out / "best")
        else:
            where = f"{best.user_attrs.get('host')}:{best.user_attrs.get('folder')}"
            print(f"the best trial ({best.number}) ran elsewhere or left no folder: {where}", flush=True)
    if keep_all:
        return
    for trial in trials:
        folder = _own_folder(trial, out)
        if folder is not None and trial.state.is_finished() and (best is None or trial.number != best.number):
            shutil.rmtree(folder, ignore_errors=True)


def _own_folder(trial: FrozenTrial, out: Path) -> Path | None:
    """The trial's folder when it is one of OUT/trials/ on this host and exists; None otherwise.

    Anything else is never copied or removed: a worker killed before it recorded its folder leaves none (and
    `Path("")` is the directory forklift was started in), and a folder recorded on another host is not this one's."""
    recorded = trial.user_attrs.get("folder")
    if not recorded or trial.user_attrs.get("host", socket.gethostname()) != socket.gethostname():
        return None
    folder = Path(recorded).resolve()
    if folder.parent != (out / "trials").resolve() or not folder.is_dir():
        return None
    return folder
