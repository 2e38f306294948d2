"""The kernels table, per-iteration figures, the cross-rank view and the ``dtrace kernels`` view.

Every number is checked against plain pandas over the raw JSON events (``rawtrace``) or a
hand calculation.
"""

import os

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


def raw_stats(gpu: pd.DataFrame) -> pd.DataFrame:
    g = gpu.groupby("name")["dur_ns"]
    out = pd.DataFrame(
        {
            "count": g.size(),
            "total_ns": g.sum(),
            "mean_ns": g.mean(),
            "median_ns": g.median(),
            "min_ns": g.min(),
            "max_ns": g.max(),
            "std_ns": g.std(ddof=1).fillna(0.0),
        }
    )
    out["time_share"] = out["total_ns"] / gpu["dur_ns"].sum()
    out["count_share"] = out["count"] / len(gpu)
    return out


@pytest.fixture(scope="module")
def cache():
    """The session's shared ingest cache: each shared trace is parsed once."""
    return rawtrace.ingest_cache()


@pytest.fixture(scope="module")
def a100(cache):
    path = shared(*A100)
    return path, dtrace.analyze(path, cache=cache, scheduler="sync"), rawtrace.load(path)


def test_kernel_stats_match_raw_events(a100):
    _, res, raw = a100
    assert int(res.breakdown["clipped_events"].iloc[0]) == 0  # durations are the raw ones
    k = res.kernels.set_index("name")
    exp = raw_stats(raw["gpu"])
    assert set(k.index) == set(exp.index)
    k = k.loc[exp.index]
    for c in ("count", "total_ns", "min_ns", "max_ns"):
        np.testing.assert_array_equal(k[c].to_numpy(), exp[c].to_numpy(), err_msg=c)
    for c in ("mean_ns", "median_ns"):  # whole ns, rounded half to even
        np.testing.assert_array_equal(k[c].to_numpy(), rawtrace.whole_ns(exp[c]), err_msg=c)
    rawtrace.assert_whole_ns(k["std_ns"], exp["std_ns"], err_msg="std_ns")
    for c in ("time_share", "count_share"):
        np.testing.assert_allclose(k[c].to_numpy(), exp[c].to_numpy(), rtol=1e-9, err_msg=c)
    assert (k["kind"] == raw["gpu"].groupby("name")["kind"].first().loc[exp.index]).all()
    assert list(res.kernels["total_ns"]) == sorted(res.kernels["total_ns"], reverse=True)


def test_launch_calls_are_never_kernels(a100):
    _, res, raw = a100
    names = set(res.kernels["name"])
    assert not names & set(raw["launch"]["name"])
    assert "cudaLaunchKernel" in set(raw["launch"]["name"])  # the trace does have them


def test_per_iteration_divides_by_steps_found(a100):
    _, res, raw = a100
    n_steps = raw["steps"]["step"].nunique()
    assert n_steps == 3
    k = res.kernels.set_index("name")
    exp = raw_stats(raw["gpu"]).loc[k.index]
    assert (k["iters"] == n_steps).all()
    np.testing.assert_allclose(k["count_per_iter"], exp["count"] / n_steps)
    np.testing.assert_array_equal(k["total_per_iter_ns"], rawtrace.whole_ns(exp["total_ns"] / n_steps))


def test_iters_option_overrides_steps(cache):
    path = shared(*A100)
    res = dtrace.analyze(path, cache=cache, scheduler="sync", iters=5)
    exp = raw_stats(rawtrace.load(path)["gpu"]).loc[res.kernels["name"]]
    assert (res.kernels["iters"] == 5).all()
    np.testing.assert_array_equal(res.kernels["total_per_iter_ns"], rawtrace.whole_ns(exp["total_ns"].to_numpy() / 5))


