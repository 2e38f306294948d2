"""PyTorch profiler (Kineto) JSON traces: ``*.json``, ``*.json.gz``, ``*.pt.trace.json[.gz]``.

Only the fields the event schema needs are decoded (typed msgspec structs, chunked: see
:mod:`._chrome`). Timestamps are float µs relative to ``baseTimeNanoseconds`` (or absolute
µs in older traces) and become absolute int64 ns. Old traces capitalise categories
(``Kernel``, ``Runtime``, ``Memcpy``); ROCm traces use ``hipLaunchKernel`` and report the
device in ``args.device``. A file whose GPU events sit on several devices becomes one part
per device; host events are shared by every part.
"""
from __future__ import annotations

import re
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from ..errors import InputError, NoGPUActivity
from ..schema import COLLECTIVE_SCHEMA, DTYPE_BYTES, EVENT_SCHEMA, MEMCPY_SCHEMA, validate_events
from . import Part, TraceFile
from ._chrome import ChromeTrace
from ._ids import StableIds

NAME = "kineto"

# category (lower-cased) -> schema kind
CATEGORY_KIND = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy", "memcpy": "memcpy",
    "gpu_memset": "memset", "memset": "memset",
    "cuda_runtime": "runtime", "runtime": "runtime", "cuda_driver": "runtime", "driver": "runtime",
    "hip_runtime": "runtime",
    "cpu_op": "cpu_op", "operator": "cpu_op",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "python_function": "python",
}
GPU_KIND_SET = frozenset({"kernel", "memcpy", "memset", "gpu_annotation"})
KIND_CODES = {k: i for i, k in enumerate(("kernel", "memcpy", "memset", "cpu_op", "runtime",
                                          "annotation", "gpu_annotation", "python", "other"))}
KIND_DICT = pa.array(list(KIND_CODES), pa.string())


class Args(msgspec.Struct, gc=False):
    external_id: int | str | None = msgspec.field(default=None, name="External id")
    external_id_old: int | str | None = msgspec.field(default=None, name="external id")
    correlation: int | str | None = None
    stream: int | str | None = None
    device: int | str | None = None
    nbytes: int | float | str | None = msgspec.field(default=None, name="bytes")
    kind: str | None = None  # ROCm memcpy kind ("DtoD")
    seq_number: int | str | None = msgspec.field(default=None, name="Sequence number")
    collective: str | None = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    group_size: Any = msgspec.field(default=None, name="Group size")
    dtype: Any = None
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    seq: Any = msgspec.field(default=None, name="Seq")


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    args: Args | None = None


class DistInfo(msgspec.Struct, gc=False):
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None


class Meta(msgspec.Struct, gc=False):
    distributedInfo: DistInfo | None = None  # noqa: N815 - JSON key
    baseTimeNanoseconds: int | None = None  # noqa: N815
    deviceProperties: list[Any] | None = None  # noqa: N815
    schemaVersion: int | None = None  # noqa: N815
    displayTimeUnit: str | None = None  # noqa: N815


class READER:  # noqa: N801 - the registered reader object
    name = NAME

    @staticmethod
    def guess_can_open(path: str, head: bytes) -> bool:
        text = head.lstrip()
        if not text.startswith((b"{", b"[")):
            return False
        if b'"traceEvents"' in head and (b'"/device:' in head or b'"XLA' in head):
            return False  # a JAX/XLA trace
        if b'"traceEvents"' in head or b'"schemaVersion"' in head or b'"deviceProperties"' in head:
            return True
        lower = path.lower()
        return lower.endswith((".json", ".json.gz")) and not lower.endswith(".trace.json.gz")

    @staticmethod
    def read(path: str, **options: Any) -> TraceFile:
        return read_kineto(path, **options)


class _Columns:
    """Column buffers filled chunk by chunk."""

    def __init__(self) -> None:
        self.cols: dict[str, list[np.ndarray]] = {k: [] for k in
                                                  ("device", "stream", "pid", "tid", "kind", "start", "dur",
                                                   "correlation", "external_id", "seq")}
        self.names: list[pa.Array] = []
        self.coll_rows: list[tuple[int, Args, str]] = []
        self.mem_rows: list[tuple[int, str, float | None, str | None]] = []
        self.n = 0


