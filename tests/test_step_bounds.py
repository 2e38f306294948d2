"""What bounds each step (``step_bounds``): the critical path's split checked by hand, on generated
jobs whose answer is known by construction, and on a real H200 trace recorded for it.

Every expected number is computed here from the events as written (a hand calculation, or a plain
reading of the raw JSON: interval unions in Python), never by the code under test.
"""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pandas as pd
import pytest
from _synthjobs import per_rank_tables

from dtrace.analyses import critical_path as cp
from dtrace.analyses import run_analyses
from dtrace.analyses.batch import prepare_part
from dtrace.core.schema import COLLECTIVE_SCHEMA, MEMCPY_SCHEMA
from dtrace.generate import synth
from dtrace.options import CUDA_QUEUE_LIMIT, Options
from dtrace.readers import detect

H200 = os.path.join(os.path.dirname(__file__), "data", "h200")
CATS = [f"{c}_ns" for c in cp.CATEGORIES]
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
SMALL = dict(ranks=16, steps=2, kernels_per_step=30)
US = 1000


# ------------------------------------------------------------------------------------------
# by hand


def _part(rows: list[tuple], *, step: tuple[int, int] | None = (0, 1000)) -> pd.DataFrame:
    """One part's events: (tid, kind, name, start, end, correlation, stream) rows with times in µs,
    plus a ``ProfilerStep#1`` window on thread 1."""
    if step is not None:
        rows = [(1, "annotation", "ProfilerStep#1", step[0], step[1], -1, -1)] + rows
    return pd.DataFrame(
        {
            "rank": 0,
            "device": [0 if r[6] >= 0 else -1 for r in rows],
            "stream": [r[6] for r in rows],
            "pid": 1,
            "tid": [r[0] for r in rows],
            "kind": [r[1] for r in rows],
            "name": [r[2] for r in rows],
            "start_ns": [r[3] * US for r in rows],
            "end_ns": [r[4] * US for r in rows],
            "correlation": [r[5] for r in rows],
            "external_id": -1,
        }
    )


def _bounds(events: pd.DataFrame) -> pd.DataFrame:
    empty = COLLECTIVE_SCHEMA.empty_table().to_pandas(), MEMCPY_SCHEMA.empty_table().to_pandas()
    batch = prepare_part(events, *empty, rank=0, device=0, fmt="kineto", options=Options())
    return run_analyses(batch, only={"step_bounds"})["step_bounds"]


GEMM = "sm90_gemm_kernel"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
HAND = [
    (1, "runtime", "cudaLaunchKernel", 10, 20, 1, -1),
    (0, "kernel", GEMM, 30, 300, 1, 7),
    (1, "runtime", "cudaLaunchKernel", 40, 50, 2, -1),
    (0, "kernel", GEMM, 300, 500, 2, 7),
    (1, "runtime", "cudaDeviceSynchronize", 60, 510, 3, -1),
    (1, "cpu_op", "aten::foo", 520, 700, -1, -1),
    (1, "runtime", "cudaLaunchKernel", 690, 700, 4, -1),
    (0, "kernel", NCCL, 720, 800, 4, 52),
]


def test_by_hand_host_sync_and_gpu():
    b = _bounds(_part(HAND)).iloc[0]
    # (µs) the host ran until 1000, after all GPU work (800): the walk starts there and goes back on
    # the host to the last time the GPU released it, the synchronisation's end (510): 490 host.
    # It had waited for the second GEMM (ended 500): 10 release latency, then the GPU work back
    # to where the GPU last waited for a launch — the first GEMM's start (30), launched 10-20:
    # [60, 500] the host sat in cudaDeviceSynchronize, before launching more (aten::foo's kernel
    # at 690): synchronisation; [30, 60] compute; the launch latency 20-30 and the host 0-20: host.
    assert (b["start_ns"], b["span_ns"]) == (0, 1000 * US)
    assert b[CATS].tolist() == [(490 + 10 + 20) * US, 30 * US, 0, 0, (440 + 10) * US, 0]
    assert b[CATS].sum() == b["span_ns"]
    assert (b["bound"], b["bound_share"]) == ("host", 0.52)
    # 180 of the host time ran inside aten::foo (the launch calls: 10 + the 10 latency)
    assert (b["host_op"], b["host_op_ns"]) == ("aten::foo", 180 * US)
    assert (b["sync_op"], b["sync_op_ns"]) == ("cudaDeviceSynchronize", 450 * US)
    assert b["step"] == 1 and (b["rank"], b["device"]) == (0, 0)


