"""The critical path itself (``step_path``) and its track in the exported timeline (issue 32).

By hand: the intervals of the hand-made steps of ``test_step_bounds`` (host op → launch → kernel →
synchronisation → host op → launch → kernel), and of a GPU interval cut by category. On real and
generated traces: per (part, step) the intervals tile the step's span exactly and their sums per
kind (and per op) are the ``step_bounds`` row. In the timeline: the ``critical path`` track of a
hand-made Kineto trace slice by slice with its arrows, and on a generated job the drawn slices
against ``step_bounds`` (a step, and a window cutting steps).
"""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pandas as pd
import pytest
from _synthjobs import read_batch
from test_step_bounds import GEMM, HAND, NCCL, US, _part
from test_timeline import check_chrome_trace

import dtrace
from dtrace.analyses import critical_path as cp
from dtrace.analyses.batch import prepare, prepare_part
from dtrace.analyses.step_path import COLUMNS, step_path
from dtrace.cli.main import main as cli
from dtrace.core.schema import COLLECTIVE_SCHEMA, MEMCPY_SCHEMA
from dtrace.explore import timeline as tx
from dtrace.explore.pathtrack import CAT, CNAME, PATH_TID
from dtrace.generate import synth
from dtrace.options import Options

H200 = os.path.join(os.path.dirname(__file__), "data", "h200")
HTA2 = "/work/shared/traces/kineto/hta-2rank"
CATS = [f"{c}_ns" for c in cp.CATEGORIES]
LAUNCH = "cudaLaunchKernel"
SYNC = "cudaDeviceSynchronize"


def _batch(events: pd.DataFrame):
    empty = COLLECTIVE_SCHEMA.empty_table().to_pandas(), MEMCPY_SCHEMA.empty_table().to_pandas()
    return prepare_part(events, *empty, rank=0, device=0, fmt="kineto", options=Options())


