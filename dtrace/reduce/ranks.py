"""The ``ranks`` table (docs/semantics.md, "Ranks and stragglers"): per-rank metrics and robust z-scores.

One row per (rank, device) with

- ``step_ns``: the median of the rank's per-step GPU spans (``steps`` table); the trace's GPU
  span (``total_ns``) when it has no steps;
- ``computation_ns``, ``exposed_comm_ns``, ``exposed_memcpy_ns``, ``idle_ns``, ``busy_ns``,
  ``total_ns``, ``comm_ns`` from ``breakdown``;
- ``host_wait_ns`` (the GPU's idle time the host caused: its device gaps of cause ``host_wait``)
  when ``device_gaps`` exists;
- ``class_<name>_ns`` per kernel class when ``classes`` exists;
- ``collective_wait_ns`` (time spent waiting for later ranks in matched collectives),
  ``collectives`` and ``arrived_last`` (instances it joined last) from the matched ``collectives``.

For every metric ``m`` a column ``m_z = (m − median) / (1.4826·MAD)``, the robust z-score across
ranks. When the MAD is 0 (more than half the ranks share one value) the mean absolute deviation
× 1.2533 is the scale instead (both estimate σ for normal data); when that is 0 too every
rank has the same value and the z-score is 0. ``rank_stats`` holds one row per metric: median,
MAD, the scale used, min, max and the rank with the max.
"""

from __future__ import annotations

import re
from typing import Callable, cast

import numpy as np
import pandas as pd

from ..core.dtypes import empty_frame
from ..options import Options

KEYS = ["rank", "device"]
BREAKDOWN_METRICS = (
    "computation_ns",
    "exposed_comm_ns",
    "exposed_memcpy_ns",
    "idle_ns",
    "busy_ns",
    "total_ns",
    "comm_ns",
)
STATS_COLUMNS = {
    "metric": object,
    "median": "float64",
    "mad": "float64",
    "scale": "float64",
    "min": "float64",
    "max": "float64",
    "max_rank": "Int64",
}


def robust_scale(x: np.ndarray) -> tuple[float, float, float]:
    """``(median, MAD, scale)`` of ``x`` with the MAD-zero fallback described in the module docs.

    Examples
    --------
    >>> robust_scale(np.array([1.0, 2.0, 3.0, 4.0, 100.0]))
    (3.0, 1.0, 1.4826)
    """
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if not len(x):
        return 0.0, 0.0, 0.0
    med = float(np.median(x))
    mad = float(np.median(np.abs(x - med)))
    scale = 1.4826 * mad
    if scale == 0.0:
        scale = 1.2533 * float(np.mean(np.abs(x - med)))
    return med, mad, scale


