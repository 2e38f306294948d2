"""The summary ``dtrace analyze`` prints: inputs, per-rank breakdown, classes, stragglers, failures.

:func:`summary` is the human text (``table`` or ``markdown``); :func:`summary_document` is the
same content as one JSON-able object and :func:`summary_csv` the per-GPU breakdown as one CSV
table, so a machine format is exactly one document (prose goes to stderr, see the CLI).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from ..core.schema import dropped_summary
from ..results import Results
from .escape import markdown_cell, printable, prose
from .headline import headline
from .text import flags, render

BREAKDOWN_COLUMNS = [
    "rank",
    "device",
    "computation_ns",
    "exposed_comm_ns",
    "exposed_memcpy_ns",
    "idle_ns",
    "total_ns",
    "comm_overlap_share",
]


def header(results: Results) -> str:
    """The first line: inputs, parts, failures, run time (:func:`~dtrace.render.headline.headline`)."""
    return headline(results.record)


def _breakdown(results: Results) -> pd.DataFrame:
    if "breakdown" not in results.table_names:
        return pd.DataFrame({c: [] for c in BREAKDOWN_COLUMNS})
    bd = results.table("breakdown")
    return bd[[c for c in BREAKDOWN_COLUMNS if c in bd.columns]].sort_values(["rank", "device"])


def summary(results: Results, fmt: str = "table", max_ranks: int = 16) -> str:
    """The human summary (``fmt`` ``table`` or ``markdown``)."""
    parts = [header(results)]
    view = _breakdown(results)
    if len(view) > max_ranks:
        view, why = shown_gpus(view, _flagged(results), max_ranks)
        parts.append(
            render(view, fmt, title=f"GPU time breakdown ({len(view)} of {len(_breakdown(results))} GPUs: {why})")
        )
    elif len(view):
        parts.append(render(view, fmt, title="GPU time breakdown"))
    for extra in SUMMARY_SECTIONS:
        text = extra(results, fmt)
        if text:
            parts.append(text)
    notes = (dropped_note(results), absent_note(results), _failed_tables_note(results), _own_outputs_note(results))
    parts += [prose(note, fmt) for note in notes if note]
    errs = results.errors
    if errs:
        line = markdown_cell if fmt == "markdown" else printable  # each error on one line, escaped
        parts.append(f"{len(errs)} input(s) failed:\n" + "\n".join(f"  {line(e)}" for e in errs) + "\n")
    return "\n".join(parts)


def _failed_tables_note(results: Results) -> str:
    """The tables of the user's own analyses that failed, one error a line ("" if none)."""
    failed = results.failed_tables
    if not failed:
        return ""
    return (
        f"{len(failed)} table(s) of your own analyses failed:\n"
        + "\n".join(f"  {' '.join(str(e).split())}" for e in failed.values())
        + "\n"
    )


def _own_outputs_note(results: Results) -> str:
    """dtrace's own outputs (and results folders) skipped among the inputs ("" if none)."""
    m = results.record
    own = [i for i in m.inputs if i.status == "skipped" and i.error_type == "OwnOutput"]
    folders = [n for n in m.notes if "a results folder of dtrace" in n]
    if not (own or folders):
        return ""
    shown = [str(i.error) for i in own[:5]] + folders[:5]
    return (
        f"skipped {len(own) + len(folders)} of dtrace's own outputs among the inputs:\n"
        + "\n".join(f"  {' '.join(s.split())}" for s in shown)
        + ("\n  ..." if len(own) > 5 or len(folders) > 5 else "")
        + "\n"
    )


def _flagged(results: Results) -> list[tuple[int, int]]:
    """The flagged stragglers' (rank, device), highest score first."""
    if "stragglers" not in results.table_names:
        return []
    s = results.table("stragglers")
    if not len(s) or not {"rank", "device", "flagged"} <= set(s.columns):
        return []
    s = s.loc[flags(s["flagged"])]
    if "score" in s.columns:
        s = s.sort_values("score", ascending=False, kind="stable")
    return [(int(r), int(d)) for r, d in zip(s["rank"], s["device"])]


