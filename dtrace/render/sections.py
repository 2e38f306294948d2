"""Report sections about where GPU time goes: summary, breakdown, classes, kernels, gaps, ops.

Each section is a function ``Context -> HTML`` that renders from whatever tables exist and
says ``not available (table X absent)`` otherwise.
"""

from __future__ import annotations

from html import escape

import numpy as np
import pandas as pd

from .._version import __version__
from ..core.records import InputRecord
from ..explore.diff import class_source
from . import charts as ch
from .context import Context
from .page import cards, na, note, table

BREAKDOWN_PARTS = (
    ("computation", "computation_ns"),
    ("exposed comm", "exposed_comm_ns"),
    ("exposed memcpy", "exposed_memcpy_ns"),
    ("idle", "idle_ns"),
)
GAP_CAUSES = (
    ("host wait", "host_wait_ns", "#e15759"),
    ("kernel wait", "kernel_wait_ns", "#f28e2b"),
    ("other", "other_ns", "#bab0ac"),
)


def section_summary(ctx: Context) -> str:
    """Job summary: key figures as cards, failed inputs, run details and the inputs."""
    inputs = ctx.results.record.inputs
    failed = [i for i in inputs if i.status == "error"]
    items: list = [("inputs analysed", f"{len(inputs) - len(failed):,} of {len(inputs):,}", len(failed) > 0)]
    bd, _ = ctx.get("breakdown", ("rank", "total_ns"))
    items += _breakdown_cards(bd) + _step_cards(ctx) + _straggler_cards(ctx) + _kernel_cards(ctx)
    html = [cards(items)]
    if bd is None and not inputs:
        html.append(na("breakdown"))
    if failed:
        html.append(_failed_inputs(failed))
    html.append(_run_details(ctx))
    if inputs:
        html.append(_inputs_table(inputs))
    return "".join(html)


def _breakdown_cards(bd: pd.DataFrame | None) -> list:
    """Ranks and GPUs, the median GPU timeline and the share of each breakdown part."""
    if bd is None:
        return []
    tot = float(bd["total_ns"].sum()) or 1.0
    items: list = [
        ("ranks / GPUs", f"{bd['rank'].nunique():,} / {len(bd):,}"),
        ("median GPU timeline", ch.fmt_time(float(bd["total_ns"].median()))),
    ]
    items += [
        (f"{lab} (all GPUs)", ch.fmt_pct(bd[col].sum() / tot)) for lab, col in BREAKDOWN_PARTS if col in bd.columns
    ]
    return items


def _step_cards(ctx: Context) -> list:
    st, _ = ctx.get("steps", ("rank", "step", "step_ns"))
    if st is None:
        return []
    return [("steps", f"{st['step'].nunique():,}"), ("median step time", ch.fmt_time(float(st["step_ns"].median())))]


def _straggler_cards(ctx: Context) -> list:
    sg, _ = ctx.get("stragglers", ("rank", "flagged"))
    if sg is None:
        return []
    fl = sorted(ctx.flagged)
    ids = ", ".join(f"rank {r}" for r in fl[:6]) + (f", … ({len(fl) - 6} more)" if len(fl) > 6 else "")
    return [(f"flagged stragglers (of {len(sg):,} GPUs)", f"{len(fl):,}", bool(fl), ids)]


def _kernel_cards(ctx: Context) -> list:
    k, _ = ctx.get("kernels", ("name", "count"))
    if k is None:
        return []
    return [
        ("distinct kernels", f"{k['name'].nunique():,}"),
        ("GPU activities / GPU", ch.fmt_num(round(float(k["count"].sum()) / ctx.n_parts))),
    ]


def _failed_inputs(bad: list[InputRecord]) -> str:
    """The first 30 failed inputs with their errors."""
    lines = "".join(f"<li><code>{escape(str(i.error or i.path))}</code></li>" for i in bad[:30])
    more = f"<li>… and {len(bad) - 30} more</li>" if len(bad) > 30 else ""
    return f"<h3>Failed inputs ({len(bad)})</h3><ul>{lines}{more}</ul>"


