"""PyTorch profiler (Kineto) JSON traces: ``*.json``, ``*.json.gz``, ``*.pt.trace.json[.gz]``.

Only the fields the event schema needs are decoded (typed msgspec structs, chunked: see
:mod:`._chrome`). Timestamps are float µs relative to ``baseTimeNanoseconds`` (or absolute
µs in older traces) and become absolute int64 ns. Old traces capitalise categories
(``Kernel``, ``Runtime``, ``Memcpy``); ROCm traces use ``hipLaunchKernel`` and report the
device in ``args.device``. A file whose GPU events sit on several devices becomes one part
per device; host events are shared by every part.

Meta's MTIA accelerator writes Kineto traces too (HTA reads them): its device activity is in
category ``mtia_ccp_events`` (``dma_request`` events are memory copies with ``direction`` and
``size``, every other event a kernel), launched by ``runFunction`` calls in ``mtia_runtime`` that
share the kernel's ``correlation``; the device is the events' pid (``MTIA 9``).

Two paths give the same tables: the pure one (msgspec structs, :func:`_add_chunk`) and, where the
optional extension is built, the compiled scanner's (:mod:`._scanned`, :func:`_add_scanned`),
which hands what it does not decode itself back to the pure code (``DTRACE_PURE_SCAN=1``: pure).
"""

from __future__ import annotations

import functools
import operator
from collections import Counter
from typing import Any, Protocol, TypeVar, cast

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.constants import GPU_KINDS, KIND_CODES, MEMSET, copy_kind, normalize_collective
from ..core.schema import (
    COLLECTIVE_SCHEMA,
    DTYPE_BYTES,
    KIND_DICT,
    MEMCPY_SCHEMA,
    MEMORY_SCHEMA,
    TIME_MAX_NS,
    TIME_MIN_NS,
    dropped_summary,
    implausible_times,
    us_to_ns,
    validate_events,
)
from ..errors import ImplausibleTimes, InputError, NoGPUActivity
from ._chrome import MAX_EVENT, ChromeTrace, Scanned
from ._collective_args import inherit_collective_args
from ._counters import PROFILER_RANGE, RangeBuffer
from ._ids import StableIds
from ._op_args import NO_RAW, OpArgsBuffer, device_table
from ._scanned import first_codes, new_scanner
from .base import Part, TraceFile

NAME = "kineto"
_T_co = TypeVar("_T_co", covariant=True)


class _ByRow(Protocol[_T_co]):
    """A block's values by row (a list, or a lookup of the few rows read)."""

    def __getitem__(self, i: int, /) -> _T_co: ...


# category (lower-cased) -> schema kind
CATEGORY_KIND = {
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
    "mtia_runtime": "runtime",  # runFunction - job_prep_and_submit_for_execution: the launch
    "mtia_ccp_events": "kernel",  # dma_request events become memcpy (see _mtia_kinds)
}
MTIA_DEVICE = "mtia_ccp_events"
MTIA_RUNTIME = "mtia_runtime"
MTIA_DMA = "dma_request"
MTIA_DIRECTION = {
    "HOST_TO_DEVICE": "HtoD",
    "DEVICE_TO_HOST": "DtoH",
    "DEVICE_TO_DEVICE": "DtoD",
    "HOST_TO_HOST": "HtoH",
}
GPU_KIND_SET = frozenset({*GPU_KINDS, "gpu_annotation"})


class Args(msgspec.Struct, gc=False, frozen=True):
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
    direction: str | None = None  # MTIA dma_request: HOST_TO_DEVICE, DEVICE_TO_HOST, ...
    size: int | float | str | None = None  # MTIA dma_request bytes
    # the allocator's [memory] instant events (profile_memory=True)
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    mem_bytes: Any = msgspec.field(default=None, name="Bytes")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    device_type: Any = msgspec.field(default=None, name="Device Type")
    addr: Any = msgspec.field(default=None, name="Addr")
    # record_shapes: raw JSON text for the op_args side table (see _op_args), which copies it out
    # while the block is processed: the text is a view of the read buffer, overwritten by the next
    input_dims: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input type")
    input_strides: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input Strides")
    concrete: msgspec.Raw = msgspec.field(default=NO_RAW, name="Concrete Inputs")


_NO_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    args: Args | None = _NO_ARGS  # absent args read as all fields unset (frozen, so shared safely)


class DistInfo(msgspec.Struct, gc=False):
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None


class Meta(msgspec.Struct, gc=False):
    otherData: Any = None  # noqa: N815 - JSON key; a dtrace timeline says so here
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
        self.cols: dict[str, list[np.ndarray]] = {
            k: []
            for k in ("device", "stream", "pid", "tid", "kind", "start", "dur", "correlation", "external_id", "seq")
        }
        self.names: list[pa.Array] = []
        self.coll_rows: list[tuple[int, Args, str]] = []
        self.coll_ops: list[tuple[int, Args]] = []  # host ops with collective args (record_param_comms)
        self.mem_rows: list[tuple[int, str, int | float | str | None, str | None]] = []
        self.categories: set[str | None] = set()  # every category seen (to name what an MTIA trace lacks)
        self.op_args = OpArgsBuffer()
        self.unread: Counter[str] = Counter()  # events of categories read as "other", by category
        self.ranges = RangeBuffer()  # hardware-counter ranges (CUPTI range profiling), see _counters
        self.has_ranges = False  # the block just added holds some: read them from its text
        self.ids = StableIds()  # string pids/tids → stable ints, across the file's blocks
        self.n = 0


_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _num(v: Any, default: int = -1) -> int:
    """An integer argument that some runtimes write as a string (``"0x0"``, ``"128"``)."""
    if v is None:
        return default
    if not isinstance(v, int):
        try:
            v = int(v, 0) if isinstance(v, str) else int(v)
        except (TypeError, ValueError, OverflowError):
            return default
    return v if _I64_MIN <= v <= _I64_MAX else default


