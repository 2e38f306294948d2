"""Hardware counters (issue 32, item 2): CUPTI range profiling's ``cuda_profiler_range`` events.

(a) The reader's ``counter_ranges`` / ``range_counters`` side tables, equal on the compiled
    scanner's path and the pure one, at any block size; (b) ``kernel_counters`` and
    ``kernel_counter_values`` of the shared range-profiled trace against a plain gzip+json reading
    of it (ranges and launch calls sorted by ``ts`` and paired in order, the enclosing ``cpu_op``s
    found by time containment on the launch's thread, the counters summed by hand); (c) HTA 0.5.0's
    ``get_cupti_counter_data_with_operators`` on the same trace (its output stored in
    tests/data/hta_counters/ by record_counters.py there, so HTA is not needed here); (d) measured
    against modelled FLOPs (``op_counters``) on hand-made traces: the shared trace records no
    shapes, so its ops have no modelled FLOPs; (e) a trace with kernels and ranges, counts that
    differ, several ranks in one partition.
"""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pandas as pd
import pytest
from rawtrace import to_ns
from testpaths import ROOT, shared

import dtrace
from dtrace.analyses import ANALYSES, run_analyses
from dtrace.analyses.batch import prepare, prepare_part
from dtrace.analyses.counters import SASS_FLOPS
from dtrace.execution.tasks import concat_parts
from dtrace.ingest import cache
from dtrace.options import Options
from dtrace.readers import _scanned, detect
from dtrace.readers.kineto import read_kineto
from dtrace.results import in_memory

CUPTI = ("kineto", "cupti", "benchmark_result_924719_1679055439_trace.json.gz")
HTA = os.path.join(ROOT, "tests", "data", "hta_counters", "cupti_counters.csv")
FFMA = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"
FADD = "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"
HFMA = "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum"
SIDE = ("counter_ranges", "range_counters")


@pytest.fixture(scope="module")
def cupti(tmp_path_factory):
    out = tmp_path_factory.mktemp("cupti") / "out"
    return dtrace.analyze(shared(*CUPTI), str(out), scheduler="sync")


# -- the raw trace, read independently ---------------------------------------------------------------
def _raw(path: str) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def _expected(path: str) -> pd.DataFrame:
    """Per range (in ts order, ties in file order): its name, start, the n-th cudaLaunchKernel's
    start and correlation, the outermost and innermost cpu_op containing that launch on its
    thread, its counters and FLOPs."""
    ev = [e for e in _raw(path)["traceEvents"] if e.get("ph") == "X"]
    ranges = sorted((e for e in ev if e.get("cat") == "cuda_profiler_range"), key=lambda e: e["ts"])
    launches = sorted(
        (e for e in ev if e.get("cat") == "cuda_runtime" and e["name"] == "cudaLaunchKernel"), key=lambda e: e["ts"]
    )
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    rows = []
    for i, r in enumerate(ranges):
        row = {"range": i, "name": r["name"], "start_ns": int(to_ns([r["ts"]])[0]), "counters": dict(r["args"])}
        row["measured_flops"] = sum(w * r["args"][c] for c, w in SASS_FLOPS.items() if c in r["args"])
        if i < len(launches):
            lc = launches[i]
            stack = sorted(
                (
                    o
                    for o in ops
                    if (o["pid"], o["tid"]) == (lc["pid"], lc["tid"])
                    and o["ts"] <= lc["ts"]
                    and lc["ts"] + lc["dur"] <= o["ts"] + o["dur"]
                ),
                key=lambda o: (o["ts"], -o["dur"]),
            )
            row |= {
                "launch_ns": int(to_ns([lc["ts"]])[0]),
                "correlation": lc["args"]["correlation"],
                "top_op": stack[0]["name"] if stack else "",
                "bottom_op": stack[-1]["name"] if stack else "",
                "stack": [o["name"] for o in stack],
            }
        rows.append(row)
    return pd.DataFrame(rows)


# -- (a) the reader --------------------------------------------------------------------------------
def _side(path, monkeypatch, pure, **kw):
    monkeypatch.setenv("DTRACE_PURE_SCAN", "1" if pure else "")
    tf = read_kineto(str(path), **kw)
    return [(p.device, {k: p.side_tables()[k].combine_chunks() for k in SIDE}) for p in tf.parts]