def test_step_filter_applies_to_kernels_and_classes(cache):
    path = shared(*A100)
    raw = rawtrace.load(path)
    step = int(raw["steps"]["step"].iloc[1])
    res = dtrace.analyze(path, cache=cache, scheduler="sync", step=step)
    gpu = raw["gpu"].loc[rawtrace.step_of(raw["gpu"], raw["steps"]) == step]
    exp = raw_stats(gpu)
    k = res.kernels.set_index("name").loc[exp.index]
    np.testing.assert_array_equal(k["count"], exp["count"])
    np.testing.assert_array_equal(k["total_ns"], exp["total_ns"])
    assert (k["iters"] == 1).all()
    assert int(res.classes["total_ns"].sum()) == int(gpu["dur_ns"].sum())
    assert int(res.gaps["events"].sum()) == len(gpu)


def test_two_rank_set_all_tables_both_ranks_then_cache(tmp_path):
    src = shared("kineto", "hta-2rank")
    out = tmp_path / "out"
    r1 = dtrace.analyze(src, out, scheduler="sync")
    tables = ["kernels", "classes", "nccl", "memops", "gaps", "gap_histogram", "transitions"]
    for t in tables:
        assert set(r1.table(t)["rank"]) == {0, 1}, t
    assert not any(i["cached"] for i in r1.manifest["inputs"])
    r2 = dtrace.analyze(src, out, scheduler="sync")
    assert all(i["cached"] for i in r2.manifest["inputs"])
    loaded = dtrace.load(out)
    for t in tables + ["kernels_xrank", "classes_xrank"]:
        pd.testing.assert_frame_equal(loaded.table(t), r1.table(t), check_dtype=False, obj=t)
    # per rank against the raw events of that rank's file
    for rank in (0, 1):
        raw = rawtrace.load(os.path.join(src, f"sampled_rank-{rank}.json.gz"))
        k = loaded.kernels.loc[loaded.kernels["rank"] == rank].set_index("name")
        exp = raw_stats(raw["gpu"]).loc[k.index]
        np.testing.assert_array_equal(k["total_ns"], exp["total_ns"])
        np.testing.assert_array_equal(k["count"], exp["count"])


def test_cross_rank_kernel_view_matches_raw(cache):
    src = shared("kineto", "hta-2rank")
    res = dtrace.analyze(src, cache=cache, scheduler="sync")
    per = []
    for rank in (0, 1):
        t = raw_stats(rawtrace.load(os.path.join(src, f"sampled_rank-{rank}.json.gz"))["gpu"])
        per.append(t.assign(rank=rank).reset_index())
    per = pd.concat(per, ignore_index=True)
    x = res.kernels_xrank.set_index("name")
    g = per.groupby("name")
    assert set(x.index) == set(g.groups)
    np.testing.assert_array_equal(x["parts"], g.size().loc[x.index])
    np.testing.assert_array_equal(x["total_ns"], g["total_ns"].sum().loc[x.index])
    np.testing.assert_array_equal(x["total_ns_max"], g["total_ns"].max().loc[x.index])
    np.testing.assert_array_equal(x["total_ns_min"], g["total_ns"].min().loc[x.index])
    np.testing.assert_array_equal(x["total_ns_mean"], rawtrace.whole_ns(g["total_ns"].mean().loc[x.index]))
    # the rank holding the max: check the names where the two ranks differ
    wide = per.pivot_table(index="name", columns="rank", values="total_ns")
    differ = wide.dropna()
    differ = differ.loc[differ[0] != differ[1]]
    assert len(differ) > 10
    np.testing.assert_array_equal(x.loc[differ.index, "max_rank"], np.where(differ[1] > differ[0], 1, 0))
    # pooled durations of each name over both ranks
    both = pd.concat([rawtrace.load(os.path.join(src, f"sampled_rank-{r}.json.gz"))["gpu"] for r in (0, 1)])
    pooled = both.groupby("name")["dur_ns"]
    np.testing.assert_array_equal(x["mean_ns"], rawtrace.whole_ns(pooled.mean().loc[x.index]))
    # pooled from the parts' whole-ns standard deviations: within 1 ns of the exact one
    np.testing.assert_allclose(
        x["std_ns"].to_numpy(np.float64), pooled.std(ddof=1).fillna(0).loc[x.index], rtol=0, atol=1.0
    )
    # classes across ranks
    cx = res.classes_xrank.set_index("class")
    c = res.classes.groupby("class")["total_ns"]
    np.testing.assert_array_equal(cx["total_ns"], c.sum().loc[cx.index])
    np.testing.assert_array_equal(cx["total_ns_max"], c.max().loc[cx.index])


