"""Train a model on a forklift data set; the result is a model directory.

Read top to bottom, like nanoGPT's loop: the data, the task (its network, inputs, loss and model directory:
`forklift.train.tasks.base`), the optimiser and schedule, the epochs (each ending in metrics, a validation that keeps
the best weights, and an atomic checkpoint), then the model directory that `forklift predict` and `serve` use,
made from the best epoch and evaluated. An interrupted run continues with `resume=True` from its last epoch.

Started by torchrun (`forklift train --nproc`, `forklift run`), the same loop is data-parallel: every rank
trains its share of each global batch through DistributedDataParallel (`forklift.distributed`), and rank 0 alone
validates and writes checkpoints, metrics, TensorBoard and the model directory.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import math
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.optim import Optimizer as TorchOptimizer
from torch.optim.lr_scheduler import LambdaLR
from tqdm import tqdm

from forklift.atomic import written_atomically
from forklift.data.check import check_dataset, usable_images
from forklift.data.dataset import INDEX, Dataset, ImageRecord
from forklift.data.image_folder import image_folder_dataset
from forklift.distributed import ranks as rank_context
from forklift.distributed.ranks import Ranks
from forklift.distributed.sync_batchnorm import synchronise_batchnorm
from forklift.errors import ForkliftError
from forklift.train import lr_scaling
from forklift.train.loader import Augmentation, epoch_loader, steps_per_epoch
from forklift.train.optimizers import make_optimizer
from forklift.train.settings import TrainSettings, new_settings, resumed_settings
from forklift.train.tasks import NetworkSource, StyleOptions, TrainingTask, TwoStageOptions, make_task
from forklift.vocabulary import Optimizer, Task, word

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

    from forklift.lms import Settings, Stats

WARMUP_EPOCHS = 1.0  # linear warm-up over this many epochs' steps (at least WARMUP_MIN_STEPS)
WARMUP_MIN_STEPS = 10
FINAL_LR = 0.05  # of the peak, at the end of the cosine
CLIP_NORM = 10.0
JOB_FILE = "torchrun-job"  # in OUT/checkpoints: the id of the torchrun job that writes OUT
STEP_FIELDS = ("lr", "images_per_s", "seconds", "elapsed")  # seconds: training; elapsed: since train() began


def train(
    data: Path | None,
    out: Path,
    *,
    cfg: Path | None = None,
    model: Path | None = None,
    arch: str | None = None,
    epochs: int | None = None,
    batch: int | None = None,
    img: int | None = None,
    lr: float | None = None,
    optimizer: str | None = None,
    momentum: float | None = None,
    weight_decay: float | None = None,
    seed: int | None = None,
    val_every: int | None = None,
    mosaic: bool | None = None,
    aug_scale: float | None = None,
    aug_shift: float | None = None,
    aug_hsv: float | None = None,
    amp: bool | None = None,
    weights: Path | None = None,
    anchor_sizes: tuple[int, ...] | None = None,
    proposals: int | None = None,
    task: str | None = None,
    style_image: Path | None = None,
    loss_net_weights: Path | None = None,
    content_weight: float | None = None,
    style_weight: float | None = None,
    sync_bn: bool | None = None,
    lr_scaling: str | None = None,
    device: str = "cpu",
    resume: bool = False,
    workers: int = 0,
    time_budget_s: float | None = None,
    lms: Settings | None = None,
    on_validated: Callable[[int, dict[str, float | None]], None] | None = None,
) -> Path:
    """Train from a cfg or architecture (fresh weights) or a model directory (fine-tuning); returns OUT.

    The options from `data` to `proposals` are the run's settings (`forklift.train.settings`): None means not given,
    so the default (`TrainSettings`) applies, or with `resume` the checkpoint's; one given that contradicts the
    checkpoint is refused. The val split is measured every `val_every` epochs and at the last one; the model
    directory gets the weights of the best measured epoch. With `time_budget_s`, training ends before an epoch
    that would finish past the budget, judged by the one before it (the first always runs); the schedule still
    spans `epochs`, so choose epochs that fit.
    `amp`: mixed precision (float16 with loss scaling on CUDA, bfloat16 on the CPU); None: on for CUDA only.
    `weights`, `anchor_sizes`, `proposals`: two-stage detectors only (`forklift.train.tasks.two_stage`).
    `task="style"` trains a style network on a folder of images (or a data set's images) with `style_image`,
    `loss_net_weights`, `content_weight` and `style_weight` (`forklift.train.tasks.style`).
    `sync_bn`, `lr_scaling`: data-parallel runs only (under torchrun): batch norm over all ranks, and how the
    learning rate follows the global batch (`forklift.train.lr_scaling`); `batch` is then each rank's.
    `lms`: large model support around each epoch's steps, with these settings (`forklift.lms.Options`).
    `on_validated(epoch, metrics)`: called after each measured epoch is saved (a search reports and prunes there;
    what it raises ends the run).
    """
    budget_start = time.perf_counter()
    out = Path(out)
    _check_device(device)
    ranks = rank_context.from_environment()
    checkpoints = out / "checkpoints"
    job_file = checkpoints / JOB_FILE
    restarted = ranks.job is not None and job_file.is_file() and job_file.read_text(encoding="utf-8") == ranks.job
    if ranks.leader and not restarted:
        check_out(out, checkpoints / "last.pt", resume)
    given = {"data": data, "cfg": cfg, "model": model, "arch": arch, "epochs": epochs, "batch": batch, "img": img,
             "lr": lr, "optimizer": optimizer, "momentum": momentum, "weight_decay": weight_decay, "seed": seed,
             "val_every": val_every, "mosaic": mosaic, "aug_scale": aug_scale, "aug_shift": aug_shift,
             "aug_hsv": aug_hsv, "amp": amp, "weights": weights, "anchor_sizes": anchor_sizes,
             "proposals": proposals, "task": task, "style_image": style_image,
             "loss_net_weights": loss_net_weights, "content_weight": content_weight,
             "style_weight": style_weight, "sync_bn": sync_bn, "lr_scaling": lr_scaling}  # fmt: skip
    device = rank_context.start(ranks, device)
    if _agreed(restarted and not resume and (checkpoints / "last.pt").is_file(), ranks):  # rank 0's view counts
        resume = True  # torchrun restarted the job's ranks after a failure: continue from its last checkpoint
        if ranks.leader:
            print(f"restarted: resuming {out} from its last checkpoint", flush=True)
    try:
        return _train(given, out, ranks, device=device, resume=resume, workers=workers, budget_start=budget_start,
                      time_budget_s=time_budget_s, lms=lms, on_validated=on_validated)  # fmt: skip
    finally:
        rank_context.stop(ranks)


def _train(
    given: dict[str, Any],
    out: Path,
    ranks: Ranks,
    *,
    device: str,
    resume: bool,
    workers: int,
    budget_start: float,
    time_budget_s: float | None,
    lms: Settings | None,
    on_validated: Callable[[int, dict[str, float | None]], None] | None,
) -> Path:
    """`train` once the run's ranks are started (one, outside torchrun)."""
    checkpoints = out / "checkpoints"
    checkpoint = _shared_checkpoint(checkpoints / "last.pt", ranks) if resume else None
    settings = _settings(given, checkpoint, checkpoints / "last.pt")
    if settings.img is not None and settings.img % 32:
        raise ForkliftError(f"--img {settings.img}: must be a multiple of 32 (the networks' largest stride)")
    _check_numbers(settings)
    assert settings.data is not None  # _settings refuses a run without data
    dataset, train_images, val_images = _data(settings.data, settings.task, settings.seed)
    source = NetworkSource(cfg=settings.cfg, model=settings.model, arch=settings.arch, img=settings.img)
    two_stage = TwoStageOptions(settings.weights, settings.anchor_sizes, settings.proposals)
    augmentation = Augmentation(settings.aug_scale, settings.aug_shift, settings.aug_hsv, mosaic=settings.mosaic)
    style = StyleOptions(
        settings.style_image, settings.loss_net_weights, settings.content_weight, settings.style_weight
    )
    plugin = make_task(dataset, source, seed=settings.seed, augmentation=augmentation, two_stage=two_stage, style=style)
    net = plugin.net.to(device)
    if settings.sync_bn and ranks.distributed:
        synchronise_batchnorm(net)
    precision = _Precision(device, settings.amp)
    epochs, batch = settings.epochs, settings.batch
    leader = ranks.leader

    images = plugin.images(train_images, augment=True)
    steps = steps_per_epoch(len(images), batch, ranks.world)
    groups = plugin.parameter_groups(weight_decay=settings.weight_decay)
    rule, factor = lr_scaling.lr_factor(settings.lr_scaling, settings.optimizer, ranks.world)
    if settings.model is not None and checkpoint is None and leader:
        print(f"fine-tuning: starting from the weights of {settings.model}", flush=True)
    if ranks.distributed and leader:
        print(lr_scaling.describe(rule, factor, settings.lr, ranks.world, batch), flush=True)
    lr = settings.lr * factor
    optimiser = make_optimizer(Optimizer(settings.optimizer), groups, lr=lr, momentum=settings.momentum)
    schedule = LambdaLR(optimiser, _lr_factor(steps, epochs))
    stepper = _stepper(plugin, ranks, device)
    fields = ("epoch", *plugin.loss_terms, *STEP_FIELDS, *plugin.metric_names)
    best = _Best()
    run = _Run(settings, plugin, optimiser, schedule, precision, best, ranks)
    if checkpoint is None:  # what draws from torch's own RNG (torchvision's box samplers) starts from the seed
        torch.manual_seed(settings.seed + ranks.rank)  # (each rank its own); a resumed run takes the checkpoint's
    first_epoch = run.restore(checkpoint, checkpoints / "last.pt") + 1 if checkpoint is not None else 1
    metrics = out / "metrics.csv"
    writer = None
    if leader:
        out.mkdir(parents=True, exist_ok=True)
        if ranks.job is not None:  # so that a restart of this job (and only of this one) knows OUT as its own
            checkpoints.mkdir(exist_ok=True)
            (checkpoints / JOB_FILE).write_text(ranks.job, encoding="utf-8")
        _keep_metric_rows(metrics, fields, first_epoch - 1, (checkpoint or {}).get("metrics_row"))
        writer = _tensorboard(out)

    try:  # a callback's exception (a search pruning the trial) or Ctrl-C ends the run with its log closed
        last_epoch_seconds = 0.0
        for epoch in range(first_epoch, epochs + 1):
            spent = time.perf_counter() - budget_start
            over = time_budget_s is not None and epoch > first_epoch and spent + last_epoch_seconds > time_budget_s
            if _agreed(over, ranks):  # rank 0's clock decides for all
                if leader:
                    print(f"time budget of {time_budget_s:g} s: stopping before epoch {epoch}/{epochs}", flush=True)
                break
            started = time.perf_counter()
            net.train()
            totals, seen = dict.fromkeys(plugin.loss_terms, 0.0), 0
            loader = epoch_loader(
                images, batch, epoch, shuffle=True, workers=workers, collate_fn=plugin.collate, rank=ranks.rank,
                world=ranks.world,
            )  # fmt: skip
            bar = tqdm(
                loader, desc=f"epoch {epoch}/{epochs}", unit="batch", disable=None if leader else True, leave=False
            )
            with _swapping(lms) as swapped:
                for inputs, targets in bar:
                    inputs, targets = inputs.to(device), _to(targets, device)
                    with precision.autocast():
                        terms = stepper(inputs, targets)
                    optimiser.zero_grad(set_to_none=True)
                    precision.step(terms["loss"], net, optimiser)
                    schedule.step()
                    for key, value in terms.items():
                        totals[key] += float(value.detach()) * len(inputs)
                    seen += len(inputs)
                    bar.set_postfix({k: f"{v / seen:.3f}" for k, v in totals.items()})
            if swapped is not None:
                print(f"epoch {epoch}/{epochs}: {swapped.summary()}", flush=True)
            totals, seen = _summed(totals, seen, ranks)
            seconds = time.perf_counter() - started
            row: dict = {"epoch": epoch, **{k: v / max(seen, 1) for k, v in totals.items()}}
            row.update(lr=optimiser.param_groups[0]["lr"], images_per_s=seen / seconds, seconds=seconds)
            validated = bool(val_images) and (epoch % settings.val_every == 0 or epoch == epochs)
            states = _rank_rng_states(ranks)
            if not leader:
                continue
            if validated:
                row.update(plugin.validate(val_images, checkpoints / "val-model"))
                best.consider(epoch, row[plugin.metric_names[0]], plugin, checkpoints / "best.pt")
            row["elapsed"] = time.perf_counter() - budget_start
            run.save(checkpoints / "last.pt", epoch, states, metrics_row=row)  # first: a stop before the row is
            _append_metrics(metrics, fields, row)  # appended leaves it in the checkpoint, which a resume restores
            if writer is not None:
                for key, value in row.items():
                    if key != "epoch" and value is not None:
                        writer.add_scalar(f"{'val' if key in plugin.metric_names else 'train'}/{key}", value, epoch)
            shown = [f"{k} {row[k]:.4f}" for k in (*plugin.loss_terms, *plugin.metric_names) if row.get(k) is not None]
            print(f"epoch {epoch}/{epochs}: " + ", ".join(shown), flush=True)
            last_epoch_seconds = time.perf_counter() - started
            if validated and on_validated is not None:
                on_validated(epoch, {name: row[name] for name in plugin.metric_names})
    finally:
        if writer is not None:
            writer.close()
    if not leader:
        return out
    best_epoch = best.restore(plugin, checkpoints / "best.pt")
    net.cpu()
    plugin.write_model_dir(out)
    if val_images and plugin.evaluated:
        _evaluate(out, settings.data, best_epoch)
    return out


class _LossOf(torch.nn.Module):
    """The task's loss as a module's forward, so DistributedDataParallel can wrap it: the task's net is its
    submodule (the parameters DDP averages), and a task may call any method of its net inside `loss`."""

    def __init__(self, plugin: TrainingTask) -> None:
        super().__init__()
        self.plugin = plugin
        self.net = plugin.net

    def forward(self, inputs: torch.Tensor, targets: object) -> dict[str, torch.Tensor]:
        return self.plugin.loss(inputs, targets)


def _stepper(plugin: TrainingTask, ranks: Ranks, device: str) -> Callable[[torch.Tensor, object], dict]:
    """What a training step calls for the loss terms: the task's loss, through DistributedDataParallel (which
    averages the gradients over the ranks as backward produces them) when there are several ranks."""
    if not ranks.distributed:
        return plugin.loss
    device_ids = [torch.device(device)] if torch.device(device).type == "cuda" else None
    return DistributedDataParallel(_LossOf(plugin), device_ids=device_ids)


def _agreed(decision: bool, ranks: Ranks) -> bool:
    """Rank 0's `decision`, on every rank (a rank that stopped alone would leave the others waiting)."""
    if not ranks.distributed:
        return decision
    flag = torch.tensor([int(decision)])
    torch.distributed.broadcast(flag, src=0)
    return bool(flag.item())


def _summed(totals: dict[str, float], seen: int, ranks: Ranks) -> tuple[dict[str, float], int]:
    """The epoch's loss totals and image count over all ranks: metrics.csv describes the global batch."""
    if not ranks.distributed:
        return totals, seen
    summed = torch.tensor([*totals.values(), float(seen)], dtype=torch.float64)
    torch.distributed.all_reduce(summed)
    return dict(zip(totals, summed[:-1].tolist(), strict=True)), int(summed[-1].item())


def _rank_rng_states(ranks: Ranks) -> list[tuple[Any, Any]] | None:
    """Every rank's torch and numpy RNG states, gathered on rank 0 (None elsewhere): a checkpoint keeps them all
    so that a resumed data-parallel run draws what the uninterrupted one would have."""
    own = (torch.get_rng_state(), np.random.get_state())
    if not ranks.distributed:
        return [own]
    gathered: list[Any] = [None] * ranks.world if ranks.leader else []
    torch.distributed.gather_object(own, gathered if ranks.leader else None, dst=0)
    return gathered if ranks.leader else None


def _shared_checkpoint(path: Path, ranks: Ranks) -> dict[str, Any]:
    """The checkpoint to resume, read by rank 0 and sent to the others (their hosts need not share OUT)."""
    if not ranks.distributed:
        return _read_checkpoint(path, "cpu")
    box = [_read_checkpoint(path, "cpu") if ranks.leader else None]
    torch.distributed.broadcast_object_list(box, src=0)
    assert box[0] is not None
    return box[0]


def _swapping(lms: Settings | None) -> contextlib.AbstractContextManager[Stats | None]:
    """`forklift.lms.swapping` with the settings, or nothing when large model support is off."""
    if lms is None:
        return contextlib.nullcontext()
    from forklift.lms import swapping

    return swapping(**lms)


class _Precision:
    """Mixed precision where asked: float16 with a gradient scaler on CUDA (its range needs one), bfloat16 on the
    CPU (same range as float32, no scaler); otherwise plain float32. Also clips gradients before each step."""

    def __init__(self, device: str, amp: bool | None) -> None:
        self.device_type = torch.device(device).type
        self.enabled = self.device_type == "cuda" if amp is None else amp
        self.dtype = torch.float16 if self.device_type == "cuda" else torch.bfloat16
        self.scaler = torch.amp.GradScaler(self.device_type, enabled=self.enabled and self.device_type == "cuda")

    def autocast(self) -> contextlib.AbstractContextManager:
        return torch.autocast(self.device_type, dtype=self.dtype, enabled=self.enabled)

    def step(self, loss: torch.Tensor, net: torch.nn.Module, optimiser: TorchOptimizer) -> None:
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(optimiser)
        torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP_NORM)
        self.scaler.step(optimiser)
        self.scaler.update()


