"""TPE with median pruning against random search without pruning, under the same wall-clock budget per search.

Each search tunes the slim yolov3-tiny of bench/train on generated shapes (lr on a log scale, optimiser, momentum,
batch, weight decay, over the ranges of `--space narrow` or `wide`; a fixed number of epochs per trial) with
`forklift tune`'s own machinery for `--minutes` of wall-clock time, once per seed and per strategy, one after the
other on the same machine. From each study it reads when every trial ended and computes: the best val mAP@.5
reached, the best-so-far over time, the time TPE + pruning needed to reach random search's final best of the same
seed (as a share of the time random search took to reach it, and of random search's whole budget), and the share
of the epochs that unpruned trials would have run which pruning saved. A search cut at a third or two thirds of
its budget is the same search as one given that budget (the same seed draws the same trials; a trial still running
at the cut does not count), so the comparison is also made at those budgets. Writes bench/results/tune/search.json
(or search-seedsA-B.json for --first-seed) and prints a table.

    .venv/bin/python bench/tune/search.py [--minutes 5] [--seeds 3] [--first-seed 0] [--n 300] [--space narrow|wide]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from forklift.data.synth import CLASSES, synth_shapes
from forklift.shared_data import shared_data_path
from forklift.train.settings import TrainSettings
from forklift.train.small_cfg import slim_cfg
from forklift.tune.search import Plan, tune
from forklift.tune.training import TrainingJob, training_space
from forklift.tune.trial import Search
from forklift.vocabulary import Task

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "tune"
SIZE = 160
EPOCHS = 6
SPACES = {
    "narrow": [  # ranges around what trains this model well
        "lr=3e-4..3e-2:log",
        "optimizer=adamw,momentum,rmsprop",
        "momentum=0.8..0.98",
        "batch=8,16,32",
        "weight_decay=1e-5..1e-2:log",
    ],
    "wide": [  # as a user new to this model would give them: every optimiser, lr over three decades
        "lr=1e-4..1e-1:log",
        "optimizer=sgd,momentum,adam,adamw,rmsprop,adagrad,adadelta",
        "momentum=0.8..0.99",
        "batch=8,16,32",
        "weight_decay=0..0.1",
    ],
}
STRATEGIES = {"tpe+median": ("tpe", "median"), "random": ("random", "none")}
BUDGET_SHARES = (1 / 3, 2 / 3, 1.0)  # the searches cut at these shares of --minutes are compared too


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="wall-clock budget of each search")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    parser.add_argument("--n", type=int, default=300, help="images generated (80%% train, 10%% val)")
    parser.add_argument("--work", type=Path, default=None, help="folder for the data and the studies")
    parser.add_argument("--space", choices=sorted(SPACES), default="narrow", help="the ranges searched")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="forklift-tune-bench-"))
    data = work / "shapes"
    if not (data / "dataset.json").is_file():
        synth_shapes(data, args.n, SIZE, seed=0)
    cfg = work / "yolov3-tiny-slim.cfg"
    cfg.write_text(slim_cfg(shared_data_path("darknet/yolov3-tiny.cfg"), len(CLASSES), SIZE)[0], encoding="utf-8")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in STRATEGIES}
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    for seed in seeds:
        for name, (sampler, pruner) in STRATEGIES.items():
            out = work / f"{name}-seed{seed}"
            print(f"{name}, seed {seed}: {args.minutes:g} min", flush=True)
            runs[name].append(
                _search(data, cfg, out, sampler, pruner, SPACES[args.space], seed=seed, minutes=args.minutes)
            )
    budgets = [args.minutes * 60 * share for share in BUDGET_SHARES]
    comparison = [_compare(tpe, rnd, budgets) for tpe, rnd in zip(runs["tpe+median"], runs["random"], strict=True)]
    summary = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "data": {"n": args.n, "size": SIZE, "seed": 0},
        "epochs_per_trial": EPOCHS,
        "space": {args.space: SPACES[args.space]},
        "budget_minutes": args.minutes,
        "runs": runs,
        "comparison": comparison,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "search.json" if args.first_seed == 0 else f"search-seeds{seeds[0]}-{seeds[-1]}.json"
    (RESULTS / name).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    _print(runs, comparison, args.minutes)


def _search(
    data: Path, cfg: Path, out: Path, sampler: str, pruner: str, space: list[str], *, seed: int, minutes: float
) -> dict:
    """One search of `minutes`; its trials' ends (seconds since the start), values and epochs run."""
    started = time.time()
    search = Search(
        job=TrainingJob(TrainSettings.of(data=data, cfg=cfg, epochs=EPOCHS, seed=seed), "map50"),
        out=out,
        dimensions=tuple(training_space(space, Task.DETECT)),
        deadline=started + minutes * 60,
    )
    plan = Plan(study=out.name, storage=None, sampler=sampler, pruner=pruner, trials=1000, seed=seed)
    study = tune(search, plan)
    trials = []
    for trial in study.get_trials(deepcopy=False):
        if trial.datetime_complete is None or trial.state not in (TrialState.COMPLETE, TrialState.PRUNED):
            continue
        trials.append(
            {
                "number": trial.number,
                "state": trial.state.name.lower(),
                "value": trial.value,
                "ended_s": round(trial.datetime_complete.timestamp() - started, 1),
                "epochs": trial.user_attrs.get("epochs", EPOCHS),
                "params": trial.params,
            }
        )
    values = [t["value"] for t in trials if t["value"] is not None]
    return {"seed": seed, "trials": trials, "best": max(values, default=0.0)}


