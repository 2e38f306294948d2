"""Device memory from the profiler's ``[memory]`` instant events (issue 21): the reader's side
table, the ``memory`` and ``memory_timeline`` tables, checked against a plain reading of the JSON."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, shared
from rawtrace import to_ns

from dtrace.readers import detect

H200 = os.path.join(ROOT, "tests", "data", "h200", "host_rank0.pt.trace.json.gz")


def raw_memory(path: str) -> pd.DataFrame:
    """Every ``[memory]`` instant event of a trace, as the JSON states it (absolute ns)."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    base = int(doc.get("baseTimeNanoseconds") or 0)
    rows = [
        (e["ts"], e["tid"], e["args"]["Device Type"], e["args"]["Device Id"], e["args"]["Bytes"],
         e["args"]["Total Allocated"], e["args"]["Total Reserved"])
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
