"""SPEC §8: every bad input gets a one-line error naming the file; the other ranks complete."""

import gzip
import json
import os
import subprocess
import sys

import pytest
from testpaths import ROOT, shared

import dtrace
from dtrace.errors import InputError
from dtrace.readers import detect

GOOD = {
    "schemaVersion": 1,
    "distributedInfo": {"rank": 0, "world_size": 2},
    "traceEvents": [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "sgemm",
            "pid": 0,
            "tid": 7,
            "ts": 100.0,
            "dur": 10.0,
            "args": {"device": 0, "stream": 7, "correlation": 1},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 5,
            "tid": 5,
            "ts": 95.0,
            "dur": 2.0,
            "args": {"correlation": 1},
        },
    ],
}


def write(path, doc, gz=False):
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    if gz:
        data = gzip.compress(data)
    path.write_bytes(data)
    return str(path)


def error_of(path):
    with pytest.raises(InputError) as ei:
        detect(path).read(path)
    msg = str(ei.value)
    assert "\n" not in msg
    assert path in msg
    return msg


def test_truncated_gzip(tmp_path):
    full = gzip.compress(json.dumps(GOOD).encode() * 1)
    p = tmp_path / "rank-1.json.gz"
    p.write_bytes(full[: len(full) // 2])
    res = dtrace.analyze(str(p), scheduler="sync")
    (err,) = res.errors
    assert str(p) in err and "\n" not in err
    assert "gzip" in err or "truncated" in err or "ended" in err


def test_invalid_json(tmp_path):
    p = write(tmp_path / "bad.json", b'{"traceEvents": [{"ph": "X", "ts": 1,, }]}')
    assert "invalid JSON" in error_of(p)


def test_no_trace_events(tmp_path):
    p = write(tmp_path / "x.json", {"schemaVersion": 1, "foo": []})
    assert "traceEvents" in error_of(p)


def test_empty_file(tmp_path):
    p = write(tmp_path / "e.json", b"")
    msg = str(pytest.raises(InputError, detect, p).value)
    assert p in msg and "empty" in msg


def test_empty_trace(tmp_path):
    p = write(tmp_path / "e.json", {"traceEvents": []})
    assert "no GPU activity" in error_of(p)


def test_strings_where_numbers_belong(tmp_path):
    doc = json.loads(json.dumps(GOOD))
    doc["traceEvents"][0]["ts"] = "100"
    p = write(tmp_path / "s.json", doc)
    msg = error_of(p)
    assert "ts" in msg and "wrong type" in msg


def test_missing_ts_and_negative_duration(tmp_path):
    doc = json.loads(json.dumps(GOOD))
    del doc["traceEvents"][0]["dur"]
    assert "'dur'" in error_of(write(tmp_path / "nodur.json", doc))
    doc = json.loads(json.dumps(GOOD))
    doc["traceEvents"][0]["dur"] = -5
    assert "negative duration" in error_of(write(tmp_path / "neg.json", doc))


def test_unknown_format(tmp_path):
    p = write(tmp_path / "notes.json", b"hello world")
    msg = str(pytest.raises(InputError, detect, p).value)
    assert "unknown trace format" in msg and "kineto" in msg


@pytest.mark.parametrize("name", ["cpu_only_rank-34", "no_distributed_info", "no_rank_in_distributed_info"])
def test_shared_traces_without_gpu_activity(name):
    res = dtrace.analyze(shared("kineto", "edge", f"{name}.json.gz"), scheduler="sync")
    (err,) = res.errors
    assert "no GPU activity" in err and name in err


def test_mtia_trace_is_read_not_refused():
    """An MTIA trace was refused as "no GPU activity" (issue 19, item 5): its device events are
    GPU work now (issue 22; tests/test_mtia.py checks them against the raw JSON)."""
    path = shared("kineto", "mtia", "mtia_rank_0.json.gz")
    with gzip.open(path, "rb") as f:
        cats = [e.get("cat") for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    res = dtrace.analyze(path, scheduler="sync")
    assert res.errors == []
    assert int(res.breakdown["gpu_events"].iloc[0]) == cats.count("mtia_ccp_events")


def test_no_gpu_activity_names_the_categories_it_found(tmp_path):
    doc = {
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0.0, "dur": 9.0},
            *(
                {"ph": "X", "cat": "npu_device_ops", "name": "matmul", "pid": 9, "tid": 2, "ts": 1.0 + i, "dur": 0.5}
                for i in range(3)
            ),
        ]
    }
    err = error_of(write(tmp_path / "npu.json", doc))
    assert "no GPU activity" in err and "npu_device_ops (3)" in err, err


def test_valid_edge_traces_are_analysed():
    for name, kernels in [("old_capitalized_categories_rank_1", 4), ("arg_above_int64_rank-70", 1)]:
        res = dtrace.analyze(shared("kineto", "edge", f"{name}.json.gz"), scheduler="sync")
        assert res.errors == []
        assert int(res.breakdown["gpu_events"].iloc[0]) == kernels


def test_multi_file_run_good_ranks_complete(tmp_path):
    """Truncated gzip, invalid JSON, no traceEvents, empty trace, duplicate rank + two good files."""
    d = tmp_path / "job"
    d.mkdir()
    good0 = write(d / "rank-0.json", GOOD)
    g1 = json.loads(json.dumps(GOOD))
    g1["distributedInfo"]["rank"] = 1
    write(d / "rank-1.json", g1)
    full = gzip.compress(json.dumps(GOOD).encode())
    (d / "rank-2.json.gz").write_bytes(full[:40])
    write(d / "rank-3.json", b'{"traceEvents": [ {"ph": ')
    write(d / "rank-4.json", {"schemaVersion": 1})
    write(d / "rank-5.json", {"traceEvents": []})
    dup = json.loads(json.dumps(GOOD))
    dup["distributedInfo"]["rank"] = 7
    write(d / "a_rank-7.json", dup)
    write(d / "b_rank-7.json", dup)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "dtrace", "analyze", str(d), "-o", str(out), "--sync"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 1, proc.stderr
    res = dtrace.load(out)
    assert sorted(res.breakdown["rank"].tolist()) == [0, 1]
    status = {os.path.basename(i["path"]): i for i in res.manifest["inputs"]}
    assert status["rank-0.json"]["status"] == "ok" and status["rank-1.json"]["status"] == "ok"
    for bad in ["rank-2.json.gz", "rank-3.json", "rank-4.json", "rank-5.json", "a_rank-7.json", "b_rank-7.json"]:
        assert status[bad]["status"] == "error", bad
        err = status[bad]["error"]
        assert "\n" not in err and bad in err
        assert bad in proc.stdout  # the summary lists the failure
    assert "also claimed by b_rank-7.json" in status["a_rank-7.json"]["error"]
    assert good0 in [i["path"] for i in res.manifest["inputs"]]


def test_nothing_analysable_exits_2(tmp_path):
    p = write(tmp_path / "rank-0.json", {"traceEvents": []})
    proc = subprocess.run(
        [sys.executable, "-m", "dtrace", "analyze", p, "-o", str(tmp_path / "o"), "--sync"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 2


def test_usage_error_exits_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "dtrace", "analyze", str(tmp_path / "nope"), "-o", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "no such file" in proc.stderr


def test_memcpy_bytes_beyond_int64_are_unknown_not_a_failed_input(tmp_path):
    """Issue 31: a memcpy with ``args.bytes: 1e30`` failed its whole input as "internal error
    (OverflowError)"; such a size (and NaN, infinity, a negative one) is unknown (-1), on the
    compiled scanner's path and on the pure one alike."""
    src = os.path.join(os.path.dirname(__file__), "data", "h200", "ops_rank0.pt.trace.json.gz")
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    copies = [e for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy"]
    for e, b in zip(copies, (1e30, -5, 2.0**64)):
        e["args"]["bytes"] = b
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps(doc))
    from dtrace.readers import detect

    for pure in ("0", "1"):
        os.environ["DTRACE_PURE_SCAN"] = pure
        try:
            tf = detect(str(path)).read(str(path))
        finally:
            os.environ.pop("DTRACE_PURE_SCAN", None)
        got = tf.parts[0].memcpy.to_pandas()
        assert (got["bytes"] >= -1).all() and (got["bytes"] == -1).sum() >= 3
