"""TraceLens's perf report from a results folder: its sheets as DataFrames, a workbook, CSV files.

TraceLens's ``TraceLens_generate_perf_report_pytorch`` writes one trace's Excel report; people pass
it around and read it with scripts that know its sheet names and column headers. This module
builds the same sheets from what ``dtrace analyze`` stored, for one GPU or for every rank of a job
(docs/perf_report.md lists every sheet, its columns, the table each comes from and where a figure
is defined differently):

- :func:`perf_report_sheets`: ``{sheet name: DataFrame}`` with TraceLens's column names — a pure
  function of the tables (a :class:`~dtrace.results.Results` or a mapping of frames);
- :func:`workbook_bytes`: those sheets as one ``.xlsx`` workbook (openpyxl, the optional extra
  ``dtrace[xlsx]``), the header row frozen and filtered, columns sized to their text;
- :func:`csv_files`: one CSV text per sheet (no extra package).

Nothing here writes a file: the CLI (``dtrace perf-report``) does.

Examples
--------
>>> import pandas as pd
>>> bd = pd.DataFrame({"rank": [0], "device": [0], "computation_ns": [6_000_000], "exposed_comm_ns": [0],
...                    "exposed_memcpy_ns": [1_000_000], "busy_ns": [7_000_000], "idle_ns": [3_000_000],
...                    "total_ns": [10_000_000], "comm_ns": [0], "memcpy_ns": [1_000_000]})
>>> sheets = perf_report_sheets({"breakdown": bd}, rank=0)
>>> list(sheets), sheets["gpu_timeline"].columns.tolist()
(['gpu_timeline'], ['type', 'time ms', 'percent'])
>>> sheets["gpu_timeline"].head(3).to_dict("list")
{'type': ['computation_time', 'exposed_comm_time', 'exposed_memcpy_time'], 'time ms': [6.0, 0.0, 1.0], 'percent': [60.0, 0.0, 10.0]}
"""

from __future__ import annotations

import io
import json
import re
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import pandas as pd

from ..errors import ResultsError, UsageError
from .escape import printable, to_csv
from .views import id_ranges

if TYPE_CHECKING:
    from ..results import Results

PART = ["rank", "device"]
MIB = 2**20

#: gpu_timeline rows: TraceLens's ``type`` and the ``breakdown`` column it comes from, in TraceLens's order
TIMELINE_ROWS = (
    ("computation_time", "computation_ns"),
    ("exposed_comm_time", "exposed_comm_ns"),
    ("exposed_memcpy_time", "exposed_memcpy_ns"),
    ("busy_time", "busy_ns"),
    ("idle_time", "idle_ns"),
    ("total_time", "total_ns"),
    ("total_comm_time", "comm_ns"),
    ("total_memcpy_time", "memcpy_ns"),
)

#: TraceLens's op category of each dtrace op family: (forward, backward)
FAMILY_CATEGORY = {
    "gemm": ("GEMM", "GEMM"),
    "conv": ("CONV_fwd", "CONV_bwd"),
    "attention": ("SDPA_fwd", "SDPA_bwd"),
    "norm": ("NORM_fwd", "NORM_bwd"),
    "elementwise": ("elementwise", "elementwise"),
    "copy": ("elementwise", "elementwise"),
    "reduce": ("reduce", "reduce"),
    "softmax": ("other", "other"),
    "gather": ("other", "other"),
}
#: the categories of ops without a model, by name (first match); the rest is ``other``
UNMODELLED_CATEGORY = (
    (re.compile(r"^triton"), "triton"),
    (re.compile(r"_foreach_|multi_tensor_apply"), "multi_tensor_apply"),
)

#: the roofline sheets, one per op category that has modelled rows, in this order
CATEGORY_SHEETS = (
    "GEMM",
    "CONV_fwd",
    "CONV_bwd",
    "SDPA_fwd",
    "SDPA_bwd",
    "NORM_fwd",
    "NORM_bwd",
    "elementwise",
    "reduce",
)
SHEETS = ("gpu_timeline", "ops_summary_by_category", "ops_summary", "ops_unique_args", "unified_perf_summary")
"""The sheets every report with op rows has, in TraceLens's order; the roofline sheets
(:data:`CATEGORY_SHEETS`) and ``coll_analysis`` follow."""

