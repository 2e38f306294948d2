"""The summary ``dtrace analyze`` prints: inputs, per-rank breakdown, failures."""
from __future__ import annotations

import pandas as pd

from ..results import Results
from .escape import printable
from .text import render


def summary(results: Results, fmt: str = "table", max_ranks: int = 16) -> str:
    m = results.manifest
    parts = [f"dtrace: {m.get('n_inputs', 0)} inputs, {m.get('n_parts', 0)} (rank, device) parts, "
             f"{m.get('n_failed', 0)} failed, {m.get('seconds', 0):.2f} s on {m.get('workers', 1)} worker(s)\n"]
    bd = results.table("breakdown") if "breakdown" in results.table_names else pd.DataFrame()
    if len(bd):
        cols = ["rank", "device", "computation_ns", "exposed_comm_ns", "exposed_memcpy_ns", "idle_ns", "total_ns"]
        view = bd[cols].sort_values(["rank", "device"])
        title = "GPU time breakdown" + (f" (first {max_ranks} of {len(view)} ranks)" if len(view) > max_ranks else "")
        parts.append(render(view, fmt, title=title, max_rows=max_ranks))
    for extra in SUMMARY_SECTIONS:
        text = extra(results, fmt)
        if text:
            parts.append(text)
    errs = results.errors
    if errs:
        parts.append(f"{len(errs)} input(s) failed:\n" + "\n".join(f"  {printable(e)}" for e in errs) + "\n")
    return "\n".join(parts)


# further sections (stragglers, ...) register here: functions (Results, fmt) -> str
SUMMARY_SECTIONS: list = []

from .stragglers import stragglers_section  # noqa: E402 - registered after SUMMARY_SECTIONS exists

SUMMARY_SECTIONS.append(stragglers_section)
from .kernels import classes_section  # noqa: E402

SUMMARY_SECTIONS.insert(0, classes_section)
