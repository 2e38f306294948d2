"""The terminal views of the host side: ``dtrace launches`` and ``dtrace memory``.

``dtrace launches X`` shows, for one trace or a results directory, the launch statistics per
stream (the launch call's time, the GPU time, the launch delay, outliers and short kernels), the
launch queues (length, time blocked on a full queue, time starved) and the worst launches;
``dtrace memory X`` the allocated-memory peak of every GPU (when and during which op) and, for one
rank, the allocated and reserved bytes over time. Each builder returns frames
(:func:`launch_view`, :func:`memory_view`); the ``*_text`` functions render them; nothing here
prints. See docs/semantics.md, "Launches", "Launch queues" and "Memory".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..results import Results
from .text import render
from .views import of_rank, options_note

STATS_SHOWN = [
    "rank",
    "device",
    "stream",
    "launches",
    "cpu_mean_ns",
    "cpu_p95_ns",
    "gpu_mean_ns",
    "delay_median_ns",
    "delay_p95_ns",
    "delay_max_ns",
    "runtime_outliers",
    "delay_outliers",
    "short_share",
]
XRANK_SHOWN = [
    "stream",
    "parts",
    "launches",
    "cpu_mean_ns",
    "cpu_max_ns",
    "slowest_rank",
    "delay_median_ns",
    "delay_max_ns",
    "delayed_rank",
    "starved_share",
    "starved_rank",
]
QUEUES_SHOWN = [
    "rank",
    "device",
    "stream",
    "length_time_mean",
    "length_max",
    "limit",
    "blocked_ns",
    "blocked_share",
    "starved_ns",
    "starved_share",
]
LAUNCHES_SHOWN = [
    "rank",
    "device",
    "stream",
    "step",
    "launch_name",
    "name",
    "cpu_ns",
    "gpu_ns",
    "delay_ns",
    "queue_length",
]
MEMORY_SHOWN = [
    "rank",
    "device",
    "events",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "peak_step",
    "peak_op",
    "end_allocated_bytes",
]
TIMELINE_SHOWN = [
    "rank",
    "device",
    "bin",
    "lo_ns",
    "step",
    "allocated_bytes",
    "allocated_max_bytes",
    "reserved_max_bytes",
]


@dataclass
class LaunchView:
    stats: pd.DataFrame
    queues: pd.DataFrame
    worst: pd.DataFrame


def _table(res: Results, name: str) -> pd.DataFrame:
    return res.table(name) if name in res.table_names else pd.DataFrame()


def _cols(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    return df[[c for c in cols if c in df.columns]]


def launch_view(res: Results, *, rank: int | None = None, stream: int | None = None) -> LaunchView:
    """Launch statistics per stream (worst first: the slowest launch calls, then the longest
    delays), the queues (blocked first, then starved) and the worst launches (longest delay
    first) of the selected rank and stream."""

    def pick(df: pd.DataFrame) -> pd.DataFrame:
        df = of_rank(df, rank) if len(df) else df
        return df.loc[df["stream"].to_numpy() == stream] if stream is not None and len(df) else df

    stats = pick(_table(res, "launch_stats"))
    if len(stats):  # the worst streams first: the slowest launch calls, then the longest delays
        stats = stats.sort_values(
            ["cpu_p95_ns", "delay_p95_ns", "launches", "rank", "device", "stream"],
            ascending=[False, False, False, True, True, True],
        )
    queues = pick(_table(res, "queues"))
    if len(queues):
        queues = queues.sort_values(
            ["blocked_ns", "starved_ns", "rank", "stream"], ascending=[False, False, True, True]
        )
    worst = pick(_table(res, "launches"))
    if len(worst):
        worst = worst.sort_values(["delay_ns", "cpu_ns"], ascending=False, kind="stable")
    return LaunchView(
        _cols(stats, STATS_SHOWN).reset_index(drop=True),
        _cols(queues, QUEUES_SHOWN).reset_index(drop=True),
        _cols(worst, LAUNCHES_SHOWN).reset_index(drop=True),
    )


def launches_text(res: Results, *, top: int | None, rank: int | None, stream: int | None, fmt: str) -> str:
    """``dtrace launches`` in a human format."""
    v = launch_view(res, rank=rank, stream=stream)
    if not len(v.stats):
        return options_note(res) + "no GPU events linked to a launch call\n"
    o = res.record.options
    out = [options_note(res)]
    n = int(v.stats["launches"].sum())
    short = float((v.stats["short_share"] * v.stats["launches"]).sum()) / max(n, 1)
    out.append(
        f"{n:,} GPU events linked to their launch call on {len(v.stats):,} stream(s); "
        f"{short:.0%} ran shorter on the GPU than their launch call on the host (launch-bound)\n"
    )
    xr = _table(res, "launch_stats_xrank") if rank is None else pd.DataFrame()
    if len(xr) and int(v.stats["rank"].nunique()) > 1:
        if stream is not None:
            xr = xr.loc[xr["stream"].to_numpy() == stream]
        cols = [c for c in XRANK_SHOWN if c in xr.columns]
        out.append(render(xr[cols], fmt, title="across ranks, per stream id (the slowest and most delayed rank)"))
    title = "launch statistics per stream, worst first (slowest launch calls, then longest delays)"
    out.append(render(v.stats, fmt, title=title, max_rows=top))
    if len(v.queues):
        out.append(
            render(
                v.queues, fmt, title="launch queues (blocked: at the limit; starved: empty, host busy)", max_rows=top
            )
        )
    if len(v.worst):
        cut = (
            f"call > {o.get('launch_runtime_cutoff_ns', 50_000) / 1000:g} µs or delay > "
            f"{o.get('launch_delay_cutoff_ns', 100_000) / 1000:g} µs"
        )
        out.append(render(v.worst, fmt, title=f"worst launches ({cut}), longest delay first", max_rows=top))
    return "\n".join(s for s in out if s)


def launches_document(v: LaunchView, top: int | None) -> dict[str, Any]:
    """The machine (JSON) form of ``dtrace launches``."""
    return {k: _records(getattr(v, k).head(top) if top else getattr(v, k)) for k in ("stats", "queues", "worst")}


@dataclass
class MemoryView:
    peaks: pd.DataFrame
    timeline: pd.DataFrame


def memory_view(res: Results, *, rank: int | None = None) -> MemoryView:
    """The memory peaks of the selected parts (largest first), and the timeline of one rank (the
    selected one, else the one with the largest peak)."""
    mem = of_rank(_table(res, "memory"), rank) if "memory" in res.table_names else pd.DataFrame()
    tl = _table(res, "memory_timeline")
    if not len(mem):
        return MemoryView(pd.DataFrame(), pd.DataFrame())
    mem = mem.sort_values(["peak_allocated_bytes", "rank", "device"], ascending=[False, True, True])
    top = mem.iloc[0]
    if len(tl):
        tl = tl.loc[(tl["rank"].to_numpy() == top["rank"]) & (tl["device"].to_numpy() == top["device"])]
    return MemoryView(_cols(mem, MEMORY_SHOWN).reset_index(drop=True), _cols(tl, TIMELINE_SHOWN).reset_index(drop=True))


def sparkline(values: np.ndarray) -> str:
    """One character per value, ``▁`` to ``█`` from 0 to the largest value.

    Examples
    --------
    >>> sparkline(np.array([0, 1, 2, 4]))
    '▁▃▅█'
    """
    v = np.asarray(values, dtype=np.float64)
    top = float(v.max()) if v.size else 0.0
    if top <= 0:
        return "▁" * v.size
    return "".join("▁▂▃▄▅▆▇█"[int(i)] for i in np.clip(np.round(v / top * 7), 0, 7))


def memory_text(res: Results, *, top: int | None, rank: int | None, fmt: str) -> str:
    """``dtrace memory`` in a human format."""
    v = memory_view(res, rank=rank)
    if not len(v.peaks):
        return options_note(res) + (
            "no device memory events (record the trace with torch.profiler.profile(profile_memory=True))\n"
        )
    out = [options_note(res), render(v.peaks, fmt, title="allocated memory peak per GPU (largest first)", max_rows=top)]
    if len(v.timeline):
        r, d = int(v.timeline["rank"].iloc[0]), int(v.timeline["device"].iloc[0])
        gib = float(v.timeline["allocated_max_bytes"].max()) / 2**30
        out.append(
            f"rank {r} device {d}, allocated over time (max per bin, peak {gib:.2f} GiB):\n"
            f"  {sparkline(v.timeline['allocated_max_bytes'].to_numpy())}\n"
        )
        out.append(render(v.timeline, fmt, title=f"memory over time, rank {r} device {d}", max_rows=top))
    return "\n".join(s for s in out if s)


def memory_document(v: MemoryView, top: int | None) -> dict[str, Any]:
    """The machine (JSON) form of ``dtrace memory``."""
    return {"peaks": _records(v.peaks.head(top) if top else v.peaks), "timeline": _records(v.timeline)}


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    import json

    return json.loads(df.to_json(orient="records", force_ascii=False)) if len(df) else []
