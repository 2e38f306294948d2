"""The critical path itself: the intervals each step's walk went through (:func:`step_path`).

:func:`~dtrace.analyses.critical_path.step_bounds` only sums, per (part, step), what the path
waited on. :func:`step_path` runs the same walk with a
:class:`~dtrace.analyses.critical_path.PathLog` and returns the path as intervals in time order,
one row each: where the path was (``where``: ``host``, on the thread ``pid``/``tid``, or
``gpu``), from when to when, and what it waited on there (``kind``, one of
:data:`~dtrace.analyses.critical_path.CATEGORIES`):

- host time on a thread: ``kind`` ``host``; ``op`` the outermost host event running at the
  interval's end (the one whatever came next waited for; none between ops);
- a launch latency, ``hop`` ``launch``: from the launch call's end to its GPU event's start,
  ``host`` time on the launching thread; ``op`` the launch call's op, ``kernel`` the event launched;
- GPU time, cut exactly where what the GPU runs changes, as the breakdown splits it: ``compute``
  where a compute kernel runs, ``comm`` where only communication runs, ``memcpy`` where only
  memory operations run, ``other`` where the GPU is idle; ``kernel`` the last event of that sort
  to start before the interval's end (when it still runs in the interval);
- ``sync``: GPU time during which the host sat in a synchronisation; ``op`` the call's op;
- a release latency, ``hop`` ``release``: from the end of the GPU event a blocking call waited
  for (``kernel``) to the call's return (``op``), on the call's thread; ``sync``, or ``other``
  after a full launch queue or the step's last synchronisation.

Per chain the rows tile the step's span: the first starts at ``step_bounds.start_ns``, each ends
where the next starts, the last ends at ``start_ns + span_ns``, and the sums per ``kind`` are that
row's ``host_ns`` ... ``other_ns``. A hop's row is kept when it is 0 ns long (a kernel that starts
before its launch call returns): it records the hop's host and GPU events (``host_row``,
``gpu_row``: positions in ``batch.host`` and ``batch.gpu``, -1 none), which the timeline joins with
flow arrows. This is not a results table: ``dtrace timeline`` draws it for the steps it exports,
and the API returns it for a :class:`~dtrace.analyses.batch.Batch`.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from ..core.dtypes import empty_frame, missing_if_negative
from ..vector.groups import I64, lexsort_ints
from ..vector.intervals import inside
from .batch import Batch
from .critical_path import CATEGORIES, GpuSide, HostSide, Lookup, PathLog, walk, walk_setup

COLUMNS: dict[str, str] = {
    "rank": "int32",
    "device": "int32",
    "step": "Int64",
    "start_ns": "int64",
    "end_ns": "int64",
    "kind": "object",
    "where": "object",
    "pid": "int64",
    "tid": "int64",
    "hop": "object",
    "op": "object",
    "kernel": "object",
    "host_row": "int64",
    "gpu_row": "int64",
}
"""Columns and dtypes of :func:`step_path`."""

HOPS = ("", "launch", "release")
"""``hop`` values: none, a launch latency, a release latency."""

_HOST, _COMPUTE, _COMM, _MEMCPY, _SYNC, _OTHER = range(len(CATEGORIES))
_LAUNCH, _RELEASE = 1, 2
_FIELDS = ("hop_no", "chain", "start", "end", "kind", "thread", "hop", "op", "host_row", "gpu_row")


def step_path(
    batch: Batch, *, steps: Iterable[int] | None = None, window: tuple[int, int] | None = None
) -> pd.DataFrame:
    """The critical path of each step of each part of ``batch`` as intervals (see the module
    docstring; :data:`COLUMNS`), in (part, step, time) order.

    Parameters
    ----------
    batch
        The parts, as :func:`~dtrace.analyses.critical_path.step_bounds` reads them.
    steps
        Only these steps (a part without steps has none).
    window
        Only the steps whose span overlaps ``(lo, hi)`` ns on the parts' own clocks (each step's
        path whole: cut it to the window where needed).

    Examples
    --------
    >>> path = step_path(batch, steps=[12])                                   # doctest: +SKIP
    >>> path[["kind", "where", "start_ns", "end_ns", "op", "kernel"]]          # doctest: +SKIP
    """
    if not len(batch.gpu) and not len(batch.steps):
        return empty_frame(COLUMNS)
    host, gpu, ch = walk_setup(batch)
    keep = np.ones(ch["part"].size, bool)
    if steps is not None:
        keep &= np.isin(ch["step"], np.asarray(list(steps), I64))
    if window is not None:
        keep &= (ch["end"] >= int(window[0])) & (ch["t0"] <= int(window[1]))
    ch = {k: v[keep] for k, v in ch.items()}
    if not ch["part"].size:
        return empty_frame(COLUMNS)
    log = PathLog()
    walk(host, gpu, ch, log)
    rows = _rows(host, gpu, ch, log)
    return _frame(batch, host, ch, rows)


def _rows(host: HostSide, gpu: GpuSide, ch: dict[str, np.ndarray], log: PathLog) -> dict[str, np.ndarray]:
    """Every interval the walk recorded, as :data:`_FIELDS` arrays in (chain, time) order; empty
    intervals dropped but a hop's."""
    parts = [
        _host_rows(host, log.host),
        _launch_rows(host, gpu, log.launch),
        _gpu_rows(gpu, ch, log.gpu),
        _sync_rows(log.sync),
        _release_rows(host, log.release),
        _other_rows(log.other),
    ]
    rows = {f: np.concatenate([p[f] for p in parts]).astype(I64) for f in _FIELDS}
    keep = (rows["end"] > rows["start"]) | (rows["hop"] > 0)
    rows = {f: v[keep] for f, v in rows.items()}
    o = lexsort_ints((-rows["hop_no"], rows["end"], rows["start"], rows["chain"]))
    return {f: v[o] for f, v in rows.items()}


