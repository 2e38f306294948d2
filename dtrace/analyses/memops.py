"""Memory operations per (rank, device, op): copies by direction, and memsets.

``op`` is the copy direction from the part's ``memcpy`` side table (``H2D``, ``D2H``, ``D2D``,
``P2P``, ``H2H``, ``other``; keyed by the event's part and ``row``), ``memset`` for memsets, and
``other`` for copies the side table does not describe (e.g. ROCm ``__amd_rocclr_copyBuffer``
kernels, which are copies by category but carry no direction). ``bytes`` sums the sizes the
trace states (``NA`` when it states none); ``bandwidth_bytes_per_s`` divides them by the time of
the events that state a size. Per-iteration figures as in :mod:`dtrace.analyses.kernels`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.dtypes import missing_if_negative
from ..vector.groups import I64, count_by, dense_codes, first_match, lexsort_ints, string_rank, sum_by, unique_first
from ..vector.intervals import Axis, union
from .batch import Batch
from .timeline import bin_steps, spread, window

MEMOP_COLUMNS = [
    "rank",
    "device",
    "op",
    "count",
    "total_ns",
    "mean_ns",
    "min_ns",
    "max_ns",
    "bytes",
    "bandwidth_bytes_per_s",
    "time_share",
    "iters",
    "count_per_iter",
    "total_per_iter_ns",
]
OPS = ("H2D", "D2H", "D2D", "P2P", "H2H", "other", "memset")


def memop_rows(batch: Batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The memory operations of ``batch.gpu`` (positions), their ``op`` and their stated bytes
    (-1 unknown)."""
    g = batch.gpu
    if not len(g):
        return np.zeros(0, I64), np.array([], object), np.zeros(0, I64)
    is_set = (g["kind"] == "memset").to_numpy(bool)
    rows = np.flatnonzero((g["kind"] == "memcpy").to_numpy(bool) | is_set | (g["category"] == "memcpy").to_numpy(bool))
    part = g["part"].to_numpy(I64)[rows]
    side = batch.memcpy
    if len(side):
        idx = first_match((side["part"].to_numpy(I64), side["row"].to_numpy(I64)), (part, g["row"].to_numpy(I64)[rows]))
        direction = np.asarray(side["copy_kind"].astype(str).to_numpy(dtype=object))
        nbytes = side["bytes"].to_numpy(I64)
        op = np.where(idx >= 0, direction[np.maximum(idx, 0)], "other").astype(object)
        size = np.where(idx >= 0, nbytes[np.maximum(idx, 0)], -1)
    else:
        op = np.full(rows.size, "other", dtype=object)
        size = np.full(rows.size, -1, I64)
    return rows, np.where(is_set[rows], "memset", op).astype(object), size


def memop_stats(batch: Batch) -> pd.DataFrame:
    """The ``memops`` table (see the module docstring)."""
    g = batch.gpu
    rows, op, size = memop_rows(batch)
    if not rows.size:
        return pd.DataFrame({c: [] for c in MEMOP_COLUMNS})
    m = g.iloc[rows]
    part = m["part"].to_numpy(I64)
    dur = m["end_ns"].to_numpy(I64) - m["start_ns"].to_numpy(I64)
    known = size >= 0
    frame = pd.DataFrame(
        {
            "part": part,
            "op": op,
            "dur": dur,
            "bytes": np.where(known, size, 0),
            "known": known.astype(I64),
            "known_dur": np.where(known, dur, 0),
        }
    )
    grp = frame.groupby(["part", "op"], sort=True)
    out = grp["dur"].agg(["size", "sum", "min", "max"]).reset_index()
    nbytes = grp["bytes"].sum().to_numpy(I64)
    nknown = grp["known"].sum().to_numpy(I64)
    kdur = grp["known_dur"].sum().to_numpy(np.float64)
    p = out["part"].to_numpy(I64)
    it = batch.iterations()[p]
    all_time_f = sum_by(
        g["part"].to_numpy(I64), g["end_ns"].to_numpy(I64) - g["start_ns"].to_numpy(I64), batch.n_parts
    ).astype(np.float64)
    res = pd.DataFrame(
        {
            **batch.keys(p),
            "op": out["op"].to_numpy(dtype=object),
            "count": out["size"].to_numpy(I64),
            "total_ns": out["sum"].to_numpy(I64),
            "mean_ns": out["sum"].to_numpy(np.float64) / out["size"].to_numpy(np.float64),
            "min_ns": out["min"].to_numpy(I64),
            "max_ns": out["max"].to_numpy(I64),
            "bytes": missing_if_negative(np.where(nknown > 0, nbytes, -1)),
            "bandwidth_bytes_per_s": np.divide(
                nbytes * 1e9, kdur, out=np.full(len(out), np.nan), where=(nknown > 0) & (kdur > 0)
            ),
            "time_share": out["sum"].to_numpy(np.float64) / np.where(all_time_f > 0, all_time_f, 1.0)[p],
            "iters": it.astype(I64),
            "count_per_iter": out["size"].to_numpy(np.float64) / it,
            "total_per_iter_ns": out["sum"].to_numpy(np.float64) / it,
        }
    )
    order = lexsort_ints((string_rank(res["op"].array), -res["total_ns"].to_numpy(I64), p))
    return res.iloc[order].reset_index(drop=True)


