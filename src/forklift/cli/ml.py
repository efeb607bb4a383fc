"""`forklift ml`: fit forklift.ml's linear models and trees on a table into a model directory, and predict with one.

The model directory serves like any other (`forklift serve OUT`, JSON rows or v2 tensors) and is measured by
`forklift eval OUT --data FILE`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import yaml

from forklift.cli.common import add_json, check_folder_to_write, positive, verb_parser
from forklift.errors import ForkliftError
from forklift.extras import Extra
from forklift.vocabulary import TabularTask, words

EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")  # a number in e-notation

MODEL_CHOICES = ("logistic", "svm", "ridge", "tree", "forest", "boosting")  # forklift.ml.model_directory.MODELS
IMPORT_CHOICES = ("xgb_json", "lightgbm", "onnx", "pmml")  # forklift.ml.tree_import.IMPORT_TYPES


def register(verbs: Any) -> None:
    ml = verb_parser(
        verbs,
        "ml",
        "Fit forklift.ml's linear models and trees on tabular data (CSV, TSV, Parquet, libsvm) and predict with them.",
        "forklift ml fit --data train.csv --test test.csv --target income --model boosting out/income",
        extra=Extra.ML,
    )
    actions = ml.add_subparsers(dest="ml_verb", metavar="ACTION", required=True)
    add_fit(actions)
    add_predict(actions)
    add_import(actions)


def add_fit(actions: Any) -> None:
    fit = verb_parser(
        actions,
        "fit",
        "Fit a model on a table and write its model directory: model.onnx (what serves), model.pkl (the "
        "estimator) and forklift.json (features, classes, metrics). Text columns are categories (one-hot), empty "
        "cells missing values (tree models take them); libsvm files' features are f0, f1, ...",
        "forklift ml fit --data train.csv --test test.csv --target income --model forest \\\n"
        "      --param n_estimators=50 --param max_depth=8 out/income-forest",
        extra=Extra.ML,
    )
    fit.add_argument(
        "--data", type=Path, required=True, metavar="FILE", help="the training table (.csv, .tsv, .parquet, .svm)"
    )
    fit.add_argument("--test", type=Path, metavar="FILE", help="a table to measure on (same columns)")
    fit.add_argument("--target", metavar="COLUMN", help="the column to predict (default: the last one)")
    fit.add_argument("--model", choices=MODEL_CHOICES, default="boosting", help="what to fit (default boosting)")
    fit.add_argument(
        "--task",
        choices=words(TabularTask),
        help="default: what the model does, else classes for text or few whole numbers, values otherwise",
    )
    fit.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an estimator parameter, snapml's names (e.g. max_depth=8, num_round=200, regularizer=0.1); repeat",
    )
    fit.add_argument("--threads", type=positive, default=1, help="CPU threads of the fit (n_jobs; default 1)")
    add_json(fit, "print the settings and metrics as JSON instead of a table")
    fit.add_argument("out", type=Path, metavar="OUT_DIR", help="the model directory to write (must be new or empty)")
    fit.set_defaults(handler=run_fit)


def add_predict(actions: Any) -> None:
    predict = verb_parser(
        actions,
        "predict",
        "Predict each row of a table with a model directory 'forklift ml fit' wrote; CSV out (the prediction, "
        "and each class's score for a classifier).",
        "forklift ml predict out/income-forest test.csv --out predictions.csv",
        extra=Extra.ML,
    )
    predict.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    predict.add_argument("data", type=Path, metavar="FILE", help="a table with the model's feature columns")
    predict.add_argument("--out", type=Path, metavar="CSV", help="write here (default: print)")
    predict.add_argument("--threads", type=positive, help="CPU threads of the engine (default: all available)")
    add_json(predict, "print JSON rows instead of CSV")
    predict.set_defaults(handler=run_predict)


def add_import(actions: Any) -> None:
    imports = verb_parser(
        actions,
        "import",
        "Write a tree model another tool saved (XGBoost JSON/UBJSON, LightGBM text, ONNX tree ensemble, PMML) as a "
        "model directory, which 'forklift serve', 'ml predict' and 'eval' take as one 'ml fit' wrote. Its "
        "features are named as the file names them, else f0, f1, ... (--features names them).",
        "forklift ml import booster.json out/booster && forklift serve out/booster",
        extra=Extra.ML,
    )
    imports.add_argument(
        "model_file", type=Path, metavar="MODEL_FILE", help="the saved model (.json, .ubj, .txt, .onnx, .pmml)"
    )
    imports.add_argument(
        "--type",
        choices=IMPORT_CHOICES,
        help="what the file holds (default: by its suffix: .json/.ubj xgb_json, .txt lightgbm, .onnx, .pmml)",
    )
    imports.add_argument(
        "--features", metavar="NAMES", help="the features' names, comma-separated, in the model's column order"
    )
    imports.add_argument("--target", metavar="COLUMN", default="", help="the column it predicts (what eval measures)")
    imports.add_argument(
        "out", type=Path, metavar="OUT_DIR", help="the model directory to write (must be new or empty)"
    )
    imports.set_defaults(handler=run_import)


YAML_1_1_FLAGS = frozenset({"yes", "no", "on", "off", "y", "n"})


def parse_params(texts: list[str]) -> dict[str, Any]:
    """``NAME=VALUE`` pairs; a value is read as YAML reads it (numbers, true/false, null, lists), else text; Python's
    ``None`` (what the estimators' messages and docs say) is null too, in any case as ``--space`` reads it, and
    ``1e-6`` a number (YAML 1.1 wants ``1.0e-6``)."""
    params: dict[str, Any] = {}
    for text in texts:
        name, equals, value = text.partition("=")
        key, bare = name.strip(), value.strip()
        if not equals or not key:
            raise ForkliftError(f"--param {text!r}: expected NAME=VALUE")
        if bare.lower() in ("", "none"):
            params[key] = None
        elif EXPONENT.fullmatch(bare):
            params[key] = float(bare)
        elif bare.lower() in YAML_1_1_FLAGS:  # "yes" stays a word, which a flag refuses: true and false say it
            params[key] = bare
        else:
            try:
                params[key] = yaml.safe_load(value)
            except yaml.YAMLError:
                params[key] = value
    return params


def check_new_model_dir(out: Path) -> None:
    """OUT_DIR is new, or an empty folder, and can be written."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        what = "a folder that is not empty" if out.is_dir() else "a file"
        raise ForkliftError(f"{out}: exists and is {what}; give a new OUT_DIR")
    check_folder_to_write(out, what="OUT_DIR")


def run_fit(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from forklift.ml.model_directory import check_params, fit_directory
    from forklift.ml.tables import read_table, read_test_table

    check_new_model_dir(args.out)
    params = parse_params(args.param)
    task = None if args.task is None else TabularTask(args.task)
    check_params(args.model, task=task, params=params, threads=args.threads)  # before a large table is read
    stages = ("reading", "encoding", "fitting", "measuring", "writing")
    quiet = True if args.json else None  # None: off where stderr is no terminal (a log, a pipe)
    with tqdm(total=len(stages), desc="reading", unit="step", file=sys.stderr, disable=quiet) as bar:

        def stage(name: str) -> None:
            bar.update(1)
            bar.set_description(name)

        train = read_table(args.data, target=args.target)
        test = read_test_table(args.test, train) if args.test else None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            report = fit_directory(
                train, args.out, model=args.model, task=task, params=params, threads=args.threads, test=test,
                stage=stage,
            )  # fmt: skip
        bar.update(1)
    for caught_warning in caught:  # a fit that stopped short of its tolerance: one line, as errors are
        if caught_warning.category.__name__ == "ConvergenceWarning":
            print(f"forklift: warning: {caught_warning.message}", file=sys.stderr)
        else:
            warnings.showwarning(caught_warning.message, caught_warning.category, caught_warning.filename,
                                 caught_warning.lineno)  # fmt: skip
    settings = report.settings
    if args.json:
        print(json.dumps({"model_dir": str(args.out), **settings.to_json()}, indent=2))
        return 0
    kind = f"{len(settings.classes)} classes" if settings.classification else "regression"
    print(f"{settings.estimator} ({kind}, {len(settings.features)} features, {settings.width} columns) -> {args.out}")
    names = list(dict.fromkeys([*report.train, *report.test]))  # in the order eval prints them
    print(f"{'metric':<10} {'train':>10} {'test':>10}")
    for name in names:
        cells = [f"{split[name]:>10.4f}" if name in split else f"{'':>10}" for split in (report.train, report.test)]
        print(f"{name:<10} {' '.join(cells)}")
    return 0


def run_predict(args: argparse.Namespace) -> int:
    import csv

    from forklift.ml.tables import encode_table, read_features
    from forklift.model_files.model_dir import holds_tabular_model, open_model_dir
    from forklift.runtime.tabular import TabularModel

    if args.out is not None and (args.out.is_dir() or not args.out.parent.is_dir()):
        problem = "is a folder" if args.out.is_dir() else f"its folder {args.out.parent} does not exist"
        raise ForkliftError(f"--out {args.out}: {problem}; give the CSV file to write")
    if args.model_dir.is_dir() and not holds_tabular_model(args.model_dir):
        raise ForkliftError(f"{args.model_dir}: not a tabular model; 'forklift ml predict' takes what 'ml fit' wrote")
    model_dir = open_model_dir(args.model_dir)
    model = TabularModel(model_dir, threads=args.threads)
    table = read_features(args.data, model.settings)
    answer = model.answer(encode_table(model.settings, table))
    scores = [f"score_{c}" for c in model.settings.classes] if answer.scores is not None else []
    rows = []
    for index, prediction in enumerate(answer.predictions):
        row: dict[str, Any] = {"prediction": prediction}
        if answer.scores is not None:
            row |= {name: float(s) for name, s in zip(scores, answer.scores[index], strict=True)}
        rows.append(row)
    if args.json:
        print(json.dumps(rows))
        return 0
    stream = args.out.open("w", newline="", encoding="utf-8") if args.out else sys.stdout
    writer = csv.DictWriter(stream, fieldnames=["prediction", *scores])  # a table of no rows: the header alone
    writer.writeheader()
    writer.writerows(rows)
    if args.out:
        stream.close()
        print(f"{len(rows)} predictions -> {args.out}", file=sys.stderr)
    return 0


def run_import(args: argparse.Namespace) -> int:
    from forklift.ml.model_import import import_directory

    check_new_model_dir(args.out)
    names = [name.strip() for name in args.features.split(",")] if args.features else []
    settings = import_directory(args.model_file, args.out, input_type=args.type, features=names, target=args.target)
    kind = f"{len(settings.classes)} classes" if settings.classification else "regression"
    print(f"{settings.estimator} ({kind}, {len(settings.features)} features) from {args.model_file} -> {args.out}")
    return 0