class _Best:
    """The best validated epoch so far: its metric, and its weights kept in a checkpoint of their own."""

    def __init__(self) -> None:
        self.epoch: int | None = None
        self.score: float | None = None

    def consider(self, epoch: int, score: float | None, task: TrainingTask, path: Path) -> None:
        if score is None or (self.score is not None and score <= self.score):
            return
        self.epoch, self.score = epoch, score
        _atomic_save({"epoch": epoch, "model": task.net.state_dict()}, path)

    def restore(self, task: TrainingTask, path: Path) -> int | None:
        """Load the best epoch's weights into the task's net (when one was validated); returns that epoch."""
        if self.epoch is None:
            return None
        state = torch.load(path, map_location="cpu", weights_only=True)
        task.net.load_state_dict(state["model"])
        print(f"best epoch: {self.epoch} ({task.metric_names[0]} {self.score:.4f})", flush=True)
        return self.epoch


def _to(targets: object, device: str) -> object:
    return targets.to(device) if isinstance(targets, torch.Tensor) else targets


def _data(path: Path, task: str | None, seed: int) -> tuple[Dataset, list[ImageRecord], list[ImageRecord]]:
    """The data set and its usable train and val images (check_dataset's rules: a flagged image is left out);
    for style training a plain folder of images will do."""
    if task is not None and word(Task, task, where="--task") != Task.STYLE:
        raise ForkliftError(f"--task {task}: only style is chosen by --task; other tasks come from the data set")
    if task == Task.STYLE and not (path / INDEX).is_file():
        dataset = image_folder_dataset(path, seed=seed)
        return (
            dataset,
            [i for i in dataset.images if i.split == "train"],
            [i for i in dataset.images if i.split == "val"],
        )
    report = check_dataset(path)
    dataset = report.dataset
    usable = usable_images(report)
    skipped = len(dataset.images) - len(usable)
    if skipped:
        print(f"{path}: skipping {skipped} images that 'forklift data check' rejects", flush=True)
    train_images = [image for image in usable if image.split == "train"]
    if not train_images:
        raise ForkliftError(f"{path}: no usable train images (see 'forklift data check {path}')")
    return dataset, train_images, [image for image in usable if image.split == "val"]


