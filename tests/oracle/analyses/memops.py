"""Memory operations per (rank, device, op): copies by direction, and memsets.

``op`` is the copy direction from the part's ``memcpy`` side table (``H2D``, ``D2H``, ``D2D``,
``P2P``, ``H2H``, ``other``; keyed by the event's ``row``), ``memset`` for memsets, and
``other`` for copies the side table does not describe (e.g. ROCm ``__amd_rocclr_copyBuffer``
kernels, which are copies by category but carry no direction). ``bytes`` sums the sizes the
trace states (-1 when it states none); ``bandwidth_bytes_per_s`` divides them by the time of
the events that state a size. Per-iteration figures as in :mod:`dtrace.analyses.kernels`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..prepare import PartData
from .kernels import iterations

MEMOP_COLUMNS = ["rank", "device", "op", "count", "total_ns", "mean_ns", "min_ns", "max_ns", "bytes",
                 "bandwidth_bytes_per_s", "time_share", "iters", "count_per_iter", "total_per_iter_ns"]
OPS = ("H2D", "D2H", "D2D", "P2P", "H2H", "other", "memset")


def memop_stats(part: PartData) -> pd.DataFrame:
    """The ``memops`` table (see the module docstring)."""
    g = part.gpu
    if not len(g):
        return pd.DataFrame({c: [] for c in MEMOP_COLUMNS})
    is_set = (g["kind"] == "memset").to_numpy(bool)
    sel = (g["kind"] == "memcpy").to_numpy(bool) | is_set | (g["category"] == "memcpy").to_numpy(bool)
    if not sel.any():
        return pd.DataFrame({c: [] for c in MEMOP_COLUMNS})
    m = g.loc[sel]
    is_set = is_set[sel]
    dur = (m["end_ns"].to_numpy() - m["start_ns"].to_numpy()).astype(np.int64)
    side = part.memcpy
    if len(side):
        idx = pd.Index(side["row"].to_numpy()).get_indexer(m["row"].to_numpy())
        direction = np.asarray(side["copy_kind"].astype(str).to_numpy(dtype=object))
        nbytes = side["bytes"].to_numpy(np.int64)
        op = np.where(idx >= 0, direction[np.maximum(idx, 0)], "other").astype(object)
        size = np.where(idx >= 0, nbytes[np.maximum(idx, 0)], -1)
    else:
        op = np.full(len(m), "other", dtype=object)
        size = np.full(len(m), -1, np.int64)
    op = np.where(is_set, "memset", op)
    known = size >= 0
    frame = pd.DataFrame({"op": op, "dur": dur, "bytes": np.where(known, size, 0),
                          "known": known.astype(np.int64), "known_dur": np.where(known, dur, 0)})
    grp = frame.groupby("op", sort=True)
    out = grp["dur"].agg(["size", "sum", "min", "max"]).reset_index()
    nbytes = grp["bytes"].sum().to_numpy(np.int64)
    nknown = grp["known"].sum().to_numpy(np.int64)
    kdur = grp["known_dur"].sum().to_numpy(np.float64)
    it = iterations(part)
    all_time = float((g["end_ns"].to_numpy() - g["start_ns"].to_numpy()).sum()) or 1.0
    res = pd.DataFrame({
        "rank": np.int32(part.rank), "device": np.int32(part.device), "op": out["op"].to_numpy(dtype=object),
        "count": out["size"].to_numpy(np.int64), "total_ns": out["sum"].to_numpy(np.int64),
        "mean_ns": out["sum"].to_numpy(np.float64) / out["size"].to_numpy(np.float64),
        "min_ns": out["min"].to_numpy(np.int64), "max_ns": out["max"].to_numpy(np.int64),
        "bytes": np.where(nknown > 0, nbytes, -1),
        "bandwidth_bytes_per_s": np.divide(nbytes * 1e9, kdur, out=np.full(len(out), np.nan),
                                           where=(nknown > 0) & (kdur > 0)),
        "time_share": out["sum"].to_numpy(np.float64) / all_time,
        "iters": np.int64(it),
        "count_per_iter": out["size"].to_numpy(np.float64) / it,
        "total_per_iter_ns": out["sum"].to_numpy(np.float64) / it,
    })
    return res.sort_values(["total_ns", "op"], ascending=[False, True], kind="stable").reset_index(drop=True)
