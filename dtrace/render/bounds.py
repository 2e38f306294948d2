"""What bounds each step, in words and as a report section (the ``step_bounds`` tables).

``step 12 on rank 7: 71 % host-bound, in `DataLoader.__next__``: one line per step and rank
(:func:`rank_lines`), or per step across ranks — the bound most parts share and the strongest part
of every other bound (:func:`job_lines`). The report section draws each step's split as a stacked
bar: the median part of the step, and the strongest part of every bound other than the majority's.
See ``docs/semantics.md``, "What bounds each step".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from ..analyses.critical_path import CATEGORIES
from ..core.units import fmt_time
from . import charts as ch
from .context import Context
from .escape import prose
from .page import note, table

WORDS = {
    "host": "host-bound",
    "compute": "GPU compute",
    "comm": "communication",
    "memcpy": "memory copies",
    "sync": "synchronisation",
    "other": "unexplained (GPU idle)",
}
"""How each bound reads in a sentence."""

COLORS = {
    "host": ch.BREAKDOWN_COLORS["non-GPU"],
    "compute": ch.CLASS_COLORS["compute"],
    "comm": ch.CLASS_COLORS["comm"],
    "memcpy": ch.CLASS_COLORS["memcpy"],
    "sync": "#b07aa1",
    "other": ch.CLASS_COLORS["other"],
}
"""The colour of each bound: the GPU categories' own colours (the same in every chart), host time
as the breakdown's non-GPU time."""


def phrase(bound: str, share: Any, op: Any = "") -> str:
    """``71 % host-bound, in `DataLoader.__next__```.

    Examples
    --------
    >>> phrase("host", 0.714, "DataLoader.__next__")
    '71 % host-bound, in `DataLoader.__next__`'
    >>> phrase("comm", 0.5)
    '50 % communication'
    """
    text = f"{_pct(share)} % {WORDS.get(bound, bound)}"
    return text + (f", in `{op}`" if op and not pd.isna(op) else "")


def _pct(share: Any) -> str:
    """A share as whole percent for a sentence (``71``); a missing value as ``–``."""
    return "–" if pd.isna(share) else f"{100 * float(share):.0f}"


def _count(v: Any) -> str:
    """A whole number of the tables for a sentence; a missing value as ``–``."""
    return "–" if pd.isna(v) else str(int(v))


def _op(row: Any) -> str:
    b = str(row["bound"])
    return str(row["host_op"]) if b == "host" else str(row["sync_op"]) if b == "sync" else ""


def _split(row: Any) -> str:
    """``host 14.3 ms, compute 4.10 ms … of 20.2 ms``: the non-zero parts, largest first."""
    parts = sorted(((int(row[f"{c}_ns"]), c) for c in CATEGORIES), reverse=True)
    inner = ", ".join(f"{c} {fmt_time(v)}" for v, c in parts if v > 0)
    return f"{inner} of {fmt_time(int(row['span_ns']))}"


def _step_key(df: pd.DataFrame) -> np.ndarray:
    """The step of each row as int64 (-1: no step)."""
    return df["step"].astype("Int64").to_numpy(np.int64, na_value=-1)


def _step_text(step: Any) -> str:
    return "the trace (no steps)" if pd.isna(step) else f"step {int(step)}"


