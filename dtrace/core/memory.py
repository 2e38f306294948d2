"""How dtrace's processes allocate: Arrow's pool and the C heap.

Arrow's default pool (mimalloc) keeps what a task freed, so the analyses of a partition ran on top
of what reading its events had left behind; glibc keeps a task's freed pages for the next
allocation. dtrace therefore makes Arrow's jemalloc pool the default while it works
(:func:`use_jemalloc`; in the workers of the clusters it starts through :func:`worker_env`), and
gives the C heap's free pages back after each ingest task (:func:`release_memory`). The cold run
of a 303 MB Kineto trace peaks at ~440 MB instead of 500-550 MB, and loading the cached events
takes half the time (bench/RESULTS.md, "Memory, many ranks and the 32 × 300 MB job"). A pool
the user chose with ``ARROW_DEFAULT_MEMORY_POOL`` is left alone.
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any, Callable

ARROW_POOL = "ARROW_DEFAULT_MEMORY_POOL"
_USER_POOL = os.environ.get(ARROW_POOL)  # read before any cluster: a nanny copies its workers' settings here


def _jemalloc() -> Any:
    """Arrow's jemalloc pool, or None (a pyarrow built without it)."""
    import pyarrow

    try:
        return pyarrow.jemalloc_memory_pool()
    except NotImplementedError:
        return None


def worker_env() -> dict[str, str]:
    """What the workers of a cluster dtrace starts find in their environment: Arrow's jemalloc
    pool, unless the user chose a pool or this pyarrow lacks jemalloc."""
    if _USER_POOL is not None or _jemalloc() is None:
        return {}
    return {ARROW_POOL: "jemalloc"}


def use_jemalloc() -> Any:
    """Make Arrow's jemalloc pool the process's default; the pool it replaced, to put back with
    :func:`restore_pool` (None: nothing changed — the user chose a pool, or there is no jemalloc)."""
    pool = None if _USER_POOL is not None else _jemalloc()
    if pool is None:
        return None
    import pyarrow

    old = pyarrow.default_memory_pool()
    pyarrow.set_memory_pool(pool)
    return old


def restore_pool(old: Any) -> None:
    """Put back the pool :func:`use_jemalloc` replaced (nothing for None)."""
    if old is not None:
        import pyarrow

        pyarrow.set_memory_pool(old)


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None (another C library)."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def release_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). Called at the end of each ingest task, in the worker or in-process: reading a
    300 MB trace leaves ~50 MB of free pages there that the analyses would otherwise run on top of."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
