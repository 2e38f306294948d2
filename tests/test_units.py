"""One unit per column, chosen from the whole column; durations with a sensible unit; absolute
times relative to t0 with t0 as a date (issue 14, "output that misleads")."""

import datetime
import re

import pandas as pd
import pytest
import rawtrace
from testpaths import ROOT

from dtrace.cli.main import main
from dtrace.render.text import render
from dtrace.results import write_results

EXAMPLE = f"{ROOT}/examples/traces/sampled_rank-0.json.gz"
BIG_US = re.compile(r"\d{1,3}(,\d{3})+(\.\d+)? µs")  # e.g. 8,376,066.00 µs


def first_row(text):
    lines = [ln for ln in text.splitlines() if ln.strip()]
    rule = next(i for i, ln in enumerate(lines) if set(ln.strip()) <= {"─", " "} and ln.strip())
    return lines[rule + 1].split()


def test_same_value_prints_the_same_whatever_top(tmp_path, capsys):
    # one small kernel (353 µs) among large ones (tens of ms): the column's unit is ms
    k = pd.DataFrame(
        {
            "rank": 0,
            "device": 0,
            "name": ["small", "a", "b", "c"],
            "count": [1, 1, 1, 1],
            "total_ns": [353_000, 20_000_000, 30_000_000, 40_000_000],
        }
    )
    out = tmp_path / "r"
    write_results(str(out), {"kernels": k}, {"inputs": []})
    shown = {}
    for top in ("1", "4"):
        assert main(["show", str(out), "kernels", "--top", top, "--sort", "count"]) == 0
        text = capsys.readouterr().out
        assert "total (ms)" in text
        shown[top] = first_row(text)
    assert shown["1"] == shown["4"] == ["0", "0", "small", "1", "0.353"]
    view = render(k, "table", max_rows=1)
    assert "0.353" in view and "353 " not in view


def test_summaries_use_a_sensible_unit(capsys):
    assert main(["kernels", EXAMPLE]) == 0
    text = capsys.readouterr().out
    assert not BIG_US.search(text), BIG_US.search(text)
    gpu_ns = rawtrace.load(EXAMPLE)["gpu"]["dur_ns"].sum()  # kernels, memcpy and memset, read with json
    value, unit = re.search(r"GPU time ([\d.]+) (s|ms|µs)\n", text).groups()
    assert unit == "ms" and float(value) == pytest.approx(gpu_ns / 1e6, rel=5e-3)
    assert main(["gaps", EXAMPLE]) == 0
    assert not BIG_US.search(capsys.readouterr().out)


def test_absolute_times_relative_to_t0(tmp_path, capsys):
    t0 = 1_700_000_000_123_456_789
    bd = pd.DataFrame(
        {
            "rank": [0, 1],
            "device": [0, 1],
            "first_ns": [t0, t0 + 2_000_000],
            "last_ns": [t0 + 1_500_000_000, t0 + 1_502_000_000],
            "total_ns": [1_500_000_000] * 2,
        }
    )
    out = tmp_path / "r"
    write_results(str(out), {"breakdown": bd}, {"inputs": []})
    assert main(["show", str(out), "breakdown"]) == 0
    text = capsys.readouterr().out
    date = datetime.datetime.fromtimestamp(t0 // 10**9, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    assert f"t0 = {date}.123456 UTC" in text
    assert "first (t0+ms)" in text and "last (t0+s)" in text
    assert first_row(text) == ["0", "0", "0", "1.5", "1.5"]
    assert "1,700,000,000" not in text and "1.7e" not in text


def test_statistic_columns_print_as_times():
    kx = pd.DataFrame(
        {
            "name": ["k"],
            "total_ns": [3_000_000],
            "total_ns_mean": [1_500_000.0],
            "total_ns_max": [2_000_000],
            "step_ns_z": [1.25],
        }
    )
    text = render(kx, "table")
    assert "total mean (ms)" in text and "total max (ms)" in text and "step_ns_z" in text
    assert first_row(text) == ["k", "3", "1.5", "2", "1.25"]


@pytest.mark.parametrize("unit,values,want", [("ms", [1_500_000, 2_000_000], ["1.5", "2"])])
def test_fixed_table_unit(unit, values, want):
    text = render(pd.DataFrame({"a_ns": values, "b_ns": [1, 2]}), "table", time_unit=unit)
    assert "a (ms)" in text and "b (ms)" in text
    assert first_row(text)[0] == want[0]
