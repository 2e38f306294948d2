"""Side tables beyond collectives and memcpy (dtrace.core.schema.SIDE_SCHEMAS): a format that has one
fills it in its parts; the cache stores it (only when it has rows) and verifies it like the
others; a partition's Batch carries it with a ``part`` column; an entry written when other side
tables were registered is parsed again. A probe side table is registered for these tests only."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dtrace.core import schema
from dtrace.execution.tasks import load_batch
from dtrace.ingest import cache
from dtrace.ingest.ranks import part_spec
from dtrace.readers import detect
from dtrace.readers.base import Part, TraceFile

PROBE = pa.schema([("row", pa.int64()), ("note", pa.dictionary(pa.int32(), pa.string())), ("value", pa.int64())])


@pytest.fixture
def probe(monkeypatch):
    monkeypatch.setitem(schema.SIDE_SCHEMAS, "probe", PROBE)


def _events(n: int, device: int) -> pa.Table:
    t = schema.EVENT_SCHEMA.empty_table().to_pydict()
    for i in range(n):
        t["rank"].append(-1)
        t["device"].append(device)
        t["stream"].append(7)
        t["pid"].append(1)
        t["tid"].append(1)
        t["kind"].append("kernel")
        t["name"].append(f"k{i}")
        t["start_ns"].append(1_000 * i)
        t["end_ns"].append(1_000 * i + 500)
        t["correlation"].append(-1)
        t["external_id"].append(-1)
    return pa.table(t, schema=schema.EVENT_SCHEMA)


class _Reader:
    name = "kineto"

    def __init__(self, probe_rows: dict[int, list[tuple[int, str, int]]]):
        self.probe_rows = probe_rows

    def read(self, path, **_):
        parts = []
        for idx, dev in enumerate((0, 1)):
            rows = self.probe_rows.get(dev, [])
            side = {}
            if rows:
                side["probe"] = pa.table(
                    {"row": [r[0] for r in rows], "note": [r[1] for r in rows], "value": [r[2] for r in rows]},
                    schema=PROBE,
                )
            parts.append(
                Part(
                    device=dev,
                    events=_events(3, dev),
                    collectives=schema.empty_side("collectives"),
                    memcpy=schema.empty_side("memcpy"),
                    local_index=idx,
                    side=side,
                )
            )
        return TraceFile(path=path, format="kineto", parts=parts, rank_hint=0, meta={"base_time_ns": 0})


def _ingest(tmp_path, monkeypatch, reader) -> cache.FileRecord:
    src = tmp_path / "rank0.json"
    if not src.exists():
        src.write_text('{"traceEvents": []}')
    monkeypatch.setattr(cache, "detect", lambda path, head=None: reader)
    rec = cache.ingest(str(src), str(tmp_path / "cache"))
    assert rec.error is None, rec.error
    return rec


def test_a_side_table_travels_from_the_reader_to_the_batch(tmp_path, monkeypatch, probe):
    rec = _ingest(tmp_path, monkeypatch, _Reader({1: [(0, "a", 5), (2, "b", 7)]}))
    files = sorted(os.listdir(os.path.dirname(rec.parts[0].events)))
    # written only where it has rows: device 1's part, not device 0's
    assert [f for f in files if f.startswith("probe")] == ["probe-p1-d1.parquet"]
    specs = [part_spec(rec, p, rank=3) for p in rec.parts]
    from dtrace.options import Options

    batch = load_batch(specs, Options())
    got = batch.side_table("probe")
    assert got["part"].tolist() == [1, 1]  # the second part of the partition
    assert got["row"].tolist() == [0, 2]
    assert got["note"].astype(str).tolist() == ["a", "b"]
    assert got["value"].tolist() == [5, 7]
    # the same entry is reused on the next run: intact, same registry
    hit, note = cache.lookup(str(tmp_path / "cache"), rec.path)
    assert hit is not None and note is None
    assert hit.parts[1].side == {"probe": rec.parts[1].side["probe"]}


def test_a_side_table_no_part_has_is_an_empty_frame_with_its_columns(tmp_path, monkeypatch, probe):
    rec = _ingest(tmp_path, monkeypatch, _Reader({}))
    from dtrace.options import Options

    batch = load_batch([part_spec(rec, p, rank=0) for p in rec.parts], Options())
    got = batch.side_table("probe")
    assert len(got) == 0 and list(got.columns) == ["row", "note", "value", "part"]
    with pytest.raises(KeyError):
        batch.side_table("not_registered")


def test_an_entry_written_under_another_registry_is_parsed_again(tmp_path, monkeypatch):
    reader = _Reader({})
    rec = _ingest(tmp_path, monkeypatch, reader)
    monkeypatch.setitem(schema.SIDE_SCHEMAS, "probe", PROBE)
    hit, note = cache.lookup(str(tmp_path / "cache"), rec.path)
    assert hit is None and note is None  # an ordinary re-parse, nothing to report


def test_a_damaged_side_table_file_is_parsed_again(tmp_path, monkeypatch, probe):
    rec = _ingest(tmp_path, monkeypatch, _Reader({0: [(1, "x", 1)]}))
    path = rec.parts[0].side["probe"]
    data = bytearray(Path(path).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    hit, note = cache.lookup(str(tmp_path / "cache"), rec.path)
    assert hit is None and "probe-p0-d0.parquet is damaged" in note


def test_a_side_file_name_of_another_table_is_refused(tmp_path, monkeypatch, probe):
    rec = _ingest(tmp_path, monkeypatch, _Reader({0: [(1, "x", 1)]}))
    d = os.path.dirname(rec.parts[0].events)
    src = Path(d) / cache.SOURCE
    doc = json.loads(src.read_text())
    doc["record"]["parts"][0]["side"]["probe"] = "events-p0-d0.parquet"  # another table's file
    doc["record_fingerprint"] = cache._record_fingerprint(doc["record"])
    src.write_text(json.dumps(doc))
    hit, note = cache.lookup(str(tmp_path / "cache"), rec.path)
    assert hit is None and "invalid part file name" in note


def test_every_reader_fills_the_registered_side_tables():
    """The readers' parts give every registered side table, typed by its schema."""
    trace = os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples", "traces", "sampled_rank-0.json.gz")
    tf = detect(trace).read(trace)
    for part in tf.parts:
        tables = part.side_tables()
        assert list(tables) == list(schema.SIDE_SCHEMAS)
        for name, t in tables.items():
            assert t.schema.equals(schema.SIDE_SCHEMAS[name]), name
    assert np.all([p.tables().events.num_rows > 0 for p in tf.parts])
