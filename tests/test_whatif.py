"""What-if estimates: the segments analysis, the dependency replay and its accuracy on generated jobs.

The accuracy checks compare the estimate on one generated job with the step time of the same job
generated with the change made (no fault, a kernel class sped up, no communication): the
reference is the median over ranks of the other job's ``steps.step_ns``, measured, not modelled.
"""

import doctest
import gzip
import json

import numpy as np
import pandas as pd
import pytest
from _synthjobs import per_rank_tables

import dtrace
from dtrace.analyses import segments as seg_mod
from dtrace.cli.main import main as cli
from dtrace.errors import DtraceError, UsageError
from dtrace.generate import synth
from dtrace.knowledge.classify import load_classmap
from dtrace.options import Options
from dtrace.reduce import ORDER
from dtrace.reduce import whatif as wi

NEED = {"breakdown", "steps", "kernels", "classes", "collectives", "segments"}
REDUCE = ("collectives", "ranks", "stragglers", "whatif")


def analyse(path: str) -> dict[str, pd.DataFrame]:
    """The tables the what-if needs, in-process: reader, prepare, the per-rank analyses, the reducers."""
    opts = Options()
    tables = per_rank_tables(path, opts, need=NEED)
    for r in ORDER:
        if r.name in REDUCE:
            tables.update(r.func(tables, opts))
    return tables


def step_time(tables) -> pd.Series:
    """Per step, the median over ranks of the traced step span (the independent reference)."""
    return tables["steps"].groupby("step")["step_ns"].median()


# ------------------------------------------------------------------------------------------
# the segments analysis, by hand


def _gpu_frame():
    """Two parts with the same events (part 1 shifted by 10 µs): see test_segments_by_hand."""
    ev = [  # stream, kind, category, name, start, end, launch
        (7, "kernel", "compute", synth.GEMM, 100, 320, 10),
        (7, "kernel", "compute", synth.FLASH_FWD, 320, 500, 20),
        (52, "kernel", "comm", synth.NCCL_KERNEL["allreduce"], 520, 900, 30),
        (7, "kernel", "compute", synth.GEMM, 905, 1000, 40),
        (7, "kernel", "compute", synth.ADD, 1100, 1200, 1050),
        (52, "kernel", "comm", synth.NCCL_KERNEL["allreduce"], 1250, 1300, 60),
        (7, "memcpy", "memcpy", "Memcpy DtoH (Device -> Pinned)", 1310, 1400, 70),
    ]
    rows = []
    for part, shift in ((0, 0), (1, 10_000)):
        for s, k, c, n, a, b, la in ev:
            rows.append(
                {
                    "part": part,
                    "rank": part,
                    "device": 0,
                    "stream": s,
                    "kind": k,
                    "category": c,
                    "name": n,
                    "start_ns": a + shift,
                    "end_ns": b + shift,
                    "launch_ns": la + shift,
                    "step": 1,
                }
            )
    g = pd.DataFrame(rows)
    g["name"] = g["name"].astype("category")
    g["category"] = pd.Categorical(g["category"], categories=["compute", "comm", "memcpy", "memset"])
    return g


