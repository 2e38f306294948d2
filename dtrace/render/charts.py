"""Inline SVG charts for the HTML reports: pure functions, numbers in, an SVG string out.

No plotting library and no script: every chart is a ``<figure class="chart"
data-chart="ID">`` holding one ``<svg>``, with a ``<title>`` tooltip on every mark, so a
report opens offline in any browser and prints as it looks. Times arrive in integer ns; the
unit of an axis is chosen here from its largest value (:func:`time_unit`).

Large inputs are the caller's job to aggregate (a heatmap takes at most a few hundred rows;
the HTML report buckets ranks before calling it), so every chart stays a few thousand
elements at most.
"""

from __future__ import annotations

import math
from html import escape
from typing import Callable, Mapping, Sequence

import numpy as np

from ..core.units import fmt_bytes, fmt_num, fmt_pct, fmt_time, sig3, time_unit  # noqa: F401 - charts' formatters
from .text import distinct_names

#: Colours of the breakdown components, used by every report.
BREAKDOWN_COLORS = {
    "computation": "#4e79a7",
    "exposed comm": "#e15759",
    "exposed memcpy": "#f28e2b",
    "idle": "#c9c3bd",
    "non-GPU": "#9c755f",
}
#: Categorical palette (Tableau 10, then muted variants) for classes, categories and causes.
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
    "#86bcb6",
    "#d37295",
    "#a0cbe8",
    "#ffbe7d",
    "#8cd17d",
    "#f1ce63",
)
#: Fixed colours of the built-in kernel classes and of the GPU categories (``compute``, ``comm``,
#: ``memcpy``, ``memset``): a class has its colour in every chart of every report and comparison.
CLASS_COLORS = {
    "gemm": "#4e79a7",
    "attention": "#f28e2b",
    "nccl_allreduce": "#e15759",
    "nccl_allgather": "#ff9da7",
    "nccl_reducescatter": "#d37295",
    "nccl_sendrecv": "#b07aa1",
    "nccl_broadcast": "#a0cbe8",
    "nccl_other": "#86bcb6",
    "triton": "#76b7b2",
    "normalization": "#59a14f",
    "reduction": "#edc948",
    "elementwise": "#8cd17d",
    "memcpy": "#499894",
    "memset": "#ffbe7d",
    "other": "#bab0ac",
    "compute": "#4e79a7",
    "comm": "#e15759",
}
#: The colour of a pooled rest (``(other classes)``, ``(other categories)``).
REST_COLOR = "#d0d0d0"


def class_colors(names: Sequence[str], avoid: Sequence[str] = ()) -> dict[str, str]:
    """One colour per class (or category) name, for every chart of a document.

    Built-in classes and the GPU categories keep their fixed colours (:data:`CLASS_COLORS`);
    a pooled rest (a name in parentheses) is grey. Any other name (a class map's class) starts
    at a palette colour picked by its name — the same in every report — and moves to the next
    colour not yet taken by an earlier name of ``names`` (nor by ``avoid``), so no two names of
    the document share one.

    Examples
    --------
    >>> c = class_colors(["elementwise", "my_gemm", "gemm", "(other classes)"])
    >>> c["gemm"], c["elementwise"], c["(other classes)"], c["my_gemm"] not in (c["gemm"], c["elementwise"])
    ('#4e79a7', '#8cd17d', '#d0d0d0', True)
    """
    import zlib

    order = list(dict.fromkeys(str(n) for n in names))
    out = {n: CLASS_COLORS[n] for n in order if n in CLASS_COLORS}
    out.update({n: REST_COLOR for n in order if n.startswith("(")})
    taken = set(out.values()) | set(avoid)
    for n in order:
        if n in out:
            continue
        start = zlib.crc32(n.encode("utf-8", "surrogatepass")) % len(PALETTE)
        free = [PALETTE[(start + k) % len(PALETTE)] for k in range(len(PALETTE))]
        out[n] = next((c for c in free if c not in taken), free[0])
        taken.add(out[n])
    return out


