"""The normalized event table (docs/semantics.md, "Event table"): one schema, validated in one function.

Every reader returns, per (rank, device), an Arrow table with at least the columns of
:data:`EVENT_SCHEMA`, plus two side tables keyed by the event's row in that table:
:data:`COLLECTIVE_SCHEMA` (NCCL/RCCL metadata) and :data:`MEMCPY_SCHEMA` (copy kind, bytes).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, cast

import numpy as np
import pyarrow as pa

from ..errors import InputError
from .constants import GPU_KINDS, KIND_CODES, KINDS

__all__ = [
    "KINDS",
    "GPU_KINDS",
    "KIND_CODES",
    "KIND_DICT",
    "EVENT_SCHEMA",
    "COLLECTIVE_SCHEMA",
    "MEMCPY_SCHEMA",
    "MEMORY_SCHEMA",
    "OP_ARGS_SCHEMA",
    "DEVICE_SCHEMA",
    "COUNTER_RANGE_SCHEMA",
    "RANGE_COUNTER_SCHEMA",
    "SIDE_SCHEMAS",
]

_DICT = pa.dictionary(pa.int32(), pa.string())
KIND_DICT = pa.array(list(KINDS), pa.string())
"""The dictionary of the event table's ``kind`` column (codes: :data:`~dtrace.core.constants.KIND_CODES`)."""

EVENT_SCHEMA = pa.schema(
    [
        ("rank", pa.int32()),
        ("device", pa.int32()),
        ("stream", pa.int64()),
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("kind", _DICT),
        ("name", _DICT),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("correlation", pa.int64()),
        ("external_id", pa.int64()),
    ]
)
"""Required columns of the event table, in order. Readers may append more columns."""

OPTIONAL_EVENT_COLUMNS = {
    "seq": pa.int64(),  # forward/backward "Sequence number" of cpu ops (-1 if none)
}

COLLECTIVE_SCHEMA = pa.schema(
    [
        ("row", pa.int64()),  # row of the kernel in the event table
        ("collective", _DICT),  # all_reduce, all_gather, reduce_scatter, send_recv, ...
        ("group", _DICT),  # process group name ("" if unknown)
        ("group_ranks", _DICT),  # the group's global ranks as text, "[0, 1, ...]"
        ("group_size", pa.int32()),  # -1 if unknown
        ("seq", pa.int64()),  # collective sequence number in its group (-1 if unknown)
        ("in_nelems", pa.int64()),
        ("out_nelems", pa.int64()),
        ("dtype", _DICT),
        ("bytes", pa.int64()),  # message bytes (max of in/out), -1 if unknown
    ]
)

MEMCPY_SCHEMA = pa.schema(
    [
        ("row", pa.int64()),
        ("copy_kind", _DICT),  # H2D, D2H, D2D, P2P, H2H, other; memset for memsets
        ("bytes", pa.int64()),  # -1 if unknown
    ]
)

MEMORY_SCHEMA = pa.schema(
    [
        ("time_ns", pa.int64()),  # when the allocator event happened (absolute ns)
        ("pid", pa.int64()),  # host process and thread that allocated or freed
        ("tid", pa.int64()),
        ("bytes", pa.int64()),  # > 0 an allocation, < 0 a free
        ("allocated", pa.int64()),  # bytes allocated on the device after the event (-1 unknown)
        ("reserved", pa.int64()),  # bytes the caching allocator holds after the event (-1 unknown)
        ("addr", pa.int64()),  # the block's address (-1 unknown)
    ]
)
"""The device memory events of a part (Kineto ``[memory]`` instant events of its GPU), records
of their own in file order (no ``row``: they are not in the event table)."""
OP_ARGS_SCHEMA = pa.schema(
    [
        ("row", pa.int64()),  # row of the host op (cpu_op) in the event table
        # "Input Dims", "Input type", "Input Strides", "Concrete Inputs" as recorded (JSON text, ""
        # if not recorded), each followed by ARGS_SEP: one dictionary column stores and loads in
        # half the time of four, and a training step repeats the same few hundred combinations
        ("args", _DICT),
    ]
)
"""The arguments ``record_shapes=True`` records for a host op (docs/semantics.md, "Event table")."""

