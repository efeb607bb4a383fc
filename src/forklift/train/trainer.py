"""Train a model on a forklift data set; the result is a model directory.

Read top to bottom, like nanoGPT's loop: the settings, the data, the task (its network, inputs, loss and model
directory: `forklift.train.tasks.base`), the optimiser and schedule, the epochs (each ending in metrics, a
validation that keeps the best weights, and an atomic checkpoint), then the model directory that `forklift
predict` and `serve` use, made from the best epoch and evaluated. An interrupted run continues with
`RunOptions(resume=True)` from its last epoch.

Started by torchrun (`forklift train --nproc`, `forklift run`), the same loop is data-parallel: every rank
trains its share of each global batch through DistributedDataParallel (`forklift.train.ranks_agree`), and rank 0
alone validates and writes checkpoints, metrics, TensorBoard and the model directory.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.optim.lr_scheduler import LambdaLR
from tqdm import tqdm

from forklift.distributed import ranks as rank_context
from forklift.distributed.ranks import Ranks
from forklift.distributed.sync_batchnorm import synchronise_batchnorm
from forklift.errors import ForkliftError
from forklift.model_files.model_config import load_config, save_config
from forklift.model_files.model_dir import open_model_dir
from forklift.model_files.precision import CHECKED_KEY, DEFAULT_KEY
from forklift.runtime.onnx_export import source_digest
from forklift.train import lr_scaling
from forklift.train.checkpoints import Best, RunState
from forklift.train.data_splits import usable_splits
from forklift.train.loader import Augmentation, epoch_loader, steps_per_epoch
from forklift.train.optimizers import make_optimizer
from forklift.train.precision import MixedPrecision
from forklift.train.ranks_agree import agreed, loss_step, rank_rng_states, shared_checkpoint, summed
from forklift.train.run_dir import BEST, CHECKPOINTS, JOB_FILE, LAST, METRICS, check_out, holding
from forklift.train.run_log import (
    FINE_TUNING,
    STEP_FIELDS,
    append_metrics,
    keep_metric_rows,
    log_row,
    tensorboard_writer,
)
from forklift.train.schedule import lr_factor
from forklift.train.settings import RunOptions, TrainSettings, check_values, resumed_settings
from forklift.train.tasks import NetworkSource, StyleOptions, TwoStageOptions, make_task
from forklift.vocabulary import Optimizer

if TYPE_CHECKING:
    from forklift.lms import Settings, Stats


def train(settings: TrainSettings, out: Path, run: RunOptions | None = None) -> Path:
    """Train with `settings` into OUT, executed as `run` says (None: a new run on the CPU); returns OUT.

    A resumed run takes its checkpoint's settings; one given (`settings.given`) that contradicts them is refused.
    The val split is measured every `val_every` epochs and at the last one; the model directory gets the weights of
    the best measured epoch. With `run.time_budget_s`, training ends before an epoch that would finish past the
    budget, judged by the one before it (the first always runs); the schedule still spans `epochs`, so choose
    epochs that fit.
    """
    budget_start = time.perf_counter()
    run = run or RunOptions()
    out = Path(out)
    _check_device(run.device)
    ranks = rank_context.from_environment()
    checkpoints = out / CHECKPOINTS
    job_file = checkpoints / JOB_FILE
    restarted = ranks.job is not None and job_file.is_file() and job_file.read_text(encoding="utf-8") == ranks.job
    if ranks.leader and not restarted:
        check_out(out, run.resume)
    with holding(out) if ranks.leader else contextlib.nullcontext():
        return _ranks_train(settings, out, ranks, run, restarted=restarted, budget_start=budget_start)


def _ranks_train(
    settings: TrainSettings, out: Path, ranks: Ranks, run: RunOptions, *, restarted: bool, budget_start: float
) -> Path:
    checkpoints = out / CHECKPOINTS
    device = rank_context.start(ranks, run.device)
    resume = run.resume
    if agreed(restarted and not resume and (checkpoints / LAST).is_file(), ranks):  # rank 0's view counts
        resume = True  # torchrun restarted the job's ranks after a failure: continue from its last checkpoint
        if ranks.leader:
            print(f"restarted: resuming {out} from its last checkpoint", flush=True)
    try:
        return _train(settings, out, ranks, run, device=device, resume=resume, budget_start=budget_start)
    finally:
        rank_context.stop(ranks)


def _train(
    given: TrainSettings, out: Path, ranks: Ranks, run: RunOptions, *, device: str, resume: bool, budget_start: float
) -> Path:
    """`train` once the run's ranks are started (one, outside torchrun)."""
    checkpoints = out / CHECKPOINTS
    checkpoint = shared_checkpoint(checkpoints / LAST, ranks) if resume else None
    settings = _settings(given, checkpoint, checkpoints / LAST)
    check_values(settings)
    assert settings.data is not None  # _settings refuses a run without data
    dataset, train_images, val_images = usable_splits(settings.data, settings.task, settings.seed)
    source = NetworkSource(settings.cfg, settings.model, settings.arch, settings.img, settings.weights)
    two_stage = TwoStageOptions(settings.anchor_sizes, settings.proposals, settings.roi_samples)
    augmentation = Augmentation(settings.aug_scale, settings.aug_shift, settings.aug_hsv, mosaic=settings.mosaic)
    style = StyleOptions(
        settings.style_image, settings.loss_net_weights, settings.content_weight, settings.style_weight
    )
    task = make_task(dataset, source, seed=settings.seed, augmentation=augmentation, two_stage=two_stage, style=style)
    net = task.net.to(device)
    if settings.sync_bn and ranks.distributed:
        synchronise_batchnorm(net)
    precision = MixedPrecision(device, settings.amp)
    epochs, batch = settings.epochs, settings.batch
    leader = ranks.leader

    images = task.images(train_images, augment=True)
    steps = steps_per_epoch(len(images), batch, ranks.world)
    if leader and checkpoint is None and batch > len(train_images):
        print(f"--batch {batch} is more than the {len(train_images)} train images: each epoch is one step of them all",
              flush=True)  # fmt: skip
    groups = task.parameter_groups(weight_decay=settings.weight_decay)
    rule, factor = lr_scaling.lr_factor(settings.lr_scaling, settings.optimizer, ranks.world)
    if settings.model is not None and checkpoint is None and leader:
        print(f"{FINE_TUNING}starting from the weights of {settings.model}", flush=True)
    if ranks.distributed and leader:
        print(lr_scaling.describe(rule, factor, settings.lr, ranks.world, batch), flush=True)
    optimiser = make_optimizer(
        Optimizer(settings.optimizer), groups, lr=settings.lr * factor, momentum=settings.momentum
    )
    schedule = LambdaLR(optimiser, lr_factor(steps, epochs))
    step_loss = loss_step(task, ranks, device)
    fields = ("epoch", *task.loss_terms, *STEP_FIELDS, *task.metric_names)
    best = Best()
    state = RunState(settings, task, optimiser, schedule, precision, best, ranks)
    if checkpoint is None:  # what draws from torch's own RNG (torchvision's box samplers) starts from the seed
        torch.manual_seed(settings.seed + ranks.rank)  # (each rank its own); a resumed run takes the checkpoint's
    first_epoch = state.restore(checkpoint, checkpoints / LAST) + 1 if checkpoint is not None else 1
    metrics = out / METRICS
    writer = None
    if leader:
        out.mkdir(parents=True, exist_ok=True)
        if ranks.job is not None:  # so that a restart of this job (and only of this one) knows OUT as its own
            checkpoints.mkdir(exist_ok=True)
            (checkpoints / JOB_FILE).write_text(ranks.job, encoding="utf-8")
        keep_metric_rows(metrics, fields, first_epoch - 1, (checkpoint or {}).get("metrics_row"))
        writer = tensorboard_writer(out)

    try:  # a callback's exception (a search pruning the trial) or Ctrl-C ends the run with its log closed
        last_epoch_seconds = 0.0
        unmeasured: int | None = None  # the last epoch trained, when it was not validated
        for epoch in range(first_epoch, epochs + 1):
            spent = time.perf_counter() - budget_start
            budget = run.time_budget_s
            over = budget is not None and epoch > first_epoch and spent + last_epoch_seconds > budget
            if agreed(over, ranks):  # rank 0's clock decides for all
                if leader:
                    print(f"time budget of {budget:g} s: stopping before epoch {epoch}/{epochs}", flush=True)
                    if unmeasured is not None and val_images:  # its weights may be the best: measured before choosing
                        measured = task.validate(val_images, checkpoints / "val-model")
                        best.consider(unmeasured, measured[task.metric_names[0]], task, checkpoints / BEST)
                        said = ", ".join(f"{k} {v:.4f}" for k, v in measured.items() if v is not None)
                        print(f"epoch {unmeasured}/{epochs}, the last the budget allowed, on val: {said}", flush=True)
                break
            started = time.perf_counter()
            net.train()
            totals, seen = dict.fromkeys(task.loss_terms, 0.0), 0
            loader = epoch_loader(
                images, batch, epoch, shuffle=True, workers=run.workers, collate_fn=task.collate, rank=ranks.rank,
                world=ranks.world,
            )  # fmt: skip
            bar = tqdm(
                loader, desc=f"epoch {epoch}/{epochs}", unit="batch", disable=None if leader else True, leave=False
            )
            with _swapping(run.lms) as swapped:
                for inputs, targets in bar:
                    inputs, targets = inputs.to(device), _to(targets, device)
                    with precision.autocast():
                        terms = step_loss(inputs, targets)
                    optimiser.zero_grad(set_to_none=True)
                    precision.step(terms["loss"], net, optimiser)
                    schedule.step()
                    for key, value in terms.items():
                        totals[key] += float(value.detach()) * len(inputs)
                    seen += len(inputs)
                    bar.set_postfix({k: f"{v / seen:.3f}" for k, v in totals.items()})
            if swapped is not None:
                print(f"epoch {epoch}/{epochs}: {swapped.summary()}", flush=True)
            totals, seen = summed(totals, seen, ranks)
            seconds = time.perf_counter() - started
            row: dict = {"epoch": epoch, **{k: v / max(seen, 1) for k, v in totals.items()}}
            row.update(lr=optimiser.param_groups[0]["lr"], images_per_s=seen / seconds, seconds=seconds)
            validated = bool(val_images) and (epoch % settings.val_every == 0 or epoch == epochs)
            unmeasured = None if validated else epoch
            states = rank_rng_states(ranks)
            if not leader:
                continue
            if validated:
                row.update(task.validate(val_images, checkpoints / "val-model"))
                best.consider(epoch, row[task.metric_names[0]], task, checkpoints / BEST)
            row["elapsed"] = time.perf_counter() - budget_start
            state.save(checkpoints / LAST, epoch, states, metrics_row=row)  # first: a stop before the row is
            append_metrics(metrics, fields, row)  # appended leaves it in the checkpoint, which a resume restores
            log_row(writer, row, task.metric_names)
            shown = [f"{k} {row[k]:.4f}" for k in (*task.loss_terms, *task.metric_names) if row.get(k) is not None]
            print(f"epoch {epoch}/{epochs}: " + ", ".join(shown), flush=True)
            last_epoch_seconds = time.perf_counter() - started
            if validated and run.on_validated is not None:
                run.on_validated(epoch, {name: row[name] for name in task.metric_names})
    finally:
        if writer is not None:
            writer.close()
    if not leader:
        return out
    best_epoch = best.restore(task, checkpoints / BEST)
    net.cpu()
    earlier = _measured(out)
    task.write_model_dir(out)
    _keep_measured(out, earlier)
    if val_images and task.evaluated:
        _evaluate(out, settings.data, best_epoch)
    return out


