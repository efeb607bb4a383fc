"""`forklift tune`: search training settings, or a forklift.ml model's parameters (`--ml`), with Optuna: trials in
parallel, pruned, resumable."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forklift.cli.common import check_folder_to_write, positive, positive_number, verb_parser
from forklift.cli.ml import MODEL_CHOICES
from forklift.cli.training import add_network_source
from forklift.errors import ForkliftError
from forklift.evaluation import METRICS
from forklift.extras import Extra
from forklift.tune import CLASSIFIER_METRICS, PRUNERS, REGRESSOR_METRICS, SAMPLERS
from forklift.vocabulary import TabularTask, words

if TYPE_CHECKING:
    from forklift.tune.space import Dimension
    from forklift.tune.trial import Job

EPOCHS = 10  # of each training trial, unless --epochs or --space says
TRAINING_ONLY = ("cfg", "model", "arch", "epochs", "img", "val_every", "device")  # options of training searches
TABLE_ONLY = ("test", "target", "task")  # options of --ml searches
METRIC_CHOICES = list(
    dict.fromkeys([*(m for names in METRICS.values() for m in names), *CLASSIFIER_METRICS, *REGRESSOR_METRICS])
)


def register(verbs: Any) -> None:
    tune = verb_parser(
        verbs,
        "tune",
        "Search training settings, or with --ml a forklift.ml model's parameters: each trial is a 'forklift train' "
        "run (with --ml a 'forklift ml fit' of the --data table, measured on the --test table) with settings an "
        "Optuna sampler draws from --space (default: a space for the data set's task or the model); trials report "
        "val metrics each epoch (boosting: every few rounds) so a pruner stops hopeless ones; --parallel K runs K "
        "at once, each on its own CPU set or GPU; the study lives in OUT/study.journal (or --storage "
        "postgresql://..., which other hosts join with the same --study) and the same command resumes it. OUT gets "
        "best/ (the best trial's model directory), trials.csv and plots; watch it live with: optuna-dashboard "
        "OUT/study.journal",
        "forklift tune --data data/shapes --cfg ../shared/data/darknet/yolov3-tiny.cfg --epochs 6 --trials 20 \\\n"
        "      --parallel 2 --space lr=1e-4..1e-2:log --space optimizer=adamw,momentum,rmsprop --space batch=8,16 \\\n"
        "      out/tune-shapes\n"
        "  forklift tune --ml forest --data train.csv --test val.csv --target income --trials 30 --parallel 2 \\\n"
        "      --space n_estimators=10..200:log --space max_depth=2..12 out/tune-income",
        extra=Extra.TUNE,
    )
    tune.add_argument(
        "--data",
        type=Path,
        required=True,
        metavar="DATA",
        help="a forklift data set folder; with --ml, the training table (.csv, .tsv, .parquet, .svm)",
    )
    add_network_source(tune)
    tune.add_argument(
        "--ml",
        choices=MODEL_CHOICES,
        help="search the parameters of this forklift.ml model (as 'forklift ml fit --model') instead of training",
    )
    tune.add_argument(
        "--test", type=Path, metavar="FILE", help="with --ml: the validation table trials are measured on"
    )
    tune.add_argument("--target", metavar="COLUMN", help="with --ml: the column to predict (default: the last one)")
    tune.add_argument("--task", choices=words(TabularTask), help="with --ml: as 'forklift ml fit --task'")
    tune.add_argument(
        "--space",
        action="append",
        default=[],
        metavar="SPEC",
        help="NAME=LOW..HIGH[:log], NAME=A,B,C or NAME=VALUE for lr, batch, optimizer, momentum, weight_decay, "
        "img, epochs, aug_scale, aug_shift, aug_hsv (augmentation strengths, as train's --aug-*), mosaic (on,off); "
        "with --ml the estimator's parameters (e.g. max_depth=2..12, max_features=sqrt,0.5, "
        "learning_rate=0.01..0.3:log); or a YAML file of them; repeat for each",
    )
    tune.add_argument("--trials", type=positive, default=20, help="finished trials the study reaches (default 20)")
    tune.add_argument(
        "--metric",
        choices=METRIC_CHOICES,
        help="what a trial is measured by: a val metric, maximised (default: map50, top1 or miou); with --ml a "
        "metric of the --test table (default: log_loss for classifiers with probabilities, else accuracy; rmse "
        "for regressors), losses and errors minimised",
    )
    tune.add_argument("--sampler", choices=SAMPLERS, default="tpe", help="search algorithm (default tpe)")
    tune.add_argument("--pruner", choices=PRUNERS, default="median", help="early stopping of trials (default median)")
    tune.add_argument("--parallel", type=positive, default=1, metavar="K", help="trials at once on this host")
    tune.add_argument("--storage", metavar="URL", help="postgresql://... or sqlite:///... (default: OUT/study.journal)")
    tune.add_argument("--study", metavar="NAME", help="study name (default: OUT's folder name)")
    tune.add_argument("--minutes", type=positive_number, help="no trial starts, and a running one stops, after this")
    tune.add_argument(
        "--epochs", type=positive, help=f"epochs of each trial unless --space draws them (default {EPOCHS})"
    )
    tune.add_argument("--img", type=positive, help="input size unless --space draws it (default: the source's)")
    tune.add_argument("--val-every", type=positive, metavar="N", help="validate (and report) every N (default 1)")
    tune.add_argument("--device", help="cpu (default), or cuda (trials spread over the GPUs)")
    tune.add_argument("--seed", type=int, default=0, help="of each trial's training or fit, and of the sampler")
    tune.add_argument("--keep-all", action="store_true", help="keep every trial's folder, not only the best's")
    tune.add_argument("out", type=Path, metavar="OUT_DIR", help="the search's folder (the same one resumes it)")
    tune.set_defaults(handler=run_tune)


def run_tune(args: argparse.Namespace) -> int:
    from forklift.tune.search import Plan, tune
    from forklift.tune.storage import storage_url
    from forklift.tune.trial import Search

    check_folder_to_write(args.out, what="OUT_DIR")
    job, dimensions = _tabular(args) if args.ml else _training(args)
    search = Search(
        job=job,
        out=args.out,
        dimensions=dimensions,
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
        device=args.device or "cpu",
    )
    study = tune(search, plan, keep_all=args.keep_all)
    best = args.out / "best"
    if best.is_dir():
        use = f"forklift ml predict {best} TABLE" if args.ml else f"forklift predict {best} IMAGE"
        print(f"best: {best} ({job.metric} {study.best_value:.4f}); {use}")
    print(f"live view: optuna-dashboard {storage_url(args.storage, args.out)}")
    return 0


def _training(args: argparse.Namespace) -> tuple[Job, tuple[Dimension, ...]]:
    """The job and space of a search of training settings."""
    _refuse(args, TABLE_ONLY, "only with --ml")
    from forklift.data.dataset import load_dataset
    from forklift.pretrained.resolve import model_directory
    from forklift.train.settings import TrainSettings
    from forklift.tune.training import TrainingJob, training_space

    dataset = load_dataset(args.data)
    task = dataset.task
    if not any(image.split == "val" for image in dataset.images):  # each trial would train, then have no measure
        raise ForkliftError(
            f"{args.data}: no val images, and each trial is measured on them; 'forklift data split {args.data} "
            "--val 0.2' holds a fifth out to measure on"
        )
    if args.cfg is None and args.model is None and args.arch is None:  # each trial failed on it, 20 lines of it
        raise ForkliftError("give the network to tune as train takes it: --cfg CFG, --model MODEL_DIR or --arch ARCH")
    if args.cfg is not None and not Path(args.cfg).is_file():
        raise ForkliftError(f"--cfg {args.cfg}: no such cfg file")
    if args.model is not None:  # a pretrained model's name: pulled once, before the trials start
        args.model = model_directory(args.model)
    metric = args.metric or METRICS[task][0]
    if metric not in METRICS[task]:
        raise ForkliftError(f"--metric {metric}: a {task} data set is measured by {', '.join(METRICS[task])}")
    shared = {key: getattr(args, key) for key in ("data", "cfg", "model", "arch", "img", "val_every", "seed")}
    settings = TrainSettings.of(**shared, epochs=args.epochs or EPOCHS)
    return TrainingJob(settings, metric), tuple(training_space(args.space, task))


def _tabular(args: argparse.Namespace) -> tuple[Job, tuple[Dimension, ...]]:
    """The job and space of a search of a forklift.ml model's parameters."""
    _refuse(args, TRAINING_ONLY, "not with --ml (a search of a forklift.ml model's parameters)")
    if args.test is None:
        raise ForkliftError("--ml: give --test FILE, the validation table each trial is measured on")
    from forklift.tune.tabular import tabular_search

    return tabular_search(
        model=args.ml,
        data=args.data,
        test=args.test,
        target=args.target,
        task=None if args.task is None else TabularTask(args.task),
        metric=args.metric,
        specs=args.space,
        seed=args.seed,
    )


def _refuse(args: argparse.Namespace, names: tuple[str, ...], why: str) -> None:
    """One line for the first option of `names` that was given."""
    given = [name for name in names if getattr(args, name) is not None]
    if given:
        raise ForkliftError(f"--{given[0].replace('_', '-')}: {why}")