TIMELINE_COLUMNS = [
    "rank",
    "device",
    "op",
    "bin",
    "lo_ns",
    "hi_ns",
    "step",
    "copies",
    "bytes",
    "busy_ns",
    "bandwidth_bytes_per_s",
]


def memcpy_timeline(batch: Batch) -> pd.DataFrame:
    """The ``memcpy_timeline`` table: per (rank, device, op) and bin of the part's timeline
    (:mod:`dtrace.analyses.timeline`), the memory operations that state a size: ``copies``
    starting in the bin, ``bytes`` moved in it (each operation's bytes spread evenly over its
    duration; one of zero duration counts whole in the bin of its start), ``busy_ns`` (the time in
    the bin when at least one of them runs) and ``bandwidth_bytes_per_s = bytes × 10⁹ / busy_ns``
    (the rate achieved while copying; NaN without busy time). Bins without any are left out."""
    rows, op, size = memop_rows(batch)
    known = size >= 0
    rows, op, size = rows[known], op[known], size[known]
    if not rows.size:
        return pd.DataFrame({c: [] for c in TIMELINE_COLUMNS})
    g = batch.gpu
    part = g["part"].to_numpy(I64)[rows]
    s, e = g["start_ns"].to_numpy(I64)[rows], g["end_ns"].to_numpy(I64)[rows]
    op_code, op_names = pd.factorize(op, sort=True)
    grp, n_groups = dense_codes(part, op_code.astype(I64))
    _, gfirst = unique_first(grp)
    gpart, gop = part[gfirst], op_code[gfirst]
    bins = int(batch.options.timeline_bins)
    lo, width = window(batch)
    # each copy over the bins it touches
    ci, cb, a, b = spread(grp, gpart, s, e, lo, width, bins)
    dur = (e - s)[ci]
    ov = np.minimum(e[ci], b) - np.maximum(s[ci], a)
    share = np.where(dur > 0, np.maximum(ov, 0) / np.where(dur > 0, dur, 1), 1.0)
    moved = size[ci] * share
    starts_here = (s[ci] >= a) & (s[ci] < b)
    # the busy time: the union of each group's copies over the same bins
    axis = Axis(np.concatenate([grp, grp]), np.concatenate([s, e]), n_groups)
    us, ue = union(axis.place(s, grp), axis.place(e, grp))
    ug = axis.group_of(us)
    us, ue = us - axis.shift[ug], ue - axis.shift[ug]
    ui, ub, ua, ubb = spread(ug, gpart, us, ue, lo, width, bins)
    busy = np.maximum(np.minimum(ue[ui], ubb) - np.maximum(us[ui], ua), 0)
    cell_g = np.concatenate([grp[ci], ug[ui]])
    cell_b = np.concatenate([cb, ub])
    code, n_cells = dense_codes(cell_g, cell_b)
    _, cfirst = unique_first(code)
    k = code.size - ub.size  # the first busy entry
    cg, cbin = cell_g[cfirst], cell_b[cfirst]
    cp = gpart[cg]
    nbytes = np.bincount(code[:k], moved, n_cells)
    busy_ns = sum_by(code[k:], busy, n_cells)
    lo_ns = lo[cp] + cbin * width[cp]
    return pd.DataFrame(
        {
            **batch.keys(cp),
            "op": np.asarray(op_names, dtype=object)[gop[cg]],
            "bin": cbin,
            "lo_ns": lo_ns,
            "hi_ns": lo_ns + width[cp],
            "step": bin_steps(batch, cp, cbin),
            "copies": count_by(code[:k][starts_here], n_cells),
            "bytes": nbytes,
            "busy_ns": busy_ns,
            "bandwidth_bytes_per_s": np.divide(nbytes * 1e9, busy_ns, out=np.full(n_cells, np.nan), where=busy_ns > 0),
        }
    )
