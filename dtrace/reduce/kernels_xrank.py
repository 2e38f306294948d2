"""Cross-rank views of kernels and classes, and pooling of per-part statistics.

Reducers (run on the client over the concatenated small per-part tables):

- ``kernels_xrank``: per kernel name, the number of (rank, device) parts that ran it, and the
  sum, mean, min and max of its per-part total time over those parts, with the rank (and
  device) holding the max and the min; pooled count, mean and sample std of its durations.
- ``classes_xrank``: the same per class.

:func:`pool` combines per-part (count, mean, std) rows of the same key exactly: the pooled
sample variance is ``(Σ[(n_i − 1)s_i² + n_i m_i²] − N·M²) / (N − 1)``. Medians do not pool and
are left out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.dtypes import NI64, as_declared, conform, empty_frame
from ..options import Options

#: totals over the parts where a kernel (or class) ran, and the parts that spent the most and least on it
_SPREAD = {
    "parts": "int64",
    "count": "int64",
    "total_ns": "int64",
    "total_ns_mean": "int64",
    "total_ns_min": "int64",
    "total_ns_max": "int64",
    "max_rank": "int32",
    "max_device": "int32",
    "min_rank": "int32",
    "min_device": "int32",
    "mean_ns": "int64",
}
KERNELS_XRANK_COLUMNS = {
    "name": "object",
    "class": "object",
    "category": "object",
    **_SPREAD,
    "std_ns": "Int64",
    "min_ns": "Int64",
    "max_ns": "Int64",
    "time_share": "float64",
}
CLASSES_XRANK_COLUMNS = {"class": "object", **_SPREAD, "time_share": "float64"}


def pool(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Pool per-part duration statistics of equal ``keys``: count and total add up, min/max
    combine, mean = total / count, std = pooled sample std (0 for a single event); mean and std
    in whole ns (rounded half to even).

    ``df`` needs ``count``, ``total_ns``, ``std_ns``, ``min_ns``, ``max_ns``. Each part's mean is
    its exact ``total_ns / count`` (the table's ``mean_ns`` is rounded to whole ns); ``std_ns``,
    ``min_ns`` or ``max_ns`` missing (``NA``: an ``nsys stats`` summary without them) in any
    part of a key make that key's pooled value ``NaN``.

    Examples
    --------
    >>> df = pd.DataFrame({"k": ["a", "a"], "count": [2, 3], "total_ns": [4, 15],
    ...                    "std_ns": [np.sqrt(2.0), 1.0], "min_ns": [1, 4], "max_ns": [3, 6]})
    >>> r = pool(df, ["k"])      # values 1, 3 and 4, 5, 6
    >>> r[["count", "total_ns", "min_ns", "max_ns"]].values.tolist(), int(r["mean_ns"][0]), int(r["std_ns"][0])
    ([[5, 19, 1, 6]], 4, 2)
    """
    n = df["count"].to_numpy(np.float64)
    m = df["total_ns"].to_numpy(np.float64) / np.maximum(n, 1)
    s = df["std_ns"].to_numpy(np.float64, na_value=np.nan)
    work = df[keys].copy()
    work["count"] = df["count"].to_numpy(np.int64)
    work["total_ns"] = df["total_ns"].to_numpy(np.int64)
    work["min_ns"] = df["min_ns"].to_numpy(np.float64, na_value=np.nan)
    work["max_ns"] = df["max_ns"].to_numpy(np.float64, na_value=np.nan)
    work["_ss"] = (n - 1) * s * s + n * m * m
    g = work.groupby(keys, sort=False, dropna=False)
    out = g.agg(count=("count", "sum"), total_ns=("total_ns", "sum")).reset_index()
    out["min_ns"] = as_declared(g["min_ns"].min(skipna=False), NI64)  # durations: exact in float64
    out["max_ns"] = as_declared(g["max_ns"].max(skipna=False), NI64)
    out["_ss"] = g["_ss"].sum(skipna=False).to_numpy()
    big_n = out["count"].to_numpy(np.float64)
    mean = out["total_ns"].to_numpy(np.float64) / np.maximum(big_n, 1)
    var = np.divide(out["_ss"].to_numpy() - big_n * mean * mean, big_n - 1, out=np.zeros(len(out)), where=big_n > 1)
    out["mean_ns"] = as_declared(pd.Series(mean), "int64")  # whole ns, rounded half to even
    out["std_ns"] = as_declared(pd.Series(np.sqrt(np.maximum(var, 0.0))), NI64)
    return out.drop(columns="_ss")


def _spread(df: pd.DataFrame, key: str) -> pd.DataFrame:
    """Per ``key``: parts, sum/mean/min/max of per-part totals and where the max and min are."""
    g = df.groupby(key, sort=False)
    out = g.agg(
        parts=("total_ns", "size"),
        count=("count", "sum"),
        total_ns=("total_ns", "sum"),
        total_ns_mean=("total_ns", "mean"),
        total_ns_min=("total_ns", "min"),
        total_ns_max=("total_ns", "max"),
    )
    imax = g["total_ns"].idxmax()
    imin = g["total_ns"].idxmin()
    out["max_rank"] = df.loc[imax.to_numpy(), "rank"].to_numpy(np.int32)
    out["max_device"] = df.loc[imax.to_numpy(), "device"].to_numpy(np.int32)
    out["min_rank"] = df.loc[imin.to_numpy(), "rank"].to_numpy(np.int32)
    out["min_device"] = df.loc[imin.to_numpy(), "device"].to_numpy(np.int32)
    return out.reset_index()


def kernels_xrank(tables: dict[str, pd.DataFrame], options: Options) -> dict[str, pd.DataFrame]:
    """The ``kernels_xrank`` and ``classes_xrank`` tables (see the module docstring)."""
    out = {}
    k = tables.get("kernels")
    if k is None or not len(k):
        out["kernels_xrank"] = empty_frame(KERNELS_XRANK_COLUMNS)
    else:
        k = k.reset_index(drop=True)
        spread = _spread(k, "name")
        pooled = pool(k, ["name"]).set_index("name")
        first = k.groupby("name", sort=False)[["class", "category"]].first()
        res = spread.set_index("name")
        res["class"] = first["class"]
        res["category"] = first["category"]
        for col in ("mean_ns", "std_ns", "min_ns", "max_ns"):
            res[col] = pooled[col]
        res["time_share"] = res["total_ns"] / max(float(k["total_ns"].sum()), 1.0)
        res = res.reset_index()
        out["kernels_xrank"] = (
            _typed(res, KERNELS_XRANK_COLUMNS)
            .sort_values(["total_ns", "name"], ascending=[False, True], kind="stable")
            .reset_index(drop=True)
        )
    c = tables.get("classes")
    if c is None or not len(c):
        out["classes_xrank"] = empty_frame(CLASSES_XRANK_COLUMNS)
    else:
        c = c.reset_index(drop=True)
        res = _spread(c, "class")
        res["mean_ns"] = res["total_ns"] / res["count"].clip(lower=1)
        res["time_share"] = res["total_ns"] / max(float(c["total_ns"].sum()), 1.0)
        out["classes_xrank"] = (
            _typed(res, CLASSES_XRANK_COLUMNS)
            .sort_values(["total_ns", "class"], ascending=[False, True], kind="stable")
            .reset_index(drop=True)
        )
    return out


def _typed(df: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    return conform(df[list(columns)], columns, "kernels_xrank")
