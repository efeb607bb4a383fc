"""`forklift train --nproc N`: the same command as N data-parallel ranks on this host, started by torchrun's
elastic agent (in this process, as `torchrun --standalone` would) so that a failure comes back as one line.

Each rank runs `python -m forklift.cli train ...` with the options as given, less `--nproc`; torchrun's
environment tells it its rank (`forklift.distributed.ranks`), and it pins itself to its own CPU set.
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Sequence

from forklift.errors import ForkliftError

NPROC_OPTION = "--nproc"


def without_option(argv: Sequence[str], option: str) -> list[str]:
    """`argv` less `option VALUE` and `option=VALUE` (wherever they are)."""
    kept: list[str] = []
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token == option:
            skip = True
        elif not token.startswith(option + "="):
            kept.append(token)
    return kept


def launch_local(argv: Sequence[str], nproc: int, *, max_restarts: int = 0) -> int:
    """Run `forklift ARGV` (a `train` command, `--nproc` left out) as `nproc` ranks; 0 when all succeed.
    A rank that fails ends the others; the error names it and its exit code (its own message is above)."""
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, launch_agent

    logging.getLogger("torch.distributed.elastic").setLevel(logging.ERROR)
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=str(uuid.uuid4()),
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=max_restarts,
        logs_specs=DefaultLogsSpecs(),
    )
    try:
        launch_agent(config, sys.executable, ["-m", "forklift.cli", *without_option(argv, NPROC_OPTION)])
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        raise ForkliftError(f"--nproc {nproc}: rank {rank} failed with exit code {failure.exitcode}; "
                            f"stopped the other ranks") from exc  # fmt: skip
    except SignalException:
        return 130
    return 0
