"""The typed records of the JSON files dtrace writes (dtrace/core/records.py): every file an analysis
writes reads back as its record, field for field as a plain reading of the JSON says, and a
wrong field is named in one line."""

import glob
import json
import os

import pytest
import xxhash

import dtrace
from dtrace.cli.main import main
from dtrace.core.records import (
    CachedInput,
    Manifest,
    RecordError,
    SourceFile,
    StoredSummary,
    StoreEntry,
    convert,
)
from dtrace.ingest.cache import CACHE_VERSION, _record_fingerprint, lookup
from dtrace.readers._io import own_output

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACE = os.path.join(ROOT, "tests", "data", "h200", "host_rank0.pt.trace.json.gz")


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("records") / "out")
    dtrace.analyze([TRACE], out=out, scheduler="sync")
    return out


def test_manifest_reads_back_as_written(out):
    with open(os.path.join(out, "manifest.json")) as f:
        raw = json.load(f)
    res = dtrace.load(out)
    m = res.record
    assert isinstance(m, Manifest) and res.manifest == raw  # the JSON object itself stays as written
    assert m.tables == raw["tables"] and m.run_id == raw["run_id"] and m.options == raw["options"]
    assert (m.n_inputs, m.n_parts, m.n_failed, m.workers) == (
        raw["n_inputs"],
        raw["n_parts"],
        raw["n_failed"],
        raw["workers"],
    )
    (item,) = m.inputs
    (want,) = raw["inputs"]
    assert (item.path, item.status, item.size, item.fingerprint) == (
        want["path"],
        want["status"],
        want["size"],
        want["fingerprint"],
    )
    assert [list(r) for r in item.ranks] == want["ranks"]
    assert [(p.rank, p.device, p.local_index) for p in item.parts] == [
        (p["rank"], p["device"], p["local_index"]) for p in want["parts"]
    ]
    assert [list(p.ranks) for p in m.partitions] == [p["ranks"] for p in raw["partitions"]]


def test_store_entries_read_back_and_stay_recognisable(out):
    entries = glob.glob(os.path.join(out, "cache", "results", "*", "entry.json"))
    assert entries
    for path in entries:
        with open(path, "rb") as f:
            data = f.read()
        raw = json.loads(data)
        e = convert(raw, StoreEntry)
        assert (e.version, e.key) == (raw["version"], raw["key"]) == (1, os.path.basename(os.path.dirname(path)))
        assert {k: (t.rows, t.fingerprint) for k, t in e.tables.items()} == {
            k: (t["rows"], t["fingerprint"]) for k, t in raw["tables"].items()
        }
        # readers tell dtrace's own outputs by their first bytes: the field order is part of the format
        assert own_output(data[:200]) == "an entry of dtrace's result store"


def test_cache_sources_read_back(out):
    sources = glob.glob(os.path.join(out, "cache", "*", "source.json"))
    assert len(sources) == 1
    with open(sources[0]) as f:
        raw = json.load(f)
    s = convert(raw, SourceFile)
    assert s.record_fingerprint == _record_fingerprint(raw["record"])
    rec = convert(s.record, CachedInput)
    assert rec.path == raw["record"]["path"] and rec.size == os.path.getsize(TRACE)
    assert [(p.device, p.n_events, p.events) for p in rec.parts] == [
        (p["device"], p["n_events"], p["events"]) for p in raw["record"]["parts"]
    ]


def test_a_cache_hit_is_its_source_json(out):
    """What the cache hands ingest on a hit is what source.json says, field for field."""
    (src,) = glob.glob(os.path.join(out, "cache", "*", "source.json"))
    with open(src) as f:
        raw = json.load(f)["record"]
    rec, note = lookup(os.path.join(out, "cache"), TRACE)
    assert note is None and rec is not None and rec.cached
    assert (rec.path, rec.format, rec.size, rec.mtime_ns, rec.fingerprint) == (
        raw["path"],
        raw["format"],
        raw["size"],
        raw["mtime_ns"],
        raw["fingerprint"],
    )
    assert (rec.rank_hint, rec.rank_per_device, rec.meta, rec.identity) == (
        raw["rank_hint"],
        raw["rank_per_device"],
        raw["meta"],
        raw["identity"],
    )
    entry = os.path.dirname(src)
    for part, want in zip(rec.parts, raw["parts"], strict=True):
        assert (part.device, part.local_index, part.n_events, part.checksums) == (
            want["device"],
            want["local_index"],
            want["n_events"],
            want["checksums"],
        )
        assert [part.events, part.collectives, part.memcpy] == [
            os.path.join(entry, want[k]) for k in ("events", "collectives", "memcpy")
        ]
        assert part.side == {k: os.path.join(entry, v) for k, v in want["side"].items()}