def _check_numbers(settings: TrainSettings) -> None:
    """One line for a setting of the optimiser, schedule or augmentation that cannot work."""
    word(Optimizer, settings.optimizer, where="--optimizer")
    if settings.val_every < 1:
        raise ForkliftError(f"--val-every {settings.val_every}: must be at least 1")
    if not settings.lr > 0:
        raise ForkliftError(f"--lr {settings.lr}: must be above 0")
    if not 0 <= settings.momentum < 1:
        raise ForkliftError(f"--momentum {settings.momentum}: must be from 0 up to (not including) 1")
    if not settings.weight_decay >= 0:
        raise ForkliftError(f"--weight-decay {settings.weight_decay}: must be 0 or more")
    if not 0 <= settings.aug_scale < 1:
        raise ForkliftError(f"--aug-scale {settings.aug_scale}: must be from 0 up to (not including) 1")
    if not 0 <= settings.aug_shift <= 0.5:
        raise ForkliftError(f"--aug-shift {settings.aug_shift}: must be from 0 to 0.5 (of the input each way)")
    if not settings.aug_hsv >= 0:
        raise ForkliftError(f"--aug-hsv {settings.aug_hsv}: must be 0 or more")


def _check_device(device: str) -> None:
    try:
        kind = torch.device(device).type
    except RuntimeError as exc:
        raise ForkliftError(f"--device {device}: not a device name (cpu, cuda, cuda:N)") from exc
    if kind == "cuda" and not torch.cuda.is_available():
        raise ForkliftError(f"--device {device}: no CUDA device on this machine")


