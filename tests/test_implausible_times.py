"""Timestamps and durations outside a sane range are dropped per event, counted by reason,
reported in the manifest and the summary, and never overflow int64 (issue 13).

Every expected figure is a hand calculation on the events the test writes: three good kernels
at 100, 150 and 200 µs lasting 10, 20 and 10 µs span 110 µs with 40 µs busy, whatever bad
event is added beside them.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3

import numpy as np
import pytest
from synth_formats import write_jax_trace, write_nsys_sqlite

import dtrace
from dtrace.core.schema import DROP_END, DROP_LONG, DROP_NEGATIVE, DROP_START
from dtrace.errors import ImplausibleTimes, InputError
from dtrace.readers import detect
from dtrace.readers.jax import read_jax
from dtrace.readers.kineto import read_kineto
from dtrace.readers.nsys import read_nsys
from dtrace.readers.nsys_csv import read_nsys_csv
from dtrace.render.summary import summary

I64_MAX = 2**63 - 1
DAY_US = 86_400 * 10**6
Y2200_NS = 7_258_118_400 * 10**9


def kernel(name: str, ts: float, dur: float, device: int = 0) -> dict:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": device,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"device": device, "stream": 7},
    }


GOOD = [kernel("k1", 100.0, 10.0), kernel("k2", 150.0, 20.0), kernel("k3", 200.0, 10.0)]


def write_kineto(path, events, *, rank: int = 0, base: int | None = None) -> str:
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": 8}, "traceEvents": events}
    if base is not None:
        doc["baseTimeNanoseconds"] = base
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize(
    "ts, dur, reason",
    [
        (1e17, 1.0, DROP_START),  # 1e20 ns: past 2200 (today: negative total_ns)
        (1e30, 1.0, DROP_START),  # today: becomes the trace origin with a RuntimeWarning
        (1e308, 1.0, DROP_START),
        (I64_MAX, 1.0, DROP_START),  # int64 max µs
        (-5.0, 1.0, DROP_START),  # before 1970 (no time origin: the trace starts at 0)
        (150.0, 1e17, DROP_LONG),  # today: "negative duration" for the whole file
        (150.0, 1e30, DROP_LONG),
        (150.0, -5.0, DROP_NEGATIVE),  # today: the whole file fails
        (150.0, DAY_US + 1.0, DROP_LONG),  # a day and a µs in a trace spanning 110 µs
    ],
)
def test_kineto_event_with_implausible_time_is_dropped_and_counted(tmp_path, ts, dur, reason):
    p = write_kineto(tmp_path / "rank-0.json", [*GOOD, kernel("bad", ts, dur)])
    res = dtrace.analyze(p, tmp_path / "out", scheduler="sync")
    assert res.errors == []
    bd = res.breakdown.iloc[0]
    assert (int(bd["total_ns"]), int(bd["busy_ns"]), int(bd["idle_ns"])) == (110_000, 40_000, 70_000)
    assert sorted(res.kernels["name"]) == ["k1", "k2", "k3"]
    (item,) = res.manifest["inputs"]
    assert item["dropped_events"] == {reason: 1} and item["events"] == 3
    assert dtrace.load(tmp_path / "out").manifest["inputs"][0]["dropped_events"] == {reason: 1}
    assert f"1 event(s) with implausible times dropped ({reason}: 1;" in summary(res)


def test_times_are_checked_after_adding_the_time_origin(tmp_path):
    base = 1_700_000_000 * 10**9  # November 2023
    past_2200 = (Y2200_NS - base) / 1000 + 1.0  # µs after the origin that land just past 2200
    events = [*GOOD, kernel("late", past_2200, 1.0)]
    tf = read_kineto(write_kineto(tmp_path / "a.json", events, base=base))
    assert tf.meta["dropped_events"] == {DROP_START: 1}
    start = tf.parts[0].events.column("start_ns").to_numpy()
    assert start.tolist() == [base + 100_000, base + 150_000, base + 200_000]
    # an event that starts in time but would end after 2200 (a 2000 s kernel 1000 s before it)
    near = Y2200_NS - 10**12
    tf = read_kineto(write_kineto(tmp_path / "b.json", [*GOOD, kernel("long", 150.0, 2e9)], base=near))
    assert tf.meta["dropped_events"] == {DROP_END: 1}
    with pytest.raises(ImplausibleTimes, match="baseTimeNanoseconds -1 is outside 1970-2200"):
        read_kineto(write_kineto(tmp_path / "c.json", GOOD, base=-1))


def test_a_profile_longer_than_a_day_keeps_its_long_ranges(tmp_path):
    # kernels two days apart and an annotation of 1.5 days between them: nothing is implausible
    events = [
        kernel("k1", 100.0, 10.0),
        kernel("k2", 2 * DAY_US, 10.0),
        {"ph": "X", "cat": "user_annotation", "name": "epoch", "pid": 5, "tid": 5, "ts": 50.0, "dur": 1.5 * DAY_US},
    ]
    tf = read_kineto(write_kineto(tmp_path / "long.json", events))
    assert tf.meta["dropped_events"] == {} and tf.parts[0].events.num_rows == 3
    # ... but a range longer than the whole profile (and than a day) is not
    events[2]["dur"] = 3 * DAY_US
    tf = read_kineto(write_kineto(tmp_path / "longer.json", events))
    assert tf.meta["dropped_events"] == {DROP_LONG: 1} and tf.parts[0].events.num_rows == 2


def test_every_gpu_event_dropped_fails_the_file_alone(tmp_path):
    bad = write_kineto(tmp_path / "rank-1.json", [kernel("a", 1e30, 1.0), kernel("b", 5.0, -1.0)], rank=1)
    good = write_kineto(tmp_path / "rank-0.json", GOOD)
    res = dtrace.analyze([bad, good], scheduler="sync")
    assert res.breakdown["rank"].tolist() == [0]
    (err,) = res.errors
    assert err == (f"{bad}: all 2 GPU events have implausible times ({DROP_START}: 1, {DROP_NEGATIVE}: 1)")


def test_a_number_beyond_float64_is_a_one_line_error(tmp_path):
    p = tmp_path / "huge.json"
    p.write_text(json.dumps({"traceEvents": GOOD})[:-2] + ', {"ph": "X", "cat": "kernel", "ts": 1e400, "dur": 1}]}')
    with pytest.raises(InputError, match="beyond the float64 range") as ei:
        read_kineto(str(p))
    assert "\n" not in str(ei.value)


# -- JAX, Nsight Systems, nsys stats CSV --------------------------------------------------------


def _rewrite_gz_json(src, dst, edit) -> None:
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    edit(doc)
    with gzip.open(dst, "wt") as f:
        json.dump(doc, f)


def _stream_lines(doc) -> set[tuple[int, int]]:
    return {
        (e["pid"], e["tid"])
        for e in doc["traceEvents"]
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e["args"]["name"].startswith("Stream #")
    }


def test_jax_events_with_implausible_times_are_dropped(tmp_path):
    ref_path = str(tmp_path / "ref.trace.json.gz")
    write_jax_trace(ref_path, n_gpus=2)
    lines: set = set()

    def add_bad(doc):
        lines.update(_stream_lines(doc))
        k = next(e for e in doc["traceEvents"] if e.get("ph") == "X" and (e["pid"], e["tid"]) in lines)
        doc["traceEvents"] += [{**k, "ts": 1e30}, {**k, "dur": -3.0}, {**k, "dur": 1e308}]

    bad_path = str(tmp_path / "bad.trace.json.gz")
    _rewrite_gz_json(ref_path, bad_path, add_bad)
    ref, got = read_jax(ref_path), read_jax(bad_path)
    assert got.meta["dropped_events"] == {DROP_START: 1, DROP_NEGATIVE: 1, DROP_LONG: 1}
    assert ref.meta["dropped_events"] == {} and got.meta["events"] == ref.meta["events"]
    for a, b in zip(got.parts, ref.parts):
        assert a.events.equals(b.events) and a.collectives.equals(b.collectives) and a.memcpy.equals(b.memcpy)

    def all_bad(doc):
        for e in doc["traceEvents"]:
            if e.get("ph") == "X" and (e["pid"], e["tid"]) in _stream_lines(doc):
                e["ts"] = 1e30

    _rewrite_gz_json(ref_path, bad_path, all_bad)
    with pytest.raises(ImplausibleTimes, match=r"all \d+ GPU events have implausible times \(start outside"):
        read_jax(bad_path)


def test_nsys_events_with_implausible_times_are_dropped(tmp_path):
    ref_path = str(tmp_path / "ref.sqlite")
    write_nsys_sqlite(ref_path)
    bad_path, cut_path = str(tmp_path / "bad.sqlite"), str(tmp_path / "cut.sqlite")
    shutil.copy(ref_path, bad_path)
    shutil.copy(ref_path, cut_path)
    with sqlite3.connect(bad_path) as db:
        rowids = [r[0] for r in db.execute("select rowid from CUPTI_ACTIVITY_KIND_KERNEL order by rowid limit 3")]
        db.execute("update CUPTI_ACTIVITY_KIND_KERNEL set start = ? where rowid = ?", (I64_MAX - 10, rowids[0]))
        db.execute("update CUPTI_ACTIVITY_KIND_KERNEL set [end] = start - 5 where rowid = ?", (rowids[1],))
        db.execute(
            "update CUPTI_ACTIVITY_KIND_KERNEL set [end] = start + ? where rowid = ?", (2 * DAY_US * 1000, rowids[2])
        )
        nvtx = db.execute("select rowid from NVTX_EVENTS where [end] is not null order by rowid limit 1").fetchone()[0]
        db.execute("update NVTX_EVENTS set start = 1e30 where rowid = ?", (nvtx,))  # a REAL: no int64 holds it
    with sqlite3.connect(cut_path) as db:  # the same report without those events
        db.execute(f"delete from CUPTI_ACTIVITY_KIND_KERNEL where rowid in ({', '.join(map(str, rowids))})")
        db.execute("delete from NVTX_EVENTS where rowid = ?", (nvtx,))
    got, want = read_nsys(bad_path), read_nsys(cut_path)
    assert got.meta["dropped_events"] == {DROP_START: 2, DROP_NEGATIVE: 1, DROP_LONG: 1}
    assert got.meta["events"] == want.meta["events"] and len(got.parts) == len(want.parts)
    for a, b in zip(got.parts, want.parts):
        assert a.events.equals(b.events) and a.collectives.equals(b.collectives) and a.memcpy.equals(b.memcpy)
    with sqlite3.connect(bad_path) as db:
        db.execute("update CUPTI_ACTIVITY_KIND_KERNEL set start = -1, [end] = 10")
        db.execute("update CUPTI_ACTIVITY_KIND_MEMCPY set start = -1, [end] = 10")
        db.execute("update CUPTI_ACTIVITY_KIND_MEMSET set start = -1, [end] = 10")
        db.execute("update TARGET_INFO_SESSION_START_TIME set utcEpochNs = 0")
    with pytest.raises(ImplausibleTimes, match="all .* GPU events have implausible times"):
        read_nsys(bad_path)


TRACE_HEADER = (
    "Start (ns),Duration (ns),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),DymSMem (MB),"
    "Bytes (MB),Throughput (MB/s),SrcMemKd,DstMemKd,Device,Ctx,GreenCtx,Strm,Name\n"
)


def csv_row(start, dur, corr, name="sgemm", device=0):
    return f"{start},{dur},{corr},1,1,1,128,1,1,32,0.0,0.0,,,,,{device},1,,7,{name}\n"


def test_nsys_csv_rows_with_implausible_times_are_dropped(tmp_path):
    good = [csv_row(100_000, 10_000, 1), csv_row(150_000, 20_000, 2), csv_row(200_000, 10_000, 3)]
    p = tmp_path / "rank-4_cuda_gpu_trace.csv"
    p.write_text(
        TRACE_HEADER
        + "".join(good)
        + csv_row("1e30", 5, 4)
        + csv_row(120_000, -7, 5)
        + csv_row(120_000, "1e308", 6, name="huge")
    )
    tf = read_nsys_csv(str(p))
    assert tf.meta["dropped_events"] == {DROP_START: 1, DROP_NEGATIVE: 1, DROP_LONG: 1}
    ev = tf.parts[0].events
    assert ev.column("start_ns").to_pylist() == [100_000, 150_000, 200_000]
    assert ev.column("end_ns").to_pylist() == [110_000, 170_000, 210_000]
    res = dtrace.analyze(str(p), scheduler="sync")
    assert res.breakdown[["rank", "total_ns", "busy_ns"]].values.tolist() == [[4, 110_000, 40_000]]
    p.write_text(TRACE_HEADER + csv_row("1e30", 5, 4))
    with pytest.raises(ImplausibleTimes, match="all 1 GPU events"):
        read_nsys_csv(str(p))


def test_no_reader_leaks_a_numpy_warning(tmp_path):
    """Warnings are errors in this suite; check the overflow paths explicitly as well."""
    p = write_kineto(tmp_path / "w.json", [*GOOD, kernel("a", 1e308, 1e308), kernel("b", -1e308, -1e308)])
    with np.errstate(all="raise"):  # any floating-point trouble outside an errstate block raises
        tf = detect(p).read(p)
    assert tf.meta["dropped_events"] == {DROP_START: 2}