def _compare(tpe: dict, rnd: dict, budgets: list[float]) -> dict:
    """Per budget: when TPE + pruning first reached random search's best within it (same seed); the epochs
    pruning saved over the whole search."""
    ran = sum(t["epochs"] for t in tpe["trials"])
    unpruned = EPOCHS * len(tpe["trials"])
    return {
        "seed": tpe["seed"],
        "budgets": [_reached(tpe, rnd, budget) for budget in budgets],
        "epochs_saved_share": round(1 - ran / unpruned, 3) if unpruned else 0.0,
        "tpe_trials": len(tpe["trials"]),
        "random_trials": len(rnd["trials"]),
    }


def _reached(tpe: dict, rnd: dict, budget: float) -> dict:
    """Random search's best among its trials that ended within `budget` seconds, when it got there, and when TPE +
    pruning first did (None: not within the budget)."""
    random_ended, tpe_ended = _ended_within(rnd, budget), _ended_within(tpe, budget)
    target = max((value for _, value in random_ended), default=0.0)
    return {
        "budget_s": round(budget),
        "target": target,
        "random_reached_s": min((ended for ended, value in random_ended if value == target), default=None),
        "tpe_reached_s": min((ended for ended, value in tpe_ended if value >= target), default=None),
        "tpe_best": max((value for _, value in tpe_ended), default=0.0),
    }


def _ended_within(run: dict, budget: float) -> list[tuple[float, float]]:
    """(when it ended, its value) of the search's trials with a value that ended within `budget` seconds."""
    return [(t["ended_s"], t["value"]) for t in run["trials"] if t["value"] is not None and t["ended_s"] <= budget]


def _print(runs: dict[str, list[dict]], comparison: list[dict], minutes: float) -> None:
    print(f"\nbest val mAP@.5 after {minutes:g} min per search:")
    for name, seeds in runs.items():
        bests = [r["best"] for r in seeds]
        print(f"  {name:<11} " + "  ".join(f"{b:.3f}" for b in bests) + f"   mean {statistics.mean(bests):.3f}")
    print("seed  budget  best tpe/random  random reached it  tpe+median reached it  ratio  of budget")
    for row in comparison:
        for cut in row["budgets"]:
            tpe, rnd = cut["tpe_reached_s"], cut["random_reached_s"]
            ratio = f"{tpe / rnd:.2f}" if tpe is not None and rnd else "n/a"
            of_budget = "n/a" if tpe is None else f"{tpe / cut['budget_s']:.2f}"
            shown = "never" if tpe is None else f"{tpe:.0f} s"
            print(
                f"{row['seed']:>4}  {cut['budget_s']:>4} s  {cut['tpe_best']:.3f}/{cut['target']:.3f}  "
                f"{rnd or 0:>15.0f} s  {shown:>21}  {ratio:>5}  {of_budget:>9}"
            )
        print(
            f"      epochs saved by pruning {row['epochs_saved_share']:.0%}, "
            f"trials {row['tpe_trials']}/{row['random_trials']}"
        )


if __name__ == "__main__":
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    main()
