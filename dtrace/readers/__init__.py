"""Trace readers: one module per format, each with a ``READER`` listed once in :func:`readers`.

A reader (the :class:`~dtrace.readers.base.Reader` protocol) is the module-level ``READER`` of its
format's module, with

- ``name``: the format's name as users write it (``--format``);
- ``guess_can_open(path, head) -> bool``: look at the content's first bytes (``head``, already
  gunzipped) and, only if that is not decisive, at the suffix; :func:`detect` asks the readers
  in the order of :func:`readers`;
- ``read(path, **options) -> TraceFile``: parse the file into one :class:`Part` per device it
  holds (a JAX or Nsight Systems file one per GPU), each with an event table following
  :mod:`dtrace.core.schema` and its side tables (``collectives``, ``memcpy`` and any further
  table of :data:`~dtrace.core.schema.SIDE_SCHEMAS`).

A reader always reads a local file: an input on an object store reaches it as the worker's
private copy (:mod:`dtrace.ingest.remote`). Readers know nothing about Dask, caching or ranks
across files: they report what the file says (``rank_hint``, ``rank_per_device``, ``meta``) and
:mod:`dtrace.ingest.ranks` decides.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..errors import InputError, OwnOutput, UsageError
from ._io import SQLITE_MAGIC, TIMELINE_GENERATOR, own_output, read_head

if TYPE_CHECKING:
    from .base import Part, Reader, TraceFile

__all__ = ["Part", "Reader", "TraceFile", "detect", "get_reader", "head_of", "readers", "refuse_own_output"]


def __getattr__(name: str) -> Any:
    """``Part``, ``Reader``, ``TraceFile`` from :mod:`.base`, imported when first asked for: input
    expansion (:mod:`dtrace.ingest.inputs`) imports this package for ``_io`` alone and must not pay
    for pyarrow (an up-to-date ``dtrace analyze`` imports neither pyarrow nor pandas)."""
    if name in ("Part", "Reader", "TraceFile"):
        from . import base  # noqa: PLC0415

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def detect(path: str | os.PathLike[str], head: bytes | None = None) -> Reader:
    """Pick the reader for ``path`` from its content (magic bytes first, suffix second);
    ``head``: its first bytes if already read (:func:`head_of`)."""
    path = os.fspath(path)
    head = head_of(path) if head is None else head
    regs = readers()
    for reader in regs.values():
        if reader.guess_can_open(path, head):
            return reader
    kind = "a SQLite database" if head.startswith(SQLITE_MAGIC) else "content"
    raise InputError(path, f"unknown trace format ({kind} not recognised); known formats: {', '.join(regs)}")


def head_of(path: str) -> bytes:
    """The first bytes of an input's content (gunzipped); an unreadable or empty file is an
    :class:`InputError`."""
    try:
        head = read_head(path)
    except OSError as exc:
        raise InputError(path, f"cannot read the file: {exc.strerror or exc}") from None
    if not head:
        raise InputError(path, "the file is empty or not a readable gzip stream")
    return head


def refuse_own_output(path: str, head: bytes, meta: dict[str, object] | None = None) -> None:
    """Raise :class:`~dtrace.errors.OwnOutput` if the input is one of dtrace's own outputs,
    told by its first bytes or, once read, by what its reader found (``meta["generator"]``: a
    timeline written before its marker came first)."""
    own = own_output(head)
    generator = (meta or {}).get("generator")
    if own is None and isinstance(generator, str) and TIMELINE_GENERATOR.match(generator):
        own = "a dtrace timeline"
    if own is not None:
        raise OwnOutput(path, f"is {own}, not a trace: skipped")


def get_reader(name: str) -> Reader:
    regs = readers()
    if name not in regs:
        raise UsageError(f"unknown format {name!r}; valid formats: {', '.join(regs)}")
    return regs[name]
