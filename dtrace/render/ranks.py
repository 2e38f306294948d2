"""Report sections that compare ranks: rank × step heatmaps, stragglers, collective skew.

Heatmaps pool consecutive ranks into at most :data:`HEAT_ROWS` rows (keeping each bucket's
extreme value and the rank that holds it) and columns into at most :data:`HEAT_COLS`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from . import charts as ch
from .context import Context
from .page import na, note, table
from .stragglers import SIGNALS
from .text import flags

HEAT_ROWS = 128
HEAT_COLS = 60


def _bucket_rows(m: np.ndarray, labels: list[str], agg: str) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Pool consecutive rows into at most :data:`HEAT_ROWS` buckets; keep each column's
    ``agg`` (``max`` or ``min``) over the bucket and the index of the row that holds it."""
    n_r, n_c = m.shape
    if n_r <= HEAT_ROWS:
        return m, labels, np.tile(np.arange(n_r)[:, None], (1, n_c))
    size = math.ceil(n_r / HEAT_ROWS)
    nb = math.ceil(n_r / size)
    pad = np.full((nb * size, n_c), np.nan)
    pad[:n_r] = m
    blocks = pad.reshape(nb, size, n_c)
    fill = -np.inf if agg == "max" else np.inf
    filled = np.where(np.isnan(blocks), fill, blocks)
    pick = filled.argmax(axis=1) if agg == "max" else filled.argmin(axis=1)
    vals = np.take_along_axis(blocks, pick[:, None, :], axis=1)[:, 0, :]
    rows = np.arange(nb)[:, None] * size + pick
    labs = [
        f"{labels[b * size].replace('rank ', 'ranks ')}–{labels[min((b + 1) * size, n_r) - 1].split(' ')[1]}"
        if size > 1
        else labels[b]
        for b in range(nb)
    ]
    return vals, labs, np.minimum(rows, n_r - 1)


def _bucket_cols(m: np.ndarray, labels: list[str], agg: str) -> tuple[np.ndarray, list[str]]:
    n_r, n_c = m.shape
    if n_c <= HEAT_COLS:
        return m, labels
    size = math.ceil(n_c / HEAT_COLS)
    nb = math.ceil(n_c / size)
    pad = np.full((n_r, nb * size), np.nan)
    pad[:, :n_c] = m
    blocks = pad.reshape(n_r, nb, size)
    if agg == "sum":
        vals = np.where(np.isnan(blocks), 0.0, blocks).sum(axis=2)
    else:
        vals = np.where(np.isnan(blocks), -np.inf, blocks).max(axis=2)
    empty = np.isnan(blocks).all(axis=2)
    vals = np.where(empty, np.nan, vals)
    labs = [f"{labels[b * size]}–{labels[min((b + 1) * size, n_c) - 1]}" for b in range(nb)]
    return vals, labs


def _heat(
    ctx: Context,
    chart_id: str,
    m: np.ndarray,
    keys: pd.DataFrame,
    col_labels: list[str],
    *,
    row_agg: str,
    col_agg: str,
    what: str,
    vrange: tuple[float, float] | None = None,
    note_text: str = "",
) -> str:
    labels = ctx.labels(keys)
    m2, clabs = _bucket_cols(m, col_labels, col_agg)
    m3, rlabs, src = _bucket_rows(m2, labels, row_agg)
    flagged = np.array([int(r) in ctx.flagged for r in keys["rank"]], dtype=bool)
    size = math.ceil(len(flagged) / m3.shape[0]) if m3.shape[0] else 1
    marked = [bool(flagged[b * size : (b + 1) * size].any()) for b in range(m3.shape[0])]
    tips = [
        [
            f"{labels[src[i, j]]} · {clabs[j]}: {what} {ch.fmt_time(m3[i, j]) if np.isfinite(m3[i, j]) else 'no data'}"
            for j in range(m3.shape[1])
        ]
        for i in range(m3.shape[0])
    ]
    cap = [note_text] if note_text else []
    if any(marked):
        cap.append("⚑ marks the rows of flagged stragglers.")
    if m3.shape[0] < m.shape[0]:
        cap.append(
            f"{m.shape[0]} GPUs pooled into {m3.shape[0]} rows; each cell shows the "
            f"{'largest' if row_agg == 'max' else 'smallest'} value of its GPUs (the tooltip names the GPU)."
        )
    if m2.shape[1] < m.shape[1]:
        cap.append(f"{m.shape[1]} columns pooled into {m2.shape[1]} ({'summed' if col_agg == 'sum' else 'max'}).")
    return ch.heatmap(chart_id, m3, rlabs, clabs, tooltips=tips, caption=" ".join(cap), vrange=vrange, mark_rows=marked)


