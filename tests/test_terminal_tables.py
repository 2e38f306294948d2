"""Terminal tables fit the terminal, never cut numbers, show 20 rows by default and say what they
left out; straggler signal letters are explained wherever they are shown (issue 14)."""

import os
import re

import numpy as np
import pandas as pd
import pytest
from testpaths import ROOT

import dtrace
from dtrace.cli.main import main
from dtrace.render.html import report
from dtrace.render.text import render
from dtrace.results import Results, write_results

TRACES = os.path.join(ROOT, "examples", "traces")


@pytest.fixture(scope="module")
def res(tmp_path_factory):
    out = tmp_path_factory.mktemp("tt") / "res"
    dtrace.analyze(TRACES, str(out), scheduler="sync")
    return str(out)


def wide_frame(n_rows=3, n_cols=14):
    rng = np.random.default_rng(1)
    df = pd.DataFrame(
        {
            "rank": np.arange(n_rows),
            "device": np.arange(n_rows),
            "name": ["void very_long_kernel_name_" + "x" * 150 + f"<{i}>(int)" for i in range(n_rows)],
        }
    )
    for k in range(n_cols):
        df[f"metric_{k}_ns"] = rng.integers(10**9, 10**10, n_rows)  # seconds, 1.xxx-9.xxx
    return df


def test_wide_table_fits_and_keeps_every_number():
    df = wide_frame()
    text = render(df, "table", width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    for v in df[[c for c in df.columns if c.endswith("_ns")]].to_numpy().ravel():
        shown = f"{v / 1e9:,.3f}".rstrip("0").rstrip(".")
        assert shown in text, shown  # every number whole
    blocks = re.findall(r"\[block (\d+) of (\d+)", text)
    assert len(blocks) > 1 and all(b[1] == str(len(blocks)) for b in blocks)
    assert text.count("very_long_kerne") == 3 * len(blocks)  # the key columns repeat in every block
    assert all(text.count(f"…{i}") == len(blocks) for i in range(3))  # each keeps the part that differs
    assert "…" in text  # names shortened, not folded


def test_narrow_name_table_shortens_names_only():
    df = pd.DataFrame({"name": ["k_" + "y" * 300], "total_ns": [123_456_789_012]})
    text = render(df, "table", width=60)
    assert max(len(line) for line in text.splitlines()) <= 60
    assert "123.457" in text and "[block" not in text


def test_terminal_width_follows_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "70")
    text = render(wide_frame(), "table")
    assert max(len(line) for line in text.splitlines()) <= 70


def test_default_row_limit_top_and_all(res, capsys):
    n = len(dtrace.load(res).kernels)
    assert n > 40
    assert main(["show", res, "kernels"]) == 0
    out = capsys.readouterr().out
    assert f"{n - 20:,} more rows not shown (showing 20 of {n:,}; --top N or --all for more)" in out
    assert main(["show", res, "kernels", "--top", "5"]) == 0
    assert f"{n - 5:,} more rows not shown" in capsys.readouterr().out
    assert main(["show", res, "kernels", "--all"]) == 0
    assert "more rows not shown" not in capsys.readouterr().out
    assert main(["ops", res]) == 0
    assert "more rows not shown (showing 20 of" in capsys.readouterr().out


