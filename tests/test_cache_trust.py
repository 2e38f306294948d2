"""The ingest cache and the result store are shared and may be written by others (issue 13):
nothing in them is ever unpickled, no name read from them leads outside its entry, no link in
them is followed, and anything damaged, edited or stale is parsed or computed again (with a
note), never served and never an error. Every input is built here; every expected table comes
from a clean run with a cache of its own."""

from __future__ import annotations

import glob
import json
import os
import pickle
import shutil
import stat
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash

import dtrace
import dtrace.ingest.cache
from dtrace.cli.main import main
from dtrace.generate.synth import generate

N_RANKS = 3


# -- helpers ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """Three generated ranks and the tables of a clean run (own cache, nothing reused)."""
    d = tmp_path_factory.mktemp("job")
    generate(d / "traces", ranks=N_RANKS, steps=1, seed=5)
    files = sorted(glob.glob(str(d / "traces" / "rank-*.json.gz")))
    assert len(files) == N_RANKS
    clean = dtrace.analyze(files, cache=str(d / "clean-cache"), scheduler="sync")
    assert clean.ok
    return files, tables_of(clean)


@pytest.fixture(scope="module")
def template(job, tmp_path_factory):
    """The cache (ingest entries and stored results) of a first run of ``job``: a test that
    damages a cache starts from a copy of it instead of running dtrace once more."""
    files, _ = job
    cache = tmp_path_factory.mktemp("template") / "cache"
    dtrace.analyze(files, cache=str(cache), scheduler="sync")
    return cache


def warm(template, tmp_path) -> str:
    """A copy of the ``template`` cache in this test's folder (what a first run would leave)."""
    shutil.copytree(template, tmp_path / "cache", symlinks=True)
    return str(tmp_path / "cache")


def tables_of(res: dtrace.Results) -> dict[str, pd.DataFrame]:
    return {n: res.table(n) for n in res.table_names}


def assert_tables(res: dtrace.Results, want: dict[str, pd.DataFrame]) -> None:
    assert res.errors == []
    assert sorted(res.table_names) == sorted(want)
    for name, df in want.items():
        pd.testing.assert_frame_equal(res.table(name), df, check_exact=True, obj=name)


def entries(cache: str) -> dict[str, str]:
    """Input path -> its cache entry folder."""
    found = {}
    for src in glob.glob(os.path.join(cache, "*", "source.json")):
        with open(src, encoding="utf-8") as f:
            found[json.load(f)["record"]["path"]] = os.path.dirname(src)
    return found


def store_entries(cache: str) -> list[str]:
    return sorted(os.path.dirname(p) for p in glob.glob(os.path.join(cache, "results", "*", "entry.json")))


def edit_json(path: str, edit) -> None:
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    edit(doc)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)


def edit_source(entry: str, edit, forge: bool = True) -> None:
    """Edit the ``source.json`` of a cache entry; ``forge``: as someone who edits it on purpose
    would, with its record's fingerprint made to match (its definition: xxh3-128 of the record
    as JSON with sorted keys), so that only the checks of its content can refuse it."""

    def apply(doc):
        edit(doc)
        if forge and isinstance(doc, dict) and "record_fingerprint" in doc:
            text = json.dumps(doc.get("record"), sort_keys=True)
            doc["record_fingerprint"] = xxhash.xxh3_128_hexdigest(text.encode())

    edit_json(os.path.join(entry, "source.json"), apply)


def forge_part_checksum(entry: str, name: str) -> None:
    """Make ``source.json`` list the current bytes of ``name``: what someone who edits the
    cache on purpose does (fingerprints tell damage, not intent)."""
    with open(os.path.join(entry, name), "rb") as f:
        fp = xxhash.xxh3_128_hexdigest(f.read())

    def edit(doc):
        for p in doc["record"]["parts"]:
            if name in p["checksums"]:
                p["checksums"][name] = fp

    edit_source(entry, edit)


def forge_store_fingerprint(entry: str, table: str, rows: int | None = None) -> None:
    with open(os.path.join(entry, f"{table}.arrow"), "rb") as f:
        fp = xxhash.xxh3_128_hexdigest(f.read())

    def edit(doc):
        doc["tables"][table]["fingerprint"] = fp
        if rows is not None:
            doc["tables"][table]["rows"] = rows

    edit_json(os.path.join(entry, "entry.json"), edit)