def _settings(given: dict[str, Any], checkpoint: dict[str, Any] | None, path: Path) -> TrainSettings:
    """The run's settings: new ones from what was given, or the checkpoint's (checked against what was given).
    A checkpoint written before settings were recorded resumes with what is given, as it always did."""
    if checkpoint is not None and "settings" in checkpoint:
        settings = resumed_settings(TrainSettings.from_json(checkpoint["settings"]), given, path)
    else:
        settings = new_settings(given)
    if settings.data is None:
        raise ForkliftError("--data DATA: needed to start a run (a resumed run takes its checkpoint's)")
    return settings


def check_out(out: Path, checkpoint: Path, resume: bool) -> None:
    if resume and not checkpoint.is_file():
        raise ForkliftError(f"{out}: nothing to resume (no {checkpoint.relative_to(out)})")
    if not resume and out.exists() and any(out.iterdir()):
        raise ForkliftError(f"{out}: already exists and is not empty; choose a new directory or pass --resume")


def _lr_factor(steps_per_epoch: int, epochs: int) -> Callable[[int], float]:
    """Linear warm-up, then a cosine from the peak down to FINAL_LR of it by the last step."""
    total = max(1, steps_per_epoch * epochs)
    warmup = min(total, max(WARMUP_MIN_STEPS, round(WARMUP_EPOCHS * steps_per_epoch)))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return FINAL_LR + (1 - FINAL_LR) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


