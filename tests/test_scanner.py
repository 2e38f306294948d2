"""The compiled scanner of Kineto events (dtrace/readers/_scan.c) against the pure path.

Every test reads the same input twice, with ``DTRACE_PURE_SCAN=1`` (msgspec structs, the
reference) and with the scanner, and compares every table of every part (events, collectives,
memcpy and the side tables: values, dictionaries, types) and the file's meta, or the one-line
error. Small block sizes put event boundaries everywhere. Where the extension is not built the
comparisons still run (both paths are then the pure one) and the tests that need it skip;
``DTRACE_REQUIRE_SCANNER=1`` (set by .ci/run) turns its absence into a failure.
"""

from __future__ import annotations

import gzip
import json
import os
import random

import pytest
from testpaths import TRACES, shared

from dtrace.errors import InputError
from dtrace.readers import _scanned
from dtrace.readers._chrome import ChromeTrace, Scanned
from dtrace.readers.kineto import Event, Meta, read_kineto

needs_scanner = pytest.mark.skipif(not _scanned.AVAILABLE, reason="the compiled scanner is not built")
BLOCKS = (None, 1 << 12, 200)


def test_scanner_is_built_where_required():
    """CI (.ci/run) sets DTRACE_REQUIRE_SCANNER=1: an install that silently skipped the extension fails here."""
    if os.environ.get("DTRACE_REQUIRE_SCANNER", "") not in ("", "0"):
        assert _scanned.AVAILABLE, "DTRACE_REQUIRE_SCANNER is set but dtrace.readers._scan is not built"
    else:
        assert _scanned.AVAILABLE in (True, False)
        assert (_scanned.new_scanner() is None) == (not _scanned.AVAILABLE or _scanned.pure_forced())


def _outcome(path, monkeypatch, pure, **kw):
    monkeypatch.setenv("DTRACE_PURE_SCAN", "1" if pure else "")
    try:
        tf = read_kineto(str(path), **kw)
    except InputError as exc:
        return ("error", type(exc).__name__, str(exc))
    parts = []
    for p in tf.parts:
        tables = {"events": p.events, "collectives": p.collectives, "memcpy": p.memcpy, **p.side}
        parts.append((p.device, p.local_index, {k: t.combine_chunks() for k, t in sorted(tables.items())}))
    return ("tables", tf.rank_hint, json.dumps(tf.meta, sort_keys=True, default=str), parts)


def _same(a, b):
    assert a[0] == b[0], (a[:3], b[:3])
    if a[0] == "error":
        assert a == b
        return
    assert a[1:3] == b[1:3]
    assert len(a[3]) == len(b[3])
    for (dev_a, idx_a, ta), (dev_b, idx_b, tb) in zip(a[3], b[3]):
        assert (dev_a, idx_a) == (dev_b, idx_b)
        assert ta.keys() == tb.keys()
        for name in ta:
            x, y = ta[name], tb[name]
            assert x.schema == y.schema, name
            assert x.equals(y), name
            for cx, cy in zip(x.columns, y.columns):  # dictionaries too, not only the values
                if hasattr(cx.type, "value_type"):
                    for kx, ky in zip(cx.chunks, cy.chunks):
                        assert kx.dictionary.equals(ky.dictionary) and kx.indices.equals(ky.indices), name
                assert cx.to_pylist() == cy.to_pylist(), name


def check(path, monkeypatch, blocks=BLOCKS):
    """Both paths, at every block size, give the same outcome; returns the pure one."""
    ref = _outcome(path, monkeypatch, True)
    for block in blocks:
        _same(ref, _outcome(path, monkeypatch, False, **({"block": block} if block else {})))
        if block:
            _same(ref, _outcome(path, monkeypatch, True, block=block))
    return ref


def _shared_kineto():
    out = []
    for root, _dirs, files in os.walk(os.path.join(TRACES, "kineto")):
        out += [os.path.relpath(os.path.join(root, f), TRACES) for f in sorted(files)]
    return sorted(out) or ["kineto/missing"]


@pytest.mark.parametrize("rel", _shared_kineto())
def test_shared_traces_identical(rel, monkeypatch):
    path = shared(*rel.split("/"))
    check(path, monkeypatch, blocks=(None, 1 << 16))


def test_synthetic_traces_identical(tmp_path, monkeypatch):
    from dtrace.generate.synth import generate

    generate(tmp_path / "a", ranks=2, steps=2, kernels_per_step=20, seed=5, record_shapes=True)
    generate(tmp_path / "b", ranks=1, steps=1, kernels_per_step=12, seed=1, gzip=False, comm=False)
    files = sorted(str(p) for p in tmp_path.rglob("rank-*.json*"))
    assert len(files) == 3
    for f in files:
        assert check(f, monkeypatch, blocks=(None, 1 << 12))[0] == "tables"