ARGS_SEP = "\x1f"
"""Ends each of the four texts of ``op_args.args`` (the unit separator: JSON text never holds it raw)."""

DEVICE_SCHEMA = pa.schema(
    [
        ("device", pa.int32()),  # the device id, as the event table's ``device``
        ("name", _DICT),  # the name the runtime reports ("NVIDIA H100 80GB HBM3")
        ("vendor", _DICT),  # "nvidia", "amd" or ""
        ("capability", _DICT),  # compute capability "9.0" (ROCm: the gfx version, "9.4" for gfx942)
        ("sms", pa.int32()),  # streaming multiprocessors / compute units, -1 if unknown
        ("memory_bytes", pa.int64()),  # device memory, -1 if unknown
    ]
)
"""The properties of a part's GPU as the trace states them (one row per part; no ``row``)."""

COUNTER_RANGE_SCHEMA = pa.schema(
    [
        ("range", pa.int64()),  # the range's index in its part: by start, ties in file order
        ("start_ns", pa.int64()),  # the range as the profiler wrote it (absolute ns)
        ("end_ns", pa.int64()),
        ("name", _DICT),  # the profiled kernel's name (CUPTI's range name where it has none)
    ]
)
"""The hardware-counter ranges of a part's GPU (Kineto ``cuda_profiler_range`` events, CUPTI range
profiling), one row per range; records of their own (no ``row``), their counters in
:data:`RANGE_COUNTER_SCHEMA` (docs/semantics.md, "Hardware counters")."""

RANGE_COUNTER_SCHEMA = pa.schema(
    [
        ("range", pa.int64()),  # the range (``counter_ranges.range``) the value belongs to
        ("counter", _DICT),  # the counter's name as recorded (``smsp__sass_thread_inst_executed_op_ffma_pred_on.sum``)
        ("value", pa.float64()),  # its value (integers exact up to 2**53)
    ]
)
"""The numeric counters of each counter range, long form: one row per (range, counter), so the
schema is the same whatever counters a trace recorded."""

SIDE_SCHEMAS: dict[str, pa.Schema] = {
    "collectives": COLLECTIVE_SCHEMA,
    "memcpy": MEMCPY_SCHEMA,
    "memory": MEMORY_SCHEMA,
    "op_args": OP_ARGS_SCHEMA,
    "devices": DEVICE_SCHEMA,
    "counter_ranges": COUNTER_RANGE_SCHEMA,
    "range_counters": RANGE_COUNTER_SCHEMA,
}
"""Every per-part side table a reader may fill, by name (an absent one reads as empty).

A side table keyed by ``row`` (its first column) describes events of the part's event table (the
event at that row); one without ``row`` holds records of its own (instant events, counters). Adding
a side table is one schema and one line here: the cache stores it beside the events, the
partition's :class:`~dtrace.analyses.batch.Batch` carries it (``batch.side[name]``) with a ``part`` column.
"""


_EMPTY: dict[str, tuple[pa.Schema, pa.Table]] = {}  # name -> (its schema, its empty table): tables are immutable


def empty_side(name: str) -> pa.Table:
    """The empty side table ``name`` (an unknown name is a KeyError), made once per schema."""
    schema = SIDE_SCHEMAS[name]
    got = _EMPTY.get(name)
    if got is None or got[0] is not schema:
        got = _EMPTY[name] = (schema, schema.empty_table())
    return got[1]


DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "double": 8,
    "float64": 8,
    "int": 4,
    "int32": 4,
    "int64": 8,
    "long": 8,
    "int8": 1,
    "uint8": 1,
    "byte": 1,
    "char": 1,
    "bool": 1,
    "int16": 2,
    "short": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "complexfloat": 8,
    "complexdouble": 16,
}


