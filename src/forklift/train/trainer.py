"""Train a Darknet YOLOv3-style detector on a forklift data set; the result is a model directory.

Read top to bottom, like nanoGPT's loop: the data, the net, the optimiser and schedule, the epochs (each ending
in metrics and an atomic checkpoint), then the model directory that `forklift predict` and `serve` use.
An interrupted run continues with `resume=True` from its last finished epoch.
"""

from __future__ import annotations

import csv
import importlib.util
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR
from tqdm import tqdm

from forklift.data.check import check_dataset, usable_images
from forklift.data.dataset import Dataset, ImageRecord
from forklift.errors import ForkliftError
from forklift.formats.darknet_cfg import Section, parse_cfg
from forklift.formats.labels import write_labels
from forklift.formats.model_config import ModelConfig, save_config
from forklift.formats.model_dir import open_model_dir
from forklift.nets.darknet import DarknetNet, build_darknet, save_weights
from forklift.nets.init import initialise
from forklift.runtime.onnx_export import export_darknet
from forklift.train.loader import DetectionImages, epoch_loader
from forklift.train.loss import LossTerms, yolo_heads, yolo_loss

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

WARMUP_EPOCHS = 1.0  # linear warm-up over this many epochs' steps (at least WARMUP_MIN_STEPS)
WARMUP_MIN_STEPS = 10
FINAL_LR = 0.05  # of the peak, at the end of the cosine
WEIGHT_DECAY = 5e-4
CONF, IOU = 0.25, 0.45  # the thresholds written to forklift.json
METRIC_FIELDS = ("epoch", "loss", "box", "obj", "cls", "lr", "images_per_s", "seconds", "map50", "map")  # mAP: last row


def train(
    data: Path,
    out: Path,
    cfg: Path | None = None,
    model: Path | None = None,
    epochs: int = 30,
    batch: int = 16,
    img: int | None = None,
    lr: float = 0.001,
    device: str = "cpu",
    resume: bool = False,
    seed: int = 0,
    workers: int = 0,
    time_budget_s: float | None = None,
) -> Path:
    """Train from a cfg (fresh weights) or a model directory (fine-tuning); returns OUT, a model directory.

    With `time_budget_s`, training stops after the epoch during which that many seconds of this call have passed
    (the schedule still spans `epochs`, so choose epochs that fit the budget for a full cosine).
    """
    budget_start = time.perf_counter()
    out = Path(out)
    _check_device(device)
    if img is not None and img % 32:
        raise ForkliftError(f"--img {img}: must be a multiple of 32 (the detectors' largest stride)")
    dataset, train_images, val_images = _data(Path(data))
    checkpoint_path = out / "checkpoints" / "last.pt"
    _check_out(out, checkpoint_path, resume)
    name, cfg_text, start, start_labels = _network_source(cfg, model, dataset.classes, img)
    net = DarknetNet(parse_cfg(cfg_text, f"{out / name}.cfg"))
    yolo_heads(net)
    initialise(net, seed)
    if start is not None:
        _transfer(start, net, keep_heads=start_labels == dataset.classes)
    net.to(device)

    images = DetectionImages(dataset, train_images, (net.input_width, net.input_height), augment=True, seed=seed)
    steps_per_epoch = math.ceil(len(images) / batch)
    optimiser = torch.optim.AdamW(_parameter_groups(net), lr=lr)
    schedule = LambdaLR(optimiser, _lr_factor(steps_per_epoch, epochs))
    first_epoch = 1
    if resume:
        first_epoch = _load_checkpoint(checkpoint_path, net, optimiser, schedule, device) + 1
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.cfg").write_text(cfg_text, encoding="utf-8")
    metrics = out / "metrics.csv"
    _keep_metric_rows(metrics, first_epoch - 1)
    writer = _tensorboard(out)

    for epoch in range(first_epoch, epochs + 1):
        net.train()
        started, totals, seen = time.perf_counter(), dict.fromkeys(METRIC_FIELDS[1:5], 0.0), 0
        loader = epoch_loader(images, batch, epoch, shuffle=True, workers=workers)
        bar = tqdm(loader, desc=f"epoch {epoch}/{epochs}", unit="batch", disable=None, leave=False)
        for inputs, targets in bar:
            inputs, targets = inputs.to(device), targets.to(device)
            terms: LossTerms = yolo_loss(net, net.heads(inputs), targets)
            optimiser.zero_grad(set_to_none=True)
            terms.total.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 10.0)
            optimiser.step()
            schedule.step()
            for key, value in terms.items().items():
                totals[key] += value * len(inputs)
            seen += len(inputs)
            bar.set_postfix({k: f"{v / seen:.3f}" for k, v in totals.items()})
        seconds = time.perf_counter() - started
        row = {"epoch": epoch, **{k: v / max(seen, 1) for k, v in totals.items()}}
        row.update(lr=optimiser.param_groups[0]["lr"], images_per_s=seen / seconds, seconds=seconds)
        _append_metrics(metrics, row)
        if writer is not None:
            for key, value in row.items():
                if key != "epoch":
                    writer.add_scalar(f"train/{key}", value, epoch)
        _save_checkpoint(checkpoint_path, net, optimiser, schedule, epoch)
        print(f"epoch {epoch}/{epochs}: " + ", ".join(f"{k} {row[k]:.4f}" for k in METRIC_FIELDS[1:5]), flush=True)
        if time_budget_s is not None and time.perf_counter() - budget_start >= time_budget_s:
            print(f"time budget of {time_budget_s:g} s spent after epoch {epoch}/{epochs}", flush=True)
            break

    if writer is not None:
        writer.close()
    _write_model_dir(out, name, net, dataset.classes)
    if val_images:
        _evaluate(out, Path(data), metrics)
    return out


