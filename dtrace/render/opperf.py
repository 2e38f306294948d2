"""How far from the hardware: the op performance views (docs/semantics.md, "Op performance model").

One module for every place that shows the op model's tables: the report section (roofline chart,
time lost, families, the GPUs and their peaks, slow GPUs), the ``dtrace perf`` terminal view and
the line of the ``dtrace analyze`` summary. The tables come from :mod:`dtrace.reduce.opperf`.

The roofline chart (:func:`roofline_chart`) is inline SVG like :mod:`dtrace.render.charts`: log
axes, arithmetic intensity (FLOP per byte) against achieved TFLOP/s, the device's bandwidth roof
(slanted) and one compute roof per (unit, precision) the ops use, one mark per op shape (an op
with its arguments, summed over the GPUs of that device) sized by its GPU time, coloured by family,
with a tooltip. Ops without FLOPs (copies, fills) have no place on it; they are counted in the
caption and stay in the tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..core.units import fmt_pct, fmt_time, sig3
from ..reduce.opperf import ARG_KEYS, MIN_GPU_SLOWDOWN
from ..results import Results
from . import charts as ch
from .context import Context
from .escape import prose
from .page import cards, na, note, table

#: Marks on one roofline chart (the op shapes with the most GPU time); the caption says if cut.
MAX_MARKS = 400
#: Roofline charts in one report (one per distinct GPU model).
MAX_CHARTS = 4
#: Sort keys of the top-ops view: column, descending.
SORTS = {
    "lost": ("lost_ns", False),
    "time": ("gpu_ns", False),
    "count": ("count", False),
    "efficiency": ("roofline_share", True),
}
NO_SHAPES = (
    "no op has a performance model: the traces record no op shapes (profile with "
    "torch.profiler.profile(record_shapes=True))"
)


# -- shared figures ----------------------------------------------------------------------------


def ranges(values: Sequence[int] | np.ndarray) -> str:
    """Sorted ids as ranges.

    Examples
    --------
    >>> ranges([5, 0, 1, 2, 8, 7]), ranges([])
    ('0-2, 5, 7-8', 'none')
    """
    runs: list[list[int]] = []
    for v in sorted({int(v) for v in values}):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"


def totals(fam: pd.DataFrame) -> dict[str, float]:
    """Job totals from ``op_family_perf``: op time, modelled time, time under a roofline, its
    roofline time and the time lost (ns, summed over the parts)."""
    if fam is None or not len(fam):
        return {"gpu_ns": 0.0, "modelled_ns": 0.0, "roofed_ns": 0.0, "roofline_ns": 0.0, "lost_ns": 0.0}
    roof = fam["roofline_ns"].astype("Float64").to_numpy(np.float64, na_value=np.nan)
    lost = fam["lost_ns"].astype("Float64").to_numpy(np.float64, na_value=np.nan)
    known = np.isfinite(roof)
    return {
        "gpu_ns": float(fam["gpu_ns"].sum()),
        "modelled_ns": float(fam["modelled_ns"].sum()),
        "roofed_ns": float((roof[known] + lost[known]).sum()),
        "roofline_ns": float(roof[known].sum()),
        "lost_ns": float(lost[known].sum()),
    }


def device_lines(dev: pd.DataFrame | None) -> list[str]:
    """One line per (device name, matched GPU): the ranks, and the peaks used or why there are none."""
    if dev is None or not len(dev) or "gpu" not in dev.columns:
        return []
    out = []
    d = dev.assign(name=dev["name"].fillna(""), gpu=dev["gpu"].fillna(""), gpu_note=dev["gpu_note"].fillna(""))
    for (name, gpu, why), grp in d.groupby(["name", "gpu", "gpu_note"], sort=False):
        who = f"rank {ranges(grp['rank'])}" if grp["rank"].nunique() == 1 else f"ranks {ranges(grp['rank'])}"
        shown = repr(name) if name else "unnamed device"
        out.append(f"{who}: {shown} → {gpu}" if gpu else f"{who}: {shown}: no roofline ({why})")
    return out


def _modelled(op: pd.DataFrame) -> pd.DataFrame:
    return op.loc[op["modelled"].to_numpy(bool)] if len(op) else op


def shapes_by_gpu(op: pd.DataFrame) -> pd.DataFrame:
    """Modelled op shapes summed over the parts of each GPU model: count, time, FLOPs, bytes,
    achieved TFLOP/s and TB/s, intensity, the roofline time and time lost (one chart mark each)."""
    f = _modelled(op)
    if not len(f):
        return f.assign(_roof=[])
    f = f.assign(
        _roof=f["roofline_ns"].astype("Float64").to_numpy(np.float64, na_value=np.nan),
        gpu=f["gpu"].fillna(""),
    )
    g = f.groupby(["gpu", *ARG_KEYS], sort=False, dropna=False)
    out = g.agg(
        count=("count", "sum"),
        gpu_ns=("gpu_ns", "sum"),
        flops=("flops", "first"),
        bytes=("bytes", "first"),
        unit=("unit", "first"),
        precision=("precision", "first"),
        params=("params", "first"),
        bound=("bound", "first"),
        peak_tflops=("peak_tflops", "first"),
        peak_tbps=("peak_tbps", "first"),
        roofline_ns=("_roof", lambda s: s.sum(min_count=len(s))),
        ranks=("rank", "nunique"),
    ).reset_index()
    ns = out["gpu_ns"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["tflops"] = np.where(ns > 0, out["count"] * out["flops"] / ns / 1e3, np.nan)
        out["tbps"] = np.where(ns > 0, out["count"] * out["bytes"] / ns / 1e3, np.nan)
        out["intensity"] = np.where(out["bytes"] > 0, out["flops"] / out["bytes"], np.nan)
        out["roofline_share"] = np.where(ns > 0, out["roofline_ns"] / ns, np.nan)
    out["lost_ns"] = ns - out["roofline_ns"].to_numpy(np.float64)
    return out.sort_values("gpu_ns", ascending=False, kind="stable").reset_index(drop=True)


def shape_text(params: Any, shapes: Any, width: int = 48) -> str:
    """The op's arguments as shown: the model's readable parameters, else the recorded shapes."""
    s = str(params) if isinstance(params, str) and params else str(shapes or "")
    return s if len(s) <= width else s[: width - 1] + "…"


# -- the roofline chart ------------------------------------------------------------------------


def _decades(lo: float, hi: float) -> tuple[int, int]:
    a = math.floor(math.log10(lo))
    b = math.ceil(math.log10(hi))
    return (a, b) if b > a else (a, a + 1)


def _pow10(k: int) -> str:
    return f"{10.0**k:g}" if -3 <= k <= 4 else f"1e{k}"


def roofline_chart(
    chart_id: str,
    points: pd.DataFrame,
    *,
    roofs: Sequence[tuple[str, float]] = (),
    bandwidth_tbps: float | None = None,
    colors: dict[str, str] | None = None,
    width: int = 1100,
    height: int = 440,
    caption: str = "",
) -> str:
    """Achieved TFLOP/s against arithmetic intensity, both axes log10.

    ``points`` holds ``intensity`` (FLOP/byte), ``tflops``, ``gpu_ns`` (mark area), ``family``
    (colour) and ``tip`` (tooltip); ``roofs`` the compute peaks (label, TFLOP/s), drawn as
    ``min(peak, bandwidth × intensity)`` when the bandwidth (TB/s) is known.
    """
    p = points.loc[np.isfinite(points["intensity"]) & (points["intensity"] > 0) & (points["tflops"] > 0)]
    peaks = [float(v) for _, v in roofs if v and v > 0]
    bw = float(bandwidth_tbps) if bandwidth_tbps and bandwidth_tbps > 0 else None
    xs, ys = _extent(p, peaks, bw)
    if not xs or not ys:
        return ""
    xa, xb = _decades(min(xs), max(xs))
    ya, yb = _decades(min(ys), max(ys) * 1.3)
    ax = _LogAxes(70.0, width - 190.0, 12.0, height - 44.0, xa, xb, ya, yb)
    out = [ch._svg_open(width, height, chart_id), *_log_grid(ax, height)]
    out += _roof_lines(ax, roofs, bw)
    if bw:
        out += _bandwidth_label(ax, bw, peaks)
    if len(p):
        out += _op_marks(ax, p, colors or {})
    out.append("</svg>")
    legend = ch.legend_html({str(k): v for k, v in (colors or {}).items() if k in set(p["family"].astype(str))})
    return ch._figure(chart_id, "".join(out), legend, caption)


def _extent(p: pd.DataFrame, peaks: list[float], bw: float | None) -> tuple[list[float], list[float]]:
    """The intensities and throughputs the axes must hold: the marks', the peaks and, with a
    bandwidth, the roofs' ridges with room on both sides."""
    xs = list(p["intensity"].to_numpy(np.float64))
    ys = list(p["tflops"].to_numpy(np.float64))
    if bw and peaks:
        xs += [max(peaks) / bw * 4, min(peaks) / bw / 4]
    return xs, ys + peaks


