"""Tracebacks that became one-line errors with the documented exit codes (issue 19, item 15).

Each case was a Python traceback (or an "internal error" whose cause is known): hand-edited
manifests and forged cache records, non-finite or huge numbers on the command line, hostile class
maps, damaged compressed or SQLite inputs read by the quick views, a timeline window outside the
job, the events of a results folder whose cache is gone, a user analysis raising
``KeyboardInterrupt`` on a cluster, JSON nested 100,000 deep, a sequence number of 2^70, a CSV
field over 128 KiB and a device number beyond int32. Inputs are built here.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import zlib

import pytest
from testpaths import shared

import dtrace
from dtrace.cli.main import main
from dtrace.errors import DtraceError
from dtrace.generate.synth import generate
from dtrace.ingest.cache import _record_fingerprint


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    d = tmp_path_factory.mktemp("lines")
    generate(str(d / "job"), ranks=4, steps=2, seed=3, kernels_per_step=12)
    dtrace.analyze(str(d / "job"), str(d / "out"), scheduler="sync")
    return d


@pytest.fixture
def out(analysed, tmp_path):
    o = tmp_path / "out"
    shutil.copytree(analysed / "out", o)
    return str(o)


def one_line(capsys, code, want_code=2, *needles) -> str:
    err = capsys.readouterr().err
    assert code == want_code, err
    assert err.count("\n") == 1 and ": error: " in err and "Traceback" not in err, err
    for n in needles:
        assert n in err, (n, err)
    return err


def edit_manifest(out, path, value):
    mf = os.path.join(out, "manifest.json")
    with open(mf) as f:
        m = json.load(f)
    d = m
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    with open(mf, "w") as f:
        json.dump(m, f)


# -- hand-edited manifests ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "path, value, needle",
    [
        (("inputs", 0, "parts"), None, "inputs[0].parts"),
        (("inputs", 0, "parts", 0), None, "inputs[0].parts[0]"),
        (("inputs", 0, "parts", 0, "rank"), "x", "inputs[0].parts[0].rank"),
        (("inputs", 0, "ranks"), None, "inputs[0].ranks"),
        (("inputs", 0, "ranks", 0), [None, 0], "inputs[0].ranks[0]"),
        (("options", "gpus_per_host"), "x", "gpus_per_host"),
        (("options", "step_pattern"), None, "step_pattern"),
        (("cache",), 5, "'cache'"),
        (("partitions", 0, "ranks"), None, "partitions[0]"),
        (("inputs", 0, "size"), [], "inputs[0].size"),
        (("inputs", 0, "dropped_events"), "x", "inputs[0].dropped_events"),
    ],
)
def test_manifest_with_wrong_types(out, tmp_path, capsys, path, value, needle):
    edit_manifest(out, path, value)
    for argv in (
        ["show", out],
        ["timeline", out, "-o", str(tmp_path / "t.json")],
        ["tree", out, "--op", "ProfilerStep#1"],
        ["report", out, "-o", str(tmp_path / "r.html")],
    ):
        one_line(capsys, main(argv), 2, needle, "edited or damaged")
    with pytest.raises(DtraceError, match="edited or damaged"):
        dtrace.events(out)


# -- forged cache records ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "field, value",
    [
        (("meta", "base_time_ns"), 2**70),
        (("meta", "base_time_ns"), "x"),
        (("meta", "events"), -1),
        (("meta", "n_devices"), 0),
        (("meta", "dropped_events"), "x"),
        (("parts", 0, "device"), 2**40),
        (("parts", 0, "n_events"), -5),
    ],
)
def test_forged_cache_record(analysed, out, capsys, field, value):
    """A record edited and given a matching fingerprint: its values are checked too; the entry is
    parsed again (a note), never read into a traceback."""
    (item,) = [i for i in dtrace.load(out).manifest["inputs"] if i["ranks"][0][0] == 0]
    from dtrace.ingest.cache import entry_dir

    src = os.path.join(entry_dir(os.path.join(out, "cache"), item["path"]), "source.json")
    with open(src) as f:
        doc = json.load(f)
    d = doc["record"]
    for k in field[:-1]:
        d = d[k]
    d[field[-1]] = value
    doc["record_fingerprint"] = _record_fingerprint(doc["record"])
    with open(src, "w") as f:
        json.dump(doc, f)
    # the quick views fall back to the trace, the timeline and events say the cache is gone
    assert main(["tree", out, "--rank", "0", "--op", "ProfilerStep#1"]) == 0
    one_line(capsys, main(["timeline", out, "-o", os.path.join(out, "t.json"), "--ranks", "0"]), 2, "cached events")
    os.unlink(os.path.join(out, "manifest.json"))
    assert main(["analyze", str(analysed / "job"), "-o", out, "--sync", "--no-progress", "--recompute"]) == 0
    (item,) = [i for i in dtrace.load(out).manifest["inputs"] if i["ranks"][0][0] == 0]
    assert not item["cached"] and any("damaged" in n for n in item["notes"]), item["notes"]


# -- numbers on the command line -----------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, needle",
    [
        (["gaps", "{out}", "--hist-min", "inf"], "--hist-min: 'inf' is not a finite number"),
        (["gaps", "{out}", "--hist-max", "1e309"], "--hist-max: '1e309' is not a finite number"),
        (["kernels", "{out}", "--kernel-wait-us", "inf"], "--kernel-wait-us"),
        (["kernels", "{out}", "--kernel-wait-us", "1e309"], "--kernel-wait-us"),
        (["analyze", "{out}", "-o", "{out}/x", "--hist-min", "nan"], "--hist-min"),
        (["whatif", "{out}", "--speedup", "1e-308"], "--speedup: 1e-308 is out of range"),
        (["whatif", "{out}", "--class", "gemm=1e-308"], "1e-308 is out of range"),
        (["whatif", "{out}", "--class", "gemm=inf"], "not a finite number"),
        (["timeline", "{out}", "-o", "{out}/t.json", "--ranks", "0-999999999"], "at most 4,096"),
        (["timeline", "{out}", "-o", "{out}/t.json", "--ranks", "0-99999999999999999999"], "out of range"),
        (["gaps", "{out}", "--hist-bins", "1000000000"], "--hist-bins: 1000000000 is out of range"),
        (["gaps", "{out}", "--hist-bins", "1e9"], "--hist-bins: '1e9' is not a whole number"),
        (["synth", "{out}/s", "--steps", "1000000000"], "--steps: 1000000000 is out of range"),
        (["synth", "{out}/s", "--jitter", "1e309"], "--jitter"),
        (["synth", "{out}/s", "--speedup", "gemm=1e-308"], "out of range"),
        (["compare", "{out}", "{out}", "-o", "{out}/c.html", "--wall-time", "1=inf"], "not a finite number"),
    ],
)
def test_numbers_out_of_range(out, capsys, argv, needle):
    one_line(capsys, main([a.format(out=out) for a in argv]), 2, needle)


def test_options_out_of_range_in_python(tmp_path):
    path = str(tmp_path / "rank-0.json")
    shutil.copy(shared("kineto", "single", "mi210_gpu_only.json.gz"), path + ".gz")
    for kw in (
        {"hist_min_ns": float("inf")},
        {"kernel_wait_ns": 1e309},
        {"hist_bins": 10**9},
        {"gpus_per_host": "8"},
        {"step_pattern": "("},
    ):
        with pytest.raises(DtraceError, match=next(iter(kw))):
            dtrace.analyze(path + ".gz", scheduler="sync", **kw)


# -- class maps ---------------------------------------------------------------------------------
def test_class_map_nested_or_endless(analysed, out, tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    trace = str(analysed / "job" / "rank-0.json.gz")
    for cm, needle in ((str(deep), "nested too deeply"), ("/dev/zero", "character device")):
        one_line(capsys, main(["kernels", trace, "--classmap", cm]), 2, needle)
        one_line(capsys, main(["analyze", trace, "-o", str(tmp_path / "o"), "--classmap", cm]), 2, needle)
        one_line(capsys, main(["compare", out, "-o", str(tmp_path / "c.html"), "--classmap", cm]), 2, needle)


# -- damaged inputs read by the quick views ---------------------------------------------------------
def _bad_distance_gzip() -> bytes:
    """A gzip file whose deflate stream refers back to data before its start (a fixed-Huffman block
    holding one length-3, distance-1 match and nothing before it)."""
    bits = [1, 1, 0]  # BFINAL, BTYPE = 01 (fixed Huffman), least significant bit first
    bits += [0, 0, 0, 0, 0, 0, 1]  # literal/length code 257 (length 3): 7-bit code 0000001, MSB first
    bits += [0, 0, 0, 0, 0]  # distance code 0 (distance 1)
    bits += [0] * 7  # end of block (256)
    data = bytearray((len(bits) + 7) // 8)
    for i, b in enumerate(bits):
        data[i // 8] |= b << (i % 8)
    with pytest.raises(zlib.error, match="distance"):
        zlib.decompress(bytes(data), -15)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    return header + bytes(data) + b"\x00" * 8


def test_damaged_inputs_read_by_ops_and_tree(tmp_path, capsys):
    gz = tmp_path / "rank-0.json.gz"
    gz.write_bytes(_bad_distance_gzip())
    flipped = tmp_path / "rank-1.json.gz"
    data = bytearray(gzip.compress(b'{"traceEvents": []}' * 1000))
    data[10] |= 0b110  # the first block's type: 11, which deflate reserves
    flipped.write_bytes(bytes(data))
    db = tmp_path / "report.sqlite"
    shutil.copy(shared("nsys", "rtx4060ti_4streams.sqlite"), db)
    con = sqlite3.connect(db)
    try:
        con.execute("UPDATE StringIds SET value = CAST(X'ff41' AS TEXT)")
        con.commit()
    finally:
        con.close()
    for path, needle in ((gz, "damaged compressed data"), (flipped, "damaged compressed data"), (db, "SQLite")):
        one_line(capsys, main(["ops", str(path)]), 2, str(path), needle)
        one_line(capsys, main(["tree", str(path), "--op", "x"]), 2, str(path), needle)


# -- the timeline and the events of a results folder --------------------------------------------------
def test_timeline_window_outside_the_job(out, tmp_path, capsys):
    one_line(
        capsys, main(["timeline", out, "-o", str(tmp_path / "t.json"), "--window", "1000:2000"]), 2, "no GPU event"
    )
    one_line(capsys, main(["timeline", out, "-o", str(tmp_path / "t.json"), "--window=-9:-1"]), 2, "no GPU event")
    one_line(capsys, main(["timeline", out, "-o", str(tmp_path / "t.json"), "--window", "1" + "0" * 400 + ":1"]), 2)
    # a window at the very end: some ranks have no event in it (their side tables are empty)
    bd = dtrace.load(out).breakdown
    end_ms = (bd["last_ns"].max() - bd["first_ns"].min()) / 1e6
    win = f"{end_ms - 0.001:.6f}:{end_ms + 5:.6f}"
    assert main(["timeline", out, "-o", str(tmp_path / "t.json"), "--window", win, "--ranks", "0-3"]) == 0
    capsys.readouterr()


def test_events_of_a_folder_whose_cache_is_gone(out):
    shutil.rmtree(os.path.join(out, "cache"))
    with pytest.raises(DtraceError, match="cached events are gone"):
        dtrace.events(out)


# -- a user analysis raising KeyboardInterrupt on a cluster --------------------------------------------
def interrupting(batch):
    raise KeyboardInterrupt


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_keyboard_interrupt_in_a_worker(analysed, tmp_path, capfd):
    """On a worker a KeyboardInterrupt is not a Ctrl-C (signals reach the main thread only): it
    killed the worker, and every retry another one, for minutes. Now it fails the analysis's own
    table only (issue 31), the inputs and the built-in tables complete."""
    a = dtrace.Analysis("interrupting", interrupting, {"rank": "int32", "device": "int32", "n": "int64"})
    res = dtrace.analyze(
        str(analysed / "job"), str(tmp_path / "out"), analyses=[a], scheduler="local", workers=2, progress=False
    )
    err = capfd.readouterr().err
    assert "Worker process died" not in err and "KilledWorker" not in err
    assert res.errors == [] and len(res.breakdown)
    msgs = list(res.failed_tables.values())
    assert list(res.failed_tables) == ["interrupting"] and any("KeyboardInterrupt" in m for m in msgs), msgs
    assert all("\n" not in m for m in msgs)


# -- causes that were reported as "internal error" ------------------------------------------------------
def test_known_causes_are_named(analysed, tmp_path):
    raw = json.loads(gzip.decompress((analysed / "job" / "rank-0.json.gz").read_bytes()))
    text = json.dumps(raw)
    deep = tmp_path / "deep.json"
    deep.write_text('{"x": ' + '{"a":' * 100_000 + "1" + "}" * 100_000 + ", " + text[1:])
    (err,) = dtrace.analyze(str(deep), scheduler="sync").errors
    assert err == f"{deep}: the JSON is nested too deeply to read"

    seq = json.loads(text)
    nccl = next(e for e in seq["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e["name"].lower())
    nccl["args"]["Seq"] = 2**70
    (tmp_path / "seq.json").write_text(json.dumps(seq))
    res = dtrace.analyze(str(tmp_path / "seq.json"), scheduler="sync")
    assert res.ok  # a sequence number beyond int64 is not stated: the kernel is matched by order

    csv = tmp_path / "rank-0_cuda_gpu_kern_sum.csv"
    csv.write_text(
        "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
        + "50.0,1000,2,500,500,400,600,100,"
        + "k" * 200_000
        + "\n"
    )
    (err,) = dtrace.analyze(str(csv), scheduler="sync").errors
    assert err.startswith(f"{csv}: ") and "field larger than field limit" in err

    with gzip.open(shared("jax", "mi300x8_conv.trace.json.gz")) as f:
        jax = json.load(f)
    meta = next(e for e in jax["traceEvents"] if e.get("ph") == "M" and "/device:GPU:" in str(e.get("args")))
    meta["args"]["name"] = str(meta["args"]["name"]).split("/device:GPU:")[0] + "/device:GPU:99999999999999999999"
    (tmp_path / "j.trace.json").write_text(json.dumps(jax))
    (err,) = dtrace.analyze(str(tmp_path / "j.trace.json"), scheduler="sync").errors
    assert "device id 99999999999999999999" in err and "out of range" in err and "internal error" not in err
