"""Fuzzing the readers and the pipeline with mutated shared traces (issue 13).

A few hundred inputs per run, from a fixed seed: Kineto traces (``kineto/single``,
``kineto/hta-2rank``), a JAX trace and the Nsight Systems SQLite report, each mutated by
truncation, byte flips, brackets duplicated or removed, junk bytes, damaged gzip streams, deleted
fields, swapped types, huge and non-finite values, deep nesting, long strings, and (SQLite)
edited, retyped, dropped or renamed tables and columns. The mutated inputs are analysed in
batches, in-process, each batch beside two unmutated ranks. Whatever a mutation does, the run
must end with results: no exception escapes :func:`dtrace.analyze`, no warning is raised, no
input fails with an "internal error" (a one-line error naming the input, or a clean analysis,
are the only outcomes), no run hangs (``timeout``), and the unmutated ranks' tables are
exactly those of a run of them alone.

Beyond the inputs (issue 19): a results folder edited or planted by hand — wrong JSON types in
every manifest and cache-record field, FIFOs, links and folders in place of its files — and every
numeric option of every command (0, negative, inf, nan, 1e309, beyond int64, huge ranges) must
end each command in one line with the documented exit code (README, "Bad input") or a result,
never a traceback or a hang.

``DTRACE_FUZZ_SEED``, ``DTRACE_FUZZ_BATCHES`` and ``DTRACE_FUZZ_OUT_CASES`` run other or more
cases (a failure prints the seed, the batch or case and what was done).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import sqlite3
import warnings

import pandas as pd
import pytest
from testpaths import shared

import dtrace
from dtrace.analyses import ANALYSES
from dtrace.cli.main import main

SEED = int(os.environ.get("DTRACE_FUZZ_SEED", "13"))
BATCHES = int(os.environ.get("DTRACE_FUZZ_BATCHES", "12"))
PER_BATCH = 25
JSON_BASES = [
    "kineto/single/mi250_rocm62.json.gz",
    "kineto/single/mi210_gpu_only.json.gz",
    "kineto/hta-2rank/sampled_rank-1.json.gz",
    "jax/mi300x8_conv.trace.json.gz",
]
NSYS_BASE = "nsys/rtx4060ti_4streams.sqlite"
GOOD = {"kineto/hta-2rank/sampled_rank-0.json.gz": 0, "kineto/single/mi210_gpu_only.json.gz": 1}
FIRST_MUTATED_RANK = 10_000
RANK_STEP = 10_000  # a mutated JAX file may hold many devices, each a rank

ODD_VALUES = [None, "x", "12", "", [], {}, [1, 2], {"a": 1}, True, False, 1.5, -1, 0, -0.0]
HUGE_VALUES = [
    1e308,
    -1e308,
    1e30,
    -1e30,
    2**63 - 1,
    2**63,
    -(2**63),
    -(2**63) - 1,
    10**40,
    1e-300,
    4.9e-324,
    "@@NaN@@",
    "@@Infinity@@",
    "@@-Infinity@@",
    "@@1e400@@",
    "@@-1e400@@",
    "@@1" + "0" * 400 + "@@",
]
TIME_FIELDS = ["ts", "dur"]
EVENT_FIELDS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "bp", "s"]
ARG_FIELDS = [
    "device",
    "stream",
    "correlation",
    "External id",
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "dtype",
    "Group size",
    "Process Group Name",
    "Process Group Ranks",
    "bytes",
    "Sequence number",
    "Fwd thread id",
]


# -- JSON mutations --------------------------------------------------------------------------
def _events(doc):
    ev = doc.get("traceEvents") if isinstance(doc, dict) else None
    return ev if isinstance(ev, list) and ev else None


def _some_events(rng, doc):
    ev = _events(doc)
    if not ev:
        return []
    gpu = [
        e for e in ev if isinstance(e, dict) and str(e.get("cat", "")).lower() in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    pool = gpu if gpu and rng.random() < 0.7 else ev
    return [e for e in rng.sample(pool, min(len(pool), rng.randint(1, 8))) if isinstance(e, dict)]


def m_delete_field(rng, doc):
    for e in _some_events(rng, doc):
        if isinstance(e.get("args"), dict) and rng.random() < 0.4:
            e["args"].pop(rng.choice(ARG_FIELDS), None)
        else:
            e.pop(rng.choice(EVENT_FIELDS), None)
    return "delete field"


def _set_fields(rng, doc, values, fields, p_args):
    """Give a field of some events (one of ``fields``, or of ``args`` with probability ``p_args``)
    one of ``values``."""
    for e in _some_events(rng, doc):
        value = rng.choice(values)
        if isinstance(e.get("args"), dict) and rng.random() < p_args:
            e["args"][rng.choice(ARG_FIELDS)] = value
        else:
            e[rng.choice(fields)] = value


def m_type_swap(rng, doc):
    _set_fields(rng, doc, ODD_VALUES, EVENT_FIELDS, 0.4)
    return "type swap"


def m_huge(rng, doc):
    _set_fields(rng, doc, HUGE_VALUES, TIME_FIELDS, 0.3)
    return "huge value"


def m_top(rng, doc):
    if not isinstance(doc, dict):
        return "top (not an object)"
    key = rng.choice(
        [
            "traceEvents",
            "distributedInfo",
            "baseTimeNanoseconds",
            "deviceProperties",
            "schemaVersion",
            "displayTimeUnit",
        ]
    )
    if rng.random() < 0.3:
        doc.pop(key, None)
    else:
        doc[key] = rng.choice(ODD_VALUES + HUGE_VALUES + [{"rank": "x"}, {"rank": -1}, {"rank": 2**40}])
    return f"top-level {key}"


def m_duplicate(rng, doc):
    ev = _events(doc)
    if ev:
        i = rng.randrange(len(ev))
        ev[i:i] = ev[i : i + rng.randint(1, 50)]
    return "duplicate events"


def m_shuffle(rng, doc):
    ev = _events(doc)
    if ev:
        rng.shuffle(ev)
    return "shuffle events"


def m_long_string(rng, doc):
    for e in _some_events(rng, doc)[:1]:
        e["name"] = "k" * rng.choice([10_000, 1_000_000]) + "\u00e9\x00\x1b"
    return "long string"


def m_deep(rng, doc):
    for e in _some_events(rng, doc)[:1]:
        e["args"] = "@@DEEP@@"
    return "deep nesting"


STRUCTURAL = [m_delete_field, m_type_swap, m_huge, m_top, m_duplicate, m_shuffle, m_long_string, m_deep]


def dump(doc) -> bytes:
    text = json.dumps(doc)
    text = text.replace('"@@DEEP@@"', "[" * 50_000 + "]" * 50_000)
    for token in ("NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" + "0" * 400):
        text = text.replace(f'"@@{token}@@"', token)
    return text.encode("utf-8", "surrogatepass")


def b_truncate(rng, data):
    return data[: rng.randrange(len(data))], "truncate"


def b_flip(rng, data):
    out = bytearray(data)
    for _ in range(rng.randint(1, 10)):
        out[rng.randrange(len(out))] ^= rng.randint(1, 255)
    return bytes(out), "byte flips"


def _brackets(rng, data):
    picks = []
    for _ in range(200):
        i = rng.randrange(len(data))
        if data[i : i + 1] in (b"[", b"]", b"{", b"}"):
            picks.append(i)
            if len(picks) >= 3:
                break
    return sorted(picks, reverse=True)


def b_bracket_dup(rng, data):
    for i in _brackets(rng, data):
        data = data[:i] + data[i : i + 1] * rng.randint(2, 3) + data[i + 1 :]
    return data, "brackets duplicated"


def b_bracket_del(rng, data):
    for i in _brackets(rng, data):
        data = data[:i] + data[i + 1 :]
    return data, "brackets removed"


def b_junk(rng, data):
    i = rng.randrange(len(data))
    junk = bytes(
        rng.choice([0, 0xFF, 0xC3, 0x1B, 0x0A, 0x22, 0x5C, 0x2C, 0x3A, rng.randrange(256)])
        for _ in range(rng.randint(1, 16))
    )
    return data[:i] + junk + data[i:], "junk bytes"


BYTES = [b_truncate, b_flip, b_bracket_dup, b_bracket_del, b_junk]


def gz_damage(rng, gz):
    kind = rng.choice(["truncate", "flip", "trailing garbage", "second member", "header flip"])
    if kind == "truncate":
        return gz[: rng.randrange(len(gz))], "gzip truncated"
    if kind == "flip":
        i = rng.randrange(10, len(gz))
        return gz[:i] + bytes([gz[i] ^ rng.randint(1, 255)]) + gz[i + 1 :], "gzip stream flip"
    if kind == "trailing garbage":
        return gz + os.urandom(rng.randint(1, 64)), "gzip trailing garbage"
    if kind == "second member":
        return gz + gzip.compress(b'{"traceEvents": []}', compresslevel=1), "gzip second member"
    i = rng.randrange(10)
    return gz[:i] + bytes([gz[i] ^ rng.randint(1, 255)]) + gz[i + 1 :], "gzip header flip"


def mutate_json(rng, text: bytes, path: str) -> list[str]:
    """Write a mutated copy of a JSON trace to ``path``; return what was done."""
    done = []
    if rng.random() < 0.65:
        doc = json.loads(text)
        for m in rng.sample(STRUCTURAL, rng.randint(1, 3)):
            done.append(m(rng, doc))
        data = dump(doc)
    else:
        data = text
    if not done or rng.random() < 0.35:
        data, what = rng.choice(BYTES)(rng, data)
        done.append(what)
    if path.endswith(".gz"):
        gz = gzip.compress(data, compresslevel=1)
        if rng.random() < 0.15:
            gz, what = gz_damage(rng, gz)
            done.append(what)
        data = gz
    with open(path, "wb") as f:
        f.write(data)
    return done


# -- SQLite mutations ------------------------------------------------------------------------
SQL_VALUES = [
    "NULL",
    "'abc'",
    "''",
    "1e300",
    "-1e300",
    "-5",
    "9223372036854775807",
    "-9223372036854775808",
    "X'00ff'",
    "1.5",
    "0",
]
SESSION_START_VALUES = SQL_VALUES
GPU_TABLES = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"]
GPU_COLUMNS = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "contextId"]


def _sql_mutation(rng) -> tuple[str, str]:
    kind = rng.choice(["update", "update", "update", "negative", "strings", "drop", "rename", "session"])
    table = rng.choice(GPU_TABLES)
    if kind == "update":
        col = rng.choice(
            GPU_COLUMNS + (["demangledName", "shortName"] if table.endswith("KERNEL") else ["bytes", "copyKind"])
        )
        v = rng.choice(SQL_VALUES)
        return (f'UPDATE {table} SET "{col}" = {v} WHERE rowid % {rng.randint(1, 7)} = 0', f"{table}.{col} = {v}")
    if kind == "negative":
        return f'UPDATE {table} SET "end" = start - 1000 WHERE rowid % 3 = 0', "negative durations"
    if kind == "strings":
        return (f"DELETE FROM StringIds WHERE id % {rng.randint(1, 5)} = 0", "StringIds rows deleted")
    if kind == "drop":
        t = rng.choice(
            GPU_TABLES
            + [
                "StringIds",
                "TARGET_INFO_SESSION_START_TIME",
                "CUPTI_ACTIVITY_KIND_RUNTIME",
                "TARGET_INFO_GPU",
                "ThreadNames",
                "PROCESSES",
            ]
        )
        return f"DROP TABLE IF EXISTS {t}", f"{t} dropped"
    if kind == "rename":
        col = rng.choice(["start", "end", "deviceId", "streamId", "correlationId"])
        return f'ALTER TABLE {table} RENAME COLUMN "{col}" TO "{col}_x"', f"{table}.{col} renamed"
    v = rng.choice(SESSION_START_VALUES)
    return f"UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = {v}", f"session start = {v}"


def mutate_sqlite(rng, base: bytes, path: str) -> list[str]:
    with open(path, "wb") as f:
        f.write(base)
    done = []
    if rng.random() < 0.7:
        con = sqlite3.connect(path)
        try:
            for _ in range(rng.randint(1, 3)):
                sql, what = _sql_mutation(rng)
                try:
                    con.execute(sql)
                    done.append(what)
                except sqlite3.Error:  # a column dropped by an earlier mutation: skip it
                    pass
            con.commit()
        finally:
            con.close()
    if not done or rng.random() < 0.3:
        with open(path, "rb") as f:
            data = f.read()
        data, what = rng.choice([b_truncate, b_flip])(rng, data)
        with open(path, "wb") as f:
            f.write(data)
        done.append(what)
    return done


# -- the test ----------------------------------------------------------------------------------
#: Per-partition tables the reduce rewrites from every rank's rows (comm kernels matched into
#: instances across ranks): a rank's rows there depend on its peers, mutated ones included.
CROSS_RANK = {"collectives"}


def per_rank_tables(res: dtrace.Results, ranks: set[int]) -> dict[str, pd.DataFrame]:
    """The per-partition tables, rows of ``ranks`` only, in a fixed row order."""
    out = {}
    for a in ANALYSES:
        if a.table in CROSS_RANK:
            continue
        df = res.table(a.table)
        df = df[df["rank"].isin(ranks)]
        out[a.table] = df.sort_values(list(df.columns), kind="stable").reset_index(drop=True)
    return out


@pytest.mark.timeout(300)
def test_mutated_traces_never_break_the_run(tmp_path):
    rng = random.Random(SEED)
    good = {}
    for rel, rank in GOOD.items():
        p = tmp_path / f"good-{rank}-{os.path.basename(rel)}"
        shutil.copy(shared(*rel.split("/")), p)
        good[str(p)] = rank
    clean = per_rank_tables(
        dtrace.analyze(list(good), cache=str(tmp_path / "clean"), scheduler="sync", ranks=good), set(good.values())
    )
    assert all(len(clean[t]) for t in ("breakdown", "kernels", "streams"))

    bases = {}
    for rel in JSON_BASES:
        with gzip.open(shared(*rel.split("/"))) as f:
            bases[rel] = f.read()
    with open(shared(*NSYS_BASE.split("/")), "rb") as f:
        nsys = f.read()

    n_inputs = n_failed = 0
    for b in range(BATCHES):
        d = tmp_path / f"batch{b}"
        d.mkdir()
        made: dict[str, list[str]] = {}
        ranks = dict(good)
        for i in range(PER_BATCH):
            rel = rng.choice(JSON_BASES + [NSYS_BASE])
            if rel == NSYS_BASE:
                path = str(d / f"m{i}.sqlite")
                done = mutate_sqlite(rng, nsys, path)
            else:
                path = str(d / f"m{i}.json{'.gz' if rng.random() < 0.8 else ''}")
                done = mutate_json(rng, bases[rel], path)
            made[path] = [rel, *done]
            ranks[path] = FIRST_MUTATED_RANK + RANK_STEP * i
        where = f"seed {SEED}, batch {b}: {json.dumps(made, indent=1)}"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                res = dtrace.analyze([*good, *made], cache=str(d / "cache"), scheduler="sync", ranks=ranks)
            except Exception as exc:  # noqa: BLE001 - the test's point: report which inputs did it
                pytest.fail(f"{type(exc).__name__}: {exc} escaped dtrace.analyze; {where}")
        assert not caught, f"warnings {[str(w.message) for w in caught]}; {where}"
        inputs = {i["path"]: i for i in res.manifest["inputs"]}
        for path, item in inputs.items():
            err = item["error"]
            if err is None:
                continue
            assert path in made, f"good input failed: {err}"
            assert "internal error" not in err and "Traceback" not in err, f"{err}; mutations {made[path]}"
            assert "\n" not in err and err.startswith(path), err
            n_failed += 1
        n_inputs += len(made)
        got = per_rank_tables(res, set(good.values()))
        for name, want in clean.items():
            pd.testing.assert_frame_equal(got[name], want, check_exact=True, obj=f"{name} ({where})")
        shutil.rmtree(d)
    # the mutations are neither all harmless nor all fatal
    assert n_inputs == BATCHES * PER_BATCH
    assert 0.1 * n_inputs < n_failed < 0.9 * n_inputs, (n_failed, n_inputs)


@pytest.mark.parametrize("value", ["'abc'", "''", "X'00ff'"])
def test_nsys_session_start_that_is_not_a_number(tmp_path, value):
    path = str(tmp_path / "report.sqlite")
    shutil.copy(shared(*NSYS_BASE.split("/")), path)
    con = sqlite3.connect(path)
    try:
        con.execute(f"UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = {value}")
        con.commit()
    finally:
        con.close()
    (err,) = dtrace.analyze(path, scheduler="sync").errors
    assert err.startswith(path) and "internal error" not in err


# -- what the fuzzing found, pinned ------------------------------------------------------------
def _content(*rel: str) -> bytes:
    with gzip.open(shared(*rel)) as f:
        return f.read()


def _one_error(path) -> str:
    res = dtrace.analyze(str(path), scheduler="sync")
    (err,) = res.errors
    assert err.startswith(f"{path}: ") and "\n" not in err and "internal error" not in err, err
    return err


def test_invalid_utf8_in_a_small_trace(tmp_path):
    raw = _content("kineto", "single", "mi250_rocm62.json.gz")
    i = raw.index(b'"name": "') + len(b'"name": "')
    for name, data in (
        ("a.json", raw[:i] + b"\xff" + raw[i:]),
        ("b.json.gz", gzip.compress(raw[:i] + b"\xff" + raw[i:])),
    ):
        (tmp_path / name).write_bytes(data)
        assert "not valid UTF-8 text (byte 0xff" in _one_error(tmp_path / name)


def test_invalid_deflate_block(tmp_path):
    gz = bytearray(gzip.compress(_content("kineto", "single", "mi250_rocm62.json.gz")))
    gz[10] |= 0b110  # the first block's type: 11, which deflate reserves (RFC 1951 3.2.3)
    (tmp_path / "a.json.gz").write_bytes(bytes(gz))
    assert "damaged compressed data" in _one_error(tmp_path / "a.json.gz")


def _nsys_copy(tmp_path, *sql):
    path = tmp_path / "report.sqlite"
    shutil.copy(shared(*NSYS_BASE.split("/")), path)
    con = sqlite3.connect(path)
    try:
        for s in sql:
            con.execute(s)
        con.commit()
    finally:
        con.close()
    return path


def test_nsys_strings_that_are_not_utf8(tmp_path):
    path = _nsys_copy(tmp_path, "UPDATE StringIds SET value = CAST(X'ff41' AS TEXT)")
    assert "the SQLite database cannot be read: Could not decode to UTF-8" in _one_error(path)


def test_nsys_device_id_beyond_int32(tmp_path):
    path = _nsys_copy(tmp_path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = -9223372036854775808")
    assert "device id -9223372036854775808 is out of range" in _one_error(path)


def test_a_collective_kernel_twice_in_a_trace(tmp_path):
    """The same NCCL kernel event twice (same stream and start): the what-if replay matched a
    node to a non-unique index and the whole run raised; now every table is made."""
    doc = json.loads(_content("kineto", "hta-2rank", "sampled_rank-1.json.gz"))
    nccl = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower())
    doc["traceEvents"].append(dict(nccl))
    path = tmp_path / "rank-1.json"
    path.write_text(json.dumps(doc))
    res = dtrace.analyze(str(path), scheduler="sync")
    assert res.ok and len(res.whatif) and len(res.collectives)


# -- the results folder itself (issue 19) --------------------------------------------------------
#: JSON values of the wrong type (or range) written into manifest and cache-record fields.
ODD_JSON = [None, "x", "", [], {}, -1, 0, 1.5, True, 2**70, -(2**70), [[1]], {"a": 1}, "../x", float("nan")]
N_OUT_CASES = int(os.environ.get("DTRACE_FUZZ_OUT_CASES", "40"))


@pytest.fixture(scope="module")
def small_out(tmp_path_factory):
    from dtrace.generate.synth import generate

    d = tmp_path_factory.mktemp("fuzz-out")
    generate(str(d / "job"), ranks=2, steps=2, seed=1, kernels_per_step=8)
    dtrace.analyze(str(d / "job"), str(d / "out"), scheduler="sync")
    return d


def _paths(doc, prefix=()):
    """Every (nested) field of a JSON document: dict keys, and the first item of each list."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list) and doc:
        yield prefix + (0,)
        yield from _paths(doc[0], prefix + (0,))


