"""Collective matching across ranks, waits, skews, bandwidth and clock offsets."""

import gzip
import json
import time
from decimal import Decimal

import numpy as np
import pandas as pd
import pytest
from testpaths import shared

import dtrace
from dtrace.analyses.collectives import DECLARED, cumcount, infer_op
from dtrace.options import Options
from dtrace.reduce.collectives import estimate_offsets, reduce_collectives
from dtrace.reduce.ranks import reduce_ranks, robust_z
from dtrace.reduce.stragglers import reduce_stragglers


def rows(records: list[dict]) -> pd.DataFrame:
    """Per-rank comm-kernel rows as the collectives analysis emits them (defaults for the rest)."""
    base = {
        "device": 0,
        "stream": 52,
        "op": "all_reduce",
        "group": "",
        "group_ranks": "",
        "group_size": -1,
        "seq": -1,
        "bytes": -1,
        "dtype": "",
        "step": -1,
    }
    df = pd.DataFrame([{**base, **r} for r in records])
    df["device"] = df["rank"]
    df = df.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)
    df["order_op"] = df.groupby(["rank", "group", "group_ranks", "op"]).cumcount()
    df["order_stream"] = df.groupby(["rank", "stream"]).cumcount()
    return df[list(DECLARED)]


def test_infer_op_and_cumcount():
    assert infer_op("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)") == "all_reduce"
    assert infer_op("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == "all_gather"
    assert infer_op("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)") == "send_recv"
    assert infer_op("multimem_all_reduce_kernel") == "all_reduce"
    assert infer_op("ncclDevKernel_Broadcast_RING_LL") == "broadcast"
    assert cumcount(np.array([5, 5, 2, 5, 2])).tolist() == [0, 1, 0, 2, 1]


def test_wait_skew_transfer_by_hand():
    # one all-reduce of 3 ranks: starts 100/130/160, ends 300/301/299 (ns)
    r = rows(
        [
            {
                "rank": k,
                "start_ns": s,
                "end_ns": e,
                "group": "7",
                "group_ranks": "[0, 1, 2]",
                "seq": 1,
                "group_size": 3,
                "bytes": 3_000,
            }
            for k, s, e in ((0, 100, 300), (1, 130, 301), (2, 160, 299))
        ]
    )
    out = reduce_collectives({"collectives": r}, Options())
    c = out["collectives"].sort_values("rank")
    assert c["wait_ns"].tolist() == [60, 30, 0]
    assert c["last"].tolist() == [False, False, True]
    assert (c["transfer_ns"] == 139).all()  # min duration: 299 - 160
    assert (c["start_skew_ns"] == 60).all() and (c["end_skew_ns"] == 2).all()
    i = out["collective_instances"].iloc[0]
    assert i["late_ns"] == 30 and i["wait_total_ns"] == 90 and i["last_rank"] == 2 and i["match"] == "seq"
    # algbw = bytes / transfer (bytes/ns = GB/s); all-reduce busbw factor 2(n-1)/n
    assert i["algbw_gbps"] == pytest.approx(3_000 / 139)
    assert i["busbw_gbps"] == pytest.approx(3_000 / 139 * 2 * 2 / 3)


def test_late_ns_exact_at_absolute_epoch_ns():
    # starts near 1.7e18 ns, where float64 resolves only 256 ns: 3 ranks arrive at T+1, T+3, T+7
    t = 1_700_000_000_000_000_001
    assert float(t + 7) - float(t + 3) != 4  # what float64 arithmetic would give instead of 4
    r = rows(
        [
            {
                "rank": k,
                "start_ns": t + d,
                "end_ns": t + 1_000 + k,
                "group": "7",
                "group_ranks": "[0, 1, 2]",
                "seq": 1,
                "group_size": 3,
            }
            for k, d in ((0, 1), (1, 3), (2, 7))
        ]
    )
    out = reduce_collectives({"collectives": r}, Options())
    i = out["collective_instances"].iloc[0]
    assert i["late_ns"] == 7 - 3 and i["last_rank"] == 2  # latest start − second-latest start
    assert i["start_ns"] == t + 1 and i["start_skew_ns"] == 6 and i["end_skew_ns"] == 2
    assert out["collectives"].sort_values("rank")["wait_ns"].tolist() == [6, 4, 0]


def test_bus_bandwidth_factors():
    recs = []
    for k, (op, n) in enumerate((("all_gather", 4), ("reduce_scatter", 4), ("send_recv", 2), ("all_to_all", 4))):
        for r in range(n):
            recs.append(
                {
                    "rank": r,
                    "start_ns": 1000 * k,
                    "end_ns": 1000 * k + 500,
                    "op": op,
                    "group": f"g{k}",
                    "group_ranks": str(list(range(n))),
                    "seq": 1,
                    "group_size": n,
                    "bytes": 1_000,
                }
            )
    inst = reduce_collectives({"collectives": rows(recs)}, Options())["collective_instances"].set_index("op")
    assert inst.loc["all_gather", "busbw_gbps"] == pytest.approx(2.0 * 3 / 4)
    assert inst.loc["reduce_scatter", "busbw_gbps"] == pytest.approx(2.0 * 3 / 4)
    assert inst.loc["all_to_all", "busbw_gbps"] == pytest.approx(2.0 * 3 / 4)
    assert inst.loc["send_recv", "busbw_gbps"] == pytest.approx(2.0)


def test_matching_keys_seq_order_stream():
    recs = []
    # seq: rank 1 runs seq 2 before seq 1 (matched by seq, not by order); seq 3 is coalesced (two kernels)
    for r, seqs in ((0, (1, 2, 3, 3)), (1, (2, 1, 3, 3))):
        for j, s in enumerate(seqs):
            recs.append(
                {
                    "rank": r,
                    "start_ns": 1000 * j + r,
                    "end_ns": 1000 * j + 500,
                    "group": "3",
                    "group_ranks": "[0, 1]",
                    "seq": s,
                    "group_size": 2,
                }
            )
    # order within (group, op): no seq
    for r in (0, 1):
        for j in range(2):
            recs.append(
                {
                    "rank": r,
                    "start_ns": 10_000 + 1000 * j + r,
                    "end_ns": 10_000 + 1000 * j + 400,
                    "group": "4",
                    "group_ranks": "[0, 1]",
                    "op": "all_gather",
                    "stream": 60,
                }
            )
    # no args at all: order on the stream
    for r in (0, 1):
        recs.append({"rank": r, "start_ns": 20_000 + 7 * r, "end_ns": 20_600, "op": "send_recv", "stream": 84})
    out = reduce_collectives({"collectives": rows(recs)}, Options())
    c = out["collectives"]
    inst = out["collective_instances"]
    assert (inst["ranks"] == 2).all() and len(inst) == 7
    assert inst["match"].value_counts().to_dict() == {"seq": 4, "order": 2, "stream": 1}
    seq2 = c.loc[(c["match"] == "seq") & (c["seq"] == 2)]
    assert seq2["collective"].nunique() == 1 and sorted(seq2["start_ns"]) == [1, 1000]
    st = c.loc[c["match"] == "stream"]
    assert st["group"].unique().tolist() == ["stream 84"] and st["wait_ns"].tolist() == [7, 0]


def test_estimate_offsets_recovers_host_clocks():
    rng = np.random.default_rng(0)
    true = np.array([0, 3_000_000, -2_000_000, 5_500_000])
    n_inst, ranks = 40, np.arange(8)
    host = ranks // 2
    inst = np.repeat(np.arange(n_inst), len(ranks))
    h = np.tile(host, n_inst)
    end = 1_700_000_000_000_000_000 + inst * 1_000_000 + rng.integers(0, 1_500, len(inst)) + true[h]
    est = estimate_offsets(inst, h, end)
    assert np.abs(est - true).max() < 1_000


def test_hta_2rank_sendrecv_matched_by_hand():
    """The real 2-rank set: NCCL SendRecv kernels matched by stream order, checked against raw JSON."""
    paths = [shared("kineto", "hta-2rank", f"sampled_rank-{r}.json.gz") for r in (0, 1)]
    raw = {}
    for r, p in enumerate(paths):
        with gzip.open(p, "rt") as f:
            ev = json.load(f)["traceEvents"]
        k = [e for e in ev if e.get("cat") == "kernel" and "nccl" in e["name"].lower()]
        # ts/dur are whole µs in these files; exact ns via Decimal
        df = pd.DataFrame(
            {
                "stream": [e["args"]["stream"] for e in k],
                "start": [int(Decimal(str(e["ts"])) * 1000) for e in k],
                "dur": [int(Decimal(str(e["dur"])) * 1000) for e in k],
            }
        )
        df = df.sort_values(["stream", "start"]).reset_index(drop=True)
        df["k"] = df.groupby("stream").cumcount()
        raw[r] = df
    hand = raw[0].merge(raw[1], on=["stream", "k"], suffixes=("0", "1"))
    assert len(hand) == len(raw[0]) == len(raw[1]) == 10
    hand["end0"] = hand["start0"] + hand["dur0"]
    hand["end1"] = hand["start1"] + hand["dur1"]
    hand["wait0"] = np.maximum(hand["start0"], hand["start1"]) - hand["start0"]
    hand["wait1"] = np.maximum(hand["start0"], hand["start1"]) - hand["start1"]

    res = dtrace.analyze(paths, scheduler="sync")
    c = res.collectives
    assert len(c) == 20 and (c["ranks"] == 2).all() and (c["match"] == "stream").all()
    assert set(c["op"]) == {"send_recv"} and (c["clock_offset_ns"] == 0).all()
    wide = c.pivot(index="collective", columns="rank", values=["start_ns", "end_ns", "wait_ns"])
    got = pd.DataFrame(
        {
            "start0": wide["start_ns"][0],
            "start1": wide["start_ns"][1],
            "wait0": wide["wait_ns"][0],
            "wait1": wide["wait_ns"][1],
        }
    ).astype(np.int64)
    got = got.sort_values("start0").reset_index(drop=True)
    want = hand.sort_values("start0").reset_index(drop=True)
    for col in ("start0", "start1", "wait0", "wait1"):
        assert got[col].tolist() == want[col].tolist(), col
    inst = res.collective_instances.sort_values("start_ns").reset_index(drop=True)
    want["skew"] = (want["start0"] - want["start1"]).abs()
    want["end_skew"] = (want["end0"] - want["end1"]).abs()
    want["transfer"] = np.minimum(want["dur0"], want["dur1"])
    want = want.assign(first=np.minimum(want["start0"], want["start1"])).sort_values("first").reset_index(drop=True)
    assert inst["start_skew_ns"].tolist() == want["skew"].tolist()
    assert inst["end_skew_ns"].tolist() == want["end_skew"].tolist()
    assert inst["transfer_ns"].tolist() == want["transfer"].tolist()
    # the ranks table sums the waits
    ranks = res.ranks.set_index("rank")
    assert ranks.loc[0, "collective_wait_ns"] == hand["wait0"].sum()
    assert ranks.loc[1, "collective_wait_ns"] == hand["wait1"].sum()


def synthetic_tables(n_ranks: int = 1024, tp: int = 8, steps: int = 5, slow_rank: int = 777, seed: int = 0):
    """Small per-rank tables of a 1,024-rank job built directly (what the per-rank analyses return)."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(n_ranks)
    host_off = rng.integers(-3_000_000, 3_000_000, n_ranks // 8)
    host_off[0] = 0
    t0 = 1_700_000_000_000_000_000
    recs = []
    per_step = [("tp", "all_reduce", 16 << 20)] * 8 + [("dp", "reduce_scatter", 24 << 20)] * 2
    clock = np.zeros(n_ranks)
    seq = {"tp": 0, "dp": 0}
    for step in range(steps):
        for kind, op, nbytes in per_step:
            clock += rng.uniform(200_000, 220_000, n_ranks)  # own compute before the collective
            clock[slow_rank] += 30_000  # the straggler's is slower
            gid = ranks // tp if kind == "tp" else ranks % tp
            last = pd.Series(clock).groupby(gid).transform("max").to_numpy()
            end = last + 150_000 + rng.uniform(0, 1_500, n_ranks)
            seq[kind] += 1
            members = {g: str(list(ranks[gid == g])) for g in np.unique(gid)} if kind == "dp" else None
            recs.append(
                pd.DataFrame(
                    {
                        "rank": ranks,
                        "start_ns": (t0 + clock).astype(np.int64),
                        "end_ns": (t0 + end).astype(np.int64),
                        "stream": 52 if kind == "tp" else 56,
                        "op": op,
                        "group": [f"{kind}{g}" for g in gid],
                        "group_ranks": (
                            [str(list(range(g * tp, g * tp + tp))) for g in gid]
                            if kind == "tp"
                            else [members[g] for g in gid]
                        ),
                        "group_size": tp if kind == "tp" else n_ranks // tp,
                        "seq": seq[kind],
                        "bytes": nbytes,
                        "dtype": "BFloat16",
                        "step": step,
                    }
                )
            )
            clock = end.copy()
    coll = pd.concat(recs, ignore_index=True)
    coll["start_ns"] += host_off[coll["rank"] // 8]
    coll["end_ns"] += host_off[coll["rank"] // 8]
    coll["device"] = coll["rank"] % 8
    coll = coll.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)
    coll["order_op"] = coll.groupby(["rank", "group", "op"]).cumcount()
    coll["order_stream"] = coll.groupby(["rank", "stream"]).cumcount()
    coll = coll[list(DECLARED)].astype({k: v for k, v in DECLARED.items() if v != "object"})
    names = [f"gemm_kernel_{i}" for i in range(12)] + [f"elementwise_kernel_{i}" for i in range(8)]
    kr = np.repeat(ranks, len(names))
    med = np.tile(rng.uniform(10_000, 500_000, len(names)), n_ranks) * rng.lognormal(0, 0.01, len(kr))
    med[kr == slow_rank] *= 1.15
    kernels = pd.DataFrame(
        {
            "rank": kr.astype(np.int32),
            "device": (kr % 8).astype(np.int32),
            "name": np.tile(names, n_ranks),
            "category": "compute",
            "class": np.tile(["gemm"] * 12 + ["elementwise"] * 8, n_ranks),
            "count": 40,
            "median_ns": med,
            "total_ns": (40 * med).astype(np.int64),
        }
    )
    span = (coll.groupby("rank")["end_ns"].max() - coll.groupby("rank")["start_ns"].min()).to_numpy()
    breakdown = pd.DataFrame(
        {
            "rank": ranks.astype(np.int32),
            "device": (ranks % 8).astype(np.int32),
            "computation_ns": span // 2,
            "exposed_comm_ns": span // 3,
            "exposed_memcpy_ns": 0,
            "idle_ns": span - span // 2 - span // 3,
            "busy_ns": span // 2 + span // 3,
            "total_ns": span,
            "comm_ns": span // 3,
        }
    )
    steps_t = pd.DataFrame(
        {
            "rank": np.repeat(ranks, steps).astype(np.int32),
            "device": np.repeat(ranks % 8, steps).astype(np.int32),
            "step": np.tile(np.arange(steps), n_ranks),
            "step_ns": np.repeat(span // steps, steps),
        }
    )
    return {"collectives": coll, "kernels": kernels, "breakdown": breakdown, "steps": steps_t}, host_off


def test_reduce_1024_ranks_in_seconds():
    tables, host_off = synthetic_tables()
    rows_in = sum(len(t) for t in tables.values())
    assert rows_in < 100_000  # small per-rank tables only: ~70 rows per rank
    opts = Options()
    t0 = time.perf_counter()
    out = dict(tables)
    out.update(reduce_collectives(out, opts))
    out.update(reduce_ranks(out, opts))
    out.update(reduce_stragglers(out, opts))
    seconds = time.perf_counter() - t0
    assert seconds < 20, seconds  # a few seconds on an idle 2-core machine
    inst = out["collective_instances"]
    assert len(inst) == 5 * (8 * 128 + 2 * 8) and (inst["ranks"] == inst["group_size"]).all()
    clock = out["clock_offsets"].drop_duplicates("host").sort_values("host")
    assert np.abs(clock["offset_ns"].to_numpy() - host_off).max() < 2_000
    s = out["stragglers"]
    assert s.loc[s["flagged"], "rank"].tolist() == [777]
    assert out["ranks"].set_index("rank").loc[777, "collective_wait_ns_z"] < -3


def test_robust_z_by_hand():
    x = np.array([10.0, 12.0, 11.0, 13.0, 40.0])
    med, mad = 12.0, 1.0  # |x - 12| = 2, 0, 1, 1, 28 → median 1
    assert robust_z(x).tolist() == pytest.approx(((x - med) / (1.4826 * mad)).tolist())
    assert robust_z(np.array([5.0, 5.0, 5.0])).tolist() == [0.0, 0.0, 0.0]


def test_docstring_examples():
    import doctest

    import dtrace.analyses.collectives as a
    import dtrace.reduce.collectives as c
    import dtrace.reduce.ranks as r
    import dtrace.reduce.stragglers as s

    for mod in (a, c, r, s):
        failed, attempted = doctest.testmod(mod)
        assert attempted > 0 and failed == 0, mod.__name__
