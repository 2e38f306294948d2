"""Annotation ranges as windows (NVTX ranges, ``record_function`` ranges): the ``nvtx_ranges`` table.

A host range (kind ``annotation``: nsys NVTX push/pop and start/end ranges, Kineto
``user_annotation``) **owns the GPU work launched inside it**: the GPU events whose launch call
ran on the range's thread (same pid and tid) between the range's start and end. GPU events
whose launch is unknown are owned by time instead (their own start inside the range, any
thread). A range's *projection* onto the GPU is the span of its owned events, first start to
last end, as ``nsys stats -r nvtx_gpu_proj_trace`` projects NVTX ranges.

One row per (rank, device, range name), summed over the name's instances:

- ``count`` instances, ``with_gpu`` instances that own GPU work, ``range_ns`` host time;
- ``proj_ns`` (sum of projected spans) with ``proj_mean_ns``/``proj_min_ns``/``proj_max_ns``
  over the instances with GPU work;
- ``gpu_events`` owned, ``kernel_ns`` their summed durations, ``non_comm_kernel_ns`` the
  summed durations of owned kernels that are not communication (the "non-NCCL kernel time"
  of the GPU Performance Analyser);
- the breakdown columns of :mod:`dtrace.analyses.breakdown` for the device's GPU timeline
  inside each projected window (all streams, whoever launched the work), summed.

Notes on the algorithm (vectorised over all parts and threads at once): each launching thread
(part, pid, tid) gets its own stretch of one :class:`~dtrace.vector.intervals.Axis`, so owned events
are contiguous once events are sorted by their launch time on that axis, and each range's owned
set is an index interval found with ``searchsorted``; counts and durations come from prefix
sums, the projected span from ``minimum.reduceat``/``maximum.reduceat`` over the interleaved
interval bounds. The per-window breakdown places each part's GPU timeline and windows on an
axis of parts and uses the coverage function of the three exposed sets (compute,
comm − compute, memory − compute − comm): ``|X ∩ [a, b]| = cov_X(b) − cov_X(a)``.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd

from ..vector.groups import I64, lexsort_ints, shared_codes, string_rank
from ..vector.intervals import Axis, Union, coverage, difference, merge, union
from .batch import Batch, launch_rows
from .breakdown import VALUE_COLUMNS, category_masks

RANGE_COLUMNS = [
    "rank",
    "device",
    "name",
    "count",
    "with_gpu",
    "range_ns",
    "proj_ns",
    "proj_mean_ns",
    "proj_min_ns",
    "proj_max_ns",
    "gpu_events",
    "kernel_ns",
    "non_comm_kernel_ns",
    *VALUE_COLUMNS,
]
_BIG, _SMALL = np.iinfo(np.int64).max, np.iinfo(np.int64).min


def window_breakdown(
    start: np.ndarray, end: np.ndarray, category: np.ndarray, w_start: np.ndarray, w_end: np.ndarray
) -> dict[str, np.ndarray]:
    """The breakdown values of the GPU timeline inside each window ``[w_start, w_end)``.

    Examples
    --------
    >>> v = window_breakdown(np.array([0, 5, 20]), np.array([10, 15, 30]),
    ...                      np.array(["compute", "comm", "memcpy"]), np.array([0, 8]), np.array([30, 22]))
    >>> v["computation_ns"].tolist(), v["exposed_comm_ns"].tolist(), v["idle_ns"].tolist()
    ([10, 2], [5, 5], [5, 5])
    """
    is_comp, is_comm, is_mem = category_masks(category)
    comp = union(start[is_comp], end[is_comp])
    comm = union(start[is_comm], end[is_comm])
    mem = union(start[is_mem], end[is_mem])
    x_comm = difference(comm, comp)
    x_mem = difference(mem, merge(comp, comm))

    def cov(u: Union) -> np.ndarray:
        return cast(np.ndarray, (coverage(u, w_end) - coverage(u, w_start)).astype(np.int64))

    c, xc, xm = cov(comp), cov(x_comm), cov(x_mem)
    total = (w_end - w_start).astype(np.int64)
    busy = c + xc + xm
    return {
        "computation_ns": c,
        "exposed_comm_ns": xc,
        "exposed_memcpy_ns": xm,
        "busy_ns": busy,
        "idle_ns": total - busy,
        "total_ns": total,
        "comm_ns": cov(comm),
        "memcpy_ns": cov(mem),
    }


def _span_reduce(ufunc: np.ufunc, values: np.ndarray, lo: np.ndarray, hi: np.ndarray, fill: int) -> np.ndarray:
    """``ufunc.reduce(values[lo:hi])`` for every pair (``fill`` where ``lo == hi``)."""
    if not len(lo):
        return np.empty(0, np.int64)
    padded = np.append(values, fill)
    idx = np.empty(2 * len(lo), np.int64)
    idx[0::2] = lo
    idx[1::2] = np.maximum(hi, lo)
    out = ufunc.reduceat(padded, idx)[0::2]
    return np.where(hi > lo, out, fill)


def _launch_threads(batch: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Launch time, pid and tid of each GPU event (-1 where its launch is unknown)."""
    g, h = batch.gpu, batch.host
    n = len(g)
    pid = np.full(n, -1, I64)
    tid = np.full(n, -1, I64)
    launch = g["launch_ns"].to_numpy(I64) if n else np.empty(0, I64)
    if n and len(h):
        idx = launch_rows(batch)
        ok = (idx >= 0) & (launch >= 0)
        pid[ok] = h["pid"].to_numpy(I64)[idx[ok]]
        tid[ok] = h["tid"].to_numpy(I64)[idx[ok]]
        launch = np.where(ok, launch, -1)
    return launch, pid, tid