@dataclass(frozen=True)
class _LogAxes:
    """The plot area (x0..x1, y0..y1 in pixels, y0 at the top) and its decades (10**xa..10**xb,
    10**ya..10**yb) of the log-log roofline chart."""

    x0: float
    x1: float
    y0: float
    y1: float
    xa: int
    xb: int
    ya: int
    yb: int

    def X(self, v: float | np.ndarray) -> Any:
        return self.x0 + (self.x1 - self.x0) * (np.log10(v) - self.xa) / (self.xb - self.xa)

    def Y(self, v: float | np.ndarray) -> Any:
        return self.y1 - (self.y1 - self.y0) * (np.log10(v) - self.ya) / (self.yb - self.ya)


def _log_grid(ax: _LogAxes, height: int) -> list[str]:
    """A grid line and label per decade on both axes, the axes and their titles."""
    x0, x1, y0, y1 = ax.x0, ax.x1, ax.y0, ax.y1
    out = []
    for k in range(ax.xa, ax.xb + 1):
        x = float(ax.X(10.0**k))
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y0}" y2="{y1}" stroke="#e6e6e6"/>'
            f'<text x="{x:.1f}" y="{y1 + 14}" text-anchor="middle" fill="#555">{_pow10(k)}</text>'
        )
    for k in range(ax.ya, ax.yb + 1):
        y = float(ax.Y(10.0**k))
        out.append(
            f'<line x1="{x0}" x2="{x1}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e6e6e6"/>'
            f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#555">{_pow10(k)}</text>'
        )
    out.append(
        f'<line x1="{x0}" x2="{x1}" y1="{y1}" y2="{y1}" stroke="#888"/>'
        f'<line x1="{x0}" x2="{x0}" y1="{y0}" y2="{y1}" stroke="#888"/>'
        f'<text x="{(x0 + x1) / 2:.0f}" y="{height - 8}" text-anchor="middle" fill="#333">'
        "arithmetic intensity (FLOP per byte moved, log)</text>"
        f'<text transform="translate(16 {(y0 + y1) / 2:.0f}) rotate(-90)" text-anchor="middle" fill="#333">'
        "achieved TFLOP/s (log)</text>"
    )
    return out


