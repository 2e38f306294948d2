"""The typed records of the JSON files dtrace writes (dtrace/core/records.py): every file an analysis
writes reads back as its record, field for field as a plain reading of the JSON says, and a
wrong field is named in one line."""

import glob
import json
import os

import pytest

import dtrace
from dtrace.core.records import (
    CachedInput,
    Manifest,
    RecordError,
    SourceFile,
    StoreEntry,
    convert,
)
from dtrace.ingest.cache import _record_fingerprint
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
