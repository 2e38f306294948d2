"""Device gaps: intervals in which no stream of a GPU is busy, with their causes (issue 14).

The device gaps of every (rank, device) add up to exactly the breakdown's idle time on every
shared trace; gaps and causes match a plain loop over the raw JSON events (all streams pooled);
hand-made parts pin the rules (an NCCL stream's wait under compute is no device gap).
"""

import glob
import os

import numpy as np
import pandas as pd
import pytest
import rawtrace
from test_gaps import make_part
from test_gaps import tables as stream_tables
from testpaths import TRACES, shared

import dtrace
from dtrace.analyses import run_analyses
from dtrace.analyses.batch import prepare
from dtrace.execution.tasks import concat_parts
from dtrace.options import Options
from dtrace.readers import detect

CAUSES = ("host_wait", "kernel_wait", "other")


def _shared_files():
    files = sorted(glob.glob(os.path.join(TRACES, "kineto", "*", "*.json.gz")))
    files += sorted(glob.glob(os.path.join(TRACES, "jax", "*.json.gz")))
    files += sorted(glob.glob(os.path.join(TRACES, "nsys", "*.sqlite")))
    return files


def _analyse(path, options, only):
    try:
        tf = detect(path).read(path)
    except Exception as exc:  # the shared edge traces without GPU work fail on purpose
        assert "no GPU activity" in str(exc), exc
        return None
    tables = [p.tables() for p in tf.parts]
    ev, side = concat_parts(tables)
    parts = pd.DataFrame(
        {
            "part": np.arange(len(tf.parts), dtype=np.int32),
            "rank": np.arange(len(tf.parts), dtype=np.int32),
            "device": np.array([p.device for p in tf.parts], np.int32),
            "format": [tf.format] * len(tf.parts),
            "base_ns": np.full(len(tf.parts), int(tf.meta.get("base_time_ns") or 0), np.int64),
        }
    )
    return run_analyses(prepare(ev, side, parts, options), only=only)


@pytest.mark.parametrize("path", _shared_files(), ids=lambda p: os.path.basename(p).split(".")[0])
@pytest.mark.parametrize(
    "kw", [{}, {"compat": "tracelens"}, {"linked_only": True}], ids=["default", "tracelens", "linked"]
)
def test_device_idle_equals_breakdown_idle(path, kw):
    t = _analyse(path, Options(**kw), {"breakdown", "device_gaps", "gaps"})
    if t is None:
        return
    bd, dg = t["breakdown"], t["device_gaps"]
    assert dg[["rank", "device"]].values.tolist() == bd[["rank", "device"]].values.tolist()
    np.testing.assert_array_equal(dg["idle_ns"].to_numpy(), bd["idle_ns"].to_numpy())
    np.testing.assert_array_equal(dg["span_ns"].to_numpy(), bd["total_ns"].to_numpy())
    np.testing.assert_array_equal(dg["events"].to_numpy(), bd["gpu_events"].to_numpy())
    by_cause = sum(dg[f"{c}_ns"].to_numpy() for c in CAUSES)
    np.testing.assert_array_equal(by_cause, dg["idle_ns"].to_numpy())
    np.testing.assert_array_equal(sum(dg[f"{c}_gaps"].to_numpy() for c in CAUSES), dg["gaps"].to_numpy())