def _roof_lines(ax: _LogAxes, roofs: Sequence[tuple[str, float]], bw: float | None) -> list[str]:
    """Each compute peak as ``min(peak, bandwidth × intensity)`` (flat without a bandwidth),
    labelled at the right without overlaps; equal peaks (bf16 and fp16) drawn once, labelled
    together."""
    x_lo, x_hi = 10.0**ax.xa, 10.0**ax.xb
    y_lo = 10.0**ax.ya
    merged: dict[float, list[str]] = {}
    for label, peak in roofs:
        if peak and peak > 0:
            merged.setdefault(round(float(peak), 6), []).append(label)
    out = []
    last_y = -1e9
    for peak, labels in sorted(merged.items(), key=lambda r: -r[0]):
        label = _join_labels(labels)
        pts = []
        if bw:
            start = max(x_lo, y_lo / bw)
            ridge = peak / bw
            if ridge > start:
                pts.append((start, bw * start))
            pts.append((min(max(ridge, x_lo), x_hi), min(peak, bw * min(max(ridge, x_lo), x_hi))))
        else:
            pts.append((x_lo, peak))
        pts.append((x_hi, peak))
        path = " ".join(f"{float(ax.X(a)):.1f},{float(ax.Y(b)):.1f}" for a, b in pts)
        tip = f"{label}: {sig3(peak)} TFLOP/s" + (f"; ridge at {sig3(peak / bw)} FLOP/byte" if bw else "")
        ty = max(float(ax.Y(peak)) + 4, last_y + 12)  # labels never overlap
        last_y = ty
        out.append(
            f'<polyline class="roof" points="{path}" fill="none" stroke="#1f2d3d" stroke-width="1.6">'
            f"<title>{escape(tip)}</title></polyline>"
            f'<text x="{ax.x1 + 6}" y="{ty:.1f}" fill="#1f2d3d">{escape(label)} {sig3(peak)}</text>'
        )
    return out