def test_segments_by_hand():
    out = seg_mod.segment_rows(_gpu_frame(), load_classmap(None))
    assert list(out.columns) == list(seg_mod.COLUMNS)
    r0 = out.loc[out["rank"] == 0].reset_index(drop=True)
    # start at the first event; ready = latest end of the work launched before the collective;
    # gate = work resuming right after a collective ended in the gap before it; end = last work end
    assert r0["kind"].tolist() == ["start", "ready", "gate", "ready", "gate", "end"]
    assert r0["time_ns"].tolist() == [100, 500, 905, 1000, 1310, 1400]
    assert r0["work_ns"].tolist() == [0, 400, 0, 95, 100, 90]
    # the gate after the first all-reduce waited 905 - 500; after the second: 1310 - 1200 (the
    # element-wise kernel ran 1100-1200), and 1000-1100 is a launch gap: free, not wait
    assert r0["wait_ns"].tolist() == [0, 0, 405, 0, 110, 0]
    assert r0["free_ns"].tolist() == [0, 0, 0, 0, 100, 0]
    # the element-wise kernel was launched at 1050, after the work before it ended (1000): the work
    # waited 100 ns for the host; every other event was launched before the work it follows ended
    assert r0["host_ns"].tolist() == [0, 0, 0, 0, 100, 0]
    assert r0["comm_start_ns"].tolist() == [pd.NA, 520, 520, 1250, 1250, pd.NA]  # NA: no collective
    assert r0["comm_launch_ns"].tolist() == [pd.NA, 30, 30, 60, 60, pd.NA]
    assert r0["comm_stream"].tolist() == [pd.NA, 52, 52, 52, 52, pd.NA]
    assert r0.loc[1, ["class_1", "class_1_ns", "class_2", "class_2_ns", "class_3"]].tolist() == [
        "gemm",
        220,
        "attention",
        180,
        "",
    ]
    assert r0.loc[4, ["class_1", "class_1_ns"]].tolist() == ["elementwise", 100]
    assert r0.loc[5, ["class_1", "class_1_ns"]].tolist() == ["memcpy", 90]
    assert (r0["other_class_ns"] == 0).all()
    # the second part, computed in the same pass, is the first shifted by 10 µs
    r1 = out.loc[out["rank"] == 1].reset_index(drop=True)
    assert (r1["time_ns"] - r0["time_ns"]).tolist() == [10_000] * 6
    assert (r1["comm_launch_ns"] - r0["comm_launch_ns"]).dropna().tolist() == [10_000] * 4
    shifted = ["rank", "time_ns", "comm_start_ns", "comm_launch_ns"]
    assert r1.drop(columns=shifted).equals(r0.drop(columns=shifted))


def test_segments_more_classes_than_slots_sum_the_rest():
    g = _gpu_frame()
    names = [synth.GEMM, synth.FLASH_FWD, synth.LN_FWD, synth.ADD, synth.GELU, synth.REDUCE]
    extra = pd.DataFrame(
        {
            "part": 0,
            "rank": 0,
            "device": 0,
            "stream": 7,
            "kind": "kernel",
            "category": "compute",
            "name": names,
            "start_ns": [2000, 2100, 2300, 2600, 3000, 3500],
            "end_ns": [2100, 2300, 2600, 3000, 3500, 4100],
            "launch_ns": 1500,
            "step": 2,
        }
    )
    g = pd.concat([g, extra], ignore_index=True)
    g["name"] = g["name"].astype("category")
    g["category"] = pd.Categorical(g["category"], categories=["compute", "comm", "memcpy", "memset"])
    out = seg_mod.segment_rows(g, load_classmap(None))
    end = out.loc[(out["rank"] == 0) & (out["step"] == 2) & (out["kind"] == "end")].iloc[0]
    # classes by time: reduction 600, triton 500, elementwise 400, normalization 300; the rest 100 + 200
    assert [end[f"class_{i}"] for i in range(1, 5)] == ["reduction", "triton", "elementwise", "normalization"]
    assert [end[f"class_{i}_ns"] for i in range(1, 5)] == [600, 500, 400, 300]
    assert end["other_class_ns"] == 300 and end["work_ns"] == 2100