def test_gaps_top_limits_every_table(res, capsys):
    r = dtrace.load(res)
    n_streams = len(r.gaps)
    assert n_streams > 2
    assert main(["gaps", res, "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert f"{n_streams - 2:,} more rows not shown (showing 2 of {n_streams:,}" in out
    assert "top 2 kernel pairs" in out


def straggler_results():
    s = pd.DataFrame(
        {
            "rank": [3, 0, 1],
            "device": [3, 0, 1],
            "score": [9.0, 0.5, 0.2],
            "flagged": [True, False, False],
            "evidence": ["rank 3 arrived last", "rank 0 quiet", "rank 1 quiet"],
            "method": "robust",
            "signals": ["a,d", "", ""],
        }
    )
    return Results({"stragglers": s}, {"inputs": []})


def test_signal_letters_are_explained(tmp_path, capsys):
    from dtrace.render.summary import summary

    text = summary(straggler_results())
    assert "signals a,d" in text and "a = its collectives start late" in text and "d = slow link" in text
    assert "f = held the others back" in text
    out = tmp_path / "r"
    write_results(str(out), {"stragglers": straggler_results().stragglers}, {"inputs": []})
    assert main(["show", str(out), "stragglers"]) == 0
    assert "b = compute kernels slower" in capsys.readouterr().out
    html = report(straggler_results())
    assert "a = its collectives start late" in html and "c = step time" in html and ">a,d<" in html
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert all(f"`{k}`" in readme for k in "abcdef") and "signals" in readme


def test_show_lists_inputs_in_rank_order_and_filters_rows(tmp_path, capsys):
    """Issue 31: ``dtrace show OUT`` listed rank-0, rank-1, rank-10, rank-100 (string order); issue
    30: ``--where cause=...`` filters the stragglers on their cause."""
    out = tmp_path / "r"
    paths = [f"/job/rank-{r}.json.gz" for r in (0, 1, 10, 100, 2, 11)]
    inputs = [
        {"path": p, "format": "kineto", "status": "ok", "ranks": [[int(p.split("-")[1].split(".")[0]), 0]]}
        for p in paths
    ]
    s = straggler_results().stragglers.assign(cause=["host_loader", "", ""])
    write_results(str(out), {"stragglers": s}, {"inputs": inputs})
    assert main(["show", str(out), "--fmt", "csv"]) == 0
    listed = [line.split(",")[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert listed == [f"/job/rank-{r}.json.gz" for r in (0, 1, 2, 10, 11, 100)]
    assert main(["show", str(out), "stragglers", "--where", "cause=host_loader", "--fmt", "csv"]) == 0
    rows = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
    assert rows["rank"].tolist() == [3] and rows["cause"].tolist() == ["host_loader"]
    assert main(["show", str(out), "stragglers", "--where", "nope=1"]) == 2
    assert "no column 'nope'" in capsys.readouterr().err


def test_one_convention_for_times_bytes_and_shares():
    """Issue 31: memory tables printed bin edges and peaks as epoch ns and bytes raw (2,551,428,096
    beside a headline of 2.38 GiB); step_bounds_xrank printed share_median 0.705 beside "top share
    (%) 83.25". Absolute times of a table are after t0, bytes in one unit per column, every
    fraction in %; CSV keeps the raw values."""
    t0 = 1_752_829_952_237_228_000  # epoch ns
    tl = pd.DataFrame(
        {
            "rank": [0, 0],
            "lo_ns": [t0, t0 + 10_784_000],
            "hi_ns": [t0 + 10_784_000, t0 + 21_568_000],
            "allocated_bytes": [2_551_428_096, 967_000_000],
            "freed_bytes": [-1, 0],  # unknown
        }
    )
    text = render(tl, "markdown", table="memory_timeline")
    assert "| rank | lo (t0+ms) | hi (t0+ms) | allocated (GiB) | freed (B) |" in text
    assert "| 0 | 0 | 10.784 | 2.376 |" in text and "| 0 | 10.784 | 21.568 | 0.901 | 0 |" in text
    assert "times after t0 = 2025-07-18 09:12:32.237228 UTC" in text
    hist = render(tl.rename(columns={"lo_ns": "x"}).assign(lo_ns=[0, 1000]), "markdown", table="launch_histogram")
    assert "lo (µs)" in hist  # a duration bin in other tables
    shares = render(pd.DataFrame({"share_median": [0.705], "top_share": [0.8325], "roofline_share": [0.5]}), "markdown")
    assert "| share median (%) | top share (%) | roofline share (%) |" in shares and "| 70.5 | 83.25 | 50 |" in shares
    rate = render(pd.DataFrame({"bandwidth_bytes_per_s": [3.3e12, 4.8e12]}), "markdown")
    assert "bandwidth (TB/s)" in rate and "| 4.8 |" in rate
    assert render(tl, "csv").splitlines()[1] == f"0,{t0},{t0 + 10_784_000},2551428096,-1"


def test_names_are_not_what_gets_cut_at_160_columns():
    """Issue 31: at 160 columns names were cut to a stub (``ncclKernel_SendRec…``) while every
    number stayed whole. Names keep NAME_FLOOR characters; a table still too wide is printed in
    blocks of columns, the names repeated in each."""
    from dtrace.render.text import NAME_FLOOR

    names = ["ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "record_param_comms"]
    df = pd.DataFrame({"name": names, **{f"c{i}_ns": [123_456_789_012, 1] for i in range(20)}})
    text = render(df, "table", width=160)
    assert "ncclKernel_SendRecv_RING_SIMPLE_Sum"[: NAME_FLOOR - 1] in text and "record_param_comms" in text
    assert "[block 1 of" in text and max(len(line) for line in text.splitlines()) <= 160
