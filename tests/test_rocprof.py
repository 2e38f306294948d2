"""rocprofv3 (ROCprofiler-SDK) JSON reader: the real 908_results.json.gz against TraceLens's GPU
timeline and a plain reading of its JSON; a hand-built file with several agents, HIP API calls,
memory copies and roctx markers; bad input."""

import csv
import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from testpaths import shared

import dtrace
from dtrace.errors import InputError, NoGPUActivity
from dtrace.readers import detect

ROCPROF = ("rocprof", "908_results.json.gz")


def _raw():
    with gzip.open(shared(*ROCPROF)) as f:
        return json.load(f)["rocprofiler-sdk-tool"][0]


def _tracelens_timeline():
    path = shared("reference", "rocprof_908.tracelens_gpu_timeline.csv")
    with open(path) as f:
        return {row["type"]: float(row["time ms"]) for row in csv.DictReader(f)}


@pytest.fixture(scope="module")
def raw():
    return _raw()


@pytest.fixture(scope="module")
def compat():
    return dtrace.analyze(shared(*ROCPROF), scheduler="sync", compat="tracelens")


@pytest.fixture(scope="module")
def default():
    return dtrace.analyze(shared(*ROCPROF), scheduler="sync")


def _plain_kernels(raw):
    """Per kernel name: durations (ns) of its dispatches, read straight from the JSON."""
    names = {s["kernel_id"]: s["formatted_kernel_name"] for s in raw["kernel_symbols"]}
    out = {}
    for d in raw["buffer_records"]["kernel_dispatch"]:
        name = names[d["dispatch_info"]["kernel_id"]]
        out.setdefault(name, []).append(d["end_timestamp"] - d["start_timestamp"])
    return out


def _union(intervals):
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (0 if cur_e is None else cur_e - cur_s)


def test_detected_by_content_and_read_as_one_gpu():
    path = shared(*ROCPROF)
    assert detect(path).name == "rocprofv3"
    tf = detect(path).read(path)
    assert [p.device for p in tf.parts] == [0]  # agent 37946 is gpu_index 0
    assert tf.meta["pid"] == 908 and tf.meta["device_names"] == ["AMD Instinct MI350X"]


def test_tracelens_gpu_timeline(compat):
    """TraceLens's rocprof timeline: total = fini_time - init_time, kernel and busy = the union
    of the dispatches, memory = the union of the memory copies (none here), idle = total - busy."""
    tl = _tracelens_timeline()
    b = compat.breakdown.iloc[0]
    ms = 1e6  # ns per ms; TraceLens's float ms carry float error below 1 ns
    assert abs(b["total_ns"] - tl["total_time"] * ms) < 1
    assert abs(b["busy_ns"] - tl["busy_time"] * ms) < 1
    assert abs(b["idle_ns"] - tl["idle"] * ms) < 1
    assert abs(b["computation_ns"] + b["exposed_comm_ns"] - tl["kernel"] * ms) < 1  # every dispatch is a kernel
    assert b["memcpy_ns"] == tl["memory"] == 0
    assert b["computation_ns"] + b["exposed_comm_ns"] + b["exposed_memcpy_ns"] + b["idle_ns"] == b["total_ns"]


def test_default_breakdown_against_plain_union(default, raw):
    """Default semantics: busy is the union of every dispatch (as in TraceLens), total the GPU
    span, copy kernels (__amd_rocclr_copyBuffer*, fill*) memory operations, RCCL kernels comm."""
    ds = raw["buffer_records"]["kernel_dispatch"]
    names = {s["kernel_id"]: s["formatted_kernel_name"] for s in raw["kernel_symbols"]}
    iv = [(d["start_timestamp"], d["end_timestamp"]) for d in ds]
    b = default.breakdown.iloc[0]
    assert b["busy_ns"] == _union(iv)
    assert b["total_ns"] == max(e for _, e in iv) - min(s for s, _ in iv)
    assert b["idle_ns"] == b["total_ns"] - b["busy_ns"]
    comm = [(d["start_timestamp"], d["end_timestamp"]) for d in ds if "nccl" in names[d["dispatch_info"]["kernel_id"]]]
    assert b["comm_ns"] == _union(comm)
    assert b["gpu_events"] == len(ds) == 43915


