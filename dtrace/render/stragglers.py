"""The stragglers section of the terminal summary: flagged ranks with their evidence."""

from __future__ import annotations

import pandas as pd

from ..core.units import fmt_time
from ..results import Results
from .escape import printable
from .text import flags, render

TOP = 5
#: What the letters of the ``signals`` column mean (docs/semantics.md, "Ranks and stragglers").
SIGNALS = {
    "f": "held the others back: it waited least in collectives, the others waited for it",
    "a": "its collectives start late (method late_start)",
    "b": "compute kernels slower than the median rank for the same kernel names",
    "c": "step time far above the median (robust z-score)",
    "d": "slow link: the process groups that contain the rank transfer slower than the others",
    "e": "slow GPU: its modelled ops run slower than the median rank at equal op, shapes and dtypes",
}


def signals_legend() -> str:
    """One line explaining the signal letters, for every place that shows them."""
    return "signals: " + "; ".join(f"{k} = {v}" for k, v in SIGNALS.items())


def _clock_line(results: Results) -> str:
    if "collective_instances" not in results.table_names or "clock_offsets" not in results.table_names:
        return ""
    inst = results.table("collective_instances")
    clock = results.table("clock_offsets")
    multi = inst.loc[(inst["hosts"] > 1) & (inst["ranks"] > 1)] if len(inst) else inst
    if not len(multi) or not len(clock):
        return ""
    off = clock.drop_duplicates("host")["offset_ns"].abs().max()
    raw = float(multi["raw_end_skew_ns"].median())
    res = float(multi["end_skew_ns"].median())
    return (
        f"clock offsets between hosts up to {fmt_time(float(off))} removed; median end skew of collectives "
        f"across hosts {fmt_time(raw)} before, {fmt_time(res)} after\n"
    )


def stragglers_section(results: Results, fmt: str = "table") -> str:
    """Flagged stragglers (at most :data:`TOP`) with evidence, or a line saying there are none."""
    if "stragglers" not in results.table_names:
        return ""
    s = results.table("stragglers")
    if not len(s):
        return ""
    inst = results.table("collective_instances") if "collective_instances" in results.table_names else pd.DataFrame()
    matched = int((inst["ranks"] > 1).sum()) if len(inst) else 0
    head = f"{matched} collective instances matched across ranks\n" + _clock_line(results)
    flagged = s.loc[flags(s["flagged"])]
    if not len(flagged):
        return head + f"no straggler flagged among {len(s)} ranks (method {s['method'].iloc[0]})\n"
    view = flagged.sort_values("score", ascending=False, kind="stable").head(TOP)
    title = f"stragglers: {len(flagged)} of {len(s)} ranks flagged" + (f" (top {TOP})" if len(flagged) > TOP else "")
    if fmt != "table":
        return (
            head
            + render(view[["rank", "device", "score", "signals", "evidence"]], fmt, title=title)
            + signals_legend()
            + "\n"
        )
    lines = [title]
    for row in view.itertuples(index=False):
        score = "–" if pd.isna(row.score) else f"{row.score:.1f}"
        sigs = "-" if pd.isna(row.signals) or not row.signals else row.signals
        lines.append(f"  rank {row.rank} (device {row.device}, score {score}, signals {sigs}):")
        lines.append(f"    {printable(row.evidence)}")
    lines.append(signals_legend())
    return head + "\n".join(lines) + "\n"