def test_by_hand_the_last_synchronisation_is_gpu_time():
    # without the launch after it, the synchronisation is the step's last: waiting for the step's
    # own GPU work is GPU time, and the release latency is idle time
    b = _bounds(_part(HAND[:5])).iloc[0]
    assert b[CATS].tolist() == [(490 + 10 + 20) * US, 470 * US, 0, 0, 0, 10 * US]
    assert (b["bound"], b["sync_op"], b["sync_op_ns"]) == ("host", "", 0)


def test_by_hand_gpu_bound_and_other_threads():
    rows = [
        (1, "runtime", "cudaLaunchKernel", 10, 20, 1, -1),
        (0, "kernel", GEMM, 30, 900, 1, 7),
        # an autograd-like thread launches a kernel that waits for the host: 950 > 900
        (2, "cpu_op", "autograd::engine::evaluate_function: MmBackward0", 600, 960, -1, -1),
        (2, "runtime", "cudaLaunchKernel", 940, 950, 2, -1),
        (0, "kernel", GEMM, 955, 1200, 2, 7),
    ]
    b = _bounds(_part(rows)).iloc[0]
    # the GPU ends last (1200): GPU back to the second GEMM's start (955), launched on thread 2 at
    # 940-950: latency 950-955 host; thread 2 back to the start of its outermost op (600), then
    # the step's thread back to the step start: all host
    assert (b["span_ns"], b[CATS].tolist()) == (1200 * US, [955 * US, 245 * US, 0, 0, 0, 0])
    op = "autograd::engine::evaluate_function: MmBackward0"
    assert (b["host_op"], b["host_op_ns"]) == (op, (350 + 5) * US)


def test_by_hand_part_without_steps_and_empty():
    rows = [(1, "runtime", "cudaLaunchKernel", 10, 20, 1, -1), (0, "kernel", GEMM, 30, 90, 1, 7)]
    b = _bounds(_part(rows, step=None))
    # one chain from the first to the last GPU event, step NA
    assert len(b) == 1 and b["step"].isna().all()
    assert b.iloc[0][["start_ns", "span_ns", "compute_ns", "bound"]].tolist() == [30 * US, 60 * US, 60 * US, "compute"]
    empty = _bounds(_part([], step=None))
    assert list(empty.columns) == list(cp.COLUMNS) and not len(empty)
    # in words and bars, a part without steps is "the trace"
    from dtrace.reduce.step_bounds import reduce_step_bounds
    from dtrace.render.bounds import bars, job_lines, rank_lines

    x = reduce_step_bounds({"step_bounds": b}, Options())["step_bounds_xrank"]
    assert job_lines(x) == ["the trace (no steps): 1 of 1 ranks GPU compute (median share 100 %, median step 60.0 µs)"]
    assert rank_lines(b) == ["the trace (no steps) on rank 0: 100 % GPU compute (compute 60.0 µs of 60.0 µs)"]
    assert bars(b, x)[0] == ["the trace (no steps): median"]


@pytest.mark.parametrize("queued", [CUDA_QUEUE_LIMIT, CUDA_QUEUE_LIMIT - 24])
def test_by_hand_a_full_launch_queue_releases_the_host(queued):
    """``queued`` kernels of 100 µs each launched in the first µs of the step (0.5 µs calls from
    10 µs on), run back to back from 2000 µs; the next launch call, at 1100 µs, returns at 2103,
    right after the first kernel ended at 2100; the host then runs until 200,000 µs."""
    rows = []
    for i in range(queued + 1):
        start = 10 + i if i < queued else 1100
        end = start + 0.5 if i < queued else 2103
        rows += [
            (1, "runtime", "cudaLaunchKernel", start, end, i, -1),
            (0, "kernel", GEMM, 2000 + 100 * i, 2100 + 100 * i, i, 7),
        ]
    b = _bounds(_part(rows, step=(0, 200_000))).iloc[0]
    if queued == CUDA_QUEUE_LIMIT:
        # the queue was full: the call waited for the first kernel; that is GPU time, the host
        # (after the release, and before the first launch) the rest; the 3 µs release latency
        # is not a synchronisation
        assert b[CATS].tolist() == [(200_000 - 2103 + 1989.5 + 10.5) * US, 100 * US, 0, 0, 0, 3 * US]
    else:  # a queue with room: the long call is host time like any other
        assert b[CATS].tolist() == [200_000 * US, 0, 0, 0, 0, 0]


