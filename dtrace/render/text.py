"""Terminal and text renderers for results tables (units chosen here, never in tables)."""
from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd

FORMATS = ("table", "csv", "json", "markdown")


def pick_unit(values: np.ndarray) -> tuple[str, float]:
    """A readable time unit for ns values: the one that keeps the median magnitude ≥ 1."""
    v = np.abs(np.asarray(values, dtype=np.float64))
    v = v[v > 0]
    m = float(np.median(v)) if v.size else 0.0
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if m >= scale:
            return unit, scale
    return "ns" if m and m < 1e3 else "µs", (1.0 if m and m < 1e3 else 1e3)


def humanize(df: pd.DataFrame) -> pd.DataFrame:
    """Convert ``*_ns`` columns to a readable unit per column (renamed ``name (unit)``)."""
    out = {}
    for c in df.columns:
        if c.endswith("_ns") and pd.api.types.is_numeric_dtype(df[c]):
            unit, scale = pick_unit(df[c].to_numpy())
            out[f"{c[:-3]} ({unit})"] = (df[c].to_numpy(dtype=np.float64) / scale).round(3)
        elif pd.api.types.is_float_dtype(df[c]):
            out[c] = df[c].round(4)
        else:
            out[c] = df[c]
    return pd.DataFrame(out)


def shorten(name: str, width: int = 60) -> str:
    """Readable kernel name: template/argument lists elided, then cut to ``width``."""
    s = str(name)
    if len(s) <= width:
        return s
    # drop argument list and template arguments (keep the outer identifier)
    depth = 0
    out = []
    for ch in s:
        if ch in "<(":
            if depth == 0:
                out.append("<…>" if ch == "<" else "(…)")
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    s2 = "".join(out)
    s2 = s2.replace("void ", "", 1) if s2.startswith("void ") else s2
    return s2 if len(s2) <= width else s2[: width - 1] + "…"


def render(df: pd.DataFrame, fmt: str = "table", *, title: str | None = None, human: bool = True,
           max_rows: int | None = None, short_names: bool = True) -> str:
    """Render a DataFrame as a terminal table, CSV, JSON (records) or Markdown."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    if max_rows is not None:
        df = df.head(max_rows)
    if fmt == "csv":
        return df.to_csv(index=False)
    if fmt == "json":
        return json.dumps(json.loads(df.to_json(orient="records")), indent=1) + "\n"
    view = humanize(df) if human else df
    if short_names:
        view = view.copy()
        for c in view.columns:
            if c in ("name", "prev_name", "next_name", "op") and view[c].dtype == object:
                view[c] = view[c].map(lambda x: shorten(x, 60))
    if fmt == "markdown":
        cols = [str(c) for c in view.columns]
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for row in view.itertuples(index=False):
            lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
        return ((f"### {title}\n\n" if title else "") + "\n".join(lines) + "\n")
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, show_lines=False, header_style="bold")
    for c in view.columns:
        t.add_column(str(c), justify="right" if pd.api.types.is_numeric_dtype(view[c]) else "left",
                     overflow="fold")
    for row in view.itertuples(index=False):
        t.add_row(*(_cell(v) for v in row))
    buf = io.StringIO()
    Console(file=buf, width=200, force_terminal=False, color_system=None).print(t)
    return buf.getvalue()


def _cell(v: object) -> str:
    if isinstance(v, (float, np.floating)):
        if np.isnan(v):
            return ""
        return f"{v:,.3f}".rstrip("0").rstrip(".") if abs(v) < 1e15 else f"{v:.3e}"
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)