def _same_side(a, b):
    assert [d for d, _ in a] == [d for d, _ in b]
    for (_, ta), (_, tb) in zip(a, b):
        for k in SIDE:
            assert ta[k].schema == tb[k].schema, k
            assert ta[k].to_pylist() == tb[k].to_pylist(), k


@pytest.mark.parametrize("block", [None, 1 << 12, 300])
def test_reader_paths_agree_on_the_shared_trace(block, monkeypatch):
    """Both scanner paths, at small block sizes too (ranges in many blocks), give the same side
    tables, and those hold every range and counter of the file."""
    path = shared(*CUPTI)
    kw = {"block": block} if block else {}
    ref = _side(path, monkeypatch, True)
    _same_side(ref, _side(path, monkeypatch, True, **kw))
    _same_side(ref, _side(path, monkeypatch, False, **kw))
    if block is None and not _scanned.AVAILABLE and os.environ.get("DTRACE_REQUIRE_SCANNER", "") not in ("", "0"):
        pytest.fail("DTRACE_REQUIRE_SCANNER is set but the compiled scanner is not built")
    ((device, tables),) = ref
    exp = _expected(path)
    assert device == 0  # the ranges' pid: the GPU Kineto profiled
    ranges = tables["counter_ranges"].to_pandas()
    assert ranges["range"].tolist() == list(range(77)) == exp["range"].tolist()
    assert ranges["name"].astype(str).tolist() == exp["name"].tolist()
    assert ranges["start_ns"].tolist() == exp["start_ns"].tolist()
    values = tables["range_counters"].to_pandas()
    assert len(values) == 77 * 9
    got = {(int(r), str(c)): v for r, c, v in zip(values["range"], values["counter"], values["value"])}
    assert got == {(i, c): float(v) for i, cs in enumerate(exp["counters"]) for c, v in cs.items()}


@pytest.mark.parametrize("ascii_only", [True, False])
def test_reader_paths_agree_on_unusual_ranges(ascii_only, tmp_path, monkeypatch):
    """Escaped and raw non-ASCII names (the scanner leaves those events to msgspec), floats,
    booleans, nested values among the args, null or absent args, ties in ts, an implausible time,
    a range of another GPU: the same tables on both paths at every block size."""
    ranges = [
        ('kérnel "q"', 1000, {FFMA: 3, "x.ratio": 0.25, "flag": True, "nested": {"a": 1}}),
        ("élan", 1000, None),
        ("tie", 1000, {FADD: 1e3, "big": 2**70}),
        ("bad", -5e15, {FFMA: 1}),
    ]
    doc = _kineto(ranges, launches=LAUNCHES, ops=OPS)
    other_gpu = dict(doc["traceEvents"][-2], pid=3, name="on gpu 3")
    other_gpu.pop("args")  # a range without args
    doc["traceEvents"].append(other_gpu)
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(json.dumps(doc, ensure_ascii=ascii_only))
    ref = _side(path, monkeypatch, True)
    for block in (None, 1 << 12, 200):
        kw = {"block": block} if block else {}
        _same_side(ref, _side(path, monkeypatch, False, **kw))
        _same_side(ref, _side(path, monkeypatch, True, **kw))
    assert [d for d, _ in ref] == [0, 3]
    r0 = ref[0][1]["counter_ranges"].to_pydict()
    assert r0["range"] == [0, 1, 2] and r0["name"] == ['kérnel "q"', "élan", "tie"]  # the implausible one dropped
    c0 = ref[0][1]["range_counters"].to_pydict()
    assert c0["range"] == [0, 0, 2, 2] and c0["value"] == [3.0, 0.25, 1000.0, float(2**70)]  # numbers only
    assert ref[1][1]["counter_ranges"].to_pydict()["name"] == ["on gpu 3"]
    assert ref[1][1]["range_counters"].num_rows == 0


def test_a_trace_without_ranges_reads_as_before(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_kineto([], kernels=[("k", 10, 5, 7)], launches=[(1, 2, 7)])))
    for pure in (True, False):
        ((_, tables),) = _side(path, monkeypatch, pure)
        assert tables["counter_ranges"].num_rows == tables["range_counters"].num_rows == 0


