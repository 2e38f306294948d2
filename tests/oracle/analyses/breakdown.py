"""GPU time breakdown (SPEC §4): per rank/device, per stream and per step.

With ``∪X`` the union of the intervals of category X (all streams pooled):
``computation = |∪compute|``, ``comm = |∪comm|``, ``exposed_comm = |∪comm − ∪compute|``,
``memcpy = |∪mem|``, ``exposed_memcpy = |∪mem − ∪compute − ∪comm|``, ``busy = |∪all|``,
``total = last end − first start``, ``idle = total − busy``; so
``computation + exposed_comm + exposed_memcpy + idle == total``. ``mem`` is memcpy plus
memset (memset is already ``compute`` in TraceLens mode).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..intervals import measure, merge, overlap, union
from ..prepare import PartData

VALUE_COLUMNS = ("computation_ns", "exposed_comm_ns", "exposed_memcpy_ns", "busy_ns", "idle_ns",
                 "total_ns", "comm_ns", "memcpy_ns")


def breakdown_values(start: np.ndarray, end: np.ndarray, category: np.ndarray) -> dict[str, int]:
    """The eight breakdown values of a set of GPU events.

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
    cat = np.asarray(category, dtype=object)
    comp = union(start[cat == "compute"], end[cat == "compute"])
    comm = union(start[cat == "comm"], end[cat == "comm"])
    memm = (cat == "memcpy") | (cat == "memset")
    mem = union(start[memm], end[memm])
    c, k, m = measure(comp), measure(comm), measure(mem)
    exposed_comm = k - overlap(comm, comp)
    exposed_mem = m - overlap(mem, merge(comp, comm))
    busy = c + exposed_comm + exposed_mem
    total = int(end.max() - start.min())
    return {
        "computation_ns": c, "exposed_comm_ns": exposed_comm, "exposed_memcpy_ns": exposed_mem,
        "busy_ns": busy, "idle_ns": total - busy, "total_ns": total, "comm_ns": k, "memcpy_ns": m,
    }


def _grouped(gpu: pd.DataFrame, key: str) -> tuple[list, list[dict[str, int]], list[int]]:
    keys, rows, counts = [], [], []
    if not len(gpu):
        return keys, rows, counts
    order = np.argsort(gpu[key].to_numpy(), kind="stable")
    g = gpu[key].to_numpy()[order]
    s = gpu["start_ns"].to_numpy()[order]
    e = gpu["end_ns"].to_numpy()[order]
    c = gpu["category"].astype(str).to_numpy()[order]
    bounds = np.flatnonzero(np.diff(g)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(g)]):
        keys.append(g[lo])
        rows.append(breakdown_values(s[lo:hi], e[lo:hi], c[lo:hi]))
        counts.append(int(hi - lo))
    return keys, rows, counts


def _frame(part: PartData, extra: dict[str, list], rows: list[dict[str, int]]) -> pd.DataFrame:
    n = len(rows)
    out = {"rank": np.full(n, part.rank, np.int32), "device": np.full(n, part.device, np.int32)}
    out.update(extra)
    for col in VALUE_COLUMNS:
        out[col] = np.array([r[col] for r in rows], np.int64)
    return pd.DataFrame(out)


def breakdown(part: PartData) -> pd.DataFrame:
    """One row per (rank, device): the breakdown over all its streams."""
    g = part.gpu
    v = breakdown_values(g["start_ns"].to_numpy(), g["end_ns"].to_numpy(), g["category"].astype(str).to_numpy())
    df = _frame(part, {}, [v])
    df["memset_ns"] = np.int64(measure(union(g["start_ns"].to_numpy()[g["kind"].to_numpy() == "memset"],
                                             g["end_ns"].to_numpy()[g["kind"].to_numpy() == "memset"])))
    df["gpu_events"] = np.int64(len(g))
    df["streams"] = np.int64(g["stream"].nunique())
    df["steps"] = np.int64(len(part.steps))
    df["first_ns"] = np.int64(g["start_ns"].min() if len(g) else 0)
    df["last_ns"] = np.int64(g["end_ns"].max() if len(g) else 0)
    df["clipped_events"] = np.int64(part.clipped_events)
    df["clipped_ns"] = np.int64(part.clipped_ns)
    return df


def streams(part: PartData) -> pd.DataFrame:
    """One row per (rank, device, stream): the breakdown of that stream alone."""
    keys, rows, counts = _grouped(part.gpu, "stream")
    df = _frame(part, {"stream": np.array(keys, np.int64)}, rows)
    df["events"] = np.array(counts, np.int64)
    return df


def steps(part: PartData) -> pd.DataFrame:
    """One row per (rank, device, step): the step's GPU span and its breakdown.

    ``step_ns`` is the GPU span of the events assigned to the step (first start to last end);
    ``host_ns`` the length of the step's annotation window.
    """
    g = part.gpu.loc[part.gpu["step"].to_numpy() >= 0]
    keys, rows, counts = _grouped(g, "step")
    df = _frame(part, {"step": np.array(keys, np.int64)}, rows)
    df.insert(3, "step_ns", df["total_ns"].to_numpy())
    win = part.steps.set_index("step")
    df["host_ns"] = (win["end_ns"] - win["start_ns"]).reindex(df["step"]).fillna(0).to_numpy(np.int64)
    df["events"] = np.array(counts, np.int64)
    return df
