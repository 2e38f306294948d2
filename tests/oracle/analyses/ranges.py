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

Notes on the algorithm (vectorised; the only Python loop is over launching threads):
owned events are contiguous once events are sorted by (thread, launch time), so each range's
owned set is an index interval found with ``searchsorted``; counts and durations come from
prefix sums, the projected span from ``minimum.reduceat``/``maximum.reduceat`` over the
interleaved interval bounds. The per-window breakdown uses the coverage function of the
three exposed sets (compute, comm − compute, memory − compute − comm):
``|X ∩ [a, b]| = cov_X(b) − cov_X(a)``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..intervals import Union, coverage, merge, union
from ..prepare import PartData
from .breakdown import VALUE_COLUMNS

RANGE_COLUMNS = ["rank", "device", "name", "count", "with_gpu", "range_ns", "proj_ns", "proj_mean_ns",
                 "proj_min_ns", "proj_max_ns", "gpu_events", "kernel_ns", "non_comm_kernel_ns", *VALUE_COLUMNS]


def difference(a: Union, b: Union) -> Union:
    """``a − b`` for two unions (sorted disjoint segments).

    Examples
    --------
    >>> s, e = difference((np.array([0, 20]), np.array([10, 30])), (np.array([5]), np.array([25])))
    >>> s.tolist(), e.tolist()
    ([0, 25], [5, 30])
    """
    if a[0].size == 0 or b[0].size == 0:
        return a
    pts = np.unique(np.concatenate([a[0], a[1], b[0], b[1]]))
    lo, hi = pts[:-1], pts[1:]
    mid = lo + (hi - lo) // 2
    keep = _inside(a, mid) & ~_inside(b, mid)
    return union(lo[keep], hi[keep])


def _inside(u: Union, t: np.ndarray) -> np.ndarray:
    s, e = u
    j = np.searchsorted(s, t, side="right") - 1
    return (j >= 0) & (t < e[np.maximum(j, 0)])


def window_breakdown(start: np.ndarray, end: np.ndarray, category: np.ndarray,
                     w_start: np.ndarray, w_end: np.ndarray) -> dict[str, np.ndarray]:
    """The breakdown values of the GPU timeline inside each window ``[w_start, w_end)``.

    Examples
    --------
    >>> v = window_breakdown(np.array([0, 5, 20]), np.array([10, 15, 30]),
    ...                      np.array(["compute", "comm", "memcpy"]), np.array([0, 8]), np.array([30, 22]))
    >>> v["computation_ns"].tolist(), v["exposed_comm_ns"].tolist(), v["idle_ns"].tolist()
    ([10, 2], [5, 5], [5, 5])
    """
    cat = np.asarray(category, dtype=object)
    comp = union(start[cat == "compute"], end[cat == "compute"])
    comm = union(start[cat == "comm"], end[cat == "comm"])
    memm = (cat == "memcpy") | (cat == "memset")
    mem = union(start[memm], end[memm])
    x_comm = difference(comm, comp)
    x_mem = difference(mem, merge(comp, comm))

    def cov(u: Union) -> np.ndarray:
        return (coverage(u, w_end) - coverage(u, w_start)).astype(np.int64)

    c, xc, xm = cov(comp), cov(x_comm), cov(x_mem)
    total = (w_end - w_start).astype(np.int64)
    busy = c + xc + xm
    return {"computation_ns": c, "exposed_comm_ns": xc, "exposed_memcpy_ns": xm, "busy_ns": busy,
            "idle_ns": total - busy, "total_ns": total, "comm_ns": cov(comm), "memcpy_ns": cov(mem)}


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


