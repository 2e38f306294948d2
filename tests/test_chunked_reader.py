"""The chunked, in-place Chrome-trace decoder (dtrace.readers._chrome) on multi-block inputs."""

from __future__ import annotations

import gc
import types

import numpy as np
import pyarrow as pa
from testpaths import shared

import dtrace.readers._io as io_
from dtrace.generate.tile import tile_trace
from dtrace.readers.kineto import read_kineto


def _same(a, b) -> bool:
    return (
        len(a.parts) == len(b.parts)
        and a.meta == b.meta
        and all(
            x.events.equals(y.events) and x.collectives.equals(y.collectives) and x.memcpy.equals(y.memcpy)
            for x, y in zip(a.parts, b.parts)
        )
    )


def test_block_size_never_changes_the_table(tmp_path):
    # a tiled trace spans many blocks; boundaries fall inside events, strings and nested args
    info = tile_trace(shared("kineto", "hta-2rank", "sampled_rank-1.json.gz"), tmp_path / "t.json", times=3)
    ref = read_kineto(info["path"])
    assert ref.meta["events"] == ref.parts[0].events.num_rows == info["events"] - _non_complete(info["path"])
    for block in (97, 4096, 65_536, 1 << 20):
        assert _same(read_kineto(info["path"], block=block), ref), block
    gz = tile_trace(shared("kineto", "hta-2rank", "sampled_rank-1.json.gz"), tmp_path / "t.json.gz", times=3, gzip=True)
    assert _same(read_kineto(gz["path"], block=4096), read_kineto(gz["path"]))


def test_views_held_elsewhere_do_not_break_reading(tmp_path, monkeypatch):
    # a sampling profiler (Dask's worker profiler) can hold a frame, and so a view of the read
    # buffer, while the reader grows it: the buffer is replaced, never resized in place
    held: list[memoryview] = []
    orig = io_.Content.readinto

    def readinto(self, view):
        held.append(view)
        return orig(self, view)

    info = tile_trace(shared("kineto", "hta-2rank", "sampled_rank-0.json.gz"), tmp_path / "t.json", times=2)
    ref = read_kineto(info["path"])
    monkeypatch.setattr(io_.Content, "readinto", readinto)
    got = read_kineto(info["path"], block=1 << 20)
    assert len(held) > 1 and _same(got, ref)
    ev = got.parts[0].events
    assert ev.num_rows == info["events"] - _non_complete(info["path"])
    assert pa.types.is_dictionary(ev.schema.field("name").type)
    start = ev.column("start_ns").to_numpy()
    assert np.all(ev.column("end_ns").to_numpy() >= start)


def _non_complete(path: str) -> int:
    """Events that are not complete ('X') events, counted on the raw JSON with the stdlib."""
    import json

    with open(path, encoding="utf-8") as f:
        return sum(1 for e in json.load(f)["traceEvents"] if e.get("ph") != "X")


def test_reading_leaves_no_reference_cycles(tmp_path):
    # a list after the events makes the reader try (and reject) a wrong end of the array first;
    # a kept exception would hold the reader's frames, and with them its read buffer, in a cycle
    doc = (
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2, '
        '"args": {"correlation": 1}}], "deviceProperties": [{"id": 0, "name": "GPU"}]}'
    )
    (tmp_path / "t.json").write_text(doc)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        tf = read_kineto(str(tmp_path / "t.json"))
        gc.collect()
        frames = [o.f_code.co_name for o in gc.garbage if isinstance(o, types.FrameType)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert tf.meta["device_names"] == ["GPU"] and tf.parts[0].events.num_rows == 1
    assert frames == []