def test_kernels_equal_plain_reading(compat, default, raw):
    plain = _plain_kernels(raw)
    k = compat.kernels.set_index("name")
    assert set(k.index) == set(plain)
    for name, durs in plain.items():
        row = k.loc[name]
        assert (row["count"], row["total_ns"], row["min_ns"], row["max_ns"]) == (
            len(durs),
            sum(durs),
            min(durs),
            max(durs),
        ), name
    # default mode cuts ROCm duration overruns on a stream: the same counts, totals short by what was cut
    d = default.kernels.set_index("name")
    assert d["count"].to_dict() == {n: len(v) for n, v in plain.items()}
    clipped = int(default.breakdown["clipped_ns"].sum())
    assert d["total_ns"].sum() == sum(map(sum, plain.values())) - clipped
    assert (d["total_ns"] <= k["total_ns"].reindex(d.index)).all()


def test_rccl_kernels_are_communication(default, raw):
    k = default.kernels.set_index("name")
    rccl = [n for n in k.index if n.startswith("ncclDevKernel")]
    assert rccl and (k.loc[rccl, "category"] == "comm").all()
    n_rccl = sum(len(v) for n, v in _plain_kernels(raw).items() if n.startswith("ncclDevKernel"))
    assert default.nccl["count"].sum() == n_rccl == 1310


