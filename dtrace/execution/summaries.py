"""Summary-level inputs in ``dtrace analyze``: ``nsys stats`` summaries carry no events.

``cuda_gpu_kern_sum``, ``cuda_gpu_mem_time_sum`` and ``nvtx_gpu_proj_trace`` CSVs describe a
report by kernel name, by memory operation and by projected NVTX range. They cannot give a
timeline, so no breakdown, streams, steps, gaps, transitions, collectives or host-op tables;
they can give the per-name tables, so they feed those directly:

======================  ============================================================
table                   from
======================  ============================================================
``kernels``             kernel sum (count, total, avg, median, min, max, std) and
                        memory-op sum (kinds ``memcpy``/``memset``)
``classes``, ``nccl``   the kernels rows, classified like events are
``memops``              memory-op sum, by direction (``H2D``, ..., ``memset``)
``nvtx_ranges``         NVTX projection (count, projected time, GPU op count)
======================  ============================================================

The files of one report are grouped by their common prefix (``run_rank3`` for
``run_rank3_cuda_gpu_kern_sum.csv``); each group is one part with device ``-1`` (all devices
of the report) and the rank its name states (``rank<N>``), else its position among the
groups in sorted order. Per-iteration columns divide by ``iters × gpus`` (options ``iters``
and ``summary_gpus``; the GPU count is the ``gpus`` column, 1 for event parts). Values a
summary cannot give (the breakdown of an NVTX range, a median from an old ``gpukernsum``) are
missing (``<NA>``/NaN), never invented. A group
whose prefix also has a ``cuda_gpu_trace`` CSV is skipped: that file's events are analysed
instead. The manifest lists each summary file with ``summary: true``, its rank, the tables it
fed and, under ``absent_tables``, the tables it cannot give and why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..core.dtypes import NI64, as_declared
from ..errors import DtraceError, UsageError
from ..ingest.ranks import rank_from_filename
from ..knowledge.categories import categorize_names
from ..knowledge.classify import classifier_for, collective_label
from ..options import Options
from ..readers._io import read_head
from ..readers._stats_csv import (
    GPU_TRACE,
    KERN_SUM,
    MEM_SUM,
    NVTX_PROJ,
    SUMMARY_REPORTS,
    kernel_summary,
    memop_summary,
    nvtx_projection,
    report_of_name,
    report_prefix,
    sniff,
)

FORMAT = "nsys-csv"
FED = ("kernels", "classes", "nccl", "memops", "nvtx_ranges")
ABSENT_REASON = "nsys stats summaries carry no events (no timeline)"
ABSENT = {
    t: ABSENT_REASON
    for t in (
        "breakdown",
        "streams",
        "steps",
        "gaps",
        "device_gaps",
        "gap_histogram",
        "device_gap_histogram",
        "transitions",
        "collectives",
        "ops",
        "kernel_sequences",
    )
}


@dataclass
class SummaryGroup:
    """The summary CSVs of one report."""

    prefix: str
    files: dict[str, str] = field(default_factory=dict)  # report -> path
    rank: int = -1
    error: str | None = None
    skipped: str | None = None


def summary_report(path: str) -> str | None:
    """The summary report a CSV holds (by header, else by name), or None for anything else."""
    if not path.lower().endswith(".csv"):
        return None
    try:
        hdr = sniff(path, read_head(path))
    except OSError:
        return None
    report = hdr.report if hdr is not None else report_of_name(path)
    return report if report in SUMMARY_REPORTS else None


def split_summaries(files: list[str]) -> tuple[list[str], list[SummaryGroup]]:
    """Separate summary CSVs (grouped by report, ranks assigned) from event inputs."""
    events: list[str] = []
    groups: dict[str, SummaryGroup] = {}
    traces = {report_prefix(f) for f in files if f.lower().endswith(".csv") and report_of_name(f) == GPU_TRACE}
    for f in files:
        report = summary_report(f)
        if report is None:
            events.append(f)
            continue
        prefix = report_prefix(f)
        g = groups.setdefault(prefix, SummaryGroup(prefix))
        if report in g.files:  # two files of one kind under one prefix: keep each as its own group
            g = groups.setdefault(f, SummaryGroup(f))
        g.files[report] = f
        if prefix in traces:
            g.skipped = (
                f"skipped: the events of {os.path.basename(prefix)}_cuda_gpu_trace.csv are analysed "
                "instead of this summary"
            )
    out = sorted(groups.values(), key=lambda g: g.prefix)
    stated = [rank_from_filename(g.prefix + ".csv") for g in out]
    if all(r is not None for r in stated) and len(set(stated)) == len(stated):
        for g, r in zip(out, stated):
            g.rank = int(r)  # type: ignore[arg-type]
    else:
        for i, g in enumerate(out):
            g.rank = i
    return events, out


def _int_na(n: int) -> pd.Series:
    return pd.Series(pd.array([pd.NA] * n, dtype="Int64"))


def group_tables(g: SummaryGroup, options: Options) -> dict[str, pd.DataFrame]:
    """The kernels, classes, nccl, memops and nvtx_ranges rows of one summary group."""
    iters = int(options.iters or 1)
    gpus = int(options.summary_gpus or 1)
    if gpus < 1:
        raise UsageError("summary_gpus must be >= 1")
    parts = _summary_rows(g)
    out: dict[str, pd.DataFrame] = {}
    key = {"rank": np.int32(g.rank), "device": np.int32(-1)}
    if parts:
        out.update(_kernel_tables(pd.concat(parts, ignore_index=True), key, options, iters, gpus))
    if MEM_SUM in g.files:
        out["memops"] = _memop_table(out["kernels"], key, iters, gpus)
    if NVTX_PROJ in g.files:
        out["nvtx_ranges"] = _nvtx_rows(nvtx_projection(g.files[NVTX_PROJ]), key)
    return out


def _summary_rows(g: SummaryGroup) -> list[pd.DataFrame]:
    """The kernel and memory-operation summary rows of a group, each with its ``kind``."""
    parts = []
    if KERN_SUM in g.files:
        k = kernel_summary(g.files[KERN_SUM])
        k["kind"] = "kernel"
        parts.append(k)
    if MEM_SUM in g.files:
        m = memop_summary(g.files[MEM_SUM])
        m["kind"] = np.where(m["name"].astype(str).str.contains("memset", case=False), "memset", "memcpy")
        parts.append(m)
    return parts


def _kernel_tables(
    per: pd.DataFrame, key: dict[str, np.int32], options: Options, iters: int, gpus: int
) -> dict[str, pd.DataFrame]:
    """The kernels, classes and nccl rows of a group's summary rows (``per``)."""
    div = iters * gpus
    out: dict[str, pd.DataFrame] = {}
    names = per["name"].astype(str).tolist()
    kinds = per["kind"].tolist()
    cats = categorize_names(names, kinds, compat=options.compat, fmt="nsys")
    classifier = classifier_for(options)
    cls = classifier.classify(names, kinds, cats)
    total = float(per["total_ns"].sum()) or 1.0
    n_all = max(int(per["count"].sum()), 1)
    kern = pd.DataFrame(
        {
            **key,
            "name": np.asarray(names, dtype=object),
            "category": np.asarray(cats, object),
            "kind": np.asarray(kinds, object),
            "class": np.asarray(cls, object),
            "count": per["count"].to_numpy(np.int64),
            "total_ns": per["total_ns"].to_numpy(np.int64),
            "mean_ns": per["mean_ns"].to_numpy(np.float64),
            "median_ns": per["median_ns"].to_numpy(np.float64),
            "min_ns": per["min_ns"].round().astype("Int64"),
            "max_ns": per["max_ns"].round().astype("Int64"),
            "std_ns": per["std_ns"].to_numpy(np.float64),
        }
    )
    out["kernels"] = (
        _iters(_shares(kern, total, n_all), iters, gpus, div)
        .sort_values(["total_ns", "name"], ascending=[False, True], kind="stable")
        .reset_index(drop=True)
    )
    grp = kern.groupby("class", sort=True)
    classes = pd.DataFrame(
        {"count": grp["count"].sum(), "total_ns": grp["total_ns"].sum(), "kernels": grp["name"].size()}
    ).reset_index()
    classes.insert(0, "rank", key["rank"])
    classes.insert(1, "device", key["device"])
    classes["classifier"] = classifier.label
    classes["mean_ns"] = classes["total_ns"] / classes["count"]
    out["classes"] = _iters(_shares(classes, total, n_all), iters, gpus, div)
    is_nccl = classifier.is_nccl(kern["class"].to_numpy(), kern["category"].to_numpy())
    comm = kern.loc[is_nccl]
    comm = comm.assign(collective=[collective_label(n) for n in comm["name"]])
    grp = comm.groupby("collective", sort=True)
    nccl = pd.DataFrame({"count": grp["count"].sum(), "total_ns": grp["total_ns"].sum()}).reset_index()
    nccl.insert(0, "rank", key["rank"])
    nccl.insert(1, "device", key["device"])
    nccl["mean_ns"] = nccl["total_ns"] / nccl["count"] if len(nccl) else np.empty(0)
    out["nccl"] = _iters(_shares(nccl, total, n_all), iters, gpus, div).drop(columns=["count_share"])
    return out


