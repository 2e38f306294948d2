"""Kernel statistics per (rank, device, name) (SPEC §4 "Kernel statistics and classes").

Only GPU activity counts (kernel, memcpy, memset events on the device); runtime/driver
launch calls are host events and never appear here. Statistics are computed with one
groupby over the name codes; the class of each distinct name comes from
:mod:`dtrace.classify` (once per name).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..prepare import PartData


def kernel_stats(part: PartData) -> pd.DataFrame:
    """count, total, mean, median, min, max, std (population), shares of time and launches."""
    g = part.gpu
    cols = ["rank", "device", "name", "category", "kind", "count", "total_ns", "mean_ns", "median_ns",
            "min_ns", "max_ns", "std_ns", "time_share", "count_share"]
    if not len(g):
        return pd.DataFrame({c: [] for c in cols})
    dur = (g["end_ns"] - g["start_ns"]).to_numpy()
    frame = pd.DataFrame({"name": g["name"].astype(str).to_numpy(), "dur": dur,
                          "category": g["category"].astype(str).to_numpy(), "kind": g["kind"].to_numpy()})
    grp = frame.groupby("name", sort=False, observed=True)
    stats = grp["dur"].agg(["count", "sum", "mean", "median", "min", "max"])
    stats["std"] = grp["dur"].std(ddof=0)
    first = grp[["category", "kind"]].first()
    total = float(dur.sum()) or 1.0
    out = pd.DataFrame({
        "rank": part.rank, "device": part.device,
        "name": stats.index.to_numpy(object),
        "category": first["category"].to_numpy(object),
        "kind": first["kind"].to_numpy(object),
        "count": stats["count"].to_numpy(np.int64),
        "total_ns": stats["sum"].to_numpy(np.int64),
        "mean_ns": stats["mean"].to_numpy(np.float64),
        "median_ns": stats["median"].to_numpy(np.float64),
        "min_ns": stats["min"].to_numpy(np.int64),
        "max_ns": stats["max"].to_numpy(np.int64),
        "std_ns": stats["std"].fillna(0.0).to_numpy(np.float64),
    })
    out["time_share"] = out["total_ns"] / total
    out["count_share"] = out["count"] / max(len(dur), 1)
    return out.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)