_FEW = 256  # values converted one by one rather than by Arrow
_NONE = type(None)
_INT = {int}
_INT_OR_NONE = frozenset({int, _NONE})


def _int_column(values: list[Any], default: int) -> np.ndarray:
    """int64 column of integer-or-None values (``None`` → ``default``), vectorised.

    The common case (ints and ``None``) is converted by Arrow in C (a few values, by numpy: the
    same numbers without Arrow's fixed cost); values written as strings (``"0x7"``) or beyond
    int64 take the per-value path of :func:`_num`.
    """
    if len(values) <= _FEW:
        types = set(map(type, values))
        if types <= _INT_OR_NONE:
            try:
                return np.array([default if v is None else v for v in values] if _NONE in types else values, np.int64)
            except OverflowError:  # beyond int64: the per-value path below
                pass
    try:
        arr = pa.array(values, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
        return np.fromiter((_num(v, default) for v in values), np.int64, len(values))
    if arr.null_count:
        arr = arr.fill_null(default)
    return cast(np.ndarray, arr.to_numpy(zero_copy_only=False))


def _ints(values: list[Any], ids: StableIds) -> np.ndarray:
    """int64 ids (pid/tid): ints as they are, strings mapped to stable ints, ``None`` → -1."""
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):  # a few string ids: map each distinct value once
        lut = {v: -1 if v is None else ids(v) if isinstance(v, str) else _num(v) for v in set(values)}
        return np.fromiter(map(lut.__getitem__, values), dtype=np.int64, count=len(values))


_get = operator.attrgetter
_PH, _CAT, _NAME, _PID, _TID, _TS, _DUR, _ARGS = (
    _get(k) for k in ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args")
)
_A_CORR, _A_EXT, _A_EXT_OLD, _A_SEQ, _A_DEV, _A_STREAM, _A_COLL = (
    _get(k) for k in ("correlation", "external_id", "external_id_old", "seq_number", "device", "stream", "collective")
)
_DICT_TYPE = pa.dictionary(pa.int32(), pa.string())
_GPU_CODES = np.array(sorted(KIND_CODES[k] for k in GPU_KIND_SET), np.int8)
_KIND_OF_CAT: dict[str | None, int] = {}


def _kind_codes(enc: pa.DictionaryArray, unread: Counter[str] | None = None) -> np.ndarray:
    """Schema kind code of each event from its dictionary-encoded category (classified once per
    distinct category); the events of categories read as ``other`` are counted by category into
    ``unread``."""
    uniq = enc.dictionary.to_pylist()
    for u in uniq:
        if u not in _KIND_OF_CAT:
            _KIND_OF_CAT[u] = KIND_CODES[CATEGORY_KIND.get((u or "").lower(), "other")]
    lut = np.array([_KIND_OF_CAT[u] for u in uniq] + [KIND_CODES["other"]], np.int8)
    idx = (enc.indices.fill_null(len(uniq)) if enc.indices.null_count else enc.indices).to_numpy(zero_copy_only=False)
    if unread is not None and (lut[:-1] == KIND_CODES["other"]).any():
        counts = np.bincount(idx, minlength=len(lut))
        unread.update({u: int(counts[i]) for i, u in enumerate(uniq) if lut[i] == KIND_CODES["other"] and counts[i]})
    return cast(np.ndarray, lut[idx])


def _floats(xs: list[Event], get: Any, field: str, names: _ByRow[str], path: str) -> np.ndarray:
    """A float64 column; a missing value (``None``, read as NaN; JSON has no NaN) is an error."""
    return _no_missing(np.fromiter(map(get, xs), np.float64, len(xs)), field, names, path)


def _no_missing(out: np.ndarray, field: str, names: _ByRow[str], path: str) -> np.ndarray:
    """``out``, a float64 column of complete events; a NaN (a missing value) is an error naming the event."""
    missing = np.isnan(out)
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        raise InputError(path, f"a complete ('X') event has no {field!r}: {names[i]!r}")
    return out


def _add_chunk(events: list[Event], c: _Columns, ids: StableIds, path: str) -> None:
    """Append the complete (``ph == "X"``) events of one decoded chunk to the columns.

    Each field is pulled out of the structs with one C-level ``map(attrgetter)`` pass and
    converted by numpy/Arrow; the only per-event Python runs over the few collective and
    memcpy events.
    """
    xs = [e for e in events if e.ph == "X"]
    if not xs:
        return
    name_list = list(map(_NAME, xs))
    cats = pa.array(list(map(_CAT, xs)), _DICT_TYPE)
    kinds = _mtia_kinds(_kind_codes(cats, c.unread), cats, name_list)
    _note_categories(c, cats)
    start = _floats(xs, _TS, "ts", name_list, path)
    d = _floats(xs, _DUR, "dur", name_list, path)
    args = list(map(_ARGS, xs))
    if None in args:
        args = [_NO_ARGS if a is None else a for a in args]
    corr = _int_column(list(map(_A_CORR, args)), -1)
    ext = _external_ids(args)
    seq = _int_column(list(map(_A_SEQ, args)), -1)
    pid = _ints(list(map(_PID, xs)), ids)
    tid = _ints(list(map(_TID, xs)), ids)
    device, stream = _device_stream(kinds, args, pid, tid)
    base = c.n
    _add_collective_rows(c, kinds, args, name_list, base)
    names = pa.array(name_list, _DICT_TYPE)  # dictionary-encoded as it is built
    c.op_args.add(kinds, args, base, names)
    _add_memcpy_rows(c, kinds, args, name_list, base)
    _append_columns(c, names, device, stream, pid, tid, kinds, start, d, corr, ext, seq)


def _note_categories(c: _Columns, cats: pa.DictionaryArray) -> None:
    """Note the block's distinct categories (and whether it holds counter ranges)."""
    uniq = cats.dictionary.to_pylist()
    c.categories.update(uniq)
    c.has_ranges = PROFILER_RANGE in uniq