def test_segments_empty_and_without_comm():
    empty = seg_mod.segment_rows(_gpu_frame().iloc[:0], load_classmap(None))
    assert list(empty.columns) == list(seg_mod.COLUMNS) and not len(empty)
    g = _gpu_frame()
    g = g.loc[g["category"].astype(str) != "comm"]
    out = seg_mod.segment_rows(g, load_classmap(None))
    assert out.loc[out["rank"] == 0, "kind"].tolist() == ["start", "end"]
    r0 = out.loc[out["rank"] == 0].iloc[1]
    # no collective: the idle time 500-905 and 1000-1100 and 1200-1310 is free time
    assert r0["work_ns"] == 220 + 180 + 95 + 100 + 90 and r0["free_ns"] == 405 + 100 + 110
    # of which the host caused 1000-1100 (the element-wise kernel launched at 1050) and 500-905 (the
    # GEMM launched at 40 but its work before it ended at 500: launched in time, so not the host)
    assert r0["host_ns"] == 100
    # communication only: no work, no host waits; GPU-side step windows: no lead-in
    comm = _gpu_frame()
    comm = comm.loc[comm["category"].astype(str) == "comm"]
    steps = pd.DataFrame({"part": [0, 1], "step": [1, 1], "start_ns": [0, 0], "source": ["gpu", "gpu"]})
    out = seg_mod.segment_rows(comm, load_classmap(None), steps=steps)
    assert (out["host_ns"] == 0).all() and (out["work_ns"] == 0).all() and len(out)
    # a host window from 5, the first event launched at 10 and starting at 100: the GPU waited 95 ns
    # for the host (a window from 40 has the launch before it: no wait); GPU-side windows: none
    for start, want in ((5, 95), (40, 0)):
        steps = pd.DataFrame({"part": [0, 1], "step": [1, 1], "start_ns": [start, 10_005], "source": ["host", "gpu"]})
        lead = seg_mod.segment_rows(_gpu_frame(), load_classmap(None), steps=steps)
        assert lead.loc[lead["kind"] == "start", "host_ns"].tolist() == [want, 0]


def test_last_at_or_before_matches_a_loop():
    rng = np.random.default_rng(3)
    dg, dv = rng.integers(0, 4, 200), rng.integers(0, 50, 200)
    qg, qv = rng.integers(0, 5, 100), rng.integers(-5, 55, 100)
    for strict in (False, True):
        got = seg_mod.last_at_or_before(dg, dv, qg, qv, strict=strict)
        for g, v, j in zip(qg, qv, got):
            ok = [i for i in range(200) if dg[i] == g and (dv[i] < v if strict else dv[i] <= v)]
            if not ok:
                assert j == -1
            else:
                assert dg[j] == g and dv[j] == max(dv[i] for i in ok)


# ------------------------------------------------------------------------------------------
# the replay, by hand


def _node(rank, step, node, kind, t, work=0, stream=-1, comm=-1, cls="gemm"):
    row = {
        "rank": rank,
        "device": 0,
        "step": step,
        "node": node,
        "kind": kind,
        "time_ns": t,
        "work_ns": work,
        "wait_ns": 0,
        "free_ns": 0,
        "comm_stream": stream,
        "comm_start_ns": comm,
        "other_class_ns": 0,
    }
    for i in range(1, 5):
        row[f"class_{i}"], row[f"class_{i}_ns"] = "", 0
    if work:
        row["class_1"], row["class_1_ns"] = cls, work
    return row


def _two_rank_tables():
    """Two ranks, one all-reduce: rank 0 computes 100 then 40, rank 1 150 then 50 (1 µs clock offset)."""
    o = 1000  # rank 1's clock is 1000 ns ahead
    seg = pd.DataFrame(
        [
            _node(0, 1, 0, "start", 0),
            _node(0, 1, 1, "ready", 100, 100, 52, 100),
            _node(0, 1, 2, "gate", 160, 0, 52, 100),
            _node(0, 1, 3, "end", 200, 40),
            _node(1, 1, 0, "start", 0 + o),
            _node(1, 1, 1, "ready", 150 + o, 150, 52, 150 + o),
            _node(1, 1, 2, "gate", 160 + o, 0, 52, 150 + o),
            _node(1, 1, 3, "end", 210 + o, 50),
        ]
    )
    coll = pd.DataFrame(
        {
            "collective": [0, 0],
            "rank": [0, 1],
            "device": [0, 0],
            "stream": [52, 52],
            "start_ns": [100, 150],
            "end_ns": [160, 160],
            "transfer_ns": [10, 10],
            "clock_offset_ns": [0, o],
            "step": [1, 1],
        }
    )
    offsets = pd.DataFrame({"rank": [0, 1], "device": [0, 0], "host": [0, 1], "offset_ns": [0, o]})
    kernels = pd.DataFrame(
        {
            "rank": [0, 1],
            "device": [0, 0],
            "name": ["g", "g"],
            "category": ["compute"] * 2,
            "class": ["gemm"] * 2,
            "count": [2, 2],
            "median_ns": [70.0, 100.0],
            "total_ns": [140, 200],
        }
    )
    strag = pd.DataFrame(
        {"rank": [1, 0], "device": [0, 0], "score": [5.0, 0.0], "flagged": [True, False], "evidence": ["late", ""]}
    )
    return {"segments": seg, "collectives": coll, "clock_offsets": offsets, "kernels": kernels, "stragglers": strag}