# -- (b) the shared trace against the raw JSON -----------------------------------------------------------
def test_kernel_counters_equal_an_independent_reading(cupti):
    exp = _expected(shared(*CUPTI))
    kc = cupti.kernel_counters
    assert len(kc) == len(exp) == 77
    assert kc["paired"].all() and (kc["launches"] == 77).all()  # as many launches as ranges
    assert kc["range"].tolist() == exp["range"].tolist()
    assert kc["name"].tolist() == exp["name"].tolist()
    assert kc["start_ns"].tolist() == exp["start_ns"].tolist()
    assert kc["launch_ns"].astype("int64").tolist() == exp["launch_ns"].tolist()
    assert kc["correlation"].astype("int64").tolist() == exp["correlation"].tolist()
    assert kc["top_op"].tolist() == exp["top_op"].tolist()
    assert kc["bottom_op"].tolist() == exp["bottom_op"].tolist()
    assert kc["measured_flops"].tolist() == [float(x) for x in exp["measured_flops"]]
    assert (kc["counters"] == 9).all() and (kc["launch_name"] == "cudaLaunchKernel").all()
    assert (kc["kernel"] == "").all()  # the range profiler records no kernel events
    # every range is attributed to an op: its owner is one of the ops around its launch
    assert (kc["top_op"] != "").all() and (kc["bottom_op"] != "").all()
    assert all(op in stack for op, stack in zip(kc["op"], exp["stack"]))


def test_counter_values_equal_the_raw_args(cupti):
    exp = _expected(shared(*CUPTI))
    v = cupti.kernel_counter_values
    want = [(i, c, float(x)) for i, cs in enumerate(exp["counters"]) for c, x in cs.items()]
    assert list(zip(v["range"].tolist(), v["counter"].tolist(), v["value"].tolist())) == want
    assert set(v["rank"]) == {0} and set(v["device"]) == {0}


def test_op_counters_sum_the_kernels_of_each_op(cupti):
    """Per owning op, the summed measured FLOPs of its ranges; no shapes recorded in this trace,
    so no modelled FLOPs and no ratio."""
    kc, oc = cupti.kernel_counters, cupti.op_counters
    per_op = kc.groupby("op")["measured_flops"].agg(["size", "sum"])
    assert oc["op"].tolist() == sorted(per_op.index)
    assert oc.set_index("op")["kernels"].to_dict() == per_op["size"].to_dict()
    assert oc.set_index("op")["measured_flops"].to_dict() == per_op["sum"].to_dict()
    assert oc["kernels"].sum() == 77
    assert (oc["modelled"] == 0).all() and oc["modelled_flops"].isna().all() and oc["ratio"].isna().all()
    conv = oc.set_index("op").loc["aten::convolution"]
    assert conv["instances"] == 10  # ten aten::conv2d calls, each a convolution owning its kernels


# -- (c) HTA 0.5.0 ---------------------------------------------------------------------------------------
def test_equal_to_hta(cupti):
    """HTA's pairing, top- and bottom-level ops, counters and FLOPs (its own weights), row by row."""
    hta = pd.read_csv(HTA, keep_default_na=False)
    kc, v = cupti.kernel_counters, cupti.kernel_counter_values
    assert len(hta) == len(kc) == 77
    assert kc["name"].tolist() == hta["name"].tolist()
    assert kc["start_ns"].tolist() == (hta["ts_us"] * 1000).tolist()
    assert kc["correlation"].astype("int64").tolist() == hta["launch_correlation"].tolist()
    assert kc["top_op"].tolist() == hta["top_level_op"].tolist()
    assert kc["bottom_op"].tolist() == hta["bottom_level_op"].tolist()
    assert kc["measured_flops"].tolist() == hta["flops"].astype(float).tolist()
    wide = v.pivot(index="range", columns="counter", values="value")
    for c in SASS_FLOPS:
        assert wide[c].tolist() == hta[c].astype(float).tolist(), c
    assert all(op in stack.split(" > ") for op, stack in zip(kc["op"], hta["op_stack"]))


# -- (d), (e) hand-made traces ------------------------------------------------------------------------------
BASE = 1_700_000_000_000_000_000
M, N, K = 64, 16, 32