def _run_details(ctx: Context) -> str:
    """Where the results are, when and how they were made, the tables and the options set."""
    r = ctx.results
    m = r.record
    info = [
        ("results", str(r.path or "(in memory)")),
        ("created", "–" if m.created is None else m.created),
        ("dtrace", __version__ if m.dtrace_version is None else m.dtrace_version),
        ("analysis time", f"{m.seconds or 0} s on {1 if m.workers is None else m.workers} worker(s)"),
        ("tables", ", ".join(sorted(ctx.names)) or "none"),
    ]
    opts = m.options
    set_opts = {k_: v for k_, v in opts.items() if v not in (None, False, {}, "") and k_ != "extra"}
    if set_opts:
        info.append(("options", ", ".join(f"{k_}={v}" for k_, v in set_opts.items())))
    rows = "".join(f"<tr><th>{escape(a)}</th><td>{escape(b)}</td></tr>" for a, b in info)
    return f'<details><summary>Run details</summary><table class="data">{rows}</table></details>'


def _inputs_table(inputs: list[InputRecord]) -> str:
    """The inputs (the failed ones first when there are more than 64)."""
    cols = ["path", "format", "status", "events", "error"]
    df = pd.DataFrame({c: [getattr(i, c) for i in inputs] for c in cols})
    df["error"] = df["error"].fillna("")
    shown = df if len(df) <= 64 else pd.concat([df[df["status"] == "error"], df[df["status"] != "error"]]).head(64)
    kinds = {"events": "num"}
    return (
        f"<details><summary>Inputs ({len(df):,}{', first 64' if len(df) > 64 else ''})</summary>"
        + table(shown.reset_index(drop=True), [(c, c, kinds.get(c, "text")) for c in cols])
        + "</details>"
    )


def section_breakdown(ctx: Context) -> str:
    """Per-GPU stacked breakdown bars (computation / exposed comm / exposed memcpy / idle) and their table."""
    bd, msg = ctx.get("breakdown", ("rank", "device", *(c for _, c in BREAKDOWN_PARTS), "total_ns"))
    if bd is None:
        return msg
    bd = bd.sort_values(["rank", "device"]).reset_index(drop=True)
    wait = (bd["exposed_comm_ns"] + bd["idle_ns"]).to_numpy(np.float64)
    idx, sel_note = ctx.select(wait, bd["rank"].to_numpy(), "waiting time (exposed comm + idle)")
    view = bd.iloc[idx].reset_index(drop=True)
    html = [
        note(
            "Per GPU, all streams pooled: computation = union of compute kernels; exposed comm and "
            "exposed memcpy = the part not hidden behind compute (and comm); idle = timeline − busy. "
            "The four add up to the GPU timeline (first GPU start to last GPU end)."
        )
    ]
    if sel_note:
        html.append(note(sel_note))
    html.append(
        ch.stacked_hbars(
            "breakdown",
            ctx.labels(view),
            {lab: view[col].to_numpy() for lab, col in BREAKDOWN_PARTS},
            ch.BREAKDOWN_COLORS,
            highlight=[int(r) in ctx.flagged for r in view["rank"]],
        )
    )
    if len(bd) > ctx.max_bars:
        html.append("<h3>Distribution over all GPUs</h3>")
        html.append(
            ch.boxplots(
                "breakdown-dist", {lab: bd[col].to_numpy() for lab, col in BREAKDOWN_PARTS}, colors=ch.BREAKDOWN_COLORS
            )
        )
    t = view.copy()
    tot = t["total_ns"].replace(0, np.nan)
    t["busy_share"] = (t["total_ns"] - t["idle_ns"]) / tot
    t["comm_share"] = t["exposed_comm_ns"] / tot
    t["label"] = ctx.labels(t)
    cols = [
        ("label", "GPU", "text"),
        ("total_ns", "timeline", "time"),
        *((c, lab, "time") for lab, c in BREAKDOWN_PARTS),
        ("busy_share", "busy share", "pct"),
        ("comm_share", "exposed comm share", "pct"),
    ]
    if "comm_ns" in t.columns:
        cols.insert(6, ("comm_ns", "comm (total)", "time"))
    if "comm_overlap_share" in t.columns:
        cols.append(("comm_overlap_share", "comm hidden by compute", "pct"))
    html.append(table(t, cols, flag=[int(r) in ctx.flagged for r in t["rank"]]))
    return "".join(html)


def _class_frame(ctx: Context) -> tuple[pd.DataFrame | None, str]:
    src = class_source(ctx.results)
    if src is None:
        return None, na("classes", "tables classes and kernels absent")
    frame, origin = src
    if not len(frame):
        return None, na("classes", f"{origin} is empty")
    return frame, origin


