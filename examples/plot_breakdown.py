"""Plot the per-rank GPU time breakdown as a stacked bar chart: a PNG through matplotlib when it
is installed, else an HTML file with inline SVG (so the example needs no extra package).

Run: python examples/plot_breakdown.py OUT plot.(png|html)

Asking for a PNG without matplotlib writes the HTML chart beside it (plot.html) and says so.
"""

import os
import sys

import dtrace

PARTS = [
    ("computation_ns", "#4c78a8"),
    ("exposed_comm_ns", "#f58518"),
    ("exposed_memcpy_ns", "#54a24b"),
    ("idle_ns", "#bab0ac"),
]


MAX_LABELS = 40  # rank labels on the axis at most: every k-th one beyond that


def labels(bd):
    """One label per bar: the rank, or rank:device where a rank has several devices."""
    if bd["rank"].is_unique:
        return [str(r) for r in bd["rank"]]
    return [f"{r}:{d}" for r, d in zip(bd["rank"], bd["device"])]


def figure(bd):
    """The stacked bars as a matplotlib figure: wider with more ranks (up to 24 inches), at most
    MAX_LABELS rank labels (turned upright past 16 bars), the legend outside the bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(bd)
    names = labels(bd)
    fig, ax = plt.subplots(figsize=(min(max(6.0, 2.0 + 0.14 * n), 24.0), 3.2))
    x = list(range(n))
    bottom = [0.0] * n
    for col, color in PARTS:
        vals = (bd[col] / 1e6).tolist()
        ax.bar(x, vals, bottom=bottom, color=color, label=col[:-3], width=0.85)
        bottom = [b + v for b, v in zip(bottom, vals)]
    step = max(1, -(-n // MAX_LABELS))
    upright = n > 16 or max((len(s) for s in names), default=0) > 4
    ax.set_xticks(x[::step], names[::step], rotation=90 if upright else 0, fontsize=7 if upright else 9)
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_xlabel("rank" if bd["rank"].is_unique else "rank:device")
    ax.set_ylabel("ms")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def plot_png(bd, target):
    import matplotlib.pyplot as plt

    fig = figure(bd)
    fig.savefig(target, dpi=100, bbox_inches="tight")
    plt.close(fig)


def plot_html(bd, target):
    width, bar = 400, 28 if len(bd) <= 32 else 12
    names = [f"rank {s}" for s in labels(bd)]
    x0 = 12 + 7.5 * max((len(s) for s in names), default=0)  # the bars start after the longest label
    rows = []
    for i, (r, name) in enumerate(zip(bd.to_dict("records"), names)):
        x = x0
        for col, color in PARTS:
            w = width * r[col] / max(r["total_ns"], 1)
            rows.append(
                f'<rect x="{x:.1f}" y="{10 + i * (bar + 6)}" width="{w:.1f}" height="{bar}" '
                f'fill="{color}"><title>{col[:-3]}: {r[col] / 1e6:.2f} ms</title></rect>'
            )
            x += w
        rows.append(
            f'<text x="5" y="{10 + i * (bar + 6) + bar * 0.8}" font-size="{12 if bar > 20 else 10}">{name}</text>'
        )
    h = 20 + len(bd) * (bar + 6)
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + x0 + 20:.0f}" height="{h}">{"".join(rows)}</svg>'
    with open(target, "w", encoding="utf-8") as f:
        f.write(f"<!doctype html><meta charset=utf-8><title>GPU breakdown</title>{svg}\n")


def main(argv):
    res = dtrace.load(argv[1] if len(argv) > 1 else "results")
    target = argv[2] if len(argv) > 2 else "breakdown.html"
    bd = res.breakdown.sort_values(["rank", "device"]).reset_index(drop=True)
    if target.lower().endswith(".png"):
        try:
            plot_png(bd, target)
        except ImportError:
            html = os.path.splitext(target)[0] + ".html"
            print(
                f"matplotlib is not installed: writing the chart as HTML to {html} instead of {target} "
                "(pip install matplotlib for a PNG)",
                file=sys.stderr,
            )
            target = html
            plot_html(bd, target)
    else:
        plot_html(bd, target)
    print(f"wrote {target}")


if __name__ == "__main__":
    main(sys.argv)
