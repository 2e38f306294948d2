"""The host side across ranks (issue 21): ``launch_stats_xrank`` and ``memory_xrank`` on tables
built by hand, and on a generated job whose host-bound rank is known by construction."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

import dtrace
from dtrace.generate.synth import generate
from dtrace.reduce.host_xrank import launch_stats_xrank, memory_xrank


def _stats(rank: int, stream: int, launches: int, cpu_mean: int, delay_mean: int, **kw) -> dict:
    return {
        "rank": rank,
        "device": 0,
        "stream": stream,
        "launches": launches,
        "cpu_total_ns": cpu_mean * launches,
        "cpu_mean_ns": cpu_mean,
        "cpu_median_ns": kw.get("cpu_median", cpu_mean),
        "cpu_max_ns": kw.get("cpu_max", cpu_mean),
        "gpu_total_ns": 10 * launches,
        "delay_total_ns": delay_mean * launches,
        "delay_mean_ns": delay_mean,
        "delay_median_ns": kw.get("delay_median", delay_mean),
        "delay_max_ns": delay_mean,
        "negative_delays": 1,
        "runtime_outliers": 0,
        "delay_outliers": 2,
        "short_kernels": kw.get("short", 0),
    }


def test_launch_stats_across_ranks_by_hand():
    ls = pd.DataFrame(
        [
            _stats(0, 7, 10, 4_000, 100, short=5),
            _stats(1, 7, 30, 6_000, 900, short=3),
            _stats(2, 7, 20, 5_000, 300, short=2),
            _stats(0, 9, 4, 1_000, 50),
        ]
    )
    q = pd.DataFrame(
        {
            "rank": [0, 1, 2, 0],
            "device": [0, 0, 0, 0],
            "stream": [7, 7, 7, 9],
            "length_time_mean": [1.0, 8.0, 3.0, 0.5],
            "blocked_ns": [0, 70, 0, 0],
            "starved_ns": [600, 0, 100, 10],
            "span_ns": [1_000, 1_000, 1_000, 100],
            "starved_share": [0.6, 0.0, 0.1, 0.1],
        }
    )
    x = launch_stats_xrank(ls, q).set_index("stream")
    r = x.loc[7]
    assert (r["parts"], r["launches"]) == (3, 60)
    assert r["cpu_mean_ns"] == round((4_000 * 10 + 6_000 * 30 + 5_000 * 20) / 60)  # pooled: 5,333
    assert r["cpu_median_ns"] == 5_000 and r["delay_median_ns"] == 300  # medians over the parts
    assert r["delay_mean_ns"] == round((100 * 10 + 900 * 30 + 300 * 20) / 60)
    assert r["short_share"] == pytest.approx(10 / 60)
    assert (r["negative_delays"], r["delay_outliers"]) == (3, 6)
    assert (r["slowest_rank"], r["slowest_cpu_mean_ns"]) == (1, 6_000)
    assert r["spread"] == pytest.approx(6_000 / 5_000)  # over the median part's mean
    assert (r["delayed_rank"], r["delayed_mean_ns"]) == (1, 900)
    assert r["length_time_mean"] == 3.0 and r["blocked_ns"] == 70 and r["starved_ns"] == 700
    assert r["starved_share"] == pytest.approx(700 / 3_000)
    assert (r["starved_rank"], r["starved_max_share"]) == (0, 0.6)
    assert x.loc[9, "parts"] == 1 and x.loc[9, "spread"] == 1.0
    assert len(launch_stats_xrank(None)) == 0 and "starved_rank" in launch_stats_xrank(None).columns


def test_memory_peaks_across_ranks_by_hand():
    mem = pd.DataFrame(
        {
            "rank": [0, 1, 2, 3],
            "device": [0, 0, 0, 0],
            "peak_allocated_bytes": [10, 40, 30, 5],
            "peak_reserved_bytes": [100, 100, 200, 50],
            "peak_op": ["aten::mm", "aten::mm", "aten::mm", "aten::cat"],
        }
    )
    x = memory_xrank(mem)
    assert x["peak_op"].tolist() == ["aten::mm", "aten::cat"]  # most parts first
    assert x["parts"].tolist() == [3, 1]
    assert x["peak_median_bytes"].tolist() == [30, 5] and x["peak_max_bytes"].tolist() == [40, 5]
    assert x["max_rank"].tolist() == [1, 3] and x["reserved_median_bytes"].tolist() == [100, 50]


def test_host_bound_rank_of_a_generated_job_starves(tmp_path):
    """``--fault launch``: the rank's host needs longer than each kernel runs to launch it, so its
    GPU waits with an empty queue; every stream names it as the most starved, and its queue is
    the shortest of all ranks."""
    generate(tmp_path, ranks=8, steps=3, seed=1, faults=["launch:rank=3:slow=0.5"])
    with open(os.path.join(tmp_path, "ground_truth.json"), encoding="utf-8") as f:
        truth = json.load(f)
    bad = {int(f["rank"]) for f in truth["faults"] if f["kind"] == "launch"}
    assert bad == {3}
    res = dtrace.analyze(str(tmp_path), scheduler="sync")
    x = res.launch_stats_xrank
    assert len(x) > 1 and set(x["starved_rank"]) == bad
    q = res.queues
    shortest = q.loc[q.groupby("stream")["length_time_mean"].idxmin(), "rank"]
    assert set(shortest) == bad
    healthy = q.loc[q["rank"] != 3].groupby("stream")["starved_share"].max()
    assert (x.set_index("stream")["starved_max_share"] > 2 * healthy).all()
    np.testing.assert_array_equal(np.sort(x["stream"].to_numpy()), np.sort(q["stream"].unique()))