def _measured(out: Path) -> tuple[str, dict[str, Any]] | None:
    """A model directory already here (a finished run resumed): its files' digest and what `models quantize`
    measured of it, in forklift.json."""
    try:
        model = open_model_dir(out)
    except ForkliftError:
        return None
    facts = {key: model.config.extra[key] for key in (CHECKED_KEY, DEFAULT_KEY) if key in model.config.extra}
    return (source_digest(model), facts) if facts else None


def _keep_measured(out: Path, measured: tuple[str, dict[str, Any]] | None) -> None:
    """The measurements again in forklift.json when the model's files came out the same (a resume with no epoch
    left): written anew, forklift.json lost them, and with them the INT8 graph that is still the model's."""
    if measured is None:
        return
    model = open_model_dir(out)
    digest, facts = measured
    if source_digest(model) == digest:
        config, _ = load_config(out)
        config.extra.update(facts)
        save_config(out, config)


def _settings(given: TrainSettings, checkpoint: dict[str, Any] | None, path: Path) -> TrainSettings:
    """The run's settings: those given, or the checkpoint's (checked against those given). A checkpoint written
    before settings were recorded resumes with what is given, as it always did."""
    if checkpoint is not None and "settings" in checkpoint:
        settings = resumed_settings(TrainSettings.from_json(checkpoint["settings"]), given, path)
    else:
        settings = given
    if settings.data is None:
        raise ForkliftError("--data DATA: needed to start a run (a resumed run takes its checkpoint's)")
    return settings


