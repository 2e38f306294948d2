"""Open one (rank, device) of a trace, a set of traces or a results directory as a tree.

This is the single-trace quick path behind :func:`dtrace.tree` and ``dtrace tree``/``dtrace
ops``: no Dask, no results written. A results directory is resolved through its manifest
(the input of the wanted rank) and its ingest cache (Parquet, no JSON parse while fresh).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..analyses.batch import Batch, prepare_part
from ..api import make_options
from ..calltree import Tree
from ..core.records import InputRecord
from ..errors import InputError, UsageError
from ..ingest.inputs import expand_inputs
from ..ingest.ranks import part_spec, rank_from_filename, session_window
from ..ingest.remote import is_url
from ..options import Options

if TYPE_CHECKING:
    from ..ingest.cache import FileRecord


def is_results_dir(path: str) -> bool:
    """Whether ``path`` is a results folder: it holds a ``manifest.json`` (of any file type: a
    FIFO planted there is then refused by :func:`dtrace.load`, never read as traces)."""
    return os.path.isdir(path) and os.path.lexists(os.path.join(path, "manifest.json"))


def _from_file(
    path: str, rank: int | None, device: int | None, options: Options, want_rank: int | None = None
) -> Batch | None:
    """Read ``path`` and build the part of ``device``; None if the file is not ``want_rank``."""
    from ..readers import detect

    if is_url(path):  # a quick view of one object: read a local copy
        from ..ingest.remote import local_copy

        with local_copy(path) as local:
            tf = detect(local).read(local)
    else:
        tf = detect(path).read(path)
    file_rank = tf.rank_hint if tf.rank_hint is not None else rank_from_filename(path)
    if want_rank is not None and file_rank != want_rank:
        return None
    devices = [p.device for p in tf.parts]
    if device is None:
        part = tf.parts[0]
    else:
        match = [p for p in tf.parts if p.device == device]
        if not match:
            raise UsageError(f"{path}: no GPU device {device}; devices: {devices}")
        part = match[0]
    r = rank if rank is not None else (file_rank if file_rank is not None else 0)
    if tf.rank_per_device:
        r = r + part.local_index
    side = {k: t.to_pandas() for k, t in part.side_tables().items()}
    return prepare_part(
        part.events.to_pandas(),
        side.pop("collectives"),
        side.pop("memcpy"),
        side=side,
        rank=int(r),
        device=int(part.device),
        fmt=tf.format,
        options=options,
        base_ns=int(tf.meta.get("base_time_ns") or 0),
        session_ns=session_window(tf.meta),
    )


def _from_results(path: str, rank: int | None, device: int | None, options: Options, cache: str | None) -> Batch:
    """The part of ``rank``/``device`` from the ingest cache of the results ``path`` (``cache``,
    default ``OUT/cache``: never the folder the manifest names), else its trace file."""
    from ..ingest.cache import lookup
    from ..results import cache_of

    r, d, inp = _chosen_input(path, rank, device)
    reachable = is_url(inp.path) or os.path.exists(inp.path)
    cache_dir = cache or cache_of(path)
    rec = lookup(cache_dir, inp.path, verify=False)[0] if reachable else None
    if rec is not None and rec.fingerprint == inp.fingerprint:
        cached = _from_cached(rec, r, d, options)
        if cached is not None:
            return cached
    if not reachable:
        raise InputError(inp.path, f"the trace of rank {r} is gone and not in the cache {cache_dir}")
    found = _from_file(inp.path, r, d, options)
    assert found is not None
    return found


def _chosen_input(path: str, rank: int | None, device: int | None) -> tuple[int, int, InputRecord]:
    """``(rank, device, manifest entry)`` of the analysed input of ``rank`` (default: the
    lowest) and ``device`` (default: its lowest) in the results ``path``; a usage error if none."""
    from ..results import load

    m = load(path).record
    ok = [(r, d, i) for i in m.inputs if i.status == "ok" for r, d in i.ranks]
    if not ok:
        raise UsageError(f"{path}: the results list no analysed input")
    ranks = sorted({r for r, _, _ in ok})
    want = ranks[0] if rank is None else rank
    hits = [(r, d, i) for r, d, i in ok if r == want and (device is None or d == device)]
    if not hits:
        raise UsageError(
            f"{path}: no input for rank {want}"
            + (f" device {device}" if device is not None else "")
            + f"; ranks: {_span(ranks)}"
        )
    return sorted(hits, key=lambda h: h[1])[0]


def _from_cached(rec: FileRecord, r: int, d: int, options: Options) -> Batch | None:
    """The batch of device ``d``'s part of a cached record (as rank ``r``); None if it has none."""
    from ..ingest.cache import read_part_tables

    part = next((p for p in rec.parts if p.device == d), None)
    if part is None:
        return None
    tables = read_part_tables(part_spec(rec, part, r))
    side = {k: t.to_pandas() for k, t in tables.side.items()}
    return prepare_part(
        tables.events.to_pandas(),
        side.pop("collectives"),
        side.pop("memcpy"),
        side=side,
        rank=r,
        device=d,
        fmt=rec.format,
        options=options,
        base_ns=int((rec.meta or {}).get("base_time_ns") or 0),
        session_ns=session_window(rec.meta),
    )


