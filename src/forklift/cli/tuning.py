"""`forklift tune`: search training settings with Optuna, trials in parallel, pruned, resumable."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from forklift.cli.common import positive, verb_parser
from forklift.cli.training import add_network_source
from forklift.evaluation import METRICS
from forklift.extras import Extra
from forklift.tune import PRUNERS, SAMPLERS


def register(verbs: Any) -> None:
    tune = verb_parser(
        verbs,
        "tune",
        "Search training settings: each trial is a 'forklift train' run with settings an Optuna sampler draws "
        "from --space (default: a space for the data set's task); trials report val metrics each epoch so a "
        "pruner stops hopeless ones; --parallel K runs K at once, each on its own CPU set or GPU; the study lives "
        "in OUT/study.journal (or --storage postgresql://..., which other hosts join with the same --study) and "
        "the same command resumes it. OUT gets best/ (the best trial's model directory), trials.csv and plots; "
        "watch it live with: optuna-dashboard OUT/study.journal",
        "forklift tune --data data/shapes --cfg ../shared/data/darknet/yolov3-tiny.cfg --epochs 6 --trials 20 \\\n"
        "      --parallel 2 --space lr=1e-4..1e-2:log --space optimizer=adamw,momentum,rmsprop --space batch=8,16 \\\n"
        "      out/tune-shapes",
        extra=Extra.TUNE,
    )
    tune.add_argument("--data", type=Path, required=True, metavar="DATA", help="a forklift data set folder")
    add_network_source(tune)
    tune.add_argument(
        "--space",
        action="append",
        default=[],
        metavar="SPEC",
        help="NAME=LOW..HIGH[:log], NAME=A,B,C or NAME=VALUE for lr, batch, optimizer, momentum, weight_decay, "
        "img, epochs, aug_scale, aug_shift, aug_hsv (augmentation strengths, as train's --aug-*), mosaic (on,off); "
        "or a YAML file of them; repeat for each",
    )
    tune.add_argument("--trials", type=positive, default=20, help="finished trials the study reaches (default 20)")
    tune.add_argument(
        "--metric",
        choices=[m for names in METRICS.values() for m in names],
        help="val metric to maximise (default: map50, top1 or miou)",
    )
    tune.add_argument("--sampler", choices=SAMPLERS, default="tpe", help="search algorithm (default tpe)")
    tune.add_argument("--pruner", choices=PRUNERS, default="median", help="early stopping of trials (default median)")
    tune.add_argument("--parallel", type=positive, default=1, metavar="K", help="trials at once on this host")
    tune.add_argument("--storage", metavar="URL", help="postgresql://... or sqlite:///... (default: OUT/study.journal)")
    tune.add_argument("--study", metavar="NAME", help="study name (default: OUT's folder name)")
    tune.add_argument("--minutes", type=float, help="no trial starts, and a running one stops, after this")
    tune.add_argument("--epochs", type=positive, default=10, help="epochs of each trial unless --space draws them")
    tune.add_argument("--img", type=positive, help="input size unless --space draws it (default: the source's)")
    tune.add_argument("--val-every", type=positive, default=1, metavar="N", help="validate (and report) every N")
    tune.add_argument("--device", default="cpu", help="cpu, or cuda (trials spread over the GPUs)")
    tune.add_argument("--seed", type=int, default=0, help="of each trial's training and of the sampler")
    tune.add_argument("--keep-all", action="store_true", help="keep every trial's folder, not only the best's")
    tune.add_argument("out", type=Path, metavar="OUT_DIR", help="the search's folder (the same one resumes it)")
    tune.set_defaults(handler=run_tune)


def run_tune(args: argparse.Namespace) -> int:
    from forklift.data.dataset import load_dataset
    from forklift.errors import ForkliftError
    from forklift.pretrained.resolve import model_directory
    from forklift.train.settings import TrainSettings
    from forklift.tune.search import Plan, tune
    from forklift.tune.space import search_space
    from forklift.tune.storage import storage_url
    from forklift.tune.trial import Search

    task = load_dataset(args.data).task
    if args.model is not None:  # a pretrained model's name: pulled once, before the trials start
        args.model = model_directory(args.model)
    metric = args.metric or METRICS[task][0]
    if metric not in METRICS[task]:
        raise ForkliftError(f"--metric {metric}: a {task} data set is measured by {', '.join(METRICS[task])}")
    shared = ("data", "cfg", "model", "arch", "epochs", "img", "val_every", "seed")
    search = Search(
        settings=TrainSettings.of(**{key: getattr(args, key) for key in shared}),
        out=args.out,
        metric=metric,
        dimensions=tuple(search_space(args.space, task)),
        deadline=None if args.minutes is None else time.time() + args.minutes * 60,
    )
    plan = Plan(
        study=args.study or args.out.resolve().name,
        storage=args.storage,
        sampler=args.sampler,
        pruner=args.pruner,
        trials=args.trials,
        parallel=args.parallel,
        seed=args.seed,
        device=args.device,
    )
    study = tune(search, plan, keep_all=args.keep_all)
    best = args.out / "best"
    if best.is_dir():
        print(f"best: {best} ({metric} {study.best_value:.4f}); forklift predict {best} IMAGE")
    print(f"live view: optuna-dashboard {storage_url(args.storage, args.out)}")
    return 0