@dataclass
class _Run:
    """What a checkpoint holds besides the RNG states: everything a resumed run needs to continue exactly as if
    it had not stopped."""

    settings: TrainSettings
    task: TrainingTask
    optimiser: TorchOptimizer
    schedule: LambdaLR
    precision: _Precision
    best: _Best
    ranks: Ranks

    def save(
        self, path: Path, epoch: int, rng_states: list[tuple[Any, Any]] | None, *, metrics_row: dict[str, Any]
    ) -> None:
        """Rank 0 writes the checkpoint, with every rank's RNG states (`_rank_rng_states`) and the epoch's
        metrics.csv row."""
        assert rng_states is not None
        state = {
            "epoch": epoch,
            "metrics_row": metrics_row,
            "settings": self.settings.to_json(),
            "model": self.task.net.state_dict(),
            "optimiser": self.optimiser.state_dict(),
            "schedule": self.schedule.state_dict(),
            "scaler": self.precision.scaler.state_dict(),
            "best": (self.best.epoch, self.best.score),
            "torch_rng": rng_states[0][0],
            "numpy_rng": rng_states[0][1],
            "ranks": self.ranks.world,
            "rank_rngs": rng_states,
        }
        _atomic_save(state, path)

    def restore(self, state: dict[str, Any], path: Path) -> int:
        """Continue from the checkpoint `state` read from `path`; returns the epoch it ended."""
        recorded = state.get("ranks", 1)
        if recorded != self.ranks.world:
            raise ForkliftError(
                f"{path}: trained with {recorded} rank(s), resumed with {self.ranks.world}; resume with the same "
                f"number (--nproc {recorded}, or the same hosts and --nproc-per-node of forklift run)"
            )
        try:
            self.task.net.load_state_dict(state["model"])
            self.optimiser.load_state_dict(state["optimiser"])
            self.schedule.load_state_dict(state["schedule"])
            self.precision.scaler.load_state_dict(state["scaler"])
            self.best.epoch, self.best.score = state["best"]
        except (RuntimeError, KeyError, ValueError) as exc:
            raise ForkliftError(f"{path}: not a checkpoint of this network: {str(exc).splitlines()[0]}") from exc
        torch_rng, numpy_rng = state.get("rank_rngs", [(state["torch_rng"], state["numpy_rng"])])[self.ranks.rank]
        torch.set_rng_state(torch_rng)
        np.random.set_state(numpy_rng)
        return int(state["epoch"])


