"""Host → GPU tree (dtrace.calltree), the ops table and its cross-rank reduce.

GPU time per op is checked against an independent computation on the raw JSON: launch →
correlation → GPU event, the ops that contain the launch in time (plain Python sweep), one
interval union per op name. The nesting rule is checked against a plain stack sweep on random
intervals; the printed tree against the raw events of the op; the reduce by hand.
"""

import functools
import gzip
import json
import math
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest
from testpaths import shared

import dtrace
from dtrace.calltree import Tree, build
from dtrace.cli.main import main
from dtrace.options import Options
from dtrace.reduce.ops_xrank import ops_xrank

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver", "hip_runtime"}


# -- independent reference on the raw JSON ------------------------------------------------
def ns(t):
    """SPEC §3 µs → ns: integer part exact, fraction rounded half-even."""
    w = math.floor(t)
    return int(w) * 1000 + round((t - w) * 1000)


@functools.lru_cache(maxsize=4)
def raw(path):
    """The raw document and its complete events in ns (cached: several tests read a file)."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    base = int(doc.get("baseTimeNanoseconds") or 0)
    out = []
    for i, e in enumerate(doc["traceEvents"]):
        if e.get("ph") != "X":
            continue
        s = ns(e["ts"]) + base
        out.append(
            {
                "i": i,
                "cat": (e.get("cat") or "").lower(),
                "name": e.get("name", ""),
                "pid": e.get("pid"),
                "tid": e.get("tid"),
                "s": s,
                "e": s + ns(e["dur"]),
                "args": e.get("args") or {},
            }
        )
    return doc, out


def union_len(intervals):
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def reference_ops(events, device):
    """Per launcher (op name, launcher kind): (count, host_ns, gpu_direct_ns, gpu_subtree_ns,
    kernels, subtree_kernels). A launch call inside no cpu_op is the launcher of its GPU events."""
    gpu = [e for e in events if e["cat"] in GPU_CATS and e["args"].get("device", e["pid"]) == device]
    # stream-overlap clipping (README): ROCm cuts every event at the next start on its stream;
    # CUDA cuts a kernel only at the next memory operation (kernels may overlap under PDL)
    rocm = any(e["cat"] in LAUNCH_CATS and e["name"].startswith("hip") for e in events)
    by_stream = defaultdict(list)
    for k, g in enumerate(gpu):
        by_stream[g["args"].get("stream", g["tid"])].append(k)
    end = [g["e"] for g in gpu]
    for ks in by_stream.values():
        ks.sort(key=lambda k: gpu[k]["s"])
        nxt = nxt_mem = None  # start of the next event and of the next memory operation on the stream
        for a in reversed(ks):
            cut = nxt_mem if gpu[a]["cat"] == "kernel" and not rocm else nxt
            if cut is not None and end[a] > cut:
                end[a] = max(cut, gpu[a]["s"])
            nxt = gpu[a]["s"]
            nxt_mem = nxt if gpu[a]["cat"] != "kernel" else nxt_mem
    launches = {}
    for e in events:
        c = e["args"].get("correlation")
        if e["cat"] in LAUNCH_CATS and c is not None and c >= 0 and c not in launches:
            launches[c] = e
    ops = [e for e in events if e["cat"] == "cpu_op"]
    # ops containing each launch: sweep per thread with the set of ops open at its start
    ops_by_thread, launches_by_thread = defaultdict(list), defaultdict(list)
    for o in ops:
        ops_by_thread[(o["pid"], o["tid"])].append(o)
    for l in launches.values():
        launches_by_thread[(l["pid"], l["tid"])].append(l)
    containing = {}
    for key, ls in launches_by_thread.items():
        os_ = sorted(ops_by_thread.get(key, []), key=lambda o: o["s"])
        j, active = 0, []
        for l in sorted(ls, key=lambda x: x["s"]):
            while j < len(os_) and os_[j]["s"] <= l["s"]:
                active.append(os_[j])
                j += 1
            active = [o for o in active if o["e"] > l["s"]]
            containing[l["args"]["correlation"]] = [o for o in active if o["e"] >= l["e"]]
    direct, subtree = defaultdict(list), defaultdict(set)
    bare = {}  # launch calls inside no cpu_op that launched GPU work here, by correlation
    for k, g in enumerate(gpu):
        c = g["args"].get("correlation")
        if c not in launches:
            continue
        around = containing.get(c, [])
        if not around:
            key = (launches[c]["name"], "runtime")
            bare[c] = launches[c]
            direct[key].append(k)
            subtree[key].add(k)
            continue
        inner = max(around, key=lambda o: (o["s"], o["s"] - o["e"], o["i"]))
        direct[(inner["name"], "cpu_op")].append(k)
        for o in around:
            subtree[(o["name"], "cpu_op")].add(k)
    out = {}
    for o, kind in [(o, "cpu_op") for o in ops] + [(l, "runtime") for l in bare.values()]:
        n = (o["name"], kind)
        cnt, host = out.get(n, (0, 0))[:2]
        out[n] = (cnt + 1, host + o["e"] - o["s"])
    return {
        n: (
            cnt,
            host,
            union_len([(gpu[k]["s"], end[k]) for k in direct.get(n, [])]),
            union_len([(gpu[k]["s"], end[k]) for k in subtree.get(n, ())]),
            len(direct.get(n, [])),
            len(subtree.get(n, ())),
        )
        for n, (cnt, host) in out.items()
    }


TRACES = [
    ("kineto", "hta-2rank", "sampled_rank-0.json.gz"),  # no ac2g flows
    ("kineto", "single", "a100_5streams_sendrecv_rank0.json.gz"),  # cudaGraphLaunch, absolute µs
    ("kineto", "single", "b200_vllm_eager_rank0.json.gz"),  # cuda_driver launches, python events
    ("kineto", "single", "mi300_resnet_rccl_rank0.json.gz"),  # ROCm, RCCL, fwd/bwd
]


@pytest.mark.parametrize("parts", TRACES, ids=lambda p: p[-1].split(".")[0])
def test_ops_match_raw_json(parts):
    path = shared(*parts)
    t = dtrace.tree(path)
    assert t.overlaps == 0  # containment and the stack rule agree only without partial overlaps
    _, events = raw(path)
    ref = reference_ops(events, t.device)
    got = t.ops().set_index(["op", "launcher_kind"])
    cols = ["count", "host_ns", "gpu_direct_ns", "gpu_subtree_ns", "kernels", "subtree_kernels"]
    assert set(got.index) == set(ref)
    top = sorted(ref, key=lambda n: (-ref[n][3], n))[:15]
    assert ref[top[0]][3] > 0
    assert got.index[:15].tolist() == top
    for n in ref:
        assert tuple(int(v) for v in got.loc[n, cols]) == ref[n], n


def test_links_without_ac2g_flows():
    path = shared("kineto", "hta-2rank", "sampled_rank-1.json.gz")
    doc, events = raw(path)
    assert not any(e.get("cat") == "ac2g" for e in doc["traceEvents"])
    launch_corr = {e["args"]["correlation"] for e in events if e["cat"] in LAUNCH_CATS and "correlation" in e["args"]}
    gpu = [e for e in events if e["cat"] in GPU_CATS]
    linked = sum(1 for g in gpu if g["args"].get("correlation") in launch_corr)
    assert linked == len(gpu) == 1154
    t = dtrace.tree(path)
    assert (t.n_gpu, t.unlinked_gpu) == (1154, 0)
    g = np.arange(t.n_host, t.size)
    launch = t.parent[g]
    assert (t.kind[launch] == 2).all()  # runtime
    assert (t.correlation[launch] == t.correlation[g]).all()
    assert all(t.launcher(int(u)) is not None for u in g[:50])


def test_graph_launch_links_all_its_kernels():
    path = shared("kineto", "single", "a100_5streams_sendrecv_rank0.json.gz")
    _, events = raw(path)
    graph = [e for e in events if e["name"] == "cudaGraphLaunch"]
    per_corr = defaultdict(list)
    for e in events:
        if e["cat"] in GPU_CATS:
            per_corr[e["args"].get("correlation")].append(e["name"])
    t = dtrace.tree(path)
    uids = t.by_name("cudaGraphLaunch")
    assert uids.size == len(graph) == 70
    multi = 0
    for u in uids:
        kids = t.children(int(u))
        names = sorted(t.name_of(int(k)) for k in kids)
        assert names == sorted(per_corr.get(int(t.correlation[u]), []))
        multi += kids.size > 1
    assert multi > 0 and t.stats["multi_kernel_launches"] >= multi


EXPECTED_LINEAR = """\
└── Category: cpu_op, Name: aten::linear
    ├── Category: cpu_op, Name: aten::t
    │   └── Category: cpu_op, Name: aten::transpose
    │       └── Category: cpu_op, Name: aten::as_strided
    └── Category: cpu_op, Name: aten::addmm
        ├── Category: cpu_op, Name: aten::expand
        │   └── Category: cpu_op, Name: aten::as_strided
        ├── Category: runtime, Name: hipLaunchKernel
        │   └── Category: kernel, Name: void at::native::elementwise_kernel<128, 2, at::native::gpu_kern...
        ├── Category: runtime, Name: hipGetDevicePropertiesR0600
        ├── Category: runtime, Name: hipGetDevicePropertiesR0600
        └── Category: runtime, Name: hipExtModuleLaunchKernel
            └── Category: kernel, Name: Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_L...
