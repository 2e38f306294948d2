"""How dtrace's processes allocate: Arrow's pool and the C heap.

Arrow's default pool (mimalloc) keeps what a task freed, so the analyses of a partition ran on top
of what reading its events had left behind; glibc keeps a task's freed pages for the next
allocation. dtrace therefore makes Arrow's jemalloc pool the default while it works
(:func:`use_jemalloc`; in the workers of the clusters it starts through :func:`worker_env`), and
gives the C heap's free pages back after each ingest task (:func:`release_memory`). The cold run
of a 303 MB Kineto trace peaks at ~440 MB instead of 500-550 MB, and loading the cached events
takes half the time (bench/RESULTS.md, "Memory, many ranks and the 32 × 300 MB job"). A pool
the user chose with ``ARROW_DEFAULT_MEMORY_POOL`` is left alone.

The processes that only run dtrace's tasks, one after another (the workers of the clusters dtrace
starts, and the ``dtrace`` command's own process), allocate the C heap with
:data:`MALLOC_SETTINGS` instead: every array a task frees stays in the heap for the next task. With
glibc's defaults each large array is a fresh mapping (its threshold adapts only up to 32 MB, and
the heap is trimmed above twice that), which the system zero-fills page by page every time: a
1.07 M-event rank faulted in ~36,000 pages to read and ~14,000 more per analysis, 12 % of the
reading's CPU, and the trim after each ingest task gave them all back only to fault them in again
(with the settings: ~2,000 and ~1,300).
Such a process never trims (:func:`release_memory` does nothing there): its peak is the largest
task's, as before. The user's own ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` are left alone.
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any, Callable

ARROW_POOL = "ARROW_DEFAULT_MEMORY_POOL"
_USER_POOL = os.environ.get(ARROW_POOL)  # read before any cluster: a nanny copies its workers' settings here
MALLOC_SETTINGS = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
"""glibc's heap settings of the processes that run dtrace's tasks (see the module docstring): arrays
up to 32 MB come from the heap (the most glibc accepts before 2.35; 256 MB measured no better), and
up to 1 GB of free heap is kept."""
WORKER_ARENAS = {"MALLOC_ARENA_MAX": "1"}
"""A worker runs its tasks in a thread of its own, whose heap (an arena of at most 64 MB heaps)
would give back what it frees whatever :data:`MALLOC_SETTINGS` say: a worker with one task thread
(as dtrace starts them) shares the main heap between its threads (the others allocate little)."""
_USER_MALLOC = any(k in os.environ for k in [*MALLOC_SETTINGS, *WORKER_ARENAS])  # the user's: left alone
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
_tuned = False  # this process got MALLOC_SETTINGS from tune_malloc
# a process started with them (a worker dtrace started): read once, as glibc did at the start (a
# local cluster's nannies later copy the workers' settings into the client's environment)
_STARTED_WITH_SETTINGS = all(os.environ.get(k) == v for k, v in MALLOC_SETTINGS.items())


def _jemalloc() -> Any:
    """Arrow's jemalloc pool, or None (a pyarrow built without it)."""
    import pyarrow

    try:
        return pyarrow.jemalloc_memory_pool()
    except NotImplementedError:
        return None


def worker_env(threads: int = 1) -> dict[str, str]:
    """What the workers of a cluster dtrace starts find in their environment: Arrow's jemalloc
    pool, unless the user chose a pool or this pyarrow lacks jemalloc; and glibc's
    :data:`MALLOC_SETTINGS` (with :data:`WORKER_ARENAS` for workers of one task thread), unless
    the user set their own."""
    env = {} if _USER_MALLOC else {**MALLOC_SETTINGS, **(WORKER_ARENAS if threads == 1 else {})}
    if _USER_POOL is None and _jemalloc() is not None:
        env[ARROW_POOL] = "jemalloc"
    return env


def tune_malloc() -> bool:
    """Give this process :data:`MALLOC_SETTINGS` (glibc's ``mallopt``) unless the user set their own:
    the ``dtrace`` command's process, which runs a small job's tasks itself. Whether it did (False
    elsewhere than glibc). Never for a user's own process (:func:`dtrace.analyze` leaves its
    heap alone)."""
    global _tuned
    mallopt = _libc_function("mallopt")
    if _USER_MALLOC or mallopt is None:
        return False
    _tuned = bool(mallopt(_M_MMAP_THRESHOLD, int(MALLOC_SETTINGS["MALLOC_MMAP_THRESHOLD_"]))) and bool(
        mallopt(_M_TRIM_THRESHOLD, int(MALLOC_SETTINGS["MALLOC_TRIM_THRESHOLD_"]))
    )
    return _tuned


def keeps_free_pages() -> bool:
    """Whether this process runs with :data:`MALLOC_SETTINGS` (from :func:`tune_malloc`, or in its
    environment since it started: a worker dtrace started)."""
    return _tuned or _STARTED_WITH_SETTINGS


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


@functools.lru_cache(maxsize=None)
def _libc_function(name: str) -> Callable[..., int] | None:
    """glibc's function ``name`` (``malloc_trim``, ``mallopt``), or None (another C library)."""
    try:
        func: Callable[..., int] = getattr(ctypes.CDLL("libc.so.6"), name)
    except (OSError, AttributeError):
        return None
    return func


def release_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). Called at the end of each ingest task, in the worker or in-process: reading a
    300 MB trace leaves ~50 MB of free pages there that the analyses would otherwise run on top of.
    Nothing in a process that :func:`keeps_free_pages`: its next task allocates from them."""
    trim = _libc_function("malloc_trim")
    if trim is not None and not keeps_free_pages():
        trim(0)