def _read_checkpoint(path: Path, device: str) -> dict[str, Any]:
    """A checkpoint's contents, or one line saying why it cannot be read."""
    try:
        state: dict[str, Any] = torch.load(path, map_location=device, weights_only=False)
    except (RuntimeError, OSError, EOFError, pickle.UnpicklingError) as exc:
        raise ForkliftError(f"{path}: not a readable checkpoint: {str(exc).splitlines()[0]}") from exc
    return state


def _atomic_save(state: dict, path: Path) -> None:
    """Written to a side file and renamed, so that a crash never leaves half of one."""
    with written_atomically(path) as partial:
        torch.save(state, partial)


def _keep_metric_rows(path: Path, fields: tuple[str, ...], last_epoch: int, last_row: dict | None) -> None:
    """Make metrics.csv end at the checkpoint's epoch, so a resumed run neither repeats nor skips a row: rows of
    later epochs (from a checkpoint older than them) go; the checkpoint's own row (`last_row`), when a stop came
    between writing the checkpoint and the row, is added from the checkpoint."""
    rows: list[dict] = []
    if path.exists():
        with path.open(newline="", encoding="utf-8") as handle:
            rows = [row for row in csv.DictReader(handle) if int(row["epoch"]) <= last_epoch]
    if last_row is not None and not any(int(row["epoch"]) == last_epoch for row in rows):
        rows.append(_formatted(last_row))
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def _append_metrics(path: Path, fields: tuple[str, ...], row: dict) -> None:
    new = not path.exists()
    with path.open("a", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        if new:
            writer.writeheader()
        writer.writerow(_formatted(row))


def _formatted(row: dict) -> dict:
    return {k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()}


def _tensorboard(out: Path) -> SummaryWriter | None:
    """A SummaryWriter into OUT/tensorboard when the tensorboard package is installed, else None."""
    if importlib.util.find_spec("tensorboard") is None:
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(out / "tensorboard"))


def _evaluate(out: Path, data: Path, best_epoch: int | None) -> None:
    """The written model directory (its default runtime) on val: OUT/eval/eval.json and the pictures."""
    from forklift.evaluation.evaluate import evaluate

    result = evaluate(out, data, split="val", out=out / "eval")
    summary = ", ".join(f"{k} {v:.4f}" for k, v in result.metrics.__dict__.items() if isinstance(v, float))
    print(f"model directory (epoch {best_epoch or 'last'}) on val: {summary}", flush=True)