def test_lookup_matches_a_loop():
    rng = np.random.default_rng(1)
    g, t = rng.integers(0, 5, 300), rng.integers(0, 1000, 300)
    qg, qt = rng.integers(0, 6, 200), rng.integers(-50, 1100, 200)
    lk = cp.Lookup(g, t, 6)
    for strict in (False, True):
        got = lk.last(qg, qt, strict=strict)
        for i in range(len(qg)):
            ok = [(t[j], j) for j in range(len(g)) if g[j] == qg[i] and (t[j] < qt[i] if strict else t[j] <= qt[i])]
            if not ok:
                assert got[i] == -1
            else:
                assert lk.group[got[i]] == qg[i] and lk.time[got[i]] == max(ok)[0]
        cnt = lk.count(qg, qt, strict=strict)
        assert cnt.tolist() == [int(((g == a) & ((t < b) if strict else (t <= b))).sum()) for a, b in zip(qg, qt)]


# ------------------------------------------------------------------------------------------
# the real H200 trace: each active step bound by something known by construction


def _raw(path: str) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _ns(t: float) -> int:
    return int(round(t * 1000))


@pytest.fixture(scope="module")
def h200():
    path = os.path.join(H200, "host_rank0.pt.trace.json.gz")
    tf = detect(path).read(path)
    p = tf.parts[0]
    t = p.tables()
    batch = prepare_part(
        t.events.to_pandas(),
        t.side["collectives"].to_pandas(),
        t.side["memcpy"].to_pandas(),
        rank=0,
        device=p.device,
        fmt=tf.format,
        options=Options(),
    )
    out = run_analyses(batch, only={"step_bounds"})["step_bounds"].set_index("step")
    return out, _raw(path)


def test_h200_steps_are_bound_by_what_they_were_built_to(h200):
    bounds, _ev = h200
    with open(os.path.join(H200, "host_steps.json")) as f:
        built = {int(k.split("#")[1]): v for k, v in json.load(f).items()}
    assert sorted(bounds.index.tolist()) == sorted(built)
    assert (bounds[CATS].sum(axis=1) == bounds["span_ns"]).all()
    # 2 balanced (large GEMMs): GPU compute; 3 launch-bound: host, in the element-wise adds of the
    # Python loop; 4 data-loader stall: host, in the DataLoader; 5 synchronisation
    assert bounds.loc[2, "bound"] == "compute"
    assert (bounds.loc[3, "bound"], bounds.loc[3, "host_op"]) == ("host", "aten::add")
    assert (bounds.loc[4, "bound"], bounds.loc[4, "host_op"]) == ("host", LOADER)
    assert bounds.loc[5, "bound"] == "sync"
    # 6 was meant to fill the launch queue; see test_h200_step_6_never_filled_the_queue
    assert (bounds.loc[6, "bound"], bounds.loc[6, "host_op"]) == ("host", "aten::add")


