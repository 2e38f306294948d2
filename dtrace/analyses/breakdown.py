"""GPU time breakdown: per rank/device, per stream and per step, for every part of a partition.

With ``∪X`` the union of the intervals of category X (all streams pooled):
``computation = |∪compute|``, ``comm = |∪comm|``, ``exposed_comm = |∪comm − ∪compute|``,
``memcpy = |∪mem|``, ``exposed_memcpy = |∪mem − ∪compute − ∪comm|``, ``busy = |∪all|``,
``total = last end − first start``, ``idle = total − busy``; so
``computation + exposed_comm + exposed_memcpy + idle == total``. ``mem`` is memcpy plus
memset (memset is already ``compute`` in TraceLens mode).

Notes on the algorithm: every group (a part, a (part, stream) or a (part, step)) is laid side by
side on one :class:`~dtrace.vector.intervals.Axis`, so each union, overlap and measure is one numpy pass
over all groups at once, with the lengths of each group summed back by position.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..vector.groups import I64, count_by, dense_codes, first_match, max_by, min_by, unique_first
from ..vector.intervals import Axis, measure, measure_by, merge, overlap, overlap_by, union
from .batch import Batch

VALUE_COLUMNS = (
    "computation_ns",
    "exposed_comm_ns",
    "exposed_memcpy_ns",
    "busy_ns",
    "idle_ns",
    "total_ns",
    "comm_ns",
    "memcpy_ns",
)
_MEM = ("memcpy", "memset")


def breakdown_values(start: np.ndarray, end: np.ndarray, category: np.ndarray) -> dict[str, int]:
    """The eight breakdown values of one set of GPU events.

    Examples
    --------
    >>> import numpy as np
    >>> v = breakdown_values(np.array([0, 5, 20]), np.array([10, 15, 30]),
    ...                      np.array(["compute", "comm", "memcpy"]))
    >>> v["computation_ns"], v["exposed_comm_ns"], v["exposed_memcpy_ns"], v["idle_ns"], v["total_ns"]
    (10, 5, 10, 5, 30)
    """
    if len(start) == 0:
        return dict.fromkeys(VALUE_COLUMNS, 0)
    is_comp, is_comm, is_mem = category_masks(category)
    comp = union(start[is_comp], end[is_comp])
    comm = union(start[is_comm], end[is_comm])
    mem = union(start[is_mem], end[is_mem])
    c, k, m = measure(comp), measure(comm), measure(mem)
    exposed_comm = k - overlap(comm, comp)
    exposed_mem = m - overlap(mem, merge(comp, comm))
    busy = c + exposed_comm + exposed_mem
    total = int(end.max() - start.min())
    return _figures(c, k, m, exposed_comm, exposed_mem, busy, total)


def category_masks(category: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masks of the compute, comm and memory (memcpy + memset) events of a category column
    (a categorical: compares codes, no string per event; or plain strings)."""
    if isinstance(category, (pd.Categorical, pd.Series)) and isinstance(category.dtype, pd.CategoricalDtype):
        cat = pd.Categorical(category)
        names = np.asarray(cat.categories, dtype=object)
        code = np.asarray(cat.codes)

        def sel(*want: str) -> np.ndarray:
            return np.isin(code, [i for i, c in enumerate(names) if c in want])

        return sel("compute"), sel("comm"), sel(*_MEM)
    c = np.asarray(category, dtype=object)
    return c == "compute", c == "comm", np.isin(c, _MEM)


def grouped_breakdown(
    group: np.ndarray, start: np.ndarray, end: np.ndarray, category: pd.Categorical, n_groups: int
) -> dict[str, np.ndarray]:
    """The breakdown values of every group of GPU events at once (int64 arrays of ``n_groups``).

    Empty groups get zeros. ``category`` is the categorical ``category`` column.

    Examples
    --------
    >>> cat = pd.Categorical(["compute", "comm", "memcpy", "comm"], categories=["compute", "comm", "memcpy"])
    >>> v = grouped_breakdown(np.array([0, 0, 0, 1]), np.array([0, 5, 20, 0]), np.array([10, 15, 30, 4]), cat, 2)
    >>> v["computation_ns"].tolist(), v["exposed_comm_ns"].tolist(), v["idle_ns"].tolist()
    ([10, 0], [5, 4], [5, 0])
    """
    group = np.asarray(group, I64)
    axis = Axis(np.concatenate([group, group]), np.concatenate([start, end]), n_groups)
    vs, ve = axis.place(start, group), axis.place(end, group)
    is_comp, is_comm, is_mem = category_masks(category)
    comp = union(vs[is_comp], ve[is_comp])
    comm = union(vs[is_comm], ve[is_comm])
    mem = union(vs[is_mem], ve[is_mem])
    c, k, m = measure_by(comp, axis), measure_by(comm, axis), measure_by(mem, axis)
    exposed_comm = k - overlap_by(comm, comp, axis)
    exposed_mem = m - overlap_by(mem, merge(comp, comm), axis)
    busy = c + exposed_comm + exposed_mem
    big = np.iinfo(np.int64).max
    lo = min_by(group, start, n_groups, big)
    hi = max_by(group, end, n_groups, -big - 1)
    total = np.where(lo <= hi, hi - lo, 0).astype(I64)
    return _figures(c, k, m, exposed_comm, exposed_mem, busy, total)


def _values(g: pd.DataFrame, group: np.ndarray, n: int) -> dict[str, np.ndarray]:
    return grouped_breakdown(group, g["start_ns"].to_numpy(I64), g["end_ns"].to_numpy(I64), g["category"].array, n)


