"""Training a style network (fast neural style): content images from `--data` (a folder of images, or a data set),
one `--style-image`, and the perceptual loss of a fixed VGG16 (`forklift.train.perceptual`). The loss weights are
the usual ones of the perceptual-loss recipe (content 1e5, style 1e10 on normalised Gram matrices); the best
epoch is the one with the lowest perceptual loss on val, reported as `val_score` (its negation: higher is better,
as every task's first metric)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional

from forklift.data.dataset import ImageRecord
from forklift.errors import ForkliftError
from forklift.model_files.model_dir import open_model_dir
from forklift.nets.style import StyleNet, load_style_net
from forklift.train.loader import AugmentedImages
from forklift.train.perceptual import CONTENT_LAYER, LossNetwork, gram
from forklift.train.tasks.base import NetworkSource, TrainingTask
from forklift.vision.images import decode_image
from forklift.vision.resize import fit
from forklift.vocabulary import ModelFormat, ResizeMode

DEFAULT_IMG = 256


@dataclass(frozen=True)
class StyleOptions:
    """What only style training takes."""

    style_image: Path | None = None
    loss_net_weights: Path | None = None
    content_weight: float | None = None
    style_weight: float | None = None

    def given(self) -> list[str]:
        return [name for name, value in vars(self).items() if value is not None]


class ContentImages(AugmentedImages):
    """Each image resized to cover the input and centre-cropped (randomly placed crops when augmenting), RGB 0–255."""

    def sample(self, index: int, rng: np.random.Generator | None) -> tuple[torch.Tensor, Any]:
        image = self.decoded(index)
        height, width = image.shape[:2]
        scale = max(self.width / width, self.height / height)
        size = (max(self.width, round(width * scale)), max(self.height, round(height * scale)))
        covered, _ = fit(image, size[0], size[1], ResizeMode.STRETCH)
        spare_x, spare_y = size[0] - self.width, size[1] - self.height
        x = int(rng.integers(0, spare_x + 1)) if rng is not None else spare_x // 2
        y = int(rng.integers(0, spare_y + 1)) if rng is not None else spare_y // 2
        crop = covered[y : y + self.height, x : x + self.width]
        return torch.from_numpy(np.ascontiguousarray(crop.transpose(2, 0, 1))).float(), None


class StyleTask(TrainingTask):
    kind = "style"
    loss_terms = ("loss", "content", "style")
    metric_names = ("val_score",)
    name = "style"
    evaluated = False  # `forklift eval` has no metric for styled images; val_score is the measure
    net: StyleNet

    def __init__(self, dataset, source: NetworkSource, *, seed: int, options: StyleOptions, **kwargs: Any) -> None:
        super().__init__(dataset, seed=seed, **kwargs)
        if source.cfg is not None or source.arch is not None:
            raise ForkliftError("style training starts from fresh weights or --model STYLE_MODEL_DIR, not --cfg/--arch")
        if options.style_image is None:
            raise ForkliftError("--style-image IMAGE: style training needs the image whose style to learn")
        if options.loss_net_weights is None:
            raise ForkliftError(
                "--loss-net-weights FILE: style training needs VGG16's ImageNet weights (the file torchvision would "
                "download as vgg16-397923af.pth); nothing is downloaded here"
            )
        self.size = source.img or DEFAULT_IMG
        self.content_weight = 1e5 if options.content_weight is None else options.content_weight
        self.style_weight = 1e10 if options.style_weight is None else options.style_weight
        self.loss_net = LossNetwork(options.loss_net_weights)
        if source.model is not None:
            model = open_model_dir(source.model)
            if model.format != ModelFormat.STYLE:
                raise ForkliftError(f"--model {source.model}: not a style model directory (a .pth state dict)")
            self.net = load_style_net(model.files["state_dict"]).train()
        else:
            torch.manual_seed(seed)
            self.net = StyleNet()
        style = Path(options.style_image)
        if not style.is_file():
            raise ForkliftError(f"--style-image {style}: no such file")
        pixels = decode_image(style.read_bytes(), str(style))
        fitted, _ = fit(pixels, self.size, self.size, ResizeMode.STRETCH)
        with torch.no_grad():
            tensor = torch.from_numpy(np.ascontiguousarray(fitted.transpose(2, 0, 1))).float()[None]
            self.style_grams = [gram(f) for f in self.loss_net(tensor)]

    def images(self, records: list[ImageRecord], augment: bool) -> AugmentedImages:
        return self.augmented(ContentImages, records, (self.size, self.size), augment=augment)

    def collate(self, batch: list[tuple[torch.Tensor, Any]]) -> tuple[torch.Tensor, Any]:
        return torch.stack([inputs for inputs, _ in batch]), None

    def loss(self, inputs: torch.Tensor, targets: Any) -> dict[str, torch.Tensor]:
        self.loss_net.to(inputs.device)
        styled = self.net(inputs)
        found, wanted = self.loss_net(styled), self.loss_net(inputs)
        content = self.content_weight * functional.mse_loss(found[CONTENT_LAYER], wanted[CONTENT_LAYER])
        style = self.style_weight * sum(
            functional.mse_loss(gram(f), g.to(f.device).expand(len(f), -1, -1))
            for f, g in zip(found, self.style_grams, strict=True)
        )
        assert isinstance(style, torch.Tensor)
        return {"loss": content + style, "content": content, "style": style}

    def validate(self, records: list[ImageRecord], scratch: Path) -> dict[str, float | None]:
        """Minus the mean perceptual loss on val (centre crops): higher is better."""
        training = self.net.training
        self.net.eval()
        device = next(self.net.parameters()).device
        images = self.images(records, augment=False)
        total = 0.0
        try:
            with torch.no_grad():
                for index in range(len(images)):
                    inputs = images[index][0][None].to(device)
                    total += float(self.loss(inputs, None)["loss"])
        finally:
            self.net.train(training)
        return {"val_score": -total / max(len(images), 1)}

    def write_model_dir(self, out: Path, onnx: bool = True) -> None:
        from forklift.runtime.style_export import write_style_dir

        write_style_dir(self.net, out, onnx=onnx)