def _set(doc, path, value):
    for k in path[:-1]:
        doc = doc[k]
    doc[path[-1]] = value


def _edit_json(path, rng, fingerprint=False) -> str:
    with open(path) as f:
        doc = json.load(f)
    root = doc["record"] if fingerprint else doc
    field = rng.choice(list(_paths(root)))
    value = rng.choice(ODD_JSON)
    _set(root, field, value)
    if fingerprint and rng.random() < 0.8:  # a record that passes its fingerprint check: only the field checks stand
        from dtrace.ingest.cache import _record_fingerprint

        doc["record_fingerprint"] = _record_fingerprint(doc["record"])
    with open(path, "w") as f:
        json.dump(doc, f)
    return f"{os.path.basename(path)} {field} = {value!r}"


def _plant(path, rng, outside) -> str:
    """Put something that is not the regular file there."""
    kind = rng.choice(["fifo", "link outside", "link loop", "dangling link", "folder"])
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link outside":
        os.symlink(outside, path)
    elif kind == "link loop":
        os.symlink(path, path)
    elif kind == "dangling link":
        os.symlink(path + ".gone", path)
    else:
        os.mkdir(path)
    return f"{kind} at {path}"


def _mutate_out(out, rng, outside) -> str:
    kind = rng.choice(["manifest", "manifest", "cache record", "plant"])
    if kind == "manifest":
        return _edit_json(os.path.join(out, "manifest.json"), rng)
    files = sorted(
        os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs if f not in ("manifest.json",) or kind == "plant"
    )
    if kind == "cache record":
        return _edit_json(rng.choice([f for f in files if f.endswith("source.json")]), rng, fingerprint=True)
    return _plant(rng.choice(files), rng, outside)


