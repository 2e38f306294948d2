"""Summary section of ``dtrace analyze``: GPU time by kernel class across ranks."""

from __future__ import annotations

from ..results import Results
from .text import render


def classes_section(results: Results, fmt: str = "table", max_rows: int = 12) -> str:
    """The ``classes_xrank`` table, largest classes first: total over ranks, mean per
    (rank, device) part, the part with the most, and the share of all GPU event time."""
    if "classes_xrank" not in results.table_names:
        return ""
    cx = results.table("classes_xrank")
    if not len(cx):
        return ""
    label = ""
    if "classes" in results.table_names and len(results.table("classes")):
        label = f" ({results.table('classes')['classifier'].iloc[0]})"
    cols = ["class", "parts", "count", "total_ns", "total_ns_mean", "total_ns_max", "max_rank", "time_share"]
    view = cx[cols].rename(columns={"total_ns_mean": "per_part_ns", "total_ns_max": "max_part_ns"})
    return render(view, fmt, title=f"GPU time by kernel class{label}", max_rows=max_rows)
