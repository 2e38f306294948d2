"""Launch statistics and launch queues against HTA 0.5.0 (issue 21).

HTA's own numbers are in ``tests/data/hta/`` (``bench/hta_launch_stats.py`` produced them with
``HTA_DISABLE_NS_ROUNDING=1`` and ``include_last_profiler_step=True``; CI has no HTA). Every
difference between dtrace and HTA falls in a class of docs/semantics.md, "Launches" ("Against
HTA"), and is checked here by naming the events it comes from, computed from the raw JSON:

1. launch calls HTA does not count: its launch statistics know only ``cudaLaunchKernel``,
   ``cudaLaunchKernelExC``, ``cudaMemcpyAsync``, ``cudaMemsetAsync`` (and MTIA's
   ``runFunction``), its queues add ``cuLaunchKernel`` and five HIP calls; dtrace counts every
   runtime call that launched a GPU event (``cuLaunchKernelEx``, ``cudaGraphLaunch``, ...);
2. dtrace's same-stream clipping: a kernel that runs into the next memcpy/memset of its stream
   is cut at that start (docs/semantics.md, "GPU categories"), HTA keeps its duration;
3. the order of a launch and a GPU start at the same instant: HTA's sort leaves it to an unstable
   quicksort, dtrace puts the launch first; only the queue length at those points differs.

With the launch calls restricted to HTA's lists, dtrace equals HTA event by event and stream by
stream.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
from functools import lru_cache

import numpy as np
import pandas as pd
import pytest
from rawtrace import to_ns
from testpaths import ROOT, TRACES

from dtrace.analyses.batch import prepare_part
from dtrace.analyses.launches import Series, launch_stats, launches, linked
from dtrace.analyses.queues import queues
from dtrace.options import Options
from dtrace.readers import detect

REF = os.path.join(ROOT, "tests", "data", "hta")
HTA_STATS_CALLS = {
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
    "runFunction - job_prep_and_submit_for_execution",
}
"""The launch calls of HTA 0.5.0's ``get_cuda_kernel_launch_stats`` (``include_memory_events``)."""
HTA_QUEUE_CALLS = {
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
    "runFunction - job_prep_and_submit_for_execution",
    "cuLaunchKernel",
    "hipLaunchKernel",
    "hipExtModuleLaunchKernel",
    "hipMemcpyAsync",
    "hipMemsetAsync",
    "hipMemcpyWithStream",
}
"""The launch calls of HTA 0.5.0's queue length (``get_runtime_launch_events_query``)."""


def _meta() -> dict:
    with open(os.path.join(REF, "meta.json"), encoding="utf-8") as f:
        return json.load(f)


META = _meta()
NAMES = list(META["traces"])


def trace_files(name: str) -> list[str]:
    out = []
    for f in META["traces"][name]["files"]:
        path = os.path.join(TRACES, *f.split("/")[3:]) if f.startswith("../shared/") else os.path.join(ROOT, f)
        if not os.path.exists(path):
            pytest.skip(f"trace not available: {path}")
        out.append(path)
    return out


@lru_cache(maxsize=None)
def hta_launches() -> pd.DataFrame:
    return pd.read_csv(os.path.join(REF, "launches.csv.gz"))


@lru_cache(maxsize=None)
def hta_series() -> pd.DataFrame:
    return pd.read_csv(os.path.join(REF, "queue_series.csv.gz"))


def us(x: pd.Series) -> np.ndarray:
    """HTA's float µs as whole ns."""
    return np.rint(x.to_numpy(np.float64) * 1000).astype(np.int64)


@lru_cache(maxsize=None)
def raw(path: str) -> dict:
    """A plain reading of the JSON: per GPU event its stream, correlation, start and duration (ns
    from the trace's µs) and the name of the runtime call with its correlation."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset"}
    host = {}
    for e in ev:
        if (e.get("cat") or "").lower() in ("cuda_runtime", "cuda_driver", "runtime"):
            c = int((e.get("args") or {}).get("correlation", -1))
            host.setdefault(c, e["name"])
    rows = [
        (
            (e.get("cat") or "").lower(),
            int(e["args"].get("stream", e.get("tid"))),
            int(e["args"].get("correlation", -1)),
            e["ts"],
            e["dur"],
        )
        for e in ev
        if (e.get("cat") or "").lower() in gpu_cats
    ]
    gpu = pd.DataFrame(rows, columns=["cat", "stream", "correlation", "ts", "dur"])
    gpu["launch_name"] = gpu["correlation"].map(host)
    gpu["start_ns"] = to_ns(gpu["ts"].to_numpy()) + int(doc.get("baseTimeNanoseconds") or 0)
    return {"gpu": gpu, "rank": (doc.get("distributedInfo") or {}).get("rank", 0)}


def with_correlation(name: str, table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (rows of GPU events, by rank, stream and GPU start) with each event's correlation
    id from the raw JSON (the results keep no per-event ids)."""
    ids = []
    for path in trace_files(name):
        r = raw(path)
        ids.append(r["gpu"][["stream", "start_ns", "correlation"]].assign(rank=r["rank"]))
    ids = pd.concat(ids).drop_duplicates(["rank", "stream", "start_ns"], keep=False)
    return table.merge(ids, on=["rank", "stream", "start_ns"], how="inner", validate="many_to_one")