def breakdown(batch: Batch) -> pd.DataFrame:
    """One row per (rank, device): the breakdown over all its streams."""
    g = batch.gpu
    n = batch.n_parts
    gp = g["part"].to_numpy(I64)
    start, end = g["start_ns"].to_numpy(I64), g["end_ns"].to_numpy(I64)
    df = pd.DataFrame({**batch.keys(np.arange(n)), **_values(g, gp, n)})
    if batch.options.compat == "tracelens":
        session_total(df, batch.parts)
    is_set = (g["kind"] == "memset").to_numpy(bool)
    axis = Axis(np.concatenate([gp[is_set], gp[is_set]]), np.concatenate([start[is_set], end[is_set]]), n)
    df["memset_ns"] = measure_by(
        union(axis.place(start[is_set], gp[is_set]), axis.place(end[is_set], gp[is_set])), axis
    )
    df["gpu_events"] = count_by(gp, n)
    _, streams = unique_first(dense_codes(gp, g["stream"].to_numpy(I64))[0])
    df["streams"] = count_by(gp[streams], n)
    df["steps"] = batch.parts["steps"].to_numpy(I64)
    big = np.iinfo(np.int64).max
    first = min_by(gp, start, n, big)
    last = max_by(gp, end, n, -big - 1)
    df["first_ns"] = np.where(first <= last, first, 0)
    df["last_ns"] = np.where(first <= last, last, 0)
    df["clipped_events"] = batch.parts["clipped_events"].to_numpy(I64)
    df["clipped_ns"] = batch.parts["clipped_ns"].to_numpy(I64)
    df["comm_overlap_share"] = overlap_share(df["comm_ns"].to_numpy(I64), df["exposed_comm_ns"].to_numpy(I64))
    return df


def overlap_share(comm_ns: np.ndarray, exposed_comm_ns: np.ndarray) -> np.ndarray:
    """The share of the communication time that computation hides, HTA's "comm/comp overlap":
    ``(|∪comm| − |∪comm − ∪compute|) / |∪comm|`` (NaN without communication).

    Examples
    --------
    >>> overlap_share(np.array([100, 0]), np.array([25, 0])).tolist()
    [0.75, nan]
    """
    comm = comm_ns.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(comm > 0, (comm - exposed_comm_ns) / comm, np.nan)


def session_total(df: pd.DataFrame, parts: pd.DataFrame) -> None:
    """TraceLens's total of a trace that records its profiling session (rocprofv3): the session
    (``fini_time - init_time``), not the GPU span; idle follows (``total - busy``). In place, on
    the per-part rows of ``df``; parts without a session keep the GPU span."""
    if "session_start_ns" not in parts.columns:
        return
    s = parts["session_start_ns"].to_numpy(I64)
    e = parts["session_end_ns"].to_numpy(I64)
    known = (s >= 0) & (e >= s)
    total = np.where(known, e - s, df["total_ns"].to_numpy(I64))
    df["total_ns"] = total
    df["idle_ns"] = total - df["busy_ns"].to_numpy(I64)


def _by_key(batch: Batch, g: pd.DataFrame, key: str) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Rows per (part, ``key``) present in ``g`` (sorted), with the breakdown of each; also the
    number of events and the part of each row."""
    gp = g["part"].to_numpy(I64)
    kv = g[key].to_numpy(I64)
    code, n = dense_codes(gp, kv)
    first = unique_first(code)[1]
    df = pd.DataFrame({**batch.keys(gp[first]), key: kv[first]})
    for col, v in _values(g, code, n).items():
        df[col] = v
    return df, count_by(code, n), gp[first]


def streams(batch: Batch) -> pd.DataFrame:
    """One row per (rank, device, stream): the breakdown of that stream alone."""
    df, counts, _ = _by_key(batch, batch.gpu, "stream")
    df["events"] = counts
    return df


def steps(batch: Batch) -> pd.DataFrame:
    """One row per (rank, device, step): the step's GPU span and its breakdown.

    ``step_ns`` is the GPU span of the events assigned to the step (first start to last end);
    ``host_ns`` the length of the step's annotation window.
    """
    g = batch.gpu.loc[batch.gpu["step"].to_numpy() >= 0]
    df, counts, parts = _by_key(batch, g, "step")
    df.insert(3, "step_ns", df["total_ns"].to_numpy())
    w = batch.steps
    j = first_match((w["part"].to_numpy(I64), w["step"].to_numpy(I64)), (parts, df["step"].to_numpy(I64)))
    length = (w["end_ns"] - w["start_ns"]).to_numpy(I64)
    df["host_ns"] = np.where(j >= 0, length[np.maximum(j, 0)] if len(length) else 0, 0).astype(I64)
    df["events"] = counts
    df["comm_overlap_share"] = overlap_share(df["comm_ns"].to_numpy(I64), df["exposed_comm_ns"].to_numpy(I64))
    return df


def _figures(
    computation: Any, comm: Any, memcpy: Any, exposed_comm: Any, exposed_memcpy: Any, busy: Any, total: Any
) -> dict[str, Any]:
    """The breakdown's columns (scalars for one part or arrays for many): idle is what is not busy."""
    return {
        "computation_ns": computation,
        "exposed_comm_ns": exposed_comm,
        "exposed_memcpy_ns": exposed_memcpy,
        "busy_ns": busy,
        "idle_ns": total - busy,
        "total_ns": total,
        "comm_ns": comm,
        "memcpy_ns": memcpy,
    }
