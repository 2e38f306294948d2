"""Idle gaps between GPU events: per device and per (rank, device, stream) (README, "Gaps").

Two views of the same sweep. A *device gap* (``device_gaps``, ``device_gap_histogram``) is an
interval in which no stream of the device runs anything, between its first and last GPU event:
the device gaps of a (rank, device) add up to exactly the breakdown's ``idle_ns``, so their
causes split the GPU's idle time. A *stream gap* (``gaps``, ``gap_histogram``, ``transitions``)
is an interval in which one stream runs nothing: it usually overlaps work on the device's other
streams (an NCCL stream waits between collectives while compute runs), so stream gaps summed
over streams are per-stream waiting, not GPU idle time.

Notes on the algorithm: the events of every group — a (part, stream), or a part with all its
streams pooled — are sorted by (start, end); the
*busy end* before an event is the running maximum of the ends of all earlier events of that
stream (a grouped ``cummax``), so overlapping events (TraceLens mode keeps ROCm overruns) never
open a false gap. A gap is ``start − busy end`` where that is positive; back-to-back events (gap
0) are not gaps. Zero-length events are events like any other: they end a gap and open the
next. The event that set the busy end (the last one whose end equals the running maximum, found
with a running maximum over record positions) is the ``prev_name`` of the gap, the next event
its ``next_name``. All groups of all parts are swept at once. For a device gap the next event is
the first event to start after the gap on any stream (of several starting at the same instant,
the shortest, then the first in the trace).

Causes, from the next event's launch call (``launch_ns``, the start of the host runtime call
with the same correlation id): ``host_wait`` when the launch started after the busy end (the
GPU waited for the host); ``kernel_wait`` when it was launched in time and the gap is shorter
than ``kernel_wait_ns`` (back-to-back launch overhead); ``other`` otherwise, and for events
whose launch is unknown.

The histograms use ``hist_bins`` bins between ``hist_min_ns`` and ``hist_max_ns``,
logarithmic when the range spans two decades or more (``hi ≥ LOG_SPAN · lo``, ``lo > 0``: gap
lengths are skewed, so linear bins would hold nearly every gap in the first), else linear;
``hist_log`` ``True``/``False`` forces either. A bound not given is the smallest/largest gap of the
part (for stream gaps: of all streams of the device, so its streams share their bins). Gaps
outside the bounds are left out of the histogram (the gap tables keep every gap).
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd

from ..core.dtypes import empty_frame, text_column, text_values
from ..options import LOG_SPAN
from ..vector.groups import (
    I64,
    count_by,
    cummax_by,
    dense_codes,
    lexsort_ints,
    max_by,
    min_by,
    shared_codes,
    string_rank,
    sum_by,
    unique_first,
    unique_inverse,
)
from .batch import Batch

GAP_COLUMNS = [
    "rank",
    "device",
    "stream",
    "events",
    "span_ns",
    "gaps",
    "idle_ns",
    "mean_ns",
    "min_ns",
    "max_ns",
    "std_ns",
    "host_wait_ns",
    "kernel_wait_ns",
    "other_ns",
    "host_wait_gaps",
    "kernel_wait_gaps",
    "other_gaps",
]
DEVICE_GAP_COLUMNS = [c for c in GAP_COLUMNS if c != "stream"]
HIST_COLUMNS = ["rank", "device", "stream", "bin", "lo_ns", "hi_ns", "count", "total_ns"]
DEVICE_HIST_COLUMNS = [c for c in HIST_COLUMNS if c != "stream"]
TRANSITION_COLUMNS = [
    "rank",
    "device",
    "stream",
    "prev_name",
    "next_name",
    "count",
    "total_ns",
    "mean_ns",
    "min_ns",
    "max_ns",
    "std_ns",
]
CAUSES = ("host_wait", "kernel_wait", "other")


def find_gaps(batch: Batch, *, device: bool = False) -> pd.DataFrame:
    """Every gap of the partition: part, stream, prev/next event positions, gap_ns, busy_end_ns, cause.

    Stream gaps by default; ``device=True`` sweeps each part's streams pooled (device gaps;
    ``stream`` is then the stream of the event that ends the gap). ``prev`` and ``next`` index
    into ``batch.gpu`` (positional). Pure: reads ``batch`` only; computed once per batch and kind
    (the gap tables, histograms and transitions share it: never mutate it).
    """
    return batch.derived("gaps.device" if device else "gaps.stream", lambda b: _find_gaps(b, device))


def _find_gaps(batch: Batch, device: bool) -> pd.DataFrame:
    g = batch.gpu
    cols = {
        "part": "int64",
        "stream": "int64",
        "prev": "int64",
        "next": "int64",
        "gap_ns": "int64",
        "busy_end_ns": "int64",
        "cause": pd.CategoricalDtype(list(CAUSES)),
    }
    if len(g) < 2:
        return empty_frame(cols)
    part = g["part"].to_numpy(I64)
    stream = g["stream"].to_numpy(I64)
    start = g["start_ns"].to_numpy(I64)
    end = g["end_ns"].to_numpy(I64)
    if device:
        order = lexsort_ints((end, start, part))
        key = part[order]
    else:
        order = lexsort_ints((end, start, stream, part))
        key = dense_codes(part, stream)[0][order]
    s, e = start[order], end[order]
    runmax = cummax_by(key, e)
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
    return pd.DataFrame(
        {
            "part": part[order][nxt],
            "stream": stream[order][nxt],
            "prev": order[prv].astype(I64),
            "next": order[nxt].astype(I64),
            "gap_ns": gap_ns.astype(I64),
            "busy_end_ns": bend.astype(I64),
            "cause": pd.Categorical.from_codes(code, categories=list(CAUSES)),
        }
    )


def _gap_figures(gaps: pd.DataFrame, group: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """Per group ``0..n-1`` of the gaps: gaps, idle_ns, mean/min/max/std (sample; 0 for one
    gap) and ns and count per cause (zeros for groups without gaps)."""
    gv = gaps["gap_ns"].to_numpy(I64)
    cnt = count_by(group, n)
    idle = sum_by(group, gv, n)
    big = np.iinfo(np.int64).max
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(cnt > 0, idle / np.maximum(cnt, 1), 0.0)
        dev = gv - mean[group]
        ss = np.bincount(group, weights=dev * dev, minlength=n) if group.size else np.zeros(n)
        std = np.where(cnt > 1, np.sqrt(ss / np.maximum(cnt - 1, 1)), 0.0)
    out = {
        "gaps": cnt,
        "idle_ns": idle,
        "mean_ns": mean,
        "min_ns": np.where(cnt > 0, min_by(group, gv, n, big), 0),
        "max_ns": np.where(cnt > 0, max_by(group, gv, n, 0), 0),
        "std_ns": std,
    }
    code = gaps["cause"].cat.codes.to_numpy().astype(I64)
    flat = group * len(CAUSES) + code
    ns_by = sum_by(flat, gv, n * len(CAUSES)).reshape(-1, len(CAUSES))
    n_by = count_by(flat, n * len(CAUSES)).reshape(-1, len(CAUSES))
    for i, c in enumerate(CAUSES):
        out[f"{c}_ns"] = ns_by[:, i]
    for i, c in enumerate(CAUSES):
        out[f"{c}_gaps"] = n_by[:, i]
    return out


def device_gap_stats(batch: Batch) -> pd.DataFrame:
    """The ``device_gaps`` table: one row per (rank, device) of the partition (parts without GPU
    events included, with zeros): the gaps in which no stream of the device is busy.

    ``span_ns`` is the GPU span (first start to last end) and ``idle_ns`` the sum of the device
    gaps, equal to the breakdown's ``idle_ns``; the causes split it.
    """
    n = batch.n_parts
    g = batch.gpu
    gp = g["part"].to_numpy(I64)
    big = np.iinfo(np.int64).max
    lo = min_by(gp, g["start_ns"].to_numpy(I64), n, big)
    hi = max_by(gp, g["end_ns"].to_numpy(I64), n, -big - 1)
    gaps = find_gaps(batch, device=True)
    out = pd.DataFrame(
        {
            **batch.keys(np.arange(n)),
            "events": count_by(gp, n),
            "span_ns": np.where(lo <= hi, hi - lo, 0).astype(I64),
            **_gap_figures(gaps, gaps["part"].to_numpy(I64), n),
        }
    )
    return out[DEVICE_GAP_COLUMNS]


def gap_stats(batch: Batch) -> pd.DataFrame:
    """The ``gaps`` table: one row per (rank, device, stream), streams without gaps included."""
    g = batch.gpu
    if not len(g):
        return pd.DataFrame({c: [] for c in GAP_COLUMNS})
    gp, gs = g["part"].to_numpy(I64), g["stream"].to_numpy(I64)
    gaps = find_gaps(batch)
    code, gap_code = shared_codes((gp, gs), (gaps["part"].to_numpy(I64), gaps["stream"].to_numpy(I64)))
    n = int(code.max()) + 1
    first = unique_first(code)[1]
    big = np.iinfo(np.int64).max
    lo = min_by(code, g["start_ns"].to_numpy(I64), n, big)
    hi = max_by(code, g["end_ns"].to_numpy(I64), n, -big - 1)
    out = pd.DataFrame(
        {
            **batch.keys(gp[first]),
            "stream": gs[first],
            "events": count_by(code, n),
            "span_ns": hi - lo,
            **_gap_figures(gaps, gap_code, n),
        }
    )
    return out[GAP_COLUMNS]


def hist_edges(gap_ns: np.ndarray, lo: int | None, hi: int | None, bins: int, log: bool | None) -> np.ndarray:
    """Bin edges (float ns) for the gap histogram; empty when there is nothing to bin.
    ``log``: ``True`` logarithmic, ``False`` linear, ``None`` logarithmic where the range spans
    two decades (:data:`~dtrace.options.LOG_SPAN`).

    Examples
    --------
    >>> hist_edges(np.array([1000, 5000]), None, None, 4, None).tolist()
    [1000.0, 2000.0, 3000.0, 4000.0, 5000.0]
    >>> hist_edges(np.array([5]), 1000, 100000, 2, None).tolist()
    [1000.0, 10000.0, 100000.0]
    >>> hist_edges(np.array([5]), 1000, 100000, 2, False).tolist()
    [1000.0, 50500.0, 100000.0]
    """
    if lo is None or hi is None:
        if not len(gap_ns):
            return np.empty(0)
        lo = int(gap_ns.min()) if lo is None else lo
        hi = int(gap_ns.max()) if hi is None else hi
    return cast(np.ndarray, _edges(np.array([lo], np.float64), np.array([hi], np.float64), bins, log)[0])


def _edges(lo: np.ndarray, hi: np.ndarray, bins: int, log: bool | None) -> np.ndarray:
    """Edges of every row's bins, one row per (lo, hi) pair: ``np.linspace``/``np.geomspace`` of
    each pair (the same float operations as one call per pair); ``log=None`` picks per row."""
    hi = np.where(hi <= lo, lo + 1.0, hi)
    if log is False:
        return np.atleast_2d(np.linspace(lo, hi, bins + 1, axis=1))
    geo = np.atleast_2d(np.geomspace(np.maximum(lo, 1.0), hi, bins + 1, axis=1))
    if log:
        return geo
    spans = (lo >= 1.0) & (hi >= LOG_SPAN * lo)
    return np.where(np.atleast_1d(spans)[:, None], geo, np.atleast_2d(np.linspace(lo, hi, bins + 1, axis=1)))


def gap_histogram(batch: Batch) -> pd.DataFrame:
    """The ``gap_histogram`` table: per (rank, device, stream, bin) the count and total of the
    stream gaps.

    Bins are ``[lo_ns, hi_ns)``, the last one closed (numpy's rule). The edges are the float
    edges rounded up to whole ns, which holds exactly the same integer gaps. Every bin of every
    stream with gaps is listed, empty bins included; the streams of a device share its bins.
    """
    return _histogram(batch, find_gaps(batch), HIST_COLUMNS)


def device_gap_histogram(batch: Batch) -> pd.DataFrame:
    """The ``device_gap_histogram`` table: per (rank, device, bin) the count and total of the
    device gaps (those of ``device_gaps``), with the bins of :func:`gap_histogram`'s rule.
    Every bin of every device with gaps is listed, empty bins included."""
    return _histogram(batch, find_gaps(batch, device=True), DEVICE_HIST_COLUMNS)


def _histogram(batch: Batch, gaps: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Histogram rows per part (``columns`` without ``stream``) or per (part, stream); the bin
    edges come from each part's gaps or the options' bounds."""
    o = batch.options
    if not len(gaps):
        return pd.DataFrame({c: [] for c in columns})
    gv = gaps["gap_ns"].to_numpy(I64)
    gp = gaps["part"].to_numpy(I64)
    parts, pidx = unique_inverse(gp)
    big = np.iinfo(np.int64).max
    lo = (
        np.full(len(parts), o.hist_min_ns, np.float64)
        if o.hist_min_ns is not None
        else min_by(pidx, gv, len(parts), big).astype(np.float64)
    )
    hi = (
        np.full(len(parts), o.hist_max_ns, np.float64)
        if o.hist_max_ns is not None
        else max_by(pidx, gv, len(parts), -big - 1).astype(np.float64)
    )
    edges = _edges(lo, hi, o.hist_bins, o.hist_log)
    nb = edges.shape[1] - 1
    b = _bin_of(edges, pidx, gv.astype(np.float64))
    b[gv == edges[pidx, -1]] = nb - 1
    inside = (b >= 0) & (b < nb)
    per_stream = "stream" in columns
    skey, rows_n = dense_codes(gp, gaps["stream"].to_numpy(I64)) if per_stream else (pidx, len(parts))
    first = unique_first(skey)[1]
    flat = skey[inside] * nb + b[inside]
    count = np.bincount(flat, minlength=rows_n * nb).astype(I64)
    total = sum_by(flat, gv[inside], rows_n * nb)
    row_part = pidx[first]
    keys = batch.keys(parts[row_part])
    out = {"rank": np.repeat(keys["rank"], nb), "device": np.repeat(keys["device"], nb)}
    if per_stream:
        out["stream"] = np.repeat(gaps["stream"].to_numpy(I64)[first], nb)
    out.update(
        {
            "bin": np.tile(np.arange(nb), rows_n),
            # integer gaps: [e, f) holds the same ones as [ceil e, ceil f), so edges are whole ns
            "lo_ns": np.ceil(edges[row_part, :-1]).reshape(-1).astype(I64),
            "hi_ns": np.ceil(edges[row_part, 1:]).reshape(-1).astype(I64),
            "count": count,
            "total_ns": total,
        }
    )
    return pd.DataFrame(out)[columns]


def _bin_of(edges: np.ndarray, row: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``searchsorted(edges[row], v, side="right") - 1`` for every value, edges per row.

    Counts the edges at or below each value, in chunks that keep the comparison matrix small.
    """
    out = np.empty(v.size, I64)
    step = max(1, (1 << 22) // edges.shape[1])
    for i in range(0, v.size, step):  # a loop over chunks of millions of gaps, not over gaps
        r, x = row[i : i + step], v[i : i + step]
        out[i : i + step] = (edges[r] <= x[:, None]).sum(axis=1) - 1
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
    part = gaps["part"].to_numpy(I64)
    stream = gaps["stream"].to_numpy(I64)
    prev = codes[gaps["prev"].to_numpy()].astype(I64)
    nxt = codes[gaps["next"].to_numpy()].astype(I64)
    gap = gaps["gap_ns"].to_numpy(I64)
    # groups in (part, stream, prev, next) order, each group's gaps in table order (stable sort)
    srt = lexsort_ints((nxt, prev, stream, part))
    keys = (part[srt], stream[srt], prev[srt], nxt[srt])
    new = np.zeros(srt.size, bool)
    new[0] = True
    for k in keys:
        new[1:] |= k[1:] != k[:-1]
    starts = np.flatnonzero(new)
    group = np.cumsum(new) - 1
    v = gap[srt]
    count = np.diff(np.append(starts, srt.size)).astype(I64)
    total = np.add.reduceat(v, starts).astype(I64)
    # pandas' grouped sample std (its running-update formula: the same floats as before)
    std = pd.Series(v).groupby(group, sort=False).std(ddof=1).fillna(0.0).to_numpy(np.float64)
    p, st, pc, nc = (k[starts] for k in keys)
    rank = string_rank(cats)
    text = text_values(cats)
    order = lexsort_ints((rank[nc], rank[pc], st, -total, p))
    return pd.DataFrame(
        {
            **batch.keys(p[order]),
            "stream": st[order],
            "prev_name": text_column(text, pc[order]),
            "next_name": text_column(text, nc[order]),
            "count": count[order],
            "total_ns": total[order],
            "mean_ns": (total / count)[order],
            "min_ns": np.minimum.reduceat(v, starts)[order].astype(I64),
            "max_ns": np.maximum.reduceat(v, starts)[order].astype(I64),
            "std_ns": std[order],
        }
    )