def _memop_table(kernels: pd.DataFrame, key: dict[str, np.int32], iters: int, gpus: int) -> pd.DataFrame:
    """The memops rows of a group: its memory operations (of ``kernels``) by direction."""
    from ..readers.nsys_csv import memop_direction

    div = iters * gpus
    m = kernels.loc[kernels["kind"].isin(["memcpy", "memset"])]
    op = np.array([memop_direction(n) for n in m["name"]], dtype=object)  # one per distinct operation
    frame = m.assign(op=op, min_v=m["min_ns"].astype("float64"), max_v=m["max_ns"].astype("float64"))
    grp = frame.groupby("op", sort=True)
    mem = pd.DataFrame(
        {
            "count": grp["count"].sum(),
            "total_ns": grp["total_ns"].sum(),
            "min_ns": grp["min_v"].min().round().astype("Int64"),
            "max_ns": grp["max_v"].max().round().astype("Int64"),
        }
    ).reset_index()
    mem.insert(0, "rank", key["rank"])
    mem.insert(1, "device", key["device"])
    mem["mean_ns"] = mem["total_ns"] / mem["count"]
    mem["bytes"] = pd.array([pd.NA] * len(mem), dtype="Int64")  # summaries state no sizes
    mem["bandwidth_bytes_per_s"] = np.nan
    return _iters(_shares(mem, float(kernels["total_ns"].sum()) or 1.0, 1), iters, gpus, div).drop(
        columns=["count_share"]
    )


