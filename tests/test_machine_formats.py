"""Machine formats are exactly one valid document on stdout, prose on stderr; -o/--output means
the same in every command (issue 14). Each stdout is parsed whole by json or csv here."""

import csv
import io
import json
import os

import pytest
from testpaths import ROOT

import dtrace
from dtrace.cli.main import main

TRACES = os.path.join(ROOT, "examples", "traces")
TRACE = os.path.join(TRACES, "sampled_rank-0.json.gz")


@pytest.fixture(scope="module")
def res(tmp_path_factory):
    out = tmp_path_factory.mktemp("mf") / "res"
    dtrace.analyze(TRACES, str(out), scheduler="sync")
    return str(out)


def parse(fmt, text):
    """The whole of stdout as one document: a JSON value, or a CSV table whose rows all have the header's width."""
    if fmt == "json":
        return json.loads(text)
    rows = list(csv.reader(io.StringIO(text)))
    assert rows and all(len(r) == len(rows[0]) for r in rows), text[:300]
    return [dict(zip(rows[0], r)) for r in rows[1:]]


def run(capsys, argv, rc=0):
    assert main(argv) == rc, argv
    return capsys.readouterr()


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_analyze(tmp_path, capsys, fmt):
    cap = run(capsys, ["analyze", TRACES, "-o", str(tmp_path / "r"), "--sync", "--fmt", fmt])
    doc = parse(fmt, cap.out)
    rows = doc["breakdown"] if fmt == "json" else doc
    assert sorted(int(r["rank"]) for r in rows) == [0, 1]
    bd = dtrace.load(str(tmp_path / "r")).breakdown.sort_values("rank")
    assert [int(r["total_ns"]) for r in sorted(rows, key=lambda r: int(r["rank"]))] == bd["total_ns"].tolist()
    if fmt == "json":
        assert doc["errors"] == [] and doc["run"]["n_parts"] == 2 and "classes" in doc and "stragglers" in doc
    assert "results: " in cap.err and "dtrace: 2 inputs" in cap.err


@pytest.mark.parametrize("fmt", ["json", "csv"])
@pytest.mark.parametrize("where", ["trace", "results"])
def test_kernels_and_gaps(res, capsys, fmt, where):
    x = TRACE if where == "trace" else res
    extra = [] if where == "trace" else ["--rank", "0"]
    k = parse(fmt, run(capsys, ["kernels", x, "--fmt", fmt, *extra]).out)
    rows = k["kernels"] if fmt == "json" else k
    assert len(rows) > 20  # every kernel, not the terminal's top 20
    assert {"name", "count", "total_ns"} <= set(rows[0])
    if fmt == "json":
        assert k["summary"]["gpu_time_ns"] == sum(int(r["total_ns"]) for r in rows)
        assert k["classes"] and "memops" in k
    g = parse(fmt, run(capsys, ["gaps", x, "--fmt", fmt, *extra, "--top", "3"]).out)
    pairs = g["transitions"] if fmt == "json" else g
    assert len(pairs) == 3 and {"prev_name", "next_name", "count", "mean_ns"} <= set(pairs[0])
    g = parse(fmt, run(capsys, ["gaps", x, "--fmt", fmt, *extra]).out)
    pairs = g["transitions"] if fmt == "json" else g
    if fmt == "json":
        assert g["summary"]["gaps"] == sum(int(s["gaps"]) for s in g["streams"]) == sum(p["count"] for p in pairs)
        assert g["histogram"]
        # the GPU's idle time by cause (device gaps) is the breakdown's idle time
        bd = (dtrace.load(res) if where == "results" else dtrace.analyze(TRACE, scheduler="sync")).breakdown
        assert g["gpu_idle"]["idle_ns"] == int(bd.loc[bd["rank"] == 0, "idle_ns"].sum())
        assert sum(g["gpu_idle"][f"{c}_ns"] for c in ("host_wait", "kernel_wait", "other")) == g["gpu_idle"]["idle_ns"]


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_show_ops_diff(res, capsys, fmt, tmp_path):
    doc = parse(fmt, run(capsys, ["show", res, "--fmt", fmt]).out)
    inputs = doc["inputs"] if fmt == "json" else doc
    assert sorted(os.path.basename(i["path"]) for i in inputs) == ["sampled_rank-0.json.gz", "sampled_rank-1.json.gz"]
    if fmt == "json":
        assert "breakdown" in doc["tables"]
    assert len(parse(fmt, run(capsys, ["show", res, "streams", "--fmt", fmt]).out)) > 0
    assert len(parse(fmt, run(capsys, ["ops", res, "--fmt", fmt]).out)) > 0
    assert len(parse(fmt, run(capsys, ["ops", TRACE, "--fmt", fmt]).out)) > 0
    cap = run(capsys, ["diff", res, res, "--fmt", fmt, "-o", str(tmp_path / "d.csv")])
    rows = parse(fmt, cap.out)
    assert {r["level"] for r in rows} == {"breakdown", "class", "kernel", "op"}
    assert all(float(r["time_delta_ns"]) == 0 for r in rows)  # a run against itself
    assert "diff: " in cap.err


@pytest.mark.parametrize("flag", ["-o", "--output", "--out"])
def test_output_flag_is_the_same_everywhere(tmp_path, capsys, flag):
    out = tmp_path / "r"
    run(capsys, ["analyze", TRACE, flag, str(out), "--sync"])
    assert dtrace.load(str(out)).table_names
    if flag != "--out":
        run(capsys, ["report", str(out), flag, str(tmp_path / "r.html")])
        run(capsys, ["kernels", str(out), flag, str(tmp_path / "k.csv")])
        run(capsys, ["gaps", str(out), flag, str(tmp_path / "g.csv")])
        run(capsys, ["diff", str(out), str(out), flag, str(tmp_path / "d.csv")])
        assert all((tmp_path / f).exists() for f in ("r.html", "k.csv", "g.csv", "d.csv"))


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_analyze_prose_on_stderr_is_one_line_each(tmp_path, capsys, fmt):
    """Also when the results are up to date: the header and ``results: OUT`` are two lines."""
    out = str(tmp_path / "out")
    for up_to_date in (False, True):
        got = run(capsys, ["analyze", TRACE, "-o", out, "--sync", "--fmt", fmt])
        parse(fmt, got.out)
        lines = got.err.splitlines()
        assert len(lines) == 2 and lines[1] == f"results: {out}", got.err
        assert ("up to date" in lines[0]) == up_to_date and "\\n" not in got.err