def _num(v: Any, default: int = -1) -> int:
    """An integer argument that some runtimes write as a string (``"0x0"``, ``"128"``)."""
    if v is None:
        return default
    if isinstance(v, int):
        return v
    try:
        return int(v, 0) if isinstance(v, str) else int(v)
    except (TypeError, ValueError, OverflowError):
        return default


def _ints(values: list[Any], ids: StableIds) -> np.ndarray:
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError):
        return np.fromiter((ids(v) for v in values), dtype=np.int64, count=len(values))


def _add_chunk(events: list[Event], c: _Columns, ids: StableIds, path: str) -> None:
    xs = [e for e in events if e.ph == "X"]
    if not xs:
        return
    n = len(xs)
    cat_kind: dict[str | None, int] = {}
    kinds = np.empty(n, dtype=np.int8)
    cats = [e.cat for e in xs]
    for cat in set(cats):
        cat_kind[cat] = KIND_CODES[CATEGORY_KIND.get((cat or "").lower(), "other")]
    kinds[:] = [cat_kind[x] for x in cats]
    ts = [e.ts for e in xs]
    dur = [e.dur for e in xs]
    if None in ts or None in dur:
        i = ts.index(None) if None in ts else dur.index(None)
        field = "ts" if None in ts else "dur"
        raise InputError(path, f"a complete ('X') event has no {field!r}: {xs[i].name!r}")
    start = np.asarray(ts, dtype=np.float64)
    d = np.asarray(dur, dtype=np.float64)
    if (d < 0).any():
        i = int(np.flatnonzero(d < 0)[0])
        raise InputError(path, f"{int((d < 0).sum())} events have a negative duration "
                               f"(first: {xs[i].name!r}, dur={d[i]})")
    args = [e.args for e in xs]
    no = Args()
    args = [a if a is not None else no for a in args]
    corr = np.fromiter((_num(a.correlation) for a in args), np.int64, n)
    ext = np.fromiter((_num(a.external_id) if a.external_id is not None else _num(a.external_id_old)
                       for a in args), np.int64, n)
    seq = np.fromiter((_num(a.seq_number) for a in args), np.int64, n)
    pid = _ints([e.pid if e.pid is not None else -1 for e in xs], ids)
    tid = _ints([e.tid if e.tid is not None else -1 for e in xs], ids)
    is_gpu = np.isin(kinds, [KIND_CODES[k] for k in GPU_KIND_SET])
    dev_arg = np.fromiter((_num(a.device, -2) for a in args), np.int64, n)
    str_arg = np.fromiter((_num(a.stream, -2) for a in args), np.int64, n)
    device = np.where(dev_arg >= -1, dev_arg, pid)
    stream = np.where(str_arg >= -1, str_arg, tid)
    device = np.where(is_gpu, device, -1)
    stream = np.where(is_gpu, stream, -1)
    base = c.n
    for i in np.flatnonzero(kinds == KIND_CODES["kernel"]).tolist():
        a = args[i]
        if a.collective is not None:
            c.coll_rows.append((base + i, a, xs[i].name))
    for i in np.flatnonzero(kinds == KIND_CODES["memcpy"]).tolist():
        a = args[i]
        c.mem_rows.append((base + i, xs[i].name, a.nbytes, a.kind))
    c.names.append(pa.array([e.name for e in xs], pa.string()).dictionary_encode())
    for key, arr in (("device", device), ("stream", stream), ("pid", pid), ("tid", tid), ("kind", kinds),
                     ("start", start), ("dur", d), ("correlation", corr), ("external_id", ext), ("seq", seq)):
        c.cols[key].append(arr)
    c.n += n


def _cat(arrs: list[np.ndarray], dtype: Any) -> np.ndarray:
    return np.concatenate(arrs) if arrs else np.empty(0, dtype)