#: Sequential colour scale of the heatmaps (viridis stops, low → high).
_SEQ = ((0.0, (68, 1, 84)), (0.25, (59, 82, 139)), (0.5, (33, 145, 140)), (0.75, (94, 201, 98)), (1.0, (253, 231, 37)))

FONT = "font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;font-size:11px"


def nice_ticks(vmax: float, n: int = 5) -> np.ndarray:
    """Tick positions 0 … ≥ ``vmax`` on a 1-2-5 grid (about ``n`` of them).

    Examples
    --------
    >>> nice_ticks(97).tolist()
    [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
    """
    if not np.isfinite(vmax) or vmax <= 0:
        return np.array([0.0, 1.0])
    raw = vmax / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    top = math.ceil(vmax / step - 1e-9) * step
    return np.round(np.arange(0.0, top + step / 2, step), 12)


def color_scale(t: np.ndarray) -> list[str]:
    """Map values in [0, 1] (NaN → grey) to colours of the sequential scale."""
    t = np.asarray(t, dtype=np.float64)
    xs = np.array([s[0] for s in _SEQ])
    rgb = np.array([s[1] for s in _SEQ], dtype=np.float64)
    tt = np.clip(np.nan_to_num(t, nan=0.0), 0.0, 1.0)
    chan = [np.interp(tt, xs, rgb[:, k]).round().astype(int) for k in range(3)]
    out = [f"#{r:02x}{g:02x}{b:02x}" for r, g, b in zip(*chan)]
    return ["#eeeeee" if np.isnan(v) else c for v, c in zip(t, out)]


def _figure(chart_id: str, svg: str, legend: str = "", caption: str = "") -> str:
    cap = f"<figcaption>{escape(caption)}</figcaption>" if caption else ""
    return f'<figure class="chart" data-chart="{escape(chart_id)}">{legend}{svg}{cap}</figure>'


def legend_html(items: Mapping[str, str]) -> str:
    """A row of colour swatches (HTML, not SVG, so it wraps)."""
    spans = "".join(f'<span class="key"><i style="background:{c}"></i>{escape(k)}</span>' for k, c in items.items())
    return f'<div class="legend">{spans}</div>'


def _svg_open(w: float, h: float, label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h:.0f}" '
        f'viewBox="0 0 {w:.0f} {h:.0f}" role="img" aria-label="{escape(label)}" style="{FONT}">'
    )


def _x_axis(x0: float, x1: float, y: float, vmax: float, fmt: Callable[[float], str], grid_top: float) -> str:
    ticks = nice_ticks(vmax)
    top = float(ticks[-1]) or 1.0
    parts = [f'<line x1="{x0}" x2="{x1}" y1="{y}" y2="{y}" stroke="#888"/>']
    for t in ticks:
        x = x0 + (x1 - x0) * float(t) / top
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{grid_top}" y2="{y}" stroke="#e6e6e6"/>')
        lab = "0" if t == 0 else fmt(float(t))
        parts.append(f'<text x="{x:.1f}" y="{y + 13}" text-anchor="middle" fill="#555">{escape(lab)}</text>')
    return "".join(parts)


