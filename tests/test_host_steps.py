"""The host side of a real H200 recording whose steps are each bound by something known by
construction (``tests/data/h200/host_steps.json``, issue 21): a launch-bound step, a data-loader
stall, a synchronisation, a flood of launches; plus the CLI views of it."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from rawtrace import to_ns
from testpaths import ROOT

import dtrace

H200 = os.path.join(ROOT, "tests", "data", "h200", "host_rank0.pt.trace.json.gz")


@pytest.fixture(scope="module")
def res():
    return dtrace.analyze(H200, scheduler="sync", launch_rows=None)


@pytest.fixture(scope="module")
def doc():
    with gzip.open(H200, "rt") as f:
        return json.load(f)


def _window(doc: dict, name: str, nth: int = 0) -> tuple[int, int]:
    """The absolute ns window of the ``nth`` host event called ``name``."""
    base = int(doc["baseTimeNanoseconds"])
    ev = sorted((e["ts"], e["dur"]) for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("name") == name)
    ts, dur = ev[nth]
    start = int(to_ns(np.array([ts]))[0]) + base
    return start, start + int(to_ns(np.array([dur]))[0])


def test_the_recording_says_what_each_step_does():
    with open(os.path.join(ROOT, "tests", "data", "h200", "host_steps.json"), encoding="utf-8") as f:
        steps = json.load(f)
    assert "launch-bound" in steps["ProfilerStep#3"] and "data-loader" in steps["ProfilerStep#4"]
    assert "queue" in steps["ProfilerStep#6"]


def test_launch_bound_step(res):
    """Step 3: 3,000 tiny kernels from a Python loop: almost every kernel is shorter on the GPU than
    its launch call on the host, and the queue never holds more than a few."""
    la = res.launches
    s3 = la.loc[la["step"] == 3]
    assert len(s3) > 3000
    assert s3["short"].mean() > 0.95
    assert np.quantile(s3["queue_length"], 0.99) <= 5  # (the first ones queue behind step 2's work)
    q = res.queue_timeline
    assert q.loc[q["step"] == 3, "starved_ns"].sum() > 0.4 * q.loc[q["step"] == 3, "hi_ns"].sub(q["lo_ns"]).sum()


def test_data_loader_stall_starves_the_gpu(res, doc):
    """Step 4: the first batch comes from a DataLoader sleeping 40 ms: every bin inside that window
    is starved (queue empty, GPU idle, host busy in the data loader)."""
    lo, hi = _window(doc, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 2)
    assert hi - lo > 40_000_000
    q = res.queue_timeline
    inside = q.loc[(q["lo_ns"] >= lo) & (q["hi_ns"] <= hi)]
    assert len(inside) >= 15
    width = int((inside["hi_ns"] - inside["lo_ns"]).iloc[0])
    assert (inside["starved_ns"] == width).all() and (inside["length_max"] == 0).all()
    assert (inside["step"] == 4).all()


def test_launch_flood_fills_the_queue(res):
    """Step 6: a 60 ms GEMM chain, then 3,000 tiny kernels launched faster than they drain: the
    queue peaks there (661 launches, HTA's figure, tests/data/hta/queue_summary.csv) and so do the
    launch delays; it stays below CUDA's limit (1,022 launches), so the host never blocks."""
    q = res.queue_timeline
    peak = q.loc[q["length_max"].idxmax()]
    assert peak["step"] == 6 and peak["length_max"] == 661
    assert res.queues["length_max"].iloc[0] == 661 and res.queues["blocked_ns"].iloc[0] == 0
    la = res.launches
    assert la.loc[la["delay_ns"].idxmax(), "step"] == 6
    assert dtrace.analyze(H200, scheduler="sync", queue_limit=600).queues["blocked_ns"].iloc[0] > 0


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dtrace", *args], capture_output=True, text=True, timeout=300)


def test_cli_launches_and_memory_views():
    p = _cli("launches", H200, "--top", "3")
    assert p.returncode == 0, p.stderr
    assert "launch statistics per stream" in p.stdout and "launch queues" in p.stdout
    assert "worst launches" in p.stdout and "launch-bound" in p.stdout
    j = _cli("launches", H200, "--fmt", "json", "--top", "2")
    d = json.loads(j.stdout)
    assert set(d) == {"stats", "queues", "worst"} and len(d["worst"]) == 2
    assert d["stats"][0]["launches"] > 6000
    m = _cli("memory", H200, "--fmt", "json")
    peaks = json.loads(m.stdout)["peaks"]
    assert peaks[0]["peak_allocated_bytes"] == 2551428096  # the largest Total Allocated (test_memory.py)
    t = _cli("memory", H200)
    assert "allocated memory peak per GPU" in t.stdout and "allocated over time" in t.stdout and "█" in t.stdout
    bad = _cli("launches", H200, "--rank", "5")
    assert bad.returncode == 2 and "no rank 5" in bad.stderr and "ranks: 0" in bad.stderr
    bad = _cli("launches", H200, "--launch-rows", "x")
    assert bad.returncode == 2 and "not a number of rows" in bad.stderr


QUEUE_FULL = os.path.join(ROOT, "tests", "data", "h200", "queue_full_rank0.pt.trace.json.gz")


def test_cuda_launch_queue_is_full_at_1022():
    """A recording whose queue fills (tests/data/h200/record_queue_full.py: 4,000 tiny kernels
    behind 200 ms of matrix products): the length stops at the runtime's limit, every launch call
    made there blocks, and the time at the limit is the time the host spent in those calls (from
    the raw JSON); HTA's default of 1,024 is never reached."""
    res = dtrace.analyze(QUEUE_FULL, scheduler="sync", launch_rows=None)
    q = res.queues.iloc[0]
    assert q["limit"] == 1022 and q["length_max"] == 1022
    la = res.launches
    full = la["queue_length"] == 1022
    assert la.loc[full, "cpu_ns"].median() > 100 * la.loc[~full, "cpu_ns"].median()
    with gzip.open(QUEUE_FULL, "rt") as f:
        doc = json.load(f)
    calls = np.array(
        [e["dur"] for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("name") == "cudaLaunchKernel"]
    )
    blocked_us = calls[calls > 50].sum()  # the launch calls that waited for a free entry
    assert q["blocked_ns"] == pytest.approx(blocked_us * 1000, rel=0.03)
    assert dtrace.analyze(QUEUE_FULL, scheduler="sync", queue_limit=1024).queues["blocked_ns"].iloc[0] == 0


def test_no_default_queue_limit_for_rocm():
    """HIP's queue on MI300X took 1,840 launches without a launch call blocking: no limit is known."""
    from testpaths import shared

    res = dtrace.analyze(shared("kineto", "single", "mi300_resnet_rccl_rank0.json.gz"), scheduler="sync")
    assert res.queues["limit"].isna().all() and (res.queues["blocked_ns"] == 0).all()
    assert res.queues["length_max"].max() == 1840  # HTA's figure, tests/data/hta/queue_summary.csv