def us_to_ns(t: np.ndarray) -> np.ndarray:
    """Convert float64 microseconds to int64 nanoseconds without losing precision.

    ``ns = floor(t)*1000 + round_half_even((t - floor(t))*1000)``: the integer part is exact
    and only the fraction is scaled, so absolute timestamps near 1.7e15 µs keep their
    nanoseconds (``round(t*1000)`` would resolve only 256 ns there).

    Examples
    --------
    >>> us_to_ns(np.array([1.0005, 1682725898082228.0, 2.0025])).tolist()
    [1000, 1682725898082228000, 2002]
    """
    t = np.asarray(t, dtype=np.float64)
    whole = np.floor(t)
    return cast(np.ndarray, whole.astype(np.int64) * 1000 + np.rint((t - whole) * 1000.0).astype(np.int64))


TIME_MIN_NS = 0
"""Earliest plausible event start: 1970-01-01 (formats without a time origin start near 0)."""
TIME_MAX_NS = 7_258_118_400 * 10**9
"""Latest plausible event time: 2200-01-01, far below the int64 limit (2262)."""
DAY_NS = 86_400 * 10**9
_SUM_MAX_NS = float(1 << 62)  # ~146 years: sums of durations stay far from the int64 limit

DROP_START = "start outside 1970-2200"
DROP_NEGATIVE = "negative duration"
DROP_LONG = "duration longer than a day and than the trace"
DROP_END = "end after 2200"


def implausible_times(
    start_ns: np.ndarray, dur_ns: np.ndarray, source: str = "<events>"
) -> tuple[np.ndarray | None, dict[str, int]]:
    """Which events have plausible times, and why the others do not (vectorised, no warnings).

    ``start_ns`` and ``dur_ns`` are float64 approximations of each event's absolute start and
    its duration in ns (``ts * 1000 + origin``), computed before any conversion to int64, so
    values that would overflow it (``1e30``, ``inf``, int64 max µs) are seen as they are. An
    event is dropped for the first of these reasons that applies:

    - :data:`DROP_START`: its start is before 1970-01-01 or not before 2200-01-01 (non-finite
      values included);
    - :data:`DROP_NEGATIVE`: its duration is negative;
    - :data:`DROP_LONG`: its duration is longer than a day *and* longer than the span of the
      starts of the events kept so far (a profile longer than a day keeps its long ranges);
    - :data:`DROP_END`: it ends at or after 2200-01-01.

    Returns the mask of events to keep (None when all are kept) and the count per reason of
    those dropped (reasons without drops left out). Raises :class:`InputError` naming
    ``source`` if the kept durations add up to more than 2**62 ns (sums would overflow int64).

    Examples
    --------
    >>> keep, why = implausible_times(np.array([1e3, 2e3, 1e30, 3e3]), np.array([5.0, -1.0, 1.0, 1e17]))
    >>> keep.tolist()
    [True, False, False, False]
    >>> dropped_summary(why)
    'start outside 1970-2200: 1, negative duration: 1, duration longer than a day and than the trace: 1'
    """
    start = np.asarray(start_ns, np.float64)
    dur = np.asarray(dur_ns, np.float64)
    keep = (start >= TIME_MIN_NS) & (start < TIME_MAX_NS)  # False for NaN and +-inf
    reasons = {DROP_START: int(keep.size - np.count_nonzero(keep))}
    bad = keep & (dur < 0)
    reasons[DROP_NEGATIVE] = int(bad.sum())
    keep &= ~bad
    span = float(start[keep].max() - start[keep].min()) if keep.any() else 0.0
    bad = keep & ~(dur <= max(float(DAY_NS), span))  # NaN and inf included
    reasons[DROP_LONG] = int(bad.sum())
    keep &= ~bad
    with np.errstate(over="ignore", invalid="ignore"):
        bad = keep & ~(start + dur < TIME_MAX_NS)
    reasons[DROP_END] = int(bad.sum())
    keep &= ~bad
    reasons = {k: v for k, v in reasons.items() if v}
    total = float(dur[keep].sum())
    if total > _SUM_MAX_NS:
        raise InputError(
            source,
            f"the event durations add up to {total / DAY_NS / 365.25:.0f} years, more than int64 nanoseconds can sum",
        )
    return (None if not reasons else keep), reasons