def test_h200_sync_time_is_the_blocking_calls(h200):
    """Each step's ``sync_ns`` is the summed duration of the synchronising calls that blocked in it
    (the host waited there for the GPU; read from the raw JSON): the ``.to()`` copy's
    cudaStreamSynchronize that every step starts with (waiting for the previous step's GPU work),
    and in step 5 ``torch.cuda.synchronize()``."""
    bounds, ev = h200
    windows = {
        int(e["name"].split("#")[1]): (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))
        for e in ev
        if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#")
    }
    for step, (a, b) in windows.items():
        blocked = [
            _ns(e["dur"])
            for e in ev
            if e.get("cat") == "cuda_runtime"
            and "Synchronize" in e["name"]
            and a <= _ns(e["ts"]) < b
            and _ns(e["dur"]) >= cp.BLOCK_MIN_NS
        ]
        assert bounds.loc[step, "sync_ns"] == sum(blocked), step
    assert bounds.loc[5, "sync_ns"] > 0.4 * bounds.loc[5, "span_ns"]
    # the data loader ran 41.6 ms of step 4's host time: all of it on the path
    loader = [_ns(e["dur"]) for e in ev if e.get("name") == LOADER and windows[4][0] <= _ns(e["ts"]) < windows[4][1]]
    assert bounds.loc[4, "host_op_ns"] == sum(loader) > 40_000_000


def test_h200_step_6_never_filled_the_queue(h200):
    """Step 6 was recorded to fill the launch queue (a long GEMM chain, then 3,000 tiny kernels
    launched faster than they drain), but on the H200 the chain ran 12 ms: the host had launched
    fewer than 1,022 kernels queued when the GPU caught up, so no launch call ever blocked (all under
    50 µs) and the rest of the step was launch-bound like step 3. Counted from the raw JSON."""
    bounds, ev = h200
    launch = {e["args"]["correlation"]: _ns(e["ts"]) for e in ev if e.get("cat") == "cuda_runtime"}
    kernels = [
        (launch[e["args"]["correlation"]], _ns(e["ts"]))
        for e in ev
        if e.get("cat") == "kernel" and e["args"].get("correlation") in launch
    ]
    step6 = [e for e in ev if e.get("name") == "ProfilerStep#6" and e.get("cat") == "user_annotation"][0]
    a, b = _ns(step6["ts"]), _ns(step6["ts"]) + _ns(step6["dur"])
    launched = np.sort([k[0] for k in kernels])
    started = np.sort([k[1] for k in kernels])
    calls = [_ns(e["ts"]) for e in ev if e.get("name") == "cudaLaunchKernel" and a <= _ns(e["ts"]) < b]
    queued = np.searchsorted(launched, calls, side="left") - np.searchsorted(started, calls, side="right")
    assert queued.max() < CUDA_QUEUE_LIMIT
    longest = max(_ns(e["dur"]) for e in ev if e.get("name") == "cudaLaunchKernel" and a <= _ns(e["ts"]) < b)
    assert longest < 50_000
    assert bounds.loc[6, "host_ns"] > 0.8 * bounds.loc[6, "span_ns"]


def test_h200_full_launch_queue_is_gpu_time():
    """``queue_full_rank0``: 150 large GEMMs launched, then 4,000 tiny adds that fill the stream's
    launch queue; the launch calls made at the limit block until the GPU frees a slot. That waiting
    is the GPU's time, not the host's: the step is compute-bound and its host time is at most the
    step minus the time spent in those blocked calls (read from the raw JSON: calls over 100 µs,
    where the others take under 50 µs)."""
    path = os.path.join(H200, "queue_full_rank0.pt.trace.json.gz")
    with gzip.open(path) as f:
        ev = json.load(f)["traceEvents"]
    durations = np.array([_ns(e["dur"]) for e in ev if e.get("name") == "cudaLaunchKernel"])
    blocked = durations[durations > 100_000]
    assert len(blocked) > 100 and np.sort(durations)[-len(blocked) - 1] < 50_000
    tf = detect(path).read(path)
    t = tf.parts[0].tables()
    side = {k: v.to_pandas() for k, v in t.side.items()}
    batch = prepare_part(
        t.events.to_pandas(),
        side.pop("collectives"),
        side.pop("memcpy"),
        side=side,
        rank=0,
        device=tf.parts[0].device,
        fmt=tf.format,
        options=Options(),
        base_ns=int(tf.meta.get("base_time_ns") or 0),
    )
    b = cp.step_bounds(batch).iloc[0]
    assert b["bound"] == "compute"
    assert b["host_ns"] <= b["span_ns"] - blocked.sum()


# ------------------------------------------------------------------------------------------
# generated jobs: the answer is known by construction


def _job_bounds(path: str) -> pd.DataFrame:
    out = per_rank_tables(path, Options(), need={"step_bounds"})["step_bounds"]
    return out.set_index(["rank", "step"]).sort_index()


