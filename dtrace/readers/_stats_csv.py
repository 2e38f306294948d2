"""``nsys stats`` CSV files: find the header, key columns by name, normalise to ns.

Four reports are understood (docs/semantics.md, "Compatibility modes"), each in its new and old spellings:

========================  ==================================================================
report                    key columns (aliases of older nsys versions in parentheses)
========================  ==================================================================
``cuda_gpu_kern_sum``     ``Total Time (ns)``, ``Instances``, ``Avg (ns)`` (``Average``),
(``gpukernsum``)          ``Med (ns)`` (absent), ``Min (ns)`` (``Minimum``), ``Max (ns)``
                          (``Maximum``), ``StdDev (ns)`` (``StdDev``), ``Name``
``cuda_gpu_mem_time_sum`` ``Total Time (ns)``, ``Count`` (``Operations``), ..., ``Operation``
(``gpumemtimesum``)
``nvtx_gpu_proj_trace``   ``Name``, ``Projected Start (ns)``, ``Projected Duration (ns)``,
                          ``Orig Start (ns)``, ``Orig Duration (ns)``, ``PID``, ``TID``,
                          ``NumGPUOps``, ``Lvl``, ``RangeId``, ``ParentId``
``cuda_gpu_trace``        ``Start (ns)``, ``Duration (ns)``, ``CorrId``, ``Bytes (MB)``,
(``gputrace``)            ``Device``, ``Strm``, ``Name`` (``GreenCtx`` only in newer files)
========================  ==================================================================

Lines before the header (``Processing [...] with [...]``, titles, blank lines) are skipped; a
header is the first line holding a report's key columns. A unit in parentheses scales the
column to ns (``(us)``, ``(ms)``, ``(s)``); a column without a unit is in ns, as old files
write it. Missing values are the literal ``None`` (or empty). A file that names no report in
its header, or lacks a key column, fails with one line naming the file and the columns.
"""

from __future__ import annotations

import csv
import io
import os
import re
from dataclasses import dataclass
from typing import cast

import numpy as np
import pandas as pd

from ..errors import InputError
from ._io import open_regular

KERN_SUM, MEM_SUM, NVTX_PROJ, GPU_TRACE = (
    "cuda_gpu_kern_sum",
    "cuda_gpu_mem_time_sum",
    "nvtx_gpu_proj_trace",
    "cuda_gpu_trace",
)
SUMMARY_REPORTS = (KERN_SUM, MEM_SUM, NVTX_PROJ)

# file-name suffixes (before .csv) of each report, new and old names
SUFFIXES = {
    KERN_SUM: ("_cuda_gpu_kern_sum", "_gpukernsum"),
    MEM_SUM: ("_cuda_gpu_mem_time_sum", "_gpumemtimesum"),
    NVTX_PROJ: ("_nvtx_gpu_proj_trace", "_nvtxgpuprojtrace"),
    GPU_TRACE: ("_cuda_gpu_trace", "_gputrace"),
}

# normalised header → canonical column; normalising drops units, spaces, case and punctuation
_ALIASES = {
    "time": "time_pct",
    "time%": "time_pct",
    "totaltime": "total",
    "instances": "count",
    "count": "count",
    "operations": "count",
    "calls": "count",
    "numcalls": "count",
    "avg": "mean",
    "average": "mean",
    "mean": "mean",
    "med": "median",
    "median": "median",
    "min": "min",
    "minimum": "min",
    "max": "max",
    "maximum": "max",
    "stddev": "std",
    "std": "std",
    "name": "name",
    "operation": "name",
    "projectedstart": "proj_start",
    "projectedduration": "proj_dur",
    "origstart": "orig_start",
    "origduration": "orig_dur",
    "style": "style",
    "pid": "pid",
    "tid": "tid",
    "numgpuops": "gpu_ops",
    "lvl": "level",
    "numchild": "children",
    "rangeid": "range_id",
    "parentid": "parent_id",
    "rangestack": "range_stack",
    "start": "start",
    "duration": "dur",
    "corrid": "corr",
    "correlationid": "corr",
    "bytes": "bytes",
    "device": "device",
    "strm": "stream",
    "stream": "stream",
    "ctx": "context",
    "greenctx": "green_context",
    "srcmemkd": "src_kind",
    "dstmemkd": "dst_kind",
}
# the columns that identify a report (all must be present) and the optional ones
REQUIRED = {
    KERN_SUM: ("total", "count", "mean", "min", "max", "name"),
    MEM_SUM: ("total", "count", "mean", "min", "max", "name"),
    NVTX_PROJ: ("name", "proj_start", "proj_dur"),
    GPU_TRACE: ("start", "dur", "name"),
}
_TIME_COLUMNS = {
    "total",
    "mean",
    "median",
    "min",
    "max",
    "std",
    "proj_start",
    "proj_dur",
    "orig_start",
    "orig_dur",
    "start",
    "dur",
}
_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "usec": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_BYTES = {"b": 1, "kb": 1_000, "mb": 1_000_000, "gb": 1_000_000_000, "kib": 1024, "mib": 1 << 20, "gib": 1 << 30}
_UNIT_RE = re.compile(r"\(([^)]*)\)\s*$")
_NA = {"", "none", "null", "nan", "n/a", "-"}