def _cat(chunks: list[tuple[np.ndarray, ...]], n: int) -> list[np.ndarray]:
    """The ``n`` arrays of a :class:`PathLog` list, each concatenated over its hops."""
    if not chunks:
        return [np.zeros(0, I64) for _ in range(n)]
    return [np.concatenate([c[i] for c in chunks]).astype(I64) for i in range(n)]


def _make(
    hop_no: np.ndarray, chain: np.ndarray, start: np.ndarray, end: np.ndarray, **kw: object
) -> dict[str, np.ndarray]:
    """One sort of rows: the given fields, the others -1 (``hop`` 0)."""
    out = {"hop_no": hop_no, "chain": chain, "start": start, "end": end}
    for f in _FIELDS[4:]:
        v = kw.get(f, 0 if f == "hop" else -1)
        out[f] = np.broadcast_to(np.asarray(v, I64), chain.shape)
    return out


def _take(values: np.ndarray, idx: np.ndarray, fill: int = -1) -> np.ndarray:
    """``values[idx]`` where ``idx >= 0``, else ``fill``."""
    idx = np.asarray(idx, I64)
    if not values.size:
        return np.full(idx.size, fill, I64)
    return np.where(idx >= 0, values[np.maximum(idx, 0)], fill).astype(I64)


def _host_rows(host: HostSide, chunks: list[tuple[np.ndarray, ...]]) -> dict[str, np.ndarray]:
    """Host time on a thread, cut where its outermost host event changes (its op; none between ops)."""
    h_no, c, thread, a, b = _cat(chunks, 5)
    q, x, y, blk = host_pieces(host, thread, a, b)
    return _make(
        h_no[q],
        c[q],
        x,
        y,
        kind=_HOST,
        thread=thread[q],
        op=_take(host.blk_name, blk),
        host_row=_take(host.blk_row, blk),
    )