def stacked_hbars(
    chart_id: str,
    labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    colors: Mapping[str, str],
    *,
    value_fmt: Callable[[float], str] = fmt_time,
    width: int = 1100,
    bar_height: int = 16,
    label_width: int = 150,
    highlight: Sequence[bool] | None = None,
    caption: str = "",
) -> str:
    """Horizontal stacked bars, one per label, one segment per series (values ≥ 0).

    Every segment carries a tooltip ``label · series: value (share of the bar)``; a
    highlighted label is drawn bold with a marker. Rows with a zero total draw no segment.
    """
    labels = [str(x) for x in labels]
    names = list(series)
    vals = np.array([np.asarray(series[k], dtype=np.float64) for k in names]).reshape(len(names), len(labels))
    vals = np.clip(np.nan_to_num(vals), 0.0, None)
    totals = vals.sum(axis=0)
    vmax = float(totals.max()) if totals.size else 0.0
    top = float(nice_ticks(vmax)[-1]) or 1.0
    x0, x1 = label_width, width - 20
    gap = 4
    h = 10 + len(labels) * (bar_height + gap) + 24
    scale = (x1 - x0) / top
    out = [_svg_open(width, h, chart_id)]
    axis_y = 10 + len(labels) * (bar_height + gap)
    out.append(_x_axis(x0, x1, axis_y, vmax, value_fmt, 4))
    hl = list(highlight) if highlight is not None else [False] * len(labels)
    for i, lab in enumerate(labels):
        y = 10 + i * (bar_height + gap)
        weight = ' font-weight="bold"' if hl[i] else ""
        mark = "⚑ " if hl[i] else ""
        out.append(
            f'<text x="{x0 - 6}" y="{y + bar_height * 0.75:.1f}" text-anchor="end"{weight}>{escape(mark + lab)}</text>'
        )
        x = float(x0)
        for k, name in enumerate(names):
            v = vals[k, i]
            if v <= 0:
                continue
            w = v * scale
            share = v / totals[i] if totals[i] else 0.0
            out.append(
                f'<rect class="mark" x="{x:.2f}" y="{y}" width="{max(w, 0.5):.2f}" height="{bar_height}" '
                f'fill="{colors.get(name, "#999")}"><title>{escape(lab)} · {escape(name)}: '
                f"{escape(value_fmt(v))} ({fmt_pct(share)})</title></rect>"
            )
            x += w
    out.append("</svg>")
    return _figure(chart_id, "".join(out), legend_html({n: colors.get(n, "#999") for n in names}), caption)


def hbars(
    chart_id: str,
    labels: Sequence[str],
    values: Sequence[float],
    *,
    colors: Sequence[str] | str = PALETTE[0],
    value_fmt: Callable[[float], str] = fmt_time,
    inner: Sequence[float] | None = None,
    width: int = 1100,
    bar_height: int = 15,
    label_width: int = 330,
    tooltips: Sequence[str] | None = None,
    legend: Mapping[str, str] | None = None,
    highlight: Sequence[bool] | None = None,
    caption: str = "",
) -> str:
    """Horizontal bars (values ≥ 0) with the value printed after each bar.

    ``inner`` draws a second, darker bar inside each one (e.g. an op's direct GPU time inside
    its subtree time). ``tooltips`` replaces the default ``label: value`` tooltip; a
    highlighted label is drawn bold with a marker.
    """
    labels = [str(x) for x in labels]
    v = np.clip(np.nan_to_num(np.asarray(values, dtype=np.float64)), 0.0, None)
    cols = [colors] * len(labels) if isinstance(colors, str) else list(colors)
    vmax = float(v.max()) if v.size else 0.0
    top = float(nice_ticks(vmax)[-1]) or 1.0
    x0, x1 = label_width, width - 70
    gap = 4
    axis_y = 10 + len(labels) * (bar_height + gap)
    h = axis_y + 24
    scale = (x1 - x0) / top
    out = [_svg_open(width, h, chart_id), _x_axis(x0, x1, axis_y, vmax, value_fmt, 4)]
    shorts = distinct_names(labels, max(int((label_width - 10) / 6.6), 8))  # the labels that fit, distinct
    for i, (lab, short) in enumerate(zip(labels, shorts)):
        y = 10 + i * (bar_height + gap)
        tip = tooltips[i] if tooltips is not None else f"{lab}: {value_fmt(v[i])}"
        hl = highlight is not None and bool(highlight[i])
        weight = ' font-weight="bold"' if hl else ""
        out.append(
            f'<text x="{x0 - 6}" y="{y + bar_height * 0.75:.1f}" text-anchor="end"{weight}>'
            f"<title>{escape(lab)}</title>{'⚑ ' if hl else ''}{escape(short)}</text>"
        )
        w = max(v[i] * scale, 0.5)
        out.append(
            f'<rect class="mark" x="{x0}" y="{y}" width="{w:.2f}" height="{bar_height}" '
            f'fill="{cols[i % len(cols)]}"><title>{escape(tip)}</title></rect>'
        )
        if inner is not None:
            wi = max(float(np.nan_to_num(inner[i])) * scale, 0.0)
            out.append(
                f'<rect x="{x0}" y="{y + bar_height * 0.3:.1f}" width="{wi:.2f}" '
                f'height="{bar_height * 0.4:.1f}" fill="#1f3552" opacity="0.55"/>'
            )
        out.append(
            f'<text x="{x0 + w + 4:.1f}" y="{y + bar_height * 0.75:.1f}" fill="#333">{escape(value_fmt(v[i]))}</text>'
        )
    out.append("</svg>")
    return _figure(chart_id, "".join(out), legend_html(legend) if legend else "", caption)


