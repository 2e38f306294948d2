"""What the summaries and views show (issue 19, item 20).

- The analyze summary listed "the first 16 of N ranks", hiding a flagged straggler with a
  higher rank: the flagged and the extreme GPUs come first.
- ``kernels -o FILE`` numbered its blocks "Rank 1:", "Rank 2:" (positions, not ranks).
- JSON output held float means and per-iteration times where the README promises whole ns.
- The gap histogram's default linear bins put nearly every gap in the first bin, and
  ``--hist-log`` labelled bins "0.0-0.0 ms": logarithmic bins when the range spans decades,
  labels with the digits that tell them apart, and ``report`` takes the histogram flags too.

(``compare``'s two non-GPU values of one run: tests/test_report.py::test_compare_two_runs.)
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import dtrace
from dtrace.cli.main import main
from dtrace.generate.synth import generate

STRAGGLER = 19


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("views")
    generate(
        str(d / "job"), ranks=24, steps=2, seed=5, kernels_per_step=12, faults=[f"compute:rank={STRAGGLER}:slow=0.5"]
    )
    res = dtrace.analyze(str(d / "job"), str(d / "out"), scheduler="sync")
    assert STRAGGLER in res.stragglers.loc[res.stragglers["flagged"].astype(bool), "rank"].tolist()
    return d


def breakdown_ranks(text: str) -> list[int]:
    block = text[text.index("GPU time breakdown") :]
    block = block[: block.index("\n\n\n")] if "\n\n\n" in block else block
    return [int(m.group(1)) for m in re.finditer(r"^\s+(\d+)\s+\d+\s", block, re.M)]


def test_summary_shows_the_straggler_first(job, capsys):
    assert main(["analyze", str(job / "job"), "-o", str(job / "out"), "--sync", "--no-progress"]) == 0
    out = capsys.readouterr().out
    ranks = breakdown_ranks(out)
    assert len(ranks) == 16 and ranks[0] == STRAGGLER, out[:2000]
    assert "16 of 24 GPUs" in out
    bd = dtrace.load(str(job / "out")).breakdown
    for col in ("computation_ns", "idle_ns", "total_ns"):  # the extremes are there too
        assert int(bd.loc[bd[col].idxmax(), "rank"]) in ranks and int(bd.loc[bd[col].idxmin(), "rank"]) in ranks


def test_kernel_detail_names_positions_and_ranks(job, tmp_path, capsys):
    assert main(["kernels", str(job / "out"), "-o", str(tmp_path / "k.txt")]) == 0
    text = (tmp_path / "k.txt").read_text()
    assert "Rank 1:" not in text and text.splitlines()[2].startswith("#1: ")
    assert "  Ranks: 0-23" in text
    assert main(["gaps", str(job / "out"), "-o", str(tmp_path / "g.txt")]) == 0
    text = (tmp_path / "g.txt").read_text()
    assert "\nRank 1:" not in text and "\n#1: " in text and "  Ranks: " in text
    capsys.readouterr()


def _ns_values(doc, path=""):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _ns_values(v, k)
    elif isinstance(doc, list):
        for v in doc:
            yield from _ns_values(v, path)
    elif path.endswith("_ns") and doc is not None:
        yield path, doc


def test_json_times_are_whole_ns(job, capsys):
    for cmd in ("kernels", "gaps"):
        assert main([cmd, str(job / "out"), "--fmt", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        bad = [(k, v) for k, v in _ns_values(doc) if not isinstance(v, int)]
        assert not bad, bad[:5]


def test_gap_histogram_bins_and_labels(job, tmp_path, capsys):
    res = dtrace.load(str(job / "out"))
    h = res.gap_histogram
    one = h.loc[(h["rank"] == 0) & (h["device"] == 0)].drop_duplicates("bin").sort_values("bin")
    lo, hi = one["lo_ns"].to_numpy(np.float64), one["hi_ns"].to_numpy(np.float64)
    g = res.gaps.loc[(res.gaps["rank"] == 0) & (res.gaps["device"] == 0)]
    first, last = float(g["min_ns"].min()), float(g["max_ns"].max())  # the part's smallest and largest gap
    assert last >= 100 * first  # the gaps span decades here: the default bins are logarithmic
    want = np.ceil(np.geomspace(first, last, 21))
    np.testing.assert_array_equal(np.append(lo, hi[-1]), want)
    assert one["count"].max() < 0.8 * one["count"].sum()  # not every gap in one bin
    for extra in ([], ["--hist-log"], ["--hist-linear"]):
        trace = str(job / "job" / "rank-0.json.gz")
        assert main(["gaps", trace, *extra]) == 0
        text = capsys.readouterr().out
        bars = re.findall(r"^\s*(\S.*?) │", text, re.M)
        assert len(bars) == 20 and len(set(bars)) == 20, bars
        assert not any(re.match(r"0\.0+-0\.0+ ", b) for b in bars), bars
    # the report redraws its histograms from the cached events with other bins
    assert main(["report", str(job / "out"), "-o", str(tmp_path / "r.html"), "--hist-linear", "--hist-bins", "5"]) == 0
    html = (tmp_path / "r.html").read_text()
    chart = html[html.index('data-chart="gap-histogram"') :]
    chart = chart[: chart.index("</figure>")]
    assert len(re.findall(r'<rect class="(?:mark|empty)"', chart)) == 5
    capsys.readouterr()
