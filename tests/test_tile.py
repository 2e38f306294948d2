"""dtrace.generate.tile: tiling a real trace in time and replicating it across ranks (bench inputs)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from testpaths import shared

import dtrace
from dtrace.errors import InputError, UsageError
from dtrace.generate.tile import tile_trace

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _load(path) -> dict:
    with open(path, "rb") as f:
        data = f.read()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def _busy_us(events: list[dict]) -> tuple[float, float]:
    """Union length and span of the GPU intervals, in µs (plain numpy, independent of dtrace)."""
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    s = np.array([e["ts"] for e in gpu], float)
    e = s + np.array([e["dur"] for e in gpu], float)
    order = np.argsort(s)
    s, e = s[order], e[order]
    run = np.maximum.accumulate(e)
    first = np.flatnonzero(np.r_[True, s[1:] > run[:-1]])
    last = np.r_[first[1:] - 1, len(s) - 1]
    return float((run[last] - s[first]).sum()), float(e.max() - s.min())


def test_tiles_in_time_with_unique_ids(tmp_path):
    src = shared("kineto", "hta-2rank", "sampled_rank-0.json.gz")
    info = tile_trace(src, tmp_path / "t.json", times=3)
    a, b = _load(src), _load(tmp_path / "t.json")
    ev_a, ev_b = a["traceEvents"], b["traceEvents"]
    n_meta = sum(1 for e in ev_a if e.get("ph") == "M")
    assert info["events"] == len(ev_b) == 3 * len(ev_a) - 2 * n_meta
    assert info["json_bytes"] == (tmp_path / "t.json").stat().st_size
    assert {k: v for k, v in b.items() if k != "traceEvents"} == {k: v for k, v in a.items() if k != "traceEvents"}
    # every copy is shifted by a whole number of periods
    period = info["period_us"]
    ts_a = sorted(e["ts"] for e in ev_a if e.get("ph") == "X")
    ts_b = sorted(e["ts"] for e in ev_b if e.get("ph") == "X")
    expect = sorted(t + i * period for i in range(3) for t in ts_a)
    np.testing.assert_allclose(ts_b, expect, rtol=0, atol=1e-3)
    # linking ids stay unique; launches and kernels stay linked within their copy
    for key in ("correlation", "External id"):
        ids_a = [e["args"][key] for e in ev_a if e.get("cat") == "kernel" and key in e.get("args", {})]
        ids_b = [e["args"][key] for e in ev_b if e.get("cat") == "kernel" and key in e.get("args", {})]
        assert len(ids_b) == 3 * len(ids_a) and len(set(ids_b)) == 3 * len(set(ids_a))
    launches = {
        e["args"]["correlation"]: e["ts"]
        for e in ev_b
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    linked = [
        launches[e["args"]["correlation"]] <= e["ts"]
        for e in ev_b
        if e.get("cat") == "kernel" and e["args"].get("correlation") in launches
    ]
    assert linked and all(linked)
    steps = [e["name"] for e in ev_b if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    assert (
        len(steps)
        == len(set(steps))
        == 3 * sum(1 for e in ev_a if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    )
    # GPU busy time triples (copies do not overlap); the span is two periods plus one
    busy_a, span_a = _busy_us(ev_a)
    busy_b, span_b = _busy_us(ev_b)
    assert busy_b == pytest.approx(3 * busy_a, abs=1e-3)
    assert span_b == pytest.approx(2 * period + span_a, abs=1e-3)
    # and dtrace reads the tiled file as one trace with that GPU time
    r = dtrace.analyze(str(tmp_path / "t.json"), scheduler="sync", compat="tracelens")
    assert int(r.breakdown["busy_ns"].iloc[0]) == pytest.approx(busy_b * 1e3, abs=3 * 1e3)


def test_replicas_per_rank_gzip_and_jitter(tmp_path):
    src = shared("kineto", "single", "mi250_rocm62.json.gz")
    ev_a = _load(src)["traceEvents"]
    outs = [
        tile_trace(src, tmp_path / f"rank-{r}.json.gz", times=1, rank=r, world_size=4, jitter=0.2, seed=3, gzip=True)
        for r in range(2)
    ]
    assert all(o["file_bytes"] < o["json_bytes"] for o in outs)
    docs = [_load(o["path"]) for o in outs]
    assert [d["distributedInfo"]["rank"] for d in docs] == [0, 1]
    assert all(d["distributedInfo"]["world_size"] == 4 for d in docs)
    durs = []
    for d in docs:
        ev = d["traceEvents"]
        assert len(ev) == len(ev_a)
        for e0, e1 in zip(ev_a, ev):
            if e0.get("ph") == "X" and e0.get("cat") in GPU_CATS and e0["dur"] > 0:
                assert 0.8 * e0["dur"] - 1e-3 <= e1["dur"] <= e0["dur"] + 1e-3
            else:
                assert e1.get("dur") == e0.get("dur") and e1.get("ts") == e0.get("ts")
        durs.append([e["dur"] for e in ev if e.get("cat") in GPU_CATS])
    assert durs[0] != durs[1]  # each rank gets its own perturbation
    again = tile_trace(src, tmp_path / "again.json.gz", times=1, rank=1, world_size=4, jitter=0.2, seed=3, gzip=True)
    assert [e.get("dur") for e in _load(again["path"])["traceEvents"]] == [
        e.get("dur") for e in docs[1]["traceEvents"]
    ]  # seeded: reproducible
    r = dtrace.analyze([o["path"] for o in outs], scheduler="sync")
    assert sorted(r.breakdown["rank"].tolist()) == [0, 1]


def test_keeps_timestamp_digits_exactly(tmp_path):
    # absolute µs with ns digits: a float64 cannot hold 1712195495505582.988, the text copy keeps it
    doc = (
        '{"traceEvents": [\n {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, '
        '"ts": 1712195495505582.988, "dur": 4.928, "args": {"correlation": 9, "device": 0, "stream": 7}},\n'
        ' {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, '
        '"ts": 1712195495505580.001, "dur": 2, "args": {"correlation": 9}}\n], "baseTimeNanoseconds": 0}'
    )
    (tmp_path / "src.json").write_text(doc)
    info = tile_trace(tmp_path / "src.json", tmp_path / "t.json", times=2)
    text = (tmp_path / "t.json").read_text()
    p = info["period_us"]
    assert '"ts": 1712195495505582.988' in text and f'"ts": {1712195495505582 + p}.988' in text
    assert f'"ts": {1712195495505580 + p}.001' in text
    assert '"correlation": 9' in text and '"correlation": 19' in text
    assert info["events"] == 4


def test_bad_arguments(tmp_path):
    src = shared("kineto", "single", "mi250_rocm62.json.gz")
    with pytest.raises(UsageError, match="times"):
        tile_trace(src, tmp_path / "x.json", times=0)
    with pytest.raises(UsageError, match="jitter"):
        tile_trace(src, tmp_path / "x.json", times=1, jitter=1.5)
    (tmp_path / "bad.json").write_text('{"schemaVersion": 1}')
    with pytest.raises(InputError, match="traceEvents"):
        tile_trace(tmp_path / "bad.json", tmp_path / "x.json", times=2)
    assert not (tmp_path / "x.json").exists()
