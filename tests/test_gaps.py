"""Idle gaps: the gaps, gap_histogram and transitions tables and the ``dtrace gaps`` view."""

import re

import numpy as np
import pandas as pd
import pytest
import rawtrace
from testpaths import shared

import dtrace
from dtrace.analyses import ANALYSES, conform
from dtrace.analyses.batch import prepare_part as prepare
from dtrace.cli.main import main
from dtrace.core.schema import COLLECTIVE_SCHEMA, MEMCPY_SCHEMA
from dtrace.options import Options

A100 = ("kineto", "single", "a100_nccl_collectives.json.gz")
US = 1000


@pytest.fixture(scope="module")
def cache():
    """The session's shared ingest cache: each shared trace is parsed once."""
    return rawtrace.ingest_cache()


@pytest.fixture(scope="module")
def a100(cache):
    path = shared(*A100)
    raw = rawtrace.load(path)
    res = dtrace.analyze(
        path, cache=cache, scheduler="sync", hist_min_ns=1 * US, hist_max_ns=100 * US, hist_bins=10, hist_log=False
    )
    assert int(res.breakdown["clipped_events"].iloc[0]) == 0  # raw ends are dtrace's ends
    return path, res, raw, rawtrace.gaps_by_loop(raw["gpu"])


def tables(part):
    mine = ("gaps", "gap_histogram", "transitions")
    return {a.table: conform(a.func(part), a.columns, a.table) for a in ANALYSES if a.table in mine}


def make_part(rows, options=None, launches=(), launch_name="cudaLaunchKernel"):
    """A part on device 0 from (name, stream, start, end[, correlation]) tuples; ``launches``
    are (correlation, start) host launch calls named ``launch_name``."""
    recs = [
        dict(
            device=0,
            stream=r[1],
            pid=0,
            tid=r[1],
            kind="kernel",
            name=r[0],
            start_ns=r[2],
            end_ns=r[3],
            correlation=r[4] if len(r) > 4 else -1,
            external_id=-1,
        )
        for r in rows
    ]
    recs += [
        dict(
            device=-1,
            stream=-1,
            pid=1,
            tid=1,
            kind="runtime",
            name=launch_name,
            start_ns=s,
            end_ns=s + 1,
            correlation=c,
            external_id=-1,
        )
        for c, s in launches
    ]
    ev = pd.DataFrame(recs)
    ev.insert(0, "rank", np.int32(3))
    for c in ("kind", "name"):
        ev[c] = ev[c].astype("category")
    return prepare(
        ev,
        COLLECTIVE_SCHEMA.empty_table().to_pandas(),
        MEMCPY_SCHEMA.empty_table().to_pandas(),
        rank=3,
        device=0,
        fmt="kineto",
        options=options or Options(),
    )


# -- real trace against the obvious loop ------------------------------------------------------


def test_gap_table_matches_raw_events(a100):
    _, res, raw, gaps = a100
    g = res.gaps.set_index("stream")
    assert set(g.index) == set(raw["gpu"]["stream"])
    by = gaps.groupby("stream")["gap_ns"]
    exp = (
        pd.DataFrame(
            {
                "gaps": by.size(),
                "idle_ns": by.sum(),
                "mean_ns": by.mean(),
                "min_ns": by.min(),
                "max_ns": by.max(),
                "std_ns": by.std(ddof=1).fillna(0),
            }
        )
        .reindex(g.index)
        .fillna(0)
    )
    for c in ("gaps", "idle_ns", "min_ns", "max_ns"):
        np.testing.assert_array_equal(g[c], exp[c].astype(np.int64), err_msg=c)
    np.testing.assert_array_equal(g["mean_ns"], rawtrace.whole_ns(exp["mean_ns"]))  # int ns, half to even
    rawtrace.assert_whole_ns(g["std_ns"], exp["std_ns"])
    for cause in ("host_wait", "kernel_wait", "other"):
        f = gaps.loc[gaps["cause"] == cause].groupby("stream")["gap_ns"]
        np.testing.assert_array_equal(g[f"{cause}_ns"], f.sum().reindex(g.index).fillna(0).astype(np.int64))
        np.testing.assert_array_equal(g[f"{cause}_gaps"], f.size().reindex(g.index).fillna(0).astype(np.int64))
    assert (g["host_wait_gaps"] + g["kernel_wait_gaps"] + g["other_gaps"] == g["gaps"]).all()
    assert g["host_wait_gaps"].sum() > 0 and g["kernel_wait_gaps"].sum() > 0
    ev = raw["gpu"].groupby("stream")
    np.testing.assert_array_equal(g["events"], ev.size().loc[g.index])
    np.testing.assert_array_equal(g["span_ns"], (ev["end_ns"].max() - ev["start_ns"].min()).loc[g.index])
    # idle per stream is the stream's span minus its busy time (the streams table)
    s = res.streams.set_index("stream").loc[g.index]
    np.testing.assert_array_equal(g["idle_ns"], s["idle_ns"])