# -- hand-made events: every form the scanner decodes, leaves to msgspec, or must refuse --------
K = '"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": {ts}, "dur": 2'
HAND = [
    '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 10, "dur": 5, "args": {"External id": 1, '
    '"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"], "Input Strides": [[3, 1], [4, 1]], '
    '"Concrete Inputs": ["", ""], "Sequence number": 4}}',
    '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 11, "dur": 1, "args": {"External id": 9}}',
    '{"ph": "X", "cat": "cpu_op", "name": "aten::view", "pid": 1, "tid": 2, "ts": 12, "dur": 1, "args": '
    '{"Input Dims": [[1]], "Input type": ["int"]}}',
    '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 10.5, "dur": 3, '
    '"args": {"correlation": 100, "external id": 1}}',
    "{" + K.format(ts=11) + ', "name": "gemm\\"q\\\\x\\/", "args": {"device": 0, "stream": 7, "correlation": 100}}',
    "{" + K.format(ts=12) + ', "name": "caf\\u00e9 \\ud83d\\ude00", "args": {"device": 0, "stream": 7}}',
    "{" + K.format(ts=13) + ', "name": "café ☕", "args": {"device": 0, "stream": 7, "note": "naïve"}}',
    "{" + K.format(ts=14) + ', "name": "k2", "args": {"device": "0", "stream": "0x7", "correlation": "0x10"}}',
    "{" + K.format(ts=15) + ', "name": "k3", "args": {"correlation": 123456789012345678901234567890, '
    '"External id": -9223372036854775808, "Sequence number": 9223372036854775807}}',
    "{" + K.format(ts="1.6e1") + ', "name": "k4", "args": null}',
    "{" + K.format(ts="17E0") + ', "name": "k5"}',
    "{" + K.format(ts=18) + ', "name": "k6", "args": {"x": {"y": [1, {"z": null}], "w": [true, false, -0.5e-3]}, '
    '"External id": 5, "correlation": null}}',
    "{" + K.format(ts="1.9000000000000000000000001e1") + ', "name": "k7", "args": {"device": 0, "stream": 7}}',
    '{"ph": "X", "cat": "kernel", "pid": "Spans", "tid": "12", "ts": 20, "dur": 1, "name": "k8", "args": {"stream": 7}}',
    '{"ph": "X", "cat": "kernel", "pid": 12345678901234567890123, "tid": -3, "ts": 21, "dur": 1, "name": "k9"}',
    '{"ph": "X", "cat": null, "name": "nocat", "pid": 1, "tid": 2, "ts": 22, "dur": 1}',
    '{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7, "ts": 23, '
    '"dur": 4, "args": {"device": 0, "stream": 7, "bytes": 4096, "correlation": 101}}',
    '{"ph": "X", "cat": "gpu_memcpy", "name": "CopyDeviceToDevice", "pid": 0, "tid": 7, "ts": 24, "dur": 4, '
    '"args": {"device": 0, "stream": 7, "kind": "DtoD"}}',
    '{"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": 25, "dur": 1, '
    '"args": {"device": 0, "stream": 7, "bytes": "64"}}',
    '{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 8, "ts": 26, '
    '"dur": 9, "args": {"device": 0, "stream": 8, "Collective name": "allreduce", "In msg nelems": 1024, '
    '"Out msg nelems": 1024, "dtype": "Float", "Group size": 2, "Process Group Name": "0", '
    '"Process Group Ranks": "[0, 1]", "Seq": 3}}',
    '{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 2, "ts": 25.5, "dur": 1, '
    '"args": {"Collective name": "allreduce", "Seq": 3, "External id": 77}}',
    '{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 2, "ts": 27, "s": "t", '
    '"args": {"Total Allocated": 1024, "Total Reserved": 2048, "Bytes": 512, "Device Id": 0, "Device Type": 1, '
    '"Addr": 140000}}',
    '{"ph": "i", "name": "marker", "pid": 1, "tid": 2, "ts": 28, "s": "t"}',
    '{"ph": "s", "id": 5, "pid": 1, "tid": 2, "ts": 29, "cat": "ac2g", "name": "ac2g"}',
    '{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}',
    '{"ph": "X", "name": "k10", "n\\u0061me": "escaped key", "cat": "kernel", "pid": 0, "tid": 7, "ts": 30, "dur": 1}',
    '{"ph": "X", "name": "first", "name": "dup", "cat": "kernel", "pid": 0, "tid": 7, "ts": 31, "dur": 1}',
    '{"ph": "X", "cat": "kernel", "name": "k11", "pid": 0, "tid": 7, "ts": 32, "dur": 1, "args": {"device": 0, '
    '"device": 1}}',
    '{"ph": "\\u0058", "cat": "kernel", "name": "escaped ph", "pid": 0, "tid": 7, "ts": 33, "dur": 1}',
    '{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 2, "ts": 9, "dur": 40}',
    '{"ph": "X", "cat": "kernel", "name": "k12", "pid": 0, "tid": 7, "ts": 34, "dur": 1, "args": {"kind": null, '
    '"correlation": -1}}',
    '\t{ "ph" :"X" ,\n"cat":"kernel","name":"spaced","pid":0,"tid":7,"ts":35 ,"dur":1 , "args" : { } }\r\n',
    "{}",
    '{"ph": "X", "cat": "kernel", "name": "deep", "pid": 0, "tid": 7, "ts": 36, "dur": 1, "args": {"x": '
    + "[" * 240
    + "]" * 240
    + "}}",
]


