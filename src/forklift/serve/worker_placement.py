"""Where each served model's workers run: CPU sets from the placement plan of this machine's topology.

`--instances auto` takes the layout (and precision) a `forklift sweep` measured and saved for this model on this
machine; without one, the plan's own default (one whole core per instance, never straddling a NUMA node).
"""

from __future__ import annotations

from pathlib import Path

from forklift.errors import ForkliftError
from forklift.serve.recommendation import Recommendation, load_recommendation
from forklift.serve.server import ServedModel, check_names, parse_model_argument
from forklift.serve.worker import WorkerPlace
from forklift.system.placement import make_plan
from forklift.system.topology import current
from forklift.vocabulary import Precision, Runtime


def served_models(
    arguments: list[str],
    *,
    runtime: Runtime | None,
    precision: Precision | None = None,
    instances: int | None,
    cpus_per_instance: int | None,
    threads: int | None,
    gpus: list[int] | None = None,
) -> tuple[list[ServedModel], Recommendation | None]:
    """Each `MODEL_DIR[=NAME]` with its workers' CPU sets (models never share CPUs), and the sweep's advice used.
    With `gpus`, the workers of all models take those CUDA devices in turn (more workers than GPUs: several
    models on one GPU, as the ported demo ran two style models per GPU), on the torch engine."""
    parsed = [parse_model_argument(argument) for argument in arguments]
    check_names([name for _, name in parsed])
    advice = None
    if instances is None and cpus_per_instance is None and threads is None and len(parsed) == 1:
        advice = load_recommendation(Path(parsed[0][0]))
        if advice is not None:
            instances, cpus_per_instance, threads = advice.instances, advice.threads, advice.threads
            precision = precision or advice.precision
    topology = current()
    size = cpus_per_instance or threads
    plan = make_plan(topology, instances=None if instances is None else instances * len(parsed), cpus_per_instance=size)
    if len(plan.instances) < len(parsed):  # the automatic plan made fewer (larger) instances than models
        try:
            plan = make_plan(topology, instances=len(parsed), cpus_per_instance=size)
        except ForkliftError as exc:
            raise ForkliftError(
                f"{len(parsed)} models need an instance each, and models never share CPUs: {exc}; "
                "serve them from separate servers"
            ) from exc
    per_model = len(plan.instances) // len(parsed)
    if threads is not None and threads > plan.cpus_per_instance:
        raise ForkliftError(f"--threads {threads} is more than the {plan.cpus_per_instance} CPUs of each instance")
    if gpus:
        check_gpus(gpus)
        if runtime not in (None, Runtime.TORCH):
            raise ForkliftError(f"--gpus: models run on a GPU with the torch engine, not --runtime {runtime}")
        runtime = Runtime.TORCH
    several_nodes = len(topology.nodes) > 1
    models = []
    for index, (directory, name) in enumerate(parsed):
        placed = plan.instances[index * per_model : (index + 1) * per_model]
        sets = [
            WorkerPlace(
                p.cpus,
                p.node if several_nodes else None,
                threads or p.threads,
                gpus[(index * per_model + number) % len(gpus)] if gpus else None,
            )
            for number, p in enumerate(placed)
        ]
        models.append(ServedModel(name, directory, runtime, sets, precision))
    return models, advice


def check_gpus(gpus: list[int]) -> None:
    """One line when a CUDA device asked for is not on this machine."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    missing = [gpu for gpu in gpus if gpu >= count]
    if missing:
        have = f"devices 0-{count - 1}" if count else "no CUDA device"
        raise ForkliftError(f"--gpus {','.join(map(str, gpus))}: this machine has {have}")