def section_classes(ctx: Context) -> str:
    """Kernel time by class per GPU (nine largest classes, the rest pooled) and the classes across GPUs."""
    frame, origin = _class_frame(ctx)
    if frame is None:
        return origin
    cls = frame["class"].astype(str)
    tot_by_class = frame.groupby(cls)["total_ns"].sum().sort_values(ascending=False)
    top = list(tot_by_class.index[:9])
    rest_name = "(other classes)"
    key = np.where(cls.isin(top), cls, rest_name)
    piv = frame.assign(_k=key).pivot_table(
        index=["rank", "device"], columns="_k", values="total_ns", aggfunc="sum", fill_value=0
    )
    order = [c for c in top if c in piv.columns] + ([rest_name] if rest_name in piv.columns else [])
    piv = piv[order].sort_index()
    keys = piv.index.to_frame(index=False)
    colors = {c: ctx.colors.get(c, ch.REST_COLOR) for c in order}  # the report's colour of each class
    html = [
        note(
            f"GPU time of each kernel class per GPU (source: {origin}; kernel time summed, so kernels "
            "that overlap on several streams count fully). The nine largest classes are shown; the rest "
            "is pooled."
        )
    ]
    total = piv.sum(axis=1).to_numpy(np.float64)
    idx, sel_note = ctx.select(total, keys["rank"].to_numpy(), "total kernel time")
    if sel_note:
        html.append(note(sel_note))
    view = piv.iloc[idx]
    vkeys = keys.iloc[idx]
    html.append(
        ch.stacked_hbars(
            "classes",
            ctx.labels(vkeys),
            {c: view[c].to_numpy() for c in order},
            colors,
            highlight=[int(r) in ctx.flagged for r in vkeys["rank"]],
        )
    )
    if len(piv) > ctx.max_bars:
        html.append("<h3>Distribution over all GPUs</h3>")
        html.append(ch.boxplots("classes-dist", {c: piv[c].to_numpy() for c in order}, colors=colors))
    full = frame.assign(_c=cls).pivot_table(
        index=["rank", "device"], columns="_c", values="total_ns", aggfunc="sum", fill_value=0
    )
    counts = frame.assign(_c=cls).groupby("_c")["count"].sum()
    argmax = full.to_numpy().argmax(axis=0)
    fkeys = full.index.to_frame(index=False)
    grand = float(full.to_numpy().sum()) or 1.0
    summary = pd.DataFrame(
        {
            "class": full.columns.to_numpy(object),
            "per_gpu": full.sum(axis=0).to_numpy(np.float64) / ctx.n_parts,
            "share": full.sum(axis=0).to_numpy(np.float64) / grand,
            "count": counts.reindex(full.columns).to_numpy(np.float64) / ctx.n_parts,
            "min": full.min(axis=0).to_numpy(np.float64),
            "max": full.max(axis=0).to_numpy(np.float64),
            "max_rank": [ctx.label(fkeys["rank"].iloc[i], fkeys["device"].iloc[i]) for i in argmax],
        }
    )
    summary["imbalance"] = summary["max"] / summary["min"].replace(0, np.nan)
    summary = summary.sort_values("per_gpu", ascending=False)
    html.append("<h3>Classes across GPUs</h3>")
    html.append(
        table(
            summary,
            [
                ("class", "class", "text"),
                ("per_gpu", "time / GPU", "time"),
                ("share", "share", "pct"),
                ("count", "launches / GPU", "num"),
                ("min", "min GPU", "time"),
                ("max", "max GPU", "time"),
                ("imbalance", "max / min", "ratio"),
                ("max_rank", "slowest", "text"),
            ],
        )
    )
    return "".join(html)