@dataclass(frozen=True)
class Header:
    """Where a report's header is and what each column means."""

    report: str
    line: int  # 0-based line number of the header
    columns: list[str]  # canonical names, in file order ("" for unknown columns)
    scales: list[float]  # factor to ns (times) or bytes (sizes), 1 otherwise
    raw: list[str]


def _canon(cell: str) -> tuple[str, float]:
    text = cell.strip().lstrip("\ufeff")
    scale = 1.0
    m = _UNIT_RE.search(text)
    unit = ""
    if m:
        unit = m.group(1).strip().lower()
        text = text[: m.start()]
    key = re.sub(r"[^a-z0-9%]", "", text.lower())
    col = _ALIASES.get(key, "")
    if col in _TIME_COLUMNS and unit in _UNIT_NS:
        scale = float(_UNIT_NS[unit])
    elif col == "bytes" and unit in _BYTES:
        scale = float(_BYTES[unit])
    return col, scale


def report_of_name(path: str) -> str | None:
    """The report a file name announces (``x_cuda_gpu_kern_sum.csv`` → ``cuda_gpu_kern_sum``)."""
    stem = os.path.basename(path).lower()
    stem = stem[:-4] if stem.endswith(".csv") else stem
    for report, sufs in SUFFIXES.items():
        if stem.endswith(sufs) or stem in tuple(s.lstrip("_") for s in sufs):
            return report
    return None


def report_prefix(path: str) -> str:
    """The report a file belongs to: its path without the ``_cuda_gpu_kern_sum.csv``-style suffix."""
    base = path[:-4] if path.lower().endswith(".csv") else path
    for sufs in SUFFIXES.values():
        for s in sufs:
            if base.lower().endswith(s):
                return base[: -len(s)]
    return base


def find_header(lines: list[str], path: str = "") -> Header | None:
    """The first line that holds all key columns of one report (file-name hint breaks ties)."""
    hint = report_of_name(path) if path else None
    for i, line in enumerate(lines):
        if "," not in line:
            continue
        try:
            cells = next(csv.reader([line]))
        except (csv.Error, StopIteration):
            continue
        header = _header_of(cells, i, hint)
        if header is not None:
            return header
    return None


def _header_of(cells: list[str], i: int, hint: str | None) -> Header | None:
    """The header of line ``i`` (its ``cells``) if it holds all key columns of a report."""
    canon = [_canon(c) for c in cells]
    cols = [c for c, _ in canon]
    have = set(cols)
    matches = [r for r, req in REQUIRED.items() if set(req) <= have]
    if not matches:
        return None
    if MEM_SUM in matches and KERN_SUM in matches:  # same shape: "Operation" vs "Name" decides
        raw = [re.sub(r"[^a-z]", "", c.lower()) for c in cells]
        matches = [MEM_SUM] if "operation" in raw else [KERN_SUM]
    report = hint if hint in matches else matches[0]
    return Header(report, i, cols, [s for _, s in canon], cells)


def sniff(path: str, head: bytes) -> Header | None:
    """The header of an ``nsys stats`` CSV from the file's first bytes (None if not one)."""
    try:
        text = head.decode("utf-8", errors="replace")
    except Exception:  # pragma: no cover - decode with errors="replace" does not raise
        return None
    if "\x00" in text:
        return None
    lines = text.splitlines()
    if len(head) >= 4096 and lines:
        lines = lines[:-1]  # the last line may be cut
    return find_header(lines[:200], path)


