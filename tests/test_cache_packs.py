"""Packs: the small inputs of one ingest task stored together (``cache.ingest_many``).

A pack is one Parquet file per table with a row group per part, and an ``index.json`` with a
record per input; nothing is written per input. These tests check that a pack changes nothing the analysis sees (tables equal to
those of a run that stores each input alone), that a bad input among them fails alone, and that a
damaged pack file is parsed again (at lookup) or fails its parts once and is removed (when it is
found damaged while the events are read).
"""

import glob
import json
import os

import pandas as pd
import pytest

import dtrace
from dtrace.errors import InputError
from dtrace.generate.synth import generate
from dtrace.ingest import cache
from dtrace.ingest.ranks import part_spec

RANKS = 12  # more than cache.PACK_MIN_INPUTS: one task of them is packed


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("packjob")
    generate(d, ranks=RANKS, steps=1, kernels_per_step=12, seed=3)
    paths = sorted(glob.glob(str(d / "rank-*.json*")))
    assert len(paths) == RANKS >= cache.PACK_MIN_INPUTS
    # the reference: every input parsed and stored alone (tasks of fewer than PACK_MIN_INPUTS)
    ref = dtrace.analyze(paths, cache=str(tmp_path_factory.mktemp("refcache")), scheduler="sync")
    assert not ref.errors
    assert not glob.glob(os.path.join(ref.manifest["cache"], "pack-*"))
    return paths, {name: ref.table(name) for name in ref.table_names}


def same_tables(res, want, ranks=None):
    for name, ref in want.items():
        got = res.table(name)
        if ranks is not None and "rank" in ref.columns:
            ref = ref[ref["rank"].isin(ranks)].reset_index(drop=True)
            got = got.reset_index(drop=True)
        pd.testing.assert_frame_equal(got, ref, check_exact=True, obj=name)


def test_packed_inputs_give_the_same_tables(job, tmp_path):
    paths, want = job
    c = str(tmp_path / "cache")
    recs = cache.ingest_many(paths, c)
    packs = {p.pack for r in recs for p in r.parts}
    assert all(r.error is None for r in recs) and len(packs) == 1 and "" not in packs
    (pack,) = packs
    # one file per table for all the inputs, and their index: no folder or file per input
    assert sorted(os.listdir(os.path.join(c, pack))) == sorted(
        ["index.json"]
        + [
            f"{k}.parquet"
            for k in {"events", "collectives", "memcpy"} | {k for r in recs for p in r.parts for k in p.side}
        ]
    )
    assert os.listdir(c) == [pack]
    with open(os.path.join(c, pack, "index.json")) as f:
        assert sorted(r["path"] for r in json.load(f)["records"]) == sorted(paths)
    res = dtrace.analyze(paths, cache=c, scheduler="sync")  # read back from the pack (verified)
    assert all(i["cached"] for i in res.manifest["inputs"])
    same_tables(res, want)


def test_bad_input_in_a_pack_fails_alone(job, tmp_path):
    paths, want = job
    bad = tmp_path / "rank-5.json"  # a trace that is not JSON, among the good ones
    bad.write_text('{"traceEvents": [ {"ph": "X", "name": ')
    inputs = sorted([p for p in paths if os.path.basename(p).split(".")[0] != "rank-5"] + [str(bad)])
    c = str(tmp_path / "cache")
    recs = cache.ingest_many(inputs, c)
    errors = [r for r in recs if r.error]
    assert [r.path for r in errors] == [str(bad)]
    assert "\n" not in errors[0].error and str(bad) in errors[0].error
    assert len({p.pack for r in recs for p in r.parts}) == 1
    res = dtrace.analyze(inputs, cache=c, scheduler="sync")
    assert len(res.errors) == 1 and str(bad) in res.errors[0]
    others = sorted(set(want["breakdown"]["rank"]) - {5})
    assert sorted(res.breakdown["rank"]) == others
    same_tables(res, {"breakdown": want["breakdown"], "kernels": want["kernels"]}, ranks=others)


