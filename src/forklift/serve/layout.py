"""Where each served model's workers run: CPU sets from the placement plan of this machine's topology."""

from __future__ import annotations

import os

from forklift.errors import ForkliftError
from forklift.serve.server import ServedModel, parse_model_argument


def _available_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def served_models(
    arguments: list[str],
    runtime: str | None,
    instances: int | None,
    cpus_per_instance: int | None,
    threads: int | None,
) -> list[ServedModel]:
    """Each `MODEL_DIR[=NAME]` with its workers' CPU sets; the models share the machine's CPUs in turn."""
    cpus = _available_cpus()
    per_instance = cpus_per_instance or threads or 1
    count = instances or max(1, len(cpus) // per_instance // len(arguments))
    needed = count * per_instance * len(arguments)
    if needed > len(cpus):
        raise ForkliftError(
            f"{count} instances x {per_instance} CPUs for {len(arguments)} model(s) needs {needed} CPUs; "
            f"{len(cpus)} are available"
        )
    models, offset = [], 0
    for argument in arguments:
        directory, name = parse_model_argument(argument)
        sets = []
        for _ in range(count):
            sets.append((tuple(cpus[offset : offset + per_instance]), None))
            offset += per_instance
        models.append(ServedModel(name, directory, runtime, sets))
    return models