def section_kernels(ctx: Context) -> str:
    """Top kernels over all GPUs: time per GPU, share, launches, spread between GPUs, the slowest GPU."""
    k, msg = ctx.get("kernels", ("rank", "device", "name", "count", "total_ns"))
    if k is None:
        return msg
    ccol = "class" if "class" in k.columns else ("category" if "category" in k.columns else None)
    g = k.groupby("name", sort=False)
    agg = pd.DataFrame(
        {
            "count": g["count"].sum(),
            "total": g["total_ns"].sum(),
            "gpus": g.size(),
            "max": g["total_ns"].max(),
            "min": g["total_ns"].min(),
        }
    )
    imax = k.loc[g["total_ns"].idxmax().to_numpy()]
    agg["max_rank"] = ctx.labels(imax)
    if ccol:
        agg["cls"] = g[ccol].first().astype(str)
    else:
        agg["cls"] = ""
    agg = agg.reset_index().sort_values("total", ascending=False, kind="stable").reset_index(drop=True)
    grand = float(agg["total"].sum()) or 1.0
    agg["per_gpu"] = agg["total"] / ctx.n_parts
    agg["share"] = agg["total"] / grand
    agg["mean"] = agg["total"] / agg["count"].replace(0, np.nan)
    agg["count_gpu"] = agg["count"] / ctx.n_parts
    agg["imbalance"] = agg["max"] / agg["min"].replace(0, np.nan)
    top = agg.head(15)
    cmap = ctx.colors  # the report's colour of each class
    tips = [
        f"{n}\n{ch.fmt_time(t)} per GPU · {ch.fmt_num(c / ctx.n_parts)} launches per GPU · {cl}"
        for n, t, c, cl in zip(top["name"], top["per_gpu"], top["count"], top["cls"])
    ]
    html = [
        note(
            f"GPU time per kernel name, summed over {ctx.n_parts} GPU(s) and shown per GPU; colour = {ccol or 'none'}."
        )
    ]
    html.append(
        ch.hbars(
            "top-kernels",
            top["name"].tolist(),  # shortened to fit by hbars, keeping them distinct
            top["per_gpu"].to_numpy(),
            label_width=400,
            colors=[cmap.get(c, "#999") for c in top["cls"]],
            tooltips=tips,
            legend={c: cmap[c] for c in dict.fromkeys(top["cls"])} if ccol else None,
        )
    )
    cols = [
        ("name", "kernel", "name"),
        ("cls", ccol or "class", "text"),
        ("per_gpu", "time / GPU", "time"),
        ("share", "share", "pct"),
        ("count_gpu", "launches / GPU", "num"),
        ("mean", "mean", "time"),
        ("max", "max GPU", "time"),
        ("imbalance", "max / min GPU", "ratio"),
        ("max_rank", "slowest", "text"),
    ]
    html.append(table(agg.head(40), cols))
    return "".join(html)


def _hist_columns(df: pd.DataFrame) -> tuple[str, str, str] | None:
    for lo, hi in (
        ("lo_ns", "hi_ns"),
        ("bin_lo_ns", "bin_hi_ns"),
        ("low_ns", "high_ns"),
        ("left_ns", "right_ns"),
        ("bin_start_ns", "bin_end_ns"),
        ("start_ns", "end_ns"),
        ("min_ns", "max_ns"),
    ):
        if lo in df.columns and hi in df.columns:
            for cnt in ("count", "gaps", "n"):
                if cnt in df.columns:
                    return lo, hi, cnt
    return None


def _bins_agree(h: pd.DataFrame, lo: str, hi: str) -> bool:
    edges = h[[lo, hi]].drop_duplicates().sort_values([lo, hi])
    a, b = edges[lo].to_numpy(np.float64), edges[hi].to_numpy(np.float64)
    return bool(len(a) <= 1 or np.all(a[1:] >= b[:-1]))


def merged_histogram(
    hg: pd.DataFrame, lo: str, hi: str, cnt: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int] | None]:
    """The gap histogram to draw from a per-(rank, device, stream) histogram table.

    When all GPUs used the same bins (user bounds), their counts are summed per bin and the
    last item is ``None``. Otherwise (each GPU's range comes from its own gaps) bins cannot be
    merged exactly, so the histogram of the GPU with the most gaps is returned with its
    ``(rank, device)``.

    Examples
    --------
    >>> import pandas as pd
    >>> t = pd.DataFrame({"rank": [0, 0, 1, 1], "device": [0, 0, 1, 1], "lo_ns": [0, 10, 0, 10],
    ...                   "hi_ns": [10, 20, 10, 20], "count": [1, 2, 3, 4]})
    >>> lo, hi, c, which = merged_histogram(t, "lo_ns", "hi_ns", "count")
    >>> lo.tolist(), c.tolist(), which
    ([0.0, 10.0], [4.0, 6.0], None)
    """
    h = hg.loc[np.isfinite(hg[lo].to_numpy(np.float64)) & np.isfinite(hg[hi].to_numpy(np.float64))]
    which = None
    keys = [k for k in ("rank", "device") if k in h.columns]
    if not _bins_agree(h, lo, hi) and keys:
        per = h.groupby(keys)[cnt].sum()
        best = per.idxmax()
        best = best if isinstance(best, tuple) else (best,)
        sel = np.ones(len(h), bool)
        for k, v in zip(keys, best):
            sel &= h[k].to_numpy() == v
        h = h.loc[sel]
        which = (int(best[0]), int(best[1]) if len(best) > 1 else -1)
    g = h.groupby([lo, hi], sort=True)[cnt].sum()
    return (
        g.index.get_level_values(0).to_numpy(np.float64),
        g.index.get_level_values(1).to_numpy(np.float64),
        g.to_numpy(np.float64),
        which,
    )