def read_kineto(path: str, *, block: int | None = None, **_: Any) -> TraceFile:
    """Read one Kineto trace into one :class:`Part` per GPU device."""
    from ..schema import us_to_ns

    trace = ChromeTrace(path, Event, Meta, **({"block": block} if block else {}))
    ids = StableIds()
    c = _Columns()
    for chunk in trace.chunks():
        _add_chunk(chunk, c, ids, path)
    meta: Meta = trace.meta
    base_ns = int(meta.baseTimeNanoseconds or 0)
    kinds = _cat(c.cols["kind"], np.int8)
    start_us = _cat(c.cols["start"], np.float64)
    dur_us = _cat(c.cols["dur"], np.float64)
    start_ns = us_to_ns(start_us) + base_ns
    end_ns = start_ns + us_to_ns(dur_us)
    names = (pa.chunked_array(c.names, pa.dictionary(pa.int32(), pa.string())).unify_dictionaries()
             if c.names else pa.chunked_array([], pa.dictionary(pa.int32(), pa.string())))
    device = _cat(c.cols["device"], np.int64).astype(np.int32)
    kind_arr = pa.DictionaryArray.from_arrays(pa.array(kinds.astype(np.int32)), KIND_DICT)
    columns = {
        "rank": np.full(c.n, -1, np.int32),
        "device": device,
        "stream": _cat(c.cols["stream"], np.int64),
        "pid": _cat(c.cols["pid"], np.int64),
        "tid": _cat(c.cols["tid"], np.int64),
        "kind": kind_arr,
        "name": names,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "correlation": _cat(c.cols["correlation"], np.int64),
        "external_id": _cat(c.cols["external_id"], np.int64),
        "seq": _cat(c.cols["seq"], np.int64),
    }
    table = pa.table(columns)
    table = validate_events(table, path)
    del columns, start_us, dur_us

    gpu_mask = np.isin(kinds, [KIND_CODES["kernel"], KIND_CODES["memcpy"], KIND_CODES["memset"]])
    devices = sorted(set(np.unique(device[gpu_mask]).tolist()))
    dist = meta.distributedInfo
    rank_hint = dist.rank if dist is not None and dist.rank is not None else None
    file_meta = {
        "world_size": dist.world_size if dist is not None else None,
        "base_time_ns": base_ns,
        "events": int(c.n),
        "sha256": trace.sha256,
        "device_names": [d.get("name") for d in (meta.deviceProperties or []) if isinstance(d, dict)],
    }
    if not devices:
        raise NoGPUActivity(path, "no GPU activity: the trace has no kernel, memcpy or memset events "
                                  f"({c.n} host events)")
    coll = _collective_table(c.coll_rows)
    mem = _memcpy_table(c.mem_rows)
    parts = []
    host = device == -1
    for idx, dev in enumerate(devices):
        rows = np.flatnonzero(host | (device == dev))
        if len(devices) == 1:
            sub, remap = table, None
        else:
            sub = table.take(pa.array(rows))
            remap = rows
        parts.append(Part(device=int(dev), events=sub, collectives=_remap(coll, remap),
                          memcpy=_remap(mem, remap), local_index=idx))
    return TraceFile(path=path, format=NAME, parts=parts, rank_hint=rank_hint, meta=file_meta)


def _remap(side: pa.Table, rows: np.ndarray | None) -> pa.Table:
    """Keep the side-table rows whose event is in ``rows`` and renumber them."""
    if rows is None or side.num_rows == 0:
        return side
    old = side.column("row").to_numpy()
    pos = np.searchsorted(rows, old)
    pos = np.minimum(pos, len(rows) - 1)
    keep = rows[pos] == old if len(rows) else np.zeros(len(old), bool)
    out = side.filter(pa.array(keep))
    return out.set_column(0, "row", pa.array(pos[keep].astype(np.int64)))


_COLL_NORMAL = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather", "all_gather_into_tensor": "all_gather",
    "reducescatter": "reduce_scatter", "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
    "send": "send", "recv": "recv", "sendrecv": "send_recv", "alltoall": "all_to_all",
    "all_to_all": "all_to_all", "alltoall_base": "all_to_all", "all_to_allv": "all_to_all",
    "barrier": "barrier",
}


