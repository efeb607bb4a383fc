"""What a run writes as it goes, for people and charts: OUT/metrics.csv (a row per epoch) and TensorBoard."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

STEP_FIELDS = ("lr", "images_per_s", "seconds", "elapsed")  # seconds: training; elapsed: since the run began

FINE_TUNING = "fine-tuning: "  # opens each line a run says about what it starts from (the app shows them)


def keep_metric_rows(path: Path, fields: tuple[str, ...], last_epoch: int, last_row: dict | None) -> None:
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


def append_metrics(path: Path, fields: tuple[str, ...], row: dict) -> None:
    new = not path.exists()
    with path.open("a", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        if new:
            writer.writeheader()
        writer.writerow(_formatted(row))


def _formatted(row: dict) -> dict:
    return {k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()}


def tensorboard_writer(out: Path) -> SummaryWriter | None:
    """A SummaryWriter into OUT/tensorboard when the tensorboard package is installed, else None."""
    if importlib.util.find_spec("tensorboard") is None:
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(out / "tensorboard"))


def log_row(writer: SummaryWriter | None, row: dict, metric_names: tuple[str, ...]) -> None:
    """An epoch's row into TensorBoard: its metrics under val/, the rest under train/."""
    if writer is None:
        return
    for key, value in row.items():
        if key != "epoch" and value is not None:
            writer.add_scalar(f"{'val' if key in metric_names else 'train'}/{key}", value, row["epoch"])
