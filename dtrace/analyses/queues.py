"""Launch queues: the work launched on each stream and not yet started (see docs/semantics.md,
"Launch queues").

A stream's *queue length* goes up by one when a launch call starts (the call's start, as HTA
counts it) and down by one when the event it launched starts on the GPU; only linked GPU events
(:mod:`dtrace.analyses.launches`) count. The change points of every stream, sorted by time
(at equal times the launches before the starts, as HTA orders them), form a step function per
stream from its first launch to its last start. From it, per (rank, device, stream):

- ``queues``: the statistics of the length at the change points (HTA's
  ``get_queue_length_summary``: count, mean, std, min, quartiles, max), its time-weighted mean,
  the time spent at or above ``queue_limit`` (``blocked_ns``: the host blocks in the launch call
  when the queue is full; HTA's ``get_time_spent_blocked_on_full_queue``), and the time the
  stream was *starved*: its queue empty and nothing of it running while the host was busy (a host
  event of the part — an op, a runtime call, a Python function or an annotation such as
  ``ProfilerStep#N`` — was in progress): the GPU waited for work the host had not launched yet;
- ``queue_timeline``: the length over time in the part's bins (:mod:`dtrace.analyses.timeline`):
  its maximum and time-weighted mean per bin, and the starved time in the bin (bins where the
  queue stays empty and nothing starves are left out).

Notes on the algorithm: every stream's points are sorted together (group, time, +1/-1) and one
cumulative sum gives every length (each stream's launches and starts cancel, so the sum is back
at 0 where the next stream begins). Integrals for the means come from a prefix sum of
``length × duration``; the starved time is "queue empty" minus "stream busy" (interval difference
on one axis for all streams), intersected with the union of the part's host events.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd

from ..core.constants import KINDS
from ..options import CUDA_QUEUE_LIMIT
from ..vector.groups import I64, count_by, max_by, min_by, quantiles_by, sum_by
from ..vector.intervals import Axis, complement, coverage, intersect, union
from .batch import Batch, kind_codes
from .launches import Linked, Series, linked, series
from .timeline import bin_steps, spread, window

QUEUE_COLUMNS = [
    "rank",
    "device",
    "stream",
    "launches",
    "points",
    "length_mean",
    "length_std",
    "length_min",
    "length_p25",
    "length_median",
    "length_p75",
    "length_max",
    "length_time_mean",
    "span_ns",
    "limit",
    "blocked_ns",
    "starved_ns",
    "blocked_share",
    "starved_share",
]
TIMELINE_COLUMNS = [
    "rank",
    "device",
    "stream",
    "bin",
    "lo_ns",
    "hi_ns",
    "step",
    "length_max",
    "length_mean",
    "starved_ns",
]
HOST_BUSY_KINDS = ("cpu_op", "runtime", "python", "annotation")
"""Host events whose time counts as "the host is busy" for the starved time (not ``other``:
Kineto's whole-trace ``Trace`` span and profiler ``overhead`` events)."""


def queues(batch: Batch) -> pd.DataFrame:
    """The ``queues`` table (see the module docstring)."""
    lk = linked(batch)
    if not lk.rows.size:
        return pd.DataFrame({c: [] for c in QUEUE_COLUMNS})
    n = lk.n_groups
    s = series(batch)
    g, v = s.group, s.v
    vf = v.astype(np.float64)
    points = count_by(g, n)
    pf = np.maximum(points, 1).astype(np.float64)
    mean = sum_by(g, v, n) / pf
    var = (np.bincount(g, vf * vf, n) - pf * mean * mean) / np.maximum(pf - 1, 1)
    span = max_by(g, s.t, n, 0) - min_by(g, s.t, n, np.iinfo(np.int64).max)
    limit = queue_limits(batch, lk)
    blocked = sum_by(g, np.where(v >= limit[g], s.dur, 0), n)
    starved = starved_pieces(batch).total(n)
    integral = np.bincount(g, vf * s.dur, n)
    q0, q25, q50, q75, q100 = quantiles_by(g, v, n, (0.0, 0.25, 0.5, 0.75, 1.0))
    present = lk.streams()
    spanf = span.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        cols = {
            "launches": count_by(lk.group, n),
            "points": points,
            "length_mean": mean,
            "length_std": np.where(points > 1, np.sqrt(np.maximum(var, 0.0)), np.nan),
            "length_min": q0,
            "length_p25": q25,
            "length_median": q50,
            "length_p75": q75,
            "length_max": q100,
            "length_time_mean": np.where(span > 0, integral / spanf, np.nan),
            "span_ns": span,
            "limit": pd.arrays.IntegerArray(np.minimum(limit, _NONE), limit >= _NONE),
            "blocked_ns": blocked,
            "starved_ns": starved,
            "blocked_share": np.where(span > 0, blocked / spanf, np.nan),
            "starved_share": np.where(span > 0, starved / spanf, np.nan),
        }
    return pd.DataFrame(
        {**batch.keys(lk.gpart[present]), "stream": lk.gstream[present], **{k: c[present] for k, c in cols.items()}}
    )


_NONE = np.iinfo(np.int64).max  # no limit


def part_queue_limits(batch: Batch) -> np.ndarray:
    """The queue limit of every part (int64 max: none): ``queue_limit`` if set, else the
    runtime's — :data:`~dtrace.options.CUDA_QUEUE_LIMIT` in a CUDA part, none in a ROCm part
    (HIP's queues took 1,840 launches on MI300X without a launch call blocking)."""
    o = batch.options.queue_limit
    if o is not None:
        return np.full(batch.n_parts, int(o), I64)
    return np.where(batch.parts["rocm"].to_numpy(bool), _NONE, CUDA_QUEUE_LIMIT).astype(I64)


def queue_limits(batch: Batch, lk: Linked) -> np.ndarray:
    """The queue limit of every stream code (its part's, :func:`part_queue_limits`)."""
    return part_queue_limits(batch)[lk.gpart] if lk.n_groups else np.zeros(0, I64)


def starved_pieces(batch: Batch) -> "Starved":
    """The starved pieces of every stream of ``batch`` (computed once per batch)."""
    return batch.derived("queues.starved", lambda b: Starved(b, linked(b), series(b)))


def host_busy_rows(batch: Batch) -> np.ndarray:
    """The host events whose time counts as the host being busy (:data:`HOST_BUSY_KINDS`)."""
    h = batch.host
    if not len(h):
        return np.zeros(0, I64)
    return np.flatnonzero(np.isin(kind_codes(h["kind"]), [KINDS.index(k) for k in HOST_BUSY_KINDS]))


class Starved:
    """The starved time of every stream as pieces: ``group`` (stream code), ``start``, ``end``
    (trace time) of each interval with the queue empty and the stream idle, and the union of the
    host's busy time of every part on one axis (``host``, ``axis``), so that any piece's starved
    time is :meth:`within` it.

    The empty intervals come from the series; the stream's busy time is the union of its GPU
    events (linked or not) on the series' axis; "empty and idle" is their intersection with the
    complement of that union (:func:`~dtrace.vector.intervals.intersect`, no sort of the two together).
    """

    def __init__(self, batch: Batch, lk: Linked, s: Series) -> None:
        empty = np.zeros(0, I64)
        self.gpart = lk.gpart
        self.group, self.start, self.end = empty, empty, empty
        zero = (s.v == 0) & ~s.last & (s.dur > 0)
        rows = host_busy_rows(batch)
        if not zero.any() or not rows.size:
            return
        gpu = batch.gpu
        ax = s.axis
        busy = union(
            ax.place(gpu["start_ns"].to_numpy(I64), lk.gpu_group), ax.place(gpu["end_ns"].to_numpy(I64), lk.gpu_group)
        )
        idle = complement(busy, 0, int(busy[1][-1]) + 1 if busy[1].size else 1)
        cs, ce = intersect((s.pt[zero], s.pt[zero] + s.dur[zero]), idle)
        cg = ax.group_of(cs)
        self.group, self.start, self.end = cg, cs - ax.shift[cg], ce - ax.shift[cg]  # trace time
        # the part's host time: the union of its host events, every part on one axis
        h = batch.host
        hp = h["part"].to_numpy(I64)[rows]
        hs, he = h["start_ns"].to_numpy(I64)[rows], h["end_ns"].to_numpy(I64)[rows]
        sp = self.gpart[cg]  # the pieces' times are on the axis too: any time inside a piece places right
        self.axis = Axis(
            np.concatenate([hp, hp, sp, sp]), np.concatenate([hs, he, self.start, self.end]), batch.n_parts
        )
        self.host = union(self.axis.place(hs, hp), self.axis.place(he, hp))

    def within(self, piece: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Host-busy time of ``[max(a, start), min(b, end))`` for the pieces ``piece``."""
        p = self.gpart[self.group[piece]]
        lo = np.maximum(a, self.start[piece])
        hi = np.maximum(np.minimum(b, self.end[piece]), lo)
        return cast(
            np.ndarray, coverage(self.host, self.axis.place(hi, p)) - coverage(self.host, self.axis.place(lo, p))
        )

    def total(self, n_groups: int) -> np.ndarray:
        """Starved time per stream."""
        if not self.group.size:
            return np.zeros(n_groups, I64)
        i = np.arange(self.group.size)
        return sum_by(self.group, self.within(i, self.start, self.end), n_groups)


def queue_timeline(batch: Batch) -> pd.DataFrame:
    """The ``queue_timeline`` table (see the module docstring)."""
    lk = linked(batch)
    if not lk.rows.size:
        return pd.DataFrame({c: [] for c in TIMELINE_COLUMNS})
    s = series(batch)
    bins = int(batch.options.timeline_bins)
    lo, width = window(batch)
    present = lk.streams()
    gpart = lk.gpart
    # the bin edges of the streams with launches, in trace time and on the axis: a cell (stream,
    # bin) lies between two edges, and the step function is integrated once per edge
    edge_g = np.repeat(present, bins + 1)
    edge = lo[gpart[edge_g]] + np.tile(np.arange(bins + 1, dtype=I64), present.size) * width[gpart[edge_g]]
    pe = s.axis.place(edge, edge_g)
    cell_g = np.repeat(present, bins)
    cell_b = np.tile(np.arange(bins, dtype=I64), present.size)
    ca = np.arange(cell_g.size) + np.repeat(np.arange(present.size), bins)  # each cell's first edge
    # one step function serves every stream: the length is 0 between streams
    prefix = np.concatenate(([0.0], np.cumsum(s.v.astype(np.float64) * s.dur)))
    j = np.searchsorted(s.pt, pe, side="right") - 1
    jj = np.maximum(j, 0)
    integral = np.where(j >= 0, prefix[jj] + s.v[jj] * np.minimum(pe - s.pt[jj], s.dur[jj]), 0.0)
    mean = (integral[ca + 1] - integral[ca]) / (pe[ca + 1] - pe[ca])
    carried = np.where(j[ca] >= 0, s.v[jj[ca]], 0)  # 0 at another stream's last point
    a, b = edge[ca], edge[ca + 1]
    row = np.full(lk.n_groups, -1, I64)
    row[present] = np.arange(present.size) * bins  # the first cell of each stream
    peak = carried.copy()
    pbin = np.clip((s.t - lo[gpart[s.group]]) // width[gpart[s.group]], 0, bins - 1)
    np.maximum.at(peak, row[s.group] + pbin, s.v)
    st = starved_pieces(batch)
    starved = np.zeros(cell_g.size, I64)
    if st.group.size:
        idx, sb, sa, sz = spread(st.group, gpart, st.start, st.end, lo, width, bins)
        np.add.at(starved, row[st.group[idx]] + sb, st.within(idx, sa, sz))
    keep = (peak > 0) | (starved > 0)
    cg, cb = cell_g[keep], cell_b[keep]
    part = gpart[cg]
    return pd.DataFrame(
        {
            **batch.keys(part),
            "stream": lk.gstream[cg],
            "bin": cb,
            "lo_ns": a[keep],
            "hi_ns": b[keep],
            "step": bin_steps(batch, part, cb),
            "length_max": peak[keep],
            "length_mean": mean[keep],
            "starved_ns": starved[keep],
        }
    )
