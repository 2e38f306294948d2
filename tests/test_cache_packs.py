"""Packs: the small inputs of one ingest task stored together (``cache.ingest_many``).

A pack is one Parquet file per table with a row group per part; every input keeps its own
``source.json``. These tests check that a pack changes nothing the analysis sees (tables equal to
those of a run that stores each input alone), that a bad input among them fails alone, and that a
damaged pack file is parsed again (at lookup) or fails its parts once and is removed (when it is
found damaged while the events are read).
"""

import glob
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
    # one file per table for all the inputs, beside one source.json per input
    assert sorted(os.listdir(os.path.join(c, pack))) == sorted(
        f"{k}.parquet" for k in {"events", "collectives", "memcpy"} | {k for r in recs for p in r.parts for k in p.side}
    )
    assert len(glob.glob(os.path.join(c, "*", "source.json"))) == RANKS
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