# -- hand-made edge cases ------------------------------------------------------------------


def run_tables(part):
    """This issue's per-part tables of ``part``, conformed to their declared columns."""
    mine = ("kernels", "classes", "nccl", "memops", "gaps", "gap_histogram", "transitions")
    return {a.table: conform(a.func(part), a.columns, a.table) for a in ANALYSES if a.table in mine}


def make_part(rows, *, options=None, steps=(), launches=(), launch_name="cudaLaunchKernel"):
    """A one-part Batch from (name, stream, start, end[, kind[, correlation]]) tuples on device 0.

    ``launches``: (correlation, start) host launch calls; ``steps``: (n, start, end) windows.
    """
    recs = []
    for r in rows:
        name, stream, s, e = r[:4]
        kind = r[4] if len(r) > 4 else "kernel"
        corr = r[5] if len(r) > 5 else -1
        recs.append(
            dict(
                device=0,
                stream=stream,
                pid=0,
                tid=stream,
                kind=kind,
                name=name,
                start_ns=s,
                end_ns=e,
                correlation=corr,
                external_id=-1,
            )
        )
    for corr, s in launches:
        recs.append(
            dict(
                device=-1,
                stream=-1,
                pid=1,
                tid=1,
                kind="runtime",
                name=launch_name,
                start_ns=s,
                end_ns=s + 1,
                correlation=corr,
                external_id=-1,
            )
        )
    for n, s, e in steps:
        recs.append(
            dict(
                device=-1,
                stream=-1,
                pid=1,
                tid=1,
                kind="annotation",
                name=f"ProfilerStep#{n}",
                start_ns=s,
                end_ns=e,
                correlation=-1,
                external_id=-1,
            )
        )
    ev = pd.DataFrame(recs)
    ev.insert(0, "rank", np.int32(0))
    for c in ("kind", "name"):
        ev[c] = ev[c].astype("category")
    coll = COLLECTIVE_SCHEMA.empty_table().to_pandas()
    mem = MEMCPY_SCHEMA.empty_table().to_pandas()
    return prepare(ev, coll, mem, rank=0, device=0, fmt="kineto", options=options or Options())


def test_single_kernel():
    k = run_tables(make_part([("sgemm", 7, 100, 350)]))["kernels"]
    assert len(k) == 1
    r = k.iloc[0]
    assert (r["count"], r["total_ns"], r["min_ns"], r["max_ns"]) == (1, 250, 250, 250)
    assert (r["mean_ns"], r["median_ns"], r["std_ns"], r["time_share"], r["count_share"]) == (250, 250, 0, 1, 1)
    assert r["class"] == "gemm" and r["iters"] == 1


def test_zero_length_events_count_with_zero_time():
    part = make_part([("k", 7, 0, 10), ("k", 7, 20, 20), ("k", 7, 30, 36), ("z", 7, 40, 40)])
    k = run_tables(part)["kernels"].set_index("name")
    # k: durations 10, 0, 6 -> mean 16/3, median 6, sample std by hand
    d = np.array([10, 0, 6])
    assert k.loc["k", "count"] == 3 and k.loc["k", "total_ns"] == 16
    assert k.loc["k", "median_ns"] == 6 and k.loc["k", "min_ns"] == 0
    assert k.loc["k", "std_ns"] == round(np.sqrt(((d - 16 / 3) ** 2).sum() / 2))  # 5.03 -> 5
    assert k.loc["z", "count"] == 1 and k.loc["z", "total_ns"] == 0 and k.loc["z", "time_share"] == 0
    assert k["count_share"].sum() == pytest.approx(1.0)