def _union(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _measure(iv: list[tuple[int, int]]) -> int:
    return sum(b - a for a, b in _union(iv))


def _expected(path: str, rank: int) -> dict[int, list[int]]:
    """Per step, the split a step of a generated job without the sync fault must have, from the raw
    JSON. Its host waits for the GPU only in the step's last cudaStreamSynchronize, so the path is
    the host from the step's start to the start of the last GPU event of the step that began on an
    idle GPU and was launched after the GPU went idle (the GPU waited for the host there; launch
    latency included), the GPU from there to the step's last GPU end (compute; communication where
    no compute runs; memory operations where neither does; idle gaps other), the release latency
    after the last GPU end (other), and the host after the synchronisation (the data loader)."""
    ev = _raw(os.path.join(path, f"rank-{rank}.json.gz"))
    launch = {e["args"]["correlation"]: _ns(e["ts"]) for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    every = sorted(
        (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), launch[e["args"]["correlation"]])
        for e in ev
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    )
    waited, busy = [], None  # starts of GPU events the idle GPU waited for the host to launch
    for a, b, la in every:
        if busy is None or (a > busy and la > busy):
            waited.append(a)
        busy = b if busy is None else max(busy, b)
    out = {}
    for s in (e for e in ev if e.get("name", "").startswith("ProfilerStep#")):
        a, b = _ns(s["ts"]), _ns(s["ts"]) + _ns(s["dur"])
        launched = {
            e["args"]["correlation"]
            for e in ev
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and a <= _ns(e["ts"]) < b
        }
        gpu = [
            (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), e)
            for e in ev
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["args"]["correlation"] in launched
        ]
        last = max(g[1] for g in gpu)
        first = max(w for w in waited if w <= last)
        sync_end = max(
            _ns(e["ts"]) + _ns(e["dur"])
            for e in ev
            if e.get("name") == "cudaStreamSynchronize" and a <= _ns(e["ts"]) < b
        )
        on_path = [(max(x, first), y, e) for x, y, e in gpu if y > first]
        compute = [(x, y) for x, y, e in on_path if e["cat"] == "kernel" and "nccl" not in e["name"]]
        comm = [(x, y) for x, y, e in on_path if "nccl" in e["name"]]
        c, cm, al = _measure(compute), _measure(compute + comm), _measure([(x, y) for x, y, _ in on_path])
        out[int(s["name"].split("#")[1])] = [
            (first - a) + (b - sync_end),
            c,
            cm - c,
            al - cm,
            0,
            (last - first - al) + (sync_end - last),
        ]
    return out


@pytest.fixture(scope="module")
def clean_job(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("clean"))
    synth.generate(d, seed=2, **SMALL)
    return d, _job_bounds(d)


def test_fault_free_job_is_gpu_bound_exactly_as_built(clean_job):
    d, bounds = clean_job
    assert (bounds["bound"] == "compute").all()
    assert (bounds["sync_ns"] == 0).all() and (bounds[CATS].sum(axis=1) == bounds["span_ns"]).all()
    for rank in (0, 7, 13):
        for step, want in _expected(d, rank).items():
            assert bounds.loc[(rank, step), CATS].tolist() == want, (rank, step)
    assert (bounds["host_ns"] < 0.01 * bounds["span_ns"]).all()


def test_launch_bound_straggler(tmp_path):
    synth.generate(tmp_path, seed=2, faults=["launch:rank=3:slow=0.5"], **SMALL)
    bounds = _job_bounds(str(tmp_path))
    me, others = bounds.loc[3], bounds.drop(index=3, level="rank")
    # its host needs 1.5× each kernel's GPU time to launch it: the GPU waits for launches all
    # through the step, and the path stays on the host up to the last of them
    for step, want in _expected(str(tmp_path), 3).items():
        assert me.loc[step, CATS].tolist() == want, step
    assert (me["bound"] == "host").all() and (me["host_ns"] > 0.7 * me["span_ns"]).all()
    assert (me["host_op"] == "aten::mm").all()  # the op launching most GPU time
    assert (others["bound"] == "compute").all() and (others["host_ns"] < 0.01 * others["span_ns"]).all()
    # the others wait for it in their collectives: more communication on their path than its
    assert (others["comm_ns"].groupby("step").min() > 3 * me["comm_ns"]).all()


