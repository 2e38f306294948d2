"""Users' own per-partition analyses (run, stored, written like built-ins) and dtrace.events()."""

from __future__ import annotations

import glob
import gzip
import json
import os
import subprocess
import sys
from collections import Counter
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pytest
from testpaths import ROOT, shared

import dtrace
from dtrace.errors import UsageError

EXAMPLES = os.path.join(ROOT, "examples", "traces")


def kernel_count(batch: dtrace.Batch) -> pd.DataFrame:
    """Kernels and their summed duration per (rank, device)."""
    g = batch.gpu
    k = (g["kind"] == "kernel").to_numpy()
    part = g["part"].to_numpy()[k]
    dur = (g["end_ns"] - g["start_ns"]).to_numpy()[k]
    n = batch.n_parts
    return pd.DataFrame(
        {
            **batch.keys(np.arange(n)),
            "kernels": np.bincount(part, minlength=n),
            "kernel_ns": np.bincount(part, weights=dur, minlength=n).astype(np.int64),
        }
    )


COUNT = dtrace.Analysis(
    "kernel_count", kernel_count, {"rank": "int32", "device": "int32", "kernels": "int64", "kernel_ns": "int64"}
)


def _raw_kernels(path: str) -> tuple[int, int]:
    """Kernel count and summed duration (ns) from the raw JSON, independently of dtrace."""
    with gzip.open(path, "rb") as f:
        doc = json.load(f)
    ks = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    return len(ks), int(round(sum(e["dur"] for e in ks) * 1000))


def test_own_analysis_is_run_stored_and_written(tmp_path, monkeypatch):
    out = tmp_path / "out"
    res = dtrace.analyze(EXAMPLES, out, analyses=[COUNT])
    want = {r: _raw_kernels(os.path.join(EXAMPLES, f"sampled_rank-{r}.json.gz")) for r in (0, 1)}
    got = dtrace.load(out).kernel_count.set_index("rank")
    for r, (n, ns) in want.items():
        assert int(got.loc[r, "kernels"]) == n and abs(int(got.loc[r, "kernel_ns"]) - ns) <= n  # µs → ns rounding
    assert res.manifest["analyses"] == ["kernel_count"]
    # stored like a built-in: other options recompute the built-ins, this table comes from the store
    # only when its code and the settings are unchanged
    from dtrace.execution import tasks

    calls = []
    real = tasks.run_own_analyses

    def spy(batch, analyses):
        calls.append([a.table for a in analyses])
        return real(batch, analyses)

    monkeypatch.setattr(tasks, "run_own_analyses", spy)
    again = dtrace.analyze(EXAMPLES, out, analyses=[COUNT], iters=2)  # new settings: recomputed
    assert calls and "kernel_count" in calls[-1]
    calls.clear()
    dtrace.analyze(EXAMPLES, out, analyses=[COUNT], iters=2, reuse_results=True)
    assert calls == []  # the same again: up to date, nothing run
    pd.testing.assert_frame_equal(again.kernel_count, got.reset_index()[again.kernel_count.columns], check_dtype=False)


def test_changed_analysis_code_is_not_served_from_the_store(tmp_path):
    out = tmp_path / "out"
    dtrace.analyze(EXAMPLES, out, analyses=[COUNT])

    def kernel_count(batch):  # same table name, other code: twice the kernels
        df = globals()["kernel_count"](batch)
        return df.assign(kernels=df["kernels"] * 2)

    other = dtrace.Analysis("kernel_count", kernel_count, COUNT.columns)
    first = dtrace.load(out).kernel_count
    res = dtrace.analyze(EXAMPLES, out, analyses=[other])
    assert (res.kernel_count["kernels"].to_numpy() == 2 * first["kernels"].to_numpy()).all()


def test_own_analysis_runs_in_batches_of_many_parts(tmp_path):
    """Many ranks in one partition: the function sees them all at once, keyed by rank."""
    from dtrace.generate import synth

    synth.generate(tmp_path / "job", ranks=16, steps=2, seed=5)
    res = dtrace.analyze(str(tmp_path / "job"), tmp_path / "out", analyses=[COUNT], scheduler="sync")
    assert len(res.manifest["partitions"]) == 1
    kc = res.kernel_count.set_index("rank")
    kernels = res.kernels[res.kernels["kind"] == "kernel"].groupby("rank")["count"].sum()
    assert sorted(kc.index) == list(range(16))
    assert (kc["kernels"].reindex(kernels.index) == kernels).all()