def test_transitions_match_raw_events(a100):
    _, res, _, gaps = a100
    t = res.transitions.set_index(["stream", "prev_name", "next_name"]).sort_index()
    by = gaps.groupby(["stream", "prev_name", "next_name"])["gap_ns"]
    exp = pd.DataFrame(
        {
            "count": by.size(),
            "total_ns": by.sum(),
            "mean_ns": by.mean(),
            "min_ns": by.min(),
            "max_ns": by.max(),
            "std_ns": by.std(ddof=1).fillna(0),
        }
    ).sort_index()
    assert t.index.equals(exp.index)
    for c in ("count", "total_ns", "min_ns", "max_ns"):
        np.testing.assert_array_equal(t[c], exp[c], err_msg=c)
    np.testing.assert_array_equal(t["mean_ns"], rawtrace.whole_ns(exp["mean_ns"]))
    rawtrace.assert_whole_ns(t["std_ns"], exp["std_ns"])


def test_histogram_with_user_bounds_linear_and_log(a100, cache):
    path, res, _, gaps = a100
    edges = np.linspace(1 * US, 100 * US, 11)
    h = res.gap_histogram
    for stream, f in gaps.groupby("stream"):
        counts, _ = np.histogram(f["gap_ns"], bins=edges)
        got = h.loc[h["stream"] == stream].sort_values("bin")
        np.testing.assert_array_equal(got["count"], counts)
        np.testing.assert_allclose(got["lo_ns"], edges[:-1])
        np.testing.assert_allclose(got["hi_ns"], edges[1:])
        inside = f["gap_ns"][(f["gap_ns"] >= edges[0]) & (f["gap_ns"] <= edges[-1])]
        assert int(got["total_ns"].sum()) == int(inside.sum())
    log = dtrace.analyze(
        path, cache=cache, scheduler="sync", hist_min_ns=US, hist_max_ns=10_000 * US, hist_bins=8, hist_log=True
    ).gap_histogram
    ledges = np.geomspace(US, 10_000 * US, 9)
    counts, _ = np.histogram(gaps["gap_ns"], bins=ledges)
    np.testing.assert_array_equal(log.groupby("bin")["count"].sum().to_numpy(), counts)
    # default bounds: the part's smallest and largest gap, 20 bins, every gap counted
    dflt = dtrace.analyze(path, cache=cache, scheduler="sync").gap_histogram
    assert dflt["lo_ns"].min() == gaps["gap_ns"].min() and dflt["hi_ns"].max() == gaps["gap_ns"].max()
    assert dflt["bin"].max() == 19 and int(dflt["count"].sum()) == len(gaps)


def test_step_filter_applies_to_gaps(cache):
    path = shared(*A100)
    raw = rawtrace.load(path)
    step = int(raw["steps"]["step"].iloc[0])
    gpu = raw["gpu"].loc[rawtrace.step_of(raw["gpu"], raw["steps"]) == step]
    exp = rawtrace.gaps_by_loop(gpu)
    res = dtrace.analyze(path, cache=cache, scheduler="sync", step=step)
    assert int(res.gaps["gaps"].sum()) == len(exp) > 0
    assert int(res.gaps["idle_ns"].sum()) == int(exp["gap_ns"].sum())
    assert int(res.transitions["count"].sum()) == len(exp)
    assert int(res.gap_histogram["count"].sum()) == len(exp)


