"""Report sections of the host side: kernel launches, launch queues, device memory.

- *Kernel launches*: the launch delay distribution of every GPU (a heatmap of GPUs × delay bins,
  ``launch_histogram``; more than 128 GPUs are pooled into rows keeping each bin's largest share),
  the per-stream comparison across ranks (``launch_stats_xrank``) and key figures.
- *Launch queues*: the queue length of every stream of one rank over the job's slowest step (the
  step with the longest GPU span in ``steps``; the whole timeline without steps), from
  ``queue_timeline``, with the starved time of that step, and the streams that block or starve
  most (``queues``).
- *Device memory*: the allocated bytes over time (``memory_timeline``) of the flagged straggler
  and of the median GPU by peak, and the peaks per GPU and per op (``memory``, ``memory_xrank``).

See docs/semantics.md, "Launches", "Launch queues", "Memory" and "Time series".
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import charts as ch
from .context import Context
from .page import cards, note, table
from .ranks import _bucket_rows

MAX_STREAMS = 8


def _f(col: pd.Series) -> np.ndarray:
    """A column as float64, a missing value (``NA``) as NaN."""
    return pd.to_numeric(col, errors="coerce").to_numpy(np.float64, na_value=np.nan)


def _edges(df: pd.DataFrame) -> pd.DataFrame:
    """The rows whose bin edges are known, with float ``lo``/``hi``."""
    lo, hi = _f(df["lo_ns"]), _f(df["hi_ns"])
    ok = np.isfinite(lo) & np.isfinite(hi)
    return df.loc[ok].assign(_lo=lo[ok], _hi=hi[ok])


def section_launches(ctx: Context) -> str:
    """Launch delay distribution per GPU and launch statistics across ranks."""
    h, notice = ctx.get("launch_histogram", ("rank", "device", "bin", "lo_ns", "count", "share"))
    if h is None:
        return notice
    out = []
    ls, _ = ctx.get("launch_stats", ("launches", "short_kernels", "runtime_outliers", "delay_outliers"))
    if ls is not None:
        out.append(_launch_cards(ls))
    keys = h[["rank", "device"]].drop_duplicates().sort_values(["rank", "device"]).reset_index(drop=True)
    bins = np.sort(h["bin"].unique())
    col = {int(b): i for i, b in enumerate(bins)}
    row = {(int(r), int(d)): i for i, (r, d) in enumerate(zip(keys["rank"], keys["device"]))}
    m = np.zeros((len(keys), len(bins)))
    ri = np.array([row[(int(r), int(d))] for r, d in zip(h["rank"], h["device"])], dtype=np.int64)
    ci = np.array([col[int(b)] for b in h["bin"]], dtype=np.int64)
    m[ri, ci] = _f(h["share"])
    lo = pd.Series(_f(h["lo_ns"]), index=h["bin"].to_numpy()).groupby(level=0).max()
    labels = ["< 1 µs" if b == 0 else f"≥ {ch.fmt_time(lo[b])}" if np.isfinite(lo[b]) else f"bin {b}" for b in bins]
    m2, rlabs, _ = _bucket_rows(m, ctx.labels(keys), "max")
    flagged = np.array([int(r) in ctx.flagged for r in keys["rank"]], dtype=bool)
    size = -(-len(flagged) // max(m2.shape[0], 1))
    marked = [bool(flagged[b * size : (b + 1) * size].any()) for b in range(m2.shape[0])]
    cap = (
        "Share of each GPU's launches whose delay (GPU start − end of the launch call) falls in each bin. "
        "Delays near zero: the host launches just in time (host-bound); long delays: the queue holds work "
        "(GPU-bound)."
    )
    if m2.shape[0] < m.shape[0]:
        cap += f" {m.shape[0]} GPUs pooled into {m2.shape[0]} rows (largest share of each bin)."
    out.append(ch.heatmap("launch-delays", m2, rlabs, labels, value_fmt=ch.fmt_pct, caption=cap, mark_rows=marked))
    x, _ = ctx.get("launch_stats_xrank", ("stream", "launches"))
    if x is not None:
        out.append(_launch_streams(x))
    return "".join(out)


def _launch_cards(ls: pd.DataFrame) -> str:
    """Launches, launch-bound share and the launch calls and delays beyond the cut-off."""
    n = int(ls["launches"].sum())
    return cards(
        [
            ("GPU events linked to a launch call", ch.fmt_num(n)),
            (
                "launch-bound (GPU shorter than the launch call)",
                ch.fmt_pct(ls["short_kernels"].sum() / max(n, 1)),
            ),
            ("launch calls beyond the cut-off", ch.fmt_num(int(ls["runtime_outliers"].sum()))),
            ("launch delays beyond the cut-off", ch.fmt_num(int(ls["delay_outliers"].sum()))),
        ]
    )


def _launch_streams(x: pd.DataFrame) -> str:
    """The 10 streams with the most launches across ranks, with their slowest, most delayed and
    most starved GPU."""
    x = x.assign(_n=_f(x["launches"])).sort_values("_n", ascending=False).head(10)
    return table(
        x,
        [
            ("stream", "stream", "num"),
            ("parts", "GPUs", "num"),
            ("launches", "launches", "num"),
            ("cpu_mean_ns", "launch call (mean)", "time"),
            ("delay_median_ns", "delay (median of GPUs)", "time"),
            ("short_share", "launch-bound", "pct"),
            ("slowest_rank", "slowest launcher", "num"),
            ("slowest_cpu_mean_ns", "its launch call", "time"),
            ("spread", "vs median", "ratio"),
            ("delayed_rank", "most delayed", "num"),
            ("delayed_mean_ns", "its delay (mean)", "time"),
        ]
        + [
            (c, h, k)
            for c, h, k in (
                ("starved_rank", "most starved", "num"),
                ("starved_max_share", "its starved share", "pct"),
            )
            if c in x.columns
        ],
    )


def _slowest_step(ctx: Context) -> tuple[int, int, int] | None:
    """``(rank, device, step)`` of the longest step (a flagged rank's longest, if any is flagged)."""
    s, _ = ctx.get("steps", ("rank", "device", "step", "step_ns"))
    if s is None:
        return None
    s = s.assign(_t=_f(s["step_ns"]))
    f = s.loc[s["rank"].isin(ctx.flagged)] if ctx.flagged else s
    r = (f if len(f) else s).sort_values(["_t", "rank"], ascending=[False, True]).iloc[0]
    return int(r["rank"]), int(r["device"]), int(r["step"])


def section_queues(ctx: Context) -> str:
    """Queue length over the slowest step, and the streams that block or starve most."""
    t, notice = ctx.get("queue_timeline", ("rank", "device", "stream", "lo_ns", "hi_ns", "step", "length_max"))
    if t is None:
        return notice
    out = []
    pick = _slowest_step(ctx)
    if pick is not None:
        rank, device, step = pick
        sel = t.loc[(t["rank"] == rank) & (t["device"] == device) & (t["step"] == step)]
        what = (
            f"{ctx.label(rank, device)}, step {step} (the {'flagged rank' if rank in ctx.flagged else 'job'}'s slowest)"
        )
    else:
        sel = pd.DataFrame()
    if not len(sel):  # no steps, or the step has no queue: the busiest GPU's whole timeline
        first = t.assign(_m=_f(t["length_max"])).sort_values(["_m", "rank"], ascending=[False, True]).iloc[0]
        rank, device = int(first["rank"]), int(first["device"])
        sel = t.loc[(t["rank"] == rank) & (t["device"] == device)]
        what = f"{ctx.label(rank, device)}, whole trace (largest queue)"
    sel = _edges(sel)
    if not len(sel):
        return note("The queue series has no bin with known edges.")
    zero = float(sel["_lo"].min())
    peak = pd.Series(_f(sel["length_max"]), index=sel["stream"].to_numpy()).groupby(level=0).max()
    top = peak.sort_values(ascending=False).head(MAX_STREAMS).index
    series = {}
    for stream in top:
        f = sel.loc[sel["stream"] == stream].sort_values("_lo")
        series[f"stream {stream}"] = (f["_lo"].to_numpy() - zero, f["_hi"].to_numpy() - zero, _f(f["length_max"]))
    width = float((sel["_hi"] - sel["_lo"]).iloc[0])
    starved = float(np.nansum(_f(sel["starved_ns"]))) if "starved_ns" in sel.columns else 0.0
    cap = (
        f"Launches queued and not started, per stream, {what}: the largest length in each bin of "
        f"{ch.fmt_time(width)} (the resolution: the GPU's timeline in its bins, --timeline-bins). "
        f"Starved in these bins (queue empty, GPU idle, host busy): {ch.fmt_time(starved)}."
    )
    out.append(ch.step_lines("queue-length", series, x_title="time in the window shown", caption=cap))
    if len(sel["bin"].unique()) < 5:
        out.append(note("Few bins fall in this step: analyse with a larger --timeline-bins for a finer series."))
    q, _ = ctx.get("queues", ("blocked_ns", "starved_ns", "blocked_share", "starved_share"))
    if q is not None:
        # blocked first, then the most starved of the streams that carry most of the launches
        # (a side stream, NCCL's, is empty most of the time by design)
        n = _f(q["launches"]) if "launches" in q.columns else np.ones(len(q))
        busy = (
            n >= 0.5 * pd.Series(n).groupby([q["rank"].to_numpy(), q["device"].to_numpy()]).transform("max").to_numpy()
        )
        q = q.assign(
            _b=np.nan_to_num(_f(q["blocked_ns"])), _s=np.where(busy, np.nan_to_num(_f(q["starved_share"])), -1.0)
        )
        q = q.sort_values(["_b", "_s"], ascending=False).head(10)
        out.append(
            table(
                q,
                [
                    ("rank", "rank", "num"),
                    ("device", "GPU", "num"),
                    ("stream", "stream", "num"),
                    ("length_time_mean", "mean length", "num"),
                    ("length_max", "max length", "num"),
                    ("blocked_ns", "blocked at the limit", "time"),
                    ("blocked_share", "blocked", "pct"),
                    ("starved_ns", "starved", "time"),
                    ("starved_share", "starved share", "pct"),
                ],
                flag=[int(r) in ctx.flagged for r in q["rank"]],
            )
        )
    return "".join(out)


def section_memory(ctx: Context) -> str:
    """Allocated memory over time of the flagged and the median GPU; peaks per GPU and per op."""
    m, notice = ctx.get("memory", ("rank", "device", "peak_allocated_bytes", "peak_op"))
    if m is None:
        return notice
    t, _ = ctx.get("memory_timeline", ("rank", "device", "lo_ns", "hi_ns", "allocated_max_bytes"))
    out = []
    order = m.assign(_p=_f(m["peak_allocated_bytes"])).sort_values(["_p", "rank", "device"]).reset_index(drop=True)
    median = order.iloc[len(order) // 2]
    chosen = [(int(median["rank"]), int(median["device"]), "median")]
    flagged = m.loc[m["rank"].isin(ctx.flagged)]
    if len(flagged):
        f = flagged.iloc[0]
        chosen.insert(0, (int(f["rank"]), int(f["device"]), "flagged"))
    else:
        top = order.iloc[-1]
        if (int(top["rank"]), int(top["device"])) != chosen[0][:2]:
            chosen.insert(0, (int(top["rank"]), int(top["device"]), "largest peak"))
    if t is not None:
        series = {}
        for rank, device, why in chosen:
            f = _edges(t.loc[(t["rank"] == rank) & (t["device"] == device)]).sort_values("_lo")
            if len(f):
                zero = float(f["_lo"].min())
                series[f"{ctx.label(rank, device)} ({why})"] = (
                    f["_lo"].to_numpy() - zero,
                    f["_hi"].to_numpy() - zero,
                    _f(f["allocated_max_bytes"]),
                )
        if series:
            out.append(
                ch.step_lines(
                    "memory-timeline",
                    series,
                    value_fmt=ch.fmt_bytes,
                    x_title="time since the GPU's first memory event",
                    caption="Largest allocated bytes in each bin (the profiler's [memory] events, Total Allocated).",
                )
            )
    top = m.assign(_p=_f(m["peak_allocated_bytes"])).sort_values("_p", ascending=False).head(10)
    out.append(
        table(
            top,
            [
                ("rank", "rank", "num"),
                ("device", "GPU", "num"),
                ("peak_allocated_bytes", "peak allocated", "bytes"),
                ("peak_reserved_bytes", "peak reserved", "bytes"),
                ("peak_step", "step", "num"),
                ("peak_op", "during", "name"),
            ],
            flag=[int(r) in ctx.flagged for r in top["rank"]],
        )
    )
    x, _ = ctx.get("memory_xrank", ("peak_op", "parts"))
    if x is not None and len(x) > 1:
        out.append(
            table(
                x.head(10),
                [
                    ("peak_op", "op at the peak", "name"),
                    ("parts", "GPUs", "num"),
                    ("peak_median_bytes", "median peak", "bytes"),
                    ("peak_max_bytes", "largest peak", "bytes"),
                    ("max_rank", "on rank", "num"),
                ],
            )
        )
    return "".join(out)