@pytest.mark.parametrize(
    "make, why",
    [
        (lambda: [dtrace.Analysis("kernels", kernel_count, COUNT.columns)], "built-in"),
        (lambda: [dtrace.Analysis("stragglers", kernel_count, COUNT.columns)], "built-in"),  # a cross-rank table
        (lambda: [dtrace.Analysis("inputs", kernel_count, COUNT.columns)], "built-in"),  # results.inputs
        (lambda: [dtrace.Analysis("../x", kernel_count, COUNT.columns)], "identifier"),
        (lambda: [dtrace.Analysis("my table", kernel_count, COUNT.columns)], "identifier"),
        (lambda: [dtrace.Analysis(7, kernel_count, COUNT.columns)], "identifier"),
        (lambda: [dtrace.Analysis("nokeys", kernel_count, {"kernels": "int64"})], "rank"),
        (lambda: [dtrace.Analysis("t", 5, COUNT.columns)], "func must be a function"),
        (lambda: [dtrace.Analysis("t", kernel_count, ["rank", "device"])], "columns must be a dict"),
        (lambda: [dtrace.Analysis("t", kernel_count, {"rank": "int32", "device": "int32", "n": "int"})], "dtype"),
        (lambda: [dtrace.Analysis("t", kernel_count, {"rank": "int32", "device": "int32", "n": "uint64"})], "dtype"),
        (lambda: [COUNT, COUNT], "same table"),
        (lambda: COUNT, "list of dtrace.Analysis"),
    ],
)
def test_invalid_own_analyses_are_usage_errors_before_any_work(tmp_path, make, why):
    out = tmp_path / "out"
    with pytest.raises(UsageError, match=why) as ei:
        dtrace.analyze(EXAMPLES, out, analyses=make())
    assert "\n" not in str(ei.value)
    assert not out.exists()  # refused before any work


def _raises(batch):
    raise ValueError("my analysis is broken\non two lines")


def _runs_out_of_memory(batch):
    raise MemoryError()


def _fraction_in_an_int_column(batch):
    return kernel_count(batch).assign(kernels=lambda d: d["kernels"] + 0.5)


def _beyond_int64(batch):
    return kernel_count(batch).assign(kernels=lambda d: [2**70] * len(d))


def _beyond_int64_as_float(batch):
    return kernel_count(batch).assign(kernels=lambda d: d["kernels"] * 1e30)


def _exits(batch):
    raise SystemExit(3)


def _interrupts(batch):
    raise KeyboardInterrupt


def _unconvertible(batch):
    return kernel_count(batch).assign(extra=lambda d: [object() for _ in range(len(d))])


def _fails_on_rank_1(batch):
    if (batch.parts["rank"] == 1).any():
        raise RuntimeError("rank 1 is not supported")
    return kernel_count(batch)


@pytest.fixture(scope="module")
def base():
    """The bundled job analysed with the built-in analyses alone (read only)."""
    return dtrace.analyze(EXAMPLES, scheduler="sync")


FAILING = [
    (_raises, "ValueError: my analysis is broken on two lines"),
    (lambda b: None, "returned NoneType, not a pandas DataFrame"),
    (lambda b: [1, 2], "returned list, not a pandas DataFrame"),
    (lambda b: {"rank": [0]}, "returned dict, not a pandas DataFrame"),
    (lambda b: kernel_count(b).drop(columns="kernel_ns"), "lacks its declared columns ['kernel_ns']"),
    (_runs_out_of_memory, "MemoryError"),
    (_fraction_in_an_int_column, "not a whole number"),
    (_beyond_int64, "holds 1.1805916207174113e+21, beyond its range"),  # issue 31: was stored as -2**63
    (_beyond_int64_as_float, "beyond its range"),
    (_exits, "SystemExit: 3"),  # issue 31: aborted the whole run
    (_interrupts, "KeyboardInterrupt"),
    (_unconvertible, "failed: Arrow"),  # issue 31: failed the input as internal error (ArrowInvalid)
    (_fails_on_rank_1, "rank 1 is not supported"),
]
"""Ways an analysis of a user fails, and what its table's error then says."""


