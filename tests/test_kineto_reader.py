"""Kineto reader details: devices, string ids, time conversion, side tables, chunking."""

import gzip
import json

import numpy as np
import pytest
from testpaths import shared

import dtrace
from dtrace.core.schema import us_to_ns, validate_events
from dtrace.readers.kineto import read_kineto


def kernel(name, ts, dur, dev, stream, corr, **args):
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": dev,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"device": dev, "stream": stream, "correlation": corr, **args},
    }


def test_two_gpus_in_one_file_become_two_parts(tmp_path):
    doc = {
        "distributedInfo": {"rank": 3},
        "baseTimeNanoseconds": 1_000_000_000_000,
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": "host-a", "tid": "main", "ts": 0.5, "dur": 50},
            kernel("gemm0", 1.0, 2.0, 0, 7, 1),
            kernel("gemm1", 1.5, 4.0, 1, 9, 2),
            kernel("gemm1", 10, 1.0, 1, 9, 3),
        ],
    }
    p = tmp_path / "two.json"
    p.write_text(json.dumps(doc))
    tf = read_kineto(str(p))
    assert [pt.device for pt in tf.parts] == [0, 1]
    assert tf.rank_hint == 3
    res = dtrace.analyze(str(p), scheduler="sync")
    bd = res.breakdown.sort_values("device")
    assert bd[["rank", "device"]].values.tolist() == [[3, 0], [3, 1]]
    assert bd["busy_ns"].tolist() == [2000, 5000]
    assert bd["first_ns"].tolist() == [1_000_000_001_000, 1_000_000_001_500]
    # string pid/tid map to stable ints; host events shared by both parts
    ev = tf.parts[0].events.to_pandas()
    host = ev[ev["device"] == -1]
    assert host["pid"].iloc[0] == read_kineto(str(p)).parts[1].events.to_pandas().query("device == -1")["pid"].iloc[0]
    assert host["pid"].iloc[0] > 0


def test_time_conversion_keeps_ns_at_absolute_us():
    t = np.array([1712195495505582.75, 1712195495505582.988, 2.25, 123.456])
    # 1712195495505582.988 decodes to ...583.0 (float64 spacing 0.25 there); round(t*1000) would be off by 128 ns
    assert us_to_ns(t).tolist() == [1712195495505582750, 1712195495505583000, 2250, 123456]
    assert int(round(1712195495505582.75 * 1000)) != 1712195495505582750


def test_side_tables_collectives_and_memcpy():
    tf = read_kineto(shared("kineto", "single", "mi300_resnet_rccl_rank0.json.gz"))
    part = tf.parts[0]
    coll = part.collectives.to_pandas()
    ev = part.events.to_pandas()
    assert len(coll) == 12
    assert set(coll["collective"]) == {"all_reduce", "broadcast"}
    names = ev.loc[coll["row"], "name"].astype(str)
    assert names.str.contains("nccl|rccl", case=False).all()
    bf16 = coll[coll["dtype"] == "BFloat16"]
    assert (bf16["bytes"] == bf16["in_nelems"] * 2).all()
    mem = part.memcpy.to_pandas()
    assert len(mem) == 550 + 108  # PROVENANCE.md: 550 memcpy, 108 memset
    kinds = ev.loc[mem["row"], "kind"].astype(str).to_numpy()
    assert (kinds[mem["copy_kind"] == "memset"] == "memset").all() and (kinds == "memset").sum() == 108
    assert set(mem.loc[mem["copy_kind"] != "memset", "copy_kind"]) <= {"H2D", "D2H", "D2D", "P2P", "H2H", "other"}


@pytest.mark.parametrize("block", [4096, 65536])
def test_small_blocks_give_identical_tables(block):
    path = shared("kineto", "hta-2rank", "sampled_rank-0.json.gz")
    whole = read_kineto(path).parts[0].events
    chunked = read_kineto(path, block=block).parts[0].events
    assert whole.num_rows == chunked.num_rows
    for col in ("start_ns", "end_ns", "correlation", "stream", "device"):
        assert whole.column(col).to_pylist() == chunked.column(col).to_pylist()
    assert whole.column("name").to_pylist() == chunked.column("name").to_pylist()


def test_one_line_json_and_keys_after_events(tmp_path):
    """Trace on one line, baseTimeNanoseconds after traceEvents, braces inside names."""
    evs = [kernel("k{lambda()#1}, {x}", float(i), 1.0, 0, 7, i) for i in range(300)]
    text = '{"traceEvents": ' + json.dumps(evs, separators=(",", ":")) + ', "baseTimeNanoseconds": 5000}'
    p = tmp_path / "rank0.json.gz"
    p.write_bytes(gzip.compress(text.encode()))
    tf = read_kineto(str(p), block=1024)
    ev = tf.parts[0].events.to_pandas()
    assert len(ev) == 300
    assert ev["start_ns"].tolist() == [5000 + 1000 * i for i in range(300)]
    assert set(ev["name"].astype(str)) == {"k{lambda()#1}, {x}"}
    validate_events(tf.parts[0].events)


def test_bare_array_trace(tmp_path):
    p = tmp_path / "arr_rank2.json"
    p.write_text(json.dumps([kernel("k", 1.0, 1.0, 0, 7, 1)]))
    res = dtrace.analyze(str(p), scheduler="sync")
    assert res.breakdown["rank"].tolist() == [2]