def test_damaged_pack_file_is_parsed_again(job, tmp_path):
    paths, want = job
    c = str(tmp_path / "cache")
    recs = cache.ingest_many(paths, c)
    (pack,) = {p.pack for r in recs for p in r.parts}
    events = os.path.join(c, pack, "events.parquet")
    with open(events, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0xFF
    with open(events, "wb") as f:
        f.write(data)
    res = dtrace.analyze(paths, cache=c, scheduler="sync")
    assert not res.errors
    notes = [n for i in res.manifest["inputs"] for n in i["notes"]]
    assert len(notes) == RANKS and all("events.parquet is damaged; parsing again" in n for n in notes)
    assert not any(i["cached"] for i in res.manifest["inputs"])
    same_tables(res, want)


def test_pack_file_damaged_after_its_check_fails_its_parts_once(job, tmp_path):
    """Damaged between the check and the read (or forged to pass the check): the part fails in one
    line naming its input, the pack file is removed, and the next lookup parses the inputs again."""
    paths, _ = job
    c = str(tmp_path / "cache")
    recs = cache.ingest_many(paths, c)
    spec = part_spec(recs[0], recs[0].parts[0], 0)
    assert spec.groups and os.path.dirname(spec.events).endswith(recs[0].parts[0].pack)
    with open(spec.events, "r+b") as f:
        f.seek(100)
        f.write(b"\0" * 16)
    with pytest.raises(InputError, match="damaged") as exc:
        cache.read_part_tables(spec)
    assert recs[0].path in str(exc.value) and "\n" not in str(exc.value)
    assert not os.path.exists(spec.events)
    hit, note = cache.lookup(c, recs[-1].path)
    assert hit is None and "events.parquet is missing or unreadable; parsing again" in note


def test_parts_of_a_pack_are_read_in_one_call_per_file(job, tmp_path, monkeypatch):
    """A partition's parts in one pack: each pack file's row groups are read together (not a read
    per part and table), and each part gets exactly the tables it gets read alone."""
    import pyarrow.parquet as pq

    paths, _ = job
    recs = cache.ingest_many(paths, str(tmp_path / "cache"))
    specs = [part_spec(r, p, i) for i, r in enumerate(recs) for p in r.parts]
    alone = [cache.read_part_tables(s) for s in specs]
    calls = {"one": 0, "many": 0}
    one, many = pq.ParquetFile.read_row_group, pq.ParquetFile.read_row_groups
    monkeypatch.setattr(
        pq.ParquetFile, "read_row_group", lambda *a, **k: calls.__setitem__("one", calls["one"] + 1) or one(*a, **k)
    )
    monkeypatch.setattr(
        pq.ParquetFile, "read_row_groups", lambda *a, **k: calls.__setitem__("many", calls["many"] + 1) or many(*a, **k)
    )
    together = cache.read_parts_tables(specs)
    files = {s.events for s in specs} | {p for s in specs for p in (s.collectives, s.memcpy, *dict(s.side).values())}
    assert calls == {"one": 0, "many": len(files)}
    for a, b in zip(alone, together):
        assert a.events.equals(b.events) and a.side.keys() == b.side.keys()
        assert all(a.side[k].equals(b.side[k]) for k in a.side)


def test_a_damaged_pack_file_read_together_still_names_the_input(job, tmp_path):
    paths, _ = job
    recs = cache.ingest_many(paths, str(tmp_path / "cache"))
    specs = [part_spec(r, p, i) for i, r in enumerate(recs) for p in r.parts]
    with open(specs[0].events, "r+b") as f:
        f.seek(100)
        f.write(b"\0" * 16)
    with pytest.raises(InputError, match="damaged") as exc:
        cache.read_parts_tables(specs)
    assert recs[0].path in str(exc.value) and "\n" not in str(exc.value)


def test_pack_folder_replaced_by_a_link_is_not_followed(job, tmp_path):
    paths, want = job
    c = str(tmp_path / "cache")
    recs = cache.ingest_many(paths, c)
    (pack,) = {p.pack for r in recs for p in r.parts}
    elsewhere = tmp_path / "elsewhere"
    os.rename(os.path.join(c, pack), elsewhere)
    os.symlink(elsewhere, os.path.join(c, pack))
    hit, note = cache.lookup(c, recs[0].path)
    assert hit is None and "is not a folder; parsing again" in note
    res = dtrace.analyze(paths, cache=c, scheduler="sync")
    assert not res.errors and not any(i["cached"] for i in res.manifest["inputs"])
    assert sorted(os.listdir(elsewhere))  # the link's target untouched
    same_tables(res, want)


def _edited_index(paths, tmp_path, edit):
    """A cache of ``paths`` (one pack) whose ``index.json`` was changed by ``edit(doc)``."""
    c = str(tmp_path / "cache")
    cache.ingest_many(paths, c)
    (pack,) = [n for n in os.listdir(c) if n.startswith("pack-")]
    index = os.path.join(c, pack, "index.json")
    with open(index) as f:
        doc = json.load(f)
    edit(doc)
    with open(index, "w") as f:
        json.dump(doc, f)
    return c


def test_inputs_in_subfolders_are_packed_under_their_common_folder_and_found(job, tmp_path):
    """One folder per rank (``job/rank3/trace.json.gz``): the pack is filed under ``job`` and each
    input's lookup finds its record there, from its own folder upwards."""
    paths, want = job
    moved = []
    for i, p in enumerate(paths):
        d = tmp_path / "job" / f"rank{i}"
        d.mkdir(parents=True)
        moved.append(str(d / os.path.basename(p)))
        os.link(p, moved[-1])
    c = str(tmp_path / "cache")
    recs = cache.ingest_many(moved, c)
    assert all(r.error is None for r in recs)
    (pack,) = os.listdir(c)
    assert pack.startswith(f"pack-{cache._folder_key(str(tmp_path / 'job'))}-")
    for p in moved:
        hit, note = cache.lookup(c, p)
        assert hit is not None and note is None and hit.cached
    res = dtrace.analyze(moved, cache=c, scheduler="sync")
    assert all(i["cached"] for i in res.manifest["inputs"])
    same_tables(res, want)


def test_a_changed_input_is_packed_again_and_the_stale_record_ignored(job, tmp_path):
    paths, want = job
    inputs = []
    for p in paths:
        inputs.append(str(tmp_path / os.path.basename(p)))
        with open(p, "rb") as src, open(inputs[-1], "wb") as dst:
            dst.write(src.read())
    c = str(tmp_path / "cache")
    assert all(r.error is None for r in cache.ingest_many(inputs, c))
    first = os.listdir(c)
    with open(paths[1], "rb") as f:  # the first input becomes a copy of the second (another trace)
        other = f.read()
    with open(inputs[0], "wb") as f:
        f.write(other)
    hit, note = cache.lookup(c, inputs[0])
    assert hit is None and note is None  # changed size or mtime: an ordinary re-parse, nothing to report
    recs = cache.ingest_many(inputs, c)  # the other inputs are cached; the changed one alone is parsed
    assert [r.cached for r in recs] == [False] + [True] * (len(inputs) - 1)
    assert len(os.listdir(c)) == 2 and set(first) < set(os.listdir(c))  # the old pack stays for the others
    hit, note = cache.lookup(c, inputs[0])  # the new pack's record, not the stale one of the old pack
    assert hit is not None and note is None and hit.fingerprint == recs[1].fingerprint


def test_a_hand_edited_index_parses_its_inputs_again_with_a_note(job, tmp_path):
    paths, want = job

    def edit(doc):  # the records change, their fingerprint does not
        doc["records"][0]["parts"][0]["n_events"] += 1

    c = _edited_index(paths, tmp_path, edit)
    hit, note = cache.lookup(c, paths[0])
    assert hit is None and "index is damaged (the records do not match their fingerprint); parsing again" in note
    res = dtrace.analyze(paths, cache=c, scheduler="sync")
    assert not res.errors and not any(i["cached"] for i in res.manifest["inputs"])
    notes = [n for i in res.manifest["inputs"] for n in i["notes"]]
    assert len(notes) == RANKS and all("index is damaged" in n for n in notes)
    same_tables(res, want)


def test_an_index_record_pointing_at_another_pack_is_refused(job, tmp_path):
    """A record must name its own pack's files (their fingerprints are checked anyway)."""
    paths, _ = job

    def edit(doc):
        doc["records"][0]["parts"][0]["pack"] = "pack-" + "0" * 12 + "-" + "0" * 24
        doc["records_fingerprint"] = cache._record_fingerprint(doc["records"])

    c = _edited_index(paths, tmp_path, edit)
    hit, note = cache.lookup(c, paths[1])
    assert hit is None and "records[0].parts are not all in this pack" in note


@pytest.mark.parametrize("how", ["other", "swap"])
def test_an_index_record_naming_another_inputs_row_groups_is_refused(job, tmp_path, how):
    """Issue 31: a record edited to read another part's row groups, with its fingerprint recomputed,
    silently changed breakdown, kernels and collectives. A pack's parts fill each table's row
    groups in record order, so a record names only its own: the index is damaged, parsed again."""
    paths, want = job

    def edit(doc):
        a, b = doc["records"][0]["parts"][0]["groups"], doc["records"][1]["parts"][0]["groups"]
        if how == "swap":
            a["events"], b["events"] = b["events"], a["events"]
        else:
            a["events"] = b["events"]
        doc["records_fingerprint"] = cache._record_fingerprint(doc["records"])

    c = _edited_index(paths, tmp_path, edit)
    hit, note = cache.lookup(c, paths[0])
    assert hit is None and "names row group" in note and "not its own" in note
    res = dtrace.analyze(paths, cache=c, scheduler="sync")
    assert not res.errors
    same_tables(res, want)


def test_an_index_of_another_cache_version_is_parsed_again_silently(job, tmp_path):
    paths, _ = job
    c = _edited_index(paths, tmp_path, lambda doc: doc.update(cache_version=cache.CACHE_VERSION - 1))
    assert cache.lookup(c, paths[0]) == (None, None)


def test_packing_drops_an_earlier_entry_of_its_own(job, tmp_path):
    """An input cached alone before (a smaller task) and packed now has one record: the pack's."""
    paths, _ = job
    c = str(tmp_path / "cache")
    alone = cache.ingest(paths[0], c, reuse=False)
    entry = cache.entry_dir(c, paths[0])
    assert alone.error is None and os.path.exists(os.path.join(entry, "source.json"))
    cache.ingest_many(paths, c, reuse=False)
    assert not os.path.exists(os.path.join(entry, "source.json"))
    hit, _ = cache.lookup(c, paths[0])
    assert hit is not None and {p.pack for p in hit.parts} != {""}


def test_a_pack_written_after_a_lookup_in_the_same_process_is_found(job, tmp_path):
    """The listing of the cache folder is kept per state of the folder: a new pack is seen."""
    paths, _ = job
    c = str(tmp_path / "cache")
    os.makedirs(c)
    assert cache.lookup(c, paths[0]) == (None, None)
    cache.ingest_many(paths, c)
    hit, note = cache.lookup(c, paths[0])
    assert hit is not None and note is None


def _planted(doc, n):
    """``n`` more records in a pack index, each valid on its own (this pack, the next row groups),
    the fingerprint recomputed: what an editor can do."""
    recs = doc["records"]
    nxt = {
        k: 1 + max(g for r in recs for p in r["parts"] for g in [p["groups"][k]]) for k in recs[0]["parts"][0]["groups"]
    }
    first = json.dumps(recs[0])
    for i in range(n):
        r = json.loads(first)
        r["path"] = f"/planted/rank-{i}.json"
        for p in r["parts"]:
            for k in p["groups"]:
                p["groups"][k], nxt[k] = nxt[k], nxt[k] + 1
        recs.append(r)
    doc["records_fingerprint"] = cache._record_fingerprint(recs)


def test_an_index_with_more_records_than_a_pack_holds_is_refused_before_its_checks(job, tmp_path, monkeypatch):
    """Issue 31: an index with 100,000 planted records took > 120 s to use. A pack holds at most
    PACK_MAX_INPUTS inputs, so an index with more records is refused before they are checked
    (and one larger than INDEX_MAX_BYTES before it is read); the inputs are parsed again."""
    paths, want = job
    monkeypatch.setattr(cache, "PACK_MAX_INPUTS", 64)
    c = _edited_index(paths, tmp_path, lambda doc: _planted(doc, 64))
    checked = []
    monkeypatch.setattr(cache, "_checked_record", lambda *a: checked.append(a))
    hit, note = cache.lookup(c, paths[0])
    assert hit is None and f"holds {len(paths) + 64} records, more than a pack's 64" in note and not checked
    monkeypatch.undo()
    monkeypatch.setattr(cache, "INDEX_MAX_BYTES", 1000)
    cache._index_of.cache_clear()
    hit, note = cache.lookup(c, paths[0])
    assert hit is None and "is larger than 1,000 bytes: refused" in note


def test_a_task_of_more_inputs_than_a_pack_holds_writes_several_packs(job, tmp_path, monkeypatch):
    paths, want = job
    monkeypatch.setattr(cache, "PACK_MAX_INPUTS", 8)  # 12 inputs: a pack of 8, then 4 stored alone
    c = str(tmp_path / "cache")
    records = cache.ingest_many(paths, c)
    assert [r.path for r in records] == [os.path.abspath(p) for p in paths] and not any(r.error for r in records)
    packs = [n for n in os.listdir(c) if n.startswith("pack-")]
    with open(os.path.join(c, packs[0], "index.json")) as f:
        assert len(packs) == 1 and len(json.load(f)["records"]) == 8
    same_tables(dtrace.analyze(paths, cache=c, scheduler="sync"), want)
