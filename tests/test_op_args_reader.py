"""The Kineto reader's ``op_args`` and ``devices`` side tables, checked against a plain reading of
the raw JSON (``json.load``): every host op with a performance model that recorded shapes, at its
row, with its four texts (the arguments of the other ops are never read: not kept)."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest
from testpaths import ROOT, shared

from dtrace.core.schema import ARGS_SEP
from dtrace.execution.tasks import load_batch
from dtrace.ingest import cache
from dtrace.ingest.ranks import part_spec
from dtrace.knowledge import opmodel
from dtrace.options import Options
from dtrace.readers import kineto

H200 = os.path.join(ROOT, "tests", "data", "h200", "ops_rank0.pt.trace.json.gz")


def _raw(path: str) -> dict:
    with gzip.open(path) as f:
        return json.load(f)


def _kept(e: dict) -> bool:
    """A host op whose recorded arguments the reader keeps: it has a model and recorded shapes."""
    return (
        e.get("ph") == "X" and e.get("cat") == "cpu_op" and "Input Dims" in e.get("args", {})
        and opmodel.priority(e["name"]) == opmodel.MODEL
    )  # fmt: skip


@pytest.mark.parametrize("block", [None, 1 << 16])  # the whole-document and the chunked decoding
def test_op_args_hold_every_recorded_op(block):
    doc = _raw(H200)
    want = [
        (
            e["name"],
            e["args"]["Input Dims"],
            e["args"]["Input type"],
            e["args"]["Input Strides"],
            e["args"]["Concrete Inputs"],
        )
        for e in doc["traceEvents"]
        if _kept(e)
    ]
    recorded = sum(1 for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and "Input Dims" in e.get("args", {}))
    tf = kineto.read_kineto(H200, **({"block": block, "max_event_size": 1 << 20} if block else {}))
    part = tf.parts[0]
    oa = part.side["op_args"].to_pydict()
    names = part.events.column("name").to_pylist()
    got = [
        (names[r], json.loads(d), json.loads(t), json.loads(s), json.loads(c))
        for r, (d, t, s, c) in zip(oa["row"], (a.split(ARGS_SEP)[:4] for a in oa["args"]))
    ]
    assert recorded == 1418 and len(want) == 358 and sorted(map(repr, got)) == sorted(map(repr, want))
    assert part.side["op_args"].column("args").type.value_type == "string"  # dictionary-encoded text
    assert len(part.side["op_args"].column("args").unique()) < 200  # a few hundred distinct combinations


def test_devices_from_device_properties():
    doc = _raw(H200)
    [dev] = doc["deviceProperties"]
    tf = kineto.read_kineto(H200)
    row = tf.parts[0].side["devices"].to_pylist()
    assert row == [
        {
            "device": 0,
            "name": dev["name"],
            "vendor": "nvidia",
            "capability": f"{dev['computeMajor']}.{dev['computeMinor']}",
            "sms": dev["numSms"],
            "memory_bytes": dev["totalGlobalMem"],
        }
    ]


def test_amd_device_and_a_trace_without_device_properties():
    tf = kineto.read_kineto(shared("kineto", "single", "mi300_resnet_rccl_rank0.json.gz"))
    [row] = tf.parts[0].side["devices"].to_pylist()
    assert (row["name"], row["vendor"], row["capability"], row["sms"]) == ("AMD Instinct MI300X", "amd", "9.4", 304)
    path = shared("kineto", "hta-2rank", "sampled_rank-0.json.gz")
    tf = kineto.read_kineto(path)
    n_dims = sum(1 for e in _raw(path)["traceEvents"] if _kept(e))
    assert tf.parts[0].side["devices"].num_rows == 0  # no deviceProperties
    assert tf.parts[0].side["op_args"].num_rows == n_dims == 1093


def test_rows_follow_dropped_events_and_devices(tmp_path):
    """An implausible event before a host op shifts its row; a second GPU gets its own part."""

    def op(name, ts, dims):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 5,
                "args": {"Input Dims": dims, "Input type": ["float"] * len(dims), "Input Strides": [[1]] * len(dims),
                         "Concrete Inputs": [""] * len(dims)}}  # fmt: skip

    def kernel(dev, ts):
        return {"ph": "X", "cat": "kernel", "name": f"k{dev}", "pid": dev, "tid": 7, "ts": ts, "dur": 3,
                "args": {"device": dev, "stream": 7, "correlation": -1}}  # fmt: skip

    events = [
        {"ph": "X", "cat": "cpu_op", "name": "bad", "pid": 1, "tid": 1, "ts": 10, "dur": -4},  # dropped
        op("aten::mm", 20, [[2, 3], [3, 4]]),
        kernel(0, 30),
        kernel(1, 31),
        op("aten::add", 40, [[4]]),
        op("aten::view", 50, [[4]]),  # no model: its arguments are not kept
    ]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 1, "name": "NVIDIA H100 PCIe"}]}))
    tf = kineto.read_kineto(str(path))
    assert [p.device for p in tf.parts] == [0, 1]
    for p in tf.parts:
        names = p.events.column("name").to_pylist()
        oa = p.side["op_args"].to_pydict()
        assert [names[r] for r in oa["row"]] == ["aten::mm", "aten::add"]
        assert [json.loads(a.split(ARGS_SEP)[0]) for a in oa["args"]] == [[[2, 3], [3, 4]], [[4]]]
    assert tf.parts[0].side["devices"].num_rows == 0
    assert tf.parts[1].side["devices"].to_pylist()[0]["name"] == "NVIDIA H100 PCIe"


def test_cached_side_tables_reach_the_batch(tmp_path):
    rec = cache.ingest(H200, str(tmp_path / "cache"))
    assert rec.error is None, rec.error
    batch = load_batch([part_spec(rec, rec.parts[0], 0)], Options())
    oa = batch.side_table("op_args")
    dev = batch.side_table("devices")
    assert len(oa) == 358 and set(oa["part"]) == {0} and len(dev) == 1
    rows = oa["row"].to_numpy(np.int64)
    host = batch.host.set_index("row")
    assert (host.loc[rows, "kind"].astype(str) == "cpu_op").all()