def test_kernel_wait_threshold_option(cache):
    path = shared(*A100)
    raw = rawtrace.load(path)
    exp = rawtrace.gaps_by_loop(raw["gpu"], kernel_wait_ns=5 * US)
    res = dtrace.analyze(path, cache=cache, scheduler="sync", kernel_wait_ns=5 * US)
    for cause in ("host_wait", "kernel_wait", "other"):
        assert int(res.gaps[f"{cause}_gaps"].sum()) == int((exp["cause"] == cause).sum())


# -- hand-made edge rules -----------------------------------------------------------------------


def test_overlapping_kernels_default_clips_tracelens_keeps_running_max():
    rows = [("A", 7, 0, 100), ("B", 7, 10, 20), ("C", 7, 30, 40), ("D", 7, 150, 160)]
    rocm = dict(launches=[(99, 0)], launch_name="hipLaunchKernel")  # a ROCm part: overlap is an overrun
    t = tables(make_part(rows, **rocm))
    # ROCm: A is cut at B's start (a stream runs in order), so C and D open gaps
    assert t["gaps"]["gaps"].tolist() == [2] and t["gaps"]["idle_ns"].tolist() == [10 + 110]
    assert set(zip(t["transitions"]["prev_name"], t["transitions"]["next_name"])) == {("B", "C"), ("C", "D")}
    # TraceLens mode keeps the overrun, and so does a CUDA part (kernels may overlap under
    # programmatic dependent launch): the busy interval runs to 100, set by A
    for part in (make_part(rows, Options(compat="tracelens"), **rocm), make_part(rows)):
        tl = tables(part)
        assert tl["gaps"]["gaps"].tolist() == [1] and tl["gaps"]["idle_ns"].tolist() == [50]
        assert tl["transitions"][["prev_name", "next_name", "count", "mean_ns"]].values.tolist() == [
            ["A", "D", 1, 50.0]
        ]


def test_zero_length_events_end_and_open_gaps():
    rows = [("A", 7, 0, 10), ("Z", 7, 10, 10), ("Y", 7, 15, 15), ("B", 7, 20, 30)]
    t = tables(make_part(rows))
    g = t["gaps"].iloc[0]
    assert (g["events"], g["gaps"], g["idle_ns"], g["min_ns"], g["max_ns"]) == (4, 2, 10, 5, 5)
    pairs = t["transitions"].sort_values("prev_name")[["prev_name", "next_name", "count"]].values.tolist()
    assert pairs == [["Y", "B", 1], ["Z", "Y", 1]]  # Z at A's end is back to back: no gap


def test_single_kernel_has_no_gaps():
    t = tables(make_part([("only", 7, 100, 200)]))
    g = t["gaps"]
    assert g[["rank", "device", "stream", "events", "span_ns", "gaps", "idle_ns"]].values.tolist() == [
        [3, 0, 7, 1, 100, 0, 0]
    ]
    assert len(t["transitions"]) == 0 and len(t["gap_histogram"]) == 0


def test_stream_without_gaps_next_to_one_with_gaps():
    rows = [("a", 7, 0, 10), ("b", 7, 10, 20), ("c", 7, 20, 30), ("x", 9, 0, 10), ("y", 9, 40, 50)]
    t = tables(make_part(rows))
    g = t["gaps"].set_index("stream")
    assert g.loc[7, ["events", "gaps", "idle_ns", "max_ns"]].tolist() == [3, 0, 0, 0]
    assert g.loc[9, ["events", "gaps", "idle_ns", "max_ns"]].tolist() == [2, 1, 30, 30]
    assert set(t["gap_histogram"]["stream"]) == {9}
    assert t["transitions"][["stream", "prev_name", "next_name"]].values.tolist() == [[9, "x", "y"]]