def _kineto(ranges, *, kernels=(), launches=(), ops=(), rank=0):
    """A Kineto trace: ``ops`` (name, ts, dur, args), ``launches`` (ts, dur, correlation) of
    cudaLaunchKernel, ``kernels`` (name, ts, dur, correlation) on device 0, ``ranges`` (name, ts,
    args) on device 0; host thread 1/1, times in µs from ``BASE``."""
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": 1, "ts": ts, "dur": d, "args": a}
        for n, ts, d, a in ops
    ]
    ev += [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts, "dur": d,
         "args": {"correlation": c, "External id": c}}
        for ts, d, c in launches
    ]  # fmt: skip
    ev += [
        {"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 7, "ts": ts, "dur": d,
         "args": {"correlation": c, "device": 0, "stream": 7}}
        for n, ts, d, c in kernels
    ]  # fmt: skip
    ev += [
        {"ph": "X", "cat": "cuda_profiler_range", "name": n, "pid": 0, "tid": 0, "ts": ts, "dur": 10, "args": a}
        for n, ts, a in ranges
    ]
    return {"traceEvents": ev, "distributedInfo": {"rank": rank}, "baseTimeNanoseconds": BASE}


MM_ARGS = {
    "External id": 1,
    "Input Dims": [[M, K], [K, N]],
    "Input type": ["float", "float"],
    "Input Strides": [[K, 1], [N, 1]],
    "Concrete Inputs": ["", ""],
}
OPS = [("aten::mm", 100, 50, MM_ARGS), ("aten::relu", 200, 50, {"External id": 2})]
LAUNCHES = [(110, 5, 7), (210, 5, 8)]
RANGES = [  # written out of order: the second by ts first
    ("relu_kernel", 1010, {"dram__bytes_read.sum": 4096, "note": "text is not a counter"}),
    ("sgemm_kernel", 1000, {FFMA: 30000, FADD: 100, HFMA: 0, "sm__inst_executed_pipe_tensor.sum": 12.5}),
]


def _analyze(tmp_path, docs, **kw):
    paths = []
    tmp_path.mkdir(parents=True, exist_ok=True)
    for i, doc in enumerate(docs):
        p = tmp_path / f"rank{i}.json"
        p.write_text(json.dumps(doc))
        paths.append(str(p))
    return dtrace.analyze(paths, str(tmp_path / "out"), scheduler="sync", **kw)


def test_measured_against_modelled_flops(tmp_path):
    """aten::mm with recorded shapes, one launch, one range: measured = 2·ffma + fadd, modelled =
    2·M·N·K; aten::relu's range has no SASS counters (NaN) and no shapes (no model)."""
    r = _analyze(tmp_path, [_kineto(RANGES, launches=LAUNCHES, ops=OPS)])
    kc = r.kernel_counters
    assert kc["name"].tolist() == ["sgemm_kernel", "relu_kernel"]  # by ts
    assert kc["op"].tolist() == ["aten::mm", "aten::relu"]
    assert kc["top_op"].tolist() == kc["bottom_op"].tolist() == ["aten::mm", "aten::relu"]
    assert kc["counters"].tolist() == [4, 1]  # numbers only: the text argument is not a counter
    assert kc["measured_flops"].iloc[0] == 2 * 30000 + 100 and np.isnan(kc["measured_flops"].iloc[1])
    assert kc["start_ns"].tolist() == [BASE + 1_000_000, BASE + 1_010_000]
    oc = r.op_counters.set_index("op")
    mm = oc.loc["aten::mm"]
    assert (mm["instances"], mm["kernels"], mm["modelled"]) == (1, 1, 1)
    assert mm["measured_flops"] == 60100.0 and mm["modelled_flops"] == 2.0 * M * N * K
    assert mm["ratio"] == 60100.0 / (2 * M * N * K)
    relu = oc.loc["aten::relu"]
    assert np.isnan(relu["measured_flops"]) and np.isnan(relu["modelled_flops"]) and np.isnan(relu["ratio"])
    v = r.kernel_counter_values
    assert v.loc[v["range"] == 0, "counter"].tolist() == [FFMA, FADD, HFMA, "sm__inst_executed_pipe_tensor.sum"]
    assert v.loc[v["range"] == 1, "value"].tolist() == [4096.0]