def test_failing_own_analyses_fail_their_tables_only(tmp_path, base):
    """Issue 19, item 9: never the built-in tables, the inputs or the other analyses of the user.
    Every way of :data:`FAILING` at once, each an analysis of its own beside one that works."""
    broken = [dtrace.Analysis(f"broken_{i}", func, COUNT.columns) for i, (func, _) in enumerate(FAILING)]
    fine = dtrace.Analysis("also_counted", kernel_count, COUNT.columns)
    out = tmp_path / "out"
    res = dtrace.analyze(EXAMPLES, out, analyses=[*broken, fine], scheduler="sync", partition_events=1)
    assert res.errors == [] and len(res.manifest["partitions"]) == 2
    assert sorted(res.failed_tables) == sorted(a.table for a in broken)
    for a, (_, why) in zip(broken, FAILING):
        err = res.failed_tables[a.table]
        assert f"'{a.table}'" in err and why in err and "\n" not in err, (a.table, why, err)
        with pytest.raises(AttributeError, match=f"{a.table}.*failed"):
            getattr(res, a.table)
    assert not res.ok
    for table in ("breakdown", "kernels", "steps", "stragglers"):
        pd.testing.assert_frame_equal(res[table], base[table], check_dtype=False)
    assert len(res.also_counted) == 2
    again = dtrace.load(out)
    assert not set(again.table_names) & set(res.failed_tables) and again.failed_tables == res.failed_tables
    from dtrace.render.summary import summary

    text = summary(again)
    assert all(f"  {err}" in text for err in res.failed_tables.values())
    # not stored and never up to date: the next run tries them again
    mended = [dtrace.Analysis(a.table, kernel_count, COUNT.columns) for a in broken]
    retry = dtrace.analyze(EXAMPLES, out, analyses=[*mended, fine], scheduler="sync", partition_events=1)
    assert retry.ok and not retry.manifest.get("up_to_date")
    assert all(len(retry[a.table]) == 2 for a in mended)


def test_whole_floats_in_an_int_column_of_an_own_analysis_are_kept(tmp_path):
    as_floats = dtrace.Analysis("kernel_count", lambda b: kernel_count(b).astype({"kernels": "float64"}), COUNT.columns)
    res = dtrace.analyze(EXAMPLES, analyses=[as_floats], scheduler="sync")
    want = dtrace.analyze(EXAMPLES, analyses=[COUNT], scheduler="sync").kernel_count
    assert res.ok and str(res.kernel_count["kernels"].dtype) == "int64"
    assert res.kernel_count["kernels"].tolist() == want["kernels"].tolist()


def test_events_of_a_results_directory(tmp_path):
    out = tmp_path / "out"
    res = dtrace.analyze(shared("kineto", "hta-2rank"), out, partition_events=1)  # one rank per partition
    ev = dtrace.events(out)
    assert ev.npartitions == len(res.manifest["partitions"]) == 2
    assert ev.known_divisions and tuple(ev.divisions) == (0, 1, 1)
    assert list(ev.columns) == list(dtrace.explore.events.EVENT_COLUMNS)
    df = ev.compute()
    assert df.index.name == "rank" and str(df.index.dtype) == "int32"
    for col, want in dtrace.explore.events.EVENT_COLUMNS.items():
        assert str(df[col].dtype) == want, col
    assert len(df) == sum(i["events"] for i in res.manifest["inputs"])
    # GPU events per rank equal the breakdown's count, and kernel counts the kernels table's
    gpu = df[df["is_gpu"]].groupby(level="rank").size()
    bd = res.breakdown.set_index("rank")["gpu_events"]
    assert (gpu.reindex(bd.index) == bd).all()
    kern = ev[ev.is_gpu & (ev.kind == "kernel")].groupby("rank").size().compute()
    want = res.kernels[res.kernels["kind"] == "kernel"].groupby("rank")["count"].sum()
    assert (kern.reindex(want.index) == want).all()
    only = dtrace.events(out, columns=["kind", "start_ns"]).compute()
    assert list(only.columns) == ["kind", "start_ns"] and len(only) == len(df)