def _append_columns(c: _Columns, names: pa.DictionaryArray, *arrays: np.ndarray) -> None:
    """Append one block's columns (in :class:`_Columns` order from ``device``) and names."""
    c.names.append(names)
    for key, arr in zip(
        ("device", "stream", "pid", "tid", "kind", "start", "dur", "correlation", "external_id", "seq"), arrays
    ):
        c.cols[key].append(arr)
    c.n += len(names)


# -- blocks read by the compiled scanner (see _scanned) -------------------------------------
_SCAN_COLS = (
    ("cat", np.int32),
    ("name", np.int32),
    ("pid", np.int64),
    ("tid", np.int64),
    ("flags", np.uint8),
    ("ts", np.float64),
    ("dur", np.float64),
    ("correlation", np.int64),
    ("external_id", np.int64),
    ("external_id_old", np.int64),
    ("seq_number", np.int64),
    ("device", np.int64),
    ("stream", np.int64),
)
# the integer arguments and their value when absent, null or unreadable (as _int_column reads
# them; the scanner writes the same, _scan.c's arg_default)
_ARG_DEFAULTS = {
    "correlation": -1,
    "external_id": _I64_MIN,
    "external_id_old": -1,
    "seq_number": -1,
    "device": -2,
    "stream": -2,
}
_PID_STR, _TID_STR = 1, 2  # flags: the pid / tid is a string (its code)
_AUX_KIND, _AUX_BYTES = 4, 5  # the scanner's field numbers of args.kind and args.bytes
_IS_GPU = np.isin(np.arange(len(KIND_CODES)), _GPU_CODES)  # by kind code
_DEVICE_OP_CODES = [KIND_CODES["kernel"], KIND_CODES["memcpy"], KIND_CODES["memset"]]
_IS_DEVICE_OP = np.isin(np.arange(len(KIND_CODES)), _DEVICE_OP_CODES)  # kernels, copies and sets, by kind code


class _CodeNames:
    """The names of a block's events, looked up by row from their codes (for the few rows read)."""

    def __init__(self, codes: np.ndarray, strings: list[str]) -> None:
        self.codes, self.strings = codes, strings

    def __getitem__(self, i: int) -> str:
        return self.strings[int(self.codes[i])]


def _code(scanner: Any, s: str) -> int:
    """The scanner's code of ``s`` (interned now if new: the scanner's own tables change only
    through it)."""
    return int(scanner.intern(s))


class _Interned:
    """The scanner's interned strings as an Arrow array too (rebuilt as the list doubles), so a
    block's dictionary is a ``take`` of its codes rather than a Python list of its strings."""

    def __init__(self) -> None:
        self.arrow = pa.array([], pa.string())

    def values(self, codes: pa.Array, strings: list[str]) -> pa.Array:
        """The strings of ``codes`` (distinct codes, no nulls), as an Arrow string array."""
        if len(codes) and len(strings) > len(self.arrow) and len(strings) >= 2 * len(self.arrow):
            self.arrow = pa.array(strings, pa.string())
        if not len(codes) or pc.max(codes).as_py() < len(self.arrow):
            return self.arrow.take(codes)
        return pa.array([strings[k] for k in codes.to_pylist()], pa.string())


def _dict_array(codes: np.ndarray, strings: list[str], interned: _Interned) -> pa.DictionaryArray:
    """Codes (-1: null) as the dictionary array ``pa.array(values, _DICT_TYPE)`` builds: the
    distinct values in order of first occurrence."""
    assert first_codes is not None  # a scanned block: the extension is built
    local, dictionary = first_codes(codes, len(strings))
    indices = np.frombuffer(local, np.int32)
    null = indices < 0
    return pa.DictionaryArray.from_arrays(
        pa.array(indices, pa.int32(), mask=null if null.any() else None),
        _dict_values(np.frombuffer(dictionary, np.int32), strings, interned),
    )


def _dict_values(codes: np.ndarray, strings: list[str], interned: _Interned) -> pa.Array:
    """The strings of ``codes`` (distinct, no nulls): a small dictionary directly (no Arrow
    array of every interned string, no compute call), a large one by :class:`_Interned`."""
    if len(codes) <= _FEW:
        return pa.array([strings[k] for k in codes.tolist()], pa.string())
    return interned.values(pa.array(codes), strings)


def _scanned_columns(b: Scanned, scanner: Any) -> tuple[dict[str, np.ndarray], dict[int, Args], np.ndarray]:
    """The block's columns (complete events only), the args of its complete events msgspec
    decoded (by row) and its argument-text spans (rows renumbered to the columns')."""
    col = {k: np.frombuffer(v, t) for (k, t), v in zip(_SCAN_COLS, b.cols)}  # writable views of bytearrays
    if (col["name"] < 0).any():  # no "name": the struct's default, ""
        col["name"] = np.where(col["name"] < 0, _code(scanner, ""), col["name"]).astype(np.int32)
    aux = b.aux
    decoded: dict[int, Args] = {}
    if not b.fallback:
        return col, decoded, aux
    is_x = np.array(list(map(_PH, b.fallback))) == "X"
    xs = [e for e, x in zip(b.fallback, is_x.tolist()) if x]
    if xs:
        decoded = _fill_decoded(col, b.fb_recs[is_x], xs, scanner)
    drop = b.fb_recs[~is_x]
    if len(drop):
        col, decoded, aux = _drop_rows(col, decoded, aux, drop, b.n)
    return col, decoded, aux


