"""Nothing dtrace reads can make it wait for ever (issue 19, item 14).

A FIFO planted anywhere in a results folder — the manifest, a table, a cache record, cached
Parquet, a stored result — blocked ``show``, ``load``, ``report``, ``timeline``, ``tree`` and
``analyze`` in ``open``; a glob over a folder with links back to its parents ran for ever; a
missing scheduler file was waited for without end; ``synth --tile`` took any factor. Each case
here must end in seconds: refused in one line (exit 2), or worked around (the cache entry parsed
again, the stored result recomputed). ``pytest-timeout`` turns a hang into a failure.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import time

import pytest

import dtrace
import dtrace.execution.engine
from dtrace.cli.main import main
from dtrace.errors import DtraceError
from dtrace.generate.synth import generate
from dtrace.generate.tile import tile_trace
from dtrace.ingest.inputs import expand_inputs


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    d = tmp_path_factory.mktemp("fifo")
    generate(str(d / "job"), ranks=4, steps=2, seed=3, kernels_per_step=12)
    dtrace.analyze(str(d / "job"), str(d / "out"), scheduler="sync")
    return d


def plant(path) -> None:
    """Put a FIFO where ``path`` is (nothing ever writes to it: opening it to read blocks)."""
    if os.path.lexists(path):
        os.unlink(path)
    os.mkfifo(path)


def one_line(capsys, code, want_code, *needles) -> str:
    err = capsys.readouterr().err
    assert code == want_code, err
    if want_code == 2:
        assert err.count("\n") == 1 and ": error: " in err and "Traceback" not in err, err
    for n in needles:
        assert n in err, (n, err)
    return err


def entry_of(out, rank: int) -> str:
    """The cache entry folder of the input of ``rank``."""
    (item,) = [i for i in dtrace.load(out).manifest["inputs"] if i["ranks"][0][0] == rank]
    from dtrace.ingest.cache import entry_dir

    return entry_dir(os.path.join(out, "cache"), item["path"])


@pytest.fixture
def out(analysed, tmp_path):
    o = tmp_path / "out"
    shutil.copytree(analysed / "out", o)
    return str(o)


@pytest.mark.timeout(60)
def test_fifo_manifest(analysed, out, tmp_path, capsys):
    plant(os.path.join(out, "manifest.json"))
    for argv in (
        ["show", out],
        ["kernels", out],
        ["report", out, "-o", str(tmp_path / "r.html")],
        ["timeline", out, "-o", str(tmp_path / "t.json")],
        ["tree", out, "--op", "ProfilerStep#1"],
    ):
        one_line(capsys, main(argv), 2, "manifest.json", "FIFO")
    with pytest.raises(DtraceError, match="FIFO"):
        dtrace.load(out)
    with pytest.raises(DtraceError, match="FIFO"):
        dtrace.events(out)
    # a new run writes a manifest in its place
    assert main(["analyze", str(analysed / "job"), "-o", out, "--sync", "--no-progress"]) == 0
    assert dtrace.load(out).ok


@pytest.mark.timeout(60)
def test_fifo_tables(analysed, out, tmp_path, capsys):
    plant(os.path.join(out, "breakdown.parquet"))
    plant(os.path.join(out, "collectives.parquet"))
    one_line(capsys, main(["show", out, "breakdown"]), 2, "breakdown.parquet", "FIFO")
    one_line(capsys, main(["report", out, "-o", str(tmp_path / "r.html")]), 2, "FIFO")
    one_line(capsys, main(["timeline", out, "-o", str(tmp_path / "t.json")]), 2, "FIFO")
    with pytest.raises(DtraceError, match="FIFO"):
        dtrace.load(out).table("breakdown")
    # not up to date (a table is not intact): analysed again, the FIFOs replaced
    assert main(["analyze", str(analysed / "job"), "-o", out, "--sync", "--no-progress"]) == 0
    assert len(dtrace.load(out).breakdown) == 4


@pytest.mark.timeout(60)
def test_fifo_cache_record(analysed, out, tmp_path, capsys):
    plant(os.path.join(entry_of(out, 0), "source.json"))
    # tree reads the trace itself when the cache has no usable entry
    assert main(["tree", out, "--rank", "0", "--op", "ProfilerStep#1"]) == 0
    one_line(capsys, main(["timeline", out, "-o", str(tmp_path / "t.json"), "--ranks", "0"]), 2, "cached events")
    with pytest.raises(DtraceError, match="cached events"):
        dtrace.events(out)
    os.unlink(os.path.join(out, "manifest.json"))  # not up to date: the inputs are looked up in the cache
    assert main(["analyze", str(analysed / "job"), "-o", out, "--sync", "--no-progress"]) == 0
    (item,) = [i for i in dtrace.load(out).manifest["inputs"] if i["ranks"][0][0] == 0]
    assert not item["cached"] and any("FIFO" in n for n in item["notes"]), item


@pytest.mark.timeout(60)
def test_fifo_cached_events(analysed, out, tmp_path, capsys):
    (events,) = glob.glob(os.path.join(entry_of(out, 1), "events-*.parquet"))
    plant(events)
    one_line(capsys, main(["timeline", out, "-o", str(tmp_path / "t.json"), "--ranks", "1"]), 2, "FIFO")
    # the damaged entry was dropped: the next reader is told the events are gone
    with pytest.raises(DtraceError, match="cached events are gone"):
        dtrace.events(out)
    os.unlink(os.path.join(out, "manifest.json"))
    assert main(["analyze", str(analysed / "job"), "-o", out, "--sync", "--no-progress", "--recompute"]) == 0
    assert dtrace.load(out).ok


@pytest.mark.timeout(60)
@pytest.mark.parametrize("what", ["entry.json", "breakdown.arrow"])
def test_fifo_stored_results(analysed, out, what, capsys):
    store = os.path.join(out, "cache", "results")
    entries = [e for e in os.listdir(store) if os.path.isdir(os.path.join(store, e))]
    assert entries
    for e in entries:
        plant(os.path.join(store, e, what))
    os.unlink(os.path.join(out, "breakdown.parquet"))  # not up to date: the store is read
    assert main(["analyze", str(analysed / "job"), "-o", out, "--sync", "--no-progress"]) == 0
    res = dtrace.load(out)
    assert len(res.breakdown) == 4
    assert any("recomputing" in n for n in res.manifest["notes"]), res.manifest["notes"]


@pytest.mark.timeout(60)
def test_glob_over_a_link_loop(analysed, tmp_path, capsys):
    d = tmp_path / "d" / "a" / "b"
    d.mkdir(parents=True)
    shutil.copy(analysed / "job" / "rank-0.json.gz", d / "rank-0.json.gz")
    os.symlink("..", d / "up")
    os.symlink("../..", d / "up2")  # two links back: every level doubles glob's paths
    pattern = str(tmp_path / "d" / "**" / "*.json.gz")
    t0 = time.perf_counter()
    assert expand_inputs(pattern) == [str(d / "rank-0.json.gz")]
    assert main(["analyze", pattern, "-o", str(tmp_path / "out"), "--sync", "--no-progress"]) == 0
    assert time.perf_counter() - t0 < 30


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "content, needle",
    [
        (None, "no such file"),
        ("fifo", "FIFO"),
        ("not json", "not JSON"),
        ("[1, 2]", 'no "address"'),
        ('{"address": 5}', 'no "address"'),
        ('{"type": "Scheduler"}', 'no "address"'),
    ],
)
def test_scheduler_file_that_cannot_be_used(analysed, tmp_path, capsys, content, needle):
    f = tmp_path / "scheduler.json"
    if content == "fifo":
        os.mkfifo(f)
    elif content is not None:
        f.write_text(content)
    argv = ["analyze", str(analysed / "job"), "-o", str(tmp_path / "out"), "--scheduler-file", str(f)]
    one_line(capsys, main(argv), 2, str(f), needle)


@pytest.mark.timeout(60)
def test_scheduler_that_does_not_answer(analysed, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(dtrace.execution.engine, "CONNECT_TIMEOUT_S", 1.0)
    f = tmp_path / "scheduler.json"
    f.write_text(json.dumps({"address": "tcp://127.0.0.1:9"}))  # the discard port: nothing listens
    argv = ["analyze", str(analysed / "job"), "-o", str(tmp_path / "out"), "--scheduler-file", str(f)]
    one_line(capsys, main(argv), 2, "cannot connect to the Dask scheduler at tcp://127.0.0.1:9")


@pytest.mark.timeout(60)
def test_synth_sizes_are_bounded(analysed, tmp_path, capsys):
    src = str(analysed / "job" / "rank-0.json.gz")
    t0 = time.perf_counter()
    one_line(capsys, main(["synth", str(tmp_path / "big"), "--from-trace", src, "--tile", "1000000000"]), 2, "--tile")
    one_line(capsys, main(["synth", str(tmp_path / "big"), "--steps", "1000000000"]), 2, "--steps")
    one_line(capsys, main(["synth", str(tmp_path / "big"), "--steps", "100000", "--kernels-per-step", "1000"]), 2)
    with pytest.raises(DtraceError, match="copies"):  # the library's own bound: the bytes it would write
        tile_trace(src, str(tmp_path / "big.json"), times=5_000_000)
    with pytest.raises(DtraceError, match="kernels per rank"):
        generate(str(tmp_path / "big"), ranks=2, steps=10**9)
    assert time.perf_counter() - t0 < 20
    fifo = tmp_path / "src.json"
    os.mkfifo(fifo)
    one_line(capsys, main(["synth", str(tmp_path / "big"), "--from-trace", str(fifo)]), 2, "FIFO")
    assert not os.path.exists(tmp_path / "big" / "rank-0.json.gz")