#: The step-time colour scale spans at least this share of the median step time, so that
#: differences of a few percent (noise) stay in the middle colours instead of filling the scale.
MIN_STEP_SPAN = 0.10


def step_colour_range(m: np.ndarray) -> tuple[float, float, float]:
    """``(low, high, spread)``: the step heatmap's colour range and the data's (max − min) / median.

    The range is the data's, widened symmetrically to :data:`MIN_STEP_SPAN` of the median.

    Examples
    --------
    >>> import numpy as np
    >>> lo, hi, spread = step_colour_range(np.array([[99.0, 101.0], [100.0, 100.0]]))
    >>> float(lo), float(hi), round(float(spread), 3)
    (95.0, 105.0, 0.02)
    """
    v = m[np.isfinite(m)]
    if not v.size:
        return 0.0, 0.0, 0.0
    lo, hi, med = float(v.min()), float(v.max()), float(np.median(v))
    span = max(hi - lo, MIN_STEP_SPAN * med)
    mid = (lo + hi) / 2
    return mid - span / 2, mid + span / 2, (hi - lo) / med if med > 0 else 0.0


def section_steps(ctx: Context) -> str:
    """Rank × step heatmaps of step time and collective wait, and the per-step table."""
    html = []
    st, msg = ctx.get("steps", ("rank", "device", "step", "step_ns"))
    if st is None:
        html.append("<h3>Step time</h3>" + msg)
    else:
        html += _step_times(ctx, st)
    html.append("<h3>Collective wait per GPU</h3>")
    co, msg = ctx.get("collectives", ("collective", "rank", "start_ns", "wait_ns"))
    if co is None:
        html.append(msg)
        return "".join(html)
    return "".join(html + _collective_waits(ctx, co))


def _step_times(ctx: Context, st: pd.DataFrame) -> list[str]:
    """The rank × step heatmap of step time and the per-step table."""
    html = []
    piv = st.pivot_table(index=["rank", "device"], columns="step", values="step_ns", aggfunc="max").sort_index()
    keys = piv.index.to_frame(index=False)
    steps = [str(s) for s in piv.columns]
    html.append("<h3>Step time per GPU and step</h3>")
    m = piv.to_numpy(np.float64)
    lo, hi, spread = step_colour_range(m)
    html.append(
        note(
            "step time = GPU span of the step's events (first start to last end). Colour: dark purple = shorter, "
            "yellow = longer. A yellow column is a slow step. In a job whose ranks synchronise every step "
            "(collectives), every rank's step lasts about as long as the slowest rank's, so a slow rank does "
            "not stand out here: look for it in the collective-wait chart below (the rank that waits least, a "
            "dark row) and in the Stragglers section. A yellow row is a rank slow on its own (ranks that do not "
            "wait for each other)."
        )
    )
    html.append(
        _heat(
            ctx,
            "step-heatmap",
            m,
            keys,
            [f"step {s}" for s in steps],
            row_agg="max",
            col_agg="max",
            what="step time",
            vrange=(lo, hi),
            note_text=f"The step times span {100 * spread:.1f} % of their median (slowest − "
            f"fastest cell); the colour scale spans at least {100 * MIN_STEP_SPAN:.0f} % "
            f"({ch.fmt_time(lo)} to {ch.fmt_time(hi)}), so differences of a few percent "
            "stay in the middle colours.",
        )
    )
    g = st.groupby("step")["step_ns"]
    sm = pd.DataFrame(
        {
            "step": g.median().index.to_numpy(),
            "gpus": g.size().to_numpy(),
            "median": g.median().to_numpy(),
            "min": g.min().to_numpy(),
            "max": g.max().to_numpy(),
        }
    )
    slow = st.loc[g.idxmax().to_numpy()]
    sm["slowest"] = ctx.labels(slow)
    sm["spread"] = (sm["max"] - sm["min"]) / sm["median"].replace(0, np.nan)
    html.append(
        table(
            sm.head(200),
            [
                ("step", "step", "num"),
                ("gpus", "GPUs", "num"),
                ("median", "median", "time"),
                ("min", "fastest", "time"),
                ("max", "slowest", "time"),
                ("slowest", "slowest GPU", "text"),
                ("spread", "(max − min) / median", "pct"),
            ],
        )
    )
    return html


