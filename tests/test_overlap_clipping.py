"""Same-stream overlap is clipped only where it is an artefact (issue 14).

ROCm parts (a ``hip*`` runtime call or an ``__amd_rocclr_*`` copy kernel) clip every event that
runs past the next event's start on its stream, as before; other parts keep kernel-on-kernel
overlap (programmatic dependent launch) and clip only overlap into or out of a memory operation.
Expected numbers are computed here from the raw JSON or by hand.
"""

import gzip
import json

import numpy as np
import pandas as pd
import pytest
from rawtrace import to_ns
from testpaths import shared

import dtrace
from dtrace.analyses import run_analyses
from dtrace.analyses.batch import prepare, prepare_part
from dtrace.core.schema import COLLECTIVE_SCHEMA, MEMCPY_SCHEMA
from dtrace.options import Options
from dtrace.readers import detect


def _events(rows, launch_name):
    """Events of one part: GPU rows (name, stream, start, end, kind, correlation) on device 0,
    each launched by a ``launch_name`` call 5 ns before it."""
    recs = []
    for name, stream, s, e, kind, corr in rows:
        recs.append(
            dict(
                device=0,
                stream=stream,
                pid=0,
                tid=stream,
                kind=kind,
                name=name,
                start_ns=s,
                end_ns=e,
                correlation=corr,
                external_id=-1,
            )
        )
        recs.append(
            dict(
                device=-1,
                stream=-1,
                pid=1,
                tid=1,
                kind="runtime",
                name=launch_name,
                start_ns=s - 5,
                end_ns=s - 4,
                correlation=corr,
                external_id=-1,
            )
        )
    ev = pd.DataFrame(recs)
    ev.insert(0, "rank", np.int32(0))
    for c in ("kind", "name"):
        ev[c] = ev[c].astype("category")
    return ev


# b overlaps a (kernel on kernel, 40 ns); c (a memcpy) starts 10 ns before b ends; d on another stream
ROWS = [
    ("a", 7, 100, 200, "kernel", 1),
    ("b", 7, 160, 260, "kernel", 2),
    ("c", 7, 250, 300, "memcpy", 3),
    ("d", 8, 120, 400, "kernel", 4),
]


def _kernels(batch):
    t = run_analyses(batch, only={"kernels", "breakdown"})
    return t["kernels"].set_index("name")["total_ns"], t["breakdown"]


def _empty_side():
    return COLLECTIVE_SCHEMA.empty_table().to_pandas(), MEMCPY_SCHEMA.empty_table().to_pandas()


def test_cuda_kernels_keep_their_overlap_memcpy_overlap_is_cut():
    coll, mem = _empty_side()
    b = prepare_part(_events(ROWS, "cudaLaunchKernel"), coll, mem, rank=0, device=0, fmt="kineto", options=Options())
    tot, bd = _kernels(b)
    # a keeps 100 (overlap with kernel b is PDL); b is cut at the memcpy c: 250 - 160
    assert (tot["a"], tot["b"], tot["c"], tot["d"]) == (100, 90, 50, 280)
    assert bd[["clipped_events", "clipped_ns"]].iloc[0].tolist() == [1, 10]
    assert not bool(b.parts["rocm"].iloc[0])


def test_rocm_every_overlap_is_cut():
    coll, mem = _empty_side()
    b = prepare_part(_events(ROWS, "hipLaunchKernel"), coll, mem, rank=0, device=0, fmt="kineto", options=Options())
    tot, bd = _kernels(b)
    assert (tot["a"], tot["b"], tot["c"], tot["d"]) == (60, 90, 50, 280)  # a cut at b (160), b at c (250)
    assert bd[["clipped_events", "clipped_ns"]].iloc[0].tolist() == [2, 40 + 10]
    assert bool(b.parts["rocm"].iloc[0])


def test_tracelens_mode_clips_nothing():
    coll, mem = _empty_side()
    b = prepare_part(
        _events(ROWS, "hipLaunchKernel"), coll, mem, rank=0, device=0, fmt="kineto", options=Options(compat="tracelens")
    )
    tot, bd = _kernels(b)
    assert (tot["a"], tot["b"]) == (100, 100) and int(bd["clipped_events"].iloc[0]) == 0


def test_rule_is_per_part_in_a_mixed_batch():
    """One batch of a CUDA part and a ROCm part (a ROCm copy kernel, no hip call): each its rule."""
    rocm_rows = [(n if n != "c" else "__amd_rocclr_copyBuffer", s, a, z, "kernel", k) for n, s, a, z, _, k in ROWS]
    cuda = _events(ROWS, "cudaLaunchKernel").assign(part=np.int32(0))
    rocm = _events(rocm_rows, "launch").assign(part=np.int32(1), rank=np.int32(1))
    ev = pd.concat(
        [cuda.astype({"kind": str, "name": str}), rocm.astype({"kind": str, "name": str})], ignore_index=True
    )
    ev["row"] = np.r_[np.arange(len(cuda)), np.arange(len(rocm))]
    for c in ("kind", "name"):
        ev[c] = ev[c].astype("category")
    parts = pd.DataFrame(
        {
            "part": np.array([0, 1], np.int32),
            "rank": np.array([0, 1], np.int32),
            "device": np.zeros(2, np.int32),
            "format": ["kineto", "kineto"],
            "base_ns": np.zeros(2, np.int64),
        }
    )
    coll, mem = _empty_side()
    b = prepare(
        ev, {"collectives": coll.assign(part=np.int32(0)), "memcpy": mem.assign(part=np.int32(0))}, parts, Options()
    )
    assert b.parts["rocm"].tolist() == [False, True]
    assert b.parts["clipped_events"].tolist() == [1, 2]
    k = run_analyses(b, only={"kernels"})["kernels"].set_index(["rank", "name"])["total_ns"]
    assert (k[(0, "a")], k[(1, "a")]) == (100, 60)