def host_pieces(
    host: HostSide, thread: np.ndarray, a: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The host time ``[a, b]`` on threads ``thread`` cut at the starts and ends of the outermost
    host events (the blocks ``step_bounds`` names its ``host_op`` by): (query, start, end, block
    running there or -1) per piece, in (query, time) order."""
    n = a.size
    qs, xs = [np.arange(n, dtype=I64)] * 2, [a, b]
    if host.blk_thread.size and n:
        ends = Lookup(host.blk_thread, host.blk_end, int(host.blocks.lo.size))
        # the blocks overlapping [a, b]: sorted by (thread, start) and by (thread, end) alike
        i0 = ends.last(thread, a) + 1
        i0 = np.where(i0 == 0, np.searchsorted(host.blk_thread, thread, side="left"), i0)
        i1 = host.blocks.last(thread, b, strict=True) + 1
        owner, pos = _ranges(i0, np.maximum(i1, i0))
        for t in (host.blk_start, host.blk_end):
            qs.append(owner)
            xs.append(np.clip(t[pos], a[owner], b[owner]))
    q, x = np.concatenate(qs), np.concatenate(xs)
    o = lexsort_ints((x, q))
    q, x = q[o], x[o]
    ok = (q[1:] == q[:-1]) & (x[1:] > x[:-1])
    q, lo, hi = q[:-1][ok], x[:-1][ok], x[1:][ok]
    blk = host.blocks.last(thread[q], lo)
    blk = np.where((blk >= 0) & (_take(host.blk_end, blk) > lo), blk, -1)
    return q, lo, hi, blk


def _launch_rows(host: HostSide, gpu: GpuSide, chunks: list[tuple[np.ndarray, ...]]) -> dict[str, np.ndarray]:
    """Launch latencies: host time on the launching thread, with the launch call and its event."""
    h_no, c, a, b, k = _cat(chunks, 5)
    bd = gpu.bd
    return _make(
        h_no,
        c,
        a,
        b,
        kind=_HOST,
        thread=_take(bd.thread, k),
        hop=_LAUNCH,
        op=_take(host.blk_name, _take(bd.block, k)),
        host_row=_take(bd.launch, k),
        gpu_row=_take(bd.row, k),
    )


def _sync_rows(chunks: list[tuple[np.ndarray, ...]]) -> dict[str, np.ndarray]:
    """GPU time the host sat in a synchronisation (its op)."""
    h_no, c, a, b, name = _cat(chunks, 5)
    return _make(h_no, c, a, b, kind=_SYNC, op=name)


def _release_rows(host: HostSide, chunks: list[tuple[np.ndarray, ...]]) -> dict[str, np.ndarray]:
    """Release latencies on the blocking call's thread: sync, or other."""
    h_no, c, a, b, thread, x, is_sync = _cat(chunks, 7)
    row = _take(host.rel_row, x)
    return _make(
        h_no,
        c,
        a,
        b,
        kind=np.where(is_sync > 0, _SYNC, _OTHER),
        thread=thread,
        hop=_RELEASE,
        op=_take(host.blk_name, _take(host.blk, row)),
        host_row=row,
        gpu_row=_take(host.rel_gpu_row, x),
    )


def _other_rows(chunks: list[tuple[np.ndarray, ...]]) -> dict[str, np.ndarray]:
    """Time the walk could not follow (inconsistent input, the safety stop)."""
    h_no, c, a, b = _cat(chunks, 4)
    return _make(h_no, c, a, b, kind=_OTHER)


def _gpu_rows(gpu: GpuSide, ch: dict[str, np.ndarray], chunks: list[tuple[np.ndarray, ...]]) -> dict[str, np.ndarray]:
    """GPU time cut where what the GPU runs changes, each piece with the event of its kind that
    started last before its end."""
    h_no, c, u, w = _cat(chunks, 4)
    p = ch["part"][c]
    q, a, b, kind = gpu_pieces(gpu, p, u, w)
    return _make(h_no[q], c[q], a, b, kind=kind, gpu_row=_running(gpu, p[q], a, b, kind))


def gpu_pieces(
    gpu: GpuSide, p: np.ndarray, u: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The GPU time ``[u, w]`` of parts ``p``, cut where what the GPU runs changes: (query,
    start, end, kind) per piece, in (query, time) order, adjacent pieces of one kind merged. The
    sums per kind are what the walk's split counts: ``compute`` where a compute event runs,
    ``comm`` where only communication runs, ``memcpy`` where only other GPU events run, ``other``
    where none runs (outside the part's GPU span too). Every boundary of the three unions the split
    measures with (compute, compute or comm, all) inside the interval is a cut."""
    axis, cov = gpu.axis, gpu.cov
    n = p.size
    lo, hi = gpu.lo[p], gpu.hi[p]
    cu, cw = np.clip(u, lo, hi), np.clip(w, lo, hi)
    pu, pw = axis.place(cu, p), axis.place(cw, p)
    qs, xs = [np.arange(n, dtype=I64)] * 2, [pu, pw]
    for bounds in (b for seg in cov for b in seg):
        owner, pos = _ranges(np.searchsorted(bounds, pu, side="right"), np.searchsorted(bounds, pw, side="left"))
        qs.append(owner)
        xs.append(bounds[pos])
    q, x = np.concatenate(qs), np.concatenate(xs)
    o = lexsort_ints((x, q))
    q, x = q[o], x[o]
    ok = (q[1:] == q[:-1]) & (x[1:] > x[:-1])
    q, a, b = q[:-1][ok], x[:-1][ok], x[1:][ok]
    c, cm, al = (inside(seg, a) for seg in cov)
    kind = np.where(c, _COMPUTE, np.where(cm, _COMM, np.where(al, _MEMCPY, _OTHER)))
    shift = axis.shift[p[q]]
    # idle time outside the part's GPU span: before its first and after its last event
    ar = np.arange(n, dtype=I64)
    q = np.r_[q, ar, ar]
    a = np.r_[a - shift, u, np.maximum(cw, u)]
    b = np.r_[b - shift, np.minimum(cu, w), w]
    kind = np.r_[kind, np.full(2 * n, _OTHER, I64)]
    ok = b > a
    q, a, b, kind = q[ok], a[ok], b[ok], kind[ok]
    o = lexsort_ints((a, q))
    q, a, b, kind = q[o], a[o], b[o], kind[o]
    new = np.r_[True, (q[1:] != q[:-1]) | (kind[1:] != kind[:-1]) | (a[1:] != b[:-1])] if q.size else np.zeros(0, bool)
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, q.size - 1].astype(I64) if first.size else first
    return q[first], a[first], b[last], kind[first].astype(I64)


def _ranges(i0: np.ndarray, i1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every position of ``[i0, i1)`` per query: (query, position)."""
    cnt = np.maximum(i1 - i0, 0).astype(I64)
    owner = np.repeat(np.arange(i0.size, dtype=I64), cnt)
    pos = i0[owner] + (np.arange(owner.size, dtype=I64) - np.repeat(np.cumsum(cnt) - cnt, cnt))
    return owner, pos.astype(I64)


def _running(gpu: GpuSide, p: np.ndarray, a: np.ndarray, b: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """Per GPU piece, the event of its kind (compute, comm, memcpy) that started last before the
    piece's end, when it ends after the piece's start (-1 otherwise, and for idle pieces)."""
    out = np.full(p.size, -1, I64)
    g_kind, g_part, g_start, g_end = gpu.kind, gpu.part, gpu.start, gpu.end
    n_parts = int(gpu.lo.size)
    for k in (_COMPUTE, _COMM, _MEMCPY):
        sel, ev = np.flatnonzero(kind == k), np.flatnonzero(g_kind == k)
        if not sel.size or not ev.size:
            continue
        lk = Lookup(g_part[ev], g_start[ev], n_parts)
        row = _take(ev[lk.order], lk.last(p[sel], b[sel], strict=True))
        out[sel] = np.where(_take(g_end, row, np.iinfo(I64).min) > a[sel], row, -1)
    return out


def _frame(batch: Batch, host: HostSide, ch: dict[str, np.ndarray], rows: dict[str, np.ndarray]) -> pd.DataFrame:
    """The rows as a :data:`COLUMNS` frame."""
    c, thread = rows["chain"], rows["thread"]
    h = batch.host
    n_threads = int(host.thread.max(initial=-1)) + 1
    pid_of, tid_of = np.full(n_threads + 1, -1, I64), np.full(n_threads + 1, -1, I64)
    if len(h):
        pid_of[host.thread] = h["pid"].to_numpy(I64)
        tid_of[host.thread] = h["tid"].to_numpy(I64)
    on_host = thread >= 0
    th = np.where(on_host, thread, n_threads)
    return pd.DataFrame(
        {
            **batch.keys(ch["part"][c]),
            "step": missing_if_negative(ch["step"][c]),
            "start_ns": rows["start"],
            "end_ns": rows["end"],
            "kind": np.asarray(CATEGORIES, dtype=object)[rows["kind"]],
            "where": np.where(on_host, "host", "gpu").astype(object),
            "pid": pid_of[th],
            "tid": tid_of[th],
            "hop": np.asarray(HOPS, dtype=object)[rows["hop"]],
            "op": _names(host.name_lab, rows["op"]),
            "kernel": _gpu_names(batch.gpu, rows["gpu_row"]),
            "host_row": rows["host_row"],
            "gpu_row": rows["gpu_row"],
        }
    )


def _names(labels: np.ndarray, code: np.ndarray) -> np.ndarray:
    """``labels[code]`` as text, ``""`` where the code is -1."""
    out = np.full(code.size, "", dtype=object)
    ok = code >= 0
    out[ok] = np.asarray(labels, dtype=object)[code[ok]].astype(str)
    return out


def _gpu_names(g: pd.DataFrame, row: np.ndarray) -> np.ndarray:
    """The names of the GPU events at ``row`` (``""`` for -1), reading only those rows."""
    out = np.full(row.size, "", dtype=object)
    ok = row >= 0
    if ok.any():
        out[ok] = g["name"].iloc[row[ok]].astype(str).to_numpy(object)
    return out