def heatmap(
    chart_id: str,
    matrix: np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    *,
    value_fmt: Callable[[float], str] = fmt_time,
    tooltips: Sequence[Sequence[str]] | None = None,
    width: int = 1100,
    max_cell_h: int = 18,
    label_width: int = 110,
    caption: str = "",
    vrange: tuple[float, float] | None = None,
    mark_rows: Sequence[bool] | None = None,
) -> str:
    """A heatmap of ``matrix`` (rows × columns, NaN = no data) on a sequential scale
    (viridis: dark purple = low, yellow = high).

    Cells are sized to fit ``width``; row labels are thinned to stay readable, except the rows
    of ``mark_rows`` (flagged stragglers), which are always labelled, bold, with a ⚑. The colour
    scale spans the data's range, or ``vrange`` (values outside it take the end colours). A
    legend bar shows the range and which end is dark.
    """
    m = np.asarray(matrix, dtype=np.float64)
    n_r, n_c = m.shape
    lo, hi = _scale_range(m, vrange)
    span = hi - lo
    t = (m - lo) / span if span > 0 else np.where(np.isfinite(m), 0.5, np.nan)
    cw = max((width - label_width - 20) / max(n_c, 1), 2.0)
    ch = float(min(max_cell_h, max(3.0, 700.0 / max(n_r, 1))))
    top = 24.0
    h = top + n_r * ch + 44
    out = [_svg_open(width, h, chart_id)]
    row_every = max(1, math.ceil(11.0 / ch))
    out += _column_labels(col_labels, label_width, cw, top)
    colors = color_scale(t.ravel())
    marked = np.array(list(mark_rows) if mark_rows is not None else [False] * n_r, dtype=bool)
    near = np.zeros(n_r, dtype=bool)  # grid labels give way to the marked rows' labels
    for r in np.flatnonzero(marked).tolist():
        near[max(0, r - row_every + 1) : r + row_every] = True
    for i in range(n_r):
        y = top + i * ch
        if marked[i] or (i % row_every == 0 and not near[i]):
            out.append(_row_label(str(row_labels[i]), label_width, y + ch / 2 + 4, bool(marked[i])))
        for j in range(n_c):
            val = m[i, j]
            tip = (
                tooltips[i][j]
                if tooltips is not None
                else f"{row_labels[i]} · {col_labels[j]}: {value_fmt(val) if np.isfinite(val) else 'no data'}"
            )
            out.append(
                f'<rect class="mark" x="{label_width + j * cw:.2f}" y="{y:.2f}" width="{cw + 0.3:.2f}" '
                f'height="{ch + 0.3:.2f}" fill="{colors[i * n_c + j]}"><title>{escape(tip)}</title></rect>'
            )
    # legend: gradient bar with min and max
    out += _scale_legend(
        chart_id, label_width, top + n_r * ch + 14, value_fmt(lo), value_fmt(hi), bool(np.isnan(m).any())
    )
    out.append("</svg>")
    return _figure(chart_id, "".join(out), "", caption)