def _bandwidth_label(ax: _LogAxes, bw: float, peaks: list[float]) -> list[str]:
    """``HBM x TB/s`` along the sloped roof, where it is below the peaks."""
    ang = -math.degrees(math.atan2((ax.y1 - ax.y0) / (ax.yb - ax.ya), (ax.x1 - ax.x0) / (ax.xb - ax.xa)))
    lx = max(10.0**ax.xa, 10.0**ax.ya / bw) * 3
    if not (lx < 10.0**ax.xb and peaks and bw * lx < max(peaks)):
        return []
    return [
        f'<text transform="translate({float(ax.X(lx)):.1f} {float(ax.Y(bw * lx)) - 6:.1f}) rotate({ang:.1f})" '
        f'fill="#1f2d3d">HBM {sig3(bw)} TB/s</text>'
    ]


def _op_marks(ax: _LogAxes, p: pd.DataFrame, colors: dict[str, str]) -> list[str]:
    """A circle per op, its area by its GPU time, coloured by family; small marks on top."""
    ns = p["gpu_ns"].to_numpy(np.float64)
    r = 3.0 + 11.0 * np.sqrt(ns / max(float(ns.max()), 1.0))
    order = np.argsort(-r, kind="stable")  # small marks drawn last, on top
    cx, cy = ax.X(p["intensity"].to_numpy(np.float64)), ax.Y(p["tflops"].to_numpy(np.float64))
    fam, tips = p["family"].to_numpy(object), p["tip"].to_numpy(object)
    out = []
    for i in order:
        c = colors.get(str(fam[i]), ch.PALETTE[0])
        out.append(
            f'<circle class="mark" cx="{cx[i]:.1f}" cy="{cy[i]:.1f}" r="{r[i]:.1f}" fill="{c}" '
            f'fill-opacity="0.7" stroke="{c}"><title>{escape(str(tips[i]))}</title></circle>'
        )
    return out


def _join_labels(labels: list[str]) -> str:
    """``["matrix bf16", "matrix fp16"]`` → ``matrix bf16/fp16``; different units stay apart."""
    units: dict[str, list[str]] = {}
    for lab in labels:
        unit, _, prec = lab.partition(" ")
        units.setdefault(unit, []).append(prec)
    return ", ".join(f"{u} {'/'.join(p for p in ps if p)}".strip() for u, ps in units.items())


def family_colors(families: Sequence[str]) -> dict[str, str]:
    """One colour per op family, the same in every chart: a family named like a kernel class
    (``gemm``, ``attention``, ``elementwise``, ...) has that class's colour (:func:`charts.class_colors`)."""
    return ch.class_colors(sorted({str(x) for x in families}))


def _tip(r: Any) -> str:
    lost = "–" if not np.isfinite(r.lost_ns) else fmt_time(float(r.lost_ns))
    pct = fmt_pct(float(r.roofline_share)) if np.isfinite(r.roofline_share) else "–"
    return (
        f"{r.op} [{r.precision}] {shape_text(r.params, r.shapes, 120)}\n"
        f"{int(r.count):,} calls on {int(r.ranks)} GPU(s), {fmt_time(float(r.gpu_ns))}\n"
        f"{sig3(float(r.tflops))} TFLOP/s · {sig3(float(r.tbps))} TB/s · {sig3(float(r.intensity))} FLOP/byte\n"
        f"{r.bound or 'no'} bound · {pct} of the roofline · {lost} lost"
    )


# -- the report section ------------------------------------------------------------------------