def normalize_collective(name: str) -> str:
    """``allreduce``/``AllReduce``/``all_reduce`` → ``all_reduce``; unknown names lower-cased."""
    key = name.strip().lower().replace(" ", "")
    return _COLL_NORMAL.get(key, _COLL_NORMAL.get(key.replace("_", ""), key))


def _raw(v: Any) -> Any:
    return v


def _as_int(v: Any, default: int = -1) -> int:
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return default


def _collective_table(rows: list[tuple[int, Args, str]]) -> pa.Table:
    out: dict[str, list[Any]] = {f.name: [] for f in COLLECTIVE_SCHEMA}
    for row, a, _name in rows:
        in_n = _as_int(_raw(a.in_nelems))
        out_n = _as_int(_raw(a.out_nelems))
        dtype = _raw(a.dtype)
        dtype = str(dtype) if dtype is not None else ""
        ranks = _raw(a.pg_ranks)
        size = _as_int(_raw(a.group_size))
        if isinstance(ranks, str):
            try:
                ranks = msgspec.json.decode(ranks.encode())
            except msgspec.DecodeError:
                pass
        ranks_txt = ("[" + ", ".join(str(r) for r in ranks) + "]") if isinstance(ranks, list) else (str(ranks) if ranks is not None else "")
        if size < 0 and isinstance(ranks, list):
            size = len(ranks)
        width = DTYPE_BYTES.get(dtype.lower().replace("c10::", ""), 0)
        nel = max(in_n, out_n)
        out["row"].append(row)
        out["collective"].append(normalize_collective(a.collective or ""))
        pg = _raw(a.pg_name)
        out["group"].append("" if pg is None else str(pg))
        out["group_ranks"].append(ranks_txt)
        out["group_size"].append(size)
        out["seq"].append(_as_int(_raw(a.seq)))
        out["in_nelems"].append(in_n)
        out["out_nelems"].append(out_n)
        out["dtype"].append(dtype)
        out["bytes"].append(nel * width if nel >= 0 and width else -1)
    return pa.table({k: pa.array(v, COLLECTIVE_SCHEMA.field(k).type.value_type
                                 if pa.types.is_dictionary(COLLECTIVE_SCHEMA.field(k).type)
                                 else COLLECTIVE_SCHEMA.field(k).type)
                     for k, v in out.items()}).cast(COLLECTIVE_SCHEMA)


_COPY_KIND = [
    (re.compile(r"htod|host\s*->\s*device|hosttodevice|h2d", re.I), "H2D"),
    (re.compile(r"dtoh|device\s*->\s*(pageable|pinned|host)|devicetohost|d2h", re.I), "D2H"),
    (re.compile(r"ptop|peer|p2p", re.I), "P2P"),
    (re.compile(r"dtod|device\s*->\s*device|devicetodevice|d2d", re.I), "D2D"),
    (re.compile(r"htoh|h2h", re.I), "H2H"),
]


def copy_kind(name: str, kind: str | None = None) -> str:
    """Direction of a memcpy from its name (``Memcpy HtoD (Pinned -> Device)``) or kind arg."""
    for text in (kind or "", name):
        for rx, k in _COPY_KIND:
            if rx.search(text):
                return k
    return "other"


def _memcpy_table(rows: list[tuple[int, str, float | None, str | None]]) -> pa.Table:
    cache: dict[tuple[str, str | None], str] = {}
    kinds = []
    for _row, name, _b, k in rows:
        key = (name, k)
        if key not in cache:
            cache[key] = copy_kind(name, k)
        kinds.append(cache[key])
    return pa.table({
        "row": pa.array([r[0] for r in rows], pa.int64()),
        "copy_kind": pa.array(kinds, pa.string()).dictionary_encode(),
        "bytes": pa.array([_num(r[2]) if not isinstance(r[2], float) else int(r[2]) for r in rows], pa.int64()),
    }).cast(MEMCPY_SCHEMA)