def test_replay_by_hand():
    t = _two_rank_tables()
    out = wi.estimate(t, wi.default_scenarios(t, {"gemm": 2.0}))
    row = out.set_index("scenario")
    # traced: rank 0 spans 200, rank 1 210 -> median 205; the replay reproduces it
    assert (out["observed_ns"] == 205).all() and (out["replayed_ns"] == 205).all() and (out["fit_ns"] == 0).all()
    # (a) rank 1 at the median rank's speed: median of the per-rank medians 85 / own 100 -> 0.85;
    # it arrives at 127.5, the all-reduce ends at 137.5; rank 0 ends 177.5, rank 1 137.5 + 42.5
    assert row.loc["stragglers_at_median", "estimate_ns"] == round((177.5 + 180.0) / 2)
    assert (
        "rank 1" in row.loc["stragglers_at_median", "detail"] and "×0.850" in row.loc["stragglers_at_median", "detail"]
    )
    # (b) gemm twice as fast everywhere: arrivals 50 and 75, end 85; ranks end 105 and 110
    assert row.loc["speedup:gemm=2", "estimate_ns"] == round((105 + 110) / 2)
    # (c) no transfer: the all-reduce ends at the last arrival, 150; ranks end 190 and 200
    assert row.loc["comm_hidden", "estimate_ns"] == 195
    assert row.loc["comm_hidden", "saved_ns"] == 10 and row.loc["comm_hidden", "saved_share"] == pytest.approx(10 / 205)


def test_replay_a_collective_launched_late_by_its_host():
    """Rank 1 finished its work at 150 but its host launched the all-reduce only at 165 (it started
    at 170): of the 20 ns between ready and start, 15 are the host's. With its waits for the host
    scaled by ψ the all-reduce starts at 150 + 5 + 15ψ; it ends 10 later on both ranks, and each
    rank's last 40 / 50 ns of work follow (ψ = 1 replays the trace: spans 220 and 230)."""
    t = _two_rank_tables()
    seg = t["segments"]
    r1 = seg["rank"] == 1
    seg["host_ns"] = 0
    seg["comm_start_ns"] = np.where(seg["comm_start_ns"] >= 0, np.where(r1, 170 + 1000, 100), -1)
    seg["comm_launch_ns"] = pd.array(np.where(seg["comm_start_ns"] >= 0, np.where(r1, 165 + 1000, 90), 0), "Int64")
    seg.loc[seg["comm_start_ns"] < 0, "comm_launch_ns"] = pd.NA
    seg.loc[seg["kind"] == "gate", "time_ns"] = np.where(seg.loc[seg["kind"] == "gate", "rank"] == 1, 180 + 1000, 180)
    seg.loc[seg["kind"] == "end", "time_ns"] = [220, 230 + 1000]
    t["collectives"] = t["collectives"].assign(start_ns=[100, 170], end_ns=[180, 180])
    g = wi.build_graph(t)
    assert g.lag.tolist() == [0.0, 20.0] and g.lag_host.tolist() == [0.0, 15.0]
    ones = np.ones(len(g.t))
    for psi, spans in ((1.0, [220, 230]), (0.5, [212.5, 222.5]), (0.0, [205, 215])):
        psi_row = np.where(g.row_keys["rank"].to_numpy() == 1, psi, 1.0)
        assert wi.replay(g, ones, 1.0, (ones, psi_row)).tolist() == spans, psi