def _copy_with_source(out, tmp_path, edit):
    """A copy of ``out``'s cache whose one source.json is edited (its fingerprint made to match)."""
    import shutil

    cache = str(tmp_path / "cache")
    shutil.copytree(os.path.join(out, "cache"), cache)
    (src,) = glob.glob(os.path.join(cache, "*", "source.json"))
    with open(src) as f:
        doc = json.load(f)
    edit(doc)
    if isinstance(doc.get("record"), dict):
        doc["record_fingerprint"] = xxhash.xxh3_128_hexdigest(json.dumps(doc["record"], sort_keys=True).encode())
    with open(src, "w") as f:
        json.dump(doc, f)
    return cache


@pytest.mark.parametrize(
    "edit, named",
    [
        (lambda d: d["record"]["parts"][0].update(device="0"), "record.parts[0].device is a str, expected an int"),
        (lambda d: d["record"]["parts"][0].update(pack="../x"), "record.parts[0].pack is '../x'"),
        (lambda d: d["record"]["meta"].update(n_devices=0), "record.meta.n_devices is 0"),
        (lambda d: d["record"].pop("size"), "record.size is missing"),
        (lambda d: d.update(record=[]), "record is a list, expected a dict"),
    ],
)
def test_a_damaged_source_json_is_a_miss_naming_the_field(out, tmp_path, edit, named):
    hit, note = lookup(_copy_with_source(out, tmp_path, edit), TRACE)
    assert hit is None and named in note and note.endswith("; parsing again") and "\n" not in note


def test_a_source_json_of_another_cache_version_is_a_silent_miss(out, tmp_path):
    """Another dtrace's entry, whatever its shape: parsed again without a note."""
    cache = _copy_with_source(out, tmp_path, lambda d: d.update(cache_version=CACHE_VERSION + 1, record=[]))
    assert lookup(cache, TRACE) == (None, None)


def test_the_stored_summary_reads_back(tmp_path, capsys):
    """``dtrace analyze`` keeps its summary in OUT/summary.json, of the manifest's bytes."""
    out = str(tmp_path / "out")
    assert main(["analyze", TRACE, "-o", out, "--sync", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    with open(os.path.join(out, "summary.json"), "rb") as f:
        raw = json.loads(f.read())
    with open(os.path.join(out, "manifest.json"), "rb") as f:
        manifest_fp = xxhash.xxh3_128_hexdigest(f.read())
    s = convert(raw, StoredSummary)
    assert (s.version, s.manifest, s.material, s.output) == (
        raw["version"],
        manifest_fp,
        raw["material"],
        raw["output"],
    )
    assert list(s.output) == ["table"] and s.output["table"] in printed


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"tables": ["x"], "inputs": [{"size": "big"}]}, "inputs[0].size is a str, expected an int"),
        ({"tables": ["x"], "inputs": [{"ranks": [[0]]}]}, "inputs[0].ranks[0] is [0]"),
        ({"tables": ["x"], "inputs": [{"mtime_ns": 2**64}]}, f"inputs[0].mtime_ns is {2**64}, beyond a 64-bit integer"),
        ({"tables": ["x"], "partitions": [{"parts": 1}]}, "partitions[0].ranks is missing"),
        ({"tables": ["x"], "workers": True}, "workers is a bool, expected an int"),
        ([], "the document is a JSON list, not an object"),
    ],
)
def test_a_wrong_field_is_named(doc, message):
    with pytest.raises(RecordError) as info:
        convert(doc, Manifest)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)