def batches(name: str, calls: set[str] | None = None, **options) -> list:
    """One prepared batch per trace file of ``name``; with ``calls``, runtime calls named
    otherwise are unlinked first (their correlation set to -1), as HTA's lists leave them out."""
    out = []
    for path in trace_files(name):
        tf = detect(path).read(path)
        part = tf.parts[0]
        side = part.side_tables()
        ev = part.events.to_pandas()
        if calls is not None:
            other = (ev["kind"].astype(str) == "runtime") & ~ev["name"].astype(str).isin(calls)
            ev.loc[other.to_numpy(), "correlation"] = -1
        out.append(
            prepare_part(
                ev,
                side["collectives"].to_pandas(),
                side["memcpy"].to_pandas(),
                rank=tf.rank_hint or 0,
                device=part.device,
                fmt="kineto",
                options=Options(**options),
                base_ns=int(tf.meta["base_time_ns"]),
            )
        )
    return out


def clipped(path: str) -> dict[int, int]:
    """Correlation → duration (ns) of the kernels dtrace cuts by its same-stream rule, computed
    from the raw JSON: a kernel that ends after the start of the next memcpy/memset of its stream
    ends there."""
    g = raw(path)["gpu"]
    out = {}
    start = to_ns(g["ts"].to_numpy())
    for _, f in g.assign(start=start, end=start + to_ns(g["dur"].to_numpy())).groupby("stream"):
        f = f.sort_values("start", kind="stable")
        mem_starts = f.loc[f["cat"] != "kernel", "start"].to_numpy()
        for r in f.loc[f["cat"] == "kernel"].itertuples(index=False):
            later = mem_starts[mem_starts > r.start]
            if later.size and r.end > later.min():
                out[int(r.correlation)] = int(later.min() - r.start)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_launches_equal_hta_event_by_event(name):
    got = pd.concat([launches(b) for b in batches(name, launch_rows=None)], ignore_index=True)
    n_got = len(got)
    got = with_correlation(name, got)
    assert len(got) >= 0.99 * n_got  # a few events share their stream and start (graph kernels)
    want = hta_launches().query("trace == @name")
    m = got.merge(want, on=["rank", "correlation"], how="outer", indicator=True)
    assert (m["_merge"] != "right_only").all(), "HTA links an event dtrace does not"
    both = m.loc[m["_merge"] == "both"]
    assert (both["stream_x"] == both["stream_y"]).all()
    assert np.abs(both["cpu_ns"].to_numpy() - us(both["cpu_duration"])).max(initial=0) <= 1
    assert np.abs(both["delay_ns"].to_numpy() - us(both["launch_delay"])).max(initial=0) <= 1
    # class 2: the GPU durations differ exactly for the kernels dtrace clips
    cut = {}
    for path in trace_files(name):
        cut.update(clipped(path))
    diff = np.abs(both["gpu_ns"].to_numpy() - us(both["gpu_duration"])) > 1
    assert set(both.loc[diff, "correlation"]) == set(cut) & set(both["correlation"])
    assert (both.loc[diff, "gpu_ns"].to_numpy() == [cut[c] for c in both.loc[diff, "correlation"]]).all()
    # class 1: every event only dtrace links was launched by a call HTA's list lacks
    only = m.loc[m["_merge"] == "left_only"]
    assert not set(only["launch_name"]) & HTA_STATS_CALLS
    expected = {}
    for path in trace_files(name):
        g = raw(path)["gpu"]
        counts = g.loc[g["launch_name"].notna() & ~g["launch_name"].isin(HTA_STATS_CALLS), "launch_name"].value_counts()
        for k, v in counts.items():
            expected[k] = expected.get(k, 0) + int(v)
    assert only["launch_name"].value_counts().to_dict() == expected