def test_replay_next_step_starts_after_the_previous_one():
    """A step that started after the rank's previous step ended moves with that end."""
    t = _two_rank_tables()
    s2 = t["segments"].copy()
    s2["step"] = 2
    s2["time_ns"] += 300
    s2.loc[s2["comm_start_ns"] >= 0, "comm_start_ns"] += 300
    c2 = t["collectives"].assign(
        collective=1, step=2, start_ns=t["collectives"]["start_ns"] + 300, end_ns=t["collectives"]["end_ns"] + 300
    )
    t["segments"] = pd.concat([t["segments"], s2], ignore_index=True)
    t["collectives"] = pd.concat([t["collectives"], c2], ignore_index=True)
    sc = wi.default_scenarios(t, {})
    g = wi.build_graph(t)
    # both ranks started step 2 after their step 1 ended (300 - 200 and 300 - 210 later)
    assert g.tied_prev.tolist() == [-1, 0, -1, 2] and g.gap.tolist() == [0.0, 100.0, 0.0, 90.0]
    out = wi.estimate(t, sc, g).set_index(["step", "scenario"])
    # step 1 as before; in step 2 each rank starts 100/90 after its replayed step-1 end: rank 0 at
    # 277.5, rank 1 at 270; ready at 377.5 and 397.5, the all-reduce ends at 407.5; rank 0 ends at
    # 447.5 (span 170), rank 1 at 450 (span 180)
    assert out.loc[(1, "stragglers_at_median"), "estimate_ns"] == round((177.5 + 180.0) / 2)
    assert out.loc[(2, "stragglers_at_median"), "estimate_ns"] == (170 + 180) / 2
    assert out.loc[(2, "comm_hidden"), "estimate_ns"] == 195


def test_replay_rejects_a_dependency_cycle():
    t = _two_rank_tables()
    seg = t["segments"]
    # rank 0 waits for the all-reduce before it is ready for it: a cycle
    seg.loc[(seg["rank"] == 0) & (seg["kind"] == "gate"), "time_ns"] = 50
    seg.loc[(seg["rank"] == 0), "node"] = [0, 2, 1, 3]
    t["segments"] = seg
    with pytest.raises(DtraceError, match="dependency cycle"):
        wi.build_graph(t)
    assert wi.reduce_whatif(t, Options())["whatif"].empty


# ------------------------------------------------------------------------------------------
# accuracy on generated jobs

STRUCTURES = {
    "tp8": dict(ranks=16, steps=3, kernels_per_step=30, seed=0),
    "tp4": dict(ranks=16, steps=3, kernels_per_step=60, tp=4, seed=3),
    "tp2-1stream": dict(ranks=8, steps=3, kernels_per_step=80, tp=2, streams=1, seed=4),
    "4gpus-per-host": dict(ranks=16, steps=2, kernels_per_step=30, gpus_per_host=4, seed=5),
}
FAULTS = [
    ("tp8", 5, 0.2),
    ("tp8", 13, 0.5),
    ("tp8", 2, 0.05),
    ("tp4", 9, 0.3),
    ("tp2-1stream", 0, 0.2),
    ("4gpus-per-host", 7, 0.15),
]
SPEEDUPS = [("tp8", "gemm", 1.3), ("tp4", "attention", 1.5)]
HOST_FAULTS = [
    ("tp8", 3, 0.5),
    ("tp8", 11, 2.0),
    ("tp8", 6, 0.05),
    ("tp4", 9, 0.3),
    ("tp2-1stream", 0, 0.2),
    ("4gpus-per-host", 7, 0.15),
]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("whatif")
    memo = {}

    def make(structure: str, **change):
        key = (structure, json.dumps(change, sort_keys=True))
        if key not in memo:
            d = root / f"job{len(memo)}"
            synth.generate(d, **STRUCTURES[structure], **change)
            memo[key] = analyse(str(d))
        return memo[key]

    return make


