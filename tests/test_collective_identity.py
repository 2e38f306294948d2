"""Collective identity of comm kernels from their enclosing ``record_param_comms`` (issue 14).

Kernels that carry no collective args (RCCL ``ncclDevKernel_Generic``, older Kineto) take them from
the ``record_param_comms`` op whose time window holds their launch call on the same thread. The
expected values are read from the raw JSON here, with plain loops, and from TraceLens's reference
collective table; the traces are the shared ones with the kernels' own collective args removed.
"""

import csv
import gzip
import json

import numpy as np
import pytest
from testpaths import shared

import dtrace
from dtrace.knowledge.classify import BuiltinClassifier, collective_label
from dtrace.readers._collective_args import _enclosing
from dtrace.readers.kineto import read_kineto

COLL_ARGS = (
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "dtype",
    "Process Group Name",
    "Process Group Ranks",
    "Process Group Description",
    "In split size",
    "Out split size",
    "Seq",
)
NORMAL = {"allreduce": "all_reduce", "broadcast": "broadcast"}  # c10d's names -> dtrace's
WIDTH = {"BFloat16": 2, "Float": 4, "Long": 8}  # bytes per element


def _stripped(src: str, dst) -> tuple[str, dict]:
    """Write ``src`` without the kernels' collective args; return the path and the raw document."""
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            for k in COLL_ARGS:
                e.get("args", {}).pop(k, None)
    dst.write_text(json.dumps(doc))
    with gzip.open(src, "rt") as f:
        return str(dst), json.load(f)


def _expected(doc: dict) -> dict[int, dict]:
    """Kernel correlation -> args of the innermost record_param_comms enclosing its launch (loops)."""
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    launches = {
        e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    recs = [e for e in ev if e.get("name") == "record_param_comms"]
    out = {}
    for k in ev:
        if k.get("cat") != "kernel" or "nccl" not in k["name"].lower():
            continue
        launch = launches.get(k["args"]["correlation"])
        if launch is None:
            continue
        around = [
            r
            for r in recs
            if r["pid"] == launch["pid"] and r["tid"] == launch["tid"] and r["ts"] <= launch["ts"] < r["ts"] + r["dur"]
        ]
        if around:
            out[k["args"]["correlation"]] = max(around, key=lambda r: r["ts"])["args"]
    return out


def _side(path: str):
    part = read_kineto(path).parts[0]
    ev = part.events.to_pandas()
    coll = part.collectives.to_pandas().set_index("row")
    return ev, coll


@pytest.mark.parametrize(
    "trace, n_named, n_comm", [("mi300_resnet_rccl_rank0.json.gz", 12, 17), ("a100_nccl_collectives.json.gz", 21, 21)]
)
def test_kernels_without_args_take_them_from_record_param_comms(tmp_path, trace, n_named, n_comm):
    src = shared("kineto", "single", trace)
    path, doc = _stripped(src, tmp_path / "stripped.json")
    expected = _expected(doc)
    assert len(expected) == n_named  # kernels whose launch is in the trace (the others ran before it)
    ev, coll = _side(path)
    comm = ev.index[(ev["kind"] == "kernel") & ev["name"].astype(str).str.contains("nccl", case=False)]
    assert len(comm) == n_comm
    assert len(coll) == n_named and set(coll.index) <= set(comm)
    for row, c in coll.iterrows():
        a = expected[int(ev.loc[row, "correlation"])]
        assert c["collective"] == NORMAL[a["Collective name"]]
        assert c["group"] == a["Process Group Name"] and c["group_ranks"] == a["Process Group Ranks"]
        assert c["group_size"] == a["Group size"] and c["dtype"] == a["dtype"]
        assert c["in_nelems"] == a["In msg nelems"] and c["out_nelems"] == a["Out msg nelems"]
        assert c["bytes"] == max(a["In msg nelems"], a["Out msg nelems"]) * WIDTH[a["dtype"]]
    # the same as the kernels' own args in the unmodified trace (where Kineto copied them)
    _, own = _side(src)
    assert own.equals(coll)


def test_rccl_collectives_agree_with_tracelens(tmp_path):
    """TraceLens's collective table for the MI300 trace: per (collective, dtype, size) count and time."""
    path, _ = _stripped(shared("kineto", "single", "mi300_resnet_rccl_rank0.json.gz"), tmp_path / "t.json")
    with open(shared("reference", "mi300_resnet_rccl_rank0.tracelens_coll_analysis.csv")) as f:
        ref = list(csv.DictReader(f))
    res = dtrace.analyze(path, scheduler="sync")
    c = res.collectives
    named = c.loc[c["group"] != "stream 4"]
    assert len(named) == sum(int(r["operation_count"]) for r in ref) == 12
    for r in ref:
        nbytes = round(float(r["In msg size (MB)_first"]) * 2**20)
        sel = named.loc[(named["op"] == NORMAL[r["Collective name"]]) & (named["bytes"] == nbytes)]
        assert len(sel) == int(r["operation_count"])
        assert (sel["group"] == r["Process Group Name"]).all() and (sel["group_size"] == 8).all()
        assert sel["duration_ns"].sum() == pytest.approx(float(r["dur_sum"]) * 1000, abs=len(sel))
        assert sel["duration_ns"].max() == pytest.approx(float(r["dur_max"]) * 1000, abs=1)
    # the five kernels launched before the trace began stay unnamed (nothing in the trace names them)
    assert (c.loc[c["group"] == "stream 4", "op"] == "other").sum() == 5


def _trace(events: list[dict]) -> dict:
    return {
        "schemaVersion": 1,
        "distributedInfo": {"rank": 0, "world_size": 2},
        "baseTimeNanoseconds": 0,
        "traceEvents": events,
    }


def _x(cat, name, pid, tid, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_innermost_enclosing_op_and_what_does_not_inherit(tmp_path):
    coalesced = {
        "Collective name": "allreduce_coalesced",
        "dtype": "Float",
        "In msg nelems": 100,
        "Out msg nelems": 100,
        "Group size": 2,
        "Process Group Name": "3",
        "Process Group Ranks": "[0, 1]",
    }
    inner = dict(
        coalesced, **{"Collective name": "allgather", "In msg nelems": 10, "Out msg nelems": 20, "dtype": "BFloat16"}
    )
    own = dict(inner, **{"Collective name": "reduce_scatter"})
    nccl = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
    ev = [
        _x("cpu_op", "record_param_comms", 1, 1, 100, 100, **coalesced),  # outer op: 100..200
        _x("cpu_op", "record_param_comms", 1, 1, 110, 20, **inner),  # inner op: 110..130
        _x("cuda_runtime", "cudaLaunchKernel", 1, 1, 115, 5, correlation=1),  # inside inner
        _x("cuda_runtime", "cudaLaunchKernel", 1, 1, 150, 5, correlation=2),  # after inner: outer
        _x("cuda_runtime", "cudaMemsetAsync", 1, 1, 160, 5, correlation=3),  # a memset of the buffer
        _x("cuda_runtime", "cudaLaunchKernel", 1, 1, 170, 5, correlation=4),  # a copy kernel
        _x("cuda_runtime", "cudaLaunchKernel", 1, 2, 120, 5, correlation=5),  # other thread
        _x("cuda_runtime", "cudaLaunchKernel", 1, 1, 300, 5, correlation=6),  # after every op
        _x("cuda_runtime", "cudaLaunchKernel", 1, 1, 180, 5, correlation=7),  # inside, own args
        _x("kernel", nccl, 0, 7, 1000, 50, device=0, stream=7, correlation=1),
        _x("kernel", nccl, 0, 7, 1100, 50, device=0, stream=7, correlation=2),
        _x("gpu_memset", "Memset (Device)", 0, 7, 1200, 5, device=0, stream=7, correlation=3, bytes=64),
        _x("kernel", "void at::native::copy_kernel", 0, 7, 1300, 5, device=0, stream=7, correlation=4),
        _x("kernel", nccl, 0, 7, 1400, 50, device=0, stream=7, correlation=5),
        _x("kernel", nccl, 0, 7, 1500, 50, device=0, stream=7, correlation=6),
        _x(
            "kernel",
            "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL",
            0,
            7,
            1600,
            50,
            device=0,
            stream=7,
            correlation=7,
            **own,
        ),
    ]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_trace(ev)))
    ev_t, coll = _side(str(p))
    by_corr = {int(ev_t.loc[r, "correlation"]): c for r, c in coll.iterrows()}
    assert sorted(by_corr) == [1, 2, 7]
    assert by_corr[1]["collective"] == "all_gather" and by_corr[1]["bytes"] == 20 * 2
    assert by_corr[2]["collective"] == "all_reduce" and by_corr[2]["bytes"] == 100 * 4
    assert by_corr[2]["group"] == "3" and by_corr[2]["group_size"] == 2
    assert by_corr[7]["collective"] == "reduce_scatter"  # its own args win