def _bin_mark(xa: float, xb: float, y: float, tip: str) -> str:
    """A bin's invisible hover target holding its tooltip."""
    return (
        f'<rect class="mark" x="{xa:.1f}" y="{y - 3:.1f}" width="{max(xb - xa, 1):.1f}" height="6" '
        f'fill="transparent"><title>{escape(tip)}</title></rect>'
    )


def _scale_range(m: np.ndarray, vrange: tuple[float, float] | None) -> tuple[float, float]:
    """The colour scale's ends: ``vrange``, else the finite values' range (0, 0 if none)."""
    if vrange is not None:
        return float(vrange[0]), float(vrange[1])
    finite = m[np.isfinite(m)]
    return (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)


def _column_labels(col_labels: Sequence[str], label_width: int, cw: float, top: float) -> list[str]:
    """The column labels over the cells, thinned so that they do not overlap."""
    longest = max((len(str(c)) for c in col_labels), default=1)
    col_every = max(1, math.ceil((longest * 6.5 + 10) / cw))
    return [
        f'<text x="{label_width + (j + 0.5) * cw:.1f}" y="{top - 6}" text-anchor="middle" '
        f'fill="#555">{escape(str(lab))}</text>'
        for j, lab in enumerate(col_labels)
        if j % col_every == 0
    ]


def _row_label(label: str, label_width: int, y: float, marked: bool) -> str:
    """A row's label; a marked row's in bold red with a ⚑."""
    if marked:
        return (
            f'<text x="{label_width - 6}" y="{y:.1f}" text-anchor="end" font-weight="bold" '
            f'fill="#b3272a">⚑ {escape(label)}</text>'
        )
    return f'<text x="{label_width - 6}" y="{y:.1f}" text-anchor="end">{escape(label)}</text>'


def _scale_legend(chart_id: str, label_width: int, ly: float, lo: str, hi: str, no_data: bool) -> list[str]:
    """The gradient bar with the scale's ends, and the no-data swatch when a cell has none."""
    gid = f"g-{chart_id}"
    stops = "".join(
        f'<stop offset="{p}" stop-color="{c}"/>'
        for p, c in zip((0, 0.25, 0.5, 0.75, 1), color_scale(np.array([0, 0.25, 0.5, 0.75, 1])))
    )
    out = [
        f'<defs><linearGradient id="{escape(gid)}">{stops}</linearGradient></defs>',
        f'<rect x="{label_width}" y="{ly}" width="220" height="10" fill="url(#{escape(gid)})"/>',
        f'<text x="{label_width - 6}" y="{ly + 9}" text-anchor="end">{escape(lo)} (dark)</text>',
        f'<text x="{label_width + 226}" y="{ly + 9}">{escape(hi)} (yellow)</text>',
    ]
    if no_data:
        out.append(
            f'<rect x="{label_width + 380}" y="{ly}" width="14" height="10" fill="#eeeeee" stroke="#ccc"/>'
            f'<text x="{label_width + 400}" y="{ly + 9}">no data (not in this step or collective)</text>'
        )
    return out


