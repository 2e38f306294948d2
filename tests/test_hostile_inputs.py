"""Inputs that are not regular files, whitespace bombs, oversized events and the per-input size
limit (issue 13): one-line errors for the input concerned, bounded time and memory, the
other inputs complete."""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import zlib

import pytest
from _fifo import release_fifo
from synth_formats import write_nsys_sqlite
from test_implausible_times import GOOD, TRACE_HEADER, csv_row, write_kineto
from testpaths import ROOT

import dtrace
from dtrace.errors import InputTooLarge, NotRegularFile, UsageError
from dtrace.ingest.inputs import parse_size
from dtrace.readers import detect
from dtrace.readers._io import Content
from dtrace.readers.kineto import read_kineto
from dtrace.readers.nsys import read_nsys
from dtrace.readers.nsys_csv import read_nsys_csv

KERNEL = (
    '{"ph": "X", "cat": "kernel", "name": "%s", "pid": 0, "tid": 7, "ts": %s, "dur": 10.0, '
    '"args": {"device": 0, "stream": 7}}'
)


@pytest.fixture
def fifo(tmp_path):
    """A FIFO named like a trace. Should a reader open it anyway, a helper thread gives it an
    empty file after a few seconds, so a regression fails the test instead of hanging it."""
    path = tmp_path / "job" / "rank-9.json.gz"
    path.parent.mkdir()
    os.mkfifo(path)
    stop = threading.Event()

    def rescue():
        if not stop.wait(5):
            release_fifo(path, timeout=30)

    t = threading.Thread(target=rescue, daemon=True)
    t.start()
    yield path
    stop.set()
    t.join()


def test_a_fifo_among_the_inputs_is_refused_and_the_others_complete(tmp_path, fifo):
    good = write_kineto(fifo.parent / "rank-0.json", GOOD)
    out = tmp_path / "out"
    for inputs in ([str(fifo.parent)], [good, str(fifo)], [str(fifo.parent / "rank-*")]):  # folder, file, glob
        t0 = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "dtrace", "analyze", *inputs, "-o", str(out), "--sync"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert time.monotonic() - t0 < 60 and proc.returncode == 1, proc.stderr
        res = dtrace.load(out)
        assert res.breakdown["rank"].tolist() == [0]
        (item,) = [i for i in res.manifest["inputs"] if i["status"] == "error"]
        assert item["path"] == str(fifo) and item["error_type"] == "NotRegularFile"
        assert item["error"] == f"{fifo}: is a FIFO (named pipe), not a regular file: refused without reading it"


def test_readers_refuse_what_is_not_a_regular_file_before_opening_it(tmp_path, fifo):
    sock_path = str(tmp_path / "s.json")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(sock_path)
        cases = [
            (str(fifo), "a FIFO (named pipe)"),
            ("/dev/null", "a character device"),
            (sock_path, "a socket"),
            (str(tmp_path), "a folder"),
        ]
        for path, what in cases:
            for call in (detect, read_kineto, read_nsys_csv, read_nsys, Content):
                with pytest.raises(NotRegularFile) as ei:
                    call(path)
                assert str(ei.value) == f"{path}: is {what}, not a regular file: refused without reading it"
    res = dtrace.analyze(["/dev/null", write_kineto(tmp_path / "rank-0.json", GOOD)], scheduler="sync")
    assert res.errors == ["/dev/null: is a character device, not a regular file: refused without reading it"]


# -- whitespace and oversized strings ---------------------------------------------------------------


def gz_stream(path, pieces) -> str:
    """Write gzip content piece by piece (so GB-scale content never sits in memory)."""
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    with open(path, "wb") as f:
        for piece in pieces:
            f.write(c.compress(piece))
        f.write(c.flush())
    return str(path)


def compact_doc(n: int = 40) -> list[str]:
    return [KERNEL % (f"k{i}", 100.0 + 20 * i) for i in range(n)]


@pytest.mark.parametrize(
    "where", ["after [", "before ,", "after ,", "before ]", "after ]", "after the document", "before the document"]
)
def test_whitespace_anywhere_between_tokens_reads_the_same(tmp_path, where):
    events = compact_doc()
    ws = " \n\t\r" * (600 << 10)  # 2.4 MB, more than the 1 MiB read block
    pre = ws if where == "before the document" else ""
    head = '{"schemaVersion": 1, "traceEvents": [' + (ws if where == "after [" else "")
    sep = (ws if where == "before ," else "") + "," + (ws if where == "after ," else "")
    tail = (ws if where == "before ]" else "") + "]" + (ws if where == "after ]" else "") + ', "displayTimeUnit": "ms"}'
    end = ws if where == "after the document" else ""
    ref = read_kineto(
        gz_stream(
            tmp_path / "ref.json.gz",
            [(head.replace(ws, "") + ",".join(events) + '], "displayTimeUnit": "ms"}').encode()],
        )
    )
    p = gz_stream(tmp_path / "ws.json.gz", [(pre + head + sep.join(events) + tail + end).encode()])
    got = read_kineto(p, block=1 << 20)
    assert got.meta["events"] == 40 and got.parts[0].events.equals(ref.parts[0].events)


