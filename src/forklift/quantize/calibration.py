"""The inputs INT8 ranges are calibrated on: train images of the model's own data set, prepared exactly as the
predictor prepares an image to answer (resize, letterbox, scale), so the ranges are those the graph will see."""

from __future__ import annotations

import random

import numpy as np
from tqdm import tqdm

from forklift.data.check import CheckReport, usable_images
from forklift.errors import ForkliftError
from forklift.model_files.model_dir import ModelDirectory
from forklift.runtime.base import PredictOptions
from forklift.runtime.load import load_predictor
from forklift.vision.images import decode_image
from forklift.vocabulary import Precision, Runtime


def calibration_inputs(model: ModelDirectory, report: CheckReport, *, samples: int, seed: int) -> list[np.ndarray]:
    """Up to `samples` usable train images of the checked data set (a seeded random choice), each as the graph's
    [1, C, H, W] input."""
    train = [image for image in usable_images(report) if image.split == "train"]
    if not train:
        raise ForkliftError(f"{report.dataset.root}: no usable train images to calibrate INT8 ranges on")
    chosen = random.Random(seed).sample(train, min(samples, len(train)))
    predictor = load_predictor(model, Runtime.ONNX, PredictOptions(precision=Precision.F32))
    inputs = []
    for image in tqdm(chosen, desc="calibration images", unit="image", disable=None, leave=False):
        pixels = decode_image(report.dataset.path(image).read_bytes(), image.file)
        tensor = np.asarray(predictor.prepare(pixels)[0], dtype=np.float32)
        inputs.append(tensor if tensor.ndim == 4 else tensor[None])
    return inputs