def _stretch(src, dst, pick):
    """Copy a Kineto trace with one kernel stretched 5 µs past the start of the next kernel on its
    stream (``pick``: which such pair). Returns (name, stream, overrun ns) computed from the JSON."""
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    gpu = [
        e
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and (e.get("cat") or "").lower() in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    ks = [e for e in gpu if e["cat"].lower() == "kernel"]
    by_stream: dict = {}
    for e in gpu:
        by_stream.setdefault(e["args"]["stream"], []).append(e)
    pairs = []  # consecutive kernels of a stream with a gap between them and a long second one
    for _st, es in sorted(by_stream.items()):
        es.sort(key=lambda e: e["ts"])
        pairs += [
            (a, b)
            for a, b in zip(es, es[1:])
            if a["cat"].lower() == b["cat"].lower() == "kernel" and b["ts"] - (a["ts"] + a["dur"]) > 1 and b["dur"] > 10
        ]
    a, b = pairs[pick]
    a["dur"] = round(b["ts"] - a["ts"] + 5.0, 3)
    with gzip.open(dst, "wt") as f:
        json.dump(doc, f)
    over = (to_ns(a["ts"]) + to_ns(a["dur"])) - to_ns(b["ts"])
    return a["name"], int(over), ks


def _raw_totals(ks):
    d = pd.DataFrame({"name": [e["name"] for e in ks], "dur": to_ns(np.array([e["dur"] for e in ks]))})
    return d.groupby("name")["dur"].sum()


@pytest.mark.parametrize(
    "trace, rocm",
    [
        (("kineto", "single", "mi300_resnet_rccl_rank0.json.gz"), True),
        (("kineto", "single", "a100_nccl_collectives.json.gz"), False),
    ],
)
def test_shared_trace_with_an_overrun(tmp_path, trace, rocm):
    src = shared(*trace)
    dst = tmp_path / "rank0.json.gz"
    name, over, ks = _stretch(src, dst, pick=3)
    assert over > 4000
    res = dtrace.analyze(str(dst), scheduler="sync")
    bd = res.breakdown.iloc[0]
    raw = _raw_totals(ks)
    got = res.kernels.groupby("name")["total_ns"].sum()
    if rocm:
        assert (int(bd["clipped_events"]), int(bd["clipped_ns"])) == (1, over)
        assert got[name] == raw[name] - over
    else:  # kernel on kernel on a CUDA stream: kept as traced
        assert (int(bd["clipped_events"]), int(bd["clipped_ns"])) == (0, 0)
        assert got[name] == raw[name]


ROCM_TRACES = [
    ("kineto", "single", "mi300_resnet_rccl_rank0.json.gz"),
    ("kineto", "single", "mi250_rocm62.json.gz"),
    ("kineto", "single", "mi210_gpu_only.json.gz"),
    ("jax", "mi300x8_conv.trace.json.gz"),
    ("jax", "mi300x8_conv.trace_viewer_layout.json.gz"),
]
CUDA_TRACES = [
    ("kineto", "single", "b200_vllm_eager_rank0.json.gz"),
    ("kineto", "single", "h100_owlv2.json.gz"),
    ("kineto", "hta-2rank", "sampled_rank-0.json.gz"),
    ("nsys", "rtx4060ti_4streams.sqlite"),
]


@pytest.mark.parametrize("trace", ROCM_TRACES + CUDA_TRACES, ids=lambda t: t[-1].replace(".json.gz", ""))
def test_vendor_of_shared_traces(trace):
    path = shared(*trace)
    tf = detect(path).read(path)
    p = tf.parts[0]
    b = prepare_part(
        p.events.to_pandas(),
        p.collectives.to_pandas(),
        p.memcpy.to_pandas(),
        rank=0,
        device=p.device,
        fmt=tf.format,
        options=Options(),
    )
    assert bool(b.parts["rocm"].iloc[0]) == (trace in ROCM_TRACES)


def test_b200_pdl_kernels_keep_their_durations():
    """The B200 vLLM trace has 73 kernel pairs overlapping on one stream (``bmm_*`` under PDL):
    every kernel keeps its traced duration."""
    path = shared("kineto", "single", "b200_vllm_eager_rank0.json.gz")
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    ks = [e for e in doc["traceEvents"] if e.get("ph") == "X" and (e.get("cat") or "").lower() == "kernel"]
    d = pd.DataFrame(
        {
            "stream": [e["args"]["stream"] for e in ks],
            "s": to_ns(np.array([e["ts"] for e in ks])),
            "dur": to_ns(np.array([e["dur"] for e in ks])),
            "name": [e["name"] for e in ks],
        }
    )
    d = d.sort_values(["stream", "s"], kind="stable")
    nxt = d.groupby("stream")["s"].shift(-1)
    overlapping = d.loc[(d["s"] + d["dur"]) > nxt]
    assert len(overlapping) >= 70 and overlapping["name"].str.startswith("bmm_").sum() >= 30
    res = dtrace.analyze(path, scheduler="sync")
    assert int(res.breakdown["clipped_events"].iloc[0]) == 0
    got = res.kernels.set_index("name")["total_ns"]
    want = d.groupby("name")["dur"].sum()
    assert (got.loc[want.index].to_numpy() == want.to_numpy()).all()