def histogram(
    chart_id: str,
    lo: Sequence[float] | np.ndarray,
    hi: Sequence[float] | np.ndarray,
    counts: Sequence[float] | np.ndarray,
    *,
    edge_fmt: Callable[[float], str] = fmt_time,
    log_x: bool = False,
    width: int = 1100,
    height: int = 220,
    color: str = PALETTE[0],
    caption: str = "",
) -> str:
    """Vertical bars over bins ``[lo, hi)``, equal width per bin (so log bins stay readable).

    The x labels show bin edges; ``log_x`` only changes the axis title, the layout is by bin.
    Bars of non-empty bins are the chart's marks (class ``mark``); empty bins stay hoverable.
    """
    c = np.clip(np.nan_to_num(np.asarray(counts, dtype=np.float64)), 0.0, None)
    n = len(c)
    x0, x1, y0, y1 = 60.0, width - 20.0, 10.0, height - 40.0
    cmax = float(c.max()) if n else 0.0
    ticks = nice_ticks(cmax, 4)
    top = float(ticks[-1]) or 1.0
    out = [_svg_open(width, height, chart_id)]
    for t in ticks:
        y = y1 - (y1 - y0) * float(t) / top
        out.append(
            f'<line x1="{x0}" x2="{x1}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e6e6e6"/>'
            f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#555">{fmt_num(float(t))}</text>'
        )
    bw = (x1 - x0) / max(n, 1)
    every = max(1, math.ceil(70.0 / bw))
    for i in range(n):
        bh = (y1 - y0) * c[i] / top
        x = x0 + i * bw
        cls = "mark" if c[i] > 0 else "empty"
        out.append(
            f'<rect class="{cls}" x="{x + 1:.2f}" y="{y1 - bh:.2f}" width="{max(bw - 2, 1):.2f}" '
            f'height="{max(bh, 0.0):.2f}" fill="{color}"><title>[{escape(edge_fmt(lo[i]))}, '
            f"{escape(edge_fmt(hi[i]))}): {fmt_num(c[i])}</title></rect>"
        )
        if i % every == 0:
            out.append(
                f'<text x="{x:.1f}" y="{y1 + 14}" text-anchor="middle" fill="#555">{escape(edge_fmt(lo[i]))}</text>'
            )
    if n:
        out.append(
            f'<text x="{x1:.1f}" y="{y1 + 14}" text-anchor="middle" fill="#555">{escape(edge_fmt(hi[n - 1]))}</text>'
        )
    out.append(f'<line x1="{x0}" x2="{x1}" y1="{y1}" y2="{y1}" stroke="#888"/>')
    out.append(
        f'<text x="{(x0 + x1) / 2:.0f}" y="{height - 6}" text-anchor="middle" fill="#333">'
        f"gap length{' (log bins)' if log_x else ''}</text>"
    )
    out.append("</svg>")
    return _figure(chart_id, "".join(out), "", caption)


def boxplots(
    chart_id: str,
    groups: Mapping[str, Sequence[float]],
    *,
    colors: Mapping[str, str] | None = None,
    value_fmt: Callable[[float], str] = fmt_time,
    width: int = 1100,
    label_width: int = 150,
    caption: str = "",
) -> str:
    """One horizontal box plot per group: whiskers min–max, box p25–p75, median line.

    This is how a distribution over hundreds or thousands of ranks is shown; the tooltip
    gives the five numbers.
    """
    names = list(groups)
    arrays = [np.asarray(groups[k], dtype=np.float64) for k in names]
    arrays = [a[np.isfinite(a)] for a in arrays]
    vmax = max((float(a.max()) for a in arrays if a.size), default=0.0)
    top = float(nice_ticks(vmax)[-1]) or 1.0
    x0, x1 = label_width, width - 20
    row = 26
    axis_y = 10 + len(names) * row
    out = [_svg_open(width, axis_y + 24, chart_id), _x_axis(x0, x1, axis_y, vmax, value_fmt, 4)]
    sx = (x1 - x0) / top
    for i, (name, a) in enumerate(zip(names, arrays)):
        y = 10 + i * row
        out.append(f'<text x="{x0 - 6}" y="{y + row * 0.55:.1f}" text-anchor="end">{escape(name)}</text>')
        if not a.size:
            continue
        q0, q1, q2, q3, q4 = np.quantile(a, [0, 0.25, 0.5, 0.75, 1.0])
        col = (colors or {}).get(name, PALETTE[i % len(PALETTE)])
        tip = (
            f"{name} over {a.size} ranks: min {value_fmt(q0)}, p25 {value_fmt(q1)}, median {value_fmt(q2)}, "
            f"p75 {value_fmt(q3)}, max {value_fmt(q4)}"
        )
        yc = y + row * 0.4
        out.append(f'<line x1="{x0 + q0 * sx:.2f}" x2="{x0 + q4 * sx:.2f}" y1="{yc:.1f}" y2="{yc:.1f}" stroke="#555"/>')
        for q in (q0, q4):
            out.append(
                f'<line x1="{x0 + q * sx:.2f}" x2="{x0 + q * sx:.2f}" y1="{yc - 5:.1f}" y2="{yc + 5:.1f}" '
                f'stroke="#555"/>'
            )
        out.append(
            f'<rect class="mark" x="{x0 + q1 * sx:.2f}" y="{yc - 8:.1f}" width="{max((q3 - q1) * sx, 1.5):.2f}" '
            f'height="16" fill="{col}" opacity="0.85"><title>{escape(tip)}</title></rect>'
        )
        out.append(
            f'<line x1="{x0 + q2 * sx:.2f}" x2="{x0 + q2 * sx:.2f}" y1="{yc - 8:.1f}" y2="{yc + 8:.1f}" '
            f'stroke="#111" stroke-width="2"/>'
        )
    out.append("</svg>")
    return _figure(chart_id, "".join(out), "", caption)