CAUSE_NOTE = (
    "host wait: the event that ends the gap was launched after the gap began (the GPU waited for the "
    "host); kernel wait: launched in time, short gap (launch overhead); other: launched in time, longer "
    "gap (synchronisation, dependencies), or launch unknown."
)


def section_gaps(ctx: Context) -> str:
    """Idle gaps: GPU idle time by cause per GPU (device gaps), their length histogram, then the
    per-stream view (stream gaps by cause, top transitions), labelled as such."""
    html = ["<h3>GPU idle time by cause per GPU</h3>"]
    cause_cols = tuple(c for _, c, _ in GAP_CAUSES)
    dg, msg = ctx.get("device_gaps", ("rank", "device", "gaps", "idle_ns", *cause_cols))
    if dg is None:
        html.append(msg)
    else:
        per = dg.sort_values(["rank", "device"], kind="stable").reset_index(drop=True)
        idx, sel_note = ctx.select(per["idle_ns"].to_numpy(np.float64), per["rank"].to_numpy(), "GPU idle time")
        view = per.iloc[idx]
        html.append(
            note(
                "Device gaps: intervals in which no stream of the GPU runs anything, between its first and "
                "last GPU event; per GPU they add up to the idle time of the breakdown. " + CAUSE_NOTE
            )
        )
        if sel_note:
            html.append(note(sel_note))
        html.append(
            ch.stacked_hbars(
                "gap-causes",
                ctx.labels(view),
                {lab: view[c].to_numpy() for lab, c, _ in GAP_CAUSES},
                {lab: col for lab, _, col in GAP_CAUSES},
                highlight=[int(r) in ctx.flagged for r in view["rank"]],
            )
        )
        if len(per) > ctx.max_bars:
            html.append(
                ch.boxplots(
                    "gap-causes-dist",
                    {lab: per[c].to_numpy() for lab, c, _ in GAP_CAUSES},
                    colors={lab: col for lab, _, col in GAP_CAUSES},
                )
            )
    html.append("<h3>GPU idle gap length histogram</h3>")
    html.append(_histogram_html(ctx, "device_gap_histogram", "gap-histogram", "device gaps"))
    html.append("<h3>Per-stream gaps (not GPU idle time)</h3>")
    html.append(_stream_gaps_html(ctx, cause_cols))
    html.append("<h3>Top transitions per stream (kernel pairs around stream gaps)</h3>")
    tr, msg = ctx.get("transitions", ("prev_name", "next_name", "count", "mean_ns"))
    if tr is None:
        html.append(msg)
    else:
        t = tr.assign(_tot=tr["mean_ns"].to_numpy(np.float64) * tr["count"].to_numpy(np.float64))
        g = t.groupby(["prev_name", "next_name"], sort=False, observed=True)
        agg = pd.DataFrame({"count": g["count"].sum(), "total": g["_tot"].sum()})
        if "min_ns" in t.columns:
            agg["min"] = g["min_ns"].min()
        if "max_ns" in t.columns:
            agg["max"] = g["max_ns"].max()
        agg = agg.reset_index()
        agg["mean"] = agg["total"] / agg["count"].replace(0, np.nan)
        agg["per_gpu"] = agg["total"] / ctx.n_parts
        agg = agg.sort_values("total", ascending=False, kind="stable").head(25)
        html.append(
            note(
                "A → B: the gap between the end of A and the start of B on one stream; sorted by total "
                "gap time over all GPUs."
            )
        )
        cols = [
            ("prev_name", "A (before)", "name"),
            ("next_name", "B (after)", "name"),
            ("count", "gaps", "num"),
            ("per_gpu", "gap time / GPU", "time"),
            ("mean", "mean", "time"),
        ]
        if "min" in agg.columns:
            cols.append(("min", "min", "time"))
        if "max" in agg.columns:
            cols.append(("max", "max", "time"))
        html.append(table(agg, cols))
    return "".join(html)