def _commands(out, job, tmp):
    return [
        ["show", out],
        ["show", out, "breakdown"],
        ["kernels", out],
        ["gaps", out],
        ["ops", out],
        ["whatif", out],
        ["tree", out, "--op", "ProfilerStep#1"],
        ["timeline", out, "-o", os.path.join(tmp, "t.json")],
        ["report", out, "-o", os.path.join(tmp, "r.html")],
        ["diff", out, out],
        ["analyze", job, "-o", out, "--sync", "--no-progress"],
        ["events", out],
        ["perf-report", out, "--csv-dir", os.path.join(tmp, "perf_report")],
    ]


def _run_cli(argv, capsys, where) -> None:
    """One command: exit code 0, 1 or 2 (README, "Bad input"), a usage error in one line, never
    an exception."""
    try:
        if argv[0] == "events":
            try:
                dtrace.events(argv[1]).compute()
            except dtrace.errors.DtraceError as exc:
                assert "\n" not in str(exc), (str(exc), where)
            return
        code = main(argv)
    except BaseException as exc:  # noqa: BLE001 - the test's point: report what escaped
        pytest.fail(f"{type(exc).__name__}: {exc} escaped {argv}; {where}")
    err = capsys.readouterr().err
    assert code in (0, 1, 2), (code, argv, where, err)
    assert "Traceback" not in err, (argv, where, err)
    if code == 2:
        assert err.count("\n") == 1, (argv, where, err)


