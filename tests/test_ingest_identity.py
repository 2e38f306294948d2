"""The Kineto reader's event table against an independent plain ``json`` reading of the same file.

Every complete (``ph == "X"``) event of the shared traces is read here with ``json``/``gzip`` and
plain Python (the SPEC's mapping of categories to kinds, written out by hand, the ``args`` keys
by name), and each column of the reader's table must equal it row for row: kind, name, pid, tid,
start and end in ns, correlation, external id, sequence number, device and stream. The reader
decodes in blocks (:mod:`dtrace.readers._chrome`), so the same comparison also runs with a block
small enough that every trace is cut into many.
"""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest
from rawtrace import to_ns
from testpaths import shared

from dtrace.readers.kineto import read_kineto

# SPEC: category (lower-cased) -> kind; every other category is "other"
KIND = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cuda_runtime": "runtime",
    "runtime": "runtime",
    "cuda_driver": "runtime",
    "driver": "runtime",
    "hip_runtime": "runtime",
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "python_function": "python",
}
GPU = {"kernel", "memcpy", "memset", "gpu_annotation"}  # the kinds that sit on a device and stream

TRACES = [
    ("kineto", "single", "a100_5streams_sendrecv_rank0.json.gz"),
    ("kineto", "single", "a100_nccl_collectives.json.gz"),
    ("kineto", "single", "b200_vllm_eager_rank0.json.gz"),
    ("kineto", "single", "h100_owlv2.json.gz"),
    ("kineto", "single", "mi210_gpu_only.json.gz"),
    ("kineto", "single", "mi250_rocm62.json.gz"),
    ("kineto", "single", "mi300_resnet_rccl_rank0.json.gz"),
    ("kineto", "single", "v100_ns_resolution_rank-0.json.gz"),
    ("kineto", "edge", "old_capitalized_categories_rank_1.json.gz"),
    ("kineto", "hta-2rank", "sampled_rank-1.json.gz"),
    ("kineto", "edge", "arg_above_int64_rank-70.json.gz"),
    ("kineto", "hta-2rank", "sampled_rank-0.json.gz"),
]


def _int(v: object, default: int | None) -> int | None:
    """An integer arg as the SPEC reads it: ints in int64, strings in any base prefix, else default."""
    if isinstance(v, str):
        try:
            v = int(v, 0)
        except ValueError:
            return default
    if isinstance(v, int) and not isinstance(v, bool):
        return v if -(2**63) <= v < 2**63 else default
    return default


def _id(v: object) -> int | None:
    """pid/tid: ints as they are, missing -1, numeric strings their value; None for a named id."""
    if v is None:
        return -1
    if isinstance(v, int):
        return v
    try:
        return int(str(v))
    except ValueError:
        return None


def expected(path: str) -> dict[str, list]:
    """The columns of every X event, in file order, from a plain json reading."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    base = int(doc.get("baseTimeNanoseconds") or 0)
    out: dict[str, list] = {k: [] for k in ("kind", "name", "pid", "tid", "ts", "dur", "corr", "ext", "seq", "dev")}
    out["stream"] = []
    for e in doc["traceEvents"]:
        if e.get("ph") != "X":
            continue
        a = e.get("args") or {}
        kind = KIND.get((e.get("cat") or "").lower(), "other")
        pid, tid = _id(e.get("pid")), _id(e.get("tid"))
        out["kind"].append(kind)
        out["name"].append(e.get("name", ""))
        out["pid"].append(pid)
        out["tid"].append(tid)
        out["ts"].append(e["ts"])
        out["dur"].append(e["dur"])
        out["corr"].append(_int(a.get("correlation"), -1))
        ext = _int(a.get("External id"), None)
        out["ext"].append(ext if ext is not None else _int(a.get("external id"), -1))
        out["seq"].append(_int(a.get("Sequence number"), -1))
        dev, stream = -1, -1
        if kind in GPU:
            d, s = _int(a.get("device"), -2), _int(a.get("stream"), -2)
            dev = d if d is not None and d >= -1 else pid
            stream = s if s is not None and s >= -1 else tid
        out["dev"].append(dev)
        out["stream"].append(stream)
    start = to_ns(np.array(out["ts"], np.float64)) + base
    out["start_ns"] = list(start)
    out["end_ns"] = list(start + to_ns(np.array(out["dur"], np.float64)))
    return out


def _check(path: str, block: int | None) -> None:
    want = expected(path)
    tf = read_kineto(path, **({"block": block} if block else {}))
    assert tf.meta["dropped_events"] == {}, "the traces compared here have no implausible times"
    dev = np.array(want["dev"], np.int64)
    seen_gpu = 0
    for part in tf.parts:
        rows = np.flatnonzero((dev == -1) | (dev == part.device))
        t = part.events
        assert t.num_rows == len(rows), os.path.basename(path)
        got = {c: t.column(c).to_pylist() for c in t.column_names}
        pick = rows.tolist()
        assert got["kind"] == [want["kind"][i] for i in pick]
        assert got["name"] == [want["name"][i] for i in pick]
        for col, key in (
            ("start_ns", "start_ns"),
            ("end_ns", "end_ns"),
            ("correlation", "corr"),
            ("external_id", "ext"),
            ("seq", "seq"),
            ("device", "dev"),
            ("stream", "stream"),
        ):
            assert got[col] == [int(want[key][i]) for i in pick], col
        for col in ("pid", "tid"):
            exp = [want[col][i] for i in pick]
            named = [g for g, x in zip(got[col], exp) if x is None]  # a named id ("Spans") gets a stable id
            assert [g for g, x in zip(got[col], exp) if x is not None] == [x for x in exp if x is not None], col
            assert all(g >= 1 << 48 for g in named), col
        seen_gpu += sum(1 for i in pick if want["dev"][i] == part.device and want["kind"][i] in GPU)
    assert seen_gpu == sum(1 for k, d in zip(want["kind"], want["dev"]) if k in GPU and d != -1)


@pytest.mark.parametrize("parts", TRACES, ids=lambda p: p[-1].split(".")[0])
def test_event_table_equals_a_plain_json_reading(parts):
    _check(shared(*parts), None)


@pytest.mark.parametrize("parts", [TRACES[3], TRACES[6], TRACES[8]], ids=lambda p: "blocks-" + p[-1].split(".")[0])
def test_event_table_in_small_blocks_equals_a_plain_json_reading(parts):
    """Cut into many blocks (and read by the chunked path, not the one-call path of small files)."""
    _check(shared(*parts), 1 << 16)
