"""Hardware-counter ranges of Kineto traces: the ``counter_ranges`` and ``range_counters`` side tables.

The PyTorch profiler with CUPTI range profiling (Kineto's ``CuptiRangeProfiler``, per-kernel auto
ranges) writes one complete event of category ``cuda_profiler_range`` per profiled kernel: its
name is the kernel's (CUPTI's range name, e.g. ``__missing__``, where it has none), its ``pid``
the GPU, its ``args`` the counters asked for (``smsp__sass_thread_inst_executed_op_ffma_pred_on.sum``:
number, ...). Kineto splits the profiling span evenly between the ranges, so their times only
order them. Such a trace holds no kernel events (the range profiler runs alone), only the host's
launch calls. See docs/semantics.md, "Hardware counters".

Which counters a trace holds is up to the user, so the reader's event type cannot name them: the
blocks that hold ranges (the first decode shows a block's categories, so a trace without ranges
pays nothing) are decoded a second time from their text with :class:`RangeEvent`, whose
``args`` stay JSON text, and only the ranges' args are decoded, as a dict. The text is the same
on the compiled scanner's path (a :class:`~._chrome.Scanned` block's) and on the pure path
(:attr:`~._chrome.ChromeTrace.text`), so both give the same tables.

The counters are kept long-form (one row per range and counter, :data:`~dtrace.core.schema.RANGE_COUNTER_SCHEMA`):
the schema stays the same whatever was recorded. Numbers (integers and floats, not booleans) are
kept as float64; other values (text) are not counters and are left out.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from ..core.schema import COUNTER_RANGE_SCHEMA, RANGE_COUNTER_SCHEMA, implausible_times, us_to_ns
from ..errors import InputError
from ._ids import StableIds
from ._op_args import NO_RAW

PROFILER_RANGE = "cuda_profiler_range"
"""The Kineto category of a hardware-counter range."""


class RangeEvent(msgspec.Struct, gc=False):
    """An event as the counter ranges are read again: only their fields, ``args`` as JSON text."""

    ph: str = ""
    cat: str | None = None
    name: str = ""
    pid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    args: msgspec.Raw = NO_RAW


class _RangeDocument(msgspec.Struct, gc=False):
    traceEvents: list[RangeEvent] | None = None  # noqa: N815 - JSON key


_EVENTS = msgspec.json.Decoder(list[RangeEvent])
_DOCUMENT = msgspec.json.Decoder(_RangeDocument)
_ARGS = msgspec.json.Decoder(dict[str, Any] | None)
_NUMBER = (int, float)


def _events(text: memoryview, path: str) -> list[RangeEvent]:
    """The events of a block's text: an events array, or a whole (small) document.

    The array's closing bracket may already be the opening one of the next block (the reader
    writes it over the text in place once the block is decoded): it is written back here, in a
    copy of the text.
    """
    head = bytes(text[:64]).lstrip()
    try:
        if head[:1] == b"{":
            return _DOCUMENT.decode(text).traceEvents or []
        array = bytes(text).rstrip()
        return _EVENTS.decode(array[:-1] + b"]" if array.endswith(b"[") else array)
    except msgspec.DecodeError as exc:  # the first decode of the same text succeeded: never expected
        raise InputError(path, f"invalid counter range event: {exc}") from None


def counters(args: msgspec.Raw) -> list[tuple[str, float]]:
    """The numeric arguments of a range, in their order: ``(name, value)``.

    Examples
    --------
    >>> counters(msgspec.Raw(b'{"a.sum": 3, "b.pct": 1.5, "c": "x", "d": true, "e": null}'))
    [('a.sum', 3.0), ('b.pct', 1.5)]
    """
    if not args:
        return []
    got = _ARGS.decode(args)
    out = []
    for k, v in (got or {}).items():
        if type(v) in _NUMBER:  # bool is not a number here
            try:
                out.append((k, float(v)))
            except OverflowError:  # an integer beyond float64: not a value it can hold
                continue
    return out


class RangeBuffer:
    """The counter ranges of one file, gathered block by block (:meth:`add`), made into each
    device's side tables at the end (:meth:`tables`)."""

    def __init__(self) -> None:
        self.pid: list[int | str | None] = []
        self.ts: list[float] = []
        self.dur: list[float] = []
        self.names: list[str] = []
        self.of: list[int] = []  # per counter value: its range (index into the lists above)
        self.counter: list[str] = []
        self.value: list[float] = []

    def __len__(self) -> int:
        return len(self.ts)

    def add(self, text: memoryview, path: str) -> None:
        """Read the ranges of one block (its JSON text, as the reader decoded it)."""
        for e in _events(text, path):
            if e.cat != PROFILER_RANGE or e.ph != "X":
                continue
            i = len(self.ts)
            self.pid.append(e.pid)
            self.ts.append(np.nan if e.ts is None else e.ts)
            self.dur.append(np.nan if e.dur is None else e.dur)
            self.names.append(e.name)
            try:
                values = counters(e.args)
            except msgspec.DecodeError as exc:  # the args decoded as Args first: never expected
                raise InputError(path, f"invalid counter range arguments: {exc}") from None
            for k, v in values:
                self.of.append(i)
                self.counter.append(k)
                self.value.append(v)

    def tables(self, base_ns: int, ids: StableIds) -> dict[int, dict[str, pa.Table]]:
        """Per device (the range's pid, string pids mapped as the events' are; a range without one
        is not kept), ``{"counter_ranges": ..., "range_counters": ...}``: the ranges with plausible
        times, sorted by start (ties in file order) and numbered in that order."""
        if not self.ts:
            return {}
        ts, dur = np.array(self.ts, np.float64), np.array(self.dur, np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            keep, _ = implausible_times(ts * 1000.0 + base_ns, dur * 1000.0)
        device = np.array([-1 if p is None else ids(p) for p in self.pid], np.int64).astype(np.int32)
        ok = device >= 0 if keep is None else keep & (device >= 0)
        start = us_to_ns(np.where(ok, ts, 0.0)) + base_ns
        end = start + us_to_ns(np.where(ok, dur, 0.0))
        of = np.array(self.of, np.int64)
        out: dict[int, dict[str, pa.Table]] = {}
        for dev in sorted(set(device[ok].tolist())):  # a loop over the file's GPUs (one or a few)
            rows = np.flatnonzero(ok & (device == dev))
            rows = rows[np.argsort(start[rows], kind="stable")]
            out[dev] = self._device_tables(rows, start, end, of)
        return out

    def _device_tables(
        self, rows: np.ndarray, start: np.ndarray, end: np.ndarray, of: np.ndarray
    ) -> dict[str, pa.Table]:
        """The two side tables of the ranges ``rows`` (in their order: the new numbering)."""
        number = np.full(len(self.ts), -1, np.int64)
        number[rows] = np.arange(rows.size, dtype=np.int64)
        ranges = pa.table(
            {
                "range": np.arange(rows.size, dtype=np.int64),
                "start_ns": start[rows],
                "end_ns": end[rows],
                "name": pa.array([self.names[i] for i in rows.tolist()], pa.string()).dictionary_encode(),
            },
            schema=COUNTER_RANGE_SCHEMA,
        )
        mine = np.flatnonzero(number[of] >= 0) if of.size else np.empty(0, np.int64)
        mine = mine[np.argsort(number[of[mine]], kind="stable")]  # by range, each range's in file order
        values = pa.table(
            {
                "range": number[of[mine]],
                "counter": pa.array([self.counter[i] for i in mine.tolist()], pa.string()).dictionary_encode(),
                "value": np.array(self.value, np.float64)[mine],
            },
            schema=RANGE_COUNTER_SCHEMA,
        )
        return {"counter_ranges": ranges, "range_counters": values}