def section_perf(ctx: Context) -> str:
    """Op performance: the GPUs and peaks, key figures, the roofline chart, time lost per op
    shape and per family, slow GPUs."""
    op, msg = ctx.get("op_perf", ("rank", "device", "op", "modelled", "gpu_ns", "flops", "bytes"))
    if op is None:
        return msg
    dev, _ = ctx.get("devices", ("rank", "device", "name", "gpu", "gpu_note"))
    fam, _ = ctx.get("op_family_perf", ("family", "gpu_ns", "modelled_ns", "roofline_ns", "lost_ns"))
    html = [
        note(
            "Every op instance's GPU time is the union of the kernels it launched (the outermost op with a "
            "model owns them, so nothing counts twice); its FLOPs and bytes come from the shapes and dtypes "
            "the profiler recorded (record_shapes=True). Roofline time = max(FLOPs / the device's peak for "
            "the op's unit and precision, bytes / HBM bandwidth); time lost = GPU time − roofline time, "
            "the time a kernel at the hardware's limit would save (docs/semantics.md, 'Op performance model')."
        )
    ]
    lines = device_lines(dev)
    if lines:
        html.append(note("GPUs: " + "; ".join(lines) + "."))
    t = totals(fam)
    n = ctx.n_parts
    if not t["modelled_ns"]:
        html.append(na("op_perf", NO_SHAPES))
        return "".join(html)
    items: list = [
        ("op GPU time / GPU", fmt_time(t["gpu_ns"] / n)),
        ("modelled", fmt_pct(t["modelled_ns"] / t["gpu_ns"]) if t["gpu_ns"] else "–"),
        ("no model", fmt_pct(1 - t["modelled_ns"] / t["gpu_ns"]) if t["gpu_ns"] else "–"),
    ]
    if t["roofed_ns"]:
        items.append(("of the roofline (time-weighted)", fmt_pct(t["roofline_ns"] / t["roofed_ns"])))
        items.append(("time lost / GPU", fmt_time(t["lost_ns"] / n), False))
    slow, _ = ctx.get("gpu_slowness", ("rank", "device", "gpu_slowdown"))
    if slow is not None and len(slow) > 1:
        top = slow.sort_values("gpu_slowdown", ascending=False, kind="stable").iloc[0]
        items.append(
            (
                "slowest GPU at equal shapes",
                f"{float(top['gpu_slowdown']):.3f}×",
                float(top["gpu_slowdown"]) >= MIN_GPU_SLOWDOWN,
                ctx.label(int(top["rank"]), int(top["device"])),
            )
        )
    html.append(cards(items))
    html.append(_charts(ctx, op))
    xr, _ = ctx.get("op_perf_xrank", ("op", "gpu_ns", "lost_ns"))
    if xr is not None:
        html.append(_lost_table(ctx, xr))
    if fam is not None:
        html.append(_family_table(fam, n))
    if slow is not None and len(slow) > 1:
        html.append(_slow_table(ctx, slow))
    peaks, _ = ctx.get("gpu_peaks", ("gpu", "metric", "value", "unit", "source"))
    if peaks is not None:
        html.append(_peaks_details(peaks))
    return "".join(html)


def _charts(ctx: Context, op: pd.DataFrame) -> str:
    shapes = shapes_by_gpu(op)
    if not len(shapes):
        return ""
    colors = family_colors(shapes["family"])
    out = []
    gpus = shapes.groupby("gpu", sort=False)["gpu_ns"].sum().sort_values(ascending=False)
    for i, gpu in enumerate(gpus.index[:MAX_CHARTS]):
        s = shapes.loc[shapes["gpu"] == gpu]
        drawn = s.loc[(s["flops"] > 0) & (s["bytes"] > 0)]
        cut = len(drawn) > MAX_MARKS
        drawn = drawn.head(MAX_MARKS)
        roofs, bw = _roofs_of(drawn) if gpu else ([], None)
        pts = drawn.assign(tip=[_tip(r) for r in drawn.itertuples(index=False)])
        no_flops = int((s["flops"].fillna(0) <= 0).sum())
        cap = [
            f"{len(drawn)} op shape(s) on {gpu or 'an unknown device'}"
            + (f" (the {MAX_MARKS} with the most GPU time)" if cut else "")
            + "; mark area ∝ GPU time; lines: the compute roof per unit and precision, the HBM roof slanted"
        ]
        if no_flops:
            cap.append(f"{no_flops} shape(s) without FLOPs (copies, fills) are in the tables, not on the chart")
        head = f"<h3>Roofline: {escape(gpu)}</h3>" if gpu else "<h3>Achieved throughput (no roofline)</h3>"
        body = roofline_chart(
            f"roofline-{i}", pts, roofs=roofs, bandwidth_tbps=bw, colors=colors, caption="; ".join(cap) + "."
        )
        if not gpu:
            body = _no_roofline(ctx) + body
        out.append(head + body)
    if len(gpus) > MAX_CHARTS:
        out.append(note(f"{len(gpus) - MAX_CHARTS} more GPU model(s) not drawn; see the tables."))
    return "".join(out)


def _roofs_of(drawn: pd.DataFrame) -> tuple[list[tuple[str, float]], float | None]:
    """The compute peaks (``unit precision``, TFLOP/s) of the units and precisions drawn, and the
    memory bandwidth (TB/s; ``None``: unknown)."""
    used = drawn.drop_duplicates(["unit", "precision"])
    roofs = [
        (f"{u} {pr}", float(pk))
        for u, pr, pk in zip(used["unit"], used["precision"], used["peak_tflops"])
        if np.isfinite(pk) and pk > 0
    ]
    bws = drawn["peak_tbps"].dropna()
    return roofs, float(bws.iloc[0]) if len(bws) else None


