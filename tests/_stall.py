"""A Dask worker preload that makes reading one input hang: simulates a stuck file system.

Start workers with ``DASK_DISTRIBUTED__WORKER__PRELOAD`` set to :data:`PRELOAD` (see
:func:`preload_env`). A worker that opens an input ``X`` while ``X.stall`` exists waits until
``X.stall`` is removed (:func:`release`) and then fails that read with ``EIO``, as an I/O error
would: the input gets an error and is never cached. Inputs without a marker read normally;
importing this module changes nothing in the importing process.
(Inputs that are not regular files, such as FIFOs, are refused before opening, so they cannot
stand in for a stuck read.)
"""

from __future__ import annotations

import errno
import os
import time

from dtrace.readers import _io

PRELOAD = os.path.abspath(__file__)
_open_regular = _io.open_regular


def preload_env() -> dict[str, str]:
    """The environment variable that makes Dask workers load this module."""
    return {"DASK_DISTRIBUTED__WORKER__PRELOAD": PRELOAD}  # a plain path: no quotes for sbatch --export


def stall(path: str | os.PathLike[str]) -> str:
    """Make reads of ``path`` hang until :func:`release`; returns the marker's path."""
    marker = os.fspath(path) + ".stall"
    open(marker, "w").close()
    return marker


def release(path: str | os.PathLike[str]) -> None:
    """Let the reads of ``path`` that hang fail (and later reads proceed)."""
    try:
        os.unlink(os.fspath(path) + ".stall")
    except FileNotFoundError:
        pass


def _stalling_open(path: str | os.PathLike[str]):
    marker = os.fspath(path) + ".stall"
    if os.path.exists(marker):
        while os.path.exists(marker):
            time.sleep(0.05)
        raise OSError(errno.EIO, "the read was stalled and then released", os.fspath(path))
    return _open_regular(path)


def dask_setup(worker: object) -> None:
    """Called by Dask when a worker loads this module as a preload (never in the test process)."""
    _io.open_regular = _stalling_open