"""

EXPECTED_UP = """\
Node:
  cat: kernel
  name: Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_L...
1-up:
  cat: runtime
  name: hipExtModuleLaunchKernel
2-up:
  cat: cpu_op
  name: aten::addmm
3-up:
  cat: cpu_op
  name: aten::linear
4-up:
  cat: annotation
  name: ProfilerStep#1
"""


def test_printed_tree_of_known_op(capsys):
    path = shared("kineto", "single", "mi250_rocm62.json.gz")
    t = dtrace.tree(path)
    uid = t.find(9, 597913, 597913)  # aten::linear's (External id, pid, tid) in the raw trace
    assert t.name_of(uid) == "aten::linear" and t.by_name("aten::linear").tolist() == [uid]
    assert t.format(uid) == EXPECTED_LINEAR
    timed = t.format(uid, times=True).splitlines()  # raw durations: op 275.282 µs, kernels 6.88 + 17.6 µs
    assert timed[0] == "└── Category: cpu_op, Name: aten::linear, Dur: 275.282 µs, GPU: 24.480 µs"
    assert timed[-2].endswith("hipExtModuleLaunchKernel, Dur: 5.180 µs, GPU: 17.600 µs")
    k = t.find(13, 2, 0)  # GPU events: (External id, device, stream)
    assert t.name_of(k).startswith("void at::native::elementwise_kernel")
    sub = t.subtree(uid)
    gemm = int(sub[-1])  # preorder: the last node below aten::linear is the GEMM kernel
    assert t.format_up(gemm) == EXPECTED_UP
    assert t.launcher(gemm) == int(t.by_name("aten::addmm")[0])
    assert t.ancestors(gemm)[-1] == int(t.by_name("ProfilerStep#1")[0])
    assert t.gpu_time(uid) == 6880 + 17600 and t.gpu_time(uid, subtree=False) == 0
    assert sub[0] == uid and sub.size == 13 and set(t.gpu_events(uid)) <= set(sub)
    short = t.format(uid, depth=1)
    assert short.splitlines()[-1] == "        └── … 8 nodes below"
    assert main(["tree", path, "--op", "aten::linear"]) == 0
    assert capsys.readouterr().out.endswith(EXPECTED_LINEAR)
    assert main(["tree", path, "--ext-id", "13", "--pid", "2", "--tid", "0", "--up"]) == 0
    assert "1-up:\n  cat: runtime\n  name: hipLaunchKernel" in capsys.readouterr().out


def test_forward_backward_links_match_fwdbwd_flows():
    path = shared("kineto", "single", "a100_nccl_collectives.json.gz")
    doc, events = raw(path)
    at = {(e["pid"], e["tid"], e["s"]): e for e in events if e["cat"] == "cpu_op"}
    flows = defaultdict(dict)
    for e in doc["traceEvents"]:
        if e.get("cat") == "fwdbwd":
            flows[e["id"]][e["ph"]] = e
    base = int(doc.get("baseTimeNanoseconds") or 0)
    want = set()
    for f in flows.values():
        a = at[(f["s"]["pid"], f["s"]["tid"], ns(f["s"]["ts"]) + base)]
        b = at[(f["f"]["pid"], f["f"]["tid"], ns(f["f"]["ts"]) + base)]
        want.add((a["name"], a["s"], b["name"], b["s"]))
    t = dtrace.tree(path)
    fb = t.fwd_bwd
    got = {
        (t.name_of(f), int(t.start_ns[f]), t.name_of(b), int(t.start_ns[b]))
        for f, b in zip(fb["fwd"].tolist(), fb["bwd"].tolist())
    }
    assert len(want) == 543 and got == want
    f0, b0 = int(fb["fwd"].iloc[0]), int(fb["bwd"].iloc[0])
    assert t.backward_of(f0) == b0 and t.forward_of(b0) == f0 and t.forward_of(f0) is None


def stack_parents(group, start, end):
    """The plain stack sweep (sorted input): pop ended events, the top is the parent."""
    parent, stack, cur = [], [], None
    for i, (g, s, _e) in enumerate(zip(group, start, end)):
        if g != cur:
            stack, cur = [], g
        while stack and end[stack[-1]] <= s:
            stack.pop()
        parent.append(stack[-1] if stack else -1)
        stack.append(i)
    return parent


@pytest.mark.parametrize("seed", range(12))
def test_nesting_matches_stack_sweep(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    group = np.sort(rng.integers(0, 3, n))
    start = rng.integers(0, 1000, n)
    end = start + rng.integers(0, 200, n)
    order = build.preorder(group, start, end)
    g, s, e = group[order], start[order], end[order]
    parent, _ = build.nest(g, s, e)
    assert parent.tolist() == stack_parents(g.tolist(), s.tolist(), e.tolist())
    depth = build.depths(parent)
    ref_depth = [0] * n
    for i, p in enumerate(parent.tolist()):
        ref_depth[i] = ref_depth[p] + 1 if p >= 0 else 0
    assert depth.tolist() == ref_depth
    lv = build.levels(depth)
    end_sub = build.subtree_end(parent, lv)
    below, last = [0] * n, list(range(n))
    for j in range(n):  # every node counts once for each of its ancestors
        for a in _chain(parent, j):
            below[a] += 1
            last[a] = max(last[a], j)
    for i in range(n):  # subtree = [i, end) holds exactly i's descendants
        assert end_sub[i] == i + 1 + below[i] == last[i] + 1


def _chain(parent, j):
    out = []
    p = parent[j]
    while p >= 0:
        out.append(int(p))
        p = parent[p]
    return out


def _part(host_rows, gpu_rows, device=0):
    host = pd.DataFrame(
        host_rows, columns=["kind", "name", "pid", "tid", "start_ns", "end_ns", "correlation", "external_id", "seq"]
    )
    host["kind"] = host["kind"].astype("category")
    host["name"] = host["name"].astype("category")
    gpu = pd.DataFrame(
        gpu_rows, columns=["row", "stream", "kind", "name", "start_ns", "end_ns", "correlation", "external_id"]
    )
    gpu["name"] = gpu["name"].astype("category")
    from dtrace.analyses.batch import Batch

    empty = pd.DataFrame()
    parts = pd.DataFrame({"part": [0], "rank": [3], "device": [device], "format": ["kineto"], "base_ns": [0]})
    return Batch(parts=parts, gpu=gpu, host=host, steps=empty, collectives=empty, memcpy=empty, options=Options())


def test_partial_overlap_is_kept_under_open_parent_and_counted():
    # op A [0,100) holds B [10,120) (ends after A: partial overlap) which holds launch L [105,110)
    host = [
        ("cpu_op", "A", 1, 1, 0, 100, -1, 1, -1),
        ("cpu_op", "B", 1, 1, 10, 120, -1, 2, -1),
        ("runtime", "cudaLaunchKernel", 1, 1, 105, 110, 7, 2, -1),
        ("cpu_op", "C", 1, 2, 0, 50, -1, 3, -1),
    ]  # another thread: its own root
    gpu = [(10, 0, "kernel", "k", 200, 260, 7, 2), (11, 0, "kernel", "orphan", 300, 310, 99, -1)]
    t = Tree.from_batch(_part(host, gpu))
    a, b, launch, c = (int(t.by_name(n)[0]) for n in ("A", "B", "cudaLaunchKernel", "C"))
    k, orphan = int(t.by_name("k")[0]), int(t.by_name("orphan")[0])
    assert (t.parent_of(a), t.parent_of(b), t.parent_of(launch), t.parent_of(c)) == (None, a, b, None)
    assert t.parent_of(k) == launch and t.parent_of(orphan) is None
    assert t.overlaps == 1 and t.unlinked_gpu == 1 and t.launcher(k) == b
    ops = t.ops().set_index("op")
    assert ops.loc["A", ["gpu_direct_ns", "gpu_subtree_ns"]].tolist() == [0, 60]
    assert ops.loc["B", ["gpu_direct_ns", "gpu_subtree_ns", "kernels"]].tolist() == [60, 60, 1]
    assert ops.loc["C", "gpu_subtree_ns"] == 0
    assert (t.node(k)["pid"], t.node(k)["tid"]) == (0, 0)  # GPU nodes: pid = device, tid = stream


def test_nested_same_name_ops_count_gpu_once():
    host = [
        ("cpu_op", "aten::layer_norm", 1, 1, 0, 100, -1, 1, -1),
        ("cpu_op", "aten::layer_norm", 1, 1, 5, 90, -1, 2, -1),
        ("runtime", "cudaLaunchKernel", 1, 1, 10, 20, 1, 2, -1),
        ("runtime", "cudaLaunchKernel", 1, 1, 30, 40, 2, 2, -1),
    ]
    gpu = [(0, 7, "kernel", "k1", 100, 150, 1, 2), (1, 8, "kernel", "k2", 120, 170, 2, 2)]  # overlap 30 ns
    t = Tree.from_batch(_part(host, gpu))
    row = t.ops().set_index("op").loc["aten::layer_norm"]
    assert row[["count", "host_ns", "gpu_direct_ns", "gpu_subtree_ns", "kernels", "subtree_kernels"]].tolist() == [
        2,
        185,
        70,
        70,
        2,
        2,
    ]
    inst = t.op_instances()
    assert inst["gpu_subtree_ns"].tolist() == [70, 70] and inst["kernels"].tolist() == [0, 2]


def test_three_nested_same_name_ops_count_each_kernel_once():
    # A [0,100) > A [5,90) > A [8,80) > launch [10,20) -> k1 [100,150); launch [85,88) under the middle A -> k2 [160,170)
    host = [
        ("cpu_op", "A", 1, 1, 0, 100, -1, 1, -1),
        ("cpu_op", "A", 1, 1, 5, 90, -1, 2, -1),
        ("cpu_op", "A", 1, 1, 8, 80, -1, 3, -1),
        ("runtime", "cudaLaunchKernel", 1, 1, 10, 20, 1, 3, -1),
        ("runtime", "cudaLaunchKernel", 1, 1, 85, 88, 2, 2, -1),
    ]
    gpu = [(0, 7, "kernel", "k1", 100, 150, 1, 3), (1, 7, "kernel", "k2", 160, 170, 2, 2)]
    row = Tree.from_batch(_part(host, gpu)).ops().set_index("op").loc["A"]
    # count 3, host 100 + 85 + 72, direct: k1 (innermost A) and k2 (middle A), each kernel once in the subtree
    cols = ["count", "host_ns", "gpu_direct_ns", "gpu_subtree_ns", "kernels", "subtree_kernels"]
    assert row[cols].tolist() == [3, 257, 60, 60, 2, 2]


def test_same_name_launch_calls_outside_ops_keep_their_own_kernels():
    # a graph launch inside a graph launch, both outside every cpu_op: each is the launcher of its
    # own kernel (the outer one is no op above the inner one), so both kernels count in the subtree
    host = [
        ("runtime", "cudaGraphLaunch", 1, 1, 0, 100, 1, -1, -1),
        ("runtime", "cudaGraphLaunch", 1, 1, 10, 20, 2, -1, -1),
    ]
    gpu = [(0, 7, "kernel", "k1", 200, 250, 1, -1), (1, 7, "kernel", "k2", 300, 320, 2, -1)]
    row = Tree.from_batch(_part(host, gpu)).ops().set_index("op").loc["cudaGraphLaunch"]
    cols = ["launcher_kind", "count", "host_ns", "gpu_direct_ns", "gpu_subtree_ns", "kernels", "subtree_kernels"]
    assert row[cols].tolist() == ["runtime", 2, 110, 70, 70, 2, 2]


def test_ops_xrank_and_outliers_by_hand():
    rows = [  # rank, device, op, count, host_ns, gpu_direct_ns, gpu_subtree_ns, kernels, subtree_kernels
        (0, 0, "aten::mm", 10, 50, 100, 100, 10, 10),
        (1, 0, "aten::mm", 10, 60, 100, 100, 10, 10),
        (2, 0, "aten::mm", 10, 70, 115, 115, 10, 10),
        (0, 0, "aten::add", 4, 8, 10, 10, 4, 4),
        (1, 0, "aten::add", 4, 8, 20, 20, 4, 4),
        (2, 0, "aten::add", 6, 8, 30, 30, 6, 6),
        (1, 0, "aten::only_here", 1, 5, 7, 7, 1, 1),
        (0, 0, "aten::view", 3, 3, 0, 0, 0, 0),
        (2, 0, "aten::view", 3, 3, 0, 0, 0, 0),
    ]
    ops = pd.DataFrame(
        rows,
        columns=[
            "rank",
            "device",
            "op",
            "count",
            "host_ns",
            "gpu_direct_ns",
            "gpu_subtree_ns",
            "kernels",
            "subtree_kernels",
        ],
    )
    out = ops_xrank({"ops": ops}, Options())
    xr = out["ops_xrank"].set_index("op")
    assert xr.index.tolist() == ["aten::mm", "aten::add", "aten::only_here", "aten::view"]
    mm = xr.loc["aten::mm"]
    assert (mm["parts"], mm["count"], mm["host_ns"], mm["gpu_subtree_ns"]) == (3, 30, 180, 315)
    assert (mm["median_gpu_ns"], mm["min_gpu_ns"], mm["max_gpu_ns"], mm["max_rank"]) == (100, 100, 115, 2)
    assert mm["spread"] == pytest.approx(1.15)
    assert np.isnan(xr.loc["aten::view", "spread"])
    o = out["op_outliers"]
    assert set(o["op"]) == {"aten::mm", "aten::add"}  # one part only / no GPU time: not compared
    first = o.iloc[0]
    assert (first["rank"], first["op"], first["gpu_ns"], first["median_gpu_ns"]) == (2, "aten::mm", 115, 100)
    assert first["ratio"] == pytest.approx(1.15) and first["excess_ns"] == 15 and first["z"] == np.inf
    add = o.loc[o["op"] == "aten::add"].set_index("rank").sort_index()
    assert add["ratio"].tolist() == pytest.approx([0.5, 1.0, 1.5])
    assert add.loc[2, "z"] == pytest.approx(10 / (1.4826 * 10)) and add.loc[2, "median_count"] == 4
    assert o.loc[(o["op"] == "aten::mm") & (o["rank"] == 0), "z"].item() == 0
    empty = ops_xrank({}, Options())
    assert not len(empty["ops_xrank"]) and "ratio" in empty["op_outliers"].columns


def test_ops_table_in_results_and_cli(tmp_path, capsys):
    res = dtrace.analyze(shared("kineto", "hta-2rank"), tmp_path / "out", scheduler="sync")
    assert {"ops", "ops_xrank", "op_outliers"} <= set(res.table_names)
    loaded = dtrace.load(tmp_path / "out")
    for rank in (0, 1):
        path = shared("kineto", "hta-2rank", f"sampled_rank-{rank}.json.gz")
        want = dtrace.tree(path).ops()
        got = loaded.ops.loc[loaded.ops["rank"] == rank].drop(columns=["rank", "device"])
        pd.testing.assert_frame_equal(got.reset_index(drop=True), want, check_dtype=False)
    xr = loaded.ops_xrank.set_index("op")
    mm = loaded.ops.loc[loaded.ops["op"] == "aten::mm", "gpu_subtree_ns"]
    assert xr.loc["aten::mm", "gpu_subtree_ns"] == mm.sum() and xr.loc["aten::mm", "parts"] == 2
    assert main(["ops", str(tmp_path / "out"), "--top", "3", "--fmt", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("op,launcher_kind,parts,count") and len(lines) == 4
    assert main(["ops", str(tmp_path / "out"), "--rank", "1", "--top", "2", "--fmt", "csv", "--sort", "count"]) == 0
    body = capsys.readouterr().out.splitlines()[1:]
    top_count = loaded.ops.loc[loaded.ops["rank"] == 1].sort_values("count", ascending=False, kind="stable")
    assert [ln.split(",")[2] for ln in body] == top_count["op"].head(2).tolist()
    t = dtrace.tree(tmp_path / "out", rank=1)  # through the results' ingest cache
    assert (t.rank, t.n_gpu) == (1, 1154)
    assert main(["tree", str(tmp_path / "out"), "--rank", "5", "--op", "aten::mm"]) == 2
    assert "no input for rank 5" in capsys.readouterr().err


def test_empty_tree():
    t = Tree.from_batch(_part([], []))
    assert t.size == 0 and len(t.ops()) == 0 and len(t.op_instances()) == 0 and len(t.fwd_bwd) == 0
    assert t.stats["host_nodes"] == 0


def test_step_selection_keeps_the_step_ops():
    from dtrace.analyses.ops import ops
    from dtrace.explore.tree import load_part

    path = shared("kineto", "hta-2rank", "sampled_rank-0.json.gz")
    _, events = raw(path)
    steps = {e["name"]: (e["s"], e["e"]) for e in events if e["name"].startswith("ProfilerStep#")}
    assert sorted(steps) == ["ProfilerStep#551", "ProfilerStep#552"]
    for name, (lo, hi) in steps.items():
        want = sum(1 for e in events if e["cat"] == "cpu_op" and lo <= e["s"] < hi)
        table = ops(load_part(path, options=Options(step=int(name.split("#")[1]))))
        assert table.loc[table["launcher_kind"] == "cpu_op", "count"].sum() == want
        assert (table["rank"] == 0).all() and (table["device"] == 0).all()