def read_report(path: str, expect: str | None = None) -> tuple[str, pd.DataFrame]:
    """Parse one ``nsys stats`` CSV into canonical columns (times in ns).

    Returns the report name and a frame whose columns are the canonical names of
    :data:`REQUIRED` plus the optional ones the file has. Raises :class:`InputError` naming the
    file for a file without a recognisable header, a missing key column (``expect`` given), a
    non-numeric value in a numeric column, or a report nsys skipped.
    """
    try:
        with open_regular(path) as f:
            text = f.read().decode("utf-8", errors="replace")
    except OSError as exc:
        raise InputError(path, f"cannot read the file: {exc.strerror or exc}") from None
    lines = text.splitlines()
    hdr = find_header(lines, path)
    expect = expect or report_of_name(path)
    if hdr is None or (expect and hdr.report != expect):
        raise InputError(path, _why_no_header(lines, expect))
    cols = _body_columns(path, lines, hdr)
    out: dict[str, object] = {}
    for j, (col, scale) in enumerate(zip(hdr.columns, hdr.scales)):
        if not col or col in out:
            continue
        vals = np.asarray(cols[j], dtype=object)
        if col in ("name", "style", "range_stack", "src_kind", "dst_kind"):
            out[col] = np.array([str(v) for v in vals], dtype=object)
            continue
        out[col] = _numbers(vals, scale, path, hdr.raw[j], hdr.line)
    return hdr.report, pd.DataFrame(out)


def _why_no_header(lines: list[str], expect: str | None) -> str:
    """Why a file has no header of the report expected: nsys skipped it, a key column is
    missing (``expect`` given), or it is no nsys stats CSV."""
    skipped = next((ln.strip() for ln in lines if ln.strip().upper().startswith("SKIPPED")), None)
    if skipped:
        return f"nsys stats wrote no data: {skipped}"
    if expect:
        return _missing(expect, lines)
    return f"not an nsys stats CSV (no header with the key columns of {', '.join(REQUIRED)})"


def _body_columns(path: str, lines: list[str], hdr: Header) -> list[tuple[str, ...]]:
    """The cells below the header, column by column (blank rows left out, each row cut or padded
    to the header's width)."""
    body = "\n".join(lines[hdr.line + 1 :])
    try:
        rows = [r for r in csv.reader(io.StringIO(body)) if any(c.strip() for c in r)]
    except csv.Error as exc:  # a field over csv.field_size_limit() (128 KiB), a NUL byte
        raise InputError(path, f"cannot read the CSV below its header (line {hdr.line + 1}): {exc}") from None
    width = len(hdr.columns)
    rows = [r[:width] + [""] * (width - len(r)) for r in rows]
    return list(zip(*rows)) if rows else [() for _ in range(width)]


def _numbers(vals: np.ndarray, scale: float, path: str, column: str, header_line: int) -> np.ndarray:
    """A numeric column (``None``/empty → NaN), scaled."""
    if not len(vals):
        return np.empty(0, np.float64)
    s = pd.Series(vals, dtype=object).astype(str).str.strip()
    na = s.str.lower().isin(_NA)
    num = pd.to_numeric(s.str.replace(",", "", regex=False).where(~na, None), errors="coerce")
    bad = num.isna() & ~na
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(path, f"column {column!r} has a non-numeric value {vals[i]!r} (line {header_line + 2 + i})")
    with np.errstate(over="ignore"):  # 1e308 MB is inf: the callers check ranges, never a warning
        return cast(np.ndarray, num.to_numpy(np.float64) * scale)


def _missing(report: str, lines: list[str]) -> str:
    """Say which key columns of ``report`` the best candidate header lacks."""
    best: tuple[int, list[str], list[str]] | None = None
    for line in lines[:200]:
        if "," not in line:
            continue
        try:
            cells = next(csv.reader([line]), [])
        except csv.Error:  # a field over the CSV module's limit: not a header
            continue
        cols = {_canon(c)[0] for c in cells}
        have = len(set(REQUIRED[report]) & cols)
        if best is None or have > best[0]:
            best = (have, [c for c in REQUIRED[report] if c not in cols], cells)
    if best is None or best[0] == 0:
        return f"no {report} header found (expected columns such as {', '.join(_spell(c) for c in REQUIRED[report])})"
    return (
        f"{report} CSV lacks the columns {[_spell(c) for c in best[1]]} "
        f"(header: {','.join(c.strip() for c in best[2])})"
    )