def _brief(path: pd.DataFrame) -> list[tuple]:
    """(kind, where, tid, hop, op, kernel, start µs, end µs) per interval."""
    return [
        (r.kind, r.where, r.tid, r.hop, r.op, r.kernel, r.start_ns // US, r.end_ns // US)
        for r in path.itertuples(index=False)
    ]


# ------------------------------------------------------------------------------------------
# by hand


def test_by_hand_host_sync_and_gpu():
    # test_step_bounds' HAND step (µs): see test_by_hand_host_sync_and_gpu there for the walk.
    # The host runs until 1000, after all GPU work; back on thread 1 to the synchronisation's end
    # (510), which waited for the second GEMM (ended 500): 10 release latency; the GPU back to
    # where it last waited for a launch, the first GEMM's start (30): [60, 500] the host sat in
    # the synchronisation, [30, 60] compute; the launch latency 20-30, then thread 1 to 0.
    path = step_path(_batch(_part(HAND)))
    assert list(path.columns) == list(COLUMNS)
    assert _brief(path) == [
        ("host", "host", 1, "", "", "", 0, 10),  # Python before the launch call: no op
        ("host", "host", 1, "", LAUNCH, "", 10, 20),
        ("host", "host", 1, "launch", LAUNCH, GEMM, 20, 30),
        ("compute", "gpu", -1, "", "", GEMM, 30, 60),
        ("sync", "gpu", -1, "", SYNC, "", 60, 500),
        ("sync", "host", 1, "release", SYNC, GEMM, 500, 510),
        ("host", "host", 1, "", "", "", 510, 520),
        ("host", "host", 1, "", "aten::foo", "", 520, 700),
        ("host", "host", 1, "", "", "", 700, 1000),
    ]
    assert (
        (path["step"] == 1).all() and (path["rank"] == 0).all() and (path["pid"].where(path["tid"] >= 0, 1) == 1).all()
    )
    # the hops' events: the first launch call (row 1) and its GEMM (GPU row 0); the
    # synchronisation (row 5) and the second GEMM it waited for (GPU row 1)
    ev = _part(HAND)
    host_rows = ev.loc[ev["stream"] < 0].reset_index(drop=True)
    launch, release = path.iloc[2], path.iloc[5]
    assert host_rows.loc[launch["host_row"], ["name", "start_ns"]].tolist() == [LAUNCH, 10 * US]
    assert host_rows.loc[release["host_row"], "name"] == SYNC
    assert (launch["gpu_row"], release["gpu_row"]) == (0, 1)
    _check(path, cp.step_bounds(_batch(_part(HAND))))


def test_by_hand_the_last_synchronisation_is_gpu_time():
    path = step_path(_batch(_part(HAND[:5])))
    assert _brief(path)[3:5] == [
        ("compute", "gpu", -1, "", "", GEMM, 30, 500),  # both GEMMs back to back: one interval
        ("other", "host", 1, "release", SYNC, GEMM, 500, 510),
    ]
    _check(path, cp.step_bounds(_batch(_part(HAND[:5]))))


def test_by_hand_other_threads():
    rows = [
        (1, "runtime", LAUNCH, 10, 20, 1, -1),
        (0, "kernel", GEMM, 30, 900, 1, 7),
        (2, "cpu_op", "autograd::engine::evaluate_function: MmBackward0", 600, 960, -1, -1),
        (2, "runtime", LAUNCH, 940, 950, 2, -1),
        (0, "kernel", GEMM, 955, 1200, 2, 7),
    ]
    path = step_path(_batch(_part(rows)))
    op = "autograd::engine::evaluate_function: MmBackward0"
    # the GPU from 1200 back to the second GEMM's start, its launch on thread 2, thread 2 back to
    # the start of its op (600), then the step's thread (its launch call 10-20) to the step's start
    assert _brief(path) == [
        ("host", "host", 1, "", "", "", 0, 10),
        ("host", "host", 1, "", LAUNCH, "", 10, 20),
        ("host", "host", 1, "", "", "", 20, 600),
        ("host", "host", 2, "", op, "", 600, 950),
        ("host", "host", 2, "launch", op, GEMM, 950, 955),
        ("compute", "gpu", -1, "", "", GEMM, 955, 1200),
    ]


def test_by_hand_gpu_time_is_cut_by_category():
    """One host-bound start (the GEMM at 5 µs): the GPU time back to it is cut where what runs
    changes — compute alone, then communication alone, idle, a copy alone, idle, compute."""
    rows = [
        (1, "runtime", LAUNCH, 1, 2, 1, -1),
        (0, "kernel", GEMM, 5, 20, 1, 7),
        (1, "runtime", "ncclKernelLaunch", 3, 4, 2, -1),
        (0, "kernel", NCCL, 15, 40, 2, 52),
        (1, "runtime", "cudaMemcpyAsync", 4, 5, 3, -1),
        (0, "memcpy", "Memcpy HtoD (Pageable -> Device)", 45, 50, 3, 7),
        (1, "runtime", LAUNCH, 5, 6, 4, -1),
        (0, "kernel", GEMM, 60, 70, 4, 7),
    ]
    path = step_path(_batch(_part(rows, step=(0, 65))))
    memcpy = "Memcpy HtoD (Pageable -> Device)"
    assert _brief(path) == [
        ("host", "host", 1, "", "", "", 0, 1),
        ("host", "host", 1, "", LAUNCH, "", 1, 2),
        ("host", "host", 1, "launch", LAUNCH, GEMM, 2, 5),
        ("compute", "gpu", -1, "", "", GEMM, 5, 20),  # the NCCL kernel runs from 15: compute wins
        ("comm", "gpu", -1, "", "", NCCL, 20, 40),
        ("other", "gpu", -1, "", "", "", 40, 45),
        ("memcpy", "gpu", -1, "", "", memcpy, 45, 50),
        ("other", "gpu", -1, "", "", "", 50, 60),
        ("compute", "gpu", -1, "", "", GEMM, 60, 70),
    ]
    assert path["gpu_row"].tolist()[3:] == [0, 1, -1, 2, -1, 3]
    _check(path, cp.step_bounds(_batch(_part(rows, step=(0, 65)))))


def test_gpu_pieces_sum_to_the_split():
    """On random GPU events of three parts, the pieces of random intervals (inside, across and
    outside each part's GPU span) tile them and sum per kind to the walk's own split."""
    rng = np.random.default_rng(7)
    rows = []
    for part in range(3):
        for i in range(60):
            s = int(rng.integers(0, 5_000))
            kind, name = [("kernel", GEMM), ("kernel", NCCL), ("memcpy", "Memcpy DtoD")][int(rng.integers(0, 3))]
            rows.append((part, kind, name, s, s + int(rng.integers(1, 300)), 10 * part + i))
    ev = pd.DataFrame(
        {
            "rank": 0,
            "device": [r[0] for r in rows],
            "stream": [7 + (r[1] == "memcpy") + 40 * (r[2] == NCCL) for r in rows],
            "pid": 1,
            "tid": 1,
            "kind": [r[1] for r in rows],
            "name": [r[2] for r in rows],
            "start_ns": [r[3] for r in rows],
            "end_ns": [r[4] for r in rows],
            "correlation": [r[5] for r in rows],
            "external_id": -1,
        }
    )
    ev["part"] = ev["device"].astype(np.int32)
    ev["row"] = np.arange(len(ev))
    parts = pd.DataFrame(
        {"part": np.arange(3, dtype=np.int32), "rank": np.arange(3, dtype=np.int32), "device": 0, "format": "kineto"}
    )
    parts["base_ns"] = 0
    side = {
        k: t.empty_table().to_pandas().assign(part=np.zeros(0, np.int32))
        for k, t in (("collectives", COLLECTIVE_SCHEMA), ("memcpy", MEMCPY_SCHEMA))
    }
    batch = prepare(ev, side, parts, Options())
    host = cp._host_side(batch)
    gpu = cp._gpu_side(batch, host)
    p = rng.integers(0, 3, 400)
    u = rng.integers(-500, 5_500, 400)
    w = u + rng.integers(0, 2_000, 400)
    from dtrace.analyses.step_path import gpu_pieces

    q, a, b, kind = gpu_pieces(gpu, p, u, w)
    want = np.stack(gpu.split(p, u, w), axis=1)  # compute, comm, memcpy, other
    got = np.zeros_like(want)
    np.add.at(got, (q, np.searchsorted([1, 2, 3, 5], kind)), b - a)
    assert (got == want).all()
    # in order, no hole, no overlap; adjacent pieces differ in kind
    first = np.r_[True, q[1:] != q[:-1]]
    assert (a[first] == u[q[first]]).all() and (b[np.r_[first[1:], True]] == w[q[np.r_[first[1:], True]]]).all()
    assert (a[~first] == b[np.r_[~first[1:], False]]).all() and (b > a).all()
    assert (kind[~first] != kind[np.r_[~first[1:], False]]).all()


# ------------------------------------------------------------------------------------------
# real and generated traces: the path tiles each step and sums to step_bounds


def _check(path: pd.DataFrame, bounds: pd.DataFrame) -> int:
    """Per (part, step): the intervals tile [start_ns, start_ns + span_ns] in order, each kind sums
    to its ``*_ns`` column, and the op with the most ``host`` (``sync``) time has ``host_op_ns``
    (``sync_op_ns``). Returns the number of chains checked."""
    key = ["rank", "device", "step"]
    p = path.assign(step=path["step"].fillna(-1), dur=path["end_ns"] - path["start_ns"])
    b = bounds.assign(step=bounds["step"].fillna(-1)).set_index(key)
    assert sorted(map(tuple, p[key].drop_duplicates().to_numpy().tolist())) == sorted(b.index.tolist())
    assert (p["dur"] >= 0).all() and ((p["dur"] > 0) | (p["hop"] != "")).all()
    for k, g in p.groupby(key, sort=False):
        row = b.loc[k]
        s, e = g["start_ns"].to_numpy(), g["end_ns"].to_numpy()
        assert s[0] == row["start_ns"] and e[-1] == row["start_ns"] + row["span_ns"], k
        assert (s[1:] == e[:-1]).all(), k  # no hole, no overlap
        by_kind = g.groupby("kind")["dur"].sum()
        assert [int(by_kind.get(c, 0)) for c in cp.CATEGORIES] == row[CATS].tolist(), k
        for kind, col in (("host", "host_op"), ("sync", "sync_op")):
            ops = g.loc[(g["kind"] == kind) & (g["op"] != "")].groupby("op")["dur"].sum()
            assert int(ops.max() if len(ops) else 0) == row[f"{col}_ns"], (k, col)
            assert row[col] in (ops[ops == ops.max()].index if len(ops) else [""]), (k, col)
    return p[key].drop_duplicates().shape[0]


@pytest.mark.parametrize(
    "name",
    ["host_rank0.pt.trace.json.gz", "queue_full_rank0.pt.trace.json.gz", "ops_rank0.pt.trace.json.gz", "hta-2rank"],
)
def test_real_traces_tile_and_sum_to_step_bounds(name):
    paths = sorted(glob.glob(os.path.join(HTA2, "*.json.gz"))) if name == "hta-2rank" else [os.path.join(H200, name)]
    if not all(os.path.exists(p) for p in paths) or not paths:
        pytest.skip(f"{name} is not here")
    batch = read_batch(paths)
    path = step_path(batch)
    n = _check(path, cp.step_bounds(batch))
    assert n >= (2 if name == "hta-2rank" else 1)
    if name == "host_rank0.pt.trace.json.gz":  # its steps waited on everything but comm
        assert set(path["kind"]) >= {"host", "compute", "sync"}
        assert ((path["hop"] == "release") & (path["kind"] == "sync")).any()
    if name == "queue_full_rank0.pt.trace.json.gz":  # a launch into a full queue: GPU time, released as other
        rel = path.loc[path["hop"] == "release"]
        call = batch.host["name"].iloc[rel["host_row"].to_numpy()].astype(str)
        assert rel["kind"].tolist() == ["other"] and call.tolist() == [LAUNCH] and rel["op"].tolist() == ["aten::add_"]
    # one step alone is the same path as in the whole
    step = int(path["step"].dropna().iloc[-1]) if path["step"].notna().any() else None
    if step is not None:
        one = step_path(batch, steps=[step]).reset_index(drop=True)
        pd.testing.assert_frame_equal(one, path.loc[path["step"] == step].reset_index(drop=True))


def test_generated_job_with_every_sort_of_hop(tmp_path):
    """Eight ranks in one batch: a launch-bound rank, a data-loader stall, synchronisations in the
    step, the others compute-bound and waiting in their collectives."""
    faults = ["launch:rank=3:slow=0.5", "loader:rank=5:slow=2", "sync:rank=6:slow=0.1"]
    synth.generate(tmp_path, seed=2, ranks=8, steps=2, kernels_per_step=30, faults=faults)
    batch = read_batch(sorted(glob.glob(os.path.join(tmp_path, "rank-*.json*"))))
    path = step_path(batch)
    assert _check(path, cp.step_bounds(batch)) == 16
    assert set(path["kind"]) >= {"host", "compute", "comm", "sync"} and set(path["hop"]) == {"", "launch", "release"}
    # a window keeps the steps it overlaps, whole
    s = path.loc[(path["rank"] == 6) & (path["step"] == 1)]
    lo = int(s["start_ns"].min())
    win = step_path(batch, window=(lo, lo + 1))
    assert set(zip(win["rank"], win["step"])) >= {(6, 1)}
    pd.testing.assert_frame_equal(
        win.loc[(win["rank"] == 6) & (win["step"] == 1)].reset_index(drop=True), s.reset_index(drop=True)
    )


def test_empty_batch():
    assert list(step_path(_batch(_part([], step=None))).columns) == list(COLUMNS)
    assert not len(step_path(_batch(_part(HAND)), steps=[9]))


# ------------------------------------------------------------------------------------------
# the timeline's critical path track

T0 = 1_000_000.0  # µs
KINETO_CAT = {"runtime": "cuda_runtime", "kernel": "kernel", "cpu_op": "cpu_op", "annotation": "user_annotation"}


def _kineto(rows: list[tuple]) -> dict:
    """A Kineto trace of test_step_bounds-style rows (tid, kind, name, start µs, end µs,
    correlation, stream): host events on process 100, GPU events on device 0."""
    events = []
    for tid, kind, name, a, b, corr, stream in rows:
        args: dict = {"correlation": corr} if corr >= 0 else {}
        if stream >= 0:
            args.update(device=0, stream=stream)
        events.append(
            {
                "ph": "X",
                "cat": KINETO_CAT[kind],
                "name": name,
                "pid": 0 if stream >= 0 else 100,
                "tid": stream if stream >= 0 else tid,
                "ts": T0 + a,
                "dur": b - a,
                "args": args,
            }
        )
    return {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": events}


@pytest.fixture(scope="module")
def hand_results(tmp_path_factory):
    d = tmp_path_factory.mktemp("hand")
    os.makedirs(d / "traces")
    rows = [(1, "annotation", "ProfilerStep#1", 0, 1000, -1, -1)] + HAND
    with open(d / "traces" / "rank0.pt.trace.json", "w", encoding="utf-8") as f:
        json.dump(_kineto(rows), f)
    return dtrace.analyze(str(d / "traces"), str(d / "out"), scheduler="sync")


def _track(doc: dict, pid: int) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == pid and e["tid"] == PATH_TID]


def test_timeline_track_by_hand(hand_results, tmp_path):
    res = hand_results
    doc = json.loads(tx.encode(tx.timeline(res, host=True), "t.json"))
    by = check_chrome_trace(doc)
    # the axis starts at the first GPU event (30 µs into the step)
    got = [(e["name"], e["ts"], e["dur"], e["args"]) for e in _track(doc, 0)]
    w1, gpu = "host thread 1", "gpu"
    assert got == [
        ("host", -30.0, 10.0, {"step": 1, "kind": "host", "where": w1}),
        ("host", -20.0, 10.0, {"step": 1, "kind": "host", "where": w1, "op": LAUNCH}),
        (
            "host",
            -10.0,
            10.0,
            {"step": 1, "kind": "host", "where": w1, "hop": "launch latency", "op": LAUNCH, "kernel": GEMM},
        ),
        ("compute", 0.0, 30.0, {"step": 1, "kind": "compute", "where": gpu, "kernel": GEMM}),
        ("sync", 30.0, 440.0, {"step": 1, "kind": "sync", "where": gpu, "op": SYNC}),
        (
            "sync",
            470.0,
            10.0,
            {"step": 1, "kind": "sync", "where": w1, "hop": "release latency", "op": SYNC, "kernel": GEMM},
        ),
        ("host", 480.0, 10.0, {"step": 1, "kind": "host", "where": w1}),
        ("host", 490.0, 180.0, {"step": 1, "kind": "host", "where": w1, "op": "aten::foo"}),
        ("host", 670.0, 300.0, {"step": 1, "kind": "host", "where": w1}),
    ]
    assert all(e["cat"] == CAT and e["cname"] == CNAME[e["name"]] for e in _track(doc, 0))
    meta = {(e["name"], e["tid"]): e["args"] for e in by["M"] if e["pid"] == 0 and e["name"].startswith("thread")}
    assert meta[("thread_name", PATH_TID)] == {"name": "critical path"}
    sort = {tid: a["sort_index"] for (n, tid), a in meta.items() if n == "thread_sort_index"}
    assert sort[PATH_TID] == min(sort.values()) == -1  # the first track of the process
    # two arrows: the launch latency → the first GEMM (stream 7, at 0 µs); the second GEMM (at
    # 270 µs), which the synchronisation waited for → the release latency
    arrows = sorted(((e["id"], e["ph"], e["tid"], e["ts"]) for e in by["s"] + by["f"] if e["cat"] == CAT))
    assert [a[1:] for a in arrows] == [("f", 7, 0.0), ("s", PATH_TID, -10.0), ("f", PATH_TID, 470.0), ("s", 7, 270.0)]
    assert doc["otherData"]["tracks"][0]["critical_path_slices"] == 9
    # switched off: nothing of it
    off = json.loads(tx.encode(tx.timeline(res, critical_path=False), "t.json"))
    assert not [e for e in off["traceEvents"] if e.get("tid") == PATH_TID or e.get("cat") == CAT]
    out = tmp_path / "off.json"
    assert cli(["timeline", res.path, "-o", str(out), "--no-critical-path"]) == 0
    assert not _track(json.loads(out.read_text()), 0)
    assert cli(["timeline", res.path, "-o", str(tmp_path / "on.json")]) == 0
    assert len(_track(json.loads((tmp_path / "on.json").read_text()), 0)) == 9


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("cpjob")
    synth.generate(d / "traces", seed=2, ranks=8, steps=3, kernels_per_step=30, faults=["sync:rank=6:slow=0.1"])
    return dtrace.analyze(str(d / "traces"), str(d / "out"), scheduler="sync")


def _slices_ns(doc: dict, pid: int, shift: int) -> pd.DataFrame:
    """The track's slices as (step, kind, start, end) in the part's own ns."""
    tr = _track(doc, pid)
    start = np.array([round(e["ts"] * 1000) for e in tr], np.int64) + shift
    return pd.DataFrame(
        {
            "step": [e["args"]["step"] for e in tr],
            "kind": [e["name"] for e in tr],
            "start": start,
            "end": start + np.array([round(e["dur"] * 1000) for e in tr], np.int64),
        }
    )


def test_timeline_track_is_the_step_bounds_path(job):
    res = job
    ranks = [3, 5, 6, 0]  # ranks 3, 5 and 0 wait for rank 6 in their collectives
    doc = json.loads(tx.encode(tx.timeline(res, ranks=ranks, step=1), "t.json"))
    check_chrome_trace(doc)
    sb = res.step_bounds.set_index(["rank", "device", "step"])
    origin = doc["baseTimeNanoseconds"]
    arrows = [e for e in doc["traceEvents"] if e["ph"] in ("s", "f") and e["cat"] == CAT]
    assert arrows
    for t in doc["otherData"]["tracks"]:
        s = _slices_ns(doc, t["pid"], origin + t["clock_offset_ns"])
        row = sb.loc[(t["rank"], t["device"], 1)]
        assert (s["step"] == 1).all() and len(s) == t["critical_path_slices"] > 0
        assert s["start"].iloc[0] == row["start_ns"] and s["end"].iloc[-1] == row["start_ns"] + row["span_ns"]
        assert (s["start"].to_numpy()[1:] == s["end"].to_numpy()[:-1]).all()
        by_kind = (s["end"] - s["start"]).groupby(s["kind"]).sum()
        assert [int(by_kind.get(c, 0)) for c in cp.CATEGORIES] == row[CATS].tolist(), t["rank"]
    # rank 6 synchronises in the step: its path waits there, and an arrow goes from the GPU
    # event it waited for to the path's release latency
    kinds = {t["rank"]: set(_slices_ns(doc, t["pid"], 0)["kind"]) for t in doc["otherData"]["tracks"]}
    assert "sync" in kinds[6] and not any("sync" in k for r, k in kinds.items() if r != 6)
    pid6 = [t["pid"] for t in doc["otherData"]["tracks"] if t["rank"] == 6][0]
    release = [e for e in arrows if e["name"] == "critical path: release" and e["pid"] == pid6]
    assert {(e["ph"], e["tid"] == PATH_TID) for e in release} == {("s", False), ("f", True)}


def test_timeline_window_cuts_the_paths_of_the_steps_it_overlaps(job):
    res = job
    sb = res.step_bounds.set_index(["rank", "device", "step"])
    step_doc = tx.timeline(res, ranks=[6], step=1)
    (track,) = step_doc["otherData"]["tracks"]
    origin, off = step_doc["baseTimeNanoseconds"], track["clock_offset_ns"]
    row = sb.loc[(6, track["device"], 1)]
    a = int(row["start_ns"]) - off - origin - 2_000  # 2 µs before step 1 to 2 µs after it
    b = int(row["start_ns"] + row["span_ns"]) - off - origin + 2_000
    doc = json.loads(tx.encode(tx.timeline(res, ranks=[6], window=(a, b)), "t.json"))
    check_chrome_trace(doc)
    s = _slices_ns(doc, doc["otherData"]["tracks"][0]["pid"], origin + off)
    lo, hi = a + origin + off, b + origin + off
    assert s["start"].min() >= lo and s["end"].max() <= hi
    # step 1 whole, the steps next to it cut to the window
    one = s.loc[s["step"] == 1]
    by_kind = (one["end"] - one["start"]).groupby(one["kind"]).sum()
    assert [int(by_kind.get(c, 0)) for c in cp.CATEGORIES] == row[CATS].tolist()
    assert set(s["step"]) <= {0, 1, 2} and len(set(s["step"])) >= 2
    for _step, g in s.groupby("step"):  # each step's path without a hole inside the window
        assert (g["start"].to_numpy()[1:] == g["end"].to_numpy()[:-1]).all()


def test_timeline_window_inside_a_step_draws_its_whole_path_cut(job, monkeypatch):
    """A window inside step 1: the step's events are read whole (its span from ``step_bounds``),
    so the slices are the step's own path cut to the window — not the path of the window's events
    alone, which the walk would take otherwise."""
    res = job
    step_doc = tx.timeline(res, ranks=[6], step=1)
    (track,) = step_doc["otherData"]["tracks"]
    shift = step_doc["baseTimeNanoseconds"] + track["clock_offset_ns"]
    whole = _slices_ns(step_doc, track["pid"], shift)
    lo, hi = int(whole["start"].iloc[0]), int(whole["end"].iloc[-1])
    a, b = lo + (hi - lo) * 2 // 100, lo + (hi - lo) * 12 // 100
    want = whole.assign(start=whole["start"].clip(a, b), end=whole["end"].clip(a, b))
    want = want.loc[want["end"] > want["start"]].reset_index(drop=True)
    assert want["kind"].tolist() == ["memcpy", "sync"]

    def drawn() -> pd.DataFrame:
        got = _slices_ns(tx.timeline(res, ranks=[6], window=(a - shift, b - shift)), track["pid"], shift)
        return got.loc[got["step"] == 1].reset_index(drop=True)

    pd.testing.assert_frame_equal(drawn(), want)
    monkeypatch.setattr(tx, "_step_spans", lambda results, windows: windows)  # the window's events only
    assert not drawn().equals(want)