def _launch_threads(part: PartData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Launch time, pid and tid of each GPU event (-1 where its launch is unknown)."""
    g, h = part.gpu, part.host
    n = len(g)
    pid = np.full(n, -1, np.int64)
    tid = np.full(n, -1, np.int64)
    launch = g["launch_ns"].to_numpy(np.int64) if n else np.empty(0, np.int64)
    if n and len(h):
        rt = h.loc[(h["kind"] == "runtime").to_numpy() & (h["correlation"].to_numpy() >= 0)]
        rt = rt.drop_duplicates("correlation")
        idx = pd.Index(rt["correlation"].to_numpy()).get_indexer(g["correlation"].to_numpy())
        ok = (idx >= 0) & (launch >= 0)
        pid[ok] = rt["pid"].to_numpy(np.int64)[idx[ok]]
        tid[ok] = rt["tid"].to_numpy(np.int64)[idx[ok]]
        launch = np.where(ok, launch, -1)
    return launch, pid, tid


def range_stats(part: PartData) -> pd.DataFrame:
    """The ``nvtx_ranges`` table (see the module docstring)."""
    h = part.host
    if not len(h):
        return pd.DataFrame({c: [] for c in RANGE_COLUMNS})
    ann = h.loc[(h["kind"] == "annotation").to_numpy()]  # compares codes: no string per event
    if not len(ann):
        return pd.DataFrame({c: [] for c in RANGE_COLUMNS})
    r_start = ann["start_ns"].to_numpy(np.int64)
    r_end = ann["end_ns"].to_numpy(np.int64)
    r_pid = ann["pid"].to_numpy(np.int64)
    r_tid = ann["tid"].to_numpy(np.int64)
    nr = len(ann)

    g = part.gpu
    g_start = g["start_ns"].to_numpy(np.int64)
    g_end = g["end_ns"].to_numpy(np.int64)
    dur = g_end - g_start
    cat = g["category"].astype(str).to_numpy(dtype=object)
    kind = g["kind"].astype(str).to_numpy(dtype=object)
    non_comm = np.where((kind == "kernel") & (cat != "comm"), dur, 0)
    launch, l_pid, l_tid = _launch_threads(part)
    known = launch >= 0

    owned = np.zeros(nr, np.int64)
    kern = np.zeros(nr, np.int64)
    ncomm = np.zeros(nr, np.int64)
    p_start = np.full(nr, np.iinfo(np.int64).max)
    p_end = np.full(nr, np.iinfo(np.int64).min)

    def account(sel_ranges: np.ndarray, ev: np.ndarray, t: np.ndarray) -> None:
        """Add the events ``ev`` (keyed by times ``t``) inside each selected range."""
        if not len(ev) or not len(sel_ranges):
            return
        order = np.argsort(t, kind="stable")
        ev, t = ev[order], t[order]
        lo = np.searchsorted(t, r_start[sel_ranges], side="left")
        hi = np.searchsorted(t, r_end[sel_ranges], side="left")
        cdur = np.concatenate(([0], np.cumsum(dur[ev])))
        cnon = np.concatenate(([0], np.cumsum(non_comm[ev])))
        owned[sel_ranges] += hi - lo
        kern[sel_ranges] += cdur[hi] - cdur[lo]
        ncomm[sel_ranges] += cnon[hi] - cnon[lo]
        big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
        p_start[sel_ranges] = np.minimum(p_start[sel_ranges], _span_reduce(np.minimum, g_start[ev], lo, hi, big))
        p_end[sel_ranges] = np.maximum(p_end[sel_ranges], _span_reduce(np.maximum, g_end[ev], lo, hi, small))

    # events with a known launch: owned by the ranges of their launching thread
    if known.any():
        keys = pd.MultiIndex.from_arrays([l_pid[known], l_tid[known]])
        ev_codes, threads = keys.factorize()
        r_codes = pd.MultiIndex.from_arrays([threads.get_level_values(0), threads.get_level_values(1)]) \
            .get_indexer(pd.MultiIndex.from_arrays([r_pid, r_tid]))
        ev_idx = np.flatnonzero(known)
        for code in np.unique(r_codes[r_codes >= 0]).tolist():
            ev = ev_idx[ev_codes == code]
            account(np.flatnonzero(r_codes == code), ev, launch[ev])
    # events with an unknown launch: owned by time, any thread
    if (~known).any():
        ev = np.flatnonzero(~known)
        account(np.arange(nr), ev, g_start[ev])

    has = owned > 0
    w_start = np.where(has, p_start, 0)
    w_end = np.where(has, p_end, 0)
    bd = window_breakdown(g_start, g_end, cat, w_start, w_end) if len(g) else \
        {c: np.zeros(nr, np.int64) for c in VALUE_COLUMNS}
    proj = (w_end - w_start).astype(np.int64)
    frame = pd.DataFrame({"name": ann["name"].astype(str).to_numpy(dtype=object), "count": 1,
                          "with_gpu": has.astype(np.int64), "range_ns": r_end - r_start, "proj_ns": proj,
                          "proj_min_ns": np.where(has, proj, np.iinfo(np.int64).max),
                          "proj_max_ns": np.where(has, proj, -1),
                          "gpu_events": owned, "kernel_ns": kern, "non_comm_kernel_ns": ncomm,
                          **{c: np.asarray(v, np.int64) for c, v in bd.items()}})
    sums = ["count", "with_gpu", "range_ns", "proj_ns", "gpu_events", "kernel_ns", "non_comm_kernel_ns",
            *VALUE_COLUMNS]
    grp = frame.groupby("name", sort=True)
    out = grp[sums].sum()
    out["proj_min_ns"] = grp["proj_min_ns"].min()
    out["proj_max_ns"] = grp["proj_max_ns"].max()
    out = out.reset_index()
    none = out["with_gpu"].to_numpy() == 0
    out["proj_min_ns"] = np.where(none, 0, out["proj_min_ns"].to_numpy())
    out["proj_max_ns"] = np.where(none, 0, out["proj_max_ns"].to_numpy())
    out["proj_mean_ns"] = np.divide(out["proj_ns"].to_numpy(np.float64), out["with_gpu"].to_numpy(np.float64),
                                    out=np.zeros(len(out)), where=~none)
    out.insert(0, "rank", np.int32(part.rank))
    out.insert(1, "device", np.int32(part.device))
    out = out[RANGE_COLUMNS]
    return out.sort_values(["proj_ns", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)
