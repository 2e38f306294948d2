"""MTIA (Meta's accelerator) Kineto traces: HTA's MTIA test trace against a plain reading of its
JSON and HTA 0.5.0's figures (../shared/traces/reference/peer_numbers.md); what an MTIA trace
without device activity says."""

import gzip
import json
import math
from collections import defaultdict

import pytest
from testpaths import shared

import dtrace
from dtrace.errors import NoGPUActivity
from dtrace.readers import detect

MTIA = ("kineto", "mtia", "mtia_rank_0.json.gz")
HTA_CCP_EVENTS = 25_814  # peer_numbers.md: HTA 0.5.0 reads 25,814 mtia_ccp_events
HTA_COMPUTATION_US = 7_309_063  # its kernel-type breakdown: computation 7,309,063 µs


def _ns(us: float) -> int:
    """µs float → ns as the event table defines it (integer part and fraction apart)."""
    whole = math.floor(us)
    return int(whole) * 1000 + round((us - whole) * 1000)


@pytest.fixture(scope="module")
def raw():
    with gzip.open(shared(*MTIA)) as f:
        doc = json.load(f)
    ev = doc["traceEvents"]
    base = doc["baseTimeNanoseconds"]
    ccp = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "mtia_ccp_events"]
    launches = {e["args"]["correlation"] for e in ev if e.get("cat") == "mtia_runtime"}
    return {"ccp": ccp, "launches": launches, "base": base}


@pytest.fixture(scope="module")
def res():
    return dtrace.analyze(shared(*MTIA), scheduler="sync")


def _union(iv):
    total, s0, e0 = 0, None, None
    for s, e in sorted(iv):
        if e0 is None or s > e0:
            total += 0 if e0 is None else e0 - s0
            s0, e0 = s, e
        else:
            e0 = max(e0, e)
    return total + (0 if e0 is None else e0 - s0)


def test_device_activity_equals_plain_reading(res, raw):
    ccp = raw["ccp"]
    assert len(ccp) == HTA_CCP_EVENTS
    b = res.breakdown.iloc[0]
    assert b["device"] == 9 and b["gpu_events"] == len(ccp)  # the events' pid: "MTIA 9"
    kernels = defaultdict(list)
    for e in ccp:
        if e["name"] != "dma_request":
            kernels[e["name"]].append(_ns(e["dur"]))
    k = res.kernels.set_index("name")
    compute = k[k["category"] == "compute"]
    assert set(compute.index) == set(kernels)
    for name, durs in kernels.items():
        assert (compute.loc[name, "count"], compute.loc[name, "total_ns"]) == (len(durs), sum(durs)), name
    iv = lambda sel: [  # noqa: E731
        (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in ccp if sel(e)
    ]
    assert b["computation_ns"] == _union(iv(lambda e: e["name"] != "dma_request"))
    assert b["memcpy_ns"] == _union(iv(lambda e: e["name"] == "dma_request"))
    assert b["busy_ns"] == _union(iv(lambda e: True))
    assert b["comm_ns"] == 0


def test_computation_equals_hta(res, raw):
    """HTA sums the durations of the non-memory kernels; no two of them overlap here, so the
    union dtrace measures is the same time."""
    kernels = [e for e in raw["ccp"] if e["name"] != "dma_request"]
    assert _union([(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in kernels]) == sum(
        _ns(e["dur"]) for e in kernels
    )
    assert round(res.breakdown["computation_ns"].iloc[0] / 1000) == HTA_COMPUTATION_US


def test_dma_requests_are_memory_copies(res, raw):
    want = defaultdict(lambda: [0, 0])
    for e in raw["ccp"]:
        if e["name"] == "dma_request":
            d = {"HOST_TO_DEVICE": "H2D", "DEVICE_TO_HOST": "D2H"}[e["args"]["direction"]]
            want[d][0] += 1
            want[d][1] += e["args"]["size"]
    m = res.memops.set_index("op")
    assert {op: [m.loc[op, "count"], m.loc[op, "bytes"]] for op in m.index} == dict(want)
    # DMA requests run beside the kernels that issued them: nothing of an MTIA part is clipped
    raw_total = sum(_ns(e["dur"]) for e in raw["ccp"] if e["name"] == "dma_request")
    assert m["total_ns"].sum() == raw_total
    assert res.breakdown["clipped_events"].iloc[0] == 0 and res.breakdown["clipped_ns"].iloc[0] == 0


def test_kernels_are_linked_to_their_run_function_launches(res, raw):
    """Every MTIA kernel shares its correlation with a runFunction launch: launch statistics, gap
    causes and the host op tree see them."""
    kernels = [e for e in raw["ccp"] if e["name"] != "dma_request"]
    assert all(e["args"]["correlation"] in raw["launches"] for e in kernels)
    ev = detect(shared(*MTIA)).read(shared(*MTIA)).parts[0].events.to_pandas()
    launch = set(ev.loc[ev["kind"] == "runtime", "correlation"])
    k = ev[ev["kind"] == "kernel"]
    assert len(k) == len(kernels) and k["correlation"].isin(launch).all()
    g = res.gaps.set_index("stream")
    assert g.loc[1, "host_wait_ns"] > 0  # causes need launches
    ops = res.ops
    assert ops["subtree_kernels"].max() > 0 and ops["gpu_subtree_ns"].max() > 0


def test_mtia_trace_without_device_events_names_what_is_missing(tmp_path):
    doc = {
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 5.0},
            {
                "ph": "X",
                "cat": "mtia_runtime",
                "name": "runFunction - job_prep_and_submit_for_execution",
                "pid": 1,
                "tid": 1,
                "ts": 2.0,
                "dur": 1.0,
                "args": {"correlation": 7},
            },
        ],
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
    }
    p = tmp_path / "mtia_rank_3.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(NoGPUActivity) as ei:
        detect(str(p)).read(str(p))
    msg = str(ei.value)
    assert "mtia_ccp_events" in msg and "mtia_runtime" in msg and "\n" not in msg
