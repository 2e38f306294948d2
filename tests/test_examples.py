"""The examples in examples/ run as documented."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT


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
    proc = subprocess.run([sys.executable, "-m", "dtrace", "analyze", "examples/traces", "-o", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "GPU time breakdown" in proc.stdout
    show = subprocess.run([sys.executable, "-m", "dtrace", "show", str(out), "breakdown", "--fmt", "csv"],
                          capture_output=True, text=True, cwd=ROOT)
    assert show.returncode == 0 and show.stdout.startswith("rank,device,")


@pytest.mark.parametrize("fmt", ["table", "csv", "json", "markdown"])
def test_show_formats(tmp_path, fmt):
    import dtrace

    out = tmp_path / "r"
    dtrace.analyze(os.path.join(ROOT, "examples", "traces"), str(out), scheduler="sync")
    proc = subprocess.run([sys.executable, "-m", "dtrace", "show", str(out), "streams", "--fmt", fmt],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "stream" in proc.stdout
