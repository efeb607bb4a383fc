"""CoCoA across processes: the ranks of a torch.distributed job, each fitting its own rows.

Under ``torchrun`` (or ``forklift run -H host1,host2 python app.py``) every rank calls ``fit`` on its part of the
rows; the dual solver adds the ranks' changes to ``w`` with one all-reduce per epoch (CoCoA+, each part's
curvature scaled by the number of parts), so every rank ends with the same model. A job started without a
process group gets one here from torchrun's environment; a job with an NCCL group gets a gloo group beside it
for these CPU arrays.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
import torch
import torch.distributed as dist
from sklearn.base import BaseEstimator

from forklift.ml.svmlight import load_svmlight_file, read_as_one_based


class TorchPeers:
    """The ranks of the default process group; sums are all-reduces of float64 CPU tensors over gloo."""

    def __init__(self) -> None:
        self.group = _cpu_group()
        self.count = dist.get_world_size()
        self.rank = dist.get_rank()

    def sum(self, values: np.ndarray) -> np.ndarray:
        tensor = torch.from_numpy(np.array(values, dtype=np.float64, copy=True))
        dist.all_reduce(tensor, group=self.group)
        return tensor.numpy()

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (a small picklable object), in rank order, on every rank."""
        out: list[Any] = [None] * self.count
        dist.all_gather_object(out, value, group=self.group)
        return out


# A gloo group still referenced when the interpreter shuts down aborts the process about one exit in four ("terminate
# called without an active exception", measured with 2 ranks under torchrun): the groups forklift holds or starts go
# while the interpreter is alive.


def _cpu_group() -> Any:
    return dist.group.WORLD if dist.get_backend() == "gloo" else _gloo_beside()


@functools.cache
def _gloo_beside() -> Any:
    """A gloo group beside a job's NCCL one, made once (all the ranks make it together)."""
    return dist.new_group(backend="gloo")


atexit.register(_gloo_beside.cache_clear)


def _leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


PER_RANK_PARAMETERS = frozenset({"n_jobs", "device_ids"})  # a rank's own machine; not the model's


@contextlib.contextmanager
def agreed(model: BaseEstimator, peers: TorchPeers | None) -> Iterator[None]:
    """Run the checks of a fit's start, then agree across the ranks in one gather: a rank whose checks failed
    stops every rank (the others would wait for it in the next collective until gloo's timeout), and ranks given
    different parameters (a silently different model, or collectives of different sizes) are refused."""
    if peers is None:
        yield
        return
    failure: Exception | None = None
    try:
        yield
    except Exception as exc:  # told to every rank below, then raised here as it was
        failure = exc
    settings = {k: repr(v) for k, v in model.get_params(deep=False).items() if k not in PER_RANK_PARAMETERS}
    views = peers.gather((None if failure is None else str(failure), settings))
    if failure is not None:
        raise failure
    failed = [(rank, message) for rank, (message, _) in enumerate(views) if message is not None]
    if failed:
        rank, message = failed[0]
        raise ValueError(f"rank {rank} stopped the fit: {message}")
    differing = [name for name in settings if len({theirs[name] for _, theirs in views}) > 1]
    if differing:
        name = differing[0]
        values = ", ".join(f"{theirs[name]} on rank {rank}" for rank, (_, theirs) in enumerate(views))
        raise ValueError(
            f"{type(model).__name__}: the ranks were given different parameters: {name}={values}; every rank "
            "must fit the same model"
        )


def current_peers() -> TorchPeers | None:
    """The other ranks of this torch.distributed job (a group is started from torchrun's environment, and ended
    when the program exits), or None."""
    if not dist.is_available():
        return None
    if not dist.is_initialized() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")
        atexit.register(_leave)
    if dist.is_initialized() and dist.get_world_size() > 1:
        return TorchPeers()
    return None


def load_svmlight_part(
    path: str | os.PathLike[str],
    *,
    n_features: int | None = None,
    zero_based: bool | Literal["auto"] = "auto",
    dtype: type = np.float64,
) -> tuple[sp.csr_matrix, np.ndarray]:
    """This rank's rows of a libsvm file: the lines that start in its share of the bytes.

    Outside a distributed job that is the whole file. The ranks agree on what no part can tell alone: whether
    the file is 0- or 1-based (an index 0 in any part) and the number of features (the largest index in any
    part, unless ``n_features`` is given).
    """
    path = Path(path)
    if path.suffix in (".gz", ".bz2"):
        raise ValueError(f"{path}: a compressed file cannot be split between ranks by bytes; decompress it first")
    peers = current_peers()
    rank, count = (peers.rank, peers.count) if peers is not None else (0, 1)
    size = path.stat().st_size if path.is_file() else 0
    start, stop = size * rank // count, size * (rank + 1) // count
    unbounded = np.iinfo(np.int32).max  # a part cannot know the width: take it from the indices it holds
    X, y = load_svmlight_file(
        path, n_features=unbounded, zero_based=True, dtype=dtype, offset=start, length=max(stop - start, 1)
    )
    smallest = int(X.indices.min()) if X.nnz else unbounded
    widest = int(X.indices.max()) + 1 if X.nnz else 0
    if peers is not None:  # one gather: every rank learns the same, and refuses the same way
        parts = peers.gather((smallest, widest, X.shape[0]))
        smallest, widest = min(p[0] for p in parts), max(p[1] for p in parts)
        empty = [r for r, p in enumerate(parts) if p[2] == 0]
        if empty:
            raise ValueError(
                f"{path}: rank {empty[0]}'s share of the file holds no line ({sum(p[2] for p in parts)} in all for "
                f"{count} ranks): give each rank some rows"
            )
    shift = int(read_as_one_based(path, smallest, zero_based))
    width = n_features if n_features is not None else widest - shift
    if widest - shift > width:
        raise ValueError(f"{path}: an index beyond n_features={n_features}")
    X = sp.csr_matrix((X.data, X.indices - shift, X.indptr), shape=(X.shape[0], width))
    return X, y