def _fill_decoded(col: dict[str, np.ndarray], rows: np.ndarray, xs: list[Event], scanner: Any) -> dict[int, Args]:
    """Write the values of the complete events msgspec decoded (``xs``, at ``rows``) into the
    scanner's columns, as :func:`_add_chunk` reads them; their args by row."""
    col["cat"][rows] = _codes(scanner, list(map(_CAT, xs)))
    col["name"][rows] = _codes(scanner, list(map(_NAME, xs)))
    for key, flag, get in (("pid", _PID_STR, _PID), ("tid", _TID_STR, _TID)):
        values = list(map(get, xs))
        if set(map(type, values)) <= _INT_OR_NONE:  # the usual ids: no string to intern, no flag to set
            col[key][rows] = _int_column(values, -1)
            continue
        col[key][rows] = [_code(scanner, v) if isinstance(v, str) else _num(v) for v in values]
        col["flags"][rows] |= np.array([isinstance(v, str) for v in values], bool) * np.uint8(flag)
    col["ts"][rows] = np.fromiter(map(_TS, xs), np.float64, len(xs))
    col["dur"][rows] = np.fromiter(map(_DUR, xs), np.float64, len(xs))
    args = [_NO_ARGS if e.args is None else e.args for e in xs]
    for k, default in _ARG_DEFAULTS.items():
        col[k][rows] = _int_column(list(map(_get(k), args)), default)
    return dict(zip(rows.tolist(), args))


def _codes(scanner: Any, values: list[str | None]) -> list[int]:
    """The scanner's code of each string (interned in order of first occurrence if new; None: -1)."""
    codes = scanner.codes
    for v in dict.fromkeys(values):
        if v is not None and v not in codes:
            _code(scanner, v)
    return [-1 if v is None else codes[v] for v in values]


def _drop_rows(
    col: dict[str, np.ndarray], decoded: dict[int, Args], aux: np.ndarray, drop: np.ndarray, n: int
) -> tuple[dict[str, np.ndarray], dict[int, Args], np.ndarray]:
    """The columns without the rows of events that are not complete ones, the decoded args and
    the argument-text spans renumbered to the rows kept."""
    keep = np.ones(n, bool)
    keep[drop] = False
    new_row = np.cumsum(keep) - 1
    col = {k: v[keep] for k, v in col.items()}
    decoded = {int(new_row[r]): a for r, a in decoded.items()}
    if len(aux):
        aux = aux.copy()
        aux[:, 0] = new_row[aux[:, 0]]
    return col, decoded, aux


def _add_scanned(
    b: Scanned,
    c: _Columns,
    ids: StableIds,
    path: str,
    scanner: Any,
    interned: _Interned,
    memory: list[dict[str, np.ndarray]],
) -> None:
    """:func:`_add_chunk` and :func:`_add_memory` for a block the compiled scanner read: the same
    columns and side rows from the scanner's columns (numpy/Arrow on whole columns; Python only
    for the events it left to msgspec)."""
    col, decoded, aux = _scanned_columns(b, scanner)
    strings = scanner.strings
    if len(col["cat"]):
        cats = _dict_array(col["cat"], strings, interned)
        names = _dict_array(col["name"], strings, interned)
        name_seq = _CodeNames(col["name"], strings)
        kinds = _mtia_kinds(_kind_codes(cats, c.unread), cats, name_seq)
        _note_categories(c, cats)
        start = _no_missing(col["ts"], "ts", name_seq, path)
        d = _no_missing(col["dur"], "dur", name_seq, path)
        ext = col["external_id"]
        if (ext == _I64_MIN).any():
            ext = np.where(ext == _I64_MIN, col["external_id_old"], ext)
        pid = _scanned_ids(col["pid"], col["flags"] & _PID_STR, strings, ids)
        tid = _scanned_ids(col["tid"], col["flags"] & _TID_STR, strings, ids)
        gpu_rows = np.flatnonzero(_IS_GPU[kinds])
        device, stream = _gpu_places(len(kinds), gpu_rows, col["device"][gpu_rows], col["stream"][gpu_rows], pid, tid)
        base = c.n
        if decoded:  # collective args only come with events msgspec decoded
            for r in sorted(decoded):
                if kinds[r] == KIND_CODES["kernel"] and decoded[r].collective is not None:
                    c.coll_rows.append((base + r, decoded[r], name_seq[r]))
            for r in sorted(decoded):
                if kinds[r] == KIND_CODES["cpu_op"] and decoded[r].collective is not None:
                    c.coll_ops.append((base + r, decoded[r]))
        c.op_args.add_spans(kinds, base, names, b.text, aux, decoded)
        _add_memcpy_rows(c, kinds, _ScannedArgs(decoded, aux, b.text, kinds), name_seq, base)
        corr, seq = col["correlation"], col["seq_number"]
        _append_columns(c, names, device, stream, pid, tid, kinds, start, d, corr, ext, seq)
    if b.fallback:
        _add_memory(b.fallback, memory, ids)


def _scanned_ids(values: np.ndarray, is_str: np.ndarray, strings: list[str], ids: StableIds) -> np.ndarray:
    """pid/tid column: the string ones (codes) mapped by ``ids``, once per distinct string."""
    if not is_str.any():
        return values
    out: np.ndarray = values.copy()
    rows = np.flatnonzero(is_str)
    codes = values[rows]
    uniq, inv = np.unique(codes, return_inverse=True)
    out[rows] = np.array([ids(strings[k]) for k in uniq.tolist()], np.int64)[inv]
    return out


class _ScannedArgs:
    """The ``args`` of a scanned block's memory copies and sets, by row: those msgspec decoded,
    else only ``kind`` and ``bytes`` (from the scanner; the other fields a copy reads send an
    event to msgspec)."""

    def __init__(self, decoded: dict[int, Args], aux: np.ndarray, text: memoryview, kinds: np.ndarray) -> None:
        self.decoded, self.text = decoded, text
        copies = (kinds == KIND_CODES["memcpy"]) | (kinds == KIND_CODES["memset"])
        mine = aux[copies[aux[:, 0]]] if len(aux) and copies.any() else aux[:0]
        kind = mine[mine[:, 1] == _AUX_KIND]
        nbytes = mine[mine[:, 1] == _AUX_BYTES]
        self.kind = dict(zip(kind[:, 0].tolist(), zip(kind[:, 2].tolist(), kind[:, 3].tolist())))
        self.nbytes = dict(zip(nbytes[:, 0].tolist(), nbytes[:, 2].tolist()))

    def __getitem__(self, i: int) -> Args:
        got = self.decoded.get(i)
        if got is not None:
            return got
        span, nbytes = self.kind.get(i), self.nbytes.get(i)
        if span is None and nbytes is None:
            return _NO_ARGS
        kind = None if span is None else bytes(self.text[span[0] : span[1]]).decode()
        return Args(kind=kind, nbytes=nbytes)


