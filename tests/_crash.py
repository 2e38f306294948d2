"""A Dask worker preload that kills the worker process at a marked input, as the OOM killer or
a crash in a native library would (``SIGKILL``: no exception, no clean-up).

Start workers with the Dask setting ``distributed.worker.preload`` = [:data:`PRELOAD`] (a
``LocalCluster`` started in the test process takes it from ``dask.config.set``). A worker then
dies when it

- reads an input ``X`` while ``X.crash-read`` exists (:func:`crash_reading`), or
- loads the cached events of ``X`` for analysis while ``X.crash-analysis`` exists
  (:func:`crash_analysing`).

Other inputs are read and analysed normally; importing this module changes nothing in the
importing process.
"""

from __future__ import annotations

import os
import signal

from dtrace.execution import tasks
from dtrace.readers import _io

PRELOAD = os.path.abspath(__file__)
_open_regular = _io.open_regular
_read_parts_tables = tasks.read_parts_tables


def crash_reading(path: str | os.PathLike[str]) -> None:
    open(os.fspath(path) + ".crash-read", "w").close()


def crash_analysing(path: str | os.PathLike[str]) -> None:
    open(os.fspath(path) + ".crash-analysis", "w").close()


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _crashing_open(path: str | os.PathLike[str]):
    if os.path.exists(os.fspath(path) + ".crash-read"):
        _die()
    return _open_regular(path)


def _crashing_read_parts_tables(specs):
    if any(os.path.exists(s.path + ".crash-analysis") for s in specs):
        _die()
    return _read_parts_tables(specs)


def dask_setup(worker: object) -> None:
    """Called by Dask when a worker loads this module as a preload (never in the test process)."""
    _io.open_regular = _crashing_open
    tasks.read_parts_tables = _crashing_read_parts_tables