def test_kernels_and_ranges_in_one_trace(tmp_path):
    """With kernel events too, each paired launch names its kernel (the range's name: the pairing
    is right), and the modelled FLOPs equal op_perf's (flops × count) for the same op."""
    kernels = [("sgemm_kernel", 120, 20, 7), ("relu_kernel", 220, 3, 8)]
    r = _analyze(tmp_path, [_kineto(RANGES, kernels=kernels, launches=LAUNCHES, ops=OPS)])
    kc = r.kernel_counters
    assert kc["kernel"].tolist() == kc["name"].tolist() == ["sgemm_kernel", "relu_kernel"]
    assert kc["correlation"].astype("int64").tolist() == [7, 8]
    perf = r.op_perf.set_index("op")
    oc = r.op_counters.set_index("op")
    assert oc.loc["aten::mm", "modelled_flops"] == perf.loc["aten::mm", "flops"] * perf.loc["aten::mm", "count"]
    assert r.kernels["count"].sum() == 2  # the kernels are analysed as usual


def test_counts_that_differ_pair_what_they_can(tmp_path):
    """More ranges than launches: the extra range is unpaired, never an error; more launches than
    ranges: every range paired, ``launches`` says the counts differ."""
    extra = [*RANGES, ("late_kernel", 1020, {FFMA: 1})]
    r = _analyze(tmp_path / "a", [_kineto(extra, launches=LAUNCHES, ops=OPS)])
    kc = r.kernel_counters
    assert kc["paired"].tolist() == [True, True, False]
    assert (kc["launches"] == 2).all()
    last = kc.iloc[2]
    assert last["launch_name"] == "" and pd.isna(last["launch_ns"]) and pd.isna(last["correlation"])
    assert last["top_op"] == last["bottom_op"] == last["op"] == "" and last["measured_flops"] == 2.0
    assert r.op_counters["kernels"].sum() == 2  # an unpaired range belongs to no op
    more = [*LAUNCHES, (300, 5, 9)]
    r = _analyze(tmp_path / "b", [_kineto(RANGES, launches=more, ops=OPS)])
    kc = r.kernel_counters
    assert kc["paired"].all() and (kc["launches"] == 3).all() and len(kc) == 2


def test_a_launch_outside_every_op_owns_its_range(tmp_path):
    r = _analyze(tmp_path, [_kineto(RANGES[:1], launches=[(500, 5, 9)])])
    row = r.kernel_counters.iloc[0]
    assert row["paired"] and row["top_op"] == row["bottom_op"] == "" and row["op"] == "cudaLaunchKernel"
    assert r.op_counters["op"].tolist() == ["cudaLaunchKernel"]


def test_ranges_without_host_events(tmp_path):
    """Ranges and nothing else on the host: every range unpaired, no op, no error."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_kineto(RANGES)))
    (part,) = detect(str(path)).read(str(path)).parts
    tables = part.tables()
    events = tables.events.to_pandas().iloc[:0]  # not even the ranges' own host events
    side = {k: t.to_pandas().assign(part=np.int32(0)) for k, t in tables.side.items()}
    batch = prepare_part(
        events.assign(row=np.int64(0)), side["collectives"], side["memcpy"], rank=0, device=0, fmt="kineto",
        options=Options(), side=side,
    )  # fmt: skip
    mine = [x for x in ANALYSES if x.table in ("kernel_counters", "kernel_counter_values", "op_counters")]
    got = run_analyses(batch, mine)
    kc = got["kernel_counters"]
    assert kc["name"].tolist() == ["sgemm_kernel", "relu_kernel"] and not kc["paired"].any()
    assert (kc["launches"] == 0).all() and (kc["op"] == "").all() and kc["measured_flops"].iloc[0] == 60100.0
    assert len(got["kernel_counter_values"]) == 5 and got["op_counters"].empty


def test_ranks_in_one_partition_pair_on_their_own(tmp_path):
    """Two ranks analysed together (one partition) give each rank's tables analysed alone."""
    a = _kineto(RANGES, launches=LAUNCHES, ops=OPS, rank=0)
    b = _kineto([*RANGES, ("x", 990, {FFMA: 5})], launches=[(105, 2, 6), *LAUNCHES], ops=OPS, rank=1)
    both = _analyze(tmp_path / "both", [a, b])
    for rank, doc in ((0, a), (1, b)):
        alone = _analyze(tmp_path / f"alone{rank}", [doc])
        for table in ("kernel_counters", "kernel_counter_values", "op_counters"):
            got = getattr(both, table)
            got = got.loc[got["rank"] == rank].reset_index(drop=True)
            pd.testing.assert_frame_equal(got, getattr(alone, table).reset_index(drop=True), check_dtype=True)
    kc = both.kernel_counters
    assert kc.loc[kc["rank"] == 1, "name"].tolist() == ["x", "sgemm_kernel", "relu_kernel"]