def _external_ids(args: list[Args]) -> np.ndarray:
    """The events' ``External id`` (else the old ``external id``; -1 without either)."""
    ext = _int_column(list(map(_A_EXT, args)), _I64_MIN)  # "External id", else old "external id"
    if (ext == _I64_MIN).any():
        ext = np.where(ext == _I64_MIN, _int_column(list(map(_A_EXT_OLD, args)), -1), ext)
    return ext


def _device_stream(
    kinds: np.ndarray, args: list[Args], pid: np.ndarray, tid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Device and stream of each event: the GPU events' ``device``/``stream`` args (else their
    pid/tid); -1 on host events."""
    gpu_rows = np.flatnonzero(_IS_GPU[kinds])
    gargs = [args[i] for i in gpu_rows.tolist()]  # device/stream only matter on the (few) GPU events
    dev_arg = _int_column(list(map(_A_DEV, gargs)), -2)
    str_arg = _int_column(list(map(_A_STREAM, gargs)), -2)
    return _gpu_places(len(kinds), gpu_rows, dev_arg, str_arg, pid, tid)


def _gpu_places(
    n: int, gpu_rows: np.ndarray, dev_arg: np.ndarray, str_arg: np.ndarray, pid: np.ndarray, tid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Device and stream columns of ``n`` events: at ``gpu_rows`` the ``device``/``stream`` args
    (-2: absent or unreadable, then pid/tid), -1 elsewhere."""
    device = np.full(n, -1, np.int64)
    stream = np.full(n, -1, np.int64)
    device[gpu_rows] = np.where(dev_arg >= -1, dev_arg, pid[gpu_rows])
    stream[gpu_rows] = np.where(str_arg >= -1, str_arg, tid[gpu_rows])
    return device, stream


def _add_collective_rows(c: _Columns, kinds: np.ndarray, args: list[Args], names: _ByRow[str], base: int) -> None:
    """Note the chunk's collective kernels (their args) and the host ops that launch collectives."""
    kernel_rows = np.flatnonzero(kinds == KIND_CODES["kernel"]).tolist()
    colls = list(map(_A_COLL, map(args.__getitem__, kernel_rows))) if kernel_rows else []
    for i, coll in zip(kernel_rows, colls):
        if coll is not None:
            c.coll_rows.append((base + i, args[i], names[i]))
    c.coll_ops += _collective_ops(kinds, args, base)


def _add_memcpy_rows(c: _Columns, kinds: np.ndarray, args: _ByRow[Args], names: _ByRow[str], base: int) -> None:
    """Note the chunk's memory copies and sets (bytes, direction), in event order."""
    is_set = kinds == KIND_CODES["memset"]
    for i in np.flatnonzero(is_set | (kinds == KIND_CODES["memcpy"])).tolist():  # in event order
        a = args[i]
        if a.direction is not None and a.kind is None:  # an MTIA DMA request
            c.mem_rows.append((base + i, names[i], a.size, MTIA_DIRECTION.get(a.direction, a.direction)))
            continue
        c.mem_rows.append((base + i, names[i], a.nbytes, MEMSET if is_set[i] else a.kind))


def _mtia_kinds(kinds: np.ndarray, cats: pa.DictionaryArray, names: _ByRow[str]) -> np.ndarray:
    """MTIA device events (category ``mtia_ccp_events``): ``dma_request`` is a memory copy, every
    other event a kernel. Other traces pass unchanged (one look at the chunk's distinct categories)."""
    uniq = cats.dictionary.to_pylist()
    if MTIA_DEVICE not in uniq:
        return kinds
    idx = cats.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(idx == uniq.index(MTIA_DEVICE))
    dma = np.fromiter((names[i] == MTIA_DMA for i in rows.tolist()), bool, len(rows))
    out: np.ndarray = kinds.copy()
    out[rows[dma]] = KIND_CODES["memcpy"]
    return out


def _no_gpu_activity(path: str, n: int, categories: set[str | None], unread: Counter[str]) -> NoGPUActivity:
    """The one-line error of a trace without GPU events, naming what it holds instead: for an MTIA
    trace what is missing, else the categories read as ``other``."""
    if MTIA_RUNTIME in categories:
        return NoGPUActivity(
            path,
            f"no MTIA device activity: the trace has MTIA runtime launches ({MTIA_RUNTIME!r}) but no "
            f"{MTIA_DEVICE!r} events ({n} host events); record the MTIA CCP events to analyse it",
        )
    found = [(c, k) for c, k in unread.most_common() if c and c.lower() != "trace"]  # "Trace": the profiler's span
    other = f"; other categories: {', '.join(f'{c} ({k:,})' for c, k in found[:3])}" if found else ""
    return NoGPUActivity(
        path, f"no GPU activity: the trace has no kernel, memcpy or memset events ({n} host events{other})"
    )


def _collective_ops(kinds: np.ndarray, args: list[Args], base: int) -> list[tuple[int, Args]]:
    """``(row, args)`` of the chunk's host ops that carry collective args (``record_param_comms``)."""
    rows = np.flatnonzero(kinds == KIND_CODES["cpu_op"])
    if not len(rows):
        return []
    named = pa.array(list(map(_A_COLL, map(args.__getitem__, rows.tolist()))), pa.string()).is_valid()
    return [(base + i, args[i]) for i in rows[named.to_numpy(zero_copy_only=False)].tolist()]


def _kept_rows(rows: list[Any], kept: np.ndarray) -> list[Any]:
    """Row-keyed tuples (row first) of the kept events, renumbered to their new rows."""
    if not rows or not len(kept):
        return []
    old = np.array([r[0] for r in rows], np.int64)
    pos = np.minimum(np.searchsorted(kept, old), len(kept) - 1)
    ok = kept[pos] == old
    return [(int(p), *r[1:]) for r, p, k in zip(rows, pos.tolist(), ok.tolist()) if k]