def test_grid_and_workgroup_sizes(raw):
    path = shared(*ROCPROF)
    ev = detect(path).read(path).parts[0].events.to_pandas()
    ds = raw["buffer_records"]["kernel_dispatch"]
    by_corr = ev.set_index("correlation")
    for d in ds[:: max(1, len(ds) // 500)]:
        row = by_corr.loc[d["correlation_id"]["internal"]]
        info = d["dispatch_info"]
        got = tuple(int(row[c]) for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"))
        want = (*(info["grid_size"][a] for a in "xyz"), *(info["workgroup_size"][a] for a in "xyz"))
        assert got == want
        assert row["stream"] == d["stream_id"]["handle"]  # the HIP stream


# -- a hand-built file: two GPUs, HIP API, memory copies, roctx markers ---------------------------
OPS = [
    ("NONE", []),
    ("HIP_RUNTIME_API", ["hipMalloc", "hipLaunchKernel", "hipMemcpyAsync"]),
    ("MARKER_CORE_RANGE_API", ["roctxMarkA", "roctxThreadRangeA"]),
    ("MEMORY_COPY", ["MEMORY_COPY_NONE", "MEMORY_COPY_HOST_TO_HOST", "MEMORY_COPY_HOST_TO_DEVICE",
                     "MEMORY_COPY_DEVICE_TO_HOST", "MEMORY_COPY_DEVICE_TO_DEVICE"]),
    ("KERNEL_DISPATCH", ["KERNEL_DISPATCH_NONE", "KERNEL_DISPATCH_ENQUEUE", "KERNEL_DISPATCH_COMPLETE"]),
]  # fmt: skip
T0 = 1_000_000_000


def _agent(handle, kind, gpu_index, product):
    return {"id": {"handle": handle}, "type": kind, "gpu_index": gpu_index, "name": "gfx942", "product_name": product}


def _dispatch(corr, agent, kernel_id, start, end, stream, grid=(1024, 1, 1), wg=(256, 1, 1)):
    return {
        "size": 184, "kind": 4, "operation": 2, "thread_id": 77,
        "correlation_id": {"internal": corr, "external": 0},
        "start_timestamp": start, "end_timestamp": end,
        "dispatch_info": {"agent_id": {"handle": agent}, "queue_id": {"handle": 3}, "kernel_id": kernel_id,
                          "dispatch_id": corr, "workgroup_size": dict(zip("xyz", wg)),
                          "grid_size": dict(zip("xyz", grid))},
        "stream_id": {"handle": stream},
    }  # fmt: skip


def _api(kind, op, corr, start, end, tid=77):
    return {"kind": kind, "operation": op, "thread_id": tid, "correlation_id": {"internal": corr, "external": 0},
            "start_timestamp": start, "end_timestamp": end}  # fmt: skip


def make_rocprof(path, *, pid=4242, dispatches=None, agents=None, copies=None, gz=False):
    """A rocprofv3 JSON file: GPU agents 11 (gpu_index 0) and 12 (gpu_index 1); on GPU 0 a GEMM
    launched by hipLaunchKernel (corr 1) and an RCCL kernel (corr 2, launched late: the GPU waits
    for the host), a host-to-device copy of 4096 bytes (corr 3); on GPU 1 one kernel (corr 4) and
    a peer copy of 1 MiB from GPU 1 to GPU 0 (corr 5); a host-to-host copy of CPU agent 10 (corr 8);
    a roctx range ProfilerStep#1 and a mark."""
    t = T0
    ds = dispatches if dispatches is not None else [
        _dispatch(1, 11, 1, t + 1_000, t + 11_000, stream=5),
        _dispatch(2, 11, 2, t + 30_000, t + 50_000, stream=5),
        _dispatch(4, 12, 1, t + 2_000, t + 4_000, stream=9, grid=(64, 2, 1), wg=(64, 1, 1)),
    ]  # fmt: skip
    doc = {
        "rocprofiler-sdk-tool": [
            {
                "metadata": {"pid": pid, "init_time": t, "fini_time": t + 100_000, "node": {"hostname": "node7"}},
                "agents": agents if agents is not None else [
                    _agent(10, 1, -1, "AMD EPYC"), _agent(11, 2, 0, "AMD Instinct MI300X"),
                    _agent(12, 2, 1, "AMD Instinct MI300X")],
                "strings": {
                    "buffer_records": [{"kind": k, "operations": ops} for k, ops in OPS],
                    "marker_api": [{"key": 90, "value": "ProfilerStep#1"}, {"key": 91, "value": "checkpoint"}],
                },
                "kernel_symbols": [
                    {"kernel_id": 1, "kernel_name": "Cijk_gemm.kd", "formatted_kernel_name": "Cijk_gemm"},
                    {"kernel_id": 2, "kernel_name": "ncclDevKernel_AllReduce_Sum.kd",
                     "formatted_kernel_name": "ncclDevKernel_AllReduce_Sum(ncclDevKernelArgs)"},
                ],
                "buffer_records": {
                    "kernel_dispatch": ds,
                    "memory_copy": copies if copies is not None else [
                        {**_api(3, 2, 3, t + 12_000, t + 14_000), "dst_agent_id": {"handle": 11},
                         "src_agent_id": {"handle": 10}, "bytes": 4096, "stream_id": {"handle": 5}},
                        {**_api(3, 4, 5, t + 5_000, t + 6_000), "dst_agent_id": {"handle": 11},
                         "src_agent_id": {"handle": 12}, "bytes": 1 << 20, "stream_id": {"handle": 9}},
                        # between two host agents: no GPU involved
                        {**_api(3, 1, 8, t + 7_000, t + 8_000), "dst_agent_id": {"handle": 10},
                         "src_agent_id": {"handle": 10}, "bytes": 64, "stream_id": {"handle": 5}},
                    ],
                    "hip_api": [
                        _api(1, 1, 1, t + 500, t + 900),  # launches corr 1 before it starts
                        _api(1, 1, 2, t + 20_000, t + 29_000),  # launches corr 2 after the GEMM ended
                        _api(1, 2, 3, t + 10_500, t + 10_800),  # launches the copy while the GEMM runs
                        _api(1, 1, 4, t + 1_500, t + 1_900),
                        _api(1, 0, 6, t + 100, t + 300),  # hipMalloc: launches nothing
                    ],
                    "marker_api": [
                        # a range with an external correlation id (set by the application)
                        {**_api(2, 1, 90, t, t + 60_000), "correlation_id": {"internal": 90, "external": 7}},
                        _api(2, 0, 91, t + 40_000, t + 40_000),
                    ],
                    "hsa_api": [],
                },
            }
        ]
    }  # fmt: skip
    data = json.dumps(doc).encode()
    with gzip.open(path, "wb") if gz else open(path, "wb") as f:
        f.write(data)
    return str(path)


def test_hand_built_file_parts_copies_launches_markers(tmp_path):
    path = make_rocprof(tmp_path / "rank3_results.json")  # named .json: content decides, not kineto
    tf = detect(path).read(path)
    assert tf.format == "rocprofv3" and [p.device for p in tf.parts] == [0, 1]
    assert tf.meta["session_ns"] == [T0, T0 + 100_000]
    p0 = tf.parts[0].events.to_pandas()
    gpu0 = p0[p0["device"] == 0]
    assert sorted(gpu0["name"].astype(str)) == [
        "Cijk_gemm",
        "MEMORY_COPY_HOST_TO_DEVICE",
        "ncclDevKernel_AllReduce_Sum(ncclDevKernelArgs)",
    ]
    p1 = tf.parts[1].events.to_pandas()  # a peer copy belongs to its source GPU
    assert sorted(p1.loc[p1["device"] == 1, "name"].astype(str)) == ["Cijk_gemm", "MEMORY_COPY_DEVICE_TO_DEVICE"]
    host = p0[p0["device"] == -1]
    assert sorted(host["name"].astype(str)) == sorted(
        ["hipMalloc", "hipLaunchKernel", "hipLaunchKernel", "hipMemcpyAsync", "hipLaunchKernel"]
        + ["ProfilerStep#1", "checkpoint", "MEMORY_COPY_HOST_TO_HOST"]
    )
    assert set(host.loc[host["name"] == "ProfilerStep#1", "kind"]) == {"annotation"}
    h2h = host.loc[host["name"] == "MEMORY_COPY_HOST_TO_HOST"].iloc[0]  # a host event on no GPU's timeline
    assert (h2h["kind"], h2h["stream"], h2h["start_ns"]) == ("other", -1, T0 + 7_000)
    got = {}
    for part, ev in ((tf.parts[0], p0), (tf.parts[1], p1)):
        mem = part.memcpy.to_pandas()
        rows = ev.iloc[mem["row"].to_numpy()]
        got.update(zip(rows["name"].astype(str), zip(mem["copy_kind"].astype(str), mem["bytes"])))
    assert got == {"MEMORY_COPY_HOST_TO_DEVICE": ("H2D", 4096), "MEMORY_COPY_DEVICE_TO_DEVICE": ("P2P", 1 << 20)}
    coll = tf.parts[0].collectives.to_pandas()
    assert p0.iloc[coll["row"].to_numpy()]["name"].astype(str).tolist() == [
        "ncclDevKernel_AllReduce_Sum(ncclDevKernelArgs)"
    ]
    assert coll["collective"].astype(str).tolist() == ["all_reduce"]

    res = dtrace.analyze(path, scheduler="sync")
    assert res.manifest["inputs"][0]["ranks"] == [[3, 0], [3, 1]]  # rank from the file name, a part per GPU
    b = res.breakdown.set_index("device")
    # GPU 0: GEMM [1, 11) µs, H2D copy [12, 14), RCCL [30, 50); GPU 1: kernel [2, 4), P2P copy [5, 6)
    assert b.loc[0, "computation_ns"] == 10_000 and b.loc[0, "comm_ns"] == 20_000
    assert b.loc[0, "memcpy_ns"] == 2_000 and b.loc[0, "exposed_memcpy_ns"] == 2_000
    assert b.loc[1, "computation_ns"] == 2_000 and b.loc[1, "memcpy_ns"] == 1_000 and b.loc[1, "total_ns"] == 4_000
    assert b.loc[0, "total_ns"] == 49_000 and b.loc[0, "idle_ns"] == 49_000 - 32_000
    assert res.steps["step"].unique().tolist() == [1]
    gaps = res.gaps.set_index(["device", "stream"])
    # stream 5 of GPU 0: GEMM → H2D copy (launched before the GEMM ended: kernel_wait, 1 µs gap),
    # H2D → RCCL (launched at 20 µs, after the copy ended at 14 µs: host_wait, 16 µs)
    assert gaps.loc[(0, 5), "gaps"] == 2
    assert gaps.loc[(0, 5), "host_wait_ns"] == 16_000 and gaps.loc[(0, 5), "kernel_wait_ns"] == 1_000
    tl = dtrace.analyze(path, scheduler="sync", compat="tracelens").breakdown.set_index("device")
    assert (tl["total_ns"] == 100_000).all()  # the session, fini - init
    k = res.kernels.set_index(["device", "name"])
    assert k.loc[(0, "Cijk_gemm"), "class"] == "gemm"


def test_cli_views_on_rocprof(tmp_path):
    path = make_rocprof(tmp_path / "908_results.json.gz", gz=True)
    env = {**os.environ, "COLUMNS": "200"}
    for args in (["kernels", path, "--top", "3"], ["gaps", path]):
        out = subprocess.run([sys.executable, "-m", "dtrace", *args], capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr
        assert "Cijk_gemm" in out.stdout if args[0] == "kernels" else "host_wait" in out.stdout
    out_dir = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "dtrace", "analyze", path, "-o", str(out_dir), "--sync"], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    rep = subprocess.run(
        [sys.executable, "-m", "dtrace", "report", str(out_dir), "-o", str(tmp_path / "r.html")],
        capture_output=True,
        text=True,
    )
    assert rep.returncode == 0, rep.stderr
    assert "Cijk_gemm" in (tmp_path / "r.html").read_text()


def test_stream_of_dispatches_without_one_is_their_queue(tmp_path):
    """Records of older rocprofv3 versions carry no HIP stream: their HSA queue stands for it."""
    ds = [_dispatch(1, 11, 1, T0 + 1_000, T0 + 2_000, stream=5), _dispatch(2, 11, 1, T0 + 3_000, T0 + 4_000, stream=5)]
    del ds[1]["stream_id"]  # queue_id.handle is 3
    path = make_rocprof(tmp_path / "a_results.json", dispatches=ds)
    ev = detect(path).read(path).parts[0].events.to_pandas()
    k = ev[ev["kind"] == "kernel"].set_index("correlation")
    assert (k.loc[1, "stream"], k.loc[2, "stream"]) == (5, 3)


def test_bad_rocprof_inputs(tmp_path):
    unknown = make_rocprof(tmp_path / "a_results.json", dispatches=[_dispatch(1, 99, 1, T0, T0 + 5, stream=1)])
    with pytest.raises(InputError, match="agent 99, which is not a GPU agent"):
        detect(unknown).read(unknown)
    none = make_rocprof(tmp_path / "b_results.json", dispatches=[], copies=[])
    with pytest.raises(NoGPUActivity, match="no kernel_dispatch or memory_copy records"):
        detect(none).read(none)
    truncated = tmp_path / "c_results.json"
    with open(make_rocprof(tmp_path / "d_results.json"), "rb") as f:
        truncated.write_bytes(f.read()[:-40])
    with pytest.raises(InputError, match="invalid rocprofv3 JSON"):
        detect(str(truncated)).read(str(truncated))
    # rocprofv3 writes uint64 ids and times; one beyond int64 fails the file in one line naming where
    big = make_rocprof(tmp_path / "e_results.json", dispatches=[_dispatch(1, 11, 1, T0, T0 + 5, stream=(1 << 64) - 1)])
    with pytest.raises(InputError, match=r"<= 9223372036854775807 - at .*kernel_dispatch\[0\]\.stream_id\.handle"):
        detect(big).read(big)
    late = make_rocprof(tmp_path / "f_results.json", dispatches=[_dispatch(1, 11, 1, 1 << 63, (1 << 63) + 5, stream=1)])
    with pytest.raises(InputError, match=r"kernel_dispatch\[0\]\.start_timestamp"):
        detect(late).read(late)
    res = dtrace.analyze([big, late], scheduler="sync", rank_by="order")
    assert [i["error_type"] for i in res.manifest["inputs"]] == ["InputError", "InputError"]
    res = dtrace.analyze([unknown, make_rocprof(tmp_path / "rank1_results.json")], scheduler="sync", rank_by="order")
    bad = {i["path"]: i for i in res.manifest["inputs"]}[os.path.abspath(unknown)]
    assert bad["status"] == "error" and "\n" not in bad["error"] and len(res.breakdown) == 2


def test_memory_copy_only_counts_as_memcpy_in_compat():
    """Copy kernels are memory operations by default but kernels in TraceLens's rocprof timeline."""
    from dtrace.knowledge.categories import categorize_names

    names = ["__amd_rocclr_copyBuffer", "__amd_rocclr_fillBufferAligned", "MEMORY_COPY_HOST_TO_DEVICE"]
    kinds = ["kernel", "kernel", "memcpy"]
    assert categorize_names(names, kinds, fmt="rocprofv3") == ["memcpy", "memcpy", "memcpy"]
    assert categorize_names(names, kinds, fmt="rocprofv3", compat="tracelens") == ["compute", "compute", "memcpy"]
    assert np.array_equal(
        categorize_names(names, kinds, fmt="kineto", compat="tracelens"), ["memcpy", "memcpy", "memcpy"]
    )


@pytest.mark.parametrize("index", [1 << 32, 1 << 40, (1 << 32) - 1, (1 << 31) - 1])
def test_device_index_beyond_int32_is_an_input_error(tmp_path, index):
    """Issue 31: a gpu_index of 2**32 or 2**40 wrapped to device 0 (two GPUs merged into one part),
    2**32 - 1 became -1, the host marker."""
    agents = [_agent(10, 1, -1, "AMD EPYC"), _agent(11, 2, 0, "AMD Instinct MI300X"), _agent(12, 2, index, "MI300X")]
    path = make_rocprof(tmp_path / "x_results.json", agents=agents)
    with pytest.raises(InputError, match=f"GPU agent 12 has device index {index}, which is not a device id"):
        detect(path).read(path)