# dtrace's throughput over many instances is total work over total time; TraceLens's `_mean` is the
# mean of per-instance rates, which needs every instance's time (dtrace keeps min, median, max)
TFLOPS = "TFLOPS/s (total FLOPs / total time)"
TBPS = "TB/s (total bytes / total time)"
PCT_ROOFLINE = "Pct Roofline (total roofline / total time)"
MSG_MB = "Msg size (MB) = max(in, out)"
PCT, CUM = "Percentage (%)", "Cumulative Percentage (%)"
#: the ``op_perf`` columns the op sheets read (the throughput and roofline ones are optional)
OP_PERF_COLUMNS: tuple[str, ...] = ("op", "family", "backward", "shapes", "dtypes", "strides", "args", "count")
OP_PERF_COLUMNS += ("gpu_ns", "min_ns", "median_ns", "max_ns", "flops", "bytes", "unit", "precision", "params")
EXCEL_MAX_ROWS = 1_048_576
"""Rows of an Excel sheet, the header included."""
EXCEL_MAX_TEXT = 32_767
"""Characters of an Excel cell: longer text is cut in the workbook (the CSV files keep it whole)."""
EXCEL_SHEET_NAME = re.compile(r"[^\[\]:*?/\\]{1,31}")
TABLES = ("breakdown", "op_perf", "collectives", "collective_instances")


def perf_report_sheets(
    results: Results | Mapping[str, pd.DataFrame],
    *,
    rank: int | None = None,
    device: int | None = None,
    top: int | None = None,
) -> dict[str, pd.DataFrame]:
    """TraceLens's perf-report sheets of a results folder, ``{sheet name: DataFrame}``.

    Parameters
    ----------
    results
        The loaded folder (:func:`dtrace.load`) or its tables by name: ``breakdown`` (the
        ``gpu_timeline`` sheet), ``op_perf`` (the op sheets), ``collectives`` and
        ``collective_instances`` (``coll_analysis``). A table that is absent gives no sheet.
    rank, device
        One rank (every device of it) or one (rank, device): TraceLens's layout, without rank
        and device columns, when that is one GPU. ``None``: every rank, each sheet holding the
        rows of every GPU with ``rank`` and ``device`` columns first (``coll_analysis``: TraceLens's
        ``rank`` column in both layouts).
    top
        Keep the ``top`` rows with the most kernel time of each op sheet, per GPU; the percentages
        stay shares of the GPU's whole op time. ``None``: every row.

    Raises
    ------
    UsageError
        ``rank`` or ``device`` names no GPU of the results (the message lists those there are).
    ResultsError
        No table to build a sheet from, or an ``op_perf`` table without a column the sheets read
        (results of an older version).
    """
    tables, where = _tables(results)
    tables, keep_parts = _select(tables, rank, device, where)
    sheets: dict[str, pd.DataFrame] = {}
    if "breakdown" in tables:
        sheets["gpu_timeline"] = gpu_timeline(tables["breakdown"])
    if "op_perf" in tables:
        sheets.update(op_sheets(tables["op_perf"], top=top, where=where))
    coll = tables.get("collectives")
    if coll is not None and len(coll):
        sheets["coll_analysis"] = coll_analysis(coll, tables.get("collective_instances"))
    if not sheets:
        raise ResultsError(f"{where}: no breakdown, op_perf or collectives table to build a perf report from")
    return {name: _layout(name, df, keep_parts) for name, df in sheets.items()}


def _tables(results: Results | Mapping[str, pd.DataFrame]) -> tuple[dict[str, pd.DataFrame], str]:
    """The tables the sheets read, and the name of the results for messages."""
    if isinstance(results, Mapping):
        return {n: results[n] for n in TABLES if n in results}, "the results"
    names = set(results.table_names)
    return {n: results.table(n) for n in TABLES if n in names}, str(results.path or "the results")