def _histogram_html(ctx: Context, name: str, chart_id: str, what: str) -> str:
    hg, msg = ctx.get(name)
    cols = _hist_columns(hg) if hg is not None else None
    if hg is None:
        return msg
    if cols is None:
        return na(name, f"table {name} has no recognised bin columns")
    lo_e, hi_e, counts, which = merged_histogram(hg, *cols)
    widths = hi_e - lo_e
    log = bool(len(widths) > 2 and widths[0] > 0 and widths[-1] > 1.5 * widths[0])
    cap = f"{int(counts.sum()):,} {what} in {len(counts)} bins"
    if which is not None:
        cap = (
            f"The GPUs' bins differ (each spans that GPU's own gaps), so they cannot be added up: this is "
            f"{ctx.label(*which)}, the GPU with the most gaps ({cap}). Analyse with --hist-min/--hist-max "
            "for one histogram over all GPUs."
        )
    return ch.histogram(chart_id, lo_e, hi_e, counts, log_x=log, caption=cap)


def _stream_gaps_html(ctx: Context, cause_cols: tuple[str, ...]) -> str:
    """The per-stream gaps: the streams with the most gap time, by cause, labelled per stream."""
    gp, msg = ctx.get("gaps", ("rank", "device", "stream", "gaps", "idle_ns", *cause_cols))
    if gp is None:
        return msg
    html = [
        note(
            "Stream gaps: intervals in which one stream runs nothing while it has work before and after. "
            "A stream's gap usually overlaps work on the GPU's other streams (an NCCL stream waits between "
            "collectives while compute runs), so these are per-stream waits, not GPU idle time; the causes "
            "follow the same rules, from the stream's next event."
        )
    ]
    per = gp.groupby(["rank", "device"])[["idle_ns"]].sum().reset_index()
    overlap = _stream_sum_note(ctx, per)
    if overlap:
        html.append(note(overlap))
    top = gp.sort_values("idle_ns", ascending=False, kind="stable").head(20)
    top = top.assign(label=ctx.labels(top))
    html.append(
        table(
            top,
            [
                ("label", "GPU", "text"),
                ("stream", "stream", "num"),
                ("gaps", "gaps", "num"),
                ("idle_ns", "stream gap time", "time"),
                *[(c, lab, "time") for lab, c, _ in GAP_CAUSES],
            ],
            flag=[int(r) in ctx.flagged for r in top["rank"]],
        )
    )
    return "".join(html)


def _stream_sum_note(ctx: Context, per: pd.DataFrame) -> str:
    """When the gaps summed over streams exceed the GPU's idle time, say so: a stream's gap
    usually overlaps work on the GPU's other streams, so it is not GPU idle time."""
    bd, _ = ctx.get("breakdown", ("rank", "device", "idle_ns"))
    if bd is None or not len(per):
        return ""
    summed = float(np.nanmedian(per["idle_ns"].to_numpy(np.float64)))
    idle = float(np.nanmedian(bd["idle_ns"].to_numpy(np.float64)))
    if not summed > 1.1 * idle:
        return ""
    return (
        f"Per GPU these stream gaps add up to {ch.fmt_time(summed)} (median), while the GPU itself is idle "
        f"for {ch.fmt_time(idle)} (median, breakdown above): a gap on one stream mostly overlaps work on the "
        "other streams, so read them as per-stream waiting, not as GPU idle time."
    )