def _shares(df: pd.DataFrame, total: float, n_all: int) -> pd.DataFrame:
    df["time_share"] = df["total_ns"].to_numpy(np.float64) / total
    df["count_share"] = df["count"].to_numpy(np.float64) / n_all
    return df


def _iters(df: pd.DataFrame, iters: int, gpus: int, div: int) -> pd.DataFrame:
    df["iters"] = np.int64(iters)
    df["gpus"] = np.int64(gpus)
    df["count_per_iter"] = df["count"].to_numpy(np.float64) / div
    df["total_per_iter_ns"] = df["total_ns"].to_numpy(np.float64) / div
    return df


def _nvtx_rows(proj: pd.DataFrame, key: dict[str, Any]) -> pd.DataFrame:
    from ..analyses.breakdown import VALUE_COLUMNS

    dur = proj["proj_dur_ns"].to_numpy(np.float64)
    has = ~np.isnan(dur)
    frame = pd.DataFrame(
        {
            "name": proj["name"].astype(str).to_numpy(dtype=object),
            "count": 1,
            "with_gpu": has.astype(np.int64),
            "proj": np.where(has, dur, 0.0),
            "pmin": np.where(has, dur, np.inf),
            "pmax": np.where(has, dur, -np.inf),
            "orig": np.nan_to_num(proj["orig_dur_ns"].to_numpy(np.float64)),
            "ops": np.nan_to_num(proj["gpu_ops"].to_numpy(np.float64)),
        }
    )
    grp = frame.groupby("name", sort=True)
    s = grp[["count", "with_gpu", "proj", "orig", "ops"]].sum()
    n = len(s)
    with_gpu = s["with_gpu"].to_numpy(np.int64)
    out = pd.DataFrame(
        {
            **key,
            "name": s.index.to_numpy(dtype=object),
            "count": s["count"].to_numpy(np.int64),
            "with_gpu": with_gpu,
            "range_ns": s["orig"].round().to_numpy(np.int64),
            "proj_ns": s["proj"].round().to_numpy(np.int64),
            "proj_mean_ns": np.divide(s["proj"].to_numpy(), with_gpu, out=np.zeros(n), where=with_gpu > 0),
            "proj_min_ns": np.where(with_gpu > 0, grp["pmin"].min().to_numpy(), 0).round().astype(np.int64),
            "proj_max_ns": np.where(with_gpu > 0, grp["pmax"].max().to_numpy(), 0).round().astype(np.int64),
            "gpu_events": s["ops"].round().to_numpy(np.int64),
        }
    )
    for c in ("kernel_ns", "non_comm_kernel_ns", *VALUE_COLUMNS):
        out[c] = _int_na(n)
    return out.sort_values(["proj_ns", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)


def _merge(tables: dict[str, pd.DataFrame], add: dict[str, list[pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """Append summary rows to the event tables; columns one side lacks become missing values
    (integer columns turn nullable ``Int64`` so they stay integers)."""
    out = dict(tables)
    for name, frames in add.items():
        base = tables.get(name)
        if base is not None and "gpus" in frames[0].columns and "gpus" not in base.columns:
            base = base.assign(gpus=np.full(len(base), 1, np.int64))  # an event part is one GPU
        pieces = ([base] if base is not None else []) + frames
        out[name] = pd.concat([_nullable(p) for p in pieces], ignore_index=True)
    return out


def _nullable(df: pd.DataFrame) -> pd.DataFrame:
    """Integer columns as nullable ``Int64``; ``*_ns`` columns in whole ns (floats rounded half to
    even, NaN as ``NA``), like every results table."""
    out = df.astype(
        {
            c: "Int64"
            for c in df.columns
            if pd.api.types.is_integer_dtype(df[c].dtype)
            and not isinstance(df[c].dtype, pd.Int64Dtype)
            and c not in ("rank", "device")
        }
    )
    ns = {c: as_declared(out[c], NI64) for c in out.columns if c.endswith("_ns") and out[c].dtype.kind == "f"}
    return out.assign(**ns) if ns else out


def add_summaries(
    tables: dict[str, pd.DataFrame], groups: list[SummaryGroup], options: Options
) -> tuple[dict[str, pd.DataFrame], list[dict[str, Any]], int]:
    """The tables with the summary groups' rows appended, their manifest entries, and the
    number of parts they contributed. A bad group fails alone (its entries say why)."""
    if not groups:
        return tables, [], 0
    add: dict[str, list[pd.DataFrame]] = {}
    entries: list[dict[str, Any]] = []
    n_parts = 0
    for g in groups:
        fed: list[str] = []
        if g.skipped is None:
            try:
                rows = group_tables(g, options)
            except DtraceError as exc:
                g.error = str(exc)
            else:
                for t, df in rows.items():
                    add.setdefault(t, []).append(df)
                fed = sorted(rows)
                n_parts += 1
        entries += _group_entries(g, fed)
    return _merge(tables, add), entries, n_parts


def _group_entries(g: SummaryGroup, fed: list[str]) -> list[dict[str, Any]]:
    """The manifest entry of each file of a summary group (``fed``: the tables it added rows to)."""
    out: list[dict[str, Any]] = []
    for report, path in sorted(g.files.items()):
        err = (
            g.error
            if g.error and (g.error.startswith(path) or len(g.files) == 1)
            else (f"{path}: report {os.path.basename(g.prefix)} failed: {g.error}" if g.error else None)
        )
        out.append(
            {
                "path": path,
                "format": FORMAT,
                "report": report,
                "summary": True,
                "status": "error" if g.error else ("skipped" if g.skipped else "ok"),
                "error": err if g.error else g.skipped,
                "error_type": "InputError" if g.error else None,
                "ranks": [[g.rank, -1]] if not (g.error or g.skipped) else [],
                "tables": fed,
                "absent_tables": dict(ABSENT) if not (g.error or g.skipped) else {},
                "size": os.path.getsize(path),
                "mtime_ns": os.stat(path).st_mtime_ns,
                "fingerprint": "",
                "cached": False,
                "events": 0,
            }
        )
    return out


def note_summaries(manifest: dict[str, Any], entries: list[dict[str, Any]], n_parts: int) -> None:
    """Add the summary inputs to a run's manifest (inputs, counts, absent tables)."""
    if not entries:
        return
    manifest["inputs"] = list(manifest.get("inputs", [])) + entries
    manifest["n_inputs"] = int(manifest.get("n_inputs", 0)) + len(entries)
    manifest["n_failed"] = int(manifest.get("n_failed", 0)) + sum(1 for e in entries if e["status"] == "error")
    manifest["n_parts"] = int(manifest.get("n_parts", 0)) + n_parts
    if any(e["absent_tables"] for e in entries):
        manifest["absent_tables"] = {t: f"for the summary inputs: {why}" for t, why in ABSENT.items()}
