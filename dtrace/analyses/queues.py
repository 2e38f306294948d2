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

import numpy as np
import pandas as pd

from ..batch import Batch, kind_codes
from ..constants import KINDS
from ..groups import I64, count_by, first_match, max_by, min_by, quantile_by, sum_by, unique_first
from ..intervals import Axis, coverage, difference, union
from .launches import Linked, linked
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


class Series:
    """The change points of every stream's queue: ``group`` (stream code), ``t`` and ``v`` (the
    length from ``t`` on) sorted by (group, time), and ``dur`` (to the next point of the stream; 0
    for its last point)."""

    def __init__(self, lk: Linked) -> None:
        n = lk.rows.size
        t = np.concatenate([lk.launch, lk.start])
        d = np.concatenate([np.ones(n, I64), np.full(n, -1, I64)])
        gg = np.concatenate([lk.group, lk.group])
        order = np.lexsort((-d, t, gg))  # at equal times +1 (a launch) before -1 (a start)
        self.group, self.t = gg[order], t[order]
        self.v = np.cumsum(d[order])
        same = np.zeros(self.t.size, bool)
        same[:-1] = self.group[1:] == self.group[:-1]
        self.dur = np.zeros(self.t.size, I64)
        self.dur[:-1] = np.where(same[:-1], self.t[1:] - self.t[:-1], 0)
        self.last = ~same  # the last point of its stream


def queues(batch: Batch) -> pd.DataFrame:
    """The ``queues`` table (see the module docstring)."""
    lk = linked(batch)
    n = lk.n_groups
    if not n:
        return pd.DataFrame({c: [] for c in QUEUE_COLUMNS})
    s = Series(lk)
    g, v = s.group, s.v
    vf = v.astype(np.float64)
    points = count_by(g, n)
    pf = points.astype(np.float64)
    mean = sum_by(g, v, n) / pf
    var = (np.bincount(g, vf * vf, n) - pf * mean * mean) / np.maximum(pf - 1, 1)
    span = max_by(g, s.t, n, 0) - min_by(g, s.t, n, np.iinfo(np.int64).max)
    limit = int(batch.options.queue_limit)
    blocked = sum_by(g, np.where(v >= limit, s.dur, 0), n)
    starved = Starved(batch, lk, s).total(n)
    integral = np.bincount(g, vf * s.dur, n)
    _, first = unique_first(lk.group)
    spanf = span.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return pd.DataFrame(
            {
                **batch.keys(lk.part[first]),
                "stream": lk.stream[first],
                "launches": count_by(lk.group, n),
                "points": points,
                "length_mean": mean,
                "length_std": np.where(points > 1, np.sqrt(np.maximum(var, 0.0)), np.nan),
                "length_min": min_by(g, v, n, 0),
                "length_p25": quantile_by(g, v, n, 0.25),
                "length_median": quantile_by(g, v, n, 0.5),
                "length_p75": quantile_by(g, v, n, 0.75),
                "length_max": max_by(g, v, n, 0),
                "length_time_mean": np.where(span > 0, integral / spanf, np.nan),
                "span_ns": span,
                "limit": np.full(n, limit, I64),
                "blocked_ns": blocked,
                "starved_ns": starved,
                "blocked_share": np.where(span > 0, blocked / spanf, np.nan),
                "starved_share": np.where(span > 0, starved / spanf, np.nan),
            }
        )


def host_busy_rows(batch: Batch) -> np.ndarray:
    """The host events whose time counts as the host being busy (:data:`HOST_BUSY_KINDS`)."""
    h = batch.host
    if not len(h):
        return np.zeros(0, I64)
    return np.flatnonzero(np.isin(kind_codes(h["kind"]), [KINDS.index(k) for k in HOST_BUSY_KINDS]))