def shown_gpus(view: pd.DataFrame, flagged: list[tuple[int, int]], n: int) -> tuple[pd.DataFrame, str]:
    """The ``n`` GPUs of a breakdown to show when there are more, and why those: the flagged
    stragglers first, then the extremes (highest and lowest) of each time column, then by rank.

    Examples
    --------
    >>> v = pd.DataFrame({"rank": range(6), "device": [0] * 6, "idle_ns": [5, 1, 9, 2, 3, 4]})
    >>> rows, why = shown_gpus(v, [(4, 0)], 3)
    >>> rows["rank"].tolist(), why
    ([4, 2, 1], 'the flagged stragglers, the highest and lowest of each column, then by rank')
    """
    key = list(zip(view["rank"].astype(int), view["device"].astype(int)))
    pos = {k: i for i, k in enumerate(key)}
    order = [pos[k] for k in flagged if k in pos]
    for c in [c for c in view.columns if c.endswith("_ns")]:
        v = view[c].to_numpy(np.float64, na_value=np.nan)
        if np.isfinite(v).any():
            order += [int(np.nanargmax(v)), int(np.nanargmin(v))]
    order += list(range(len(view)))
    chosen = list(dict.fromkeys(order))[:n]
    return view.iloc[chosen], "the flagged stragglers, the highest and lowest of each column, then by rank"


def dropped_note(results: Results) -> str:
    """How many events with implausible times the readers dropped, by reason (one line)."""
    dropped: dict[str, int] = {}
    for item in results.record.inputs:
        for reason, n in item.dropped_events.items():
            dropped[reason] = dropped.get(reason, 0) + n
    if not dropped:
        return ""
    return (
        f"{sum(dropped.values())} event(s) with implausible times dropped ({dropped_summary(dropped)}; "
        f"per input in manifest.json)\n"
    )


def absent_note(results: Results) -> str:
    """Which tables the inputs could not fill and why (``absent_tables`` of the manifest), one line per reason."""
    by_why: dict[str, list[str]] = {}
    for name, why in results.record.absent_tables.items():
        by_why.setdefault(why, []).append(name)
    return "".join(f"no rows in {', '.join(names)}: {printable(why)}\n" for why, names in by_why.items())


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return json.loads(df.to_json(orient="records", force_ascii=False))


def summary_document(results: Results) -> dict[str, Any]:
    """The summary as one JSON-able object: ``run`` (counts, time, path), ``breakdown`` (every
    GPU, raw ns), ``classes`` (``classes_xrank``), ``stragglers`` (the flagged ranks) and
    ``errors`` (one message per failed input)."""
    m = results.record
    doc: dict[str, Any] = {
        "run": {
            k: getattr(m, k)
            for k in ("n_inputs", "n_parts", "n_failed", "seconds", "workers", "dtrace_version", "created")
        }
    }
    doc["run"]["results"] = results.path
    doc["breakdown"] = _records(_breakdown(results))
    if "classes_xrank" in results.table_names:
        doc["classes"] = _records(results.table("classes_xrank"))
    if "stragglers" in results.table_names:
        s = results.table("stragglers")
        cols = [c for c in ("rank", "device", "score", "signals", "evidence") if c in s.columns]
        doc["stragglers"] = _records(s.loc[flags(s["flagged"]), cols]) if "flagged" in s.columns else []
    doc["errors"] = results.errors
    if results.failed_tables:
        doc["failed_tables"] = results.failed_tables
    return doc


def summary_csv(results: Results) -> str:
    """The per-GPU breakdown (raw ns, every GPU) as one CSV table."""
    return render(_breakdown(results), "csv")


# further sections (stragglers, ...) register here: functions (Results, fmt) -> str
SUMMARY_SECTIONS: list = []

from .stragglers import stragglers_section  # noqa: E402 - registered after SUMMARY_SECTIONS exists

SUMMARY_SECTIONS.append(stragglers_section)
from .bounds import bounds_section  # noqa: E402

SUMMARY_SECTIONS.append(bounds_section)
from .kernels import classes_section  # noqa: E402

SUMMARY_SECTIONS.insert(0, classes_section)
from .opperf import perf_summary_section  # noqa: E402

SUMMARY_SECTIONS.append(perf_summary_section)