def _collective_waits(ctx: Context, co: pd.DataFrame) -> list[str]:
    """The rank × step (or × instance, without steps) heatmap of collective wait."""
    html = []
    co = co.assign(device=co["device"] if "device" in co.columns else -1)
    in_step = (
        co["step"].notna().to_numpy() & (co["step"].fillna(-1).to_numpy() >= 0)
        if "step" in co.columns
        else np.zeros(len(co), bool)
    )  # NA (or an older table's -1): outside every step
    if in_step.any():
        c2 = co.loc[in_step]
        piv = c2.pivot_table(index=["rank", "device"], columns="step", values="wait_ns", aggfunc="sum").sort_index()
        col_labels = [f"step {s}" for s in piv.columns]
        html.append(
            note(
                "Time each GPU waited in collectives for the last rank to arrive, per step. Colour: "
                "dark purple = waited least, yellow = waited most. The straggler is the rank that waits "
                "least (a dark row), not most: the others wait for it."
            )
        )
    else:
        first = co.groupby("collective")["start_ns"].min().sort_values(kind="stable")
        order = pd.Series(np.arange(len(first)), index=first.index)
        c2 = co.assign(_i=order.reindex(co["collective"]).to_numpy())
        piv = c2.pivot_table(index=["rank", "device"], columns="_i", values="wait_ns", aggfunc="sum").sort_index()
        col_labels = [f"#{int(i) + 1}" for i in piv.columns]
        html.append(
            note(
                "Time each GPU waited for the last rank to arrive, per collective instance in time "
                "order (no step column in the collectives table). Colour: dark purple = waited least, "
                "yellow = waited most. The straggler is the rank that waits least (a dark row), not "
                "most: the others wait for it."
            )
        )
    keys = piv.index.to_frame(index=False)
    html.append(
        _heat(
            ctx,
            "wait-heatmap",
            piv.to_numpy(np.float64),
            keys,
            col_labels,
            row_agg="min",
            col_agg="sum",
            what="collective wait",
        )
    )
    return html


def section_stragglers(ctx: Context) -> str:
    """The stragglers table with evidence, and the ranks with the largest robust z-scores."""
    html = []
    sg, msg = ctx.get("stragglers", ("rank", "score", "flagged", "evidence"))
    if sg is None:
        html.append(msg)
    else:
        html += _straggler_scores(ctx, sg)
    rk, msg = ctx.get("ranks", ("rank",))
    html.append("<h3>Rank comparison (robust z-scores)</h3>")
    if rk is None:
        html.append(msg)
        return "".join(html)
    return "".join(html + _rank_zscores(ctx, rk))