def host_evidence(steps: pd.DataFrame | None, step: Any, sync_ns: Any, rank: Any = None) -> str:
    """Why a step reads host-bound, in numbers: how busy the GPU was in the step (``steps``: the
    median over ranks, or ``rank``'s), and whether any call of the step waited for the GPU.

    Examples
    --------
    >>> st = pd.DataFrame({"rank": [0, 1], "step": [3, 3], "step_ns": [600e6, 620e6], "busy_ns": [270e6, 290e6]})
    >>> host_evidence(st, 3, 0)
    'evidence: its GPU was busy 46 % of the step (280 ms of 610 ms), idle the rest waiting for work; no call of the step waited for the GPU (no synchronisation), so the host set its pace'
    """
    if steps is None or not len(steps) or not {"step", "step_ns", "busy_ns"} <= set(steps.columns) or pd.isna(step):
        return ""
    s = steps.loc[steps["step"].eq(int(step)).fillna(False).to_numpy(bool)]
    if rank is not None and "rank" in s.columns:
        s = s.loc[s["rank"].to_numpy() == int(rank)]
    if not len(s):
        return ""
    span, busy = float(s["step_ns"].median()), float(s["busy_ns"].median())
    if span <= 0:
        return ""
    text = (
        f"evidence: its GPU was busy {100 * busy / span:.0f} % of the step ({fmt_time(busy)} of {fmt_time(span)}), "
        "idle the rest waiting for work"
    )
    if not pd.isna(sync_ns) and float(sync_ns) <= 0:
        text += "; no call of the step waited for the GPU (no synchronisation), so the host set its pace"
    return text


def rank_lines(sb: pd.DataFrame, steps: pd.DataFrame | None = None) -> list[str]:
    """One sentence per row of ``step_bounds``: ``step 12 on rank 7: 71 % host-bound, in `op` (…)``,
    and under a host-bound one its evidence (:func:`host_evidence`)."""
    multi = bool(sb.duplicated(["rank", "step"]).any())
    out = []
    for _i, row in sb.iterrows():
        if not row["span_ns"]:
            continue
        who = f"rank {_count(row['rank'])}" + (f" GPU {_count(row['device'])}" if multi else "")
        out.append(
            f"{_step_text(row['step'])} on {who}: {phrase(str(row['bound']), float(row['bound_share']), _op(row))} "
            f"({_split(row)})"
        )
        if str(row["bound"]) == "host" and (ev := host_evidence(steps, row["step"], row["sync_ns"], row["rank"])):
            out.append(f"    {ev}")
    return out


def job_lines(xrank: pd.DataFrame, steps: pd.DataFrame | None = None) -> list[str]:
    """Per step: the bound most parts share (with its evidence when host-bound), then the strongest
    part of each other bound."""
    out = []
    key = _step_key(xrank)
    for k in dict.fromkeys(key.tolist()):
        group = xrank.loc[key == k]
        first = group.iloc[0]
        out.append(
            f"{_step_text(first['step'])}: {_count(first['parts'])} of {_count(group['parts'].sum())} ranks "
            f"{WORDS.get(str(first['bound']), str(first['bound']))} (median share "
            f"{_pct(first['share_median'])} %, median step {fmt_time(first['span_median_ns'])})"
        )
        if str(first["bound"]) == "host" and (ev := host_evidence(steps, first["step"], first["sync_median_ns"])):
            out.append(f"    {ev}")
        for _i, row in group.iloc[1:].iterrows():
            more = 0 if pd.isna(row["parts"]) else int(row["parts"]) - 1
            out.append(
                f"    rank {_count(row['top_rank'])}: {phrase(str(row['bound']), row['top_share'], row['top_op'])}"
                + (f" (and {more} more rank{'s' if more > 1 else ''})" if more else "")
            )
    return out


def bars(sb: pd.DataFrame, xrank: pd.DataFrame | None, max_steps: int = 40) -> tuple[list[str], dict, list[bool]]:
    """Labels, series and highlights of the stacked bars: per step, the median part's split (the
    median over parts of each category) and the strongest part of each bound the majority does
    not share."""
    labels: list[str] = []
    series: dict[str, list[float]] = {c: [] for c in CATEGORIES}
    hl: list[bool] = []
    key = _step_key(sb)
    steps = list(dict.fromkeys(key.tolist()))[:max_steps]
    for k in steps:
        part = sb.loc[key == k]
        step = part["step"].iloc[0]
        labels.append(f"{_step_text(step)}: median")
        hl.append(False)
        for c in CATEGORIES:
            series[c].append(float(part[f"{c}_ns"].median()))
        if xrank is None:
            continue
        xk = xrank.loc[_step_key(xrank) == k]
        for _i, row in xk.iloc[1:].iterrows():
            top = part.loc[(part["rank"] == row["top_rank"]) & (part["device"] == row["top_device"])]
            if not len(top):
                continue
            labels.append(f"{_step_text(step)}: rank {int(row['top_rank'])}")
            hl.append(True)
            for c in CATEGORIES:
                series[c].append(float(top[f"{c}_ns"].iloc[0]))
    return labels, series, hl