def test_overlapping_kernels_on_one_stream_are_clipped_not_double_counted():
    rows = [("a", 7, 0, 100), ("b", 7, 60, 120), ("c", 8, 50, 70)]
    rocm = dict(launches=[(99, 0)], launch_name="hipLaunchKernel")  # a ROCm part: the overlap is an overrun
    k = run_tables(make_part(rows, **rocm))["kernels"].set_index("name")
    assert k.loc["a", "total_ns"] == 60  # cut at b's start (same stream); c is on another stream
    assert k.loc["b", "total_ns"] == 60 and k.loc["c", "total_ns"] == 20
    kt = run_tables(make_part(rows, options=Options(compat="tracelens"), **rocm))["kernels"].set_index("name")
    assert kt.loc["a", "total_ns"] == 100  # TraceLens mode keeps the raw durations
    kc = run_tables(make_part(rows))["kernels"].set_index("name")
    assert kc.loc["a", "total_ns"] == 100  # CUDA: kernels may overlap (programmatic dependent launch)


def test_step_windows_drive_iterations_and_filter():
    rows = [("k", 7, 10, 20, "kernel", 1), ("k", 7, 110, 130, "kernel", 2), ("k", 7, 210, 215, "kernel", 3)]
    launches = [(1, 5), (2, 105), (3, 205)]
    steps = [(1, 0, 100), (2, 100, 200), (3, 200, 300)]
    k = run_tables(make_part(rows, launches=launches, steps=steps))["kernels"]
    assert k["iters"].iloc[0] == 3 and k["count_per_iter"].iloc[0] == 1.0
    assert k["total_per_iter_ns"].iloc[0] == 12  # 35 / 3 in whole ns
    k2 = run_tables(make_part(rows, launches=launches, steps=steps, options=Options(step=2)))["kernels"]
    assert (k2["count"].iloc[0], k2["total_ns"].iloc[0], k2["iters"].iloc[0]) == (1, 20, 1)


# -- the quick view --------------------------------------------------------------------------