def _span(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) if len(ranks) <= 8 else f"{ranks[0]}..{ranks[-1]} ({len(ranks)} ranks)"


def load_part(
    trace: Any,
    *,
    rank: int | None = None,
    device: int | None = None,
    options: Options | None = None,
    cache: str | None = None,
) -> Batch:
    """The :class:`~dtrace.analyses.batch.Batch` of one (rank, device) of ``trace``.

    ``trace`` is a trace file, a directory or glob of traces (``rank`` picks one; the file
    name's ``rank<N>`` is tried first, then each file's own rank), or a results directory (its
    events come from ``cache``, default ``OUT/cache``, else from the trace file).
    """
    opts = options or Options()
    path = os.fspath(trace)
    if is_results_dir(path):
        return _from_results(path, rank, device, opts, cache)
    files = expand_inputs(path)
    if len(files) == 1:
        part = _from_file(files[0], rank, device, opts)
        assert part is not None
        return part
    if rank is None:
        raise UsageError(f"{path} holds {len(files)} traces; pick one with rank=R (--rank R)")
    by_name = [f for f in files if rank_from_filename(f) == rank]
    for f in by_name + [f for f in files if f not in by_name]:
        part = _from_file(f, rank, device, opts, want_rank=rank)
        if part is not None:
            return part
    raise UsageError(f"no trace of rank {rank} among the {len(files)} traces in {path}")


def tree(
    trace: Any,
    rank: int | None = None,
    device: int | None = None,
    *,
    python: bool = False,
    cache: str | None = None,
    **options: Any,
) -> Tree:
    """The host op → GPU kernel tree of one (rank, device) of a trace.

    Parameters
    ----------
    trace
        A trace file, a directory or glob of traces, a results directory, or an already
        prepared :class:`~dtrace.analyses.batch.Batch`.
    rank, device
        Which rank (required when ``trace`` holds several) and which GPU (default: the first).
    python
        Also nest ``python_function`` events.
    cache
        For a results directory: its ingest cache (default ``OUT/cache``).
    **options
        Analysis settings (:class:`~dtrace.options.Options`), e.g. ``step=3``.

    Examples
    --------
    >>> t = dtrace.tree("rank0.json.gz")                          # doctest: +SKIP
    >>> uid = t.by_name("aten::layer_norm")[0]                     # doctest: +SKIP
    >>> print(t.format(uid))                                       # doctest: +SKIP
    └── Category: cpu_op, Name: aten::layer_norm
        └── Category: cpu_op, Name: aten::native_layer_norm
            ...
    >>> t.gpu_time(uid), t.ops().head()                            # doctest: +SKIP
    """
    if isinstance(trace, Batch):
        return Tree.from_batch(trace, python=python)
    part = load_part(trace, rank=rank, device=device, options=make_options(**options), cache=cache)
    return Tree.from_batch(part, python=python)


__all__ = ["tree", "load_part", "is_results_dir"]