@pytest.mark.parametrize(
    "trace",
    [("kineto", "hta-2rank", "sampled_rank-0.json.gz"), ("kineto", "single", "a100_nccl_collectives.json.gz")],
    ids=lambda t: t[-1].split(".")[0],
)
def test_device_gaps_match_a_loop_over_the_raw_events(trace):
    path = shared(*trace)
    raw = rawtrace.load(path)
    loop = rawtrace.gaps_by_loop(raw["gpu"].assign(stream=0), kernel_wait_ns=30_000)  # all streams pooled
    res = dtrace.analyze(
        path,
        cache=rawtrace.ingest_cache(),
        scheduler="sync",
        hist_min_ns=1_000,
        hist_max_ns=1_000_000,
        hist_bins=8,
        hist_log=False,
    )
    assert int(res.breakdown["clipped_events"].iloc[0]) == 0  # dtrace's ends are the raw ones
    dg = res.device_gaps.iloc[0]
    assert dg["gaps"] == len(loop) > 10
    assert dg["idle_ns"] == loop["gap_ns"].sum() == res.breakdown["idle_ns"].iloc[0]
    assert (dg["min_ns"], dg["max_ns"]) == (loop["gap_ns"].min(), loop["gap_ns"].max())
    assert dg["mean_ns"] == pytest.approx(loop["gap_ns"].mean(), rel=1e-12, abs=0.5)
    assert dg["std_ns"] == pytest.approx(loop["gap_ns"].std(ddof=1), rel=1e-9, abs=0.5)
    for c in CAUSES:
        sel = loop["cause"] == c
        assert (dg[f"{c}_gaps"], dg[f"{c}_ns"]) == (sel.sum(), loop.loc[sel, "gap_ns"].sum()), c
    h = res.device_gap_histogram
    edges = np.linspace(1_000, 1_000_000, 9)
    want, _ = np.histogram(loop["gap_ns"].to_numpy(), bins=edges)
    assert h["count"].tolist() == want.tolist()
    # the per-stream table keeps its own, larger figures
    assert res.gaps["idle_ns"].sum() > dg["idle_ns"]


def test_nccl_stream_waiting_under_compute_is_no_device_gap():
    # stream 7 computes from 0 to 100 and 120 to 200; the NCCL stream 9 runs 10-20 and 150-160:
    # its 130 ns wait is a stream gap, but the GPU is idle only from 100 to 120
    rows = [
        ("gemm", 7, 0, 100, 1),
        ("gemm", 7, 120, 200, 2),
        ("ncclKernel_AllReduce", 9, 10, 20, 3),
        ("ncclKernel_AllReduce", 9, 150, 160, 4),
    ]
    launches = [(1, 0), (2, 110), (3, 0), (4, 0)]  # gemm 2 launched at 110, after the busy end 100
    part = make_part(rows, launches=launches)
    t = run_analyses(part, only={"device_gaps", "gaps", "breakdown", "device_gap_histogram"})
    dg = t["device_gaps"].iloc[0]
    assert (dg["gaps"], dg["idle_ns"], dg["host_wait_ns"], dg["host_wait_gaps"]) == (1, 20, 20, 1)
    assert dg["idle_ns"] == t["breakdown"]["idle_ns"].iloc[0]
    st = stream_tables(part)["gaps"].set_index("stream")
    assert st.loc[9, "idle_ns"] == 130 and st.loc[9, "kernel_wait_ns"] + st.loc[9, "other_ns"] == 130
    assert t["device_gap_histogram"]["count"].sum() == 1


def test_device_gap_cause_comes_from_the_event_that_ends_it():
    # the gap 50-80 ends with B (stream 8, launched at 60 > 50: host wait); C starts later on
    # stream 7 launched early; the gap 100-300 ends with D, launched at 0 (in time, long: other)
    rows = [("A", 7, 0, 50, 1), ("B", 8, 80, 100, 2), ("C", 7, 90, 95, 3), ("D", 7, 300, 310, 4), ("E", 8, 330, 340, 5)]
    launches = [(1, 0), (2, 60), (3, 0), (4, 0), (5, 0)]
    dg = run_analyses(make_part(rows, launches=launches, options=Options(kernel_wait_ns=25)), only={"device_gaps"})[
        "device_gaps"
    ].iloc[0]
    assert (dg["gaps"], dg["idle_ns"]) == (3, 30 + 200 + 20)
    assert (dg["host_wait_ns"], dg["kernel_wait_ns"], dg["other_ns"]) == (30, 20, 200)
    assert (dg["min_ns"], dg["max_ns"]) == (20, 200)


def test_parts_without_events_have_a_zero_row():
    path = shared("kineto", "hta-2rank", "sampled_rank-0.json.gz")
    t = _analyse(path, Options(step=999), {"device_gaps", "breakdown"})
    assert len(t["device_gaps"]) == len(t["breakdown"]) == 1
    assert t["device_gaps"][["events", "gaps", "idle_ns"]].iloc[0].tolist() == [0, 0, 0]