@pytest.mark.timeout(180)
def test_a_hand_edited_or_planted_results_folder_never_breaks_a_command(small_out, tmp_path, capsys):
    """Wrong JSON types in manifest and cache-record fields (with a matching fingerprint, so the
    field checks are what stands), FIFOs, links (outside OUT, loops, dangling) and folders
    planted in place of OUT's files: every command ends in one line or works, none hangs."""
    rng = random.Random(SEED)
    outside = tmp_path / "outside.txt"
    outside.write_text("not dtrace's")
    for i in range(N_OUT_CASES):
        out = str(tmp_path / f"out{i}")
        shutil.copytree(small_out / "out", out, symlinks=True)
        where = f"seed {SEED}, case {i}: {_mutate_out(out, rng, str(outside))}"
        cmds = _commands(out, str(small_out / "job"), str(tmp_path))
        for argv in rng.sample(cmds, 4):
            _run_cli(argv, capsys, where)
        shutil.rmtree(out, ignore_errors=True)


# -- every numeric option of every command (issue 19) ----------------------------------------------
NUMBERS = ["0", "-1", "inf", "nan", "1e309", "-1e309", "99999999999999999999", "1e9", "0.5"]
#: Options that take numbers inside text, with values to try.
TEXT_NUMBERS = {
    ("analyze", "--max-input-size"): ["0", "-1", "inf", "1e309", "9" * 400, "1e9TB"],
    ("timeline", "--ranks"): ["0-999999999", "-1", "0-99999999999999999999", "5-1", "inf"],
    ("timeline", "--window"): ["0:1e400", "inf:nan", "-1:0", "1" + "0" * 400 + ":2", "2:1"],
    ("whatif", "--class"): ["gemm=1e-308", "gemm=inf", "gemm=nan", "gemm=0", "gemm=-1"],
    ("compare", "--wall-time"): ["1=inf", "1=nan", "1=1e309", "1=0", "1=-5"],
    ("synth", "--speedup"): ["gemm=1e-308", "gemm=inf", "gemm=0"],
    ("synth", "--fault"): ["compute:rank=1:slow=inf", "compute:rank=1e309:slow=1", "compute:rank=1:slow=1e300"],
    ("perf-report", "--rank"): ["-1", "1e309", "0:inf", "0:-99999999999", "9" * 400, "0:1:2", ":"],
}