def _select(
    tables: dict[str, pd.DataFrame], rank: int | None, device: int | None, where: str
) -> tuple[dict[str, pd.DataFrame], bool]:
    """The tables' rows of the selected GPUs, and whether the sheets keep the rank and device columns."""
    if rank is None:
        if device is not None:
            raise UsageError("a device selects nothing without its rank: give rank and device")
        return tables, True
    frames = [t[PART] for t in tables.values() if "rank" in t.columns]
    parts = (
        pd.concat(frames, ignore_index=True).drop_duplicates() if frames else pd.DataFrame({"rank": [], "device": []})
    )
    mine = parts.loc[parts["rank"].to_numpy() == rank]
    if not len(mine):
        raise UsageError(f"no rank {rank} in {where}; ranks: {id_ranges(parts['rank'])}")
    if device is not None:
        if not (mine["device"].to_numpy() == device).any():
            raise UsageError(f"rank {rank} has no device {device} in {where}; its devices: {id_ranges(mine['device'])}")
        mine = mine.loc[mine["device"].to_numpy() == device]
    out = {}
    for name, t in tables.items():
        if "rank" in t.columns:
            keep = t["rank"].to_numpy() == rank
            if device is not None:
                keep &= t["device"].to_numpy() == device
            t = t.loc[keep]
        out[name] = t
    return out, len(mine) > 1


def _layout(name: str, df: pd.DataFrame, keep_parts: bool) -> pd.DataFrame:
    """One GPU: TraceLens's layout (no rank and device columns; ``coll_analysis`` keeps its rank)."""
    if keep_parts:
        return df.reset_index(drop=True)
    drop = ["device"] if name == "coll_analysis" else PART
    return df.drop(columns=drop).reset_index(drop=True)


def gpu_timeline(breakdown: pd.DataFrame) -> pd.DataFrame:
    """TraceLens's ``gpu_timeline`` per GPU: ``type``, ``time ms``, ``percent`` of ``total_time``.

    Examples
    --------
    >>> bd = pd.DataFrame({"rank": [1], "device": [0], **{c: [4_000_000] for _, c in TIMELINE_ROWS}})
    >>> gpu_timeline(bd).iloc[5:7].to_dict("list")
    {'rank': [1, 1], 'device': [0, 0], 'type': ['total_time', 'total_comm_time'], 'time ms': [4.0, 4.0], 'percent': [100.0, 100.0]}
    """
    bd = breakdown.sort_values(PART, kind="stable")
    n, k = len(bd), len(TIMELINE_ROWS)
    values = np.stack([bd[col].to_numpy(np.float64) for _, col in TIMELINE_ROWS], axis=1) if n else np.zeros((0, k))
    total = bd["total_ns"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(total[:, None] > 0, values / total[:, None] * 100, np.nan)
    return pd.DataFrame(
        {
            "rank": np.repeat(bd["rank"].to_numpy(), k),
            "device": np.repeat(bd["device"].to_numpy(), k),
            "type": np.tile(np.array([t for t, _ in TIMELINE_ROWS], dtype=object), n),
            "time ms": values.reshape(-1) / 1e6,
            "percent": pct.reshape(-1),
        }
    )


# -- the op sheets (op_perf) ----------------------------------------------------------------------
def op_category(name: str, family: str, backward: bool) -> str:
    """TraceLens's op category of an op: by its dtrace family, else by its name.

    Examples
    --------
    >>> op_category("aten::mm", "gemm", False), op_category("aten::convolution_backward", "conv", True)
    ('GEMM', 'CONV_bwd')
    >>> op_category("aten::_softmax", "softmax", False), op_category("triton_poi_fused_add_0", "unmodelled", False)
    ('other', 'triton')
    """
    pair = FAMILY_CATEGORY.get(family)
    if pair is not None:
        return pair[1] if backward else pair[0]
    for rx, category in UNMODELLED_CATEGORY:
        if rx.search(name):
            return category
    return "other"


def tuple_text(texts: pd.Series) -> np.ndarray:
    """Recorded argument texts (JSON lists, ``op_perf``'s ``shapes``, ``dtypes``, ...) as TraceLens
    prints them: Python tuples. Each distinct text is converted once; one that is not JSON stays.

    Examples
    --------
    >>> tuple_text(pd.Series(['[[1024],[5185,1024],[]]', '["c10::BFloat16","Scalar"]', "", "[oops"])).tolist()
    ['((1024,), (5185, 1024), ())', "('c10::BFloat16', 'Scalar')", '', '[oops']
    """
    codes, uniq = pd.factorize(texts.fillna("").astype(str), sort=False)
    converted = np.array([_tuple_repr(u) for u in uniq] + [""], dtype=object)
    return converted[codes]


def _tuple_repr(text: str) -> str:
    if not text:
        return ""
    try:
        value = json.loads(text)
        return repr(_as_tuple(value)) if isinstance(value, list) else text
    except (ValueError, RecursionError):
        return text


def _as_tuple(value: Any) -> Any:
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list) else value