def _cat(arrs: list[np.ndarray], dtype: Any) -> np.ndarray:
    return np.concatenate(arrs) if arrs else np.empty(0, dtype)


def read_kineto(
    path: str, *, block: int | None = None, max_input_size: int | None = None, max_event_size: int = MAX_EVENT, **_: Any
) -> TraceFile:
    """Read one Kineto trace into one :class:`Part` per GPU device.

    Events with implausible times are dropped and counted by reason in
    ``meta["dropped_events"]`` (:func:`dtrace.core.schema.implausible_times`); ``max_input_size``
    limits the decompressed content and ``max_event_size`` one event's JSON text.
    """
    scanner = new_scanner()  # the compiled scanner, None: the pure path (see _scanned)
    trace = ChromeTrace(
        path,
        Event,
        Meta,
        **({"block": block} if block else {}),
        max_event=max_event_size,
        max_size=max_input_size,
        raw_fields=True,  # the Raw argument texts, read while their block is processed (_op_args)
        scanner=scanner,
    )
    c, memory = _read_blocks(trace, path, scanner)
    meta: Meta = trace.meta
    base_ns = _origin(meta.baseTimeNanoseconds, path)
    cols, names = _joined_columns(c)
    with np.errstate(over="ignore", invalid="ignore"):  # 1e308 µs * 1000 is inf: dropped, never a warning
        keep, dropped = implausible_times(cols["start"] * 1000.0 + base_ns, cols["dur"] * 1000.0, path)
    coll_rows, coll_ops = c.coll_rows, c.coll_ops
    mem = _memcpy_table(c.mem_rows)
    op_args = c.op_args.table(None if keep is None else np.flatnonzero(keep))
    n_gpu = int(np.count_nonzero(_IS_DEVICE_OP[cols["kind"]]))
    if keep is not None:
        cols = {k: v[keep] for k, v in cols.items()}
        names = names.filter(pa.array(keep))
        kept = np.flatnonzero(keep)
        mem = _remap(mem, kept)
        coll_rows, coll_ops = _kept_rows(coll_rows, kept), _kept_rows(coll_ops, kept)
    n = len(cols["kind"])
    kinds = cols["kind"]
    device = cols["device"].astype(np.int32)
    table = _event_table(cols, names, device, base_ns, path)
    del cols

    gpu_mask = _IS_DEVICE_OP[kinds]
    ranges = c.ranges.tables(base_ns, c.ids)  # per device: the counter ranges (CUPTI range profiling)
    devices = sorted(set(np.unique(device[gpu_mask]).tolist()) | set(ranges))
    dist = meta.distributedInfo
    rank_hint = dist.rank if dist is not None and dist.rank is not None else None
    file_meta = _file_meta(meta, trace.fingerprint, base_ns, n, dropped)
    if not devices:
        if dropped and n_gpu:
            raise ImplausibleTimes(path, f"all {n_gpu} GPU events have implausible times ({dropped_summary(dropped)})")
        raise _no_gpu_activity(path, n, c.categories, c.unread)
    coll = _collective_table(
        sorted(coll_rows + inherit_collective_args(table, coll_rows, coll_ops), key=operator.itemgetter(0))
    )
    side = {"collectives": coll, "memcpy": mem, "op_args": op_args}
    per_device = _memory_tables(memory, base_ns, devices)
    for dev, tables in ranges.items():
        per_device[dev] = {**per_device.get(dev, {}), **tables}
    parts = _device_parts(table, device, devices, side, per_device, meta)
    return TraceFile(path=path, format=NAME, parts=parts, rank_hint=rank_hint, meta=file_meta)


def _read_blocks(trace: ChromeTrace, path: str, scanner: Any) -> tuple[_Columns, list[dict[str, np.ndarray]]]:
    """The columns of every block of the events array (the scanner's or msgspec's), the memory
    events' rows and the counter ranges (read again from the text of the blocks that hold some)."""
    c = _Columns()
    ids = c.ids
    interned = _Interned()
    memory: list[dict[str, np.ndarray]] = []
    for chunk in trace.chunks():
        text: memoryview | None
        if isinstance(chunk, Scanned):
            _add_scanned(chunk, c, ids, path, scanner, interned, memory)
            text = chunk.text
        else:
            _add_chunk(chunk, c, ids, path)
            _add_memory(chunk, memory, ids)
            text = trace.text
        if c.has_ranges and text is not None:
            c.ranges.add(text, path)
            c.has_ranges = False
        del chunk, text  # views of the read buffer live no longer than their block
        trace.text = None
    return c, memory


def _joined_columns(c: _Columns) -> tuple[dict[str, np.ndarray], pa.ChunkedArray]:
    """Each column's blocks joined, and the names (one dictionary). A column's blocks are dropped
    as soon as they are joined: the peak holds one column twice, not all."""
    cols = {k: _cat(c.cols.pop(k), _COLUMN_DTYPES.get(k, np.int64)) for k in list(c.cols)}
    names = pa.chunked_array(c.names, _DICT_TYPE)
    c.names = []
    return cols, names.unify_dictionaries() if len(names.chunks) else names


_COLUMN_DTYPES: dict[str, Any] = {"start": np.float64, "dur": np.float64, "kind": np.int8}


def _event_table(
    cols: dict[str, np.ndarray], names: pa.ChunkedArray, device: np.ndarray, base_ns: int, path: str
) -> pa.Table:
    """The validated events table of the joined columns (times in µs from ``base_ns``)."""
    n = len(cols["kind"])
    start_ns = us_to_ns(cols["start"]) + base_ns
    end_ns = start_ns + us_to_ns(cols["dur"])
    kind_arr = pa.DictionaryArray.from_arrays(pa.array(cols["kind"].astype(np.int32)), KIND_DICT)
    columns = {
        "rank": np.full(n, -1, np.int32),
        "device": device,
        "stream": cols["stream"],
        "pid": cols["pid"],
        "tid": cols["tid"],
        "kind": kind_arr,
        "name": names,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "correlation": cols["correlation"],
        "external_id": cols["external_id"],
        "seq": cols["seq"],
    }
    table = pa.table(columns)
    return validate_events(table, path)