def _numeric_options():
    import argparse

    from dtrace.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command, parser in sub.choices.items():
        for action in parser._actions:
            kind = getattr(action.type, "__name__", None) if action.type else None
            if action.option_strings and kind in ("whole number", "number", "time in µs"):
                yield command, action.option_strings[0], NUMBERS
    for (command, flag), values in TEXT_NUMBERS.items():
        yield command, flag, values


@pytest.mark.timeout(240)
def test_numeric_options_never_break_a_command(small_out, tmp_path, capsys):
    """0, negative, inf, nan, 1e309, beyond int64 and huge ranges in every numeric option of every
    command: a one-line usage error (exit 2) or a result, never a traceback or a hang."""
    out, job = str(small_out / "out"), str(small_out / "job")
    trace = os.path.join(job, "rank-0.json.gz")
    base = {
        "analyze": [trace, "-o", str(tmp_path / "a"), "--sync", "--no-progress"],
        "show": [out],
        "tree": [out, "--op", "ProfilerStep#1"],
        "ops": [out],
        "sequences": [out],
        "kernels": [out],
        "gaps": [out],
        "report": [out, "-o", str(tmp_path / "r.html")],
        "compare": [out, "-o", str(tmp_path / "c.html")],
        "diff": [out, out],
        "nsys-stats": [str(tmp_path / "none_cuda_gpu_kern_sum.csv"), "-o", str(tmp_path / "n")],
        "synth": [str(tmp_path / "s"), "--ranks", "2", "--steps", "1", "--kernels-per-step", "4"],
        "timeline": [out, "-o", str(tmp_path / "t.json")],
        "whatif": [out],
        "launches": [out],
        "memory": [out],
        "bounds": [out],
        "perf": [out],
        "perf-report": [out, "--csv-dir", str(tmp_path / "pr")],
    }
    seen = set()
    for command, flag, values in _numeric_options():
        seen.add(command)
        for value in values:
            _run_cli([command, *base[command], f"{flag}={value}"], capsys, f"{command} {flag}={value}")
    assert seen >= {
        "analyze",
        "show",
        "tree",
        "ops",
        "kernels",
        "gaps",
        "report",
        "diff",
        "timeline",
        "whatif",
        "synth",
        "launches",
        "bounds",
    }
