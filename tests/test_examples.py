"""The examples in examples/ run as documented."""

import os
import subprocess
import sys

import pytest
from testpaths import ROOT


def run(*args, cwd=ROOT):
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_examples_analyze_load_plot(tmp_path):
    out = tmp_path / "results"
    text = run(os.path.join("examples", "analyze_traces.py"), str(out))
    assert "rank 0:" in text and "rank 1:" in text
    text = run(os.path.join("examples", "load_results.py"), str(out))
    assert "busy_ns" in text
    html = tmp_path / "bd.html"
    run(os.path.join("examples", "plot_breakdown.py"), str(out), str(html))
    assert "<svg" in html.read_text()


def test_readme_main_command(tmp_path):
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "dtrace", "analyze", "examples/traces", "-o", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "GPU time breakdown" in proc.stdout
    show = subprocess.run(
        [sys.executable, "-m", "dtrace", "show", str(out), "breakdown", "--fmt", "csv"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert show.returncode == 0 and show.stdout.startswith("rank,device,")


@pytest.mark.parametrize("fmt", ["table", "csv", "json", "markdown"])
def test_show_formats(tmp_path, fmt):
    import dtrace

    out = tmp_path / "r"
    dtrace.analyze(os.path.join(ROOT, "examples", "traces"), str(out), scheduler="sync")
    proc = subprocess.run(
        [sys.executable, "-m", "dtrace", "show", str(out), "streams", "--fmt", fmt],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert "stream" in proc.stdout


def _example_results(tmp_path):
    import dtrace

    out = tmp_path / "results"
    dtrace.analyze(os.path.join(ROOT, "examples", "traces"), str(out), scheduler="sync")
    return out


def test_plot_breakdown_png_with_matplotlib(tmp_path):
    pytest.importorskip("matplotlib")
    out = _example_results(tmp_path)
    png = tmp_path / "bd.png"
    text = run(os.path.join("examples", "plot_breakdown.py"), str(out), str(png))
    assert f"wrote {png}" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_breakdown_falls_back_to_html_without_matplotlib(tmp_path):
    out = _example_results(tmp_path)
    block = tmp_path / "block" / "matplotlib"
    block.mkdir(parents=True)
    (block / "__init__.py").write_text("raise ImportError('matplotlib is blocked by this test')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(block.parent), ROOT, os.environ.get("PYTHONPATH", "")]))
    png = tmp_path / "bd.png"
    proc = subprocess.run(
        [sys.executable, os.path.join("examples", "plot_breakdown.py"), str(out), str(png)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "matplotlib is not installed" in proc.stderr and f"wrote {tmp_path / 'bd.html'}" in proc.stdout
    assert not png.exists()
    html = (tmp_path / "bd.html").read_text()
    assert html.count("<rect") == 2 * 4  # two ranks, four breakdown parts each


@pytest.mark.parametrize("n", [2, 64, 1024])
def test_plot_breakdown_labels_never_overlap(n):
    """Issue 31: at 64 ranks the example's PNG overlapped its rank labels. The figure widens with
    the ranks, shows at most MAX_LABELS labels, and no two drawn labels (nor the legend and the
    bars) overlap."""
    pytest.importorskip("matplotlib")
    import importlib.util

    import matplotlib.pyplot as plt
    import pandas as pd

    spec = importlib.util.spec_from_file_location("plot_breakdown", os.path.join(ROOT, "examples", "plot_breakdown.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ns = {c: [1_000_000 * (1 + i % 3) for i in range(n)] for c, _ in mod.PARTS}
    bd = pd.DataFrame({"rank": range(n), "device": [0] * n, **ns, "total_ns": [4_000_000 * 3] * n})
    fig = mod.figure(bd)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    ticks = [t for t in ax.get_xticklabels() if t.get_text()]
    assert 1 <= len(ticks) <= mod.MAX_LABELS and ticks[0].get_text() == "0"
    boxes = [t.get_window_extent(renderer) for t in ticks]
    assert not any(a.overlaps(b) for a, b in zip(boxes, boxes[1:]))
    assert not ax.get_legend().get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
    plt.close(fig)