def dropped_summary(reasons: dict[str, int]) -> str:
    """``{"negative duration": 2, ...}`` → ``"negative duration: 2, ..."``."""
    return ", ".join(f"{k}: {v}" for k, v in reasons.items())


def empty_events() -> pa.Table:
    return EVENT_SCHEMA.empty_table()


def validate_events(table: pa.Table, source: str = "<events>") -> pa.Table:
    """Check that ``table`` follows :data:`EVENT_SCHEMA` and cast it to the exact types.

    Raises :class:`InputError` naming ``source`` for a missing column, a column of the wrong
    type, an unknown kind, or an event that ends before it starts.
    """
    have = table.column_names
    schema = table.schema
    if (
        have[: len(_EVENT_NAMES)] == _EVENT_NAMES
        and schema.types[: len(_EVENT_NAMES)] == _EVENT_TYPES
        and len(set(have)) == len(have)
        and schema.metadata is None
        and all(f.nullable for f in schema)
    ):
        out = table  # already the exact columns and types, first and in order (what the readers build)
    else:
        out = _conformed(table, have, source)
    if out.num_rows:
        kinds = out.column("kind").combine_chunks().dictionary.to_pylist()
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown:
            raise InputError(source, f"unknown event kinds {unknown}; valid kinds are {list(KINDS)}")
        start = out.column("start_ns").to_numpy()
        end = out.column("end_ns").to_numpy()
        bad = np.flatnonzero(end < start)
        if bad.size:
            name = out.column("name")[int(bad[0])].as_py()
            raise InputError(
                source, f"{bad.size} events have a negative duration (first: {name!r} at row {int(bad[0])})"
            )
    return out


_EVENT_NAMES = EVENT_SCHEMA.names
_EVENT_TYPES = EVENT_SCHEMA.types


def _conformed(table: pa.Table, have: list[str], source: str) -> pa.Table:
    """``table`` with the columns of :data:`EVENT_SCHEMA` first, in order and cast to their types."""
    names = set(have)
    missing = [f.name for f in EVENT_SCHEMA if f.name not in names]
    if missing:
        raise InputError(source, f"event table lacks the columns {missing}")
    cols = []
    for field in EVENT_SCHEMA:
        col = table.column(field.name)
        if col.type != field.type:
            try:
                col = col.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise InputError(source, f"column {field.name!r} is {col.type}, expected {field.type}: {exc}") from None
        cols.append(col)
    extra = [n for n in have if n not in EVENT_SCHEMA.names]
    return pa.Table.from_arrays(cols + [table.column(n) for n in extra], names=EVENT_SCHEMA.names + extra)


def side_table(schema: pa.Schema, columns: Mapping[str, Collection[Any]]) -> pa.Table:
    """Build a side table of ``schema`` from the given columns; absent ones get their
    "unknown" value (``""`` for text, -1 for numbers).

    Examples
    --------
    >>> t = side_table(COLLECTIVE_SCHEMA, {"row": [4, 9], "collective": ["all_reduce", "send_recv"]})
    >>> t.column("seq").to_pylist(), t.column("group").to_pylist()
    ([-1, -1], ['', ''])
    """
    n = len(columns["row"])
    arrays = []
    for f in schema:
        values = columns.get(f.name)
        if pa.types.is_dictionary(f.type):
            texts = [str(v) for v in values] if values is not None else [""] * n
            arrays.append(pa.array(texts, pa.string()).dictionary_encode().cast(f.type))
        else:
            nums = np.asarray(values if values is not None else np.full(n, -1), dtype=f.type.to_pandas_dtype())
            arrays.append(pa.array(nums, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)