def _expected_stats(name: str, o: Options) -> pd.DataFrame:
    """HTA's events aggregated per (rank, stream) the way docs/semantics.md defines launch_stats,
    with the durations of the kernels dtrace clips (class 2) as the raw JSON gives them."""
    want = hta_launches().query("trace == @name").copy()
    cut = {}
    for path in trace_files(name):
        cut.update(clipped(path))
    want["cpu"] = us(want["cpu_duration"])
    want["gpu"] = us(want["gpu_duration"])
    want.loc[want["correlation"].isin(cut), "gpu"] = want["correlation"].map(cut)
    want["delay"] = us(want["launch_delay"])
    rows = []
    for (rank, stream), f in want.groupby(["rank", "stream"]):
        cpu, gpu, delay = f["cpu"].to_numpy(), f["gpu"].to_numpy(), f["delay"].to_numpy()
        rows.append(
            {
                "rank": rank,
                "stream": stream,
                "launches": len(f),
                "cpu_total_ns": cpu.sum(),
                "cpu_median_ns": np.median(cpu),
                "cpu_p95_ns": np.quantile(cpu, 0.95),
                "cpu_max_ns": cpu.max(),
                "gpu_total_ns": gpu.sum(),
                "gpu_median_ns": np.median(gpu),
                "delay_total_ns": delay.sum(),
                "delay_median_ns": np.median(delay),
                "delay_p95_ns": np.quantile(delay, 0.95),
                "delay_max_ns": delay.max(),
                "runtime_outliers": int((cpu > o.launch_runtime_cutoff_ns).sum()),
                "delay_outliers": int((delay > o.launch_delay_cutoff_ns).sum()),
                "short_kernels": int((gpu < cpu).sum()),
                "short_gpu_ns": gpu[gpu < cpu].sum(),
            }
        )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("name", [n for n in NAMES if n != "mi300_resnet_rccl_rank0"])
def test_launch_stats_equal_hta_with_its_launch_calls(name):
    o = Options()
    got = pd.concat([launch_stats(b) for b in batches(name, HTA_STATS_CALLS)], ignore_index=True)
    want = _expected_stats(name, o)
    m = got.merge(want, on=["rank", "stream"], how="outer", suffixes=("", "_hta"), indicator=True)
    assert (m["_merge"] == "both").all()
    n = m["launches"].to_numpy(np.float64)
    for col in want.columns.drop(["rank", "stream"]):
        # HTA computes each delay in float µs of absolute times: ±1 ns per event (float64 resolves
        # 1 ns near 4e12 µs); medians and quantiles interpolate and the table holds whole ns
        tol = n if col == "delay_total_ns" else 1.0 if "median" in col or "p95" in col or "delay" in col else 0
        assert (np.abs(m[col].to_numpy(np.float64) - m[f"{col}_hta"].to_numpy(np.float64)) <= tol).all(), col


def test_hta_has_no_launch_statistics_for_rocm():
    """HTA's launch statistics list no HIP call: the MI300 trace gives none, dtrace all of them."""
    assert not len(hta_launches().query("trace == 'mi300_resnet_rccl_rank0'"))
    (b,) = batches("mi300_resnet_rccl_rank0", launch_rows=None)
    g = raw(trace_files("mi300_resnet_rccl_rank0")[0])["gpu"]
    got = launches(b)
    assert len(got) == int(g["launch_name"].notna().sum()) > 2000
    assert set(got["launch_name"]) <= {n for n in HTA_QUEUE_CALLS if n.startswith("hip")} | {"hipExtLaunchKernel"}


