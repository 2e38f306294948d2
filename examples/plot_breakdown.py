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


def plot_png(bd, target):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bottom = [0.0] * len(bd)
    fig, ax = plt.subplots(figsize=(6, 3))
    for col, color in PARTS:
        vals = (bd[col] / 1e6).tolist()
        ax.bar(bd["rank"].astype(str), vals, bottom=bottom, color=color, label=col[:-3])
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xlabel("rank")
    ax.set_ylabel("ms")
    ax.legend(fontsize=7)
    fig.savefig(target, dpi=100, bbox_inches="tight")
    plt.close(fig)


def plot_html(bd, target):
    width, bar = 400, 28
    rows = []
    for i, r in enumerate(bd.to_dict("records")):
        x = 60.0
        for col, color in PARTS:
            w = width * r[col] / max(r["total_ns"], 1)
            rows.append(
                f'<rect x="{x:.1f}" y="{10 + i * (bar + 6)}" width="{w:.1f}" height="{bar}" '
                f'fill="{color}"><title>{col[:-3]}: {r[col] / 1e6:.2f} ms</title></rect>'
            )
            x += w
        rows.append(f'<text x="5" y="{10 + i * (bar + 6) + bar * 0.65}">rank {r["rank"]}</text>')
    h = 20 + len(bd) * (bar + 6)
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 80}" height="{h}">{"".join(rows)}</svg>'
    with open(target, "w", encoding="utf-8") as f:
        f.write(f"<!doctype html><meta charset=utf-8><title>GPU breakdown</title>{svg}\n")


def main(argv):
    res = dtrace.load(argv[1] if len(argv) > 1 else "results")
    target = argv[2] if len(argv) > 2 else "breakdown.html"
    bd = res.breakdown.sort_values("rank")
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
