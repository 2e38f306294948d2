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

from ..batch import Batch
from ..dtypes import missing_if_negative
from ..groups import I64, first_match, string_rank, sum_by

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


def memop_stats(batch: Batch) -> pd.DataFrame:
    """The ``memops`` table (see the module docstring)."""
    g = batch.gpu
    if not len(g):
        return pd.DataFrame({c: [] for c in MEMOP_COLUMNS})
    is_set = (g["kind"] == "memset").to_numpy(bool)
    sel = (g["kind"] == "memcpy").to_numpy(bool) | is_set | (g["category"] == "memcpy").to_numpy(bool)
    if not sel.any():
        return pd.DataFrame({c: [] for c in MEMOP_COLUMNS})
    m = g.loc[sel]
    is_set = is_set[sel]
    part = m["part"].to_numpy(I64)
    dur = m["end_ns"].to_numpy(I64) - m["start_ns"].to_numpy(I64)
    side = batch.memcpy
    if len(side):
        idx = first_match((side["part"].to_numpy(I64), side["row"].to_numpy(I64)), (part, m["row"].to_numpy(I64)))
        direction = np.asarray(side["copy_kind"].astype(str).to_numpy(dtype=object))
        nbytes = side["bytes"].to_numpy(I64)
        op = np.where(idx >= 0, direction[np.maximum(idx, 0)], "other").astype(object)
        size = np.where(idx >= 0, nbytes[np.maximum(idx, 0)], -1)
    else:
        op = np.full(len(m), "other", dtype=object)
        size = np.full(len(m), -1, I64)
    op = np.where(is_set, "memset", op)
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
    order = np.lexsort((string_rank(res["op"].to_numpy(object)), -res["total_ns"].to_numpy(I64), p))
    return res.iloc[order].reset_index(drop=True)