def _doc(events, tmp_path, name="t.json", gz=False, head='"schemaVersion": 1, ', tail=', "baseTimeNanoseconds": 0'):
    text = "{" + head + '"traceEvents": [' + ",\n".join(events) + "]" + tail + "}"
    path = tmp_path / (name + (".gz" if gz else ""))
    data = text.encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_hand_made_events_identical(tmp_path, monkeypatch):
    out = check(_doc(HAND, tmp_path), monkeypatch, blocks=(None, 1 << 12, 300, 64))
    assert out[0] == "tables"
    parts = {dev: tables for dev, _idx, tables in out[3]}
    names = {n for tables in parts.values() for n in tables["events"].column("name").to_pylist()}
    # the plain reading of the JSON: every complete event is a row (the decoded names prove the escapes)
    expected = [json.loads(e).get("name", "") for e in HAND if json.loads(e).get("ph") == "X"]
    assert json.loads(out[2])["events"] == len(expected) and names == set(expected)
    tables = parts[0]
    assert "caf\u00e9 \U0001f600" in names and 'gemm"q\\x/' in names
    assert tables["memcpy"].num_rows == 3 and tables["collectives"].num_rows >= 1
    assert tables["op_args"].num_rows == 1 and tables["memory"].num_rows == 1
    check(_doc(HAND, tmp_path, "t2.json", gz=True), monkeypatch, blocks=(None, 500))
    check(_doc(list(reversed(HAND)), tmp_path, "t3.json", head="", tail=""), monkeypatch, blocks=(None, 128))


@needs_scanner
def test_scanner_leaves_only_rare_events_to_msgspec(tmp_path):
    """The common events are scanned (not decoded by msgspec); the rare ones are handed over by span."""
    common = [e for e in HAND if "Collective" not in e and '"bytes"' not in e and "[memory]" not in e]
    common = [e for e in common if "\\" not in e and "é" not in e and "☕" not in e and "Spans" not in e]
    common = [e for e in common if '"0x' not in e and "1234567890123" not in e and "dup" not in e]
    common = [e for e in common if '"device": 1' not in e and '"1.9000' not in e and "deep" not in e]
    path = _doc(common * 50, tmp_path)
    trace = ChromeTrace(str(path), Event, Meta, 1 << 12, raw_fields=True, scanner=_scanned.new_scanner())
    chunks = list(trace.chunks())
    assert chunks and all(isinstance(c, Scanned) for c in chunks)
    assert sum(len(c.fallback) for c in chunks) == 0
    n_x = sum(1 for e in common if json.loads(e).get("ph") == "X") * 50
    assert sum(c.n for c in chunks) == n_x
    rare = _doc([e for e in HAND if "deep" not in e], tmp_path, "rare.json")  # deeper than the scanner goes: msgspec
    trace = ChromeTrace(str(rare), Event, Meta, raw_fields=True, scanner=_scanned.new_scanner())
    chunks = list(trace.chunks())
    assert all(isinstance(c, Scanned) for c in chunks)
    handed = sorted(e.name for c in chunks for e in c.fallback)
    assert "[memory]" in handed and "record_param_comms" in handed and "k2" in handed and "spaced" not in handed