def snapshot(root) -> dict[str, tuple]:
    """Every file, folder and link under ``root`` (never followed): kind, bytes or target, mode, mtime."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                what = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                what = ("dir", None)
            else:
                with open(p, "rb") as f:
                    what = ("file", f.read())
            out[os.path.relpath(p, root)] = (*what, st.st_mode, st.st_mtime_ns)
    return out


class Payload:
    """Unpickling this creates the folder ``marker``: proof that a pickle was loaded."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def all_notes(res: dtrace.Results) -> list[str]:
    return list(res.manifest["notes"]) + [n for i in res.manifest["inputs"] for n in i["notes"]]


# -- no code from the cache ------------------------------------------------------------------
def test_pickles_planted_in_the_cache_and_the_store_are_never_loaded(job, template, tmp_path):
    """Pickles where the old layout kept them (``results-*.pkl`` beside the events), and pickles
    renamed to every Parquet and Arrow file with their fingerprints forged to match: the run
    unpickles none of them, parses and computes again with a note each, and its tables are
    those of a clean run."""
    files, want = job
    cache = warm(template, tmp_path)
    marker = str(tmp_path / "pwned")
    evil = pickle.dumps(Payload(marker))

    def plant(entry, planted, suffix, forge):
        Path(entry, planted).write_bytes(evil)
        for name in os.listdir(entry):
            if name.endswith(suffix):
                Path(entry, name).write_bytes(evil)
                forge(entry, name)

    ent = entries(cache)
    assert sorted(ent) == files
    for entry in ent.values():
        plant(entry, "results-0123456789abcdef.pkl", ".parquet", forge_part_checksum)
    stored = store_entries(cache)
    assert stored
    for entry in stored:
        plant(entry, "tables.pkl", ".arrow", lambda e, n: forge_store_fingerprint(e, n[: -len(".arrow")]))

    res = dtrace.analyze(files, cache=cache, scheduler="sync")
    assert not os.path.exists(marker)
    assert_tables(res, want)
    for item in res.manifest["inputs"]:
        assert not item["cached"] and not item["results_reused"]
        (note,) = item["notes"]
        assert "parsing again" in note and "\n" not in note
    # the inputs were parsed again, so their events (and with them the partitions' keys) are
    # the same and the forged stored entries were looked at: each is recomputed with a note
    # (the new ingest wrote new Parquet; the store entries are keyed by the inputs' content)
    assert any("recomputing" in n for n in res.manifest["notes"])
    # a second run is served by the rebuilt cache and store, still without unpickling
    again = dtrace.analyze(files, cache=cache, scheduler="sync")
    assert not os.path.exists(marker)
    assert_tables(again, want)
    assert [(i["cached"], i["results_reused"]) for i in again.manifest["inputs"]] == [(True, True)] * N_RANKS, (
        again.manifest["notes"]
    )


# -- no path from the cache leads outside its entry -----------------------------------------
@pytest.mark.parametrize("where", ["parent", "absolute", "other-entry"])
def test_part_names_in_source_json_never_lead_outside_the_entry(job, template, tmp_path, where):
    """``source.json`` of rank 0 edited to name another rank's events (outside the cache, by an
    absolute path, or in another entry), with its checksum forged to match: dtrace neither reads
    nor writes there; it parses rank 0 again (a note) and its tables are those of a clean run."""
    files, want = job
    cache = tmp_path / "cache"
    warm(template, tmp_path)
    ent = entries(str(cache))
    victim, other = ent[files[0]], ent[files[1]]
    (other_events,) = [n for n in os.listdir(other) if n.startswith("events-")]
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(os.path.join(other, other_events), outside / other_events)
    target = {
        "parent": os.path.join("..", "..", "outside", other_events),
        "absolute": str(outside / other_events),
        "other-entry": os.path.join("..", os.path.basename(other), other_events),
    }[where]
    with open(outside / other_events, "rb") as f:
        fp = xxhash.xxh3_128_hexdigest(f.read())

    with open(os.path.join(other, "source.json"), encoding="utf-8") as f:
        other_events_n = json.load(f)["record"]["parts"][0]["n_events"]

    def edit(doc):
        (part,) = doc["record"]["parts"]
        old = part["events"]
        part["events"] = target
        part["n_events"] = other_events_n  # forged too: only the name's check can refuse it
        part["checksums"] = {(target if k == old else k): (fp if k == old else v) for k, v in part["checksums"].items()}

    edit_source(victim, edit)
    before_outside, before_other = snapshot(outside), snapshot(other)

    res = dtrace.analyze(files, cache=str(cache), scheduler="sync", reuse_results=False)
    assert_tables(res, want)
    inputs = {i["path"]: i for i in res.manifest["inputs"]}
    assert not inputs[files[0]]["cached"]
    (note,) = inputs[files[0]]["notes"]
    assert "invalid part file name" in note and "parsing again" in note
    assert inputs[files[1]]["cached"] and inputs[files[1]]["notes"] == []
    assert snapshot(outside) == before_outside and snapshot(other) == before_other
    # the entry was written anew, in its own folder
    assert sorted(os.listdir(victim)) == sorted(
        ["source.json", *(n.replace("p0-d1", "p0-d0") for n in os.listdir(other) if n != "source.json")]
    )