def test_one_batch_of_parts_equals_each_part_alone(tmp_path):
    """The shared trace and two hand-made ranks in one Batch (vectorised over parts) give the
    tables each part gives alone."""
    a = tmp_path / "a.json"
    a.write_text(json.dumps(_kineto(RANGES, launches=LAUNCHES, ops=OPS)))
    b = tmp_path / "b.json"
    b.write_text(json.dumps(_kineto([*RANGES, ("x", 990, {FFMA: 5})], launches=LAUNCHES[:1], ops=OPS)))
    tables = [p.tables() for path in (shared(*CUPTI), str(a), str(b)) for p in detect(path).read(path).parts]
    parts = pd.DataFrame(
        {"part": np.arange(3, dtype=np.int32), "rank": np.array([4, 5, 6], np.int32), "device": np.zeros(3, np.int32)}
    ).assign(format="kineto", base_ns=np.int64(0))
    mine = [x for x in ANALYSES if x.table in ("kernel_counters", "kernel_counter_values", "op_counters")]
    both = run_analyses(prepare(*concat_parts(tables), parts, Options()), mine)
    for i, t in enumerate(tables):
        alone = run_analyses(prepare(*concat_parts([t]), parts.iloc[[i]].assign(part=np.int32(0)), Options()), mine)
        for name, df in alone.items():
            got = both[name].loc[both[name]["rank"] == 4 + i].reset_index(drop=True)
            assert len(df), name
            pd.testing.assert_frame_equal(got, df.reset_index(drop=True))


def test_cached_tables_give_the_same_results(tmp_path, cupti):
    """The side tables round-trip through the ingest cache (a second run reads Parquet)."""
    out = tmp_path / "out"
    # read before the second run replaces the folder (the results of a run with OUT read from it)
    first = in_memory(dtrace.analyze(shared(*CUPTI), str(out), scheduler="sync"))
    again = dtrace.analyze(shared(*CUPTI), str(out), scheduler="sync", reuse_results=False)
    for table in ("kernel_counters", "kernel_counter_values", "op_counters"):
        pd.testing.assert_frame_equal(getattr(first, table), getattr(again, table))
        pd.testing.assert_frame_equal(getattr(first, table), getattr(cupti, table))


def test_packed_cache_gives_the_same_results(tmp_path, cupti):
    """Nine ranks in one ingest task: their side tables go into one cache pack (a row group per
    part) and come back equal."""
    doc = _raw(shared(*CUPTI))
    for rank in range(9):
        doc["distributedInfo"] = {"rank": rank}
        with gzip.open(tmp_path / f"rank{rank}.json.gz", "wt") as f:
            json.dump(doc, f)
    paths = sorted(str(p) for p in tmp_path.glob("rank*.json.gz"))
    packed = str(tmp_path / "cache")
    recs = cache.ingest_many(paths, packed)  # one ingest task of nine small inputs: one pack
    assert {p.pack for r in recs for p in r.parts} != {""}
    assert {"counter_ranges", "range_counters"} <= {k for r in recs for p in r.parts for k in p.side}
    first = dtrace.analyze(paths, cache=packed, scheduler="sync")
    alone = dtrace.analyze(paths, cache=str(tmp_path / "alone"), scheduler="sync")  # parsed again
    for table in ("kernel_counters", "kernel_counter_values", "op_counters"):
        pd.testing.assert_frame_equal(getattr(first, table), getattr(alone, table))
        one = getattr(first, table)
        assert sorted(set(one["rank"])) == list(range(9))
        mine = one.loc[one["rank"] == 4].drop(columns="rank").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, getattr(cupti, table).drop(columns="rank"))


def test_pure_and_compiled_analyses_agree(tmp_path, monkeypatch, cupti):
    monkeypatch.setenv("DTRACE_PURE_SCAN", "1")
    pure = dtrace.analyze(shared(*CUPTI), str(tmp_path / "out"), scheduler="sync")
    for table in ("kernel_counters", "kernel_counter_values", "op_counters"):
        pd.testing.assert_frame_equal(getattr(pure, table), getattr(cupti, table))
