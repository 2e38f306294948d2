"""The quick views of ``dtrace kernels`` and ``dtrace gaps``, built from the results tables.

The GPU Kernel Analyzer's and the GPU Performance Analyser's reports for every rank at once:
top kernels with readable shortened names, kernel classes with per-iteration figures,
per-collective NCCL time and memory operations; the GPU's idle time by cause (device gaps: no
stream busy; they add up to the breakdown's idle time), then the gaps per stream with their
causes, a gap histogram and the kernel pairs around the gaps (per stream: a stream's gap may
overlap work on other streams).

Every function here is pure: tables in, tables or text out (:mod:`dtrace.cli.quick` parses the
command line, loads the input, prints and writes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..core.units import fmt_time, time_unit
from ..options import Options
from ..reduce.kernels_xrank import pool
from ..results import Results
from .escape import prose
from .text import distinct_names, render

#: ``dtrace kernels --sort`` keys → the column they sort by.
KERNEL_SORTS = {"count": "count", "mean": "mean_ns", "total": "total_ns", "share": "time_share"}
#: ``dtrace gaps --gap-sort`` keys → the column they sort kernel pairs by.
GAP_SORTS = {"count": "count", "mean": "mean_ns", "max": "max_ns", "std": "std_ns"}
BAR = 40


def of_rank(df: pd.DataFrame, rank: int | None) -> pd.DataFrame:
    """The rows of ``rank`` (every row for ``None``)."""
    return df if rank is None else df.loc[df["rank"].to_numpy() == rank]


def _parts(df: pd.DataFrame) -> int:
    return len(df[["rank", "device"]].drop_duplicates()) if len(df) else 0


def options_note(res: Results) -> str:
    """``options: k=v, ...\n`` naming the analysis options that differ from the defaults ("" if none)."""
    opts = res.record.options
    default = Options().to_json()
    diff = [f"{k}={v}" for k, v in opts.items() if k in default and v != default[k] and k != "extra"]
    return f"options: {', '.join(diff)}\n" if diff else ""


# -- kernels ---------------------------------------------------------------------------------


def kernel_view(kernels: pd.DataFrame, sort: str) -> pd.DataFrame:
    """One row per kernel name, pooled over the (rank, device) parts given, sorted by ``sort``.

    A single part keeps its median; pooled parts get exact pooled count, total, mean, std,
    min and max, and shares of the pooled GPU time and launches.
    """
    cols = ["name", "class", "count", "mean_ns", "total_ns", "std_ns", "min_ns", "max_ns", "count_share", "time_share"]
    if not len(kernels):
        return pd.DataFrame({c: [] for c in cols})
    if _parts(kernels) == 1:
        view = kernels[
            [
                "name",
                "class",
                "count",
                "mean_ns",
                "total_ns",
                "std_ns",
                "median_ns",
                "min_ns",
                "max_ns",
                "count_share",
                "time_share",
            ]
        ].copy()
    else:
        view = pool(kernels, ["name"])
        first = kernels.groupby("name", sort=False)["class"].first()
        view["class"] = first.reindex(view["name"]).to_numpy()
        view["count_share"] = view["count"] / max(int(view["count"].sum()), 1)
        view["time_share"] = view["total_ns"] / max(float(view["total_ns"].sum()), 1.0)
        view = view[cols]
    key = KERNEL_SORTS[sort]
    view = view.sort_values([key, "total_ns", "name"], ascending=[False, False, True], kind="stable")
    view.insert(0, "#", np.arange(1, len(view) + 1))
    return view.reset_index(drop=True)


def _per_iter_table(df: pd.DataFrame, key: str) -> pd.DataFrame:
    """count/total per ``key`` summed over parts, with per-iteration figures (per part, averaged)."""
    if not len(df):
        return df
    n = _parts(df)
    g = df.groupby(key, sort=False)
    out = pd.DataFrame(
        {
            "count": g["count"].sum(),
            "total_ns": g["total_ns"].sum(),
            "count_per_iter": g["count_per_iter"].sum() / n,
            "total_per_iter_ns": np.rint(g["total_per_iter_ns"].sum() / n).astype(np.int64),  # whole ns
        }
    ).reset_index()
    out["time_share"] = out["total_ns"] / max(float(out["total_ns"].sum()), 1.0)
    return out.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)


@dataclass
class KernelReport:
    """What ``dtrace kernels`` shows, as numbers (ns) and tables: :func:`kernel_report`."""

    summary: dict[str, Any]
    kernels: pd.DataFrame  # kernel_view: one row per name, sorted
    classes: pd.DataFrame | None
    classifier: str
    nccl: pd.DataFrame | None
    memops: pd.DataFrame | None


def kernel_report(res: Results, *, sort: str, rank: int | None) -> KernelReport:
    """The figures of ``dtrace kernels`` for the (rank, device) parts selected."""
    k = of_rank(res.table("kernels"), rank)
    parts = _parts(k)
    view = kernel_view(k, sort)
    summary: dict[str, Any] = {
        "parts": parts,
        "kernel_names": len(view),
        "gpu_events": int(k["count"].sum()),
        "gpu_time_ns": int(k["total_ns"].sum()),
    }
    if parts:
        iters = k.groupby(["rank", "device"])["iters"].first()
        summary.update(
            iterations_min=int(iters.min()),
            iterations_max=int(iters.max()),
            per_iteration_ns=_whole_ns(k["total_per_iter_ns"].sum() / parts),
            events_per_iteration=float(k["count_per_iter"].sum() / parts),
        )
    classes = of_rank(res.table("classes"), rank)
    label = str(classes["classifier"].iloc[0]) if len(classes) else ""
    nccl = mem = None
    if "nccl" in res.table_names:
        nccl = of_rank(res.table("nccl"), rank)
        nccl = _per_iter_table(nccl, "collective") if len(nccl) else None
    if "memops" in res.table_names:
        m = of_rank(res.table("memops"), rank)
        if len(m):
            mem = _per_iter_table(m, "op")
            known = m.loc[m["bytes"].fillna(-1).to_numpy(np.float64) >= 0]
            b = known.groupby("op")["bytes"].sum()
            mem["bytes"] = pd.array(b.reindex(mem["op"]).to_numpy(), dtype="Int64")  # NA: no byte count
    return KernelReport(summary, view, _per_iter_table(classes, "class") if len(classes) else None, label, nccl, mem)


def kernels_document(rep: KernelReport, top: int | None) -> dict[str, Any]:
    """:class:`KernelReport` as one JSON-able object (raw ns, full names)."""
    doc: dict[str, Any] = {
        "summary": rep.summary,
        "classifier": rep.classifier,
        "kernels": _records(rep.kernels.drop(columns="#").head(top) if top else rep.kernels.drop(columns="#")),
    }
    for name in ("classes", "nccl", "memops"):
        df = getattr(rep, name)
        doc[name] = _records(df) if df is not None else []
    return doc


def kernels_text(res: Results, *, sort: str, top: int | None, rank: int | None, fmt: str, wide: bool = False) -> str:
    """The ``dtrace kernels`` report in a human format (see the module docstring)."""
    rep = kernel_report(res, sort=sort, rank=rank)
    out = [prose(options_note(res), fmt)]
    sm = rep.summary
    if not sm["parts"]:
        return "".join(out) + "no GPU kernels found\n"
    it = (
        str(sm["iterations_min"])
        if sm["iterations_min"] == sm["iterations_max"]
        else f"{sm['iterations_min']}-{sm['iterations_max']}"
    )
    out.append(
        f"{sm['parts']} (rank, device) part(s){'' if sm['parts'] == 1 else ', pooled'}; "
        f"{sm['kernel_names']:,} distinct kernel names; {sm['gpu_events']:,} GPU events; "
        f"GPU time {fmt_time(sm['gpu_time_ns'])}\n"
        f"per iteration ({it} iteration(s) per part): {fmt_time(sm['per_iteration_ns'])} and "
        f"{sm['events_per_iteration']:,.1f} events per part\n"
    )
    view = rep.kernels
    head = len(view) if top is None else min(top, len(view))
    out.append(render(view, fmt, title=f"top {head} of {len(view):,} kernels by {sort}", max_rows=top, wide=wide))
    if rep.classes is not None:
        out.append(render(rep.classes, fmt, title=f"kernel classes ({rep.classifier})", wide=wide))
    if rep.nccl is not None:
        out.append(render(rep.nccl, fmt, title="NCCL per collective", wide=wide))
    if rep.memops is not None:
        out.append(render(rep.memops, fmt, title="memory operations", wide=wide))
    return "\n".join(s for s in out if s)


def _whole_ns(ns: float) -> int:
    """A mean or a per-iteration time in whole ns, rounded half to even (README, "Results")."""
    return int(np.rint(ns))


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return json.loads(df.to_json(orient="records", force_ascii=False))


def _us(ns: float) -> str:
    """``ns`` in µs with two decimals: the unit of the ``--output`` detail reports."""
    return f"{ns / 1e3:.2f} μs"


def id_ranges(values: Any) -> str:
    """Sorted ids as ranges: ``[0, 1, 2, 5, 7, 8]`` → ``0-2, 5, 7-8``.

    Examples
    --------
    >>> id_ranges([5, 0, 1, 2, 8, 7]), id_ranges([])
    ('0-2, 5, 7-8', 'none')
    """
    ids = sorted({int(v) for v in values})
    if not ids:
        return "none"
    starts = [i for i, v in enumerate(ids) if i == 0 or v != ids[i - 1] + 1]
    ends = starts[1:] + [len(ids)]
    return ", ".join(str(ids[a]) if b - a == 1 else f"{ids[a]}-{ids[b - 1]}" for a, b in zip(starts, ends))


def _ranks_of(table: pd.DataFrame | None, keys: list[str]) -> dict[Any, str]:
    """The ranks each key (a name, a kernel pair) occurs on, as ranges."""
    if table is None or not len(table):
        return {}
    g = table.groupby(keys, sort=False, observed=True)["rank"].unique()
    return {k: id_ranges(v) for k, v in g.items()}


def kernels_detail(view: pd.DataFrame, kernels: pd.DataFrame | None = None) -> str:
    """The full-name text report of ``--output`` (one block per kernel, the layout of the
    single-trace kernel tools it replaces): ``#N`` is the kernel's place in the sort, ``Ranks``
    the ranks it ran on (from ``kernels``, the table the view pools)."""
    ranks = _ranks_of(kernels, ["name"])
    lines = ["DETAILED GPU KERNEL ANALYSIS", "=" * 50]
    for i, d in enumerate(view.to_dict("records"), start=1):
        lines += [
            f"#{i}: {d['name']}",
            *([f"  Ranks: {ranks[d['name']]}"] if d["name"] in ranks else []),
            f"  Class: {d['class']}",
            f"  Count: {d['count']} ({100 * d['count_share']:.1f}% of total launches)",
            f"  Total Duration: {_us(d['total_ns'])} ({100 * d['time_share']:.1f}% of total duration)",
            f"  Average Duration: {_us(d['mean_ns'])}",
            f"  Standard Deviation: {_us(d['std_ns'])}",
            f"  Min / Max: {d['min_ns'] / 1e3:.2f} / {_us(d['max_ns'])}",
            "-" * 50,
        ]
    return "\n".join(lines) + "\n"


# -- gaps ------------------------------------------------------------------------------------


def histogram_text(hist: pd.DataFrame) -> tuple[str, str]:
    """Text bars of a gap histogram pooled over the rows given, and a note.

    Rows of several parts are pooled when their bins agree; otherwise only the first part is
    shown (default bounds follow each part's own gaps) and the note says so.
    """
    if not len(hist):
        return "", ""
    note = ""
    edges = hist.groupby(["rank", "device"], sort=True)[["lo_ns", "hi_ns"]].apply(
        lambda f: tuple(np.round(f.drop_duplicates().to_numpy(np.float64, na_value=np.nan).ravel(), 3))
    )
    if edges.nunique() > 1:
        r, d = edges.index[0]
        hist = hist.loc[(hist["rank"] == r) & (hist["device"] == d)]
        note = (
            f"bins differ between parts (default bounds follow each part's gaps): showing rank {r} device {d}; "
            f"pass --hist-min/--hist-max for common bins\n"
        )
    h = hist.groupby("bin", sort=True).agg(lo=("lo_ns", "first"), hi=("hi_ns", "first"), count=("count", "sum"))
    peak = max(int(h["count"].max()), 1)
    labels = bin_labels(h["lo"].to_numpy(np.float64), h["hi"].to_numpy(np.float64))
    w = max(len(s) for s in labels)
    lines = []
    for lab, c in zip(labels, h["count"].to_numpy()):
        n = int(round(BAR * c / peak))
        lines.append(f"{lab:>{w}} │{'█' * n}{'░' * (BAR - n)}│ {c:>6,}")
    return "\n".join(lines) + "\n", note


def bin_labels(lo: np.ndarray, hi: np.ndarray) -> list[str]:
    """``lo-hi unit`` of each bin: one unit for the histogram with the decimals that tell the
    edges apart (:func:`edge_digits`), or, when the edges span three decades or more (log
    bins), each edge in its own unit with three significant digits.

    Examples
    --------
    >>> bin_labels(np.array([1_000.0, 2_000.0]), np.array([2_000.0, 3_000.0]))
    ['1.0-2.0 µs', '2.0-3.0 µs']
    >>> bin_labels(np.array([1.0, 31.0, 1_000.0]), np.array([31.0, 1_000.0, 31_623.0]))
    ['1 ns-31 ns', '31 ns-1 µs', '1 µs-31.6 µs']
    """
    edges = np.concatenate([lo, hi])
    pos = edges[np.isfinite(edges) & (edges > 0)]
    if pos.size and pos.max() >= 1000 * pos.min():
        return [f"{fmt_time(a, trim=True)}-{fmt_time(b, trim=True)}" for a, b in zip(lo, hi)]
    unit, scale = time_unit(float(np.nanmax(np.abs(hi)))) if len(hi) else ("ns", 1.0)
    d = edge_digits(edges / scale) if unit != "ns" else 0
    return [f"{a / scale:,.{d}f}-{b / scale:,.{d}f} {unit}" for a, b in zip(lo, hi)]


def edge_digits(edges: np.ndarray, most: int = 6) -> int:
    """The fewest decimals (at least one, at most ``most``) that print different bin edges
    differently, and no non-zero edge as 0 (log bins in ms: ``0.001-0.002``, not ``0.0-0.0``).

    Examples
    --------
    >>> edge_digits(np.array([0.0, 2.5, 5.0])), edge_digits(np.array([0.001, 0.0021, 0.0046, 1.0]))
    (1, 3)
    """
    e = np.unique(np.asarray(edges, np.float64)[np.isfinite(edges)])
    for d in range(1, most + 1):
        r = np.round(e, d)
        if len(np.unique(r)) == len(e) and not ((r == 0) & (e != 0)).any():
            return d
    return most


def transition_view(trans: pd.DataFrame, sort: str, width: int | None = 40) -> pd.DataFrame:
    """Kernel pairs pooled over streams and parts, sorted by ``sort``, with a readable
    ``transition`` column (both names shortened to ``width`` and kept distinct, :func:`~dtrace.
    render.text.distinct_names`; ``None``: full names)."""
    cols = ["#", "transition", "count", "mean_ns", "max_ns", "min_ns", "std_ns", "total_ns", "prev_name", "next_name"]
    if not len(trans):
        return pd.DataFrame({c: [] for c in cols})
    v = pool(trans, ["prev_name", "next_name"])
    key = GAP_SORTS[sort]
    v = v.sort_values([key, "count"], ascending=[False, False], kind="stable").reset_index(drop=True)
    prev, nxt = v["prev_name"].tolist(), v["next_name"].tolist()
    if width:  # each side a column of names that stay distinct
        prev, nxt = distinct_names(prev, width), distinct_names(nxt, width)
    v["transition"] = [f"{a} → {b}" for a, b in zip(prev, nxt)]
    v.insert(0, "#", np.arange(1, len(v) + 1))
    return v[cols]


@dataclass
class GapReport:
    """What ``dtrace gaps`` shows, as numbers (ns) and tables: :func:`gap_report`."""

    summary: dict[str, Any]
    device: dict[str, Any]  # GPU idle time (device gaps) by cause; empty with --stream or old results
    streams: pd.DataFrame  # one row per (rank, device, stream), most idle first
    histogram: pd.DataFrame  # the gap_histogram rows selected
    transitions: pd.DataFrame  # transition_view: kernel pairs, sorted


STREAM_COLUMNS = [
    "rank",
    "device",
    "stream",
    "events",
    "gaps",
    "idle_ns",
    "mean_ns",
    "max_ns",
    "host_wait_ns",
    "kernel_wait_ns",
    "other_ns",
]
CAUSES = ("host_wait", "kernel_wait", "other")
#: The times of a kernel pair's block in the ``--output`` detail report: label → column.
GAP_DETAIL_TIMES = {
    "Average Gap": "mean_ns",
    "Max Gap": "max_ns",
    "Min Gap": "min_ns",
    "Std Dev": "std_ns",
    "Total Gap Time": "total_ns",
}


def gap_report(res: Results, *, sort: str, rank: int | None, stream: int | None, wide: bool = False) -> GapReport:
    """The figures of ``dtrace gaps`` for the parts and stream selected."""
    gaps = of_rank(res.table("gaps"), rank)
    hist = of_rank(res.table("gap_histogram"), rank)
    trans = of_rank(res.table("transitions"), rank)
    if stream is not None:
        gaps, hist, trans = (f.loc[f["stream"].to_numpy() == stream] for f in (gaps, hist, trans))
    streams = gaps.sort_values("idle_ns", ascending=False, kind="stable")[
        [c for c in STREAM_COLUMNS if c in gaps.columns]
    ]
    device: dict[str, Any] = {}
    if stream is None and "device_gaps" in res.table_names:
        device = _device_gap_totals(of_rank(res.table("device_gaps"), rank))
    return GapReport(
        _gap_totals(gaps),
        device,
        streams.reset_index(drop=True),
        hist,
        transition_view(trans, sort, None if wide else 40),
    )


def _gap_totals(gaps: pd.DataFrame) -> dict[str, Any]:
    """The streams' gaps summed: count, idle time, mean gap, and count and time per cause."""
    n = int(gaps["gaps"].sum()) if len(gaps) else 0
    idle = int(gaps["idle_ns"].sum()) if len(gaps) else 0
    summary: dict[str, Any] = {
        "streams": len(gaps),
        "gaps": n,
        "idle_ns": idle,
        "mean_gap_ns": _whole_ns(idle / n if n else 0),
    }
    for c in CAUSES:
        summary[f"{c}_gaps"] = int(gaps[f"{c}_gaps"].sum()) if len(gaps) else 0
        summary[f"{c}_ns"] = int(gaps[f"{c}_ns"].sum()) if len(gaps) else 0
    return summary


def _device_gap_totals(dg: pd.DataFrame) -> dict[str, Any]:
    """The GPUs' gaps (all streams idle) summed: count, idle time, and count and time per cause."""
    return {
        "gpus": len(dg),
        **{
            c: int(dg[c].sum()) if len(dg) else 0
            for c in ("gaps", "idle_ns", *(f"{c}_{k}" for c in CAUSES for k in ("gaps", "ns")))
        },
    }


def gaps_document(rep: GapReport, top: int | None) -> dict[str, Any]:
    """:class:`GapReport` as one JSON-able object (raw ns, full names)."""
    tv = rep.transitions.drop(columns=["#", "transition"])
    return {
        "gpu_idle": rep.device,
        "summary": rep.summary,
        "streams": _records(rep.streams.head(top) if top else rep.streams),
        "histogram": _records(rep.histogram),
        "transitions": _records(tv.head(top) if top else tv),
    }


def gaps_text(
    res: Results,
    *,
    sort: str,
    top: int | None,
    rank: int | None,
    stream: int | None,
    fmt: str,
    wide: bool = False,
) -> str:
    """The ``dtrace gaps`` report in a human format (see the module docstring); ``wide``: full
    names, however wide the table."""
    rep = gap_report(res, sort=sort, rank=rank, stream=stream, wide=wide)
    sm = rep.summary
    n = sm["gaps"]
    out = [prose(options_note(res), fmt)]
    dv = rep.device
    if dv:
        causes = ", ".join(f"{c} {dv[f'{c}_gaps']:,} gaps / {fmt_time(dv[f'{c}_ns'])}" for c in CAUSES)
        out.append(
            f"GPU idle time (no stream busy; the breakdown's idle): {fmt_time(dv['idle_ns'])} in "
            f"{dv['gaps']:,} gaps over {dv['gpus']:,} GPU(s)\n" + (f"Causes: {causes}\n" if dv["gaps"] else "")
        )
        out.append(
            "Per stream (a stream's gap may overlap work on the GPU's other streams, so these add up to "
            "more than the GPU's idle time):\n"
        )
    out.append(
        f"Total gaps found: {n:,}\nTotal stream gap time: {fmt_time(sm['idle_ns'])}\n"
        f"Average gap duration: {fmt_time(sm['mean_gap_ns'])}\n"
    )
    if n:
        causes = ", ".join(f"{c} {sm[f'{c}_gaps']:,} gaps / {fmt_time(sm[f'{c}_ns'])}" for c in CAUSES)
        out.append(f"Causes: {causes}\n")
    if len(rep.streams):
        out.append(render(rep.streams, fmt, title=f"active streams: {len(rep.streams)}", max_rows=top, wide=wide))
    bars, note = histogram_text(rep.histogram)
    if bars:
        binned = int(rep.histogram["count"].sum()) if not note else -1
        left = f"{n - binned:,} gaps outside the histogram bounds\n" if 0 <= binned < n else ""
        out.append("GAP DURATION HISTOGRAM (stream gaps):\n" + note + bars + left)
    tv = rep.transitions
    if len(tv):
        out.append(
            render(
                tv.drop(columns=["prev_name", "next_name"]),
                fmt,
                title=f"top {len(tv) if top is None else min(top, len(tv))} kernel pairs by {sort} gap",
                max_rows=top,
                short_names=False,
                wide=wide,
            )
        )
    return "\n".join(s for s in out if s)


def gaps_detail(gaps: pd.DataFrame, tv: pd.DataFrame, transitions: pd.DataFrame | None = None) -> str:
    """The full-name text report of ``--output`` (the layout of the single-trace gap tools it
    replaces): ``#N`` is a kernel pair's place in the sort, ``Ranks`` the ranks it occurs on
    (from ``transitions``, the table the view pools)."""
    ranks = _ranks_of(transitions, ["prev_name", "next_name"])
    n = int(gaps["gaps"].sum()) if len(gaps) else 0
    idle = int(gaps["idle_ns"].sum()) if len(gaps) else 0
    lines = [
        "DETAILED GPU GAP ANALYSIS",
        "=" * 50,
        "",
        f"Total gaps found: {n}",
        f"Total idle time: {_us(idle)}",
        f"Average gap duration: {_us(idle / n if n else 0)}",
        "",
        f"Active streams: {len(gaps)}",
    ]
    for r in gaps.sort_values("idle_ns", ascending=False, kind="stable").itertuples(index=False):
        lines.append(f"  Rank {r.rank} device {r.device} stream {r.stream}: {r.gaps} gaps, {_us(r.idle_ns)} idle time")
    lines += ["", "Kernel Pairs:", "-" * 50]
    for i, d in enumerate(tv.to_dict("records"), start=1):
        pair = (d["prev_name"], d["next_name"])
        lines += [f"#{i}: {pair[0]} → {pair[1]}", *([f"  Ranks: {ranks[pair]}"] if pair in ranks else [])]
        lines.append(f"  Count: {d['count']}")
        lines += [f"  {label}: {_us(d[column])}" for label, column in GAP_DETAIL_TIMES.items()]
        lines.append("-" * 30)
    return "\n".join(lines) + "\n"