def _categories(op: pd.DataFrame) -> np.ndarray:
    """:func:`op_category` of every row, decided once per distinct (op, family, backward)."""
    key = op["op"].astype(str) + "\x00" + op["family"].astype(str) + "\x00" + op["backward"].astype(str)
    codes, uniq = pd.factorize(key, sort=False)
    cats = [op_category(n, f, b == "True") for n, f, b in (u.split("\x00") for u in uniq)]
    return np.array(cats + ["other"], dtype=object)[codes]


def op_rows(op_perf: pd.DataFrame, where: str = "op_perf") -> pd.DataFrame:
    """``op_perf`` in TraceLens's names and units, one row per (GPU, op, arguments): the rows
    every op sheet is grouped or sorted from."""
    missing = [c for c in OP_PERF_COLUMNS if c not in op_perf.columns]
    if missing:
        raise ResultsError(f"{where}: op_perf has no {', '.join(missing)}; re-run dtrace analyze with this version")
    op = op_perf.reset_index(drop=True)
    count = op["count"].to_numpy(np.float64)
    flops, nbytes = op["flops"].to_numpy(np.float64), op["bytes"].to_numpy(np.float64)
    unit, precision = op["unit"].fillna("").astype(str), op["precision"].fillna("").astype(str)
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = np.where(nbytes > 0, flops / nbytes, np.nan)
    rows = pd.DataFrame(
        {
            "rank": op["rank"].to_numpy(),
            "device": op["device"].to_numpy(),
            "name": op["op"].astype(str).to_numpy(object),
            "op category": _categories(op),
            "Input Dims": tuple_text(op["shapes"]),
            "Input type": tuple_text(op["dtypes"]),
            "Input Strides": tuple_text(op["strides"]),
            "Concrete Inputs": tuple_text(op["args"]),
            "count": op["count"].to_numpy(np.int64),
            "time_us": op["gpu_ns"].to_numpy(np.float64) / 1e3,
            "median_us": op["median_ns"].to_numpy(np.float64) / 1e3,
            "min_us": op["min_ns"].to_numpy(np.float64) / 1e3,
            "max_us": op["max_ns"].to_numpy(np.float64) / 1e3,
            "GFLOPS": flops / 1e9,
            "Data Moved (MB)": nbytes / MIB,
            "FLOPS/Byte": intensity,
            "Compute Spec": np.where(unit.to_numpy(object) != "", (unit + "_" + precision).to_numpy(object), ""),
            "has_perf_model": (op["family"].astype(str) != "unmodelled").to_numpy(bool),
            "params": op["params"].fillna("").astype(str).to_numpy(object),
        }
    )
    rows["mean_us"] = rows["time_us"] / np.maximum(count, 1)
    return pd.concat([rows, _roofline(op)], axis=1)


def _roofline(op: pd.DataFrame) -> pd.DataFrame:
    """The throughput and roofline columns (empty where the results have no roofline)."""
    n = len(op)
    nan = np.full(n, np.nan)

    def floats(col: str) -> np.ndarray:
        return pd.to_numeric(op[col], errors="coerce").to_numpy(np.float64, na_value=np.nan) if col in op else nan

    bound = op["bound"].fillna("").astype(str) if "bound" in op else pd.Series([""] * n, dtype=object)
    with np.errstate(divide="ignore", invalid="ignore"):
        roof_us = floats("roofline_ns") / op["count"].to_numpy(np.float64) / 1e3
    return pd.DataFrame(
        {
            TFLOPS: floats("tflops"),
            TBPS: floats("tbps"),
            "Roofline Bound": np.where(
                bound.to_numpy(object) != "", (bound.str.upper() + "_BOUND").to_numpy(object), ""
            ),
            "Roofline Time (µs)": roof_us,
            PCT_ROOFLINE: floats("roofline_share") * 100,
        }
    )