@pytest.mark.parametrize("structure,rank,slow", FAULTS)
def test_stragglers_at_median_equals_the_fault_free_job(job, structure, rank, slow):
    faulty = job(structure, faults=[f"compute:rank={rank}:slow={slow}"])
    flagged = faulty["stragglers"].loc[faulty["stragglers"]["flagged"], "rank"].tolist()
    assert flagged == [rank]
    w = faulty["whatif"]
    est = w.loc[w["scenario"] == "stragglers_at_median"].astype({"step": "int64"}).set_index("step")["estimate_ns"]
    clean = step_time(job(structure))
    traced = step_time(faulty)
    assert (traced / clean).min() > 1.0 + slow / 10  # the fault costs something to gain back
    err = (est / clean.reindex(est.index) - 1).abs()
    assert len(err) == STRUCTURES[structure]["steps"] and err.max() < 0.02, err.to_dict()
    # the replay without changes reproduces the traced step time
    assert (w["replayed_ns"] == w["observed_ns"]).all() and (w["fit_ns"] <= 2_000).all()
    # a compute straggler's GPU did not wait for its host any more than the others': its compute
    # is scaled, not replaced by the median rank's work as a host-bound straggler's is
    detail = w.loc[w["scenario"] == "stragglers_at_median", "detail"].iloc[0]
    assert f"rank {rank}: compute time ×" in detail and "host waits" not in detail, detail


@pytest.mark.parametrize("structure,rank,slow", HOST_FAULTS)
def test_host_bound_straggler_at_median_equals_the_fault_free_job(job, structure, rank, slow):
    """A rank whose host needs (1 + slow)× each kernel's GPU time to launch it: its GPU waits for
    launches (and, launched late, its streams no longer overlap). At the median rank's host speed
    the step is the job's without the fault — a saving, not the loss an unmodelled host gave."""
    faulty = job(structure, faults=[f"launch:rank={rank}:slow={slow}"])
    flagged = faulty["stragglers"].loc[faulty["stragglers"]["flagged"], "rank"].tolist()
    assert flagged == [rank]
    w = faulty["whatif"]
    row = w.loc[w["scenario"] == "stragglers_at_median"].astype({"step": "int64"}).set_index("step")
    clean = step_time(job(structure))
    assert (step_time(faulty) / clean).min() > 1.0 + slow / 10  # the fault costs something to gain back
    err = (row["estimate_ns"] / clean.reindex(row.index) - 1).abs()
    assert len(err) == STRUCTURES[structure]["steps"] and err.max() < 0.02, err.to_dict()
    assert (row["saved_ns"] > 0).all() and "host waits" in row["detail"].iloc[0]


@pytest.mark.parametrize("structure,cls,x", SPEEDUPS)
def test_class_speedup_equals_the_job_with_that_class_faster(job, structure, cls, x):
    base = job(structure)
    est = wi.estimate(base, wi.default_scenarios(base, {cls: x}))
    est = est.loc[est["scenario"] == f"speedup:{cls}={x:g}"].astype({"step": "int64"}).set_index("step")["estimate_ns"]
    faster = step_time(job(structure, speedup={cls: x}))
    err = (est / faster - 1).abs()
    assert err.max() < 0.02, err.to_dict()
    assert (est < step_time(base) * 0.97).all()  # a real change, not the baseline


@pytest.mark.parametrize("structure", ["tp8", "tp4"])
def test_comm_hidden_equals_the_job_without_communication(job, structure):
    base = job(structure)
    w = base["whatif"]
    est = w.loc[w["scenario"] == "comm_hidden"].astype({"step": "int64"}).set_index("step")["estimate_ns"]
    no_comm = step_time(job(structure, comm=False))
    err = (est / no_comm - 1).abs()
    assert err.max() < 0.02, err.to_dict()
    assert (est < step_time(base) * 0.97).all()


