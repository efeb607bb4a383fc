"""`forklift models pull`: a catalogue model made ready to use. A Darknet or style model, or a torchvision detector
or segmenter whose classes the catalogue names, becomes a model directory (forklift.json saying where it came from)
that is checked by loading it before it appears; a torchvision weights file stays in the cache, checked as a state
dict, for `forklift train --weights`."""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from forklift.errors import ForkliftError
from forklift.model_files.labels import read_labels, write_labels
from forklift.pretrained.catalogue import Pretrained, RemoteFile, full_digest
from forklift.pretrained.fetch import Source, cached_path, fetch, partial_path
from forklift.vocabulary import PretrainedKind


@dataclass(frozen=True)
class Pulled:
    """What a pull left: a model directory, or (a backbone's weights) the verified file in the cache."""

    model: Pretrained
    path: Path


def pull(model: Pretrained, *, cache: Path, source: Source, out: Path | None) -> Pulled:
    """Every file of `model` fetched and verified; then the model directory `out` (default: NAME here) made whole
    in a side folder and renamed into place, so that a failure leaves no half of one."""
    if not model.makes_directory:
        if out is not None:
            raise ForkliftError(
                f"{model.name}: a weights file to train from, not a model directory; leave OUT out and give "
                "the path it prints to `forklift train --weights`"
            )
        return Pulled(model, pulled_weights(model, cache=cache, source=source))
    out = Path(out if out is not None else model.name)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ForkliftError(f"{out}: already exists and is not empty; give another OUT or remove it")
    fetched = [(file, fetch(file, cache=cache, source=source)) for file in model.files]
    side = out.with_name(f".{out.name}.pulling")
    shutil.rmtree(side, ignore_errors=True)
    side.mkdir(parents=True)
    try:
        if model.kind is PretrainedKind.WEIGHTS:  # the file stays in the cache; the directory is made from it
            from forklift.pretrained.ready import write_ready_model  # torch: only here

            ((_, weights),) = fetched
            _check_state_dict(weights)
            print(f"{model.name}: exporting the net for {len(model.labels or {})} classes", file=sys.stderr, flush=True)
            write_ready_model(model, weights, side)
        else:
            _assemble(model, fetched, side)
        _add_provenance(model, side)
        if out.exists():
            out.rmdir()
        side.rename(out)
    finally:
        shutil.rmtree(side, ignore_errors=True)
    return Pulled(model, out)


def pulled_weights(model: Pretrained, *, cache: Path, source: Source) -> Path:
    """The verified weights file of a weights entry in the cache (fetched first when it is not there)."""
    (path,) = (fetch(file, cache=cache, source=source) for file in model.files)
    _check_state_dict(path)
    return path


def _assemble(model: Pretrained, fetched: list[tuple[RemoteFile, Path]], folder: Path) -> None:
    """A Darknet or style model's files placed in `folder` and checked by loading them."""
    for file, path in fetched:
        _place(file, path, folder)
    try:
        _check_directory(model, folder)
    except ForkliftError:
        for file, path in fetched:  # what only this check could judge is fetched anew next time
            if not full_digest(file):
                path.unlink(missing_ok=True)
        raise


def _place(file: RemoteFile, path: Path, folder: Path) -> None:
    """The file copied into the model folder (a copy: editing it must not change the checked one in the cache),
    a zip archive's member extracted, or a names file's first `lines` names written."""
    target = folder / file.placed_name
    if file.lines is not None:
        write_labels(target, read_labels(path)[: file.lines])
    elif file.member is None:
        shutil.copyfile(path, target)
    else:
        _extract(file, file.member, path, target)


def _extract(file: RemoteFile, member_name: str, path: Path, target: Path) -> None:
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if Path(n).name == member_name]
            if not names:
                raise ForkliftError(f"{file.url}: the archive holds no {member_name}")
            with archive.open(names[0]) as member, target.open("wb") as copy:
                shutil.copyfileobj(member, copy)
    except zipfile.BadZipFile as exc:
        path.unlink()  # unusable: fetched anew next time
        raise ForkliftError(f"{file.url}: not a zip archive ({exc}); the download was removed") from None


def _check_directory(model: Pretrained, folder: Path) -> None:
    """The model loads as forklift will load it: a Darknet cfg with weights that fit it to the byte and a name per
    class; a style network's state dict."""
    if model.kind is PretrainedKind.DARKNET:
        from forklift.nets.darknet import build_darknet

        (cfg,), (weights,), (names,) = (sorted(folder.glob(f"*{suffix}")) for suffix in (".cfg", ".weights", ".names"))
        classes = build_darknet(cfg, weights).classes
        if (labels := len(read_labels(names))) != classes:
            raise ForkliftError(f"{model.name}: {names.name} names {labels} classes, {cfg.name} has {classes}")
    else:
        from forklift.nets.style import load_style_net

        (state,) = folder.glob("*.pth")
        load_style_net(state)


def _check_state_dict(path: Path) -> None:
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # torch raises pickle, zip and runtime errors for files it cannot read
        raise ForkliftError(f"{path}: not a PyTorch state dict ({type(exc).__name__})") from exc
    if not isinstance(state, dict) or not all(isinstance(value, torch.Tensor) for value in state.values()):
        raise ForkliftError(f"{path}: not a PyTorch state dict (a mapping of tensor names to tensors)")


def _add_provenance(model: Pretrained, folder: Path) -> None:
    """forklift.json of a pulled directory: its task, and which catalogue model and files it was made from (beside
    what the export wrote there)."""
    config = folder / "forklift.json"
    data = json.loads(config.read_text(encoding="utf-8")) if config.is_file() else {"task": str(model.task)}
    data["pretrained"] = {"name": model.name, "files": [f.url for f in model.files]}
    config.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def cache_state(model: Pretrained, cache: Path) -> str:
    """'yes' when every file is cached, 'partial' when some are or one is on its way, else 'no'."""
    files = {f.url: f for f in model.files}.values()
    whole = [cached_path(f, cache).is_file() for f in files]
    if all(whole):
        return "yes"
    return "partial" if any(whole) or any(partial_path(f, cache).is_file() for f in files) else "no"