ERRORS = {
    "no dur": ['{"ph": "X", "cat": "kernel", "name": "nodur", "pid": 0, "tid": 7, "ts": 1}'],
    "null ts": ['{"ph": "X", "cat": "kernel", "name": "nullts", "pid": 0, "tid": 7, "ts": null, "dur": 1}'],
    "ts string": ['{"ph": "X", "cat": "kernel", "name": "a", "pid": 0, "tid": 7, "ts": "5", "dur": 1}'],
    "pid bool": ['{"ph": "X", "cat": "kernel", "name": "a", "pid": true, "tid": 7, "ts": 5, "dur": 1}'],
    "ts 1e400": ['{"ph": "X", "cat": "kernel", "name": "a", "pid": 0, "tid": 7, "ts": 1e400, "dur": 1}'],
    "ext float": [
        '{"ph": "X", "cat": "kernel", "name": "a", "pid": 0, "tid": 7, "ts": 5, "dur": 1, "args": {"External id": 1.5}}'
    ],
    "not an object": ["1"],
    "non-X wrong type": ['{"ph": "i", "name": "a", "ts": "x"}'],
    "name null": ['{"ph": "X", "cat": "kernel", "name": null, "pid": 0, "tid": 7, "ts": 5, "dur": 1}'],
    "args list": ['{"ph": "X", "cat": "kernel", "name": "a", "pid": 0, "tid": 7, "ts": 5, "dur": 1, "args": [1]}'],
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_identical(case, tmp_path, monkeypatch):
    kernel = '{"ph": "X", "cat": "kernel", "name": "ok", "pid": 0, "tid": 7, "ts": 1, "dur": 1, "args": {"device": 0}}'
    events = [kernel] * 20 + ERRORS[case] + [kernel] * 20
    out = check(_doc(events, tmp_path), monkeypatch, blocks=(None, 256))
    assert out[0] == "error" and "t.json" in out[2]


def test_malformed_and_truncated_documents(tmp_path, monkeypatch):
    good = _doc(HAND * 3, tmp_path, "good.json").read_bytes()
    cuts = [len(good) // 3, len(good) // 2, len(good) - 40, len(good) - 2]
    cases = [good[:c] for c in cuts]
    cases.append(good.replace(b'},\n{"ph": "X", "cat": "cpu_op"', b'}\n{"ph": "X", "cat": "cpu_op"', 1))
    cases.append(good.replace(b'"dur": 5', b'"dur": 05', 1))
    cases.append(good.replace(b'"k5"', b'"k\x015"', 1))
    cases.append(good.replace(b'"k6"', b'"k\\q6"', 1))
    cases.append(good.replace(b"[[2, 3]", b"[[2, 3}", 1))
    for i, data in enumerate(cases):
        path = tmp_path / f"bad{i}.json"
        path.write_bytes(data)
        ref = _outcome(path, monkeypatch, True)
        assert data != good and ref[0] == "error" and f"bad{i}.json" in ref[2], i
        for block in (None, 256):
            got = _outcome(path, monkeypatch, False, **({"block": block} if block else {}))
            assert got[0] == "error" and f"bad{i}.json" in got[2], (i, got)
            if block is None:
                assert got == ref


# -- generated events: random field forms, compared between the paths ------------------------------
def _random_value(rng, depth=0):
    r = rng.random()
    if depth > 2 or r < 0.3:
        return rng.choice([0, -1, 7, 2**40, 2**63 - 1, 2**64, 1.5, -2.5e-7, 3e21, True, None, "", "x", "0x1f", "é"])
    if r < 0.6:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    return {rng.choice(["a", "b", "dtype", "kind"]): _random_value(rng, depth + 1) for _ in range(rng.randrange(3))}


def _random_event(rng):
    cat = rng.choice(
        ["kernel", "cpu_op", "cuda_runtime", "gpu_memcpy", "gpu_memset", "Kernel", "python_function", None]
    )
    e = {
        "ph": rng.choice(["X"] * 8 + ["i", "s", "f", "M"]),
        "cat": cat,
        "name": rng.choice(["aten::mm", "aten::addmm", "gemm", "k", 'q"uote', "tab\there", "ünï", "[memory]"]),
        "pid": rng.choice([0, 1, 2**31, 2**64, "1", "Spans", "0x10"]),
        "tid": rng.choice([0, 7, -1, "7", "stream 7"]),
        "ts": rng.choice([1, 2.25, 1e3, 1712345678.123456, 12345678901234567, 5e-5]),
        "dur": rng.choice([0, 1, 0.5, 2e2]),
    }
    args = {}
    for key in ("External id", "external id", "correlation", "stream", "device", "Sequence number", "kind", "bytes"):
        if rng.random() < 0.3:
            args[key] = rng.choice(
                [0, 3, -5, "12", "0x7", "zz", None, 2**63, "DtoD"] if key != "kind" else ["DtoD", None]
            )
    if rng.random() < 0.2:
        args["Input Dims"] = [[2, 3]]
        args["Input type"] = ["float"]
    if rng.random() < 0.1:
        args["extra"] = _random_value(rng)
    if args or rng.random() < 0.5:
        e["args"] = args if rng.random() < 0.95 else None
    for k in list(e):
        if rng.random() < 0.03 and k not in ("ph", "ts", "dur"):
            del e[k]
    return e


@pytest.mark.parametrize("seed", range(6))
def test_random_events_identical(seed, tmp_path, monkeypatch):
    rng = random.Random(seed)
    events = [_random_event(rng) for _ in range(400)]
    texts = [
        json.dumps(e, ensure_ascii=rng.random() < 0.5, separators=rng.choice([(",", ":"), (", ", ": ")]))
        for e in events
    ]
    out = check(_doc(texts, tmp_path), monkeypatch, blocks=(None, 512))
    assert out[0] == "tables", out[:3]


@needs_scanner
def test_numbers_read_as_msgspec_reads_them():
    """Every float the scanner reads itself (``ts``) is the one msgspec reads, bit for bit
    (its own fast path and CPython's correctly rounded parser, never an approximation); the
    numbers it does not read (out of range) it hands to msgspec."""
    import msgspec
    import numpy as np

    from dtrace.readers._scan import Scanner

    rng = random.Random(7)

    def number():
        text = ("-" if rng.random() < 0.2 else "") + str(rng.randrange(0, 10 ** rng.randrange(1, 22)))
        if rng.random() < 0.7:
            text += "." + str(rng.randrange(0, 10 ** rng.randrange(1, 20))).zfill(rng.randrange(1, 20))
        if rng.random() < 0.3:
            text += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randrange(0, 330))
        return text

    fixed = ["-0", "-0.0", "-0e0", "9007199254740993", "-9223372036854775808", "18446744073709551617", "4.9e-324"]
    fixed += ["2.2250738585072014e-308", "1.7976931348623157e308", "1e400", "1" * 40, "0.1e-400"]
    numbers = fixed + [number() for _ in range(20_000)]
    got = Scanner().scan(("[" + ",".join('{"ph": "X", "ts": %s}' % n for n in numbers) + "]").encode())
    assert got is not None and got[0] == len(numbers)
    ts = np.frombuffer(got[6], np.float64)
    handed = set(np.frombuffer(got[-2], np.int64).reshape(-1, 3)[:, 0].tolist())
    assert len(handed) < len(numbers) // 10
    for i, text in enumerate(numbers):
        try:
            want = msgspec.json.decode(text.encode(), type=float)
        except msgspec.ValidationError:
            assert i in handed, text  # out of range: msgspec's error
            continue
        if i not in handed:
            assert repr(float(ts[i])) == repr(want), text


def test_the_document_around_the_events_follows_one_rule_on_both_paths(tmp_path, monkeypatch):
    """Issue 31: a top-level key given twice (``distributedInfo`` before and after ``traceEvents``)
    kept the first value on the scanner path and the last on the pure path; a ``traceEvents`` key
    nested in ``otherData`` or ``deviceProperties`` failed the input on the scanner path only.
    JSON's own rule holds on both, at every block size: the last key wins, and only the
    document's own ``traceEvents`` holds the events."""
    import gzip

    src = os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples", "traces", "sampled_rank-0.json.gz")
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    events, info = doc.pop("traceEvents"), doc.pop("distributedInfo")
    fake = '[{"ph": "X", "cat": "kernel", "name": "fake", "ts": 1, "dur": 1, "pid": 0, "tid": 7}]'
    head = json.dumps({**doc, "distributedInfo": {**info, "rank": 3}})[:-1]
    text = (
        head
        + f', "otherData": {{"traceEvents": {fake}}}, "deviceProperties": [{{"id": 0, "traceEvents": {fake}}}]'
        + f', "x": "\\"traceEvents\\": [", "traceEvents": {json.dumps(events)}'
        + f', "distributedInfo": {json.dumps({**info, "rank": 5})}}}'
    )
    path = tmp_path / "dup.json"
    path.write_text(text)
    ref = check(path, monkeypatch)
    assert ref[0] == "tables" and ref[1] == 5  # the later distributedInfo
    names = ref[3][0][2]["events"].column("name").to_pylist()
    assert "fake" not in names and len(names) == sum(1 for e in events if e.get("ph") in ("X", "i", "I"))