def robust_z(x: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """Robust z-scores ``(x − median) / scale`` with ``scale >= floor``; 0 where the scale is 0.

    Examples
    --------
    >>> robust_z(np.array([10.0, 11.0, 9.0, 10.0, 30.0])).round(2).tolist()
    [0.0, 0.67, -0.67, 0.0, 13.49]
    """
    x = np.asarray(x, dtype=np.float64)
    med, _mad, scale = robust_scale(x)
    scale = max(scale, floor)
    if scale == 0.0:
        return np.zeros(len(x))
    return (x - med) / scale


def peer_z(x: np.ndarray, floor: float | np.ndarray = 0.0) -> np.ndarray:
    """Each value's robust z-score against its *peers*: ``(x − median of the others) / scale``, the
    scale the others' ``1.4826·MAD`` and at least ``floor`` (0 where the scale is 0).

    Leaving the value out keeps a lone outlier from widening the scale it is divided by: among
    three identical peers their MAD is 0, so a rank 3× slower is ``(3 − 1) / floor`` away, where the
    plain z-score (whose fallback scale includes the outlier) caps it at ``n / 1.2533``. With more
    than :data:`PEER_EXACT` values one value moves the median and MAD by less than their noise, and
    the scale of all values is used for every value.

    Examples
    --------
    >>> peer_z(np.array([1.0, 1.0, 1.0, 3.0]), floor=0.01).round(1).tolist()
    [0.0, 0.0, 0.0, 200.0]
    >>> peer_z(np.array([10.0, 12.0])).tolist()  # one peer: its MAD is 0 and no floor
    [0.0, 0.0]
    """
    x = np.asarray(x, dtype=np.float64)
    n = len(x)
    fl = np.broadcast_to(np.asarray(floor, dtype=np.float64), x.shape)
    if n < 2:
        return np.zeros(n)
    if n > PEER_EXACT:
        med, mad, _scale = robust_scale(x)
        scale = np.maximum(1.4826 * mad, fl)
        return np.divide(x - med, scale, out=np.zeros(n), where=scale > 0)
    others = np.broadcast_to(x, (n, n))[~np.eye(n, dtype=bool)].reshape(n, n - 1)
    med = np.median(others, axis=1)
    mad = np.median(np.abs(others - med[:, None]), axis=1)
    scale = np.maximum(1.4826 * mad, fl)
    return cast(np.ndarray, np.divide(x - med, scale, out=np.zeros(n), where=scale > 0))


PEER_EXACT = 64
"""Up to this many values :func:`peer_z` leaves each one out of its own median and scale."""

FALSE_FLAG_RATE = 0.01
"""The chance a fault-free job of normal noise flags any rank on one signal (:func:`z_threshold`)."""


def z_threshold(n: int, base: float = 5.0) -> float:
    """The z-score a rank must reach to be flagged among ``n`` ranks: ``base``, or more where ``n``
    draws of normal noise would reach it by chance: ``sqrt(2 ln(n / FALSE_FLAG_RATE))``, an upper
    bound of the largest of ``n`` normal z-scores at that rate (5.0 up to ~2,600 ranks, 5.35 at
    16,384, 5.68 at 100,000).

    Examples
    --------
    >>> z_threshold(16), round(z_threshold(16_384), 2), round(z_threshold(100_000), 2)
    (5.0, 5.35, 5.68)
    """
    return max(base, float(np.sqrt(2.0 * np.log(max(int(n), 1) / FALSE_FLAG_RATE))))


def _class_column(name: str) -> str:
    return "class_" + (re.sub(r"[^0-9a-zA-Z]+", "_", str(name)).strip("_").lower() or "unnamed") + "_ns"


def rank_metrics(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per-(rank, device) metrics from the per-rank tables (no z-scores)."""
    bd = tables.get("breakdown")
    if bd is None or not len(bd):
        return empty_frame(KEYS, "int32")
    out = bd[KEYS + [c for c in BREAKDOWN_METRICS if c in bd.columns]].drop_duplicates(KEYS)
    out = out.sort_values(KEYS, kind="stable").reset_index(drop=True)
    idx = pd.MultiIndex.from_frame(out[KEYS])

    def per_rank(series: pd.Series, fill: float = 0) -> np.ndarray:
        return cast(np.ndarray, series.reindex(idx).fillna(fill).to_numpy())

    step_ns, n_steps = _step_columns(out, tables.get("steps"), per_rank)
    out.insert(2, "step_ns", step_ns)
    out.insert(3, "steps", n_steps)
    gaps = tables.get("device_gaps")
    if gaps is not None and len(gaps) and "host_wait_ns" in gaps.columns:
        out["host_wait_ns"] = per_rank(gaps.groupby(KEYS)["host_wait_ns"].sum()).astype(np.int64)
    coll = tables.get("collectives")
    if coll is not None and len(coll) and "wait_ns" in coll.columns:
        shared = coll.loc[coll["ranks"].to_numpy() >= 2]
        g = shared.groupby(KEYS)
        out["collective_wait_ns"] = per_rank(g["wait_ns"].sum()).astype(np.int64)
        out["collectives"] = per_rank(g.size()).astype(np.int64)
        out["arrived_last"] = per_rank(g["last"].sum()).astype(np.int64)
    classes = tables.get("classes")
    if classes is not None and len(classes) and "class" in classes.columns:
        out = pd.concat([out, _class_times(classes, idx, out.index)], axis=1)
    return out


def _step_columns(
    out: pd.DataFrame, steps: pd.DataFrame | None, per_rank: Callable[[pd.Series, float], np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Each part's median step time (its whole timeline without steps) and number of steps."""
    if steps is None or not len(steps):
        return out["total_ns"].to_numpy(np.int64), np.zeros(len(out), np.int64)
    step_ns = per_rank(steps.groupby(KEYS)["step_ns"].median(), np.nan)
    return (
        np.where(np.isnan(step_ns), out["total_ns"].to_numpy(), step_ns).astype(np.int64),
        per_rank(steps.groupby(KEYS).size(), 0).astype(np.int64),
    )


def _class_times(classes: pd.DataFrame, idx: pd.MultiIndex, index: pd.Index) -> pd.DataFrame:
    """Per (rank, device) of ``idx``, the time of each kernel class (``class_<name>_ns``; classes
    whose column names coincide are summed)."""
    wide = classes.pivot_table(index=KEYS, columns="class", values="total_ns", aggfunc="sum", fill_value=0)
    wide = wide.reindex(idx).fillna(0)
    cols: dict[str, np.ndarray] = {}
    for c in wide.columns:
        name = _class_column(c)
        cols[name] = cols.get(name, 0) + wide[c].to_numpy(np.int64)
    return pd.DataFrame(cols, index=index)


def reduce_ranks(tables: dict[str, pd.DataFrame], options: Options) -> dict[str, pd.DataFrame]:
    """The ``ranks`` and ``rank_stats`` tables (see the module docstring)."""
    metrics = rank_metrics(tables)
    names = [c for c in metrics.columns if c not in KEYS and pd.api.types.is_numeric_dtype(metrics[c])]
    z = {}
    stats = []
    for m in names:
        x = metrics[m].to_numpy(np.float64)
        med, mad, scale = robust_scale(x)
        z[f"{m}_z"] = robust_z(x)
        imax = int(np.argmax(x)) if len(x) else -1
        stats.append(
            {
                "metric": m,
                "median": med,
                "mad": mad,
                "scale": scale,
                "min": float(x.min()) if len(x) else 0.0,
                "max": float(x.max()) if len(x) else 0.0,
                "max_rank": int(metrics["rank"].iloc[imax]) if imax >= 0 else pd.NA,
            }
        )
    ranks = pd.concat([metrics, pd.DataFrame(z, index=metrics.index)], axis=1) if z else metrics
    rank_stats = pd.DataFrame(stats).astype({"max_rank": "Int64"}) if stats else empty_frame(STATS_COLUMNS)
    return {"ranks": ranks, "rank_stats": rank_stats}
