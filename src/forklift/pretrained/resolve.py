"""`train --weights coco|imagenet|NAME|FILE`, `--loss-net-weights vgg16|FILE` and `--model NAME|DIR`: a name of
the catalogue becomes its checked file (or ready model directory) in the cache, pulled first when it is not there
yet; anything else is a path."""

from __future__ import annotations

from pathlib import Path

from forklift.errors import ForkliftError
from forklift.pretrained.catalogue import catalogue_path, load_catalogue
from forklift.pretrained.fetch import Source, cache_root
from forklift.pretrained.pull import pull, pulled_weights
from forklift.vocabulary import PretrainedKind

BACKBONES = ("mobilenet_v3_large", "resnet50")  # the ImageNet classifiers the catalogue's architectures build on
DATASETS = ("coco", "imagenet")  # --weights coco: the architecture's own; imagenet: its backbone's


def weights_file(given: str, *, arch: str | None, option: str = "--weights") -> Path:
    """The file `given` names: an existing path as it is; a catalogue name, or coco/imagenet for `arch`, pulled."""
    path = Path(given).expanduser()
    if path.exists() or "/" in given or path.suffix in (".pth", ".pt"):
        return path  # a file: what loads it says what is wrong with it
    name = _catalogue_name(given, arch, option)
    where = catalogue_path()
    catalogue = load_catalogue(where)
    if name not in catalogue:
        raise ForkliftError(
            f"{option} {given}: no such file, and the catalogue has no {name} (forklift models pull --list)"
        )
    model = catalogue[name]
    if model.kind is not PretrainedKind.WEIGHTS:
        raise ForkliftError(
            f"{option} {given}: {name} is a ready {model.kind} model; pull it into a folder and give --model DIR"
        )
    return pulled_weights(model, cache=cache_root(), source=Source.of(None))


def model_directory(given: Path) -> Path:
    """`--model`: a directory as it is; the name of a catalogue model that pulls as a model directory (Darknet,
    style, a COCO detector), its ready directory in the cache (pulled there first)."""
    if given.exists() or len(given.parts) > 1:
        return given
    where = catalogue_path()
    model = load_catalogue(where).get(str(given))
    if model is None:
        return given  # not a name: the model directory's own check says what is missing
    if not model.makes_directory:
        raise ForkliftError(f"--model {given}: a weights file, not a model directory; give it to --weights")
    ready = cache_root() / "models" / model.name
    if not ready.is_dir():
        pull(model, cache=cache_root(), source=Source.of(None), out=ready)
    return ready


def _catalogue_name(given: str, arch: str | None, option: str) -> str:
    if given not in DATASETS:
        return given
    if arch is None:
        raise ForkliftError(f"{option} {given}: give --arch too (whose {given} weights to start from)")
    if given == "coco":
        return arch  # the catalogue names torchvision's COCO detectors and segmenters after their architecture
    for backbone in BACKBONES:
        if backbone in arch:
            return backbone
    raise ForkliftError(f"{option} imagenet: no ImageNet backbone of {arch} in the catalogue ({', '.join(BACKBONES)})")