def test_causes_by_hand():
    # X ends at 100 µs. Y: launched at 150 µs, after X ended -> host_wait (gap 60 µs).
    # Z: launched at 120 µs, before Y ended, gap 10 µs < 30 µs -> kernel_wait.
    # W: launched at 130 µs, gap 120 µs -> other. V: launch unknown -> other.
    rows = [
        ("X", 7, 0, 100 * US, 1),
        ("Y", 7, 160 * US, 170 * US, 2),
        ("Z", 7, 180 * US, 190 * US, 3),
        ("W", 7, 310 * US, 320 * US, 4),
        ("V", 7, 330 * US, 340 * US),
    ]
    launches = [(1, 0), (2, 150 * US), (3, 120 * US), (4, 130 * US)]
    g = tables(make_part(rows, launches=launches))["gaps"].iloc[0]
    assert (g["host_wait_gaps"], g["host_wait_ns"]) == (1, 60 * US)
    assert (g["kernel_wait_gaps"], g["kernel_wait_ns"]) == (1, 10 * US)
    assert (g["other_gaps"], g["other_ns"]) == (2, 120 * US + 10 * US)
    g2 = tables(make_part(rows, Options(kernel_wait_ns=5 * US), launches))["gaps"].iloc[0]
    assert (g2["kernel_wait_gaps"], g2["other_gaps"]) == (0, 3)


def test_histogram_by_hand():
    rows = [("a", 7, 0, 1), ("b", 7, 6, 7), ("c", 7, 22, 23), ("d", 7, 48, 49), ("e", 7, 1049, 1050)]
    # gaps 5, 15, 25, 1000
    h = tables(make_part(rows, Options(hist_min_ns=0, hist_max_ns=30, hist_bins=3)))["gap_histogram"]
    assert h[["bin", "lo_ns", "hi_ns", "count", "total_ns"]].values.tolist() == [
        [0, 0, 10, 1, 5],
        [1, 10, 20, 1, 15],
        [2, 20, 30, 1, 25],
    ]  # 1000 is outside the bounds
    lg = tables(make_part(rows, Options(hist_min_ns=1, hist_max_ns=1000, hist_bins=3, hist_log=True)))
    assert lg["gap_histogram"]["count"].tolist() == [1, 2, 1]  # [1,10) [10,100) [100,1000]


# -- the quick view --------------------------------------------------------------------------


def test_gaps_cli_on_trace(a100, tmp_path, capsys):
    path, _, _, gaps = a100
    out = tmp_path / "gaps.txt"
    assert (
        main(
            ["gaps", path, "--hist-min", "1", "--hist-max", "100", "--gap-sort", "avggap", "--top", "5", "-o", str(out)]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert f"Total gaps found: {len(gaps):,}" in text
    value, unit = re.search(r"Total stream gap time: ([\d.,]+) (s|ms|µs|ns)\n", text).groups()
    shown = float(value.replace(",", "")) * {"s": 1e9, "ms": 1e6, "µs": 1e3, "ns": 1.0}[unit]
    assert shown == pytest.approx(gaps["gap_ns"].sum(), rel=5e-3)  # three significant digits
    # first the GPU's idle time: the gaps with no stream busy, all streams pooled
    device = rawtrace.gaps_by_loop(rawtrace.load(path)["gpu"].assign(stream=0))
    value, unit, n = re.search(
        r"GPU idle time \(no stream busy; the breakdown's idle\): ([\d.,]+) (s|ms|µs|ns) in "
        r"([\d,]+) gaps",
        text,
    ).groups()
    shown = float(value.replace(",", "")) * {"s": 1e9, "ms": 1e6, "µs": 1e3, "ns": 1.0}[unit]
    assert shown == pytest.approx(device["gap_ns"].sum(), rel=5e-3) and int(n.replace(",", "")) == len(device)
    assert text.index("GPU idle time") < text.index("Total stream gap time")
    assert "GAP DURATION HISTOGRAM" in text and "100.0 µs" in text and "→" in text
    outside = int(((gaps["gap_ns"] < US) | (gaps["gap_ns"] > 100 * US)).sum())
    assert f"{outside:,} gaps outside the histogram bounds" in text
    detail = out.read_text()
    pairs = gaps.groupby(["prev_name", "next_name"])["gap_ns"].mean().sort_values(ascending=False)
    prev, nxt = pairs.index[0]
    assert f"#1: {prev} → {nxt}" in detail  # full names in the file
    csv = tmp_path / "pairs.csv"
    assert main(["gaps", path, "--gap-sort", "maxgap", "--output", str(csv)]) == 0
    df = pd.read_csv(csv)
    assert list(df["max_ns"]) == sorted(df["max_ns"], reverse=True)
    assert int(df["count"].sum()) == len(gaps)