def _straggler_scores(ctx: Context, sg: pd.DataFrame) -> list[str]:
    """The 20 highest scores as bars, and the flagged GPUs (and a few others) with their evidence."""
    html = []
    sg = sg.sort_values("score", ascending=False, kind="stable").reset_index(drop=True)
    fl = flags(sg["flagged"])
    html.append(
        note(
            f"{int(fl.sum())} of {len(sg)} GPUs flagged. Score: higher = more likely the rank the "
            "others wait for; the evidence gives the time it held the others back, its cause (what it "
            "spent that time on) and the signals (slower kernels than the other ranks, step time, slow "
            "link, slow GPU at equal op shapes)."
        )
    )
    head = sg.head(20)
    html.append(
        ch.hbars(
            "stragglers",
            ctx.labels(head),
            head["score"].to_numpy(np.float64),
            colors=["#e15759" if f else "#4e79a7" for f in flags(head["flagged"])],
            value_fmt=lambda v: f"{v:.2f}",
            label_width=150,
            highlight=flags(head["flagged"]).tolist(),
            legend={"flagged": "#e15759", "not flagged": "#4e79a7"},
        )
    )
    shown = pd.concat([sg.loc[fl], sg.loc[~fl].head(max(25 - int(fl.sum()), 5))]).sort_values(
        "score", ascending=False, kind="stable"
    )
    shown = shown.assign(label=ctx.labels(shown))
    cols = [
        ("label", "GPU", "text"),
        ("score", "score", "num"),
        ("flagged", "flagged", "bool"),
        ("evidence", "evidence", "text"),
    ]
    if "cause" in shown.columns:
        cols.insert(3, ("cause", "cause", "text"))
    if "held_share" in shown.columns:
        cols.insert(3, ("held_share", "held others (% of step)", "pct"))
    if "signals" in shown.columns:
        cols.insert(3, ("signals", "signals", "text"))
        html.append(note("Signals: " + "; ".join(f"{k} = {v}" for k, v in SIGNALS.items()) + "."))
    html.append(table(shown, cols, flag=flags(shown["flagged"]).tolist()))
    return html


def _rank_zscores(ctx: Context, rk: pd.DataFrame) -> list[str]:
    """The flagged stragglers, then the ranks with the largest |z|, on the main metrics and
    those with |z| ≥ 3."""
    html: list[str] = []
    zcols = [c for c in rk.columns if c.endswith("_z") and pd.api.types.is_numeric_dtype(rk[c])]
    if not zcols:
        return [na("ranks", "table ranks has no *_z columns")]
    z = np.nan_to_num(rk[zcols].to_numpy(np.float64), nan=0.0)
    worst = np.abs(z).max(axis=1)
    is_flagged = np.array([int(r) in ctx.flagged for r in rk["rank"]], dtype=bool)
    order = np.lexsort((-worst, ~is_flagged))[:20]  # the flagged stragglers first, then by |z|
    view = rk.iloc[order]
    zv = np.abs(z[order])
    preferred = [
        "step_ns_z",
        "computation_ns_z",
        "collective_wait_ns_z",
        "arrived_last_z",
        "exposed_comm_ns_z",
        "idle_ns_z",
        "host_wait_ns_z",
    ]
    strong = [c for k, c in sorted(enumerate(zcols), key=lambda kc: -zv[:, kc[0]].max()) if zv[:, k].max() >= 3]
    shown = list(dict.fromkeys([c for c in preferred if c in zcols] + strong))[:12]
    view = view.assign(label=ctx.labels(view))
    html.append(
        note(
            "z = (x − median) / (1.4826 · MAD) over all ranks, per metric; |z| ≥ 3 is highlighted. "
            f"The flagged stragglers, then the ranks with the largest |z| on any of {len(zcols)} metrics "
            f"({len(view)} rows); columns: the main metrics and those with |z| ≥ 3 here. Ranks that share "
            "a process group with a straggler often stand out too (they wait for it): the Stragglers "
            "table above says which rank is the cause."
        )
    )
    html.append(
        table(
            view,
            [("label", "GPU", "text"), *((c, c[:-2].replace("_ns", "").replace("_", " "), "z") for c in shown)],
            flag=[int(r) in ctx.flagged for r in view["rank"]],
        )
    )
    return html