class Starved:
    """The starved time of every stream as pieces: ``group`` (stream code), ``start``, ``end`` of
    each interval with the queue empty and the stream idle, and the union of the host's busy time
    of every part on one axis (``host``, ``axis``), so that any piece's starved time is
    :meth:`within` it."""

    def __init__(self, batch: Batch, lk: Linked, s: Series) -> None:
        n = lk.n_groups
        _, first = unique_first(lk.group)
        self.gpart = lk.part[first]
        empty = np.zeros(0, I64)
        self.group, self.start, self.end = empty, empty, empty
        zero = (s.v == 0) & ~s.last & (s.dur > 0)
        rows = host_busy_rows(batch)
        if not zero.any() or not rows.size:
            return
        # the stream's GPU events (linked or not) as busy time, on the same axis as its queue
        gpu = batch.gpu
        code = first_match((lk.part[first], lk.stream[first]), (gpu["part"].to_numpy(I64), gpu["stream"].to_numpy(I64)))
        on = code >= 0
        bg = code[on]
        bs, be = gpu["start_ns"].to_numpy(I64)[on], gpu["end_ns"].to_numpy(I64)[on]
        zg = s.group[zero]
        zs, ze = s.t[zero], s.t[zero] + s.dur[zero]
        axis = Axis(np.concatenate([zg, zg, bg, bg]), np.concatenate([zs, ze, bs, be]), n)
        empty_u = union(axis.place(zs, zg), axis.place(ze, zg))
        busy = union(axis.place(bs, bg), axis.place(be, bg))
        cs, ce = difference(empty_u, busy)
        cg = axis.group_of(cs)
        self.group, self.start, self.end = cg, cs - axis.shift[cg], ce - axis.shift[cg]  # trace time
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
        return coverage(self.host, self.axis.place(hi, p)) - coverage(self.host, self.axis.place(lo, p))

    def total(self, n_groups: int) -> np.ndarray:
        """Starved time per stream."""
        if not self.group.size:
            return np.zeros(n_groups, I64)
        i = np.arange(self.group.size)
        return sum_by(self.group, self.within(i, self.start, self.end), n_groups)


def queue_timeline(batch: Batch) -> pd.DataFrame:
    """The ``queue_timeline`` table (see the module docstring)."""
    lk = linked(batch)
    n = lk.n_groups
    if not n:
        return pd.DataFrame({c: [] for c in TIMELINE_COLUMNS})
    s = Series(lk)
    bins = int(batch.options.timeline_bins)
    lo, width = window(batch)
    _, first = unique_first(lk.group)
    gpart = lk.part[first]
    # every (stream, bin) cell: its edges in trace time
    cell_g = np.repeat(np.arange(n, dtype=I64), bins)
    cell_b = np.tile(np.arange(bins, dtype=I64), n)
    a = lo[gpart][cell_g] + cell_b * width[gpart][cell_g]
    b = a + width[gpart][cell_g]
    # one line for all streams: the length is 0 between streams, so one step function serves all
    axis = Axis(np.concatenate([s.group, cell_g, cell_g]), np.concatenate([s.t, a, b]), n)
    pt = axis.place(s.t, s.group)
    pa, pb = axis.place(a, cell_g), axis.place(b, cell_g)
    prefix = np.concatenate(([0.0], np.cumsum(s.v.astype(np.float64) * s.dur)))

    def integral(x: np.ndarray) -> np.ndarray:
        j = np.searchsorted(pt, x, side="right") - 1
        jj = np.maximum(j, 0)
        return np.where(j >= 0, prefix[jj] + s.v[jj] * np.minimum(x - pt[jj], s.dur[jj]), 0.0)

    mean = (integral(pb) - integral(pa)) / (pb - pa)
    j = np.searchsorted(pt, pa, side="right") - 1
    carried = np.where(j >= 0, s.v[np.maximum(j, 0)], 0)
    carried = np.where((j >= 0) & (s.group[np.maximum(j, 0)] == cell_g), carried, 0)
    peak = carried.copy()
    pbin = np.clip((s.t - lo[gpart][s.group]) // width[gpart][s.group], 0, bins - 1)
    np.maximum.at(peak, s.group * bins + pbin, s.v)
    st = Starved(batch, lk, s)
    starved = np.zeros(n * bins, I64)
    if st.group.size:
        idx, sb, sa, sz = spread(st.group, gpart, st.start, st.end, lo, width, bins)
        np.add.at(starved, st.group[idx] * bins + sb, st.within(idx, sa, sz))
    keep = (peak > 0) | (starved > 0)
    cg, cb = cell_g[keep], cell_b[keep]
    part = gpart[cg]
    return pd.DataFrame(
        {
            **batch.keys(part),
            "stream": lk.stream[first][cg],
            "bin": cb,
            "lo_ns": a[keep],
            "hi_ns": b[keep],
            "step": bin_steps(batch, part, a[keep], b[keep]),
            "length_max": peak[keep],
            "length_mean": mean[keep],
            "starved_ns": starved[keep],
        }
    )