def test_events_of_inputs_and_bad_columns(tmp_path):
    ev = dtrace.events(EXAMPLES, cache=str(tmp_path / "cache"))
    counts = ev.map_partitions(
        lambda d: d.groupby(level="rank").size().to_frame("n"),
        meta=pd.DataFrame({"n": pd.Series([], dtype="int64")}, index=pd.Index([], dtype="int32", name="rank")),
    ).compute()
    assert sorted(counts.index) == [0, 1] and (counts["n"] > 1000).all()
    with pytest.raises(UsageError, match="unknown event columns"):
        dtrace.events(EXAMPLES, columns=["nope"], cache=str(tmp_path / "cache"))


def test_example_own_analysis_runs(tmp_path):
    proc = subprocess.run(
        [sys.executable, os.path.join("examples", "own_analysis.py"), str(tmp_path / "o")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "long_kernels" in proc.stdout and "busiest stream per rank" in proc.stdout


def _raw_names(path: str) -> tuple[Counter[str], set[str], set[str]]:
    """From the raw JSON, independently of dtrace: the GPU kernels' names with their counts,
    the names of the host ops (``cpu_op``) and the names of every complete (``ph: X``) event.
    An MTIA trace's kernels are its ``mtia_ccp_events`` other than ``dma_request`` (the copies)."""
    with gzip.open(path, "rb") as f:
        text = f.read()
    try:  # the three fields read, as a typed decode (~7x faster than json's dicts)
        events = [(e.cat, e.name) for e in msgspec.json.decode(text, type=_RawTrace).traceEvents if e.ph == "X"]
    except msgspec.DecodeError:  # an event that is not an object, NaN, a BOM: every event as json reads it
        events = [
            (e.get("cat", ""), e.get("name", msgspec.UNSET))
            for e in json.loads(text)["traceEvents"]
            if isinstance(e, dict) and e.get("ph") == "X"
        ]
    complete = [(str(cat).lower(), str(name)) for cat, name in events if name is not msgspec.UNSET]

    def is_kernel(cat: str, name: str) -> bool:
        return cat == "kernel" or (cat == "mtia_ccp_events" and name != "dma_request")

    kernels = Counter(name for cat, name in complete if is_kernel(cat, name))
    ops = {name for cat, name in complete if cat == "cpu_op"}
    return kernels, ops, {name for _, name in complete}


class _RawEvent(msgspec.Struct):
    ph: Any = None
    cat: Any = ""
    name: Any = msgspec.UNSET


class _RawTrace(msgspec.Struct):
    traceEvents: list[_RawEvent]


def test_event_names_are_those_of_the_raw_json_of_every_shared_kineto_trace(tmp_path):
    """Each event keeps its own name (issue 19: every event of a rank was named after row ``rank``)."""
    files = sorted(glob.glob(os.path.join(shared("kineto"), "*", "*.json.gz")))
    res = dtrace.analyze(files, tmp_path / "out", ranks={f: i for i, f in enumerate(files)}, scheduler="sync")
    ok = {i["path"]: i["ranks"][0][0] for i in res.manifest["inputs"] if i["status"] == "ok"}
    assert len(ok) >= 10  # every shared Kineto trace with GPU activity
    df = dtrace.events(tmp_path / "out", columns=["kind", "name", "is_gpu"]).compute()
    for path, rank in ok.items():
        kernels, ops, every = _raw_names(path)
        mine = df.loc[[rank]]
        names = mine["name"].astype(str)
        got = Counter(names[mine["is_gpu"] & (mine["kind"] == "kernel")])
        assert got == kernels, path
        assert set(names[mine["kind"] == "cpu_op"]) == ops, path
        assert set(names) <= every, path
    assert df["name"].nunique() > 10 * len(ok)


# -- what an analysis depends on keys its stored results (issue 19, item 2) ------------------
LONG_NS = 0.0
"""A module global an analysis reads: kernels longer than this many ns are "long"."""


def _long_kernels(batch: dtrace.Batch, limit: float) -> pd.DataFrame:
    g = batch.gpu
    k = (g["kind"] == "kernel").to_numpy() & ((g["end_ns"] - g["start_ns"]).to_numpy() > limit)
    n = batch.n_parts
    return pd.DataFrame({**batch.keys(np.arange(n)), "long": np.bincount(g["part"].to_numpy()[k], minlength=n)})


def _long_of_global(batch: dtrace.Batch) -> pd.DataFrame:
    return _long_kernels(batch, LONG_NS)


def _calls_a_helper(batch: dtrace.Batch) -> pd.DataFrame:
    return _long_of_global(batch)  # the global is read by the function it calls


def _by_closure(limit: float):
    def long_kernels(batch):
        return _long_kernels(batch, limit)

    return long_kernels


def _by_default(limit: float):
    def long_kernels(batch, limit=limit):
        return _long_kernels(batch, limit)

    return long_kernels


def _by_kw_default(limit: float):
    def long_kernels(batch, *, limit=limit):
        return _long_kernels(batch, limit)

    return long_kernels


def _by_object(limit: float):
    import threading

    state = {"limit": limit, "lock": threading.Lock()}  # a lock: not hashable, never reused

    def long_kernels(batch):
        return _long_kernels(batch, state["limit"])

    return long_kernels


def _raw_long(path: str, limit: float) -> int:
    with gzip.open(path, "rb") as f:
        doc = json.load(f)
    return sum(
        1 for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel" and e["dur"] * 1000 > limit
    )


LONG_COLUMNS = {"rank": "int32", "device": "int32", "long": "int64"}


@pytest.mark.parametrize("how", ["global", "helper", "closure", "default", "kw_default", "unhashable"])
def test_stored_results_follow_what_the_analysis_depends_on(tmp_path, monkeypatch, how):
    """First SUM, the value changed, then the same OUT again: what a fresh run gives."""
    module = sys.modules[__name__]

    def analysis(limit: float) -> dtrace.Analysis:
        monkeypatch.setattr(module, "LONG_NS", limit)
        factory = {
            "global": lambda _: _long_of_global,
            "helper": lambda _: _calls_a_helper,
            "closure": _by_closure,
            "default": _by_default,
            "kw_default": _by_kw_default,
            "unhashable": _by_object,
        }[how]
        return dtrace.Analysis("long_kernels", factory(limit), LONG_COLUMNS)

    want = {
        lim: sum(_raw_long(os.path.join(EXAMPLES, f"sampled_rank-{r}.json.gz"), lim) for r in (0, 1))
        for lim in (0.0, 9_999.5)
    }
    assert want[0.0] > want[9_999.5] > 0  # the value matters
    out = tmp_path / "out"
    first = dtrace.analyze(EXAMPLES, out, analyses=[analysis(0.0)], scheduler="sync")
    assert int(first.long_kernels["long"].sum()) == want[0.0]
    again = dtrace.analyze(EXAMPLES, out, analyses=[analysis(9_999.5)], scheduler="sync")
    fresh = dtrace.analyze(EXAMPLES, tmp_path / "fresh", analyses=[analysis(9_999.5)], scheduler="sync")
    assert int(again.long_kernels["long"].sum()) == int(fresh.long_kernels["long"].sum()) == want[9_999.5]
    assert not again.manifest.get("up_to_date")
    if how == "unhashable":  # never reused, not even unchanged
        same = dtrace.analyze(EXAMPLES, out, analyses=[analysis(9_999.5)], scheduler="sync")
        assert not same.manifest.get("up_to_date") and same.manifest.get("run_key") is None
        assert int(same.long_kernels["long"].sum()) == want[9_999.5]
    else:  # unchanged: up to date
        same = dtrace.analyze(EXAMPLES, out, analyses=[analysis(9_999.5)], scheduler="sync")
        assert same.manifest.get("up_to_date")


def test_analysis_identity_is_the_same_in_every_process(tmp_path):
    """The key of a function with a set, a dict and a user class in its globals does not depend
    on the process's hash seed (stored results are found by the next run)."""
    (tmp_path / "myanalysis.py").write_text(
        "import numpy as np\n"
        "NAMES = {'gemm', 'nccl', 'attention', 'copy'}\n"
        "WEIGHTS = {'a': 1.5, 'b': np.arange(3)}\n"
        "class Limits:\n"
        "    low = 3\n"
        "    def high(self):\n"
        "        return 7\n"
        "def func(batch, k=(1, 'x')):\n"
        "    return (NAMES, WEIGHTS, Limits.low, Limits().high(), k)\n"
    )
    code = "import myanalysis, dtrace.partitions.store as r; print(r.function_identity(myanalysis.func))"
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(tmp_path)},
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert len(digests) == 1 and "None" not in digests
