"""TPE settings compared on a surrogate made of the learning curves a bench/tune/search.py run measured.

A real comparison of two samplers costs 15 minutes per seed and strategy, so three seeds are all one evening
gives, and three seeds cannot tell a better sampler setting from luck. This replays searches instead: every
trial of the studies under WORK (search.py's --work) that ran all its epochs is a measured learning curve, and
a setting a sampler draws is answered with the curve of one of the two nearest measured settings of the same
optimiser and batch (apart by decades on a log-scale range, else by shares of the range), chosen at random to
stand for the spread between two trainings of nearly the same setting. A trial takes the time the measured
trials took for that many epochs (a line fitted to their durations), and the search stops at --minutes, as in
search.py. Random search without pruning and each TPE variant with forklift's median pruner run for --seeds
seeds; the table gives how often and how soon each reached random search's best of the same seed.

    .venv/bin/python bench/tune/surrogate.py --work /tmp/tune5 [--minutes 15] [--seeds 60] [--space wide]

It chose forklift's TPE settings (bench/README.md); confirm any change with search.py, on real training.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search import EPOCHS, SPACES

from forklift.train.settings import TrainSettings
from forklift.tune.search import make_pruner, make_sampler
from forklift.tune.space import Dimension
from forklift.tune.storage import open_storage
from forklift.tune.training import TrainingJob, draw_settings, training_space
from forklift.tune.trial import Search
from forklift.vocabulary import Task

TPE = optuna.samplers.TPESampler
# forklift's settings before (5 random trials, no groups) and each change alone; "forklift" is both
VARIANTS: dict[str, Callable[[int], optuna.samplers.BaseSampler]] = {
    "before": lambda seed: TPE(seed=seed, n_startup_trials=5, multivariate=True),
    "10 random trials": lambda seed: TPE(seed=seed, multivariate=True),
    "group": lambda seed: TPE(seed=seed, n_startup_trials=5, multivariate=True, group=True),
}
NEIGHBOURS = 2


class Curves:
    """The measured learning curves by optimiser and batch, and the seconds a trial of so many epochs took."""

    def __init__(self, finished: list[FrozenTrial], ranges: list[Dimension]) -> None:
        self.ranges = ranges
        self.by_kind: dict[tuple[str, int], list[FrozenTrial]] = {}
        for trial in finished:
            if trial.state == TrialState.COMPLETE and len(trial.intermediate_values) == EPOCHS:
                self.by_kind.setdefault((trial.params["optimizer"], trial.params["batch"]), []).append(trial)
        if not self.by_kind:
            raise SystemExit("no complete trials to replay; give search.py's --work folder")
        epochs = [float(len(t.intermediate_values)) for t in finished]  # pruned trials too: the time per epoch
        seconds = [(t.datetime_complete - t.datetime_start).total_seconds() for t in finished]
        self.epoch_s, self.start_s = statistics.linear_regression(epochs, seconds)

    def draw(self, params: dict, rng: random.Random) -> list[float]:
        """The curve of one of the nearest measured settings to `params`."""
        pool = self.by_kind.get((params["optimizer"], params["batch"])) or [
            t for kind, ts in self.by_kind.items() if kind[0] == params["optimizer"] for t in ts
        ]
        nearest = sorted(pool, key=lambda t: self._distance(params, t.params))[:NEIGHBOURS]
        values = rng.choice(nearest).intermediate_values
        return [values[epoch] for epoch in sorted(values)]

    def _distance(self, params: dict, other: dict) -> float:
        """Over the ranges both settings drew: decades apart on a log scale, else the share of the range."""
        distance = 0.0
        for dim in self.ranges:
            if dim.name in params and dim.name in other:
                a, b = params[dim.name], other[dim.name]
                if dim.log:
                    distance += (math.log10(a) - math.log10(b)) ** 2
                else:
                    distance += ((a - b) / (dim.high - dim.low)) ** 2
        return distance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="search.py's --work folder of the run to replay")
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--seeds", type=int, default=60)
    parser.add_argument("--space", choices=sorted(SPACES), default="wide", help="the space that run searched")
    args = parser.parse_args()
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
    dimensions = training_space(SPACES[args.space], Task.DETECT)
    settings = TrainSettings.of(data=args.work, epochs=EPOCHS)
    search = Search(job=TrainingJob(settings, "map50"), out=args.work, dimensions=tuple(dimensions))
    curves = Curves(_measured(args.work), [d for d in dimensions if d.choices is None])
    count = sum(len(ts) for ts in curves.by_kind.values())
    print(f"{count} measured curves; a trial takes {curves.start_s:.1f} s + {curves.epoch_s:.2f} s per epoch")
    budget = args.minutes * 60
    seeds = range(args.seeds)
    random_bests = [
        _best(_replay(optuna.samplers.RandomSampler(seed=s), make_pruner("none", search), curves, search, s, budget))
        for s in seeds
    ]
    variants = {**VARIANTS, "forklift": lambda seed: make_sampler("tpe", search, seed=seed)}
    print(f"{'TPE + median pruning':<22} reached random's best within half the budget   median share   mean best")
    for name, sampler in variants.items():
        shares, bests = [], []
        for seed, target in zip(seeds, random_bests, strict=True):
            ended = _replay(sampler(seed), make_pruner("median", search), curves, search, seed, budget)
            reached = min((at for at, value in ended if value >= target), default=math.inf)
            shares.append(reached / budget)
            bests.append(_best(ended))
        half = sum(share <= 0.5 for share in shares)
        median = statistics.median(shares)
        print(f"{name:<22} {half:>3} of {len(shares)} seeds {'':<26} {median:>8.2f}   {statistics.mean(bests):.3f}")
    print(f"random search: mean best {statistics.mean(random_bests):.3f}")


def _measured(work: Path) -> list[FrozenTrial]:
    """Every complete or pruned trial of each study under `work`."""
    finished = []
    for journal in sorted(work.glob("*/study.journal")):
        storage = open_storage(None, journal.parent, parallel=1)
        for summary in optuna.get_all_study_summaries(storage):
            study = optuna.load_study(study_name=summary.study_name, storage=storage)
            finished += study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    return finished


def _replay(
    sampler: optuna.samplers.BaseSampler,
    pruner: optuna.pruners.BasePruner,
    curves: Curves,
    search: Search,
    seed: int,
    budget: float,
) -> list[tuple[float, float]]:
    """(when it ended, its value) of each complete trial of one search on the surrogate within `budget` seconds."""
    rng = random.Random(seed)
    study = optuna.create_study(direction="maximize", sampler=sampler, pruner=pruner)
    clock, ended = 0.0, []
    while True:
        trial = study.ask()
        curve = curves.draw(draw_settings(list(search.dimensions), trial), rng)
        epochs, pruned = 0, False
        while epochs < len(curve) and not pruned:
            epochs += 1
            trial.report(curve[epochs - 1], epochs)
            pruned = epochs < len(curve) and trial.should_prune()
        clock += curves.start_s + curves.epoch_s * epochs
        if clock > budget:
            return ended
        if pruned:
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, curve[-1])
            ended.append((clock, curve[-1]))


def _best(ended: list[tuple[float, float]]) -> float:
    return max((value for _, value in ended), default=0.0)


if __name__ == "__main__":
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    main()
