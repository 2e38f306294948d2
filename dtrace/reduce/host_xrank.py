"""The host side across ranks: launch statistics and memory peaks (see docs/semantics.md,
"Launches" and "Memory").

- ``launch_stats_xrank``: per stream id, over the (rank, device) parts that launched work on a
  stream of that id (data-parallel ranks run the same streams): launches, the pooled means
  (``Σ total / Σ launches``) of the launch call's time, the GPU time and the launch delay, the
  medians over parts of each part's median, the largest values, the outlier and short-kernel
  counts, and the slowest launcher — the part with the largest mean launch call
  (``slowest_rank``, ``slowest_device``, ``slowest_cpu_mean_ns``) and
  ``spread = slowest_cpu_mean_ns / median over parts of cpu_mean_ns``; likewise the part whose
  launches waited longest on average (``delayed_rank``, ``delayed_device``,
  ``delayed_mean_ns``). A host-bound straggler shows as the slowest launcher; a GPU-bound rank
  as the most delayed (its queue is full). From ``queues``: the median over parts of the
  time-weighted queue length, the blocked and starved time summed, ``starved_share = Σ starved /
  Σ span``, and the most starved part (``starved_rank``, ``starved_device``,
  ``starved_max_share``): a rank whose GPU waits for its host with an empty queue.
- ``memory_xrank``: per host op during which a part reached its allocated-memory peak
  (``peak_op`` of ``memory``): the parts, the median and largest peak over them and the part
  holding the largest, and the median peak of the reserved bytes. Sorted by parts.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.dtypes import conform, empty_frame
from ..options import Options

Tables = dict[str, pd.DataFrame]

LAUNCH_XRANK_COLUMNS = {
    "stream": "int64",
    "parts": "int64",
    "launches": "int64",
    "cpu_mean_ns": "int64",
    "cpu_median_ns": "int64",
    "cpu_max_ns": "int64",
    "gpu_mean_ns": "int64",
    "delay_mean_ns": "int64",
    "delay_median_ns": "int64",
    "delay_max_ns": "int64",
    "negative_delays": "int64",
    "runtime_outliers": "int64",
    "delay_outliers": "int64",
    "short_kernels": "int64",
    "short_share": "float64",
    "slowest_rank": "int32",
    "slowest_device": "int32",
    "slowest_cpu_mean_ns": "int64",
    "spread": "float64",
    "delayed_rank": "int32",
    "delayed_device": "int32",
    "delayed_mean_ns": "int64",
    "length_time_mean": "float64",
    "blocked_ns": "int64",
    "starved_ns": "int64",
    "starved_share": "float64",
    "starved_rank": "int32",
    "starved_device": "int32",
    "starved_max_share": "float64",
}
MEMORY_XRANK_COLUMNS = {
    "peak_op": "object",
    "parts": "int64",
    "peak_median_bytes": "int64",
    "peak_max_bytes": "int64",
    "max_rank": "int32",
    "max_device": "int32",
    "reserved_median_bytes": "int64",
}


def host_xrank(tables: Tables, options: Options) -> Tables:
    """The ``launch_stats_xrank`` and ``memory_xrank`` tables (see the module docstring)."""
    return {
        "launch_stats_xrank": launch_stats_xrank(tables.get("launch_stats"), tables.get("queues")),
        "memory_xrank": memory_xrank(tables.get("memory")),
    }


def launch_stats_xrank(ls: pd.DataFrame | None, queues: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per stream id across parts (see the module docstring)."""
    if ls is None or not len(ls):
        return empty_frame(LAUNCH_XRANK_COLUMNS)
    if queues is not None and len(queues):
        q = queues[
            ["rank", "device", "stream", "length_time_mean", "blocked_ns", "starved_ns", "span_ns", "starved_share"]
        ]
        ls = ls.merge(q, on=["rank", "device", "stream"], how="left")
        ls[["blocked_ns", "starved_ns", "span_ns"]] = ls[["blocked_ns", "starved_ns", "span_ns"]].fillna(0)
    else:
        ls = ls.assign(length_time_mean=np.nan, blocked_ns=0, starved_ns=0, span_ns=0, starved_share=np.nan)
    ls = ls.reset_index(drop=True)
    g = ls.groupby("stream", sort=True)
    out = g.agg(
        parts=("launches", "size"),
        launches=("launches", "sum"),
        cpu_total=("cpu_total_ns", "sum"),
        gpu_total=("gpu_total_ns", "sum"),
        delay_total=("delay_total_ns", "sum"),
        cpu_median_ns=("cpu_median_ns", "median"),
        cpu_max_ns=("cpu_max_ns", "max"),
        delay_median_ns=("delay_median_ns", "median"),
        delay_max_ns=("delay_max_ns", "max"),
        negative_delays=("negative_delays", "sum"),
        runtime_outliers=("runtime_outliers", "sum"),
        delay_outliers=("delay_outliers", "sum"),
        short_kernels=("short_kernels", "sum"),
        cpu_mean_median=("cpu_mean_ns", "median"),
        length_time_mean=("length_time_mean", "median"),
        blocked_ns=("blocked_ns", "sum"),
        starved_ns=("starved_ns", "sum"),
        span=("span_ns", "sum"),
    )
    n = out["launches"].to_numpy(np.float64)
    out["cpu_mean_ns"] = out["cpu_total"] / n
    out["gpu_mean_ns"] = out["gpu_total"] / n
    out["delay_mean_ns"] = out["delay_total"] / n
    out["short_share"] = out["short_kernels"] / n
    slow = ls.loc[g["cpu_mean_ns"].idxmax().to_numpy()]
    late = ls.loc[g["delay_mean_ns"].idxmax().to_numpy()]
    out["slowest_rank"] = slow["rank"].to_numpy(np.int32)
    out["slowest_device"] = slow["device"].to_numpy(np.int32)
    out["slowest_cpu_mean_ns"] = slow["cpu_mean_ns"].to_numpy(np.int64)
    med = out["cpu_mean_median"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["spread"] = np.where(med > 0, out["slowest_cpu_mean_ns"].to_numpy(np.float64) / med, np.nan)
    out["delayed_rank"] = late["rank"].to_numpy(np.int32)
    out["delayed_device"] = late["device"].to_numpy(np.int32)
    out["delayed_mean_ns"] = late["delay_mean_ns"].to_numpy(np.int64)
    span = out["span"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["starved_share"] = np.where(span > 0, out["starved_ns"].to_numpy(np.float64) / span, np.nan)
    share = ls["starved_share"].fillna(-1.0)
    starved = ls.loc[share.groupby(ls["stream"]).idxmax().reindex(out.index).to_numpy()]
    out["starved_rank"] = starved["rank"].to_numpy(np.int32)
    out["starved_device"] = starved["device"].to_numpy(np.int32)
    out["starved_max_share"] = starved["starved_share"].to_numpy(np.float64)
    out = out.reset_index()
    return conform(out[list(LAUNCH_XRANK_COLUMNS)], LAUNCH_XRANK_COLUMNS, "launch_stats_xrank")


def memory_xrank(mem: pd.DataFrame | None) -> pd.DataFrame:
    """Per op at the allocated-memory peak across parts (see the module docstring)."""
    if mem is None or not len(mem):
        return empty_frame(MEMORY_XRANK_COLUMNS)
    mem = mem.reset_index(drop=True)
    g = mem.groupby("peak_op", sort=True)
    out = g.agg(
        parts=("peak_allocated_bytes", "size"),
        peak_median_bytes=("peak_allocated_bytes", "median"),
        peak_max_bytes=("peak_allocated_bytes", "max"),
        reserved_median_bytes=("peak_reserved_bytes", "median"),
    )
    top = mem.loc[g["peak_allocated_bytes"].idxmax().to_numpy()]
    out["max_rank"] = top["rank"].to_numpy(np.int32)
    out["max_device"] = top["device"].to_numpy(np.int32)
    out = out.reset_index().sort_values(["parts", "peak_max_bytes", "peak_op"], ascending=[False, False, True])
    return conform(out[list(MEMORY_XRANK_COLUMNS)].reset_index(drop=True), MEMORY_XRANK_COLUMNS, "memory_xrank")
