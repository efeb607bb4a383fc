"""The images a run trains and validates on: a data set's usable train and val images (`forklift data check`'s
rules: a flagged image is left out), or for style training a plain folder of images."""

from __future__ import annotations

from pathlib import Path

from forklift.data.check import check_dataset, usable_images
from forklift.data.dataset import INDEX, Dataset, ImageRecord
from forklift.data.image_folder import image_folder_dataset
from forklift.errors import ForkliftError
from forklift.vocabulary import Task, word


def usable_splits(path: Path, task: str | None, seed: int) -> tuple[Dataset, list[ImageRecord], list[ImageRecord]]:
    """The data set, its usable train images (at least one) and its usable val images."""
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
    if not dataset.classes:
        raise ForkliftError(f"{path}: no classes in {INDEX}: nothing is labelled yet, so there is nothing to learn")
    if dataset.task == Task.CLASSIFY and len(dataset.classes) < 2:  # its top-1 is 1.0 from the first epoch
        raise ForkliftError(
            f"{path}: one class ({dataset.classes[0]}): a classifier tells 2 classes or more apart; add another"
        )
    usable = usable_images(report)
    unlabelled = sum(image.unlabelled for image in dataset.images)
    if unlabelled:
        print(f"{path}: leaving out {unlabelled} unlabelled images (no person has labelled them yet)", flush=True)
    skipped = len(dataset.images) - len(usable) - unlabelled
    if skipped:
        print(f"{path}: skipping {skipped} images that 'forklift data check' rejects", flush=True)
    train_images = [image for image in usable if image.split == "train"]
    if not train_images:
        raise ForkliftError(f"{path}: no usable train images (see 'forklift data check {path}')")
    val_images = [image for image in usable if image.split == "val"]
    if not val_images:
        print(
            f"{path}: no val images, so no epoch is measured, the last one's weights are kept and no eval/ is written; "
            f"'forklift data split {path} --val 0.2' holds a fifth out to measure on",
            flush=True,
        )
    return dataset, train_images, val_images