def section_bounds(ctx: Context) -> str:
    """The "What bounds each step" section: stacked bars per step and the table across ranks."""
    sb, msg = ctx.get("step_bounds", ("rank", "device", "step", "span_ns", "bound", "bound_share"))
    if sb is None:
        return msg
    xrank, _ = ctx.get("step_bounds_xrank", ("step", "bound", "parts", "top_rank"))
    html = [
        note(
            "Each step's critical path, followed from the step's end back to its start through the host "
            "threads, kernel launches, the GPU, collectives and synchronisations, split by what it waited on: "
            "host-bound (the GPU waited for launches; the data loader, Python), GPU compute, communication "
            "(waiting for other ranks included), memory copies, synchronisation (the host blocked in "
            "cudaStreamSynchronize, .item() and the like before the step's end) and idle time nothing explains. "
            "Bars: the median rank of each step, and (⚑) the rank most strongly bound by anything else."
        )
    ]
    labels, series, hl = bars(sb, xrank)
    html.append(
        ch.stacked_hbars(
            "bounds",
            labels,
            series,
            COLORS,
            highlight=hl,
            label_width=200,
            caption="time on each step's critical path by what it waited on",
        )
    )
    if xrank is not None:
        html.append(
            table(
                xrank,
                [
                    ("step", "step", "num"),
                    ("bound", "bound", "text"),
                    ("parts", "ranks", "num"),
                    ("share_median", "median share", "pct"),
                    ("span_median_ns", "median step", "time"),
                    ("top_rank", "strongest rank", "num"),
                    ("top_share", "its share", "pct"),
                    ("top_op", "in", "text"),
                ],
            )
        )
    return "".join(html)


SUMMARY_STEPS = 3
"""Steps the summary of ``dtrace analyze`` shows (``dtrace bounds`` shows them all)."""


def bounds_section(results: Any, fmt: str = "table") -> str:
    """The summary's lines on what bounds the first steps (``dtrace analyze``)."""
    if "step_bounds_xrank" not in results.table_names:
        return ""
    x = results.table("step_bounds_xrank")
    if not len(x):
        return ""
    key = _step_key(x)
    steps = list(dict.fromkeys(key.tolist()))
    st = results.table("steps") if "steps" in results.table_names else None
    shown = job_lines(x.loc[np.isin(key, steps[:SUMMARY_STEPS])], st)
    more = (
        f" (first {SUMMARY_STEPS} of {len(steps)} steps; dtrace bounds OUT for all)"
        if len(steps) > SUMMARY_STEPS
        else ""
    )
    return prose(f"what bounds each step{more}:\n" + lines(f"  {t}" for t in shown).rstrip("\n"), fmt) + "\n"


def with_steps(sb: pd.DataFrame, *, rank: int | None = None, step: int | None = None) -> pd.DataFrame:
    """``step_bounds`` rows of one rank and/or step (all when ``None``)."""
    keep = np.ones(len(sb), bool)
    if rank is not None:
        keep &= sb["rank"].to_numpy() == rank
    if step is not None:
        keep &= sb["step"].eq(step).fillna(False).to_numpy(bool)
    return sb.loc[keep].reset_index(drop=True)


def lines(items: Iterable[str]) -> str:
    return "".join(f"{x}\n" for x in items)