def _file_meta(meta: Meta, fingerprint: Any, base_ns: int, n: int, dropped: dict[str, int]) -> dict[str, Any]:
    """The trace file's ``meta``: world size, time origin, events kept and dropped, devices, generator."""
    generator = meta.otherData.get("generator") if isinstance(meta.otherData, dict) else None
    dist = meta.distributedInfo
    return {
        "world_size": dist.world_size if dist is not None else None,
        "base_time_ns": base_ns,
        "events": n,
        "dropped_events": dropped,
        "fingerprint": fingerprint,
        "device_names": [d.get("name") for d in (meta.deviceProperties or []) if isinstance(d, dict)],
        "generator": generator if isinstance(generator, str) else None,  # what wrote the file (otherData)
    }


def _device_parts(
    table: pa.Table,
    device: np.ndarray,
    devices: list[int],
    side: dict[str, pa.Table],
    mem_by_device: dict[int, dict[str, pa.Table]],
    meta: Meta,
) -> list[Part]:
    """One part per GPU device: its events and the host's (the whole table for one device), and
    the rows of ``side`` (collectives, memcpy, op_args) of those events."""
    parts = []
    host = device == -1
    for idx, dev in enumerate(devices):
        rows = np.flatnonzero(host | (device == dev))
        if len(devices) == 1:
            sub, remap = table, None
        else:
            sub = table.take(pa.array(rows))
            remap = rows
        parts.append(
            Part(
                device=int(dev),
                events=sub,
                collectives=_remap(side["collectives"], remap),
                memcpy=_remap(side["memcpy"], remap),
                local_index=idx,
                side={
                    **mem_by_device.get(int(dev), {}),
                    "op_args": _remap(side["op_args"], remap),
                    "devices": device_table(meta.deviceProperties, int(dev)),
                },
            )
        )
    return parts


def _origin(base: int | None, path: str) -> int:
    """``baseTimeNanoseconds`` (0 if absent), which must lie in 1970-2200."""
    base_ns = int(base or 0)
    if not TIME_MIN_NS <= base_ns < TIME_MAX_NS:
        raise ImplausibleTimes(path, f"baseTimeNanoseconds {base_ns} is outside 1970-2200")
    return base_ns


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


def _as_int(v: Any, default: int = -1) -> int:
    """``v`` as an int64 value; ``default`` (not stated) for anything else, a number beyond int64
    (a sequence number of 2^70) included."""
    try:
        i = int(v)
    except (TypeError, ValueError, OverflowError):
        return default
    return i if -(2**63) <= i < 2**63 else default


def _group_ranks(ranks: Any) -> tuple[str, int]:
    """``Process Group Ranks`` (a list, or a list written as a string) as text, and its length."""
    if isinstance(ranks, str):
        try:
            ranks = msgspec.json.decode(ranks.encode())
        except msgspec.DecodeError:
            return ranks, -1
    if isinstance(ranks, list):
        return "[" + ", ".join(str(r) for r in ranks) + "]", len(ranks)
    return ("" if ranks is None else str(ranks)), -1


@functools.lru_cache(maxsize=1 << 12)
def _group_text(ranks: str) -> tuple[str, int]:
    """:func:`_group_ranks` of a rank list written as text, once per process (every rank of a job
    repeats its groups' lists: a 4,096-rank group is parsed and written once, not per input)."""
    return _group_ranks(ranks)


def _memo_group(groups: dict[Any, tuple[str, int]], ranks: Any) -> tuple[str, int]:
    """:func:`_group_ranks` of a collective's rank list, once per distinct list (``groups``; a
    list written as text once per process)."""
    if type(ranks) is str:  # a text equals only the same text: remembered across inputs
        return _group_text(ranks)
    key = tuple(ranks) if isinstance(ranks, list) else ranks
    try:
        return groups[key]
    except (KeyError, TypeError):  # TypeError: a list of unhashable items; no memo then
        ranks_txt, n_ranks = _group_ranks(ranks)
        if not isinstance(key, (list, dict)):
            try:
                groups[key] = (ranks_txt, n_ranks)
            except TypeError:
                pass
        return ranks_txt, n_ranks


def _collective_table(rows: list[tuple[int, Args, str]]) -> pa.Table:
    """The ``collectives`` side table of the kernels ``rows`` (``(row, args, name)``), column by
    column: each field pulled out of every row's args in one C-level ``map``, and the texts
    (collective, dtype, rank list) converted once per distinct value."""
    args = list(map(_ARGS_OF_ROW, rows))
    in_n = _as_ints(list(map(_A_IN, args)))
    out_n = _as_ints(list(map(_A_OUT, args)))
    dtypes = ["" if d is None else str(d) for d in map(_A_DTYPE, args)]
    rank_lists, sizes = _group_members(args)
    names = {c: normalize_collective(c) for c in {a.collective or "" for a in args}}
    out = {
        "row": [r[0] for r in rows],
        "collective": [names[a.collective or ""] for a in args],
        "group": ["" if pg is None else str(pg) for pg in map(_A_PG, args)],
        "group_ranks": rank_lists,
        "group_size": sizes,
        "seq": _as_ints(list(map(_A_SEQ_C, args))),
        "in_nelems": in_n,
        "out_nelems": out_n,
        "dtype": dtypes,
        "bytes": _collective_bytes(in_n, out_n, dtypes),
    }
    return pa.Table.from_arrays([pa.array(out[k], t) for k, t in _COLLECTIVE_TYPES], schema=COLLECTIVE_SCHEMA)


