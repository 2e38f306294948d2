"""Host ops across ranks: ``ops_xrank`` (one row per op) and ``op_outliers`` (rank vs median).

``ops_xrank`` — per op (name and ``launcher_kind``: a ``cpu_op``, or a ``runtime`` launch call
outside every cpu_op, see :mod:`dtrace.analyses.ops`) over all (rank, device) parts that ran it: ``parts``, total
``count``, ``host_ns``, ``gpu_direct_ns``, ``gpu_subtree_ns``, ``kernels``; the spread of the
per-part GPU time (``gpu_subtree_ns``): ``median_gpu_ns``, ``min_gpu_ns``, ``max_gpu_ns`` and
the part holding the maximum (``max_rank``, ``max_device``), ``spread = max / median``.

``op_outliers`` — one row per (rank, device, op) for ops with GPU time that at least two parts
ran: ``gpu_ns`` (the part's ``gpu_subtree_ns``), ``median_gpu_ns`` (median over those parts),
``ratio = gpu_ns / median_gpu_ns`` (> 1: slower than the median rank), ``excess_ns = gpu_ns −
median``, ``count`` and ``median_count`` (was it slower or did it run more often?), the robust
z-score ``z = (gpu_ns − median) / (1.4826·MAD)`` (inf where MAD is 0 and the value differs),
``parts`` and ``comm`` (the op is a collective: :data:`COMM_OPS`). The straggler evidence reads it
as "``aten::mm`` takes 1.15× the median rank's GPU time on rank 37".

Order: compute ops first, by ``excess_ns`` (largest first), then communication ops, by
``excess_ns``. A collective's GPU time includes the wait for the last rank to arrive, so one slow
rank inflates ``c10d::allreduce_`` on every *other* rank (the victims) — usually by more than the
culprit's own slow compute op — while the culprit, which waits least, shows none. Communication
ops are kept (a slow link does show there) but never outrank the compute op of a straggler.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..core.dtypes import conform, empty_frame
from ..options import Options

Tables = dict[str, pd.DataFrame]

XRANK_COLUMNS = {
    "op": "object",
    "launcher_kind": "object",
    "parts": "int64",
    "count": "int64",
    "host_ns": "int64",
    "gpu_direct_ns": "int64",
    "gpu_subtree_ns": "int64",
    "kernels": "int64",
    "median_gpu_ns": "int64",
    "min_gpu_ns": "int64",
    "max_gpu_ns": "int64",
    "max_rank": "int32",
    "max_device": "int32",
    "spread": "float64",
}
OUTLIER_COLUMNS = {
    "rank": "int32",
    "device": "int32",
    "op": "object",
    "gpu_ns": "int64",
    "median_gpu_ns": "int64",
    "ratio": "float64",
    "excess_ns": "int64",
    "count": "int64",
    "median_count": "float64",
    "z": "float64",
    "parts": "int64",
    "comm": "bool",
}
MAD_SCALE = 1.4826
COMM_OPS = (
    r"c10d::|_c10d_functional|nccl|rccl|gloo|record_param_comms|processgroup|all_?reduce|all_?gather"
    r"|reduce_?scatter|all_?to_?all|barrier|wait_tensor"
)
"""Host ops that are collectives or wait for one (case-insensitive ``re.search`` on the op name)."""


def is_comm_op(names: pd.Series) -> np.ndarray:
    """Which op names are collectives (:data:`COMM_OPS`), decided once per distinct name.

    Examples
    --------
    >>> is_comm_op(pd.Series(["c10d::allreduce_", "aten::mm", "nccl:all_gather", "aten::mm"])).tolist()
    [True, False, True, False]
    """
    codes, uniq = pd.factorize(names.astype(str), sort=False)
    rx = re.compile(COMM_OPS, re.I)
    return np.array([bool(rx.search(u)) for u in uniq], bool)[codes] if len(codes) else np.zeros(0, bool)


def ops_xrank(tables: Tables, options: Options) -> Tables:
    """Cross-rank aggregates of the ``ops`` table (see the module docstring)."""
    ops = tables.get("ops")
    if ops is None or not len(ops):
        return {"ops_xrank": empty_frame(XRANK_COLUMNS), "op_outliers": empty_frame(OUTLIER_COLUMNS)}
    if "launcher_kind" not in ops.columns:  # a table written before launchers had kinds
        ops = ops.assign(launcher_kind="cpu_op")
    keys = ["op", "launcher_kind"]
    g = ops.groupby(keys, sort=False)
    agg = g.agg(
        parts=("rank", "size"),
        count=("count", "sum"),
        host_ns=("host_ns", "sum"),
        gpu_direct_ns=("gpu_direct_ns", "sum"),
        gpu_subtree_ns=("gpu_subtree_ns", "sum"),
        kernels=("kernels", "sum"),
        median_gpu_ns=("gpu_subtree_ns", "median"),
        min_gpu_ns=("gpu_subtree_ns", "min"),
        max_gpu_ns=("gpu_subtree_ns", "max"),
    )
    at_max = ops.loc[g["gpu_subtree_ns"].idxmax().to_numpy(), [*keys, "rank", "device"]].set_index(keys)
    agg["max_rank"] = at_max["rank"].reindex(agg.index).to_numpy(np.int32)
    agg["max_device"] = at_max["device"].reindex(agg.index).to_numpy(np.int32)
    med = agg["median_gpu_ns"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        agg["spread"] = np.where(med > 0, agg["max_gpu_ns"].to_numpy(np.float64) / np.where(med > 0, med, 1), np.nan)
    xr = agg.reset_index().sort_values(["gpu_subtree_ns", *keys], ascending=[False, True, True], kind="stable")
    xr = conform(xr[list(XRANK_COLUMNS)], XRANK_COLUMNS, "ops_xrank")
    return {"ops_xrank": xr.reset_index(drop=True), "op_outliers": op_outliers(ops)}


def op_outliers(ops: pd.DataFrame) -> pd.DataFrame:
    """Each part's GPU time per op against the median part's (see the module docstring)."""
    f = ops.loc[ops["gpu_subtree_ns"].to_numpy() > 0, ["rank", "device", "op", "gpu_subtree_ns", "count"]]
    f = f.rename(columns={"gpu_subtree_ns": "gpu_ns"})
    g = f.groupby("op", sort=False)
    f = f.assign(parts=g["gpu_ns"].transform("size").to_numpy(np.int64))
    f = f.loc[f["parts"].to_numpy() >= 2]
    if not len(f):
        return empty_frame(OUTLIER_COLUMNS)
    g = f.groupby("op", sort=False)
    x = f["gpu_ns"].to_numpy(np.float64)
    med = g["gpu_ns"].transform("median").to_numpy(np.float64)
    dev = pd.Series(np.abs(x - med), index=f.index)
    mad = dev.groupby(f["op"].to_numpy(), sort=False).transform("median").to_numpy(np.float64)
    diff = x - med
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(
            mad > 0, diff / (MAD_SCALE * np.where(mad > 0, mad, 1)), np.where(diff == 0, 0.0, np.sign(diff) * np.inf)
        )
    out = pd.DataFrame(
        {
            "rank": f["rank"].to_numpy(np.int32),
            "device": f["device"].to_numpy(np.int32),
            "op": f["op"].to_numpy(object),
            "gpu_ns": f["gpu_ns"].to_numpy(np.int64),
            "median_gpu_ns": med,
            "ratio": x / med,
            "excess_ns": diff,
            "count": f["count"].to_numpy(np.int64),
            "median_count": g["count"].transform("median").to_numpy(np.float64),
            "z": z,
            "parts": f["parts"].to_numpy(np.int64),
            "comm": is_comm_op(f["op"]),
        }
    )
    out = out.sort_values(
        ["comm", "excess_ns", "op", "rank", "device"], ascending=[True, False, True, True, True], kind="stable"
    )
    return conform(out.reset_index(drop=True), OUTLIER_COLUMNS, "op_outliers")