def test_kernels_cli_on_trace_sort_aliases_and_output(tmp_path, capsys):
    path = shared(*A100)
    raw = raw_stats(rawtrace.load(path)["gpu"])
    out = tmp_path / "k.txt"
    assert main(["kernels", path, "--top", "5", "--sort", "duration-percentage", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "top 5 of" in text and "kernel classes (builtin)" in text
    assert f"{len(raw):,} distinct kernel names" in text
    detail = out.read_text()
    top = raw.sort_values("total_ns", ascending=False).index[0]
    assert detail.splitlines()[2] == f"#1: {top}"  # full, unshortened name first
    assert detail.count("\n#") == len(raw)
    capsys.readouterr()
    assert main(["kernels", path, "--sort", "bogus"]) == 2  # rejected before any work
    assert "count, mean, total, share" in capsys.readouterr().err


def test_kernels_cli_on_results_dir_pools_ranks(tmp_path, capsys, cache):
    src = shared("kineto", "hta-2rank")
    out = tmp_path / "res"
    dtrace.analyze(src, out, cache=cache, scheduler="sync")
    csv = tmp_path / "k.csv"
    assert main(["kernels", str(out), "--sort", "total", "--output", str(csv)]) == 0
    text = capsys.readouterr().out
    assert "2 (rank, device) part(s), pooled" in text
    both = pd.concat([rawtrace.load(os.path.join(src, f"sampled_rank-{r}.json.gz"))["gpu"] for r in (0, 1)])
    exp = both.groupby("name")["dur_ns"].agg(["size", "sum"])
    df = pd.read_csv(csv).set_index("name").loc[exp.index]
    np.testing.assert_array_equal(df["count"], exp["size"])
    np.testing.assert_array_equal(df["total_ns"], exp["sum"])
    assert main(["kernels", str(out), "--rank", "1", "--sort", "percentage", "--output", str(csv)]) == 0
    one = pd.read_csv(csv)
    assert list(one["count"]) == sorted(one["count"], reverse=True)
    assert int(one["count"].sum()) == len(rawtrace.load(os.path.join(src, "sampled_rank-1.json.gz"))["gpu"])
    capsys.readouterr()
    assert main(["kernels", str(out), "--step", "4"]) == 2
    assert "step=None" in capsys.readouterr().err


def test_cross_rank_reducer_on_no_parts_keeps_its_columns():
    from dtrace.api import combine
    from dtrace.reduce import run_reducers
    from dtrace.reduce.kernels_xrank import CLASSES_XRANK_COLUMNS, KERNELS_XRANK_COLUMNS

    t = run_reducers(combine([]), Options())
    assert list(t["kernels_xrank"].columns) == list(KERNELS_XRANK_COLUMNS) and not len(t["kernels_xrank"])
    assert list(t["classes_xrank"].columns) == list(CLASSES_XRANK_COLUMNS) and not len(t["classes_xrank"])


def test_cross_rank_kernels_and_classes_by_hand():
    """``kernels_xrank`` on a small frame of per-part rows, each figure worked out by hand from the
    durations behind the rows: kernel ``a`` ran 4 and 6 ns on rank 0, 5 on rank 1, 1, 2, 3, 6 on
    rank 2; ``b`` 10, 20, 30 on rank 1."""
    from dtrace.reduce.kernels_xrank import kernels_xrank

    kernels = pd.DataFrame(
        {
            "rank": np.array([0, 1, 1, 2], np.int32),
            "device": np.array([0, 0, 0, 0], np.int32),
            "name": ["a", "a", "b", "a"],
            "class": ["gemm", "gemm", "elementwise", "gemm"],
            "category": ["computation"] * 4,
            "count": [2, 1, 3, 4],
            "total_ns": [10, 5, 60, 12],
            "std_ns": [np.sqrt(2.0), 0.0, 10.0, np.sqrt(14 / 3)],  # sample std of each part's durations
            "min_ns": [4, 5, 10, 1],
            "max_ns": [6, 5, 30, 6],
        }
    )
    classes = pd.DataFrame(  # the same durations by class: a is a gemm, b elementwise
        {
            "rank": np.array([0, 1, 1, 2], np.int32),
            "device": np.array([0, 0, 0, 0], np.int32),
            "class": ["gemm", "gemm", "elementwise", "gemm"],
            "count": [2, 1, 3, 4],
            "total_ns": [10, 5, 60, 12],
        }
    )
    t = kernels_xrank({"kernels": kernels, "classes": classes}, Options())
    k = t["kernels_xrank"].set_index("name")
    assert k.index.tolist() == ["b", "a"]  # by total time, most first
    a, b = k.loc["a"], k.loc["b"]
    assert (a["parts"], a["count"], a["total_ns"], a["total_ns_mean"]) == (3, 7, 27, 9)
    assert (a["total_ns_min"], a["min_rank"], a["total_ns_max"], a["max_rank"]) == (5, 1, 12, 2)
    # the 7 durations pooled: mean 27/7 = 3.86 -> 4; sample std sqrt((127 - 27**2/7) / 6) = 1.95 -> 2
    assert (a["mean_ns"], a["std_ns"], a["min_ns"], a["max_ns"]) == (4, 2, 1, 6)
    assert (b["parts"], b["count"], b["mean_ns"], b["std_ns"], b["min_rank"], b["max_rank"]) == (1, 3, 20, 10, 1, 1)
    assert (a["class"], b["class"]) == ("gemm", "elementwise")
    assert k["time_share"].tolist() == pytest.approx([60 / 87, 27 / 87])
    c = t["classes_xrank"].set_index("class")
    assert c.index.tolist() == ["elementwise", "gemm"]
    g, e = c.loc["gemm"], c.loc["elementwise"]
    assert (g["parts"], g["count"], g["total_ns"], g["total_ns_mean"], g["mean_ns"]) == (3, 7, 27, 9, 4)  # 27/7 = 3.86
    assert (g["total_ns_min"], g["min_rank"], g["total_ns_max"], g["max_rank"]) == (5, 1, 12, 2)
    assert (e["parts"], e["count"], e["total_ns"], e["mean_ns"], e["min_rank"], e["max_rank"]) == (1, 3, 60, 20, 1, 1)
    assert c["time_share"].tolist() == pytest.approx([60 / 87, 27 / 87])