def _no_roofline(ctx: Context) -> str:
    """Why a GPU has no roofline: the devices' notes, or no devices table."""
    dev, _ = ctx.get("devices", ("gpu_note",))
    why = sorted({w for w in (dev["gpu_note"] if dev is not None else []) if w}) or [
        "the results have no devices table"
    ]
    return na("gpu_peaks", "no roofline: " + "; ".join(why))


def _lost_table(ctx: Context, xr: pd.DataFrame, rows: int = 30) -> str:
    v = _modelled(xr).copy()
    if not len(v):
        return ""
    v["shape"] = [shape_text(p, s, 60) for p, s in zip(v["params"], v["shapes"])]
    v["slowest"] = ctx.labels(v.rename(columns={"max_rank": "rank", "max_device": "device"}))
    v["calls_gpu"] = v["count"] / ctx.n_parts
    v["gpu_gpu"] = v["gpu_ns"] / ctx.n_parts
    v["lost_gpu"] = v["lost_ns"].astype("Float64").to_numpy(np.float64, na_value=np.nan) / ctx.n_parts
    v["roof_gpu"] = v["roofline_ns"].astype("Float64").to_numpy(np.float64, na_value=np.nan) / ctx.n_parts
    v = v.sort_values(["lost_gpu", "gpu_gpu"], ascending=False, kind="stable", na_position="last")
    return (
        f"<h3>Time lost against the roofline (top {min(rows, len(v))} of {len(v)} op shapes)</h3>"
        + note(
            "Per GPU (summed over GPUs / GPUs). Spread: the slowest GPU's median instance time over the median "
            "GPU's, for the same op and arguments."
        )
        + table(
            v.head(rows),
            [
                ("op", "op", "name"),
                ("shape", "arguments", "name"),
                ("precision", "dtype", "text"),
                ("lost_gpu", "time lost / GPU", "time"),
                ("gpu_gpu", "GPU time / GPU", "time"),
                ("roofline_share", "of roofline", "pct"),
                ("bound", "bound", "text"),
                ("tflops", "TFLOP/s", "num"),
                ("tbps", "TB/s", "num"),
                ("intensity", "FLOP/byte", "num"),
                ("calls_gpu", "calls / GPU", "num"),
                ("roof_gpu", "roofline time", "time"),
                ("spread", "spread", "ratio"),
                ("slowest", "slowest", "text"),
            ],
            table_id="perf-lost",
        )
    )


