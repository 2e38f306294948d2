"""Memory operations: copies by direction (count, time, bytes, bandwidth) and memsets."""

import os

import numpy as np
import pandas as pd
import pytest
import rawtrace
from testpaths import shared

import dtrace
from dtrace.analyses import ANALYSES, conform
from dtrace.analyses.batch import prepare_part as prepare
from dtrace.core.schema import COLLECTIVE_SCHEMA
from dtrace.options import Options

DIRECTION = {"HtoD": "H2D", "DtoH": "D2H", "DtoD": "D2D", "PtoP": "P2P"}


@pytest.fixture(scope="module")
def cache():
    """The session's shared ingest cache: each shared trace is parsed once."""
    return rawtrace.ingest_cache()


def raw_memops(gpu: pd.DataFrame) -> pd.DataFrame:
    m = gpu.loc[gpu["kind"] != "kernel"].copy()
    m["op"] = np.where(m["kind"] == "memset", "memset", m["name"].str.split().str[1].map(DIRECTION))
    m["b"] = pd.to_numeric(m["bytes"]).fillna(-1).astype(np.int64)
    g = m.groupby("op")
    out = pd.DataFrame(
        {"count": g.size(), "total_ns": g["dur_ns"].sum(), "min_ns": g["dur_ns"].min(), "max_ns": g["dur_ns"].max()}
    )
    known = m.loc[m["b"] >= 0].groupby("op")
    out["bytes"] = known["b"].sum().reindex(out.index).fillna(-1).astype(np.int64)
    out["bw"] = known["b"].sum() * 1e9 / known["dur_ns"].sum()
    return out


@pytest.mark.parametrize("rank", [0, 1])
def test_memops_match_raw_events_with_bytes(rank, cache):
    src = shared("kineto", "hta-2rank")
    res = dtrace.analyze(src, cache=cache, scheduler="sync")
    raw = rawtrace.load(os.path.join(src, f"sampled_rank-{rank}.json.gz"))
    exp = raw_memops(raw["gpu"])
    got = res.memops.loc[res.memops["rank"] == rank].set_index("op")
    assert set(got.index) == set(exp.index) == {"H2D", "D2H", "D2D", "memset"}
    got = got.loc[exp.index]
    for c in ("count", "total_ns", "min_ns", "max_ns"):
        np.testing.assert_array_equal(got[c], exp[c], err_msg=c)
    np.testing.assert_array_equal(got["mean_ns"], rawtrace.whole_ns(exp["total_ns"] / exp["count"]))
    # copies and memsets alike: bytes from the events' "bytes" args, bandwidth over their time
    assert (exp["bytes"] > 0).all()
    np.testing.assert_array_equal(got["bytes"], exp["bytes"])
    np.testing.assert_allclose(got["bandwidth_bytes_per_s"], exp["bw"], rtol=1e-9)
    n_steps = raw["steps"]["step"].nunique()
    np.testing.assert_allclose(got["count_per_iter"], exp["count"] / n_steps)
    np.testing.assert_array_equal(got["total_per_iter_ns"], rawtrace.whole_ns(exp["total_ns"] / n_steps))
    all_time = raw["gpu"]["dur_ns"].sum()
    np.testing.assert_allclose(got["time_share"], exp["total_ns"] / all_time)


def test_memops_rocm_trace_partly_without_bytes(cache):
    path = shared("kineto", "single", "mi300_resnet_rccl_rank0.json.gz")
    res = dtrace.analyze(path, cache=cache, scheduler="sync")
    assert int(res.breakdown["clipped_events"].iloc[0]) == 0
    raw = rawtrace.load(path)
    exp = raw_memops(raw["gpu"])
    got = res.memops.set_index("op").loc[exp.index]
    np.testing.assert_array_equal(got["count"], exp["count"])
    np.testing.assert_array_equal(got["total_ns"], exp["total_ns"])
    # a third of the copies state no size: bytes and bandwidth come from those that do
    m = raw["gpu"].loc[raw["gpu"]["kind"] == "memcpy"]
    assert 0 < (m["bytes"] == -1).sum() < len(m)
    assert got.loc["D2D", "bytes"] == exp.loc["D2D", "bytes"] > 0
    assert got.loc["D2D", "bandwidth_bytes_per_s"] == pytest.approx(exp.loc["D2D", "bw"], rel=1e-9)
    assert got.loc["memset", "count"] == 108 and pd.isna(got.loc["memset", "bytes"])  # no size stated: NA


def make_part(rows, side):
    """Device-0 events (name, kind, stream, start, end) and a memcpy side table (row, kind, bytes)."""
    ev = pd.DataFrame(
        [
            dict(
                rank=0,
                device=0,
                stream=r[2],
                pid=0,
                tid=r[2],
                kind=r[1],
                name=r[0],
                start_ns=r[3],
                end_ns=r[4],
                correlation=-1,
                external_id=-1,
            )
            for r in rows
        ]
    )
    ev["rank"] = ev["rank"].astype(np.int32)
    for c in ("kind", "name"):
        ev[c] = ev[c].astype("category")
    mem = pd.DataFrame(side, columns=["row", "copy_kind", "bytes"]).astype({"row": np.int64, "bytes": np.int64})
    mem["copy_kind"] = mem["copy_kind"].astype("category")
    part = prepare(
        ev, COLLECTIVE_SCHEMA.empty_table().to_pandas(), mem, rank=0, device=0, fmt="kineto", options=Options(iters=2)
    )
    a = next(a for a in ANALYSES if a.table == "memops")
    return conform(a.func(part), a.columns, a.table).set_index("op")


def test_memops_by_hand():
    rows = [
        ("Memcpy PtoP (Device -> Device)", "memcpy", 7, 0, 1000),
        ("Memcpy PtoP (Device -> Device)", "memcpy", 7, 2000, 5000),
        ("Memcpy HtoD (Pinned -> Device)", "memcpy", 7, 6000, 6500),
        ("Memset (Device)", "memset", 7, 7000, 7100),
        ("__amd_rocclr_copyBuffer", "kernel", 8, 0, 400),
        ("sgemm", "kernel", 8, 500, 900),
    ]
    side = [(0, "P2P", 1000), (1, "P2P", 2000), (2, "H2D", -1), (3, "memset", 64)]
    m = make_part(rows, side)
    assert m.loc["P2P", ["count", "total_ns", "bytes"]].tolist() == [2, 4000, 3000]
    assert m.loc["P2P", "bandwidth_bytes_per_s"] == pytest.approx(3000 / 4000e-9)  # 0.75 GB/s
    assert pd.isna(m.loc["H2D", "bytes"]) and np.isnan(m.loc["H2D", "bandwidth_bytes_per_s"])
    assert m.loc["memset", ["count", "total_ns", "bytes"]].tolist() == [1, 100, 64]
    assert m.loc["other", ["count", "total_ns"]].tolist() == [1, 400]  # a copy kernel: no direction known
    assert "sgemm" not in m.index and len(m) == 4
    assert m.loc["P2P", "count_per_iter"] == 1.0 and m.loc["P2P", "total_per_iter_ns"] == 2000.0
    assert m.loc["P2P", "time_share"] == pytest.approx(4000 / (4000 + 500 + 100 + 400 + 400))


def test_no_memops_gives_empty_table():
    m = make_part([("sgemm", "kernel", 7, 0, 10)], [])
    assert len(m) == 0 and "bandwidth_bytes_per_s" in m.columns