def test_data_loader_stall(tmp_path):
    synth.generate(tmp_path, seed=2, faults=["loader:rank=5:slow=2"], **SMALL)
    bounds = _job_bounds(str(tmp_path))
    ev = _raw(os.path.join(tmp_path, "rank-5.json.gz"))
    stalls = sorted((_ns(e["ts"]), _ns(e["dur"])) for e in ev if e.get("name") == LOADER)
    me = bounds.loc[5]
    assert (me["bound"] == "host").all() and (me["host_op"] == LOADER).all()
    # the whole stall is on the path, and it is the op the path spent most host time in
    assert me["host_op_ns"].tolist() == [d for _t, d in stalls]
    assert (me["host_ns"] >= me["host_op_ns"]).all()
    assert (bounds.drop(index=5, level="rank")["host_op"] != LOADER).all()


def test_synchronisation_in_the_step(tmp_path):
    synth.generate(tmp_path, seed=2, faults=["sync:rank=6:slow=0.1"], **SMALL)
    bounds = _job_bounds(str(tmp_path))
    ev = _raw(os.path.join(tmp_path, "rank-6.json.gz"))
    items = sorted(_ns(e["ts"]) for e in ev if e.get("name") == "aten::item")
    syncs = sorted((_ns(e["ts"]), _ns(e["dur"])) for e in ev if e.get("name") == "cudaStreamSynchronize")
    # the call after each .item() (not the step's final one): the host blocked in it for its whole
    # duration while the GPU ran the forward and backward passes, and launched the optimizer after
    blocked = [d for t, d in syncs if any(0 < t - i < 20_000 for i in items)]
    me = bounds.loc[6]
    assert len(blocked) == 2 and me["sync_ns"].tolist() == blocked
    assert (me["bound"] == "sync").all() and (me["sync_op"] == "cudaStreamSynchronize").all()
    assert (bounds.drop(index=6, level="rank")["sync_ns"] == 0).all()


# ------------------------------------------------------------------------------------------
# across ranks, on the command line and in the report


@pytest.fixture(scope="module")
def launch_results(tmp_path_factory):
    import dtrace

    d = tmp_path_factory.mktemp("launch")
    synth.generate(d / "in", seed=2, faults=["launch:rank=3:slow=0.5"], **SMALL)
    return dtrace.analyze(str(d / "in"), out=str(d / "out"), scheduler="sync")


def test_cross_rank_view(launch_results):
    sb, x = launch_results.step_bounds, launch_results.step_bounds_xrank
    assert len(sb) == 16 * 2 and sorted(x["step"].unique().tolist()) == [1, 2]
    for step in (1, 2):
        rows = x.loc[x["step"] == step].reset_index(drop=True)
        mine = sb.loc[sb["step"] == step]
        # the bound most ranks share first, with its parts; then the other bound's strongest part
        assert rows["bound"].tolist() == ["compute", "host"] and rows["parts"].tolist() == [15, 1]
        others = mine.loc[mine["rank"] != 3]
        assert rows.loc[0, "share_median"] == others["bound_share"].median()
        assert rows.loc[0, "compute_median_ns"] == others["compute_ns"].median()
        assert rows.loc[0, "top_rank"] == others.sort_values("bound_share", ascending=False)["rank"].iloc[0]
        me = mine.loc[mine["rank"] == 3].iloc[0]
        assert rows.loc[1, ["top_rank", "top_device", "top_op"]].tolist() == [3, 3, "aten::mm"]
        assert rows.loc[1, "top_share"] == me["bound_share"] and rows.loc[1, "top_span_ns"] == me["span_ns"]


