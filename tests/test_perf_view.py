"""Where people look at the op model: ``dtrace perf``, the report's roofline section and the line of
the ``dtrace analyze`` summary, on the real H200 trace (tests/data/h200), a trace without device
properties and a generated job without shapes."""

from __future__ import annotations

import io
import json
import os
import re

import browser
import numpy as np
import pandas as pd
import pytest
from testpaths import ROOT, shared

import dtrace
from dtrace.cli.main import main as cli
from dtrace.core.units import sig3
from dtrace.generate import synth
from dtrace.render.context import Context
from dtrace.render.html import report
from dtrace.render.opperf import MAX_MARKS, NO_SHAPES, ranges, section_perf
from dtrace.render.page import page

H200 = os.path.join(ROOT, "tests", "data", "h200", "ops_rank0.pt.trace.json.gz")
MEASURED = os.path.join(ROOT, "examples", "gpu_spec_h200_measured.json")


def _no_device() -> str:
    """A real trace without deviceProperties (skips where ../shared is missing)."""
    return shared("kineto", "hta-2rank", "sampled_rank-0.json.gz")


@pytest.fixture(scope="module")
def h200(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("h200") / "out")
    return out, dtrace.analyze(H200, out, scheduler="sync")


@pytest.fixture(scope="module")
def nodev(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("nodev") / "out")
    return out, dtrace.analyze(_no_device(), out, scheduler="sync")