def _group_members(args: list[Args]) -> tuple[list[str], list[int]]:
    """Each collective's rank-list text, and its group size (the length of its rank list where
    the trace states no size); a rank list is read once per distinct value."""
    groups: dict[Any, tuple[str, int]] = {}  # every collective of a group repeats its rank list
    ranks = [_memo_group(groups, r) for r in map(_A_RANKS, args)]
    sizes = _as_ints(list(map(_A_SIZE, args)))
    return [txt for txt, _n in ranks], [n if size < 0 and n >= 0 else size for size, (_txt, n) in zip(sizes, ranks)]


def _collective_bytes(in_n: list[int], out_n: list[int], dtypes: list[str]) -> list[int]:
    """Bytes of each collective: its larger element count times its dtype's width (-1 unknown)."""
    widths = {d: DTYPE_BYTES.get(d.lower().replace("c10::", ""), 0) for d in set(dtypes)}
    nbytes = []
    for i, o, d in zip(in_n, out_n, dtypes):
        nel, width = max(i, o), widths[d]
        nbytes.append(nel * width if nel >= 0 and width and nel * width < 2**63 else -1)
    return nbytes


_ARGS_OF_ROW = operator.itemgetter(1)
_A_IN, _A_OUT, _A_DTYPE, _A_RANKS, _A_SIZE, _A_PG, _A_SEQ_C = (
    _get(k) for k in ("in_nelems", "out_nelems", "dtype", "pg_ranks", "group_size", "pg_name", "seq")
)


def _as_ints(values: list[Any]) -> list[int]:
    """:func:`_as_int` of each value (ints within int64, the usual case, as they are)."""
    if not values or (set(map(type, values)) == _INT and min(values) >= _I64_MIN and max(values) <= _I64_MAX):
        return values
    return [_as_int(v) for v in values]


_COLLECTIVE_TYPES = [(f.name, f.type) for f in COLLECTIVE_SCHEMA]


@functools.lru_cache(maxsize=1 << 12)
def _copy_kind_of(name: str, kind: str | None) -> str:
    """The copy kind of a (name, kind argument) pair, once per process (the ranks of a job repeat
    the same few copies: their names are matched once, not once per input)."""
    return MEMSET if kind == MEMSET else copy_kind(name, kind)


def _memcpy_table(rows: list[tuple[int, str, int | float | str | None, str | None]]) -> pa.Table:
    return pa.Table.from_arrays(
        [
            pa.array([r[0] for r in rows], pa.int64()),
            pa.array([_copy_kind_of(name, k) for _row, name, _b, k in rows], pa.string()).dictionary_encode(),
            pa.array([max(_num(r[2]), -1) for r in rows], pa.int64()),  # beyond int64, NaN, < 0: -1 (unknown)
        ],
        schema=MEMCPY_SCHEMA,
    )


# -- the allocator's memory events ------------------------------------------------------------
MEMORY_EVENT = "[memory]"
CPU_DEVICE_TYPE = 0  # c10::DeviceType::CPU; every other type is device memory
_A_ALLOC, _A_RESERVED, _A_MBYTES, _A_DEV_ID, _A_DEV_TYPE, _A_ADDR = (
    _get(k) for k in ("total_allocated", "total_reserved", "mem_bytes", "device_id", "device_type", "addr")
)


def _add_memory(events: list[Event], out: list[dict[str, np.ndarray]], ids: StableIds) -> None:
    """Append the ``[memory]`` instant events (``ph == "i"``) of one decoded chunk to ``out`` as
    columns (the few matching events are found with one comprehension; fields by ``attrgetter``)."""
    xs = [e for e in events if e.ph == "i" and e.name == MEMORY_EVENT]
    if not xs:
        return
    args = [_NO_ARGS if a is None else a for a in map(_ARGS, xs)]
    ts = np.fromiter((np.nan if t is None else t for t in map(_TS, xs)), np.float64, len(xs))
    out.append(
        {
            "ts": ts,
            "pid": _ints(list(map(_PID, xs)), ids),
            "tid": _ints(list(map(_TID, xs)), ids),
            "bytes": _int_column(list(map(_A_MBYTES, args)), 0),
            "allocated": _int_column(list(map(_A_ALLOC, args)), -1),
            "reserved": _int_column(list(map(_A_RESERVED, args)), -1),
            "addr": _int_column(list(map(_A_ADDR, args)), -1),
            "device_id": _int_column(list(map(_A_DEV_ID, args)), -1),
            "device_type": _int_column(list(map(_A_DEV_TYPE, args)), CPU_DEVICE_TYPE),
        }
    )


def _memory_tables(
    chunks: list[dict[str, np.ndarray]], base_ns: int, devices: list[int]
) -> dict[int, dict[str, pa.Table]]:
    """The ``memory`` side table of each of the file's GPUs: its device memory events (not CPU
    memory) with plausible times, in file order, as ``{device: {"memory": table}}``."""
    if not chunks:
        return {}
    col = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
    with np.errstate(over="ignore", invalid="ignore"):
        keep, _ = implausible_times(col["ts"] * 1000.0 + base_ns, np.zeros(len(col["ts"])))
    ok = (col["device_type"] != CPU_DEVICE_TYPE) & np.isin(col["device_id"], devices)
    if keep is not None:
        ok &= keep
    out: dict[int, dict[str, pa.Table]] = {}
    time_ns = us_to_ns(np.where(ok, col["ts"], 0.0)) + base_ns
    for dev in _unique_ints(col["device_id"][ok]):  # a loop over the file's GPUs (one or a few)
        rows = ok & (col["device_id"] == dev)
        out[dev] = {
            "memory": pa.table(
                {
                    "time_ns": time_ns[rows],
                    "pid": col["pid"][rows],
                    "tid": col["tid"][rows],
                    "bytes": col["bytes"][rows],
                    "allocated": col["allocated"][rows],
                    "reserved": col["reserved"][rows],
                    "addr": col["addr"][rows],
                },
                schema=MEMORY_SCHEMA,
            )
        }
    return out


def _unique_ints(x: np.ndarray) -> list[int]:
    """The distinct values of an integer array, sorted, as Python ints."""
    return sorted(set(np.asarray(x).tolist()))