def _canonical(values: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """A queue series with the points of equal time in dtrace's order (launches before starts):
    each point's change is its value minus the previous one."""
    delta = np.diff(np.r_[0, values])
    order = np.lexsort((-delta, ts))
    return np.cumsum(delta[order])


def _ties(values: np.ndarray, ts: np.ndarray) -> int:
    """Points where a launch and a GPU start share a time (HTA's order there is its sort's)."""
    delta = np.diff(np.r_[0, values])
    f = pd.DataFrame({"t": ts, "up": delta > 0})
    g = f.groupby("t")["up"].agg(["any", "all"])
    return int((g["any"] & ~g["all"]).sum())


@pytest.mark.parametrize("name", NAMES)
def test_queue_series_and_summary_equal_hta_with_its_launch_calls(name):
    series = hta_series().query("trace == @name")
    summary = pd.read_csv(os.path.join(REF, "queue_summary.csv")).query("trace == @name")
    zero_ns = int(to_ns(np.array([float(META["traces"][name]["min_ts_us"])]))[0])  # HTA's time zero
    for b in batches(name, HTA_QUEUE_CALLS):
        rank = int(b.rank)
        lk = linked(b)
        s = Series(b, lk)
        table = queues(b)
        codes = lk.streams()
        streams = lk.gstream[codes]
        mine_rank = summary.loc[summary["rank"] == rank]
        assert sorted(streams.tolist()) == sorted(mine_rank["stream"].tolist())
        for code, stream in zip(codes.tolist(), streams.tolist()):
            h = series.loc[(series["rank"] == rank) & (series["stream"] == stream)]
            mine_t = s.t[s.group == code]
            mine_v = s.v[s.group == code]
            hts = h["ts"].to_numpy(np.float64)
            assert len(h) == mine_t.size
            # the same instants (HTA's µs after its time zero)
            rel = (mine_t - int(b.parts["base_ns"].iloc[0]) - zero_ns) / 1000.0
            assert np.abs(np.sort(rel) - np.sort(hts)).max() < 1e-3
            canon = _canonical(h["queue_length"].to_numpy(), hts)
            assert (canon == mine_v).all()
            row = table.loc[table["stream"] == stream].iloc[0]
            hrow = mine_rank.loc[mine_rank["stream"] == stream].iloc[0]
            ref = pd.Series(canon).describe() if _ties(h["queue_length"].to_numpy(), hts) else hrow
            for mine, theirs in (
                ("points", "count"),
                ("length_mean", "mean"),
                ("length_std", "std"),
                ("length_min", "min"),
                ("length_p25", "25%"),
                ("length_median", "50%"),
                ("length_p75", "75%"),
                ("length_max", "max"),
            ):
                assert row[mine] == pytest.approx(float(ref[theirs]), rel=1e-12, abs=1e-9), (stream, mine)


def test_hta_tie_order_is_the_only_queue_difference_left():
    """Class 3, named: the streams where HTA's series puts a GPU start before a launch at the
    same instant; there (and only there) HTA's summary differs from dtrace's."""
    series = hta_series()
    summary = pd.read_csv(os.path.join(REF, "queue_summary.csv"))
    tied = []
    for (trace, rank, stream), h in series.groupby(["trace", "rank", "stream"], sort=True):
        v, t = h["queue_length"].to_numpy(), h["ts"].to_numpy()
        canon = _canonical(v, t)
        hrow = summary.query("trace == @trace and rank == @rank and stream == @stream").iloc[0]
        same = float(pd.Series(canon).mean()) == pytest.approx(float(hrow["mean"]), rel=1e-12)
        if not (canon == v).all():
            tied.append((trace, rank, stream))
            assert _ties(v, t) > 0
        else:
            assert same
    assert tied == [
        ("a100_5streams_sendrecv_rank0", 0, 7),
        ("a100_5streams_sendrecv_rank0", 0, 27),
        ("v100_ns_resolution_rank-0", 0, 7),
    ]


@pytest.mark.parametrize("name", NAMES)
def test_queue_points_beyond_hta_are_the_launches_it_does_not_count(name):
    """Class 1 for the queues: with every launch call, each stream has two more change points per
    call HTA's queue list lacks (``cudaGraphLaunch``, ``cuLaunchKernelEx``, ``hipExtLaunchKernel``):
    one entry per call and stream, a graph's kernels included (issue 30); no other stream differs
    in its points."""
    summary = pd.read_csv(os.path.join(REF, "queue_summary.csv")).query("trace == @name")
    for b, path in zip(batches(name), trace_files(name)):
        rank = int(b.rank)
        g = raw(path)["gpu"]
        calls = g.loc[g["launch_name"].notna() & ~g["launch_name"].isin(HTA_QUEUE_CALLS)]
        extra = calls.drop_duplicates(["stream", "correlation"]).groupby("stream").size()
        got = queues(b).set_index("stream")["points"]
        hta = summary.loc[summary["rank"] == rank].set_index("stream")["count"].reindex(got.index).fillna(0)
        assert ((got - hta).to_dict()) == {k: 2 * int(extra.get(k, 0)) for k in got.index}


def _blocked_rows() -> list[dict]:
    with open(os.path.join(REF, "queue_blocked.csv"), newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("row", _blocked_rows(), ids=lambda r: f"{r['trace']}-{r['limit']}-{r['stream']}")
def test_time_blocked_at_the_queue_limit_equals_hta(row):
    name, limit, rank, stream = row["trace"], int(row["limit"]), int(row["rank"]), int(row["stream"])
    series = hta_series().query("trace == @name and rank == @rank and stream == @stream")
    v, t = series["queue_length"].to_numpy(), series["ts"].to_numpy(np.float64)
    canon = _canonical(v, t)
    # HTA's own sum, and the same sum over the series in dtrace's tie order
    dur = np.diff(t)
    hta_ns = float(row["duration_at_max_queue_length"]) * 1000
    assert hta_ns == pytest.approx(float(dur[v[:-1] >= limit].sum()) * 1000, abs=1e-3)
    expect = float(dur[canon[:-1] >= limit].sum()) * 1000
    for b in batches(name, HTA_QUEUE_CALLS, queue_limit=limit):
        if int(b.rank) != rank:
            continue
        got = queues(b).set_index("stream").loc[stream, "blocked_ns"]
        assert abs(int(got) - expect) <= 1 + 1e-6 * expect
