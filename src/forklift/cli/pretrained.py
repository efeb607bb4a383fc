"""`forklift models pull` and `forklift models mirror`: pretrained models from their publishers or a site's
mirror, and a mirror laid out for a site without internet."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forklift.cli.common import add_json, verb_parser

if TYPE_CHECKING:
    from forklift.pretrained.catalogue import Pretrained

_MIRROR_HELP = "a mirror's base URL or folder (default: $FORKLIFT_MIRROR, else the publishers)"
_CATALOGUE_HELP = "a catalogue file in forklift's layout (default: $FORKLIFT_CATALOGUE, else forklift's own)"


def add_pull(actions: Any) -> None:
    pull = verb_parser(
        actions,
        "pull",
        "Fetch a pretrained model, check it against the catalogue's size and SHA-256 and by loading it, and write "
        "a ready model directory (Darknet YOLOs, style networks, torchvision's COCO detectors and segmenters, "
        "exported) or keep its weights file in the cache for `forklift train --weights` (ImageNet backbones, "
        "VGG16). Files are cached (FORKLIFT_CACHE, else "
        "~/.cache/forklift) and a cut download resumes. Without internet, FORKLIFT_MIRROR or --mirror names a "
        "mirror that `forklift models mirror` laid out.",
        "forklift models pull yolov3-tiny models/yolov3-tiny && forklift predict models/yolov3-tiny dog.jpg",
    )
    pull.add_argument("name", nargs="?", metavar="NAME", help="a model of the catalogue (--list shows them)")
    pull.add_argument("out", type=Path, nargs="?", metavar="OUT", help="the model directory to write (default: NAME)")
    pull.add_argument("--list", action="store_true", help="show the catalogue: sizes, and what is cached")
    pull.add_argument("--mirror", metavar="URL|DIR", help=_MIRROR_HELP)
    pull.add_argument("--catalogue", type=Path, metavar="FILE", help=_CATALOGUE_HELP)
    add_json(pull)
    pull.set_defaults(handler=run_pull)


def run_pull(args: argparse.Namespace) -> int:
    from forklift.errors import ForkliftError
    from forklift.pretrained.catalogue import catalogue_path, find, load_catalogue
    from forklift.pretrained.fetch import Source, cache_root
    from forklift.pretrained.pull import pull

    where = catalogue_path(args.catalogue)
    catalogue, cache = load_catalogue(where), cache_root()
    if args.list:
        if args.name is not None:
            raise ForkliftError("--list shows the whole catalogue; give it without NAME")
        return _show_catalogue(catalogue, cache, as_json=args.json)
    if args.name is None:
        raise ForkliftError("give NAME (a model of the catalogue), or --list to see them")
    pulled = pull(find(catalogue, args.name, where=where), cache=cache, source=Source.of(args.mirror), out=args.out)
    if args.json:
        print(json.dumps({"name": pulled.model.name, "kind": str(pulled.model.kind), "path": str(pulled.path)}))
    elif pulled.path.is_dir():
        print(f"{pulled.model.name}: model directory {pulled.path} (checked); forklift predict {pulled.path} IMAGE")
    else:
        print(f"{pulled.model.name}: {pulled.path} (checked); give it to forklift train --weights")
    return 0


def _show_catalogue(catalogue: dict[str, Pretrained], cache: Path, *, as_json: bool) -> int:
    from forklift.pretrained.pull import cache_state

    cached = {name: cache_state(model, cache) for name, model in catalogue.items()}
    if as_json:
        rows = [
            {"name": m.name, "kind": str(m.kind), "task": str(m.task), "directory": m.makes_directory,
             "bytes": m.approximate_bytes, "cached": cached[m.name], "about": m.about}
            for m in catalogue.values()
        ]  # fmt: skip
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(name) for name in catalogue)
    print(f"{'NAME':<{width}}  {'KIND':<7}  {'TASK':<8}  {'PULLS':<12}  {'MiB':>6}  {'CACHED':<7}  ABOUT")
    for m in catalogue.values():
        size = m.approximate_bytes
        mib = "?" if size is None else f"{size / 2**20:.1f}"
        pulls = "a model dir" if m.makes_directory else "weights file"
        print(f"{m.name:<{width}}  {m.kind:<7}  {m.task:<8}  {pulls:<12}  {mib:>6}  {cached[m.name]:<7}  {m.about}")
    print(f"cache: {cache / 'pretrained'}")
    return 0


def add_mirror(actions: Any) -> None:
    mirror = verb_parser(
        actions,
        "mirror",
        "Lay out a mirror for sites without internet: the files of the named models (default: every model in the "
        "cache), fetched where missing and checked again, under DIR/HOST/PATH of their URLs. Serve DIR with any "
        "web server and set FORKLIFT_MIRROR=http://SERVER/ there, or set FORKLIFT_MIRROR=DIR where it is mounted.",
        "forklift models mirror /media/usb/forklift-mirror yolov3-tiny candy",
    )
    mirror.add_argument("folder", type=Path, metavar="DIR")
    mirror.add_argument("names", nargs="*", metavar="NAME", help="models of the catalogue (default: the cached ones)")
    mirror.add_argument("--mirror", metavar="URL|DIR", help="fetch missing files from: " + _MIRROR_HELP)
    mirror.add_argument("--catalogue", type=Path, metavar="FILE", help=_CATALOGUE_HELP)
    mirror.set_defaults(handler=run_mirror)


def run_mirror(args: argparse.Namespace) -> int:
    from forklift.errors import ForkliftError
    from forklift.pretrained.catalogue import catalogue_path, find, load_catalogue
    from forklift.pretrained.fetch import Source, cache_root
    from forklift.pretrained.mirror import cached_models, lay_out_mirror

    where = catalogue_path(args.catalogue)
    catalogue, cache = load_catalogue(where), cache_root()
    models = [find(catalogue, name, where=where) for name in args.names] or cached_models(catalogue, cache)
    if not models:
        raise ForkliftError(f"{cache / 'pretrained'}: no model is cached yet; name the models to mirror")
    laid = lay_out_mirror(models, cache=cache, source=Source.of(args.mirror), folder=args.folder)
    print(
        f"{args.folder}: {laid.files} files ({laid.bytes / 2**20:.1f} MiB) of {len(models)} models, checked; serve it "
        f"and set FORKLIFT_MIRROR=http://SERVER/ (or FORKLIFT_MIRROR={args.folder.resolve()} where it is mounted)"
    )
    return 0