def test_64_mib_of_whitespace_is_skipped_fast_in_bounded_memory(tmp_path):
    """Today: a per-byte Python scan (~0.14 s/MiB, 9 s here) and a buffer that doubles to hold the
    whitespace. Now: native-speed scanning and a buffer that never grows for whitespace."""
    ws = b" " * (1 << 20)
    pieces = [
        b'{"traceEvents": [',
        (KERNEL % ("a", 100.0)).encode(),
        *[ws] * 32,
        b",",
        *[ws] * 32,
        (KERNEL % ("b", 200.0)).encode(),
        b"]}",
    ]
    p = gz_stream(tmp_path / "ws.json.gz", pieces)
    t0 = time.perf_counter()
    tf = read_kineto(p)
    seconds = time.perf_counter() - t0
    assert tf.meta["events"] == 2 and seconds < 1.0, seconds
    tracemalloc.start()
    try:
        read_kineto(p, block=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak  # a few read blocks, not the 64 MiB of whitespace


def test_an_oversized_event_fails_in_bounded_memory(tmp_path):
    name = "x" * (8 << 20)  # an 8 MiB kernel name (the case was 2 GiB, 12.75 GB peak)
    p = gz_stream(
        tmp_path / "big.json.gz",
        [b'{"traceEvents": [', (KERNEL % ("a", 1.0)).encode(), b",", (KERNEL % (name, 2.0)).encode(), b"]}"],
    )
    tracemalloc.start()
    try:
        with pytest.raises(InputTooLarge) as ei:
            read_kineto(p, block=256 << 10, max_event_size=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    at = len('{"traceEvents": [' + KERNEL % ("a", 1.0) + ",")  # where the large event starts
    assert str(ei.value) == f"{p}: an event is larger than the limit of 1 MiB (at content byte {at})"
    assert peak < 6 << 20, peak
    # the default limit (16 MiB) holds for every input, with no option given
    huge = gz_stream(
        tmp_path / "huge.json.gz", [b'{"traceEvents": [', (KERNEL % ("x" * (17 << 20), 2.0)).encode(), b"]}"]
    )
    res = dtrace.analyze([huge, write_kineto(tmp_path / "rank-0.json", GOOD)], scheduler="sync", rank_by="order")
    assert res.errors == [f"{huge}: an event is larger than the limit of 16 MiB (at content byte 17)"]


def test_oversized_keys_around_the_events_fail_in_bounded_memory(tmp_path):
    big = '"' + "y" * (3 << 20) + '"'
    before = gz_stream(
        tmp_path / "before.json.gz",
        [('{"traceName": ' + big + ', "traceEvents": [').encode(), (KERNEL % ("a", 1.0)).encode(), b"]}"],
    )
    with pytest.raises(InputTooLarge, match="the JSON before 'traceEvents' is larger than the limit of 1 MiB"):
        read_kineto(before, block=256 << 10, max_event_size=1 << 20)
    after = gz_stream(
        tmp_path / "after.json.gz",
        [b'{"traceEvents": [', (KERNEL % ("a", 1.0)).encode(), ('], "traceName": ' + big + "}").encode()],
    )
    with pytest.raises(InputTooLarge, match="is larger than the limit of 1 MiB"):
        read_kineto(after, block=256 << 10, max_event_size=1 << 20)


# -- the per-input size limit ------------------------------------------------------------------------


def test_max_input_size_fails_the_large_input_alone(tmp_path):
    # 3 MiB of content in a 10 kB gzip: the limit is on the content, not the file
    bomb = gz_stream(
        tmp_path / "rank-1.json.gz", [b'{"traceEvents": [', (KERNEL % ("a", 1.0)).encode(), b" " * (3 << 20), b"]}"]
    )
    assert os.path.getsize(bomb) < 100_000
    good = write_kineto(tmp_path / "rank-0.json", GOOD)
    res = dtrace.analyze([bomb, good], scheduler="sync", max_input_size="2MiB")
    assert res.breakdown["rank"].tolist() == [0]
    assert res.errors == [
        f"{bomb}: its content is larger than the input size limit of 2 MiB (--max-input-size / max_input_size)"
    ]
    assert dtrace.analyze([bomb, good], scheduler="sync", max_input_size=4 << 20).errors == []
    # the CLI flag maps onto the keyword; a bad size is a usage error
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "dtrace", "analyze", bomb, good, "-o", str(out), "--sync", "--max-input-size", "2MiB"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 1 and "larger than the input size limit of 2 MiB" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "dtrace", "analyze", good, "-o", str(out), "--sync", "--max-input-size", "lots"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "invalid size 'lots'" in proc.stderr


def test_max_input_size_applies_to_every_format(tmp_path):
    db = str(tmp_path / "r.sqlite")
    write_nsys_sqlite(db)
    with pytest.raises(InputTooLarge, match="input size limit of 1000 bytes"):
        read_nsys(db, max_input_size=1000)
    assert read_nsys(db, max_input_size=os.path.getsize(db)).parts
    csv = tmp_path / "t_cuda_gpu_trace.csv"
    csv.write_text(TRACE_HEADER + csv_row(100, 10, 1))
    with pytest.raises(InputTooLarge):
        read_nsys_csv(str(csv), max_input_size=100)
    doc = tmp_path / "t.json.gz"
    doc.write_bytes(gzip.compress(json.dumps({"traceEvents": GOOD}).encode()))
    with pytest.raises(InputTooLarge):
        read_kineto(str(doc), max_input_size=100)


def test_sizes_parse_as_documented():
    assert parse_size("64GiB") == 64 << 30 and parse_size("500MB") == 500 * 10**6 and parse_size("2 MiB") == 2 << 20
    assert parse_size(4096) == 4096 and parse_size(None) is None and parse_size("unlimited") is None
    for bad in ("lots", "-1", "0", "5 parsecs", True):
        with pytest.raises(UsageError, match="invalid size"):
            parse_size(bad)