def test_default_scenarios_and_summary(job):
    t = job("tp8", faults=["compute:rank=5:slow=0.2"])
    w = t["whatif"]
    k = t["kernels"]
    top = k.loc[k["category"] == "compute"].groupby("class")["total_ns"].sum().sort_values(ascending=False)
    names = ["stragglers_at_median", *[f"speedup:{c}=1.2" for c in top.index[:3]], "comm_hidden"]
    assert w["scenario"].drop_duplicates().tolist() == names
    assert list(w.columns) == list(wi.COLUMNS)
    s = wi.summary(w)
    assert s["scenario"].tolist() == names and (s["steps"] == 3).all()
    mean = w.groupby("scenario")["estimate_ns"].mean()
    assert s.set_index("scenario")["estimate_ns"].to_dict() == {n: round(mean[n]) for n in names}


# ------------------------------------------------------------------------------------------
# synth's counterfactual jobs


def _events(path):
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]


def test_synth_counterfactuals_change_only_what_they_say(tmp_path):
    kw = dict(ranks=8, steps=1, kernels_per_step=30, seed=7)
    synth.generate(tmp_path / "a", **kw)
    synth.generate(tmp_path / "same", speedup={}, comm=True, **kw)
    for f in ("rank-0.json.gz", "rank-5.json.gz", "ground_truth.json"):  # the defaults change nothing
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "same" / f).read_bytes()
    truth = synth.generate(tmp_path / "g", speedup={"gemm": 2.0}, **kw)
    assert truth["speedup"] == {"gemm": 2.0}
    a, g = _events(tmp_path / "a" / "rank-3.json.gz"), _events(tmp_path / "g" / "rank-3.json.gz")
    gemm = np.array([load_classmap(None).classify([e["name"]])[0] == "gemm" for e in a])
    comm = np.array(["nccl" in e["name"].lower() for e in a])
    da = np.array([e["dur"] for e in a])
    dg = np.array([e["dur"] for e in g])
    assert gemm.sum() > 5
    np.testing.assert_allclose(dg[gemm], da[gemm] / 2, atol=0.0015)  # µs, 3 decimals written
    np.testing.assert_array_equal(dg[~gemm & ~comm], da[~gemm & ~comm])
    synth.generate(tmp_path / "n", comm=False, **kw)
    for d, lo, hi in (("a", 10.0, np.inf), ("n", 0.0, 1.5)):
        # per collective instance (group, Seq) over all ranks: its shortest duration is the transfer
        # of the last rank to arrive, plus up to 1.5 µs of end noise: >= the 12 µs latency, or none
        ev = [e for r in range(8) for e in _events(tmp_path / d / f"rank-{r}.json.gz") if "nccl" in e["name"].lower()]
        inst = (
            pd.DataFrame(
                {
                    "g": [e["args"]["Process Group Name"] for e in ev],
                    "seq": [e["args"]["Seq"] for e in ev],
                    "dur": [e["dur"] for e in ev],
                }
            )
            .groupby(["g", "seq"])["dur"]
            .min()
        )
        assert len(inst) > 5 and lo <= inst.min() and inst.max() <= hi, (d, inst.describe())
    dn = np.array([e["dur"] for e in _events(tmp_path / "n" / "rank-3.json.gz")])
    np.testing.assert_array_equal(dn[~comm], da[~comm])
    with pytest.raises(UsageError, match="must be from 0.001 to 1000"):
        synth.generate(tmp_path / "bad", speedup={"gemm": 0}, **kw)
    assert (
        cli(
            [
                "synth",
                str(tmp_path / "c"),
                "--ranks",
                "8",
                "--steps",
                "1",
                "--kernels-per-step",
                "30",
                "--seed",
                "7",
                "--speedup",
                "gemm=2",
                "--no-comm",
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "c" / "ground_truth.json").read_text())["speedup"] == {"gemm": 2.0}


# ------------------------------------------------------------------------------------------
# the results table, the CLI and the API


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("wres")
    synth.generate(d / "tr", ranks=16, steps=3, kernels_per_step=30, faults=["compute:rank=5:slow=0.2"])
    return dtrace.analyze(str(d / "tr"), str(d / "out"), scheduler="sync")


def test_results_whatif_table_and_cli(results, capsys):
    r = dtrace.load(results.path)
    assert "whatif" in r.table_names and "segments" in r.table_names
    w = r.whatif
    assert list(w.columns) == list(wi.COLUMNS) and sorted(w["step"].unique()) == [1, 2, 3]
    assert cli(["whatif", r.path, "--fmt", "csv"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("scenario,detail,steps,") and len(out) == 1 + w["scenario"].nunique()
    assert (
        cli(
            [
                "whatif",
                r.path,
                "--class",
                "gemm=1.5",
                "--class",
                "attention",
                "--speedup",
                "1.25",
                "--per-step",
                "--step",
                "2",
                "--fmt",
                "csv",
            ]
        )
        == 0
    )
    rows = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
    assert (
        rows["scenario"].tolist()
        == ["stragglers_at_median", "speedup:gemm=1.5", "speedup:attention=1.25", "comm_hidden"]
        and (rows["step"] == 2).all()
    )
    api = wi.whatif(r, speedup={"gemm": 1.5}, step=2).set_index("scenario")["estimate_ns"]
    assert api["speedup:gemm=1.5"] == rows.set_index("scenario").loc["speedup:gemm=1.5", "estimate_ns"]
    assert cli(["whatif", r.path, "--step", "99"]) == 2
    assert "no step 99" in capsys.readouterr().err
    assert cli(["whatif", r.path, "--class", "gemm=-1"]) == 2
    assert "-1 is out of range: give a number from 0.001 to 1,000" in capsys.readouterr().err


def test_docstring_examples_run():
    for mod in (seg_mod, wi, __import__("dtrace.cli.timeline", fromlist=["x"])):
        failed, attempted = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert failed == 0 and attempted > 0, mod.__name__


def test_grouped_running_maximum_equals_pandas_cummax():
    """The replay's per-run running maximum (a doubling scan) against pandas' group-by cummax on
    random runs with NaN and -inf, which it replaced."""
    from dtrace.reduce.whatif import _grouped_cummax

    rng = np.random.default_rng(7)
    for _ in range(500):
        n = int(rng.integers(0, 80))
        v = rng.normal(size=n)
        v[rng.random(n) < 0.1] = -np.inf
        v[rng.random(n) < 0.1] = np.nan
        run_id = np.cumsum(np.r_[True, rng.random(max(n - 1, 0)) < 0.3][:n])
        want = pd.Series(v).groupby(run_id, sort=False).cummax().to_numpy(np.float64)
        assert np.array_equal(_grouped_cummax(v, run_id), want, equal_nan=True)


def test_replay_of_many_scenarios_is_each_scenario_replayed_alone():
    """The replay of several scenarios at once gives, column by column, the same bits as each
    scenario replayed alone (random work and host factors, transfers scaled or hidden)."""
    g = wi.build_graph(_two_rank_tables())
    rng = np.random.default_rng(3)
    n, r = len(g.t), len(g.start)
    phis = [np.ones(n), rng.uniform(0.5, 2.0, n), rng.uniform(0.1, 1.0, n)]
    psis = [(np.ones(n), np.ones(r)), (rng.uniform(0, 1, n), rng.uniform(0, 1, r)), (np.ones(n), np.zeros(r))]
    scales = [1.0, 0.0, 0.7]
    many = wi.replay_many(
        g,
        np.stack(phis, axis=1),
        np.array(scales),
        (np.stack([p[0] for p in psis], axis=1), np.stack([p[1] for p in psis], axis=1)),
    )
    for j in range(3):
        alone = wi.replay(g, phis[j], scales[j], psis[j])
        assert many[:, j].tobytes() == alone.tobytes()