def family_totals(fam: pd.DataFrame) -> pd.DataFrame:
    """``op_family_perf`` summed over the parts, per family (``unmodelled`` last)."""
    f = fam.assign(
        _roof=fam["roofline_ns"].astype("Float64").to_numpy(np.float64, na_value=np.nan),
        _lost=fam["lost_ns"].astype("Float64").to_numpy(np.float64, na_value=np.nan),
    )
    g = f.groupby("family", sort=True)
    out = g.agg(
        ops=("ops", "max"),
        count=("count", "sum"),
        gpu_ns=("gpu_ns", "sum"),
        modelled_ns=("modelled_ns", "sum"),
        flops=("flops", "sum"),
        bytes=("bytes", "sum"),
        roofline_ns=("_roof", lambda x: x.sum(min_count=1)),
        lost_ns=("_lost", lambda x: x.sum(min_count=1)),
    ).reset_index()
    total = float(out["gpu_ns"].sum()) or 1.0
    mod = out["modelled_ns"].to_numpy(np.float64)
    roofed = out["roofline_ns"].to_numpy(np.float64) + out["lost_ns"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["share"] = out["gpu_ns"] / total
        out["modelled_share"] = np.where(out["gpu_ns"] > 0, mod / out["gpu_ns"], np.nan)
        out["tflops"] = np.where(mod > 0, out["flops"] / mod / 1e3, np.nan)
        out["tbps"] = np.where(mod > 0, out["bytes"] / mod / 1e3, np.nan)
        out["roofline_share"] = np.where(roofed > 0, out["roofline_ns"] / roofed, np.nan)
    none = out["family"] == "unmodelled"
    out.loc[none, ["roofline_ns", "lost_ns"]] = np.nan
    return pd.concat([out.loc[~none].sort_values("gpu_ns", ascending=False), out.loc[none]]).reset_index(drop=True)


def _family_table(fam: pd.DataFrame, n: int) -> str:
    v = family_totals(fam)
    for c in ("gpu_ns", "roofline_ns", "lost_ns"):
        v[c] = v[c] / n
    v["family"] = v["family"].replace({"unmodelled": "no model"})
    return (
        "<h3>Per op family</h3>"
        + note("Per GPU. 'no model': ops without a performance model (their GPU time, no FLOPs).")
        + table(
            v,
            [
                ("family", "family", "text"),
                ("share", "of op time", "pct"),
                ("gpu_ns", "GPU time / GPU", "time"),
                ("modelled_share", "with a model", "pct"),
                ("tflops", "TFLOP/s", "num"),
                ("tbps", "TB/s", "num"),
                ("roofline_ns", "roofline time", "time"),
                ("roofline_share", "of roofline", "pct"),
                ("lost_ns", "time lost / GPU", "time"),
            ],
            table_id="perf-families",
        )
    )


def _slow_table(ctx: Context, slow: pd.DataFrame, rows: int = 10) -> str:
    v = slow.sort_values("gpu_slowdown", ascending=False, kind="stable").head(rows).copy()
    v["gpu_label"] = ctx.labels(v)
    sg, _ = ctx.get("stragglers", ("rank", "signals"))
    e = set()
    if sg is not None:
        e = set(sg.loc[sg["signals"].fillna("").str.contains("e"), "rank"].astype(int).tolist())
    return (
        f"<h3>Slow GPUs at equal op shapes (signal e; top {len(v)} of {len(slow)})</h3>"
        + note(
            "Each GPU's median instance time per (op, arguments) against the median GPU's, weighted by time; "
            f"flagged (signal e) from {MIN_GPU_SLOWDOWN:.2f}× with a high robust z-score and most of the "
            "compared time slower. Waiting for other ranks is not in an op's kernel time."
        )
        + table(
            v,
            [
                ("gpu_label", "GPU", "text"),
                ("gpu_slowdown", "slowdown", "ratio"),
                ("gpu_slowdown_z", "z", "z"),
                ("slower_share", "compared time slower", "pct"),
                ("shapes", "op shapes compared", "num"),
                ("compared_ns", "compared time", "time"),
                ("worst_op", "most time lost in", "name"),
                ("worst_ratio", "there", "ratio"),
                ("worst_excess_ns", "excess", "time"),
            ],
            flag=[int(r) in e for r in v["rank"]],
            table_id="perf-slow",
        )
    )


def _peaks_details(peaks: pd.DataFrame) -> str:
    if not len(peaks):
        return ""
    return (
        "<details><summary>GPU peaks used (with sources)</summary>"
        + table(
            peaks,
            [
                ("gpu", "GPU", "text"),
                ("metric", "metric", "text"),
                ("value", "value", "num"),
                ("unit", "unit", "text"),
                ("origin", "from", "text"),
                ("source", "source", "text"),
            ],
        )
        + "</details>"
    )


# -- terminal: dtrace perf and the analyze summary ---------------------------------------------


def top_ops(tables: dict[str, pd.DataFrame], *, rank: int | None, family: str | None, sort: str) -> pd.DataFrame:
    """The op shapes of the job (``op_perf_xrank``) or of one rank (``op_perf``), modelled ones
    only, sorted by :data:`SORTS` ``[sort]``, with the raw columns of the table."""
    col, asc = SORTS[sort]
    df = tables["op_perf"] if rank is not None else tables["op_perf_xrank"]
    if rank is not None:
        df = df.loc[df["rank"].to_numpy() == rank]
    df = _modelled(df)
    if family is not None:
        df = df.loc[df["family"].to_numpy() == family]
    key = df[col].astype("Float64") if col in ("lost_ns",) else df[col]
    return df.iloc[np.argsort(key.to_numpy(np.float64, na_value=np.nan) * (1 if asc else -1), kind="stable")]


def human_ops(df: pd.DataFrame, across: bool) -> pd.DataFrame:
    """The columns a person reads, in that order (times stay ``*_ns`` for :func:`render`)."""
    out = pd.DataFrame(
        {
            "op": df["op"].to_numpy(),
            "arguments": [shape_text(p, s) for p, s in zip(df["params"], df["shapes"])],
            "dtype": df["precision"].to_numpy(),
            "lost_ns": df["lost_ns"].to_numpy(),
            "roofline (%)": (df["roofline_share"].to_numpy(np.float64) * 100).round(1),
            "bound": df["bound"].to_numpy(),
            "count": df["count"].to_numpy(),
            "gpu_ns": df["gpu_ns"].to_numpy(),
            "TFLOP/s": df["tflops"].to_numpy(np.float64).round(2),
            "TB/s": df["tbps"].to_numpy(np.float64).round(3),
            "FLOP/B": df["intensity"].to_numpy(np.float64).round(1),
        }
    )
    if across and len(df) and int(df["parts"].max()) > 1:
        out["spread"] = df["spread"].to_numpy(np.float64).round(3)
        out["slowest"] = df["max_rank"].to_numpy()
    if "phase" in df.columns and (df["phase"].fillna("") != "").any():  # a serving trace: prefill, decode, mixed
        out.insert(1, "phase", df["phase"].fillna("").to_numpy(object))
    return out


def perf_lines(tables: dict[str, pd.DataFrame], n_parts: int) -> list[str]:
    """The headline of ``dtrace perf``: the GPUs, the modelled share, roofline and time lost."""
    lines = device_lines(tables.get("devices"))
    fam = tables.get("op_family_perf")
    t = totals(fam) if fam is not None else totals(pd.DataFrame())
    if not t["modelled_ns"]:
        return [*lines, NO_SHAPES]
    n = max(n_parts, 1)
    head = (
        f"op GPU time {fmt_time(t['gpu_ns'] / n)} per GPU over {n} GPU(s): "
        f"{fmt_pct(t['modelled_ns'] / t['gpu_ns'])} in modelled ops, "
        f"{fmt_pct(1 - t['modelled_ns'] / t['gpu_ns'])} without a model"
    )
    if t["roofed_ns"]:
        head += (
            f"; at {fmt_pct(t['roofline_ns'] / t['roofed_ns'])} of the roofline, "
            f"{fmt_time(t['lost_ns'] / n)} per GPU lost against it"
        )
    out = [*lines, head, *_above_peak_lines(tables.get("op_perf_xrank"))]
    slow = tables.get("gpu_slowness")
    if slow is not None and len(slow) > 1:
        s = slow.loc[slow["gpu_slowdown"] >= MIN_GPU_SLOWDOWN].sort_values("gpu_slowdown", ascending=False)
        for r in s.head(5).itertuples(index=False):
            out.append(
                f"slow GPU: rank {r.rank} device {r.device} runs its modelled ops {r.gpu_slowdown:.3f}× the median "
                f"rank's time at equal shapes (z {r.gpu_slowdown_z:+.1f}; most lost in {r.worst_op}, "
                f"{r.worst_ratio:.2f}×)"
            )
    return out


def _above_peak_lines(x: pd.DataFrame | None) -> list[str]:
    """A warning for the op shapes that ran faster than the roofline allows (peaks or timing suspect)."""
    if x is None or not len(x) or "above_peak" not in x.columns:
        return []
    above = x.loc[x["above_peak"].astype(bool).to_numpy()]
    if not len(above):
        return []
    worst = above.sort_values("roofline_share", ascending=False).iloc[0]
    return [
        f"above the peak: {len(above)} op shape(s) ran faster than the roofline allows (the peak table is low for "
        f"this GPU, or the timing is off; they lose no time), e.g. {worst['op']} at "
        f"{100 * float(worst['roofline_share']):.1f} % of the roofline ({float(worst['tbps']):.3g} TB/s, "
        f"{float(worst['tflops']):.3g} TFLOP/s)"
    ]


def perf_summary_section(results: Results, fmt: str = "table") -> str:
    """Two lines for the ``dtrace analyze`` summary (nothing when no op has a model)."""
    names = set(results.table_names)
    if "op_family_perf" not in names:
        return ""
    fam = results.table("op_family_perf")
    if not len(fam) or not fam["modelled_ns"].sum():
        return ""
    tables = {"op_family_perf": fam}
    if "devices" in names:
        tables["devices"] = results.table("devices")
    n = len(fam[["rank", "device"]].drop_duplicates())
    lines = perf_lines(tables, n)
    xr = results.table("op_perf_xrank") if "op_perf_xrank" in names else None
    if xr is not None and len(xr) and xr["lost_ns"].notna().any():
        top = xr.loc[xr["modelled"].to_numpy(bool)].iloc[0]
        lines.append(
            f"most time lost: {top['op']} {shape_text(top['params'], top['shapes'])} "
            f"({fmt_time(float(top['lost_ns']))} over {int(top['parts'])} GPU(s)); dtrace perf OUT for the table"
        )
    return prose("op performance:\n  " + "\n  ".join(lines), fmt) + "\n"
