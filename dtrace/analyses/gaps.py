"""Idle gaps between GPU events per (rank, device, stream) (see the README, "Gaps").

Notes on the algorithm: the events of every (part, stream) are sorted by (start, end); the
*busy end* before an event is the running maximum of the ends of all earlier events of that
stream (a grouped ``cummax``), so overlapping events (TraceLens mode keeps ROCm overruns) never
open a false gap. A gap is ``start − busy end`` where that is positive; back-to-back events (gap
0) are not gaps. Zero-length events are events like any other: they end a gap and open the
next. The event that set the busy end (the last one whose end equals the running maximum, found
with a running maximum over record positions) is the ``prev_name`` of the gap, the next event
its ``next_name``. All streams of all parts are swept at once.

Causes, from the next event's launch call (``launch_ns``, the start of the host runtime call
with the same correlation id): ``host_wait`` when the launch started after the busy end (the
GPU waited for the host); ``kernel_wait`` when it was launched in time and the gap is shorter
than ``kernel_wait_ns`` (back-to-back launch overhead); ``other`` otherwise, and for events
whose launch is unknown.

The histogram uses ``hist_bins`` linear (or, with ``hist_log``, logarithmic) bins between
``hist_min_ns`` and ``hist_max_ns``; a bound not given is the smallest/largest gap of the
part (all streams of the device, so its streams share their bins). Gaps outside the bounds
are left out of the histogram (the ``gaps`` table keeps every gap).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..batch import Batch
from ..groups import I64, dense_codes, max_by, min_by, string_rank, unique_first, unique_inverse

GAP_COLUMNS = ["rank", "device", "stream", "events", "span_ns", "gaps", "idle_ns", "mean_ns", "min_ns", "max_ns",
               "std_ns", "host_wait_ns", "kernel_wait_ns", "other_ns", "host_wait_gaps", "kernel_wait_gaps",
               "other_gaps"]
HIST_COLUMNS = ["rank", "device", "stream", "bin", "lo_ns", "hi_ns", "count", "total_ns"]
TRANSITION_COLUMNS = ["rank", "device", "stream", "prev_name", "next_name", "count", "total_ns", "mean_ns",
                      "min_ns", "max_ns", "std_ns"]
CAUSES = ("host_wait", "kernel_wait", "other")


def find_gaps(batch: Batch) -> pd.DataFrame:
    """Every gap of the partition: part, stream, prev/next event positions, gap_ns, busy_end_ns, cause.

    ``prev`` and ``next`` index into ``batch.gpu`` (positional). Pure: reads ``batch`` only.
    """
    g = batch.gpu
    cols = {"part": "int64", "stream": "int64", "prev": "int64", "next": "int64", "gap_ns": "int64",
            "busy_end_ns": "int64", "cause": pd.CategoricalDtype(list(CAUSES))}
    if len(g) < 2:
        return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in cols.items()})
    part = g["part"].to_numpy(I64)
    stream = g["stream"].to_numpy(I64)
    start = g["start_ns"].to_numpy(I64)
    end = g["end_ns"].to_numpy(I64)
    order = np.lexsort((end, start, stream, part))
    key = dense_codes(part, stream)[0][order]
    s, e = start[order], end[order]
    runmax = pd.Series(e).groupby(key, sort=False).cummax().to_numpy()
    n = len(s)
    pos = np.arange(n)
    record = np.maximum.accumulate(np.where(e == runmax, pos, 0))  # last event that set the busy end
    same = np.zeros(n, bool)
    same[1:] = key[1:] == key[:-1]
    busy_end = np.empty(n, I64)
    busy_end[0] = 0
    busy_end[1:] = runmax[:-1]
    gap = s - busy_end
    is_gap = same & (gap > 0)
    nxt = np.flatnonzero(is_gap)
    prv = record[nxt - 1]
    gap_ns = gap[nxt]
    bend = busy_end[nxt]
    launch = g["launch_ns"].to_numpy(I64)[order][nxt]
    known = launch >= 0
    host = known & (launch > bend)
    kern = known & ~host & (gap_ns < int(batch.options.kernel_wait_ns))
    code = np.where(host, 0, np.where(kern, 1, 2)).astype(np.int8)  # index into CAUSES
    return pd.DataFrame({"part": part[order][nxt], "stream": stream[order][nxt],
                         "prev": order[prv].astype(I64), "next": order[nxt].astype(I64),
                         "gap_ns": gap_ns.astype(I64), "busy_end_ns": bend.astype(I64),
                         "cause": pd.Categorical.from_codes(code, categories=list(CAUSES))})


def gap_stats(batch: Batch) -> pd.DataFrame:
    """The ``gaps`` table: one row per (rank, device, stream), streams without gaps included."""
    g = batch.gpu
    if not len(g):
        return pd.DataFrame({c: [] for c in GAP_COLUMNS})
    ev = pd.DataFrame({"part": g["part"].to_numpy(I64), "stream": g["stream"].to_numpy(I64),
                       "start": g["start_ns"].to_numpy(I64), "end": g["end_ns"].to_numpy(I64)})
    grp_ev = ev.groupby(["part", "stream"], sort=True)
    out = pd.DataFrame({"events": grp_ev.size(), "span_ns": grp_ev["end"].max() - grp_ev["start"].min()})
    gaps = find_gaps(batch)
    grp = gaps.groupby(["part", "stream"], sort=True)["gap_ns"]
    stats = pd.DataFrame({"gaps": grp.size(), "idle_ns": grp.sum(), "mean_ns": grp.mean(), "min_ns": grp.min(),
                          "max_ns": grp.max(), "std_ns": grp.std(ddof=1)})
    sidx = stats.index.get_indexer(pd.MultiIndex.from_arrays([gaps["part"].to_numpy(), gaps["stream"].to_numpy()]))
    flat = sidx * len(CAUSES) + gaps["cause"].cat.codes.to_numpy()
    size = len(stats) * len(CAUSES)
    n_by = np.bincount(flat, minlength=size).reshape(-1, len(CAUSES))
    ns_by = np.bincount(flat, weights=gaps["gap_ns"].to_numpy(), minlength=size).reshape(-1, len(CAUSES))
    for i, c in enumerate(CAUSES):
        stats[f"{c}_ns"] = np.rint(ns_by[:, i]).astype(I64)
        stats[f"{c}_gaps"] = n_by[:, i]
    out = out.join(stats, how="left").fillna(0).reset_index()
    keys = batch.keys(out["part"].to_numpy(I64))
    out.insert(0, "device", keys["device"])
    out.insert(0, "rank", keys["rank"])
    return out[GAP_COLUMNS]


def hist_edges(gap_ns: np.ndarray, lo: int | None, hi: int | None, bins: int, log: bool) -> np.ndarray:
    """Bin edges (float ns) for the gap histogram; empty when there is nothing to bin.

    Examples
    --------
    >>> hist_edges(np.array([1000, 5000]), None, None, 4, False).tolist()
    [1000.0, 2000.0, 3000.0, 4000.0, 5000.0]
    >>> hist_edges(np.array([5]), 1000, 100000, 2, True).tolist()
    [1000.0, 10000.0, 100000.0]
    """
    if lo is None or hi is None:
        if not len(gap_ns):
            return np.empty(0)
        lo = int(gap_ns.min()) if lo is None else lo
        hi = int(gap_ns.max()) if hi is None else hi
    return _edges(np.array([lo], np.float64), np.array([hi], np.float64), bins, log)[0]


def _edges(lo: np.ndarray, hi: np.ndarray, bins: int, log: bool) -> np.ndarray:
    """Edges of every row's bins, one row per (lo, hi) pair: ``np.linspace``/``np.geomspace`` of
    each pair (the same float operations as one call per pair)."""
    hi = np.where(hi <= lo, lo + 1.0, hi)
    if log:
        lo = np.maximum(lo, 1.0)
        return np.atleast_2d(np.geomspace(lo, hi, bins + 1, axis=1))
    return np.atleast_2d(np.linspace(lo, hi, bins + 1, axis=1))


def gap_histogram(batch: Batch) -> pd.DataFrame:
    """The ``gap_histogram`` table: per (rank, device, stream, bin) the count and total of gaps.

    Bins are ``[lo_ns, hi_ns)``, the last one closed (numpy's rule). Every bin of every stream
    with gaps is listed, empty bins included.
    """
    gaps = find_gaps(batch)
    o = batch.options
    if not len(gaps):
        return pd.DataFrame({c: [] for c in HIST_COLUMNS})
    gv = gaps["gap_ns"].to_numpy(I64)
    gp = gaps["part"].to_numpy(I64)
    parts, pidx = unique_inverse(gp)
    big = np.iinfo(np.int64).max
    lo = (np.full(len(parts), o.hist_min_ns, np.float64) if o.hist_min_ns is not None
          else min_by(pidx, gv, len(parts), big).astype(np.float64))
    hi = (np.full(len(parts), o.hist_max_ns, np.float64) if o.hist_max_ns is not None
          else max_by(pidx, gv, len(parts), -big - 1).astype(np.float64))
    edges = _edges(lo, hi, o.hist_bins, o.hist_log)
    nb = edges.shape[1] - 1
    b = _bin_of(edges, pidx, gv.astype(np.float64))
    b[gv == edges[pidx, -1]] = nb - 1
    inside = (b >= 0) & (b < nb)
    skey, streams_n = dense_codes(gp, gaps["stream"].to_numpy(I64))
    first = unique_first(skey)[1]
    flat = skey[inside] * nb + b[inside]
    count = np.bincount(flat, minlength=streams_n * nb).astype(I64)
    total = np.bincount(flat, weights=gv[inside], minlength=streams_n * nb)
    row_part = pidx[first]
    keys = batch.keys(parts[row_part])
    return pd.DataFrame({
        "rank": np.repeat(keys["rank"], nb), "device": np.repeat(keys["device"], nb),
        "stream": np.repeat(gaps["stream"].to_numpy(I64)[first], nb), "bin": np.tile(np.arange(nb), streams_n),
        "lo_ns": edges[row_part, :-1].reshape(-1), "hi_ns": edges[row_part, 1:].reshape(-1),
        "count": count, "total_ns": np.rint(total).astype(I64),
    })


def _bin_of(edges: np.ndarray, row: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``searchsorted(edges[row], v, side="right") - 1`` for every value, edges per row.

    Counts the edges at or below each value, in chunks that keep the comparison matrix small.
    """
    out = np.empty(v.size, I64)
    step = max(1, (1 << 22) // edges.shape[1])
    for i in range(0, v.size, step):  # a loop over chunks of millions of gaps, not over gaps
        r, x = row[i:i + step], v[i:i + step]
        out[i:i + step] = (edges[r] <= x[:, None]).sum(axis=1) - 1
    return out


def transitions(batch: Batch) -> pd.DataFrame:
    """The ``transitions`` table: gaps per (rank, device, stream, prev_name → next_name).

    count, total, mean, min, max and sample std (0 for a single gap) of the gap lengths.
    """
    gaps = find_gaps(batch)
    if not len(gaps):
        return pd.DataFrame({c: [] for c in TRANSITION_COLUMNS})
    names = batch.gpu["name"].array
    codes = np.asarray(names.codes)
    cats = np.asarray(names.categories, dtype=object)
    frame = pd.DataFrame({"part": gaps["part"].to_numpy(I64), "stream": gaps["stream"].to_numpy(I64),
                          "p": codes[gaps["prev"].to_numpy()], "n": codes[gaps["next"].to_numpy()],
                          "gap": gaps["gap_ns"].to_numpy(I64)})
    grp = frame.groupby(["part", "stream", "p", "n"], sort=True)["gap"]
    out = grp.agg(["size", "sum", "mean", "min", "max"]).reset_index()
    out["std"] = grp.std(ddof=1).fillna(0.0).to_numpy()
    p = out["part"].to_numpy(I64)
    res = pd.DataFrame({
        **batch.keys(p), "stream": out["stream"].to_numpy(I64),
        "prev_name": cats[out["p"].to_numpy()], "next_name": cats[out["n"].to_numpy()],
        "count": out["size"].to_numpy(I64), "total_ns": out["sum"].to_numpy(I64),
        "mean_ns": out["mean"].to_numpy(np.float64), "min_ns": out["min"].to_numpy(I64),
        "max_ns": out["max"].to_numpy(I64), "std_ns": out["std"].to_numpy(np.float64),
    })
    rank = string_rank(cats)
    order = np.lexsort((rank[out["n"].to_numpy()], rank[out["p"].to_numpy()], res["stream"].to_numpy(),
                        -res["total_ns"].to_numpy(I64), p))
    return res.iloc[order].reset_index(drop=True)