def test_an_entry_claiming_another_input_is_not_used(job, template, tmp_path):
    """An entry copied over another one (its ``source.json`` names the other input): not used."""
    files, want = job
    cache = tmp_path / "cache"
    warm(template, tmp_path)
    ent = entries(str(cache))
    shutil.rmtree(ent[files[0]])
    shutil.copytree(ent[files[1]], ent[files[0]])
    res = dtrace.analyze(files, cache=str(cache), scheduler="sync", reuse_results=False)
    assert_tables(res, want)
    (note,) = {i["path"]: i for i in res.manifest["inputs"]}[files[0]]["notes"]
    assert "belongs to another input" in note


# -- links in the cache are never followed ----------------------------------------------------
def test_cache_folder_that_is_a_link_is_a_one_line_error(job, tmp_path, capsys):
    files, _ = job
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("precious")
    os.symlink(elsewhere, out / "cache")
    before = snapshot(elsewhere)
    assert main(["analyze", *files, "-o", str(out), "--sync"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(out / "cache") in err and "symbolic link" in err
    with pytest.raises(dtrace.DtraceError, match="symbolic link") as ei:
        dtrace.analyze(files, str(out), scheduler="sync")
    assert "\n" not in str(ei.value)
    with pytest.raises(dtrace.DtraceError, match="symbolic link"):
        dtrace.analyze(files, cache=str(out / "cache"), scheduler="sync")
    assert snapshot(elsewhere) == before
    assert sorted(os.listdir(out)) == ["cache"]  # nothing written


@pytest.mark.parametrize("what", ["entry", "events", "source", "store", "store-entry"])
def test_links_in_the_cache_are_not_followed(job, template, tmp_path, what):
    """A cache entry, a file in it, the result store or a stored entry replaced by a link to a
    copy of itself outside the cache (so that following the link would "work"): the target is
    untouched byte for byte, the run parses or computes again, and its tables are a clean run's."""
    files, want = job
    cache = tmp_path / "cache"
    warm(template, tmp_path)
    entry = entries(str(cache))[files[0]]
    outside = tmp_path / "outside"
    (events,) = [n for n in os.listdir(entry) if n.startswith("events-")]
    if what == "entry":  # and the entry there is stale: following the link would write there
        shutil.move(entry, outside)
        os.symlink(outside, entry)
        _truncate(os.path.join(outside, events))
    elif what in ("events", "source"):
        name = events if what == "events" else "source.json"
        outside.mkdir()
        shutil.move(os.path.join(entry, name), outside / name)
        os.symlink(outside / name, os.path.join(entry, name))
    elif what == "store":
        shutil.move(cache / "results", outside)
        os.symlink(outside, cache / "results")
    else:
        stored = store_entries(str(cache))[0]
        shutil.move(stored, outside)
        os.symlink(outside, stored)
    (outside.parent / "sentinel").mkdir(exist_ok=True)
    before = snapshot(outside)
    assert before

    res = dtrace.analyze(files, cache=str(cache), scheduler="sync")
    assert_tables(res, want)
    assert snapshot(outside) == before
    if what in ("entry", "events", "source"):
        (note,) = {i["path"]: i for i in res.manifest["inputs"]}[files[0]]["notes"]
        assert note.endswith("parsing again")
        assert ("symbolic link" if what == "entry" else "unreadable") in note, note
        assert not os.path.islink(entry) and os.path.isdir(entry)
    # the cache is whole again: a second run reuses every input and partition
    again = dtrace.analyze(files, cache=str(cache), scheduler="sync")
    assert_tables(again, want)
    assert all(i["cached"] and i["results_reused"] for i in again.manifest["inputs"]), again.manifest["notes"]
    assert snapshot(outside) == before


@pytest.mark.parametrize("what", ["file", "fifo", "socket"])
def test_an_entry_replaced_by_a_file_or_fifo_is_repaired(job, template, tmp_path, what):
    """Issue 19, item 10: the input is parsed again and its entry is a folder again (the node is
    removed, never opened: a FIFO would block whoever opens it); the run after reuses it."""
    import socket

    files, want = job
    cache = tmp_path / "cache"
    warm(template, tmp_path)
    entry = entries(str(cache))[files[0]]
    shutil.rmtree(entry)
    if what == "file":
        Path(entry).write_bytes(b"not a cache entry")
    elif what == "fifo":
        os.mkfifo(entry)
    else:
        sock = socket.socket(socket.AF_UNIX)
        try:
            sock.bind(entry)
        finally:
            sock.close()
    for _ in range(2):  # repaired once, not failing on every run
        res = dtrace.analyze(files, cache=str(cache), scheduler="sync")
        assert_tables(res, want)
        assert stat.S_ISDIR(os.lstat(entry).st_mode)
    assert all(i["cached"] and i["results_reused"] for i in res.manifest["inputs"])


# -- damaged cache entries: parsed again, never an error ----------------------------------------
def _truncate(p):
    data = Path(p).read_bytes()
    Path(p).write_bytes(data[: len(data) // 2])


def _empty(p):
    Path(p).write_bytes(b"")


def _flip(p):
    data = bytearray(Path(p).read_bytes())
    data[len(data) // 2] ^= 0x01
    Path(p).write_bytes(bytes(data))


def _source(edit, forge=True):
    def apply(entry):
        edit_source(entry, edit, forge)

    return apply


def _file(prefix, damage):
    def apply(entry):
        (name,) = [n for n in os.listdir(entry) if n.startswith(prefix)]
        damage(os.path.join(entry, name))

    return apply


def _parent(doc, path):
    for k in path[:-1]:
        doc = doc[k]
    return doc


def _set(*path_and_value):
    *path, value = path_and_value

    def edit(doc):
        _parent(doc, path)[path[-1]] = value

    return edit


def _delete(*path):
    def edit(doc):
        del _parent(doc, path)[path[-1]]

    return edit


def _source_folder(entry):
    os.unlink(os.path.join(entry, "source.json"))
    os.mkdir(os.path.join(entry, "source.json"))


def _source_bytes(data):
    def apply(entry):
        with open(os.path.join(entry, "source.json"), "wb") as f:
            f.write(data)

    return apply


DAMAGE = {
    "events truncated": _file("events-", _truncate),
    "events empty": _file("events-", _empty),
    "events bit flip": _file("events-", _flip),
    "events missing": _file("events-", os.unlink),
    "collectives truncated": _file("collectives-", _truncate),
    "collectives bit flip": _file("collectives-", _flip),
    "memcpy empty": _file("memcpy-", _empty),
    "memcpy bit flip": _file("memcpy-", _flip),
    "source truncated": _file("source.json", _truncate),
    "source empty": _source_bytes(b""),
    "source not an object": _source_bytes(b"[1, 2]"),
    "source nested deeply": _source_bytes(b"[" * 100_000),
    "source a folder": _source_folder,
    "size is text": _source(_set("record", "size", "7760")),
    "parts an object": _source(_set("record", "parts", {})),
    "part a list": _source(_set("record", "parts", [[]])),
    "rank hint a bool": _source(_set("record", "rank_hint", True)),
    "rank per device an int": _source(_set("record", "rank_per_device", 1)),
    "meta a list": _source(_set("record", "meta", [])),
    "device text": _source(lambda d: d["record"]["parts"][0].update(device="0")),
    "n_events a float": _source(lambda d: d["record"]["parts"][0].update(n_events=1.5)),
    "checksums missing": _source(lambda d: d["record"]["parts"][0].pop("checksums")),
    "fingerprint missing": _source(_delete("record", "fingerprint")),
    "record missing": _source(_delete("record")),
    "record null": _source(_set("record", None)),
    "version text": _source(_set("cache_version", "4")),
    "record fingerprint missing": _source(_delete("record_fingerprint")),
    "event count changed, forged": _source(lambda d: d["record"]["parts"][0].update(n_events=7)),
    # a changed digit, not forged: valid JSON of the right types, still seen
    "rank hint changed": _source(lambda d: d["record"].update(rank_hint=d["record"]["rank_hint"] + 2), forge=False),
    "event count changed": _source(lambda d: d["record"]["parts"][0].update(n_events=7), forge=False),
    "meta changed": _source(lambda d: d["record"]["meta"].update(base_time_ns=1), forge=False),
}


def unpack(m: pytest.MonkeyPatch) -> None:
    """Every input in a cache entry of its own, as a run of fewer inputs per ingest task than a
    pack takes (``PACK_MIN_INPUTS``) leaves it: the entries' own damage is what is tested here."""
    m.setattr(dtrace.ingest.cache, "PACK_MIN_INPUTS", 1 << 30)


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """A generated rank for each kind of :data:`DAMAGE` and one left alone (the first): the
    inputs, the tables of a clean run, and the cache of a first run that a test copies."""
    d = tmp_path_factory.mktemp("wide")
    generate(d / "traces", ranks=len(DAMAGE) + 1, steps=1, seed=5, kernels_per_step=12)
    files = sorted(glob.glob(str(d / "traces" / "rank-*.json.gz")), key=lambda f: int(f.split("-")[-1].split(".")[0]))
    with pytest.MonkeyPatch.context() as m:
        unpack(m)
        clean = dtrace.analyze(files, cache=str(d / "clean-cache"), scheduler="sync")
        assert clean.ok
        dtrace.analyze(files, cache=str(d / "template"), scheduler="sync")
    return files, tables_of(clean), d / "template"


def test_damaged_cache_entries_are_parsed_again_with_a_note(wide, tmp_path, monkeypatch):
    """Every kind of damage at once, each to the cache entry of its own rank: each damaged input
    is parsed again with one note, the undamaged one is read from the cache, the tables are the
    clean run's, and the next run reads every input from the entries written anew."""
    files, want, template = wide
    unpack(monkeypatch)
    cache = warm(template, tmp_path)
    found = entries(cache)
    damaged = dict(zip(files[1:], DAMAGE))  # input -> the kind of damage done to its entry
    for path, damage in damaged.items():
        DAMAGE[damage](found[path])
    # reuse_results=False: the analyses read the cached events, so damage that reached them
    # would change the tables
    res = dtrace.analyze(files, cache=cache, scheduler="sync", reuse_results=False)
    assert_tables(res, want)
    inputs = {i["path"]: i for i in res.manifest["inputs"]}
    assert inputs[files[0]]["cached"] and not inputs[files[0]]["notes"]
    wrong = {}
    for path, damage in damaged.items():
        notes, cached = inputs[path]["notes"], inputs[path]["cached"]
        ok = not cached and len(notes) == 1 and notes[0].startswith("cache entry ")
        if not (ok and notes[0].endswith("; parsing again") and "\n" not in notes[0]):
            wrong[damage] = (cached, notes)
    assert not wrong, wrong
    # the entries were written anew: the next run uses them
    again = dtrace.analyze(files, cache=cache, scheduler="sync", reuse_results=False)
    assert [i["path"] for i in again.manifest["inputs"] if not i["cached"] or i["notes"]] == []
    assert_tables(again, want)


# -- damaged stored results: recomputed, no rank dropped -------------------------------------
def _write_arrow(path, table):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    Path(path).write_bytes(sink.getvalue().to_pybytes())


def _read_arrow(path):
    return pa.ipc.open_file(pa.BufferReader(Path(path).read_bytes())).read_all()


def _retyped(entry):
    """breakdown.total_ns as text (fingerprint forged: only the dtype check can tell)."""
    p = os.path.join(entry, "breakdown.arrow")
    t = _read_arrow(p)
    i = t.schema.get_field_index("total_ns")
    _write_arrow(p, t.set_column(i, "total_ns", t.column(i).cast(pa.string())))
    forge_store_fingerprint(entry, "breakdown")


def _emptied(entry):
    """Every table emptied, row counts and fingerprints forged to match."""
    for name in os.listdir(entry):
        if name.endswith(".arrow"):
            t = _read_arrow(os.path.join(entry, name))
            _write_arrow(os.path.join(entry, name), t.slice(0, 0))
            forge_store_fingerprint(entry, name[: -len(".arrow")], rows=0)


def _other_ranks(entry):
    """The breakdown rows of another rank (forged): a partition's tables must be its own parts'."""
    p = os.path.join(entry, "breakdown.arrow")
    t = _read_arrow(p)
    ranks = t.column("rank").to_pylist()
    t = t.set_column(t.schema.get_field_index("rank"), "rank", pa.array([r + 100 for r in ranks], pa.int32()))
    _write_arrow(p, t)
    forge_store_fingerprint(entry, "breakdown")


def _edited_values(entry):
    """A valid table of the right types and rows, other numbers, fingerprint not forged."""
    p = os.path.join(entry, "breakdown.arrow")
    t = _read_arrow(p)
    i = t.schema.get_field_index("idle_ns")
    _write_arrow(p, t.set_column(i, "idle_ns", pa.array([7] * t.num_rows, pa.int64())))


def _store_file(name, damage):
    def apply(entry):
        damage(os.path.join(entry, name))

    return apply


def _entry_json(edit):
    def apply(entry):
        edit_json(os.path.join(entry, "entry.json"), edit)

    return apply


STORE_DAMAGE = {
    "values edited": _edited_values,
    "wrong column type": _retyped,
    "tables emptied": _emptied,
    "rows of other ranks": _other_ranks,
    "bit flip": _store_file("kernels.arrow", _flip),
    "truncated": _store_file("breakdown.arrow", _truncate),
    "empty file": _store_file("steps.arrow", _empty),
    "file missing": _store_file("streams.arrow", os.unlink),
    "entry.json truncated": _store_file("entry.json", _truncate),
    "entry.json a list": _store_file("entry.json", lambda p: Path(p).write_text("[]")),
    "tables a list": _entry_json(_set("tables", [])),
    "table listing text": _entry_json(lambda d: d["tables"].update(breakdown="x")),
    "table missing from listing": _entry_json(lambda d: d["tables"].pop("gaps")),
}


@pytest.mark.parametrize("damage", list(STORE_DAMAGE))
def test_damaged_stored_results_are_recomputed(job, template, tmp_path, damage):
    files, want = job
    cache = warm(template, tmp_path)
    stored = store_entries(cache)
    for entry in stored:
        STORE_DAMAGE[damage](entry)
    res = dtrace.analyze(files, cache=cache, scheduler="sync")
    assert_tables(res, want)  # every rank, the clean run's numbers
    assert sorted(res.breakdown["rank"]) == list(range(N_RANKS))
    assert not any(i["results_reused"] for i in res.manifest["inputs"])
    notes = res.manifest["notes"]
    assert len(notes) == len(stored)
    assert all(n.startswith("stored results ") and n.endswith("; recomputing") and "\n" not in n for n in notes)
    # the damaged entries were replaced: the next run reuses them
    again = dtrace.analyze(files, cache=cache, scheduler="sync")
    assert_tables(again, want)
    assert all(i["results_reused"] for i in again.manifest["inputs"]) and again.manifest["notes"] == []


# -- stale results: the content decides -------------------------------------------------------
KERNEL = (
    '{"ph": "X", "cat": "kernel", "name": "k%d", "pid": 0, "tid": 7, "ts": %d.0, "dur": %d.0, '
    '"args": {"device": 0, "stream": 7}}'
)


def _trace(durations):
    events = ", ".join(KERNEL % (i, 1000 + 100 * i, d) for i, d in enumerate(durations))
    return '{"distributedInfo": {"rank": %%d}, "traceEvents": [%s]}' % events


def test_same_size_edit_with_mtime_restored_is_analysed_again(tmp_path):
    """One digit of a duration changed, size and mtime as before: not served from the cache,
    not "up to date"; the tables are those of a clean run on the edited file."""
    t0, t1 = tmp_path / "rank-0.json", tmp_path / "rank-1.json"
    t0.write_text(_trace([10, 20, 30]) % 0)
    t1.write_text(_trace([10, 20, 30]) % 1)
    out = tmp_path / "out"
    first = dtrace.analyze([str(t0), str(t1)], str(out), scheduler="sync")
    assert first.ok
    st = t1.stat()
    t1.write_text(_trace([10, 20, 70]) % 1)
    os.utime(t1, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (t1.stat().st_size, t1.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)

    res = dtrace.analyze([str(t0), str(t1)], str(out), scheduler="sync")
    assert "up_to_date" not in res.manifest
    inputs = {i["path"]: i for i in res.manifest["inputs"]}
    assert inputs[str(t0)]["cached"] and not inputs[str(t1)]["cached"]
    assert inputs[str(t1)]["fingerprint"] == xxhash.xxh3_128_hexdigest(t1.read_bytes())
    (note,) = inputs[str(t1)]["notes"]
    assert "content changed although size and mtime did not" in note
    busy = dict(zip(res.breakdown["rank"], res.breakdown["computation_ns"]))
    assert busy == {0: 60_000, 1: 100_000}  # 10 + 20 + 30 µs and 10 + 20 + 70 µs of kernels
    clean = dtrace.analyze([str(t0), str(t1)], cache=str(tmp_path / "clean"), scheduler="sync")
    assert_tables(dtrace.load(out), tables_of(clean))
    # and now it is up to date
    assert dtrace.analyze([str(t0), str(t1)], str(out), scheduler="sync").manifest.get("up_to_date") is True


def test_results_table_edited_after_the_run_is_analysed_again(job, tmp_path):
    """A table file in OUT rewritten after the run (a valid Parquet file of that run, other
    numbers): the next run is not "up to date" and writes the true tables again."""
    files, want = job
    out = tmp_path / "out"
    dtrace.analyze(files, str(out), scheduler="sync")
    assert dtrace.analyze(files, str(out), scheduler="sync").manifest.get("up_to_date") is True
    p = out / "breakdown.parquet"
    t = pq.read_table(p)
    i = t.schema.get_field_index("idle_ns")
    t = t.set_column(i, "idle_ns", pa.array([0] * t.num_rows, pa.int64()))  # keeps the run id metadata
    pq.write_table(t, p)
    assert (dtrace.load(out).breakdown["idle_ns"] == 0).all()

    res = dtrace.analyze(files, str(out), scheduler="sync")
    assert "up_to_date" not in res.manifest
    assert_tables(dtrace.load(out), want)


def test_forged_entry_that_fails_to_decode_fails_once_then_is_parsed_again(job, template, tmp_path):
    """Pages overwritten, footer intact and checksum forged: only decoding the events can tell.
    That input fails alone with one line (the others complete), and the entry is dropped, so
    the next run parses the input again and matches a clean run."""
    files, want = job
    cache = warm(template, tmp_path)
    entry = entries(cache)[files[1]]
    (name,) = [n for n in os.listdir(entry) if n.startswith("events-")]
    p = Path(entry, name)
    data = bytearray(p.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    data[4 : len(data) - 8 - footer] = b"\xff" * (len(data) - 12 - footer)  # every page, not the footer
    p.write_bytes(bytes(data))
    forge_part_checksum(entry, name)
    assert pq.ParquetFile(p).metadata.num_rows > 0  # the footer still reads

    res = dtrace.analyze(files, cache=cache, scheduler="sync", reuse_results=False)
    (err,) = res.errors
    assert err.startswith(f"{files[1]}: its cached {name} is damaged") and "\n" not in err
    assert err.count(files[1]) == 1
    assert sorted(res.breakdown["rank"]) == [0, 2]
    again = dtrace.analyze(files, cache=cache, scheduler="sync", reuse_results=False)
    assert_tables(again, want)
