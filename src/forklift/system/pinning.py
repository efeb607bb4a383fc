"""A process put on a CPU set: affinity, thread counts and NUMA memory, for serve workers and `forklift run`'s
ranks alike. Affinity comes first so that every thread an engine starts later inherits it."""

from __future__ import annotations

import os
from collections.abc import Collection

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def pin_process(cpus: Collection[int], *, threads: int, node: int | None) -> None:
    """This process (and what it starts or execs) on `cpus` (none: left as it is), with `threads` in the
    thread-count variables, preferring node `node`'s memory where the machine has several."""
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
    for name in THREAD_VARIABLES:
        os.environ[name] = str(threads)
    if node is not None:
        bind_memory(node)


def bind_memory(node: int) -> None:
    """Prefer memory of NUMA node `node` where the machine has several (libnuma, when present)."""
    import ctypes
    import ctypes.util

    library = ctypes.util.find_library("numa")
    if library is None:
        return
    numa = ctypes.CDLL(library)
    if numa.numa_available() >= 0 and numa.numa_max_node() > 0:
        numa.numa_set_preferred(node)