def _data(path: Path) -> tuple[Dataset, list[ImageRecord], list[ImageRecord]]:
    """The data set and its usable train and val images (check_dataset's rules: a flagged image is left out)."""
    report = check_dataset(path)
    dataset = report.dataset
    if dataset.task != "detect":
        raise ForkliftError(f"{path}: a {dataset.task} data set; training here needs a detect data set")
    usable = usable_images(report)
    train_images = [image for image in usable if image.split == "train"]
    if not train_images:
        raise ForkliftError(f"{path}: no usable train images (see 'forklift data check {path}')")
    return dataset, train_images, [image for image in usable if image.split == "val"]


def _check_device(device: str) -> None:
    try:
        kind = torch.device(device).type
    except RuntimeError as exc:
        raise ForkliftError(f"--device {device}: not a device name (cpu, cuda, cuda:N)") from exc
    if kind == "cuda" and not torch.cuda.is_available():
        raise ForkliftError(f"--device {device}: no CUDA device on this machine")


def _check_out(out: Path, checkpoint: Path, resume: bool) -> None:
    if resume and not checkpoint.is_file():
        raise ForkliftError(f"{out}: nothing to resume (no {checkpoint.relative_to(out)})")
    if not resume and out.exists() and any(out.iterdir()):
        raise ForkliftError(f"{out}: already exists and is not empty; choose a new directory or pass --resume")


def _network_source(
    cfg: Path | None, model: Path | None, classes: list[str], img: int | None
) -> tuple[str, str, DarknetNet | None, list[str]]:
    """(name, cfg text for this data set, net whose weights to start from or None, and its class names)."""
    if (cfg is None) == (model is None):
        raise ForkliftError("give exactly one of --cfg CFG (train from scratch) or --model MODEL_DIR (fine-tune)")
    if cfg is not None:
        if not Path(cfg).is_file():
            raise ForkliftError(f"{cfg}: no such cfg file")
        return Path(cfg).stem, set_classes(Path(cfg).read_text(encoding="utf-8"), str(cfg), len(classes), img), None, []
    directory = open_model_dir(model)
    if directory.kind != "darknet":
        raise ForkliftError(f"{model}: fine-tuning needs a Darknet model directory (this one is {directory.kind})")
    source = directory.files["cfg"]
    start = build_darknet(source, directory.files["weights"])
    return (
        source.stem,
        set_classes(source.read_text(encoding="utf-8"), str(source), len(classes), img),
        start,
        directory.labels,
    )


