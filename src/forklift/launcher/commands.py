"""The commands of a `forklift run` job: what each rank runs and the torchrun line for each host (the same job for a
cluster's scheduler is `forklift.deployment.scheduler`'s).

COMMAND is `forklift VERB ...` (run as `python -m forklift.cli VERB ...`, so every host uses the Python that
has forklift, not whichever `forklift` is first on its PATH), `python -m MODULE ...`, `python SCRIPT.py ...` or
`SCRIPT.py ...`. torchrun starts each host's ranks with c10d rendezvous on the first host.
"""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath

from forklift.deployment.scheduler import FRESH_STORE
from forklift.distributed import pinned
from forklift.distributed.places import Place
from forklift.errors import ForkliftError
from forklift.train.run_dir import last_checkpoint
from forklift.train.settings import PATH_OPTIONS

TrainOut = Callable[[list[str]], str | None]  # OUT of `forklift train ARGS`, wherever it stands among the options

RANK_PREFIX = "[rank${rank}] "  # torchrun's --log-line-prefix-template: each line of a rank starts with its rank


@dataclass(frozen=True)
class Job:
    """One job: the user's COMMAND, run by `nodes` torchrun agents meeting at `endpoint`."""

    command: tuple[str, ...]
    nodes: int
    endpoint: str  # address:port of the rendezvous, on the first host
    run_id: str
    max_restarts: int
    python: str  # the interpreter on every host (the same path, as mpirun assumes)
    workdir: str  # where the command runs on every host (relative paths in it are relative to this)

    @property
    def port(self) -> int:
        """The rendezvous port (`--port`)."""
        return int(self.endpoint.rpartition(":")[2])


def worker_args(command: tuple[str, ...]) -> list[str]:
    """What torchrun runs for each rank, after its interpreter: `-m forklift.cli ...`, `-m MODULE ...` or
    `SCRIPT.py ...`; anything else is refused in one line."""
    if not command:
        raise ForkliftError("forklift run: give the COMMAND after --, e.g. -- forklift train --data DATA ... OUT")
    first, rest = command[0], list(command[1:])
    if first.rsplit("/", 1)[-1] == "forklift":
        return ["-m", "forklift.cli", *rest]
    if first.rsplit("/", 1)[-1].startswith("python") and rest:
        if rest[0] == "-m" and len(rest) > 1:
            return rest
        if rest[0].endswith(".py"):
            return rest
    if first.endswith(".py"):
        return [first, *rest]
    raise ForkliftError(
        f"forklift run: COMMAND {shlex.join(command)!r}: give `forklift VERB ...`, `python -m MODULE ...`, "
        f"`python SCRIPT.py ...` or `SCRIPT.py ...`"
    )


def needed_paths(command: tuple[str, ...]) -> list[str]:
    """The files and folders COMMAND reads on every host: the values of a forklift verb's options that are
    training's path settings (`forklift.train.settings.PATH_OPTIONS`), or a script itself."""
    args = worker_args(command)
    if args[:2] == ["-m", "forklift.cli"]:
        paths = [value for option, value in itertools.pairwise(args) if option in PATH_OPTIONS]
        paths += [arg.split("=", 1)[1] for arg in args if arg.split("=", 1)[0] in PATH_OPTIONS and "=" in arg]
        return paths
    return [args[0]] if args[0] != "-m" else []


def rank_zero_paths(command: tuple[str, ...], train_out: TrainOut) -> list[str]:
    """What COMMAND reads on the host of rank 0 only: with `--resume`, OUT's last checkpoint, which rank 0 reads
    and sends to the others (`forklift.train.ranks_agree.shared_checkpoint`: the other hosts need not share OUT).
    `train_out` finds OUT in a train command's options (the command line's own parser knows them)."""
    args = worker_args(command)
    if args[:3] != ["-m", "forklift.cli", "train"] or "--resume" not in args:
        return []
    out = train_out(args[3:])
    return [] if out is None else [str(last_checkpoint(PurePosixPath(out)))]


def uses_cuda(command: tuple[str, ...]) -> bool:
    """Whether COMMAND trains on CUDA: `--device cuda[:N]` or `--device=cuda[:N]`, so each rank gets a GPU."""
    given = [value for option, value in itertools.pairwise(command) if option == "--device"]
    given += [arg.split("=", 1)[1] for arg in command if arg.startswith("--device=")]
    return any(value.startswith("cuda") for value in given)


def torchrun_args(job: Job, *, places: list[Place], local_addr: str, is_host: bool) -> list[str]:
    """One host's torchrun line: a rank for each of `places` (by local rank), each pinned to its place before
    COMMAND starts (`pinned`), c10d rendezvous at the job's endpoint (hosted by the first host), each rank's
    output line by line with its rank in front."""
    return [
        *FRESH_STORE, job.python, "-m", "torch.distributed.run",
        "--nnodes", str(job.nodes),
        "--nproc-per-node", str(len(places)),
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", job.endpoint,
        "--rdzv-id", job.run_id,
        "--rdzv-conf", f"is_host={'true' if is_host else 'false'}",
        "--local-addr", local_addr,
        "--max-restarts", str(job.max_restarts),
        "--tee", "3",
        "--log-line-prefix-template", RANK_PREFIX,
        *pinned.wrapped(places, worker_args(job.command)),
    ]  # fmt: skip
