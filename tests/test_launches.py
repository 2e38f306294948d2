"""Launch statistics, launch queues, memory and copy bandwidth over time on a part built by hand
(issue 21): every number below is worked out in the comments from the events, not by dtrace."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from dtrace.analyses.batch import prepare_part
from dtrace.analyses.launches import DELAY_EDGES_NS, launch_histogram, launch_stats, launches
from dtrace.analyses.memops import memcpy_timeline
from dtrace.analyses.memory import memory, memory_timeline
from dtrace.analyses.queues import queue_timeline, queues
from dtrace.core.schema import COLLECTIVE_SCHEMA, MEMCPY_SCHEMA, MEMORY_SCHEMA, side_table, validate_events
from dtrace.options import Options

H = dict(device=-1, stream=-1, pid=1, tid=1, external_id=-1)  # a host event of thread 1
G = dict(device=0, pid=0, external_id=-1)  # a GPU event

EVENTS = [
    # stream 7: four launches (ns)
    dict(H, kind="runtime", name="cudaLaunchKernel", start_ns=0, end_ns=10, correlation=1),
    dict(G, stream=7, tid=7, kind="kernel", name="k1", start_ns=15, end_ns=25, correlation=1),
    dict(H, kind="runtime", name="cudaLaunchKernel", start_ns=10, end_ns=20, correlation=2),
    dict(G, stream=7, tid=7, kind="kernel", name="k2", start_ns=25, end_ns=30, correlation=2),
    dict(H, kind="runtime", name="cudaLaunchKernel", start_ns=20, end_ns=24, correlation=3),
    dict(G, stream=7, tid=7, kind="kernel", name="k3", start_ns=30, end_ns=100, correlation=3),
    dict(H, kind="runtime", name="cudaLaunchKernel", start_ns=200, end_ns=260, correlation=4),
    dict(G, stream=7, tid=7, kind="kernel", name="k4", start_ns=255, end_ns=265, correlation=4),
    # stream 9: a graph launch of two kernels
    dict(H, kind="runtime", name="cudaGraphLaunch", start_ns=40, end_ns=50, correlation=5),
    dict(G, stream=9, tid=9, kind="kernel", name="g1", start_ns=60, end_ns=70, correlation=5),
    dict(G, stream=9, tid=9, kind="kernel", name="g2", start_ns=70, end_ns=80, correlation=5),
    # stream 11: a copy and a memset nobody launched in the trace
    dict(G, stream=11, tid=11, kind="memcpy", name="Memcpy HtoD", start_ns=100, end_ns=160, correlation=-1),
    dict(G, stream=11, tid=11, kind="memset", name="Memset", start_ns=240, end_ns=240, correlation=-1),
    # the host: two steps, an op with a nested op
    dict(H, kind="annotation", name="ProfilerStep#1", start_ns=0, end_ns=150, correlation=-1),
    dict(H, kind="annotation", name="ProfilerStep#2", start_ns=180, end_ns=300, correlation=-1),
    dict(H, kind="cpu_op", name="aten::mm", start_ns=180, end_ns=300, correlation=-1),
    dict(H, kind="cpu_op", name="aten::empty", start_ns=225, end_ns=235, correlation=-1),
    dict(H, kind="other", name="PyTorch Profiler (0)", start_ns=0, end_ns=400, correlation=-1),
]
MEMORY = {  # time, bytes, allocated after, reserved after
    "time_ns": [5, 60, 120, 230],
    "bytes": [100, 50, -100, 400],
    "allocated": [100, 150, 50, 450],
    "reserved": [1000, 1000, 2000, 2000],
}


def part(**options) -> object:
    ev = pd.DataFrame(EVENTS)
    ev.insert(0, "rank", 0)
    ev = validate_events(pa.Table.from_pandas(ev, preserve_index=False)).to_pandas()
    copies = side_table(MEMCPY_SCHEMA, {"row": [11, 12], "copy_kind": ["H2D", "memset"], "bytes": [600, 64]})
    mem = pa.table({**MEMORY, "pid": [1] * 4, "tid": [1] * 4, "addr": [-1] * 4}).select(MEMORY_SCHEMA.names)
    return prepare_part(
        ev,
        COLLECTIVE_SCHEMA.empty_table().to_pandas(),
        copies.to_pandas(),
        rank=0,
        device=0,
        fmt="kineto",
        options=Options(**options),
        side={"memory": mem.cast(MEMORY_SCHEMA).to_pandas()},
    )


def test_every_linked_event():
    t = launches(part(launch_rows=None)).set_index("name")
    assert list(t.index) == ["k1", "k2", "k3", "g1", "g2", "k4"]  # by GPU start
    # cpu = call end - call start; delay = GPU start - call end, clipped at 0 (k4: 255 - 260)
    assert t["cpu_ns"].tolist() == [10, 10, 4, 10, 10, 60]
    assert t["gpu_ns"].tolist() == [10, 5, 70, 10, 10, 10]
    assert t["delay_ns"].tolist() == [5, 5, 6, 10, 20, 0]
    assert t["negative_delay"].tolist() == [False] * 5 + [True]
    assert t["short"].tolist() == [False, True, False, False, False, True]  # gpu < cpu
    # each event's place in its stream's queue when launched: 1 (k1), 2 (k1, k2), 2 (k2, k3; k1
    # started at 15), 1 (k4); the graph's two kernels: one queue entry, the graph's (issue 30)
    assert t["queue_length"].tolist() == [1, 2, 2, 1, 1, 1]
    assert t["launch_name"].tolist() == ["cudaLaunchKernel"] * 3 + ["cudaGraphLaunch"] * 2 + ["cudaLaunchKernel"]
    assert t["step"].tolist() == [1, 1, 1, 1, 1, 2]


def test_outliers_worst_first_and_bounded():
    o = dict(launch_runtime_cutoff_ns=20, launch_delay_cutoff_ns=5)
    # outliers: k4 (call 60 > 20: 3 times the cut-off), k3 (delay 6 > 5: 1.2), g1 (10: 2), g2 (20: 4)
    t = launches(part(**o))
    assert t["name"].tolist() == ["k3", "g1", "g2", "k4"]
    assert t["runtime_outlier"].tolist() == [False, False, False, True]
    assert t["delay_outlier"].tolist() == [True, True, True, False]
    assert launches(part(launch_rows=2, **o))["name"].tolist() == ["g2", "k4"]  # the two worst
    assert len(launches(part(launch_rows=0, **o))) == 0
    assert len(launches(part())) == 0  # nothing beyond 50 µs or 100 µs


def test_launch_stats_per_stream():
    s = launch_stats(part(launch_runtime_cutoff_ns=20, launch_delay_cutoff_ns=5)).set_index("stream")
    assert s.index.tolist() == [7, 9]
    r = s.loc[7]
    assert r["launches"] == 4
    assert (r["cpu_total_ns"], r["cpu_mean_ns"], r["cpu_median_ns"], r["cpu_max_ns"]) == (84, 21, 10, 60)
    assert r["cpu_p95_ns"] == pytest.approx(np.quantile([10, 10, 4, 60], 0.95))
    assert (r["gpu_total_ns"], r["gpu_median_ns"]) == (95, 10)
    assert (r["delay_total_ns"], r["delay_median_ns"], r["delay_max_ns"]) == (16, 5, 6)
    assert (r["negative_delays"], r["runtime_outliers"], r["delay_outliers"]) == (1, 1, 1)
    assert (r["short_kernels"], r["short_gpu_ns"], r["short_share"]) == (2, 15, 0.5)
    g = s.loc[9]
    assert (g["launches"], g["cpu_total_ns"], g["delay_total_ns"], g["delay_outliers"]) == (2, 20, 30, 2)


def test_launch_delay_histogram():
    h = launch_histogram(part())
    assert h["bin"].tolist() == [0] and h["count"].tolist() == [6] and h["share"].tolist() == [1.0]
    assert (h["lo_ns"].tolist(), h["hi_ns"].tolist()) == ([0], [1000])
    assert DELAY_EDGES_NS.tolist()[:5] == [0, 1000, 2000, 5000, 10000] and DELAY_EDGES_NS[-1] == 10**9


def test_queue_summary():
    q = queues(part(queue_limit=2)).set_index("stream")
    r = q.loc[7]
    # change points 0+ 10+ 15- 20+ 25- 30- 200+ 255-: lengths 1 2 1 2 1 0 1 0
    v = np.array([1, 2, 1, 2, 1, 0, 1, 0])
    assert r["points"] == 8 and r["length_mean"] == 1.0
    assert r["length_std"] == pytest.approx(v.std(ddof=1))
    assert (r["length_min"], r["length_p25"], r["length_median"], r["length_p75"], r["length_max"]) == (
        0,
        0.75,
        1.0,
        1.25,
        2,
    )
    # ∫ length: 1·10 + 2·5 + 1·5 + 2·5 + 1·5 + 0·170 + 1·55 = 95 over the span 0..255
    assert r["span_ns"] == 255 and r["length_time_mean"] == pytest.approx(95 / 255)
    assert r["blocked_ns"] == 10  # length >= 2 in [10, 15) and [20, 25)
    # empty from 30 to 200, k3 runs until 100; the host is busy in [0, 150) and [180, 300)
    # (steps and ops; the profiler's own span, kind "other", does not count): 50 + 20
    assert r["starved_ns"] == 70
    assert r["blocked_share"] == pytest.approx(10 / 255) and r["starved_share"] == pytest.approx(70 / 255)
    # the graph launch is one entry, leaving the queue when its first kernel starts: 40+ 60-, 1 0
    # (counted per kernel it would be 40+ 40+ 60- 70-, at the limit of 2 from 40 to 60)
    g = q.loc[9]
    assert (g["points"], g["length_max"], g["starved_ns"], g["blocked_ns"]) == (2, 1, 0, 0)
    assert 11 not in q.index  # nothing launched on the copy stream
    d = queues(part())  # the runtime's limit, CUDA's 1,022
    assert d["blocked_ns"].tolist() == [0, 0] and d["limit"].tolist() == [1022, 1022]


def test_queue_timeline():
    # window 0 .. 265 (k4's end) in 5 bins of 265 // 5 + 1 = 54 ns
    t = queue_timeline(part(timeline_bins=5))
    s7 = t.loc[t["stream"] == 7].set_index("bin")
    assert s7.index.tolist() == [0, 1, 2, 3, 4]
    assert s7["lo_ns"].tolist() == [0, 54, 108, 162, 216] and s7["hi_ns"].tolist() == [54, 108, 162, 216, 270]
    assert s7["length_max"].tolist() == [2, 0, 0, 1, 1]
    assert s7["length_mean"].tolist() == pytest.approx([40 / 54, 0, 0, 16 / 54, 39 / 54])
    assert s7["starved_ns"].tolist() == [0, 8, 42, 20, 0]  # [100, 108), [108, 150), [180, 200)
    assert s7["step"].tolist() == [1, 1, 1, 2, 2]  # the step holding each bin's middle (27, ..., 189, 243)
    s9 = t.loc[t["stream"] == 9].set_index("bin")
    assert s9.index.tolist() == [0, 1]  # empty afterwards: left out
    assert s9["length_max"].tolist() == [1, 1]  # the graph, queued from 40 to 60
    assert s9["length_mean"].tolist() == pytest.approx([14 / 54, 6 / 54])


def test_memory_summary_and_timeline():
    m = memory(part()).iloc[0]
    assert (m["events"], m["allocations"], m["frees"], m["allocated_bytes"], m["freed_bytes"]) == (4, 3, 1, 550, 100)
    assert (m["start_allocated_bytes"], m["end_allocated_bytes"]) == (0, 450)
    assert (m["peak_allocated_bytes"], m["peak_ns"], m["peak_reserved_bytes"]) == (450, 230, 2000)
    assert m["peak_op"] == "aten::empty" and m["peak_step"] == 2  # the innermost op at 230
    t = memory_timeline(part(timeline_bins=5)).set_index("bin")
    assert t.index.tolist() == [0, 1, 2, 3, 4]
    assert t["allocated_bytes"].tolist() == [100, 150, 50, 50, 450]
    assert t["allocated_max_bytes"].tolist() == [100, 150, 150, 50, 450]
    assert t["reserved_bytes"].tolist() == [1000, 1000, 2000, 2000, 2000]
    assert t["reserved_max_bytes"].tolist() == [1000, 1000, 2000, 2000, 2000]


def test_copy_bandwidth_over_time():
    t = memcpy_timeline(part(timeline_bins=5))
    c = t.loc[t["op"] == "H2D"].set_index("bin")
    # 600 bytes over [100, 160): 8 ns in bin 1, 52 ns in bin 2
    assert c.index.tolist() == [1, 2]
    assert c["bytes"].tolist() == [80, 520] and c["busy_ns"].tolist() == [8, 52]
    assert c["copies"].tolist() == [1, 0]
    assert c["bandwidth_bytes_per_s"].tolist() == pytest.approx([1e10, 1e10])
    s = t.loc[t["op"] == "memset"].iloc[0]  # zero duration: whole in the bin of its start
    assert (s["bin"], s["bytes"], s["busy_ns"], s["copies"]) == (4, 64, 0, 1)
    assert np.isnan(s["bandwidth_bytes_per_s"])


def test_empty_and_no_launches():
    ev = pd.DataFrame([dict(G, rank=0, stream=7, tid=7, kind="kernel", name="k", start_ns=0, end_ns=5, correlation=-1)])
    ev = validate_events(pa.Table.from_pandas(ev[["rank", *EVENTS[0].keys()]], preserve_index=False)).to_pandas()
    b = prepare_part(
        ev,
        COLLECTIVE_SCHEMA.empty_table().to_pandas(),
        MEMCPY_SCHEMA.empty_table().to_pandas(),
        rank=0,
        device=0,
        fmt="kineto",
        options=Options(),
    )
    for fn in (launches, launch_stats, launch_histogram, queues, queue_timeline, memory, memory_timeline):
        assert len(fn(b)) == 0, fn.__name__


def test_a_graph_launch_is_one_queue_entry_in_a_real_h200_trace(tmp_path):
    """The H200 recording replays a CUDA graph of 5 GPU events twice: each replay is one entry of
    stream 7's launch queue, so the stream has two change points per launch call (read from the
    JSON here, by correlation id), not per kernel."""
    from test_reference_launches import raw

    import dtrace

    path = os.path.join(os.path.dirname(__file__), "data", "h200", "ops_rank0.pt.trace.json.gz")
    g = raw(path)["gpu"]
    linked = g.loc[g["launch_name"].notna()]
    assert linked.loc[linked["launch_name"] == "cudaGraphLaunch"].groupby("correlation").size().tolist() == [5, 5]
    calls = linked.drop_duplicates(["stream", "correlation"]).groupby("stream").size()
    res = dtrace.analyze(path, tmp_path / "out", scheduler="sync")
    points = res.queues.set_index("stream")["points"]
    assert points.to_dict() == {int(s): 2 * int(n) for s, n in calls.items()}


def test_launches_view_of_many_ranks_shows_the_worst_streams_and_a_summary(tmp_path, capsys):
    """Issue 31: ``dtrace launches OUT`` on many ranks showed ranks 0-4 in rank order, not the worst
    streams, and no cross-rank summary."""
    import dtrace
    from dtrace.cli.main import main
    from dtrace.generate import synth

    synth.generate(tmp_path / "job", ranks=8, steps=2, kernels_per_step=20, seed=3)
    res = dtrace.analyze(str(tmp_path / "job"), tmp_path / "out", scheduler="sync")
    assert main(["launches", str(tmp_path / "out"), "--top", "3", "--fmt", "csv"]) == 0
    rows = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
    stats = res.launch_stats
    assert rows["cpu_p95_ns"].iloc[0] == stats["cpu_p95_ns"].max() and rows["cpu_p95_ns"].is_monotonic_decreasing
    assert main(["launches", str(tmp_path / "out"), "--top", "3"]) == 0
    text = capsys.readouterr().out
    assert "across ranks, per stream id" in text and "worst first" in text
