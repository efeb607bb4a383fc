"""Every rank of a `forklift run` job where the printed layout puts it, whatever COMMAND is: torchrun runs
`python -m forklift.distributed.pinned PLACES ARGS...` for each rank, where PLACES are the host's places by local
rank (`format_place`, joined by `/`). The rank takes the place of its LOCAL_RANK, pins itself to those CPUs, sets
the thread-count variables to their number, prefers that NUMA node's memory (as a serve worker does), and execs
`python -u ARGS...`: CPU affinity, memory policy and environment all carry over the exec.

The place is also left in PLACE_VARIABLE, from which a `forklift train` rank takes it (`ranks.start`) instead of
laying out again: pinned, it would see only its own CPUs and choose differently.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from forklift.distributed.places import PLACE_VARIABLE, Place, format_place, parse_place
from forklift.errors import ForkliftError

MODULE = "forklift.distributed.pinned"
SEPARATOR = "/"  # between places: CPU lists hold commas


def wrapped(places: list[Place], args: list[str]) -> list[str]:
    """What torchrun runs (after its interpreter) so that each rank of a host takes its place of `places` and
    then runs `args` (`-m MODULE ...` or `SCRIPT.py ...`)."""
    return ["-m", MODULE, SEPARATOR.join(map(format_place, places)), *args]


def pin(place: Place) -> None:
    """This process (and what it execs or starts) on the place's CPUs, with as many threads, preferring the
    memory of its NUMA node where the machine has several."""
    from forklift.system.pinning import pin_process

    try:
        pin_process(place.cpus, threads=len(place.cpus), node=place.node)
    except OSError as exc:
        raise ForkliftError(f"{MODULE}: place {format_place(place)}: cannot run on its CPUs ({exc.strerror})") from exc
    os.environ[PLACE_VARIABLE] = format_place(place)


def local_place(text: str) -> Place:
    """This rank's place of the host's PLACES, by torchrun's LOCAL_RANK (checked against LOCAL_WORLD_SIZE)."""
    texts = text.split(SEPARATOR)
    local_rank, local_world = os.environ.get("LOCAL_RANK", ""), os.environ.get("LOCAL_WORLD_SIZE", "")
    if not (local_rank.isdigit() and local_world.isdigit()):
        raise ForkliftError(f"{MODULE}: LOCAL_RANK and LOCAL_WORLD_SIZE are not set (it runs under torchrun)")
    if int(local_world) != len(texts):
        raise ForkliftError(f"{MODULE} {text}: {len(texts)} places for the {local_world} ranks torchrun started here")
    return parse_place(texts[int(local_rank)], f"{MODULE} {text}")


def main(argv: list[str]) -> NoReturn:
    """Take this rank's place of PLACES (`argv[0]`), then become `python -u ARGS...` (the rest)."""
    if len(argv) < 2:
        raise ForkliftError(f"{MODULE}: give PLACES and what to run, e.g. 0-1@0/2-3@0 -m forklift.cli train ...")
    pin(local_place(argv[0]))
    os.execv(sys.executable, [sys.executable, "-u", *argv[1:]])


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except ForkliftError as exc:
        print(f"forklift: error: {exc}", file=sys.stderr)
        sys.exit(2)
