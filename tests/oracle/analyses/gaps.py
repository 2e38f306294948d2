"""Idle gaps between GPU events per (rank, device, stream) (SPEC §4 "Gaps").

Notes on the algorithm: the events of a stream are sorted by (start, end); the *busy end*
before an event is the running maximum of the ends of all earlier events on that stream (a
grouped ``cummax``), so overlapping events (TraceLens mode keeps ROCm overruns) never open a
false gap. A gap is ``start − busy end`` where that is positive; back-to-back events (gap 0)
are not gaps. Zero-length events are events like any other: they end a gap and open the next.
The event that set the busy end (the last one whose end equals the running maximum, found
with a running maximum over record positions) is the ``prev_name`` of the gap, the next event
its ``next_name``.

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

from ..prepare import PartData

GAP_COLUMNS = ["rank", "device", "stream", "events", "span_ns", "gaps", "idle_ns", "mean_ns", "min_ns", "max_ns",
               "std_ns", "host_wait_ns", "kernel_wait_ns", "other_ns", "host_wait_gaps", "kernel_wait_gaps",
               "other_gaps"]
HIST_COLUMNS = ["rank", "device", "stream", "bin", "lo_ns", "hi_ns", "count", "total_ns"]
TRANSITION_COLUMNS = ["rank", "device", "stream", "prev_name", "next_name", "count", "total_ns", "mean_ns",
                      "min_ns", "max_ns", "std_ns"]
CAUSES = ("host_wait", "kernel_wait", "other")


def find_gaps(part: PartData) -> pd.DataFrame:
    """Every gap of the part: stream, prev/next event row positions, gap_ns, busy_end_ns, cause.

    ``prev`` and ``next`` index into ``part.gpu`` (positional). Pure: reads ``part`` only.
    """
    g = part.gpu
    cols = {"stream": "int64", "prev": "int64", "next": "int64", "gap_ns": "int64", "busy_end_ns": "int64",
            "cause": pd.CategoricalDtype(list(CAUSES))}
    if len(g) < 2:
        return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in cols.items()})
    stream = g["stream"].to_numpy()
    start = g["start_ns"].to_numpy()
    end = g["end_ns"].to_numpy()
    order = np.lexsort((end, start, stream))
    st, s, e = stream[order], start[order], end[order]
    runmax = pd.Series(e).groupby(st, sort=False).cummax().to_numpy()
    n = len(s)
    pos = np.arange(n)
    record = np.maximum.accumulate(np.where(e == runmax, pos, 0))  # last event that set the busy end
    same = np.zeros(n, bool)
    same[1:] = st[1:] == st[:-1]
    busy_end = np.empty(n, np.int64)
    busy_end[0] = 0
    busy_end[1:] = runmax[:-1]
    gap = s - busy_end
    is_gap = same & (gap > 0)
    nxt = np.flatnonzero(is_gap)
    prv = record[nxt - 1]
    gap_ns = gap[nxt]
    bend = busy_end[nxt]
    launch = g["launch_ns"].to_numpy()[order][nxt]
    known = launch >= 0
    host = known & (launch > bend)
    kern = known & ~host & (gap_ns < int(part.options.kernel_wait_ns))
    code = np.where(host, 0, np.where(kern, 1, 2)).astype(np.int8)  # index into CAUSES
    return pd.DataFrame({"stream": st[nxt].astype(np.int64), "prev": order[prv].astype(np.int64),
                         "next": order[nxt].astype(np.int64), "gap_ns": gap_ns.astype(np.int64),
                         "busy_end_ns": bend.astype(np.int64),
                         "cause": pd.Categorical.from_codes(code, categories=list(CAUSES))})


def gap_stats(part: PartData) -> pd.DataFrame:
    """The ``gaps`` table: one row per (rank, device, stream), streams without gaps included."""
    g = part.gpu
    if not len(g):
        return pd.DataFrame({c: [] for c in GAP_COLUMNS})
    ev = pd.DataFrame({"stream": g["stream"].to_numpy(), "start": g["start_ns"].to_numpy(),
                       "end": g["end_ns"].to_numpy()}).groupby("stream", sort=True)
    out = pd.DataFrame({"events": ev.size(), "span_ns": ev["end"].max() - ev["start"].min()})
    gaps = find_gaps(part)
    grp = gaps.groupby("stream", sort=True)["gap_ns"]
    stats = pd.DataFrame({"gaps": grp.size(), "idle_ns": grp.sum(), "mean_ns": grp.mean(), "min_ns": grp.min(),
                          "max_ns": grp.max(), "std_ns": grp.std(ddof=1)})
    sidx = np.searchsorted(stats.index.to_numpy(), gaps["stream"].to_numpy())
    flat = sidx * len(CAUSES) + gaps["cause"].cat.codes.to_numpy()
    size = len(stats) * len(CAUSES)
    n_by = np.bincount(flat, minlength=size).reshape(-1, len(CAUSES))
    ns_by = np.bincount(flat, weights=gaps["gap_ns"].to_numpy(), minlength=size).reshape(-1, len(CAUSES))
    for i, c in enumerate(CAUSES):
        stats[f"{c}_ns"] = np.rint(ns_by[:, i]).astype(np.int64)
        stats[f"{c}_gaps"] = n_by[:, i]
    out = out.join(stats, how="left").fillna(0)
    out = out.reset_index()
    out.insert(0, "rank", np.int32(part.rank))
    out.insert(1, "device", np.int32(part.device))
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
    lo, hi = float(lo), float(hi)
    if hi <= lo:
        hi = lo + 1.0
    if log is None:  # automatic (issue 19): logarithmic where the range spans two decades
        log = lo >= 1.0 and hi >= 100 * lo
    if log:
        lo = max(lo, 1.0)
        return np.geomspace(lo, hi, bins + 1)
    return np.linspace(lo, hi, bins + 1)


def gap_histogram(part: PartData) -> pd.DataFrame:
    """The ``gap_histogram`` table: per (rank, device, stream, bin) the count and total of gaps.

    Bins are ``[lo_ns, hi_ns)``, the last one closed (numpy's rule). Every bin of every stream
    with gaps is listed, empty bins included.
    """
    gaps = find_gaps(part)
    o = part.options
    gv = gaps["gap_ns"].to_numpy()
    edges = hist_edges(gv, o.hist_min_ns, o.hist_max_ns, o.hist_bins, o.hist_log)
    if not len(gaps) or not len(edges):
        return pd.DataFrame({c: [] for c in HIST_COLUMNS})
    nb = len(edges) - 1
    b = np.searchsorted(edges, gv, side="right") - 1
    b[gv == edges[-1]] = nb - 1
    inside = (b >= 0) & (b < nb)
    streams = np.unique(gaps["stream"].to_numpy())
    sidx = np.searchsorted(streams, gaps["stream"].to_numpy())
    flat = sidx[inside] * nb + b[inside]
    count = np.bincount(flat, minlength=len(streams) * nb).astype(np.int64)
    total = np.bincount(flat, weights=gv[inside], minlength=len(streams) * nb)
    return pd.DataFrame({
        "rank": np.int32(part.rank), "device": np.int32(part.device),
        "stream": np.repeat(streams, nb).astype(np.int64), "bin": np.tile(np.arange(nb), len(streams)),
        "lo_ns": np.tile(edges[:-1], len(streams)), "hi_ns": np.tile(edges[1:], len(streams)),
        "count": count, "total_ns": np.rint(total).astype(np.int64),
    })


def transitions(part: PartData) -> pd.DataFrame:
    """The ``transitions`` table: gaps per (rank, device, stream, prev_name → next_name).

    count, total, mean, min, max and sample std (0 for a single gap) of the gap lengths.
    """
    gaps = find_gaps(part)
    if not len(gaps):
        return pd.DataFrame({c: [] for c in TRANSITION_COLUMNS})
    names = part.gpu["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names.astype("category")
    codes = names.cat.codes.to_numpy()
    cats = names.cat.categories.to_numpy(dtype=object)
    frame = pd.DataFrame({"stream": gaps["stream"].to_numpy(), "p": codes[gaps["prev"].to_numpy()],
                          "n": codes[gaps["next"].to_numpy()], "gap": gaps["gap_ns"].to_numpy()})
    grp = frame.groupby(["stream", "p", "n"], sort=True)["gap"]
    out = grp.agg(["size", "sum", "mean", "min", "max"]).reset_index()
    out["std"] = grp.std(ddof=1).fillna(0.0).to_numpy()
    res = pd.DataFrame({
        "rank": np.int32(part.rank), "device": np.int32(part.device), "stream": out["stream"].to_numpy(np.int64),
        "prev_name": cats[out["p"].to_numpy()], "next_name": cats[out["n"].to_numpy()],
        "count": out["size"].to_numpy(np.int64), "total_ns": out["sum"].to_numpy(np.int64),
        "mean_ns": out["mean"].to_numpy(np.float64), "min_ns": out["min"].to_numpy(np.int64),
        "max_ns": out["max"].to_numpy(np.int64), "std_ns": out["std"].to_numpy(np.float64),
    })
    return res.sort_values(["total_ns", "stream"], ascending=[False, True], kind="stable").reset_index(drop=True)