def _json(capsys, argv: list[str]) -> dict:
    assert cli(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_perf_json_top_ops_by_time_lost(h200, capsys):
    out, res = h200
    doc = _json(capsys, ["perf", out, "--fmt", "json", "--top", "10"])
    xr = res.op_perf_xrank
    want = xr.loc[xr["modelled"]].sort_values("lost_ns", ascending=False, kind="stable").head(10)
    assert [(o["op"], o["shapes"], o["lost_ns"]) for o in doc["ops"]] == list(
        zip(want["op"], want["shapes"], want["lost_ns"].astype(int))
    )
    # the headline by hand from op_family_perf
    fam = res.op_family_perf
    total, modelled = fam["gpu_ns"].sum(), fam["modelled_ns"].sum()
    roof = fam["roofline_ns"].astype("Float64").sum()
    lost = fam["lost_ns"].astype("Float64").sum()
    assert doc["summary"][0] == "rank 0: 'NVIDIA H200' → NVIDIA H200 SXM"
    head = doc["summary"][1]
    assert f"{100 * modelled / total:.1f} % in modelled ops" in head
    assert f"at {100 * roof / (roof + lost):.1f} % of the roofline" in head
    assert {f["family"] for f in doc["families"]} >= {"gemm", "attention", "conv", "norm", "unmodelled"}
    assert {p["metric"] for p in doc["gpu_peaks"]} >= {"hbm", "matrix_bf16", "vector_fp32"}


def test_perf_table_rank_family_sort_and_errors(h200, capsys):
    out, _ = h200
    assert cli(["perf", out, "--rank", "0", "--family", "gemm", "--sort", "efficiency", "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert "op shapes rank 0, family gemm, by % of roofline" in text
    rows = [ln for ln in text.splitlines() if ln.startswith(" aten::")]
    pct = [float(re.split(r"\s{2,}", r.strip())[4]) for r in rows]  # the roofline (%) column
    assert len(rows) == 3 and pct == sorted(pct)
    assert cli(["perf", out, "--rank", "7"]) == 2
    assert "no rank 7" in capsys.readouterr().err
    assert cli(["perf", out, "--family", "nope"]) == 2
    assert "families: attention, conv, copy" in capsys.readouterr().err
    assert cli(["perf", out, "--fmt", "csv", "--top", "4"]) == 0
    csv = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert len(csv) == 4 and {"lost_ns", "roofline_share", "tflops", "params"} <= set(csv.columns)


def test_perf_gpu_spec_reroofs_a_results_directory(h200, tmp_path, capsys):
    """``--gpu-spec`` on a results directory recomputes the roofline: the same figures as an
    analysis with that spec; the big bf16 GEMM then runs at about 100 % of the measured ceiling."""
    out, _ = h200
    doc = _json(capsys, ["perf", out, "--gpu-spec", MEASURED, "--fmt", "json", "--all", "--family", "gemm"])
    assert doc["summary"][0] == "rank 0: 'NVIDIA H200' → NVIDIA H200 SXM (measured)"
    again = dtrace.analyze(H200, str(tmp_path / "o"), scheduler="sync", gpu_spec=MEASURED).op_perf_xrank
    keys = ["op", "shapes", "dtypes", "strides", "args"]
    want = again.loc[again["family"] == "gemm", [*keys, "roofline_ns"]].astype({"roofline_ns": "int64"})
    got = pd.DataFrame(doc["ops"])[[*keys, "roofline_ns"]]
    both = got.merge(want, on=keys, suffixes=("", "_want"), validate="one_to_one")
    assert len(both) == len(got) == len(want) and (both["roofline_ns"] == both["roofline_ns_want"]).all()
    ops = pd.DataFrame(doc["ops"])
    big = ops.loc[(ops["op"] == "aten::mm") & (ops["shapes"] == "[[4096,4096],[4096,4096]]")]
    big = big.loc[big["precision"] == "bf16"]
    assert len(big) == 1 and 0.9 < float(big["roofline_share"].iloc[0]) < 1.1
    assert {p["origin"] for p in doc["gpu_peaks"]} == {MEASURED}


def test_perf_trace_file_and_no_device(capsys):
    """A trace file is analysed in-process; without deviceProperties the throughput stays and the
    roofline says why it is missing."""
    doc = _json(capsys, ["perf", _no_device(), "--fmt", "json", "--top", "5"])
    assert doc["summary"][0].startswith("rank 0: unnamed device: no roofline (the trace names no device")
    assert len(doc["ops"]) == 5 and all(o["tflops"] is not None and o["roofline_ns"] is None for o in doc["ops"])


def test_no_shapes_says_how_to_get_them(tmp_path, capsys):
    d = str(tmp_path / "job")
    synth.generate(d, ranks=2, steps=2, kernels_per_step=20, seed=1)
    assert cli(["perf", os.path.join(d, "rank-0.json.gz")]) == 0
    assert NO_SHAPES in capsys.readouterr().out
    res = dtrace.analyze(d, str(tmp_path / "o"), scheduler="sync")
    html = section_perf(Context(res))
    assert "record_shapes=True" in html and "<svg" not in html


def test_analyze_summary_names_the_op_losing_most(h200, capsys):
    out, res = h200
    assert cli(["analyze", H200, "-o", out]) == 0
    text = capsys.readouterr().out
    top = res.op_perf_xrank.loc[res.op_perf_xrank["modelled"]].iloc[0]
    assert "op performance:\n  rank 0: 'NVIDIA H200' → NVIDIA H200 SXM\n" in text
    assert f"most time lost: {top['op']} {top['params']}" in text


def test_report_section_roofline_by_hand(h200):
    out, res = h200
    html = report(res)
    sec = html[html.index('<section id="perf">') :]
    sec = sec[: sec.index("</section>")]
    fig = sec[sec.index('data-chart="roofline-0"') :]
    fig = fig[: fig.index("</figure>")]
    mod = res.op_perf.loc[res.op_perf["modelled"] & (res.op_perf["flops"] > 0) & (res.op_perf["bytes"] > 0)]
    shapes = mod.drop_duplicates(["op", "shapes", "dtypes", "strides", "args"])
    assert fig.count("<circle") == min(len(shapes), MAX_MARKS)
    # one roof per distinct peak of the (unit, precision) pairs drawn, plus the bandwidth label
    peaks = mod.drop_duplicates(["unit", "precision"])["peak_tflops"].round(6).nunique()
    assert fig.count("<polyline") == peaks and "HBM 4.80 TB/s" in fig
    # the tooltip of the big bf16 GEMM: its achieved TFLOP/s and share of the roofline
    big = res.op_perf.loc[
        (res.op_perf["op"] == "aten::mm") & (res.op_perf["shapes"] == "[[4096,4096],[4096,4096]]")
        & (res.op_perf["precision"] == "bf16")
    ].iloc[0]  # fmt: skip
    tflops = 2 * 4096**3 * big["count"] / big["gpu_ns"] / 1e3
    assert f"{sig3(tflops)} TFLOP/s" in fig and f"{100 * big['roofline_share']:.1f} % of the roofline" in fig
    assert 'id="perf-lost"' in sec and 'id="perf-families"' in sec and "GPU peaks used" in sec
    assert sec.count("<tr>", sec.index('id="perf-lost"')) >= 30


def test_report_section_without_device(nodev):
    _, res = nodev
    sec = section_perf(Context(res))
    assert "no roofline: the trace names no device (Kineto&#x27;s deviceProperties" in sec
    assert sec.count("<circle") > 0 and "<polyline" not in sec
    assert "Achieved throughput (no roofline)" in sec


def test_roofline_section_in_a_browser(h200, tmp_path):
    if browser.find_chromium() is None:
        pytest.skip("chromium is not installed (Debian package 'chromium')")
    _, res = h200
    path = tmp_path / "perf.html"
    path.write_text(page("perf", "", [("perf", "How far from the hardware", section_perf(Context(res)))]))
    js = """(() => { const m = Array.from(document.querySelectorAll('figure[data-chart=roofline-0] .mark'));
      return {ready: document.body.getAttribute('data-ready'), marks: m.length,
              drawn: m.filter(c => { const b = c.getBBox(); return b.width > 0; }).length,
              inside: m.filter(c => { const b = c.getBBox(); return b.x >= 60 && b.y >= 0; }).length}; })()"""
    run = browser.open_page(str(path), js)
    assert run.problems == [], run.problems
    v = run.value
    assert v["ready"] == "1" and v["marks"] > 50 and v["drawn"] == v["marks"] == v["inside"]


def test_sort_choices_match_the_view():
    from dtrace.cli.perf import SORT_CHOICES
    from dtrace.render.opperf import SORTS

    assert SORT_CHOICES == tuple(SORTS)


def test_ranges():
    assert ranges(np.array([3, 1, 2, 7])) == "1-3, 7" and ranges([]) == "none"