def test_enclosing_by_hand():
    z = np.zeros(4, np.int64)
    # ops on thread 0: A 0..100 holding B 10..20 and C 30..40; launches at 15 (B), 35 (C), 50 (A), 100 (none)
    got = _enclosing(z, z, np.array([15, 35, 50, 100]), z[:3], z[:3], np.array([0, 10, 30]), np.array([100, 20, 40]))
    assert got.tolist() == [1, 2, 0, -1]
    # a launch on another thread finds nothing
    assert _enclosing(
        z[:1] + 1, z[:1], np.array([15]), z[:3], z[:3], np.array([0, 10, 30]), np.array([100, 20, 40])
    ).tolist() == [-1]


def test_class_and_nccl_label_from_the_collective():
    clf = BuiltinClassifier()
    generic = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
    names = [generic, generic, generic, "ncclDevKernel_AllGather_RING_LL", "sm90_xmma_gemm_bf16"]
    got = clf.classify(
        names,
        ["kernel"] * 5,
        ["comm", "comm", "comm", "comm", "compute"],
        collectives=["all_reduce", "broadcast", "", "all_reduce", "all_reduce"],
    )
    # the name decides where it names the collective; args only name the generic kernel
    assert got == ["nccl_allreduce", "nccl_broadcast", "nccl_other", "nccl_allgather", "gemm"]
    assert [collective_label(generic, c) for c in ("all_reduce", "broadcast", "")] == [
        "AllReduce",
        "Broadcast",
        "Generic",
    ]
    assert collective_label("ncclDevKernel_AllGather_RING_LL", "all_reduce") == "AllGather"