def step_lines(
    chart_id: str,
    series: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
    *,
    value_fmt: Callable[[float], str] = fmt_num,
    x_fmt: Callable[[float], str] = fmt_time,
    x_title: str = "time",
    width: int = 1100,
    height: int = 240,
    colors: Mapping[str, str] | None = None,
    caption: str = "",
) -> str:
    """Binned series as step lines on one time axis: ``series`` maps a label to ``(lo, hi,
    value)`` arrays (bin edges in ns from the axis' zero, one value per bin). A gap between
    bins breaks the line; every bin's segment has a tooltip.

    Examples
    --------
    >>> svg = step_lines("q", {"stream 7": (np.array([0, 10]), np.array([10, 20]), np.array([3, 5]))})
    >>> svg.count('class="mark"'), "stream 7" in svg
    (2, True)
    """
    names = list(series)
    vmax = max((float(np.nanmax(v[2])) for v in series.values() if len(v[2])), default=0.0)
    xmax = max((float(np.max(v[1])) for v in series.values() if len(v[1])), default=0.0)
    yt = nice_ticks(vmax, 4)
    ytop = float(yt[-1]) or 1.0
    x0, x1, y0, y1 = 70.0, width - 20.0, 10.0, height - 40.0
    sx = (x1 - x0) / (float(nice_ticks(xmax)[-1]) or 1.0)
    out = [_svg_open(width, height, chart_id), _x_axis(x0, x1, y1, xmax, x_fmt, y0)]
    for t in yt:
        y = y1 - (y1 - y0) * float(t) / ytop
        out.append(
            f'<line x1="{x0}" x2="{x1}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eeeeee"/>'
            f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#555">{escape(value_fmt(float(t)))}</text>'
        )
    legend = {}
    for i, name in enumerate(names):
        lo, hi, v = (np.asarray(a, dtype=np.float64) for a in series[name])
        col = (colors or {}).get(name, PALETTE[i % len(PALETTE)])
        legend[name] = col
        pts: list[str] = []
        for k in np.flatnonzero(np.isfinite(v)).tolist():
            y = y1 - (y1 - y0) * v[k] / ytop
            xa, xb = x0 + lo[k] * sx, x0 + hi[k] * sx
            joined = k > 0 and hi[k - 1] == lo[k] and np.isfinite(v[k - 1])
            pts.append(f"{'L' if joined else 'M'}{xa:.1f},{y:.1f} L{xb:.1f},{y:.1f}")
            tip = f"{name} · {x_fmt(lo[k])}–{x_fmt(hi[k])}: {value_fmt(v[k])}"
            out.append(_bin_mark(xa, xb, y, tip))
        out.append(f'<path d="{" ".join(pts)}" fill="none" stroke="{col}" stroke-width="1.6"/>')
    out.append(
        f'<text x="{(x0 + x1) / 2:.0f}" y="{height - 6}" text-anchor="middle" fill="#333">{escape(x_title)}</text>'
    )
    out.append("</svg>")
    return _figure(chart_id, "".join(out), legend_html(legend), caption)