def test_cli_bounds(launch_results, capsys):
    from dtrace.cli.main import main as cli

    out = launch_results.path
    sb = launch_results.step_bounds.set_index(["rank", "step"])
    assert cli(["bounds", out]) == 0
    text = capsys.readouterr().out
    for step in (1, 2):
        share = sb.loc[(3, step), "bound_share"]
        assert f"step {step}: 15 of 16 ranks GPU compute" in text
        assert f"    rank 3: {100 * share:.0f} % host-bound, in `aten::mm`" in text
    assert cli(["bounds", out, "--rank", "3", "--step", "2"]) == 0
    line, evidence = capsys.readouterr().out.strip().splitlines()
    assert line.startswith(f"step 2 on rank 3: {100 * sb.loc[(3, 2), 'bound_share']:.0f} % host-bound, in `aten::mm` (")
    # a host-bound verdict comes with its evidence: how busy the rank's GPU was in the step
    st = launch_results.steps.set_index(["rank", "step"])
    busy = 100 * st.loc[(3, 2), "busy_ns"] / st.loc[(3, 2), "step_ns"]
    assert evidence.strip().startswith(f"evidence: its GPU was busy {busy:.0f} % of the step")
    assert cli(["bounds", out, "--step", "9"]) == 2
    assert "no step bounds for step 9" in (err := capsys.readouterr().err) and "the steps there are: 1-2" in err
    assert cli(["bounds", out, "--fmt", "csv"]) == 0
    got = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
    assert len(got) == 32 and list(got.columns) == list(cp.COLUMNS)
    assert cli(["bounds", out, "--rank", "99"]) == 2
    assert "no step bounds for rank 99" in capsys.readouterr().err


def test_report_section(launch_results):
    from dtrace.render.bounds import bars
    from dtrace.render.html import report

    html = report(launch_results)
    assert 'id="bounds"' in html and 'data-chart="bounds"' in html
    labels, series, hl = bars(launch_results.step_bounds, launch_results.step_bounds_xrank)
    # per step the median rank's split, then the rank bound by something else, highlighted
    assert labels == ["step 1: median", "step 1: rank 3", "step 2: median", "step 2: rank 3"]
    assert hl == [False, True, False, True]
    sb = launch_results.step_bounds
    assert series["host"][1] == sb.loc[(sb["rank"] == 3) & (sb["step"] == 1), "host_ns"].iloc[0]
    assert series["compute"][0] == sb.loc[sb["step"] == 1, "compute_ns"].median()


def test_analyze_summary_names_the_bounds(launch_results):
    from dtrace.render.summary import summary

    sb = launch_results.step_bounds.set_index(["rank", "step"])
    text = summary(launch_results)
    block = text.split("what bounds each step:\n", 1)[1]
    assert block.startswith("  step 1: 15 of 16 ranks GPU compute")
    assert f"      rank 3: {100 * sb.loc[(3, 2), 'bound_share']:.0f} % host-bound, in `aten::mm`" in block


def test_a_blocking_copy_that_returns_late_still_waited_for_the_gpu():
    """A blocking copy queued behind an 870 µs kernel returns 60 µs after its copy ends (more than
    the 50 µs a full launch queue is allowed): what it waited for decides, so the 870 µs are GPU
    time, not host time (issue 30: a ``hipMemcpyWithStream`` on MI300 that returned 59.4 µs late)."""
    rows = [
        (1, "runtime", "cudaLaunchKernel", 10, 20, 1, -1),
        (0, "kernel", GEMM, 30, 900, 1, 7),
        (1, "runtime", "hipMemcpyWithStream", 40, 1000, 2, -1),
        (0, "memcpy", "Memcpy DtoH (Device -> Host)", 900, 940, 2, 7),
        (1, "cpu_op", "aten::foo", 1000, 1100, -1, -1),
    ]
    b = _bounds(_part(rows, step=(0, 1100))).iloc[0]
    assert b["span_ns"] == 1100 * US
    # host: [0, 10) before the launch call, the call [10, 20), its latency [20, 30), then the op
    # after the copy returned [1000, 1100); the kernel and the copy are the GPU's; the 60 µs from
    # the copy's end to the return are the release latency (other). With a 50 µs tolerance the
    # whole step was host time.
    assert b["compute_ns"] == 870 * US and b["memcpy_ns"] == 40 * US
    assert b["host_ns"] == 130 * US and b["other_ns"] == 60 * US and b["sync_ns"] == 0
    assert b["bound"] == "compute"