class _Owned:
    """Per range: owned GPU events, their summed durations and projected span (accumulated)."""

    def __init__(self, nr: int, dur: np.ndarray, non_comm: np.ndarray, g_start: np.ndarray, g_end: np.ndarray):
        self.count = np.zeros(nr, I64)
        self.kern = np.zeros(nr, I64)
        self.ncomm = np.zeros(nr, I64)
        self.p_start = np.full(nr, _BIG)
        self.p_end = np.full(nr, _SMALL)
        self._dur, self._non, self._gs, self._ge = dur, non_comm, g_start, g_end

    def add(
        self,
        r_group: np.ndarray,
        r_lo: np.ndarray,
        r_hi: np.ndarray,
        e_group: np.ndarray,
        ev: np.ndarray,
        t: np.ndarray,
    ) -> None:
        """Add the events ``ev`` (times ``t``, groups ``e_group``) lying in ``[r_lo, r_hi)`` of the
        same group to each range (all ranges; ``r_group`` -1 owns nothing)."""
        nr = r_group.size
        ok = r_group >= 0
        if not len(ev) or not ok.any():
            return
        axis = Axis(
            np.concatenate([e_group, r_group[ok], r_group[ok]]),
            np.concatenate([t, r_lo[ok], r_hi[ok]]),
            int(max(e_group.max(initial=-1), r_group.max()) + 1),
        )
        vt = axis.place(t, e_group)
        order = np.argsort(vt, kind="stable")
        ev, vt = ev[order], vt[order]
        lo = np.zeros(nr, I64)
        hi = np.zeros(nr, I64)
        lo[ok] = np.searchsorted(vt, axis.place(r_lo[ok], r_group[ok]), side="left")
        hi[ok] = np.searchsorted(vt, axis.place(r_hi[ok], r_group[ok]), side="left")
        cdur = np.concatenate(([0], np.cumsum(self._dur[ev])))
        cnon = np.concatenate(([0], np.cumsum(self._non[ev])))
        self.count += hi - lo
        self.kern += cdur[hi] - cdur[lo]
        self.ncomm += cnon[hi] - cnon[lo]
        self.p_start = np.minimum(self.p_start, _span_reduce(np.minimum, self._gs[ev], lo, hi, _BIG))
        self.p_end = np.maximum(self.p_end, _span_reduce(np.maximum, self._ge[ev], lo, hi, _SMALL))


