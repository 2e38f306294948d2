"""Every linked GPU event has a launcher row in ``ops`` (issue 14).

A GPU event's launcher is the first ``cpu_op`` above its launch call, else the launch call itself
(``launcher_kind`` ``runtime``: a top-level ``cudaGraphLaunch`` replaying a CUDA graph, a
``cudaLaunchKernel`` under a bare annotation). Expected numbers come from the raw JSON: the GPU
events whose correlation matches a runtime call, their interval union, and the cpu_ops that
contain each launch call in time on its thread.
"""

import gzip
import json
from collections import defaultdict

import numpy as np
import pytest
from rawtrace import to_ns
from testpaths import shared

import dtrace
from dtrace.cli.main import main

RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver", "hip_runtime"}
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def X(cat, name, ts, dur, pid=5, tid=5, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def K(name, stream, ts, dur, corr, cat="kernel"):
    return X(cat, name, ts, dur, pid=0, tid=stream, device=0, stream=stream, correlation=corr)


GRAPH_TRACE = {
    "schemaVersion": 1,
    "distributedInfo": {"rank": 0, "world_size": 1},
    "traceEvents": [
        X("cpu_op", "aten::mm", 10.0, 20.0),
        X("cuda_runtime", "cudaLaunchKernel", 12.0, 2.0, correlation=1),
        K("gemm", 7, 40.0, 10.0, 1),
        # a CUDA graph replayed by a top-level graph launch: three kernels on two streams
        X("cuda_runtime", "cudaGraphLaunch", 60.0, 5.0, correlation=2),
        K("g1", 7, 70.0, 20.0, 2),
        K("g2", 8, 75.0, 30.0, 2),
        K("g3", 7, 95.0, 5.0, 2),
        # launches under an annotation only
        X("user_annotation", "## step ##", 110.0, 30.0),
        X("cuda_runtime", "cudaLaunchKernel", 112.0, 1.0, correlation=3),
        K("elementwise", 7, 150.0, 4.0, 3),
        X("cuda_runtime", "cudaMemcpyAsync", 120.0, 1.0, correlation=4),
        K("Memcpy HtoD", 8, 160.0, 6.0, 4, cat="gpu_memcpy"),
        K("orphan", 7, 200.0, 3.0, 99),  # no launch call: not linked, no launcher
        X("cuda_runtime", "cudaGraphLaunch", 210.0, 4.0, correlation=5),
        K("g1", 7, 220.0, 10.0, 5),
        K("g2", 8, 222.0, 10.0, 5),
    ],
}


def union_len(intervals):
    total, cur = 0, None
    for s, e in sorted(intervals):
        if cur is None or s > cur[1]:
            total += 0 if cur is None else cur[1] - cur[0]
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
    return total + (0 if cur is None else cur[1] - cur[0])


def linked_gpu(doc):
    """The GPU events whose correlation matches a runtime call, as (start, end, correlation) in ns."""
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    corr = {e["args"]["correlation"] for e in ev if e["cat"].lower() in RUNTIME_CATS and "correlation" in e["args"]}
    out = []
    for e in ev:
        if e["cat"].lower() in GPU_CATS and e["args"].get("correlation") in corr:
            s = int(to_ns(np.array([e["ts"]]))[0])
            out.append((s, s + int(to_ns(np.array([e["dur"]]))[0]), e["args"]["correlation"]))
    return out


@pytest.fixture
def graph_trace(tmp_path):
    p = tmp_path / "graph.json"
    p.write_text(json.dumps(GRAPH_TRACE))
    return str(p)


def test_graph_launch_outside_ops_is_a_launcher(graph_trace):
    ops = dtrace.tree(graph_trace).ops().set_index(["op", "launcher_kind"])
    linked = linked_gpu(GRAPH_TRACE)
    busy = union_len([(s, e) for s, e, _ in linked])  # GPU busy time attributed by correlation
    assert busy == (10 + 35 + 4 + 6 + 12) * 1000
    assert ops["gpu_direct_ns"].sum() == busy  # no two launchers' events overlap in this trace
    assert ops["kernels"].sum() == len(linked) == 8
    graph = ops.loc[("cudaGraphLaunch", "runtime")]
    assert graph[["count", "host_ns", "kernels", "subtree_kernels"]].tolist() == [2, 9000, 5, 5]
    assert graph["gpu_direct_ns"] == graph["gpu_subtree_ns"] == union_len([(s, e) for s, e, c in linked if c in (2, 5)])
    # the launch inside aten::mm is that op's, so the runtime row holds the bare launch only
    assert ops.loc[("cudaLaunchKernel", "runtime"), ["count", "kernels", "gpu_direct_ns"]].tolist() == [1, 1, 4000]
    assert ops.loc[("cudaMemcpyAsync", "runtime"), ["count", "kernels", "gpu_direct_ns"]].tolist() == [1, 1, 6000]
    assert ops.loc[("aten::mm", "cpu_op"), ["count", "kernels", "gpu_direct_ns"]].tolist() == [1, 1, 10000]
    assert set(ops.index) == {
        ("aten::mm", "cpu_op"),
        ("cudaGraphLaunch", "runtime"),
        ("cudaLaunchKernel", "runtime"),
        ("cudaMemcpyAsync", "runtime"),
    }


def test_graph_launch_in_results_cli_and_tree(graph_trace, tmp_path, capsys):
    res = dtrace.analyze(graph_trace, tmp_path / "out", scheduler="sync")
    row = res.ops.set_index(["op", "launcher_kind"]).loc[("cudaGraphLaunch", "runtime")]
    assert (row["kernels"], row["gpu_direct_ns"]) == (5, 47_000)
    xr = res.ops_xrank.set_index(["op", "launcher_kind"])
    assert xr.loc[("cudaGraphLaunch", "runtime"), "gpu_direct_ns"] == 47_000
    assert main(["ops", graph_trace, "--fmt", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split(",")[:2] == ["op", "launcher_kind"]
    assert any(ln.startswith("cudaGraphLaunch,runtime,2,") for ln in lines)
    assert main(["tree", graph_trace, "--op", "cudaGraphLaunch", "--times"]) == 0
    out = capsys.readouterr().out
    assert "in 3 GPU events" in out and "g2" in out


def test_a100_graph_launches_and_bare_launches():
    """70 ``cudaGraphLaunch`` calls under ``CompiledFunction[Backward]`` ops and 90 kernels
    launched under annotations only: every linked GPU event is a direct event of one row."""
    path = shared("kineto", "single", "a100_5streams_sendrecv_rank0.json.gz")
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    t = dtrace.tree(path)
    gpu = [e for e in ev if e["cat"].lower() in GPU_CATS and e["args"].get("device", e["pid"]) == t.device]
    launches = {}
    for e in ev:
        c = e["args"].get("correlation") if e.get("args") else None
        if e["cat"].lower() in RUNTIME_CATS and c is not None and c >= 0:
            launches.setdefault(c, e)
    linked = [g for g in gpu if g["args"].get("correlation") in launches]
    ops_by_thread = defaultdict(list)
    for e in ev:
        if e["cat"].lower() == "cpu_op":
            ops_by_thread[(e["pid"], e["tid"])].append(
                (
                    to_ns(np.array([e["ts"]]))[0],
                    to_ns(np.array([e["ts"]]))[0] + to_ns(np.array([e["dur"]]))[0],
                    e["name"],
                )
            )

    def inner_op(launch):
        s = to_ns(np.array([launch["ts"]]))[0]
        e = s + to_ns(np.array([launch["dur"]]))[0]
        around = [o for o in ops_by_thread[(launch["pid"], launch["tid"])] if o[0] <= s and o[1] >= e]
        return max(around)[2] if around else None  # the latest-starting op containing it

    bare = defaultdict(int)
    graph_ops = defaultdict(int)
    for g in linked:
        launch = launches[g["args"]["correlation"]]
        op = inner_op(launch)
        if op is None:
            bare[launch["name"]] += 1
        elif launch["name"] == "cudaGraphLaunch":
            graph_ops[op] += 1
    assert sum(1 for e in ev if e["name"] == "cudaGraphLaunch") == 70
    assert dict(bare) == {"cudaLaunchKernel": 90}
    assert set(graph_ops) == {"CompiledFunction", "CompiledFunctionBackward"} and sum(graph_ops.values()) == 345
    ops = t.ops()
    assert ops["kernels"].sum() == len(linked) == 6875  # every linked GPU event, once
    rt = ops.loc[ops["launcher_kind"] == "runtime"].set_index("op")["kernels"]
    assert rt.to_dict() == dict(bare)
    # the graph launches' kernels are direct kernels of the cpu_op around the launch
    for op_name, n in graph_ops.items():
        uids = [u for u in t.by_name("cudaGraphLaunch") if t.name_of(t.launcher(int(u))) == op_name]
        assert sum(len(t.children(int(u))) for u in uids) == n