def _swapping(lms: Settings | None) -> contextlib.AbstractContextManager[Stats | None]:
    """`forklift.lms.swapping` with the settings, or nothing when large model support is off."""
    if lms is None:
        return contextlib.nullcontext()
    from forklift.lms import swapping

    return swapping(**lms)


def _to(targets: object, device: str) -> object:
    return targets.to(device) if isinstance(targets, torch.Tensor) else targets


def _check_device(device: str) -> None:
    try:
        kind = torch.device(device).type
    except RuntimeError as exc:
        raise ForkliftError(f"--device {device}: not a device name (cpu, cuda, cuda:N)") from exc
    if kind == "cuda" and not torch.cuda.is_available():
        raise ForkliftError(f"--device {device}: no CUDA device on this machine")


def _evaluate(out: Path, data: Path, best_epoch: int | None) -> None:
    """The written model directory (its default runtime) on val: OUT/eval/eval.json and the pictures."""
    from forklift.evaluation.evaluate import evaluate

    result = evaluate(out, data, split="val", out=out / "eval", epoch=best_epoch)
    summary = ", ".join(f"{k} {v:.4f}" for k, v in result.metrics.__dict__.items() if isinstance(v, float))
    print(f"model directory (epoch {best_epoch or 'last'}) on val: {summary}", flush=True)