def set_classes(text: str, source: str, classes: int, size: int | None = None) -> str:
    """The cfg with `classes=` of each [yolo], `filters=` of the convolution before it, and [net] width and
    height (when a size is given) rewritten; everything else, comments included, stays as written."""
    config = parse_cfg(text, source)
    lines = text.splitlines()
    edits: dict[int, str] = {}  # 0-based line -> new text
    inserts: dict[int, list[str]] = {}  # insert after the section header at this 0-based line
    if size is not None:
        for key in ("width", "height"):
            _set(config.net, key, str(size), edits, inserts)
    for index, section in enumerate(config.layers):
        if section.kind != "yolo":
            continue
        before = config.layers[index - 1] if index else None
        if before is None or before.kind != "convolutional":
            raise ForkliftError(f"{section.where()}: [yolo] must follow a [convolutional] whose filters it sets")
        anchors = len(section.ints("mask", list(range(len(section.floats("anchors")) // 2))))
        _set(section, "classes", str(classes), edits, inserts)
        _set(before, "filters", str(anchors * (5 + classes)), edits, inserts)
    result = []
    for number, line in enumerate(lines):
        result.append(edits.get(number, line))
        result.extend(inserts.get(number, []))
    return "\n".join(result) + "\n"


def _set(section: Section, key: str, value: str, edits: dict[int, str], inserts: dict[int, list[str]]) -> None:
    if key in section.option_lines:
        edits[section.option_lines[key] - 1] = f"{key}={value}"
    else:
        inserts.setdefault(section.line - 1, []).append(f"{key}={value}")


def _transfer(start: DarknetNet, net: DarknetNet, keep_heads: bool) -> None:
    """Copy the starting net's weights into the freshly initialised one; the convolutions before the heads
    only when the classes are the same ones, since for other classes their outputs mean something else."""
    head_convs = tuple(f"layers.{i - 1}." for i in net.head_indices)
    target = net.state_dict()
    fitting = {
        k: v
        for k, v in start.state_dict().items()
        if k in target and target[k].shape == v.shape and (keep_heads or not k.startswith(head_convs))
    }
    net.load_state_dict({**target, **fitting})


def _parameter_groups(net: DarknetNet) -> list[dict]:
    """Weight decay on convolution weights only, not on biases or batch-norm parameters."""
    decay = [p for n, p in net.named_parameters() if n.endswith("conv.weight")]
    other = [p for n, p in net.named_parameters() if not n.endswith("conv.weight")]
    return [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": other, "weight_decay": 0.0}]


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


def _save_checkpoint(path: Path, net: DarknetNet, optimiser: Optimizer, schedule: LambdaLR, epoch: int) -> None:
    """Everything a resumed run needs, written to a side file and renamed so a crash never leaves half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "epoch": epoch,
        "model": net.state_dict(),
        "optimiser": optimiser.state_dict(),
        "schedule": schedule.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "numpy_rng": np.random.get_state(),
    }
    partial = path.with_name(path.name + ".partial")
    torch.save(state, partial)
    partial.replace(path)


def _load_checkpoint(path: Path, net: DarknetNet, optimiser: Optimizer, schedule: LambdaLR, device: str) -> int:
    try:
        state = torch.load(path, map_location=device, weights_only=False)
        net.load_state_dict(state["model"])
        optimiser.load_state_dict(state["optimiser"])
        schedule.load_state_dict(state["schedule"])
    except (RuntimeError, KeyError, ValueError) as exc:
        raise ForkliftError(f"{path}: not a checkpoint of this network: {str(exc).splitlines()[0]}") from exc
    torch.set_rng_state(state["torch_rng"])
    np.random.set_state(state["numpy_rng"])
    return int(state["epoch"])


def _keep_metric_rows(path: Path, last_epoch: int) -> None:
    """Drop rows of epochs after the checkpoint (written before a crash), so a resumed run adds no duplicates."""
    if not path.exists():
        return
    with path.open(newline="", encoding="utf-8") as handle:
        rows = [row for row in csv.DictReader(handle) if int(row["epoch"]) <= last_epoch]
    _write_metrics(path, rows)


def _write_metrics(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=METRIC_FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def _append_metrics(path: Path, row: dict) -> None:
    new = not path.exists()
    with path.open("a", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=METRIC_FIELDS)
        if new:
            writer.writeheader()
        writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})


def _tensorboard(out: Path) -> SummaryWriter | None:
    """A SummaryWriter into OUT/tensorboard when the tensorboard package is installed, else None."""
    if importlib.util.find_spec("tensorboard") is None:
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(out / "tensorboard"))


def _write_model_dir(out: Path, name: str, net: DarknetNet, classes: list[str]) -> None:
    """OUT as a model directory: cfg (already there), weights, names, forklift.json and the ONNX export."""
    save_weights(net.cpu(), out / f"{name}.weights")
    write_labels(out / f"{name}.names", classes)
    config = ModelConfig(
        task="detect",
        input_width=net.input_width,
        input_height=net.input_height,
        resize="letterbox",
        conf=CONF,
        iou=IOU,
    )
    save_config(out, config)
    export_darknet(open_model_dir(out), out / f"{name}.onnx")


def _evaluate(out: Path, data: Path, metrics: Path) -> None:
    """mAP@.5 and mAP@[.5:.95] of the written model on val, added to the last row of metrics.csv."""
    from forklift.train.evaluate import evaluate

    result = evaluate(out, data, split="val")
    with metrics.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    rows[-1].update(map50=_number(result.metrics.map50), map=_number(result.metrics.map))
    _write_metrics(metrics, rows)


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"
