"""Trace readers: one module per format, registered in :data:`READERS`.

A reader is a module-level object with

- ``name``: the format's name as users write it (``--format``);
- ``guess_can_open(path, head) -> bool``: look at the content's first bytes (``head``, already
  gunzipped) and, only if that is not decisive, at the suffix;
- ``read(path, **options) -> TraceFile``: parse the whole file into one :class:`Part` per
  (device) it holds, each with an event table following :mod:`dtrace.schema`.

Readers know nothing about Dask, caching or ranks across files: they report what the file
says (``rank_hint``) and the planner decides.
"""

from __future__ import annotations

import os

from ..errors import InputError, UsageError
from ._io import SQLITE_MAGIC, read_head
from .base import Part, Reader, TraceFile

__all__ = ["Part", "Reader", "TraceFile", "detect", "get_reader", "readers"]


def _registry() -> dict[str, Reader]:
    from . import jax, kineto, nsys, nsys_csv, rocpd, rocprof  # noqa: PLC0415 - registration list, one line per format

    readers: list[Reader] = [
        rocprof.READER,  # before kineto, which takes any other JSON object
        rocpd.READER,  # before nsys, which takes any other SQLite database
        jax.READER,  # before kineto: JAX traces are Chrome-trace JSON too
        kineto.READER,
        nsys.READER,
        nsys_csv.READER,
    ]
    return {r.name: r for r in readers}


def readers() -> dict[str, Reader]:
    """All registered readers by name, in detection order."""
    return _registry()


def detect(path: str | os.PathLike[str]) -> Reader:
    """Pick the reader for ``path`` from its content (magic bytes first, suffix second)."""
    path = os.fspath(path)
    try:
        head = read_head(path)
    except OSError as exc:
        raise InputError(path, f"cannot read the file: {exc.strerror or exc}") from None
    if not head:
        raise InputError(path, "the file is empty or not a readable gzip stream")
    regs = readers()
    for reader in regs.values():
        if reader.guess_can_open(path, head):
            return reader
    kind = "a SQLite database" if head.startswith(SQLITE_MAGIC) else "content"
    raise InputError(path, f"unknown trace format ({kind} not recognised); known formats: {', '.join(regs)}")


def get_reader(name: str) -> Reader:
    regs = readers()
    if name not in regs:
        raise UsageError(f"unknown format {name!r}; valid formats: {', '.join(regs)}")
    return regs[name]
