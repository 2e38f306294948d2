"""An empty selection is an error that says what there is, or a clear note; never a silent empty
table with exit 0 (issue 14). Steps, ranks and streams are read from the raw traces here."""

import gzip
import json
import os

import pytest
from test_bad_input import GOOD, write
from test_nsys_csv import KERN_NEW
from testpaths import ROOT

from dtrace.cli.main import main

TRACE = os.path.join(ROOT, "examples", "traces", "sampled_rank-0.json.gz")


def steps_in(path):
    with gzip.open(path, "rt") as f:
        names = {e.get("name", "") for e in json.load(f)["traceEvents"]}
    return sorted(int(n.split("#")[1]) for n in names if n.startswith("ProfilerStep#"))


def err_of(capsys, argv, rc=2):
    assert main(argv) == rc, argv
    cap = capsys.readouterr()
    if rc == 2:
        assert cap.err.count("\n") == 1, cap.err
    return cap


@pytest.fixture(scope="module")
def res(tmp_path_factory):
    import dtrace

    out = tmp_path_factory.mktemp("es") / "res"
    dtrace.analyze(os.path.join(ROOT, "examples", "traces"), str(out), scheduler="sync")
    return str(out)


def test_step_that_does_not_exist(capsys, tmp_path):
    steps = steps_in(TRACE)
    assert steps == [551, 552]
    for cmd in ("kernels", "gaps"):
        cap = err_of(capsys, [cmd, TRACE, "--step", "9"])
        assert "no such step" in cap.err and "its steps: 551-552" in cap.err and cap.out == ""
    nosteps = write(tmp_path / "rank-0.json", GOOD)
    cap = err_of(capsys, ["kernels", nosteps, "--step", "1"])
    assert "has no steps" in cap.err


def test_analyze_step_that_selects_nothing(capsys, tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    stepped = json.loads(json.dumps(GOOD))
    stepped["traceEvents"].append(
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 5, "tid": 5, "ts": 90.0, "dur": 30.0}
    )
    write(d / "rank-0.json", stepped)
    plain = json.loads(json.dumps(GOOD))
    plain["distributedInfo"]["rank"] = 1
    write(d / "rank-1.json", plain)  # no steps: step 1 holds nothing on rank 1
    cap = err_of(capsys, ["analyze", str(d), "-o", str(tmp_path / "o9"), "--sync", "--step", "9"])
    assert "--step 9 selects no GPU event in any input" in cap.err
    cap = err_of(capsys, ["analyze", str(d), "-o", str(tmp_path / "o1"), "--sync", "--step", "1"], rc=0)
    assert "--step 1 selects no GPU event on rank(s) 1" in cap.out


def test_rank_and_stream_that_do_not_exist(res, capsys):
    cap = err_of(capsys, ["show", res, "breakdown", "--rank", "7"])
    assert "no rank 7" in cap.err and "ranks: 0-1" in cap.err
    err_of(capsys, ["show", res, "kernels_xrank", "--rank", "0"])
    for cmd in ("kernels", "gaps"):
        cap = err_of(capsys, [cmd, res, "--rank", "7"])
        assert "no rank 7" in cap.err and "ranks: 0-1" in cap.err
    cap = err_of(capsys, ["gaps", TRACE, "--stream", "99"])
    assert "no stream 99" in cap.err and "streams: 7, 23" in cap.err


def test_summary_only_results_say_why(tmp_path, capsys):
    d = tmp_path / "csvs"
    d.mkdir()
    (d / "run_rank0_cuda_gpu_kern_sum.csv").write_text(KERN_NEW)
    out = str(tmp_path / "out")
    cap = err_of(capsys, ["analyze", str(d), "-o", out, "--sync"], rc=0)
    assert "no rows in breakdown, streams, steps" in cap.out and "carry no events" in cap.out
    cap = err_of(capsys, ["show", out, "breakdown"], rc=0)
    assert "table breakdown is empty: for the summary inputs: nsys stats summaries carry no events" in cap.out
    cap = err_of(capsys, ["show", out, "gaps", "--fmt", "json"], rc=0)
    assert json.loads(cap.out) == [] and "table gaps is empty: for the summary inputs" in cap.err
    cap = err_of(capsys, ["show", out], rc=0)
    assert "table steps is empty: for the summary inputs" in cap.out