def _instances(ctx: Context, co: pd.DataFrame) -> pd.DataFrame:
    """One row per matched collective instance: group, op, ranks, bytes, skews, total wait,
    transfer and bus bandwidth (from ``collective_instances`` when present, else derived)."""
    ci, _ = ctx.get("collective_instances", ("collective", "start_skew_ns", "end_skew_ns"))
    if ci is not None:
        return pd.DataFrame(
            {
                "group": ci["group"].astype(str) if "group" in ci.columns else "",
                "op": ci["op"].astype(str) if "op" in ci.columns else "",
                "ranks": ci["ranks"] if "ranks" in ci.columns else np.nan,
                "bytes": ci["bytes"] if "bytes" in ci.columns else np.nan,
                "start_skew": ci["start_skew_ns"],
                "end_skew": ci["end_skew_ns"],
                "wait": ci["wait_total_ns"] if "wait_total_ns" in ci.columns else np.nan,
                "transfer": ci["transfer_ns"] if "transfer_ns" in ci.columns else np.nan,
                "busbw": ci["busbw_gbps"] if "busbw_gbps" in ci.columns else np.nan,
            }
        )
    g = co.groupby("collective", sort=False)
    return pd.DataFrame(
        {
            "group": g["group"].first().astype(str) if "group" in co.columns else "",
            "op": g["op"].first().astype(str) if "op" in co.columns else "",
            "ranks": g.size(),
            "bytes": g["bytes"].max() if "bytes" in co.columns else np.nan,
            "start_skew": g["start_ns"].max() - g["start_ns"].min(),
            "end_skew": g["end_ns"].max() - g["end_ns"].min(),
            "wait": g["wait_ns"].sum(),
            "transfer": g["transfer_ns"].first() if "transfer_ns" in co.columns else np.nan,
            "busbw": g["busbw_gbps"].first() if "busbw_gbps" in co.columns else np.nan,
        }
    ).reset_index(drop=True)


def section_collectives(ctx: Context) -> str:
    """Collective skew per type and process group, and the collective wait per GPU."""
    co, msg = ctx.get("collectives", ("collective", "rank", "start_ns", "end_ns", "wait_ns"))
    if co is None:
        return msg
    inst = _instances(ctx, co)
    html = [
        note(
            "Per matched collective instance (clock offsets between hosts removed where the collectives "
            "table did so): start skew = latest − earliest start over its ranks, end skew likewise; wait = "
            "time ranks spent waiting for the last one to arrive; transfer = the shortest duration over the "
            "ranks; bus bandwidth as nccl-tests defines it."
        )
    ]
    ops = [o for o in inst.groupby("op")["wait"].sum().sort_values(ascending=False).index]
    html.append(
        ch.boxplots(
            "collective-skew",
            {o: inst.loc[inst["op"] == o, "start_skew"].to_numpy() for o in ops[:10]},
            caption="start skew per instance, by collective type (box: p25–p75, whiskers: min–max)",
        )
    )
    html += _by_op(inst)
    html += _by_group(inst)
    html += _waits_per_gpu(ctx, _per_gpu_waits(co))
    return "".join(html)


def _by_op(inst: pd.DataFrame) -> list[str]:
    """Per collective type: groups, instances, message size, wait, skews, transfer, bus bandwidth."""
    html = []
    go = inst.groupby("op", sort=False)
    by_op = (
        pd.DataFrame(
            {
                "groups": go["group"].nunique(),
                "instances": go.size(),
                "ranks": go["ranks"].max(),
                "bytes": go["bytes"].median(),
                "wait": go["wait"].sum(),
                "start_skew_mean": go["start_skew"].mean(),
                "start_skew_max": go["start_skew"].max(),
                "end_skew_mean": go["end_skew"].mean(),
                "transfer": go["transfer"].mean(),
                "busbw": go["busbw"].median(),
            }
        )
        .reset_index()
        .sort_values("wait", ascending=False)
    )
    html.append(
        table(
            by_op,
            [
                ("op", "collective", "text"),
                ("groups", "groups", "num"),
                ("instances", "instances", "num"),
                ("ranks", "ranks", "num"),
                ("bytes", "message (median)", "bytes"),
                ("wait", "total wait", "time"),
                ("start_skew_mean", "start skew (mean)", "time"),
                ("start_skew_max", "start skew (max)", "time"),
                ("end_skew_mean", "end skew (mean)", "time"),
                ("transfer", "transfer (mean)", "time"),
                ("busbw", "bus bw GB/s (median)", "num"),
            ],
        )
    )
    return html


