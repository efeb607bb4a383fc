"""The extras of the forklift distribution (pyproject.toml): `pip install forklift` serves and predicts exported
models; each extra adds a stage. A verb that reaches a module its user did not install says in one line which
extra brings it, instead of a traceback ending in ModuleNotFoundError.
"""

from __future__ import annotations

import importlib.util
from enum import StrEnum


class Extra(StrEnum):
    """An extra of the distribution, by the name pip takes in brackets."""

    TRAIN = "train"
    TUNE = "tune"
    APP = "app"
    ML = "ml"
    ALL = "all"


# The modules that only one extra brings. SQLAlchemy, psycopg and SciPy come with several: a verb that needs them
# names its own extra (`verb_parser(..., extra=...)`), and otherwise [all] is said.
EXTRA_OF_MODULE: dict[str, Extra] = {
    **dict.fromkeys(("torch", "torchvision", "onnxscript", "tensorboard", "nncf"), Extra.TRAIN),
    **dict.fromkeys(("optuna", "cmaes"), Extra.TUNE),
    **dict.fromkeys(
        ("fastapi", "alembic", "argon2", "limits", "itsdangerous", "av", "zipstream", "albumentations"), Extra.APP
    ),
    **dict.fromkeys(("sklearn", "numba", "xgboost", "lightgbm", "pandas", "pyarrow"), Extra.ML),
}


def require(extra: Extra) -> None:
    """Raise the ModuleNotFoundError of the first module that only ``extra`` brings and is not installed, without
    importing any: a verb that checks its arguments before its (slow) imports says a missing stage first."""
    for module, owner in EXTRA_OF_MODULE.items():
        if owner is extra and importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)


def missing_module(exc: ModuleNotFoundError) -> str | None:
    """The top-level name of the module `exc` says is missing when it is not installed at all (a missing extra),
    or None when the import failed for another reason (a bug of ours keeps its traceback)."""
    top = (exc.name or "").split(".")[0]
    if not top or top == "forklift" or importlib.util.find_spec(top) is not None:
        return None
    return top


def install_hint(module: str, *, needed_by: str, extra: Extra | None = None) -> str:
    """One line: what needs `module`, which extra brings it, and the command that installs it."""
    chosen = extra or EXTRA_OF_MODULE.get(module, Extra.ALL)
    return f"{needed_by} needs {module}, which comes with the extra [{chosen}]: pip install 'forklift[{chosen}]'"