def range_stats(batch: Batch) -> pd.DataFrame:
    """The ``nvtx_ranges`` table (see the module docstring)."""
    h = batch.host
    if not len(h):
        return pd.DataFrame({c: [] for c in RANGE_COLUMNS})
    ann = h.loc[(h["kind"] == "annotation").to_numpy(bool)]  # compares codes: no string per event
    if not len(ann):
        return pd.DataFrame({c: [] for c in RANGE_COLUMNS})
    r_part = ann["part"].to_numpy(I64)
    r_start = ann["start_ns"].to_numpy(I64)
    r_end = ann["end_ns"].to_numpy(I64)
    nr = len(ann)

    g = batch.gpu
    g_part = g["part"].to_numpy(I64)
    g_start = g["start_ns"].to_numpy(I64)
    g_end = g["end_ns"].to_numpy(I64)
    dur = g_end - g_start
    is_comm = (g["category"] == "comm").to_numpy(bool)
    non_comm = np.where((g["kind"] == "kernel").to_numpy(bool) & ~is_comm, dur, 0)
    launch, l_pid, l_tid = _launch_threads(batch)
    known = launch >= 0
    owned = _Owned(nr, dur, non_comm, g_start, g_end)

    # events with a known launch: owned by the ranges of their launching thread
    if known.any():
        ev = np.flatnonzero(known)
        e_thr, r_thr = shared_codes(
            (g_part[ev], l_pid[ev], l_tid[ev]), (r_part, ann["pid"].to_numpy(I64), ann["tid"].to_numpy(I64))
        )
        owned.add(r_thr, r_start, r_end, e_thr, ev, launch[ev])
    # events with an unknown launch: owned by time, any thread of the part
    if (~known).any():
        ev = np.flatnonzero(~known)
        owned.add(r_part, r_start, r_end, g_part[ev], ev, g_start[ev])

    has = owned.count > 0
    bd = _window_breakdowns(batch, r_part, owned.p_start, owned.p_end, has)
    proj = np.where(has, owned.p_end - owned.p_start, 0).astype(I64)
    frame = pd.DataFrame(
        {
            "part": r_part,
            "name": ann["name"].astype(str).to_numpy(dtype=object),
            "count": 1,
            "with_gpu": has.astype(I64),
            "range_ns": r_end - r_start,
            "proj_ns": proj,
            "proj_min_ns": np.where(has, proj, _BIG),
            "proj_max_ns": np.where(has, proj, -1),
            "gpu_events": owned.count,
            "kernel_ns": owned.kern,
            "non_comm_kernel_ns": owned.ncomm,
            **{c: np.asarray(v, I64) for c, v in bd.items()},
        }
    )
    sums = ["count", "with_gpu", "range_ns", "proj_ns", "gpu_events", "kernel_ns", "non_comm_kernel_ns", *VALUE_COLUMNS]
    grp = frame.groupby(["part", "name"], sort=True)
    out = grp[sums].sum()
    out["proj_min_ns"] = grp["proj_min_ns"].min()
    out["proj_max_ns"] = grp["proj_max_ns"].max()
    out = out.reset_index()
    none = out["with_gpu"].to_numpy() == 0
    out["proj_min_ns"] = np.where(none, 0, out["proj_min_ns"].to_numpy())
    out["proj_max_ns"] = np.where(none, 0, out["proj_max_ns"].to_numpy())
    out["proj_mean_ns"] = np.divide(
        out["proj_ns"].to_numpy(np.float64), out["with_gpu"].to_numpy(np.float64), out=np.zeros(len(out)), where=~none
    )
    p = out["part"].to_numpy(I64)
    keys = batch.keys(p)
    out.insert(0, "device", keys["device"])
    out.insert(0, "rank", keys["rank"])
    order = lexsort_ints((string_rank(out["name"].array), -out["proj_ns"].to_numpy(I64), p))
    return out.iloc[order][RANGE_COLUMNS].reset_index(drop=True)


def _window_breakdowns(
    batch: Batch, r_part: np.ndarray, w_start: np.ndarray, w_end: np.ndarray, has: np.ndarray
) -> dict[str, np.ndarray]:
    """The breakdown inside each range's projected window, on its part's GPU timeline."""
    out = {c: np.zeros(r_part.size, I64) for c in VALUE_COLUMNS}
    g = batch.gpu
    if not len(g) or not has.any():
        return out
    gp = g["part"].to_numpy(I64)
    s, e = g["start_ns"].to_numpy(I64), g["end_ns"].to_numpy(I64)
    wp, ws, we = r_part[has], w_start[has], w_end[has]
    axis = Axis(np.concatenate([gp, gp, wp, wp]), np.concatenate([s, e, ws, we]), batch.n_parts)
    v = window_breakdown(
        axis.place(s, gp), axis.place(e, gp), g["category"].array, axis.place(ws, wp), axis.place(we, wp)
    )
    for c in VALUE_COLUMNS:
        out[c][has] = v[c]
    return out
