"""Kernel sequences for the terminal (``dtrace sequences``): one block per sequence, the kernels
one per line, since a sequence of long kernel names never fits a table cell."""

from __future__ import annotations

import pandas as pd

from ..analyses.sequences import SEPARATOR
from ..core.units import fmt_time
from .escape import printable
from .text import shorten, terminal_width


def sequence_blocks(df: pd.DataFrame, *, title: str, max_rows: int | None = None, width: int | None = None) -> str:
    """``kernel_sequences`` or ``kernel_sequences_xrank`` rows as text blocks, in their order:
    a line with the row's number, op, count and times, then its kernels (names shortened to the
    width, ``width`` 0: never).

    Examples
    --------
    >>> df = pd.DataFrame({"op": ["aten::mm"], "sequence": ["k1 | k2 | k3"], "length": [3], "count": [4],
    ...                    "gpu_ns": [12_000], "span_ns": [15_000], "host_ns": [30_000]})
    >>> print(sequence_blocks(df, title="kernel sequences"), end="")
    kernel sequences
    <BLANKLINE>
    1. aten::mm: 4 × 3 kernels; GPU 12.0 µs, span 15.0 µs, host 30.0 µs
         k1
         k2
         k3
    """
    width = terminal_width() if width is None else width
    shown = df if max_rows is None else df.head(max_rows)
    lines = [printable(title), ""]
    for i, row in enumerate(shown.to_dict("records"), 1):  # the rows shown: tens
        lines.append(f"{i}. {_heading(row)}")
        for name in str(row["sequence"]).split(SEPARATOR):
            lines.append("     " + printable(shorten(name, min(max(width - 5, 20), 100)) if width else name))
    if len(shown) < len(df):
        lines += ["", f"{len(df) - len(shown):,} more sequences not shown (showing {len(shown):,}; --top N or --all)"]
    return "\n".join(lines) + "\n"


def _heading(row: dict[str, object]) -> str:
    """``op: count × length kernels[ on N parts, most on rank R]; GPU …, span …, host …``."""
    where = ""
    if "parts" in row:
        n = row["parts"]
        where = f" on {n} part{'s' * (n != 1)} (most GPU time: rank {row['max_rank']} device {row['max_device']})"
    elif "rank" in row:
        where = f" on rank {row['rank']} device {row['device']}"
    times = f"GPU {fmt_time(row['gpu_ns'])}, span {fmt_time(row['span_ns'])}, host {fmt_time(row['host_ns'])}"
    return f"{printable(row['op'])}: {row['count']} × {row['length']} kernels{where}; {times}"