def op_sheets(op_perf: pd.DataFrame, *, top: int | None = None, where: str = "op_perf") -> dict[str, pd.DataFrame]:
    """The op sheets of ``op_perf`` (rank and device columns first): ``ops_summary_by_category``,
    ``ops_summary``, ``ops_unique_args``, ``unified_perf_summary`` and one roofline sheet per op
    category with modelled rows."""
    rows = op_rows(op_perf, where)
    roofline = bool(rows["Roofline Time (µs)"].notna().any())
    out = {
        "ops_summary_by_category": ops_summary_by_category(rows),
        "ops_summary": _head(ops_summary(rows), top),
        "ops_unique_args": _head(ops_unique_args(rows), top),
        "unified_perf_summary": _head(unified_perf_summary(rows, roofline=roofline), top),
    }
    modelled = rows.loc[rows["GFLOPS"].notna().to_numpy()]
    for category in CATEGORY_SHEETS:
        part = modelled.loc[modelled["op category"].to_numpy() == category]
        if len(part):
            out[category] = _head(category_sheet(part, roofline=roofline), top)
    return out


def _by_time(df: pd.DataFrame, time_col: str, name_col: str) -> pd.DataFrame:
    """Rows per GPU, most time first (ties by name), with TraceLens's percentage of the GPU's
    total and its running sum."""
    df = df.sort_values([*PART, time_col, name_col], ascending=[True, True, False, True], kind="stable")
    total = df.groupby(PART, sort=False)[time_col].transform("sum").to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(total > 0, df[time_col].to_numpy(np.float64) / total * 100, np.nan)
    df = df.assign(**{PCT: pct})
    df[CUM] = df.groupby(PART, sort=False)[PCT].cumsum()
    return df.reset_index(drop=True)


def _head(df: pd.DataFrame, top: int | None) -> pd.DataFrame:
    return df if top is None else df.groupby(PART, sort=False).head(top).reset_index(drop=True)


def ops_summary_by_category(rows: pd.DataFrame) -> pd.DataFrame:
    """Kernel time per op category: ``op category``, ``Count``, ``total_direct_kernel_time_ms``."""
    g = rows.groupby([*PART, "op category"], sort=False).agg(Count=("count", "sum"), t=("time_us", "sum")).reset_index()
    g["total_direct_kernel_time_ms"] = g["t"] / 1e3
    g = _by_time(g.drop(columns="t"), "total_direct_kernel_time_ms", "op category")
    return g[[*PART, "op category", "Count", "total_direct_kernel_time_ms", PCT, CUM]]