def _spell(col: str) -> str:
    """How new nsys versions spell a canonical column (for messages)."""
    return {
        "total": "Total Time (ns)",
        "count": "Instances/Count",
        "mean": "Avg (ns)",
        "min": "Min (ns)",
        "max": "Max (ns)",
        "name": "Name/Operation",
        "proj_start": "Projected Start (ns)",
        "proj_dur": "Projected Duration (ns)",
        "start": "Start (ns)",
        "dur": "Duration (ns)",
    }.get(col, col)


def kernel_summary(path: str) -> pd.DataFrame:
    """``cuda_gpu_kern_sum``: name, count, total_ns, mean_ns, median_ns, min_ns, max_ns, std_ns."""
    _, df = read_report(path, KERN_SUM)
    return _summary(df, path)


def memop_summary(path: str) -> pd.DataFrame:
    """``cuda_gpu_mem_time_sum``: the same columns as :func:`kernel_summary`, ``name`` the operation."""
    _, df = read_report(path, MEM_SUM)
    return _summary(df, path)


def _summary(df: pd.DataFrame, path: str) -> pd.DataFrame:
    n = len(df)
    nan = np.full(n, np.nan)
    if n and (np.isnan(df["count"].to_numpy()).any() or np.isnan(df["total"].to_numpy()).any()):
        raise InputError(path, "a row has no instance count or total time")
    return pd.DataFrame(
        {
            "name": df["name"].to_numpy(dtype=object),
            "count": df["count"].to_numpy(np.float64).round().astype(np.int64),
            "total_ns": df["total"].to_numpy(np.float64).round().astype(np.int64),
            "mean_ns": df["mean"].to_numpy(np.float64),
            "median_ns": df["median"].to_numpy(np.float64) if "median" in df else nan,
            "min_ns": df["min"].to_numpy(np.float64),
            "max_ns": df["max"].to_numpy(np.float64),
            "std_ns": df["std"].to_numpy(np.float64) if "std" in df else nan,
        }
    )


def nvtx_projection(path: str) -> pd.DataFrame:
    """``nvtx_gpu_proj_trace``: one row per projected range (name, times in ns, pid, tid, ...)."""
    _, df = read_report(path, NVTX_PROJ)
    n = len(df)

    def col(c: str) -> np.ndarray:
        return df[c].to_numpy(np.float64) if c in df else np.full(n, np.nan)

    return pd.DataFrame(
        {
            "name": df["name"].to_numpy(dtype=object),
            "proj_start_ns": col("proj_start"),
            "proj_dur_ns": col("proj_dur"),
            "orig_start_ns": col("orig_start"),
            "orig_dur_ns": col("orig_dur"),
            "pid": col("pid"),
            "tid": col("tid"),
            "gpu_ops": col("gpu_ops"),
            "level": col("level"),
            "range_id": col("range_id"),
            "parent_id": col("parent_id"),
        }
    )


def gpu_trace(path: str) -> pd.DataFrame:
    """``cuda_gpu_trace``: one row per GPU activity (start_ns, dur_ns, corr, device, stream, bytes, name).

    ``start_ns`` and ``dur_ns`` stay float64 as parsed (the reader checks their range before
    converting them); an id or byte count that int64 cannot hold reads as unknown.
    """
    _, df = read_report(path, GPU_TRACE)
    n = len(df)

    def col(c: str, default: int) -> np.ndarray:
        x = df[c].to_numpy(np.float64) if c in df else np.full(n, float(default))
        ok = np.abs(x) < 2.0**63  # False for NaN and inf
        return np.where(ok, np.where(ok, x, 0).round(), default).astype(np.int64)

    if n and (np.isnan(df["start"].to_numpy()).any() or np.isnan(df["dur"].to_numpy()).any()):
        raise InputError(path, "a row has no start time or duration")
    return pd.DataFrame(
        {
            "start_ns": df["start"].to_numpy(np.float64),
            "dur_ns": df["dur"].to_numpy(np.float64),
            "corr": col("corr", -1),
            "device": col("device", 0),
            "stream": col("stream", -1),
            "bytes": col("bytes", -1),
            "name": df["name"].to_numpy(dtype=object),
        }
    )
