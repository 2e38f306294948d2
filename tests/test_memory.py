"""Device memory from the profiler's ``[memory]`` instant events (issue 21): the reader's side
table, the ``memory`` and ``memory_timeline`` tables, checked against a plain reading of the JSON."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pandas as pd
import pytest
from rawtrace import to_ns
from testpaths import ROOT, shared

from dtrace.readers import detect

H200 = os.path.join(ROOT, "tests", "data", "h200", "host_rank0.pt.trace.json.gz")


def raw_memory(path: str) -> pd.DataFrame:
    """Every ``[memory]`` instant event of a trace, as the JSON states it (absolute ns)."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    base = int(doc.get("baseTimeNanoseconds") or 0)
    rows = [
        (
            e["ts"],
            e["tid"],
            e["args"]["Device Type"],
            e["args"]["Device Id"],
            e["args"]["Bytes"],
            e["args"]["Total Allocated"],
            e["args"]["Total Reserved"],
        )
        for e in doc["traceEvents"]
        if e.get("ph") == "i" and e.get("name") == "[memory]"
    ]
    df = pd.DataFrame(rows, columns=["ts", "tid", "device_type", "device_id", "bytes", "allocated", "reserved"])
    df["time_ns"] = to_ns(df["ts"].to_numpy()) + base
    return df


@pytest.mark.parametrize("path", [H200, "h100_owlv2"])
def test_reader_keeps_the_device_memory_events_of_each_gpu(path):
    path = path if os.path.isabs(path) else shared("kineto", "single", f"{path}.json.gz")
    raw = raw_memory(path)
    gpu = raw.loc[(raw["device_type"] != 0) & (raw["device_id"] >= 0)]
    assert len(gpu) > 1000 and len(gpu) < len(raw)  # CPU memory events are left out
    tf = detect(path).read(path)
    got = pd.concat([p.side_tables()["memory"].to_pandas().assign(device=p.device) for p in tf.parts])
    assert len(got) == len(gpu)
    assert (got["device"].to_numpy() == gpu["device_id"].to_numpy()).all()
    for col in ("time_ns", "bytes", "allocated", "reserved"):
        assert (got[col].to_numpy() == gpu[col].to_numpy(np.int64)).all(), col


@pytest.fixture(scope="module")
def results():
    import dtrace

    out = {}
    for name, path in (("h200", H200), ("h100", os.path.join(shared("kineto", "single"), "h100_owlv2.json.gz"))):
        out[name] = (path, dtrace.analyze(path, scheduler="sync"))
    return out


@pytest.mark.parametrize("name", ["h200", "h100"])
def test_peak_is_the_largest_total_allocated_of_the_json(results, name):
    path, res = results[name]
    raw = raw_memory(path)
    gpu = raw.loc[(raw["device_type"] != 0) & (raw["device_id"] == 0)].reset_index(drop=True)
    m = res.memory.iloc[0]
    assert m["peak_allocated_bytes"] == gpu["allocated"].max()
    assert m["peak_reserved_bytes"] == gpu["reserved"].max()
    first = int(gpu["allocated"].to_numpy().argmax())  # the first event at the peak
    assert m["peak_ns"] == gpu["time_ns"].iloc[first]
    assert m["events"] == len(gpu) and m["allocated_bytes"] == gpu.loc[gpu["bytes"] > 0, "bytes"].sum()
    assert m["end_allocated_bytes"] == gpu["allocated"].iloc[-1]
    # the op: the innermost (latest-starting) cpu_op of the allocating thread around that moment
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    t_us = gpu["ts"].iloc[first]
    ops = [
        (e["ts"], e["name"])
        for e in doc["traceEvents"]
        if e.get("ph") == "X"
        and e.get("cat") == "cpu_op"
        and e.get("tid") == gpu["tid"].iloc[first]
        and e["ts"] <= t_us < e["ts"] + max(e["dur"], 0.001)
    ]
    assert m["peak_op"] == max(ops)[1]
    tl = res.memory_timeline
    assert tl["allocated_max_bytes"].max() == m["peak_allocated_bytes"]
    assert tl["reserved_max_bytes"].max() == m["peak_reserved_bytes"]
    assert len(tl) <= 100  # the default bins
    x = res.memory_xrank
    assert x["peak_op"].tolist() == [m["peak_op"]] and x["peak_max_bytes"].tolist() == [m["peak_allocated_bytes"]]


def test_traces_without_memory_events_have_no_memory_rows():
    import dtrace

    res = dtrace.analyze(shared("kineto", "hta-2rank"), scheduler="sync")
    assert len(res.memory) == 0 and len(res.memory_timeline) == 0 and len(res.memory_xrank) == 0
    assert list(res.memory.columns)[:3] == ["rank", "device", "events"]