def _by_group(inst: pd.DataFrame) -> list[str]:
    """The 15 (process group, collective type) pairs with the slowest transfers."""
    html = []
    gg = inst.groupby(["group", "op"], sort=False)
    by_group = (
        pd.DataFrame(
            {
                "instances": gg.size(),
                "wait": gg["wait"].sum(),
                "start_skew": gg["start_skew"].mean(),
                "transfer": gg["transfer"].mean(),
                "busbw": gg["busbw"].median(),
            }
        )
        .reset_index()
        .sort_values("transfer", ascending=False, kind="stable")
    )
    html.append("<h3>Process groups (slowest transfer first)</h3>")
    html.append(
        note(
            "A slow link makes every group containing that rank transfer slowly; compare the groups "
            f"that share ranks. {min(len(by_group), 15)} of {len(by_group)} (group, collective) pairs."
        )
    )
    html.append(
        table(
            by_group.head(15),
            [
                ("group", "group", "text"),
                ("op", "collective", "text"),
                ("instances", "instances", "num"),
                ("transfer", "transfer (mean)", "time"),
                ("busbw", "bus bw GB/s (median)", "num"),
                ("wait", "total wait", "time"),
                ("start_skew", "start skew (mean)", "time"),
            ],
        )
    )
    return html


def _per_gpu_waits(co: pd.DataFrame) -> pd.DataFrame:
    """Per GPU: its total collective wait, how often it arrived last, its instances (least wait first)."""
    keys = ["rank", "device"] if "device" in co.columns else ["rank"]
    if "last" in co.columns:
        last_flag = pd.Series(flags(co["last"]), index=co.index)
    else:
        last_flag = pd.Series(False, index=co.index)
        last_flag.loc[co.groupby("collective")["start_ns"].idxmax().to_numpy()] = True
    per = (
        co.assign(_last=last_flag.to_numpy(np.int64))
        .groupby(keys)
        .agg(wait=("wait_ns", "sum"), last=("_last", "sum"), instances=("wait_ns", "size"))
        .reset_index()
    )
    per["last_share"] = per["last"] / per["instances"].replace(0, np.nan)
    per = per.sort_values(["wait", "rank"], kind="stable").reset_index(drop=True)  # least wait first
    return per


def _waits_per_gpu(ctx: Context, per: pd.DataFrame) -> list[str]:
    """The collective wait per GPU as bars (least first) and the GPUs that arrived last most often."""
    html = []
    idx, sel_note = ctx.select(
        -per["wait"].to_numpy(np.float64),
        per["rank"].to_numpy(),
        "collective wait",
        high="that waited least",
        low="that waited most",
    )
    view = per.iloc[idx]
    html.append("<h3>Collective wait per GPU (least first)</h3>")
    html.append(note("The rank the others wait for waits least itself and arrives last most often."))
    if sel_note:
        html.append(note(sel_note))
    tips = [
        f"{lab}: waited {ch.fmt_time(w)} in total; arrived last at {int(n)} of {int(k)} instances"
        for lab, w, n, k in zip(ctx.labels(view), view["wait"], view["last"], view["instances"])
    ]
    html.append(
        ch.hbars(
            "collective-wait",
            ctx.labels(view),
            view["wait"].to_numpy(np.float64),
            label_width=150,
            colors=["#e15759" if int(r) in ctx.flagged else "#76b7b2" for r in view["rank"]],
            tooltips=tips,
            highlight=[int(r) in ctx.flagged for r in view["rank"]],
        )
    )
    if len(per) > ctx.max_bars:
        html.append(ch.boxplots("collective-wait-dist", {"wait per GPU": per["wait"].to_numpy()}))
    pv = per.sort_values(["last_share", "wait"], ascending=[False, True], kind="stable").head(20)
    pv = pv.assign(label=ctx.labels(pv))
    html.append(
        table(
            pv,
            [
                ("label", "GPU", "text"),
                ("wait", "total wait", "time"),
                ("last", "arrived last", "num"),
                ("instances", "instances", "num"),
                ("last_share", "arrived last (share)", "pct"),
            ],
            flag=[int(r) in ctx.flagged for r in pv["rank"]],
        )
    )
    return html