def section_ops(ctx: Context) -> str:
    """GPU time per host op (subtree and direct) and the ops slower on one GPU than on the median."""
    op, msg = ctx.get("ops", ("rank", "device", "op", "count", "gpu_direct_ns", "gpu_subtree_ns"))
    if op is None:
        return msg
    agg = _ops_per_gpu(ctx, op)
    html = [
        note(
            "GPU time per host op (union of the GPU events it launched: directly, and through the ops it "
            "calls = subtree), per GPU. Nested ops both count their children's kernels in their subtree."
        ),
        _ops_bars(agg.head(15)),
        table(
            agg.head(40),
            [
                ("op", "op", "name"),
                ("subtree_gpu", "GPU time / GPU (subtree)", "time"),
                ("direct_gpu", "direct", "time"),
                ("calls_gpu", "calls / GPU", "num"),
                ("gpus", "GPUs", "num"),
                ("min", "min GPU", "time"),
                ("max", "max GPU", "time"),
                ("imbalance", "max / min", "ratio"),
                ("max_rank", "slowest", "text"),
            ],
        ),
    ]
    oo, _ = ctx.get("op_outliers", ("rank", "op", "excess_ns"))
    if oo is not None:
        html.append(_op_outliers(ctx, oo))
    return "".join(html)


def _ops_per_gpu(ctx: Context, op: pd.DataFrame) -> pd.DataFrame:
    """Per op over all GPUs: calls, direct and subtree GPU time (per GPU too), extremes, the slowest GPU."""
    g = op.groupby("op", sort=False)
    agg = pd.DataFrame(
        {
            "count": g["count"].sum(),
            "direct": g["gpu_direct_ns"].sum(),
            "subtree": g["gpu_subtree_ns"].sum(),
            "max": g["gpu_subtree_ns"].max(),
            "min": g["gpu_subtree_ns"].min(),
            "gpus": g.size(),
        }
    )
    agg["max_rank"] = ctx.labels(op.loc[g["gpu_subtree_ns"].idxmax().to_numpy()])
    agg = agg.reset_index().sort_values("subtree", ascending=False, kind="stable").reset_index(drop=True)
    n = ctx.n_parts
    agg["subtree_gpu"] = agg["subtree"] / n
    agg["direct_gpu"] = agg["direct"] / n
    agg["calls_gpu"] = agg["count"] / n
    agg["imbalance"] = agg["max"] / agg["min"].replace(0, np.nan)
    return agg


def _ops_bars(top: pd.DataFrame) -> str:
    """Subtree GPU time per GPU of the top ops, their direct time as the inner bar."""
    tips = [
        f"{o}\nsubtree {ch.fmt_time(s)} · direct {ch.fmt_time(d)} per GPU · {ch.fmt_num(c)} calls per GPU"
        for o, s, d, c in zip(top["op"], top["subtree_gpu"], top["direct_gpu"], top["calls_gpu"])
    ]
    return ch.hbars(
        "ops",
        top["op"].tolist(),
        top["subtree_gpu"].to_numpy(),
        label_width=400,
        inner=top["direct_gpu"].to_numpy(),
        colors=ch.PALETTE[4],
        tooltips=tips,
        legend={"subtree GPU time": ch.PALETTE[4], "direct GPU time (inner bar)": "#1f3552"},
    )


def _op_outliers(ctx: Context, oo: pd.DataFrame) -> str:
    """The 15 (GPU, op) with the most excess time over the median GPU; communication ops after the
    others (their time includes waiting for the other ranks: the waiting ranks' collectives are
    slow because of the straggler, not slow themselves)."""
    comm = (
        oo["comm"].astype("boolean").fillna(False).to_numpy(bool) if "comm" in oo.columns else np.zeros(len(oo), bool)
    )
    order = np.lexsort((-oo["excess_ns"].to_numpy(np.float64), comm))
    top_o = oo.iloc[order].head(15)
    top_o = top_o.assign(label=ctx.labels(top_o))
    spec = [
        ("label", "GPU", "text", True),
        ("op", "op", "name", True),
        ("gpu_ns", "GPU time", "time", False),
        ("median_gpu_ns", "median GPU", "time", False),
        ("ratio", "ratio", "ratio", False),
        ("excess_ns", "excess", "time", True),
        ("z", "z", "z", False),
    ]
    caption = note("Compute ops first; communication ops (their time includes waiting for the other ranks) after them.")
    return (
        "<h3>Ops slower on one GPU than on the median GPU</h3>"
        + caption
        + table(
            top_o,
            [(c, h, k) for c, h, k, must in spec if must or c in top_o.columns],
            flag=[int(r) in ctx.flagged for r in top_o["rank"]],
        )
    )