def ops_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Kernel time per op name; ``Categories`` as TraceLens prints its set (``{'GEMM'}``: an op
    name has one category, its family and direction being the name's)."""
    g = rows.groupby([*PART, "name"], sort=False).agg(
        total_direct_kernel_time_sum=("time_us", "sum"),
        Count=("count", "sum"),
        Categories=("op category", "first"),
    )
    g = g.reset_index()
    g["Categories"] = g["Categories"].map({c: "{" + repr(c) + "}" for c in g["Categories"].unique()})
    g["total_direct_kernel_time_ms"] = g["total_direct_kernel_time_sum"] / 1e3
    g = _by_time(g, "total_direct_kernel_time_sum", "name")
    cols = ["name", "total_direct_kernel_time_sum", "total_direct_kernel_time_ms", "Count", "Categories", PCT, CUM]
    return g[[*PART, *cols]]


ARGS = ["Input Dims", "Input type", "Input Strides", "Concrete Inputs"]


def ops_unique_args(rows: pd.DataFrame) -> pd.DataFrame:
    """Kernel time per (op, arguments): count, mean, median, min, max and sum of the instances (µs)."""
    d = rows.rename(
        columns={
            "count": "operation_count",
            "mean_us": "total_direct_kernel_time_mean",
            "median_us": "total_direct_kernel_time_median",
            "min_us": "total_direct_kernel_time_min",
            "max_us": "total_direct_kernel_time_max",
            "time_us": "total_direct_kernel_time_sum",
        }
    )
    d = _by_time(d, "total_direct_kernel_time_sum", "name")
    times = [f"total_direct_kernel_time_{s}" for s in ("mean", "median", "min", "max", "sum")]
    return d[[*PART, "name", "op category", *ARGS, "operation_count", *times, PCT, CUM]]


def unified_perf_summary(rows: pd.DataFrame, *, roofline: bool) -> pd.DataFrame:
    """Every op row with its FLOPs, bytes, throughput and (with a roofline) its roofline."""
    d = rows.rename(
        columns={
            "count": "operation_count",
            "mean_us": "Kernel Time (µs)_mean",
            "time_us": "Kernel Time (µs)_sum",
            "Roofline Time (µs)": "Roofline Time (µs)_first",
        }
    )
    d = _by_time(d, "Kernel Time (µs)_sum", "name")
    figures = ["GFLOPS", "Data Moved (MB)", "FLOPS/Byte", "Compute Spec"]
    times = ["Kernel Time (µs)_mean", "Kernel Time (µs)_sum"]
    if roofline:
        cols = [*figures, "Roofline Bound", TFLOPS, TBPS, *times, "Roofline Time (µs)_first", PCT_ROOFLINE]
    else:
        cols = [*figures, TFLOPS, TBPS, *times]
    return d[[*PART, "name", "op category", *ARGS, "operation_count", *cols, "has_perf_model", PCT, CUM]]


def category_sheet(rows: pd.DataFrame, *, roofline: bool) -> pd.DataFrame:
    """One op category's roofline sheet: the model's dimensions as ``param: X`` columns, the
    figures, the roofline and the kernel time statistics of each (op, arguments)."""
    d = rows.sort_values([*PART, "time_us", "name"], ascending=[True, True, False, True], kind="stable")
    d = d.reset_index(drop=True)
    params = param_columns(d["params"])
    d = d.rename(
        columns={
            "GFLOPS": "GFLOPS_first",
            "Data Moved (MB)": "Data Moved (MB)_first",
            "FLOPS/Byte": "FLOPS/Byte_first",
            "Roofline Time (µs)": "Roofline Time (µs)_first",
            "Roofline Bound": "Roofline Bound_first",
            **{a: f"{a}_first" for a in ARGS},
            **{f"{s}_us": f"Kernel Time (µs)_{s}" for s in ("mean", "median", "min", "max")},
            "time_us": "Kernel Time (µs)_sum",
            "count": "name_count",
        }
    )
    figures = ["GFLOPS_first", "Data Moved (MB)_first", "FLOPS/Byte_first", TBPS, TFLOPS, "Compute Spec"]
    roof = ["Roofline Time (µs)_first", "Roofline Bound_first", PCT_ROOFLINE] if roofline else []
    times = [f"Kernel Time (µs)_{s}" for s in ("mean", "median", "min", "max", "sum")]
    out = pd.concat([d[[*PART, "name"]], params], axis=1)
    return pd.concat([out, d[[*figures, *roof, *(f"{a}_first" for a in ARGS), *times, "name_count", "params"]]], axis=1)


_PARAM = re.compile(r"([A-Za-z_]\w*)=(\S+)")


def param_columns(params: pd.Series) -> pd.DataFrame:
    """The ``KEY=VALUE`` words of dtrace's model dimensions (``M=4096 N=4096 K=512``) as
    TraceLens's ``param: KEY`` columns (whole numbers as numbers), in order of first appearance.

    Examples
    --------
    >>> param_columns(pd.Series(["M=8 N=4 K=2 +bias", "rows=5 C=64"])).to_dict("list")
    {'param: M': [8, None], 'param: N': [4, None], 'param: K': [2, None], 'param: rows': [None, 5], 'param: C': [None, 64]}
    """
    codes, uniq = pd.factorize(params.fillna("").astype(str), sort=False)
    parsed = [dict(_PARAM.findall(u)) for u in uniq]
    keys = list(dict.fromkeys(k for p in parsed for k in p))
    cols = {}
    for k in keys:
        per_text = np.array([_number(p.get(k)) for p in parsed] + [None], dtype=object)
        cols[f"param: {k}"] = per_text[codes]
    return pd.DataFrame(cols, index=params.index)


def _number(text: str | None) -> object:
    return int(text) if text is not None and re.fullmatch(r"-?\d{1,18}", text) else text


# -- collectives ----------------------------------------------------------------------------------
def coll_analysis(collectives: pd.DataFrame, instances: pd.DataFrame | None = None) -> pd.DataFrame:
    """TraceLens's ``coll_analysis``: per GPU and (process group, collective, group size, stream,
    message size), the instances' count and their durations' sum, mean, standard deviation, min
    and max (µs). A collective matched by stream alone (no collective args in the trace) has no
    process group.

    Examples
    --------
    >>> c = pd.DataFrame({"collective": [0, 1], "rank": 0, "device": 0, "group": "0", "op": "all_reduce",
    ...                   "match": "order", "stream": 4, "bytes": pd.array([2**21] * 2, "Int64"), "group_size": 8,
    ...                   "duration_ns": [3000, 5000]})
    >>> coll_analysis(c)[["Collective name", MSG_MB, "dur_sum", "dur_mean", "operation_count"]].values.tolist()
    [['all_reduce', 2.0, 8.0, 4.0, 2]]
    """
    c = collectives.reset_index(drop=True)
    by_stream = (c["match"].astype(str) == "stream").to_numpy() if "match" in c else np.zeros(len(c), bool)
    ranks = pd.Series([""] * len(c), dtype=object)
    if instances is not None and "group_ranks" in instances.columns and len(instances):
        ranks = c["collective"].map(instances.drop_duplicates("collective").set_index("collective")["group_ranks"])
    frame = pd.DataFrame(
        {
            "rank": c["rank"].to_numpy(),
            "device": c["device"].to_numpy(),
            "Process Group Name": np.where(by_stream, "", c["group"].astype(str).to_numpy(object)),
            "Process Group Ranks": np.where(by_stream, "", ranks.fillna("").astype(str).to_numpy(object)),
            "Collective name": c["op"].astype(str).to_numpy(object),
            "Group size": c["group_size"].to_numpy(),
            "stream": c["stream"].to_numpy(),
            MSG_MB: pd.to_numeric(c["bytes"], errors="coerce").to_numpy(np.float64, na_value=np.nan) / MIB,
            "dur": c["duration_ns"].to_numpy(np.float64) / 1e3,
        }
    )
    keys = [*PART, "Process Group Name", "Process Group Ranks", "Collective name", "Group size", "stream", MSG_MB]
    g = frame.groupby(keys, sort=False, dropna=False)["dur"].agg(["sum", "mean", "std", "min", "max", "count"])
    g = g.reset_index().rename(columns={s: f"dur_{s}" for s in ("sum", "mean", "std", "min", "max")})
    g = g.rename(columns={"count": "operation_count"})
    return g.sort_values([*PART, "dur_sum"], ascending=[True, True, False], kind="stable").reset_index(drop=True)


# -- writing: a workbook, CSV files ---------------------------------------------------------------
def require_openpyxl() -> Any:
    """The openpyxl module, or a one-line :class:`UsageError` saying how to install it."""
    try:
        import openpyxl
    except ImportError:
        raise UsageError(
            "writing a .xlsx workbook needs openpyxl: pip install 'dtrace[xlsx]' (or write CSV files with --csv-dir DIR)"
        ) from None
    return openpyxl


def check_sheets(sheets: Mapping[str, pd.DataFrame]) -> None:
    """Every sheet fits Excel: a name of 1 to 31 characters without ``[]:*?/\\``, at most
    :data:`EXCEL_MAX_ROWS` rows; else a one-line :class:`UsageError` (``--top N`` or CSV files)."""
    for name, df in sheets.items():
        if not EXCEL_SHEET_NAME.fullmatch(name):
            raise UsageError(f"sheet name {name!r}: Excel takes 1 to 31 characters, none of []:*?/\\")
        if len(df) + 1 > EXCEL_MAX_ROWS:
            raise UsageError(
                f"sheet {name}: {len(df):,} rows, more than an Excel sheet holds ({EXCEL_MAX_ROWS - 1:,}); "
                "keep fewer with --top N, or write CSV files with --csv-dir DIR"
            )


def workbook_bytes(sheets: Mapping[str, pd.DataFrame]) -> bytes:
    """The sheets as an ``.xlsx`` workbook: one sheet each in order, the header row bold, frozen
    and filtered, each column as wide as its text (8 to 60 characters). Text is stored as text
    (a name starting with ``=`` is never a formula), control characters shown as escapes, a cell
    cut at :data:`EXCEL_MAX_TEXT` characters; a missing or infinite number is an empty cell.

    Raises
    ------
    UsageError
        openpyxl is not installed (:func:`require_openpyxl`), or a sheet does not fit Excel
        (:func:`check_sheets`).
    """
    openpyxl = require_openpyxl()
    from openpyxl.cell import WriteOnlyCell
    from openpyxl.styles import Font
    from openpyxl.utils import get_column_letter

    check_sheets(sheets)
    wb = openpyxl.Workbook(write_only=True)
    bold = Font(bold=True)
    for name, df in sheets.items():
        ws = wb.create_sheet(title=name)
        ws.freeze_panes = "A2"
        for i, width in enumerate(column_widths(df), start=1):
            ws.column_dimensions[get_column_letter(i)].width = width
        if len(df.columns):
            ws.auto_filter.ref = f"A1:{get_column_letter(len(df.columns))}{len(df) + 1}"
        header = []
        for c in df.columns:
            cell = WriteOnlyCell(ws, value=_excel_text(str(c)))
            cell.font = bold
            header.append(cell)
        ws.append(header)
        for row in zip(*(_excel_values(df[c]) for c in df.columns)):
            ws.append([_text_cell(WriteOnlyCell, ws, v) if isinstance(v, str) and v[:1] == "=" else v for v in row])
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def _text_cell(cell_type: Any, ws: Any, value: str) -> Any:
    cell = cell_type(ws, value=value)
    cell.data_type = "s"  # openpyxl would store "=..." as a formula
    return cell


def _excel_text(text: str) -> str:
    return printable(text, keep_newlines=True)[:EXCEL_MAX_TEXT]


def _excel_values(col: pd.Series) -> np.ndarray:
    """A column as Python values for openpyxl: ``None`` for a missing or infinite number, text escaped."""
    if pd.api.types.is_bool_dtype(col):
        return col.astype(object).to_numpy(object)
    if pd.api.types.is_numeric_dtype(col):
        values = col.to_numpy(object, copy=True)
        missing = col.isna().to_numpy()
        if pd.api.types.is_float_dtype(col):
            missing = missing | ~np.isfinite(col.to_numpy(np.float64, na_value=np.nan))
        values[missing] = None
        return values
    codes, uniq = pd.factorize(col, sort=False)
    fixed = np.array([_excel_text(v) if isinstance(v, str) else v for v in uniq] + [None], dtype=object)
    return fixed[codes]


def column_widths(df: pd.DataFrame) -> list[float]:
    """The width of each column: its header's or its longest text's, plus 2, from 8 to 60 characters
    (a number: 12)."""
    widths = []
    for c in df.columns:
        col = df[c]
        if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
            longest = 12
        else:
            longest = int(col.astype(str).str.len().max()) if len(col) else 0
        widths.append(float(min(max(len(str(c)), longest, 6) + 2, 60)))
    return widths


def csv_files(sheets: Mapping[str, pd.DataFrame]) -> dict[str, str]:
    """``{file name: CSV text}``, one ``<sheet>.csv`` per sheet (TraceLens's ``--output_csvs_dir``
    layout; text a spreadsheet would run as a formula gets a leading ``'``, as in every CSV dtrace
    writes)."""
    return {f"{name}.csv": to_csv(df) for name, df in sheets.items()}
