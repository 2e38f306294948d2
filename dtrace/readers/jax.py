"""JAX profiler traces: ``*.trace.json.gz`` (xprof ``trace_viewer``), optionally ``*.xplane.pb``.

Two layouts exist and both are read the same way:

- classic: pid ``k+1`` is named ``/device:GPU:k``, the host is pid 701 (``/host:CPU``); events
  carry ``args`` (``correlation_id``, ``hlo_op``, ``hlo_module``, ``memcpy_details``, ...);
- newer (``trace_viewer@^``): pid ``1001+k`` is named ``"<host> /device:GPU:k"``, args are
  stripped and launches link to their GPU activity through ``bind_id`` on ``gpu_launch`` events.

One file holds several GPUs; each GPU plane becomes one :class:`~dtrace.readers.Part`
(``local_index = k``) and its own rank (``rank_per_device``). Only threads named ``Stream #N``
carry GPU work (``stream = N``); the derived lines (``XLA Ops``, ``XLA Modules``,
``Framework Ops``, ``Source code``, ...) become ``gpu_annotation`` labels, never busy time.
The ``Steps`` line becomes ``gpu_annotation`` events named ``Step#N`` on its device, which the
default step pattern recognises (GPU-time windows: events are assigned by their own start).
Steps marked in the program with ``jax.profiler.StepTraceAnnotation(name, step_num=N)`` are
host events named ``name`` with ``args.step_num`` (a string in xprof's trace viewer JSON, a
number in other exports): each becomes a host ``annotation`` named ``Step#N`` — a host step
window, which takes precedence over the ``Steps`` line (see docs/semantics.md, "Steps"). The
newer layout strips ``args``, so there only the ``Steps`` line marks steps.

Kinds: GPU events named ``memcpy*``/``memset*`` (any case) are ``memcpy``/``memset``, every
other ``Stream #`` event is a ``kernel``. Host events: launch API calls (``cat == gpu_launch``,
a ``correlation_id``, or a ``cu*``/``cuda*``/``hip*`` name) are ``runtime``, Python tracer
events (``$...``) are ``python``, the rest ``cpu_op``. Collectives are NCCL/RCCL kernels; their
type comes from ``hlo_op`` (``all-gather-start.3`` → ``all_gather``) or, when args are
stripped, from the kernel name (``ncclDevKernel_AllGather_RING_LL`` → ``all_gather``).
Timestamps are float µs from the profile start and become int64 ns with
:func:`dtrace.core.schema.us_to_ns` (start and duration converted separately).
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import tempfile
from typing import Any, NoReturn

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa

from ..core.constants import KIND_CODES, copy_kind, kernel_collective
from ..core.schema import (
    COLLECTIVE_SCHEMA,
    KIND_DICT,
    MEMCPY_SCHEMA,
    dropped_summary,
    implausible_times,
    us_to_ns,
    validate_events,
)
from ..errors import ImplausibleTimes, InputError, NoGPUActivity
from ._chrome import MAX_EVENT, ChromeTrace
from ._ids import StableIds
from .base import Part, TraceFile

NAME = "jax"

GROUP = "xla"  # JAX traces do not name replica groups: one group, instances matched by order

_INT32_MAX, _INT64_MAX = 2**31 - 1, 2**63 - 1
_DEVICE_RE = re.compile(r"/device:(?:GPU|gpu):(\d+)\s*$")
_STREAM_RE = re.compile(r"^Stream #(\d+)")
_FROM_STREAM_RE = re.compile(r"from #(\d+)")
_LAUNCH_NAME_RE = re.compile(r"^(?:cu|cuda|hip)[A-Z]")
_MEMCPY_RE = re.compile(r"^memcpy", re.I)
_MEMSET_RE = re.compile(r"^memset", re.I)
_COMM_RE = re.compile(r"nccl|rccl", re.I)
_HLO_COLLECTIVE = [
    (re.compile(r"^all-reduce"), "all_reduce"),
    (re.compile(r"^all-gather"), "all_gather"),
    (re.compile(r"^reduce-scatter"), "reduce_scatter"),
    (re.compile(r"^ragged-all-to-all"), "all_to_all"),
    (re.compile(r"^all-to-all"), "all_to_all"),
    (re.compile(r"^collective-permute"), "send_recv"),
    (re.compile(r"^collective-broadcast"), "broadcast"),
    (re.compile(r"^send"), "send"),
    (re.compile(r"^recv"), "recv"),
]
_SIZE_RE = re.compile(r"size:(\d+)")
_MEMKIND_RE = re.compile(r"kind:(\w+)")


class Args(msgspec.Struct, gc=False):
    name: Any = None  # process/thread name of "M" events
    step_num: Any = None  # jax.profiler.StepTraceAnnotation(name, step_num=N)
    correlation_id: int | str | None = None
    hlo_op: str | None = None
    hlo_module: str | None = None
    memcpy_details: str | None = None


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    name: str = ""
    cat: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    bind_id: int | str | None = None
    args: Args | None = None


class Meta(msgspec.Struct, gc=False):
    displayTimeUnit: str | None = None  # noqa: N815 - JSON key
    metadata: dict[str, Any] | None = None


class READER:  # noqa: N801 - the registered reader object
    name = NAME

    @staticmethod
    def guess_can_open(path: str, head: bytes) -> bool:
        if path.lower().endswith(".xplane.pb"):
            return True
        text = head.lstrip()
        if not text.startswith((b"{", b"[")):
            return False
        return b'"traceEvents"' in head and re.search(rb"/device:(?:GPU|TPU|CPU):\d", head) is not None

    @staticmethod
    def read(path: str, **options: Any) -> TraceFile:
        return read_jax(path, **options)


def _num(v: Any) -> int:
    if v is None:
        return -1
    if isinstance(v, int):
        return v
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


class _Columns:
    """Buffers of the complete (``X``) events, filled chunk by chunk."""

    def __init__(self) -> None:
        self.pid: list[np.ndarray] = []
        self.tid: list[np.ndarray] = []
        self.ts: list[np.ndarray] = []
        self.dur: list[np.ndarray] = []
        self.corr: list[np.ndarray] = []
        self.launch: list[np.ndarray] = []  # host launch call by category/args
        self.step_num: list[np.ndarray] = []  # args.step_num (-1: none)
        self.names: list[pa.Array] = []
        self.extra: dict[int, tuple[str | None, str | None, str | None]] = {}  # row -> (hlo_op, module, memcpy)
        self.process_names: dict[int, str] = {}
        self.thread_names: dict[tuple[int, int], str] = {}
        self.n = 0
        self.dropped: dict[str, int] = {}  # events dropped for implausible times, by reason
        self.dropped_lines: dict[tuple[int, int], int] = {}  # ... and by (pid, tid) line


def _drop_implausible(c: _Columns, source: str) -> None:
    """Drop the events with implausible times (:func:`dtrace.core.schema.implausible_times`) from
    the buffers, counting them by reason and by line."""
    ts, dur = _cat(c.ts, np.float64), _cat(c.dur, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # 1e308 µs * 1000 is inf: dropped, never a warning
        keep, c.dropped = implausible_times(ts * 1000.0, dur * 1000.0, source)
    if keep is None:
        return
    pid, tid = _cat(c.pid, np.int64), _cat(c.tid, np.int64)
    lines, counts = np.unique(np.stack([pid[~keep], tid[~keep]], axis=1), axis=0, return_counts=True)
    c.dropped_lines = {(int(p), int(t)): int(k) for (p, t), k in zip(lines.tolist(), counts.tolist())}
    c.pid, c.tid, c.ts, c.dur = [pid[keep]], [tid[keep]], [ts[keep]], [dur[keep]]
    c.corr, c.launch = [_cat(c.corr, np.int64)[keep]], [_cat(c.launch, bool)[keep]]
    c.step_num = [_cat(c.step_num, np.int64)[keep]]
    c.names = (
        [pa.chunked_array(c.names).unify_dictionaries().combine_chunks().filter(pa.array(keep))] if c.names else []
    )
    new_row = np.cumsum(keep) - 1
    c.extra = {int(new_row[r]): v for r, v in c.extra.items() if keep[r]}
    c.n = int(keep.sum())


def _id_column(values: list[Any], ids: StableIds) -> np.ndarray:
    """Integer pids/tids as they are; strings (and missing ids) through the stable id map."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.fromiter((ids(v if v is not None else -1) for v in values), np.int64, len(values))


def _add_chunk(events: list[Event], c: _Columns, ids: StableIds, path: str) -> None:
    xs = _complete_events(events, c, ids)
    if not xs:
        return
    n = len(xs)
    ts = [e.ts for e in xs]
    dur = [e.dur for e in xs]
    if None in ts or None in dur:
        _no_time(xs, ts, path)
    args = [e.args for e in xs]
    corr, launch = _launches(xs, args)
    _keep_extras(c, args)
    c.pid.append(_id_column([e.pid for e in xs], ids))
    c.tid.append(_id_column([e.tid for e in xs], ids))
    c.ts.append(np.asarray(ts, np.float64))
    c.dur.append(np.asarray(dur, np.float64))
    c.corr.append(corr)
    c.launch.append(launch)
    c.step_num.append(np.fromiter((_step_num(a.step_num) if a is not None else -1 for a in args), np.int64, n))
    c.names.append(pa.array([e.name for e in xs], pa.string()).dictionary_encode())
    c.n += n


def _no_time(xs: list[Event], ts: list[Any], path: str) -> NoReturn:
    """The error of a complete event without a time or a duration."""
    i = ts.index(None) if None in ts else [e.dur for e in xs].index(None)
    field = "ts" if None in ts else "dur"
    raise InputError(path, f"a complete ('X') event has no {field!r}: {xs[i].name!r}")


def _keep_extras(c: _Columns, args: list[Any]) -> None:
    """The HLO op and module and the memcpy details of the events that have them, by row."""
    base = c.n
    for i, a in enumerate(args):
        if a is not None and (a.hlo_op is not None or a.memcpy_details is not None):
            c.extra[base + i] = (a.hlo_op, a.hlo_module, a.memcpy_details)


def _complete_events(events: list[Event], c: _Columns, ids: StableIds) -> list[Event]:
    """The complete ('X') events of a chunk; the process and thread names of its metadata
    ('M') events are kept in ``c``."""
    xs = []
    for e in events:
        if e.ph == "X":
            xs.append(e)
        elif e.ph == "M" and e.args is not None and isinstance(e.args.name, str):
            _add_name(e, e.args.name, c, ids)
    return xs


def _add_name(e: Event, name: str, c: _Columns, ids: StableIds) -> None:
    """A ``process_name`` or ``thread_name`` metadata event's name, kept in ``c``."""
    if e.name == "process_name":
        c.process_names[ids(e.pid if e.pid is not None else -1)] = name
    elif e.name == "thread_name":
        c.thread_names[(ids(e.pid if e.pid is not None else -1), ids(e.tid if e.tid is not None else -1))] = name


def _launches(xs: list[Event], args: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Each event's correlation id (-1: none) and whether it is a launch (``gpu_launch`` or
    with a ``correlation_id``)."""
    n = len(xs)
    cats = [e.cat for e in xs]
    corr = np.fromiter(
        (
            _num(a.correlation_id)
            if a is not None and a.correlation_id is not None
            else (_num(e.bind_id) if cat == "gpu_launch" else -1)
            for a, e, cat in zip(args, xs, cats)
        ),
        np.int64,
        n,
    )
    launch = np.fromiter(
        (cat == "gpu_launch" or (a is not None and a.correlation_id is not None) for a, cat in zip(args, cats)), bool, n
    )
    return corr, launch


def _step_num(v: Any) -> int:
    """A ``step_num`` argument as a step number (a whole number >= 0, as an int or its digits), else -1.

    Examples
    --------
    >>> [_step_num(v) for v in ("3", 4, " 5 ", "x", -1, True, 2.0, None)]
    [3, 4, 5, -1, -1, -1, -1, -1]
    """
    if isinstance(v, str) and v.strip().isdigit():
        v = int(v.strip())
    return v if type(v) is int and 0 <= v < 2**62 else -1


def _cat(arrs: list[np.ndarray], dtype: Any) -> np.ndarray:
    return np.concatenate(arrs) if arrs else np.empty(0, dtype)


def _xplane_to_json(path: str, workdir: str) -> str:
    """Convert an ``xplane.pb`` to trace-viewer JSON with xprof (or the TensorBoard plugin)."""
    convert = None
    for mod in ("xprof.convert.raw_to_tool_data", "tensorboard_plugin_profile.convert.raw_to_tool_data"):
        try:
            convert = __import__(mod, fromlist=["xspace_to_tool_data"])
            break
        except ImportError:
            continue
    if convert is None:
        raise InputError(
            path,
            "reading an xplane.pb needs xprof (pip install xprof); or convert it "
            "first with xprof's trace_viewer tool into a .trace.json.gz",
        )
    try:
        data, _ctype = convert.xspace_to_tool_data([path], "trace_viewer", {})
    except Exception as exc:  # the converter's own errors (corrupt protobuf, ...)
        raise InputError(path, f"xprof could not convert the xplane.pb: {type(exc).__name__}: {exc}") from None
    if isinstance(data, str):
        data = data.encode()
    if not data:
        raise InputError(path, "xprof produced no trace from the xplane.pb")
    out = os.path.join(workdir, "trace.json.gz")
    if data[:2] == b"\x1f\x8b":  # already gzip-compressed
        with open(out, "wb") as f:
            f.write(data)
    else:
        with gzip.open(out, "wb") as f:
            f.write(data)
    return out


def read_jax(
    path: str, *, block: int | None = None, max_input_size: int | None = None, max_event_size: int = MAX_EVENT, **_: Any
) -> TraceFile:
    """Read one JAX trace into one :class:`Part` per GPU plane.

    Events with implausible times are dropped and counted by reason in
    ``meta["dropped_events"]``; ``max_input_size`` limits the decompressed content and
    ``max_event_size`` one event's JSON text.
    """
    limits = {"max_event": max_event_size, "max_size": max_input_size, **({"block": block} if block else {})}
    if path.lower().endswith(".xplane.pb"):
        tmp = tempfile.mkdtemp(prefix="dtrace-xplane-")
        try:
            tf = _read_json(_xplane_to_json(path, tmp), limits=limits, source=path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return tf
    return _read_json(path, limits=limits, source=path)


def _read_json(path: str, *, limits: dict[str, Any], source: str) -> TraceFile:
    trace = ChromeTrace(path, Event, Meta, **limits)
    ids = StableIds()
    c = _Columns()
    try:
        for chunk in trace.chunks():
            _add_chunk(chunk, c, ids, source)
    except InputError as exc:
        raise type(exc)(source, exc.problem) from None
    _drop_implausible(c, source)

    pid = _cat(c.pid, np.int64)
    tid = _cat(c.tid, np.int64)
    names = (
        pa.chunked_array(c.names).unify_dictionaries().combine_chunks()
        if c.names
        else pa.array([], pa.string()).dictionary_encode()
    )
    name_dict = names.dictionary.to_pylist()
    name_codes = names.indices.to_numpy(zero_copy_only=False)

    # device of each pid, role of each (pid, tid) line
    devices = _gpu_planes(c.process_names, source)
    stream_of, label_stream, steps_lines = _line_roles(c.thread_names, devices, source)
    n = c.n
    line_key = _line_codes(pid, tid)
    upid, pinv = np.unique(pid, return_inverse=True)
    dev_arr = (
        np.array([devices.get(int(p), -1) for p in upid], np.int64)[pinv.reshape(-1)] if n else np.empty(0, np.int64)
    )
    on_device = dev_arr >= 0
    is_stream = _lookup(line_key, pid, tid, stream_of, -2) >= -1
    stream = _lookup(line_key, pid, tid, stream_of, -1)
    label_s = _lookup(line_key, pid, tid, label_stream, -1)
    is_steps = _lookup(line_key, pid, tid, {k: 1 for k in steps_lines}, 0) == 1

    launch = _cat(c.launch, bool)
    step_num = _cat(c.step_num, np.int64)
    host_step = ~on_device & ~launch & (step_num >= 0)  # StepTraceAnnotation(name, step_num=N)
    kinds = _kinds(name_dict, name_codes, on_device, is_stream, launch, host_step)
    device = np.where(on_device, dev_arr, -1).astype(np.int32)
    stream = np.where(is_stream, stream, np.where(on_device, label_s, -1)).astype(np.int64)

    # the Steps line: Step#N labels (N from the name, else the ordinal in time)
    out_names = names
    ts = _cat(c.ts, np.float64)
    if is_steps.any() or host_step.any():
        out_names = _step_names(name_dict, name_codes, is_steps, ts, device, host_step, step_num)

    start_ns = us_to_ns(ts)
    end_ns = start_ns + us_to_ns(_cat(c.dur, np.float64))
    corr = _cat(c.corr, np.int64)
    gpu_mask = np.isin(kinds, [KIND_CODES["kernel"], KIND_CODES["memcpy"], KIND_CODES["memset"]])
    corr = np.where(gpu_mask | (kinds == KIND_CODES["runtime"]), corr, -1)
    table = pa.table(
        {
            "rank": np.full(n, -1, np.int32),
            "device": device,
            "stream": stream,
            "pid": pid,
            "tid": tid,
            "kind": pa.DictionaryArray.from_arrays(pa.array(kinds.astype(np.int32)), KIND_DICT),
            "name": out_names,
            "start_ns": start_ns,
            "end_ns": end_ns,
            "correlation": corr,
            "external_id": np.full(n, -1, np.int64),
        }
    )
    table = validate_events(table, source)

    gpu_devices = sorted(set(device[gpu_mask].tolist()))
    if not gpu_devices:
        _no_gpu_activity(c, devices, stream_of, source)
    coll_rows, mem_rows = _side_rows(np.flatnonzero(gpu_mask), kinds, name_dict, name_codes, c.extra)
    parts = _device_parts(table, gpu_devices, device, kinds, corr, gpu_mask, coll_rows, mem_rows)
    return TraceFile(
        path=source, format=NAME, parts=parts, rank_hint=None, rank_per_device=True, meta=_meta(c, trace, devices)
    )


def _meta(c: _Columns, trace: ChromeTrace, devices: dict[int, int]) -> dict[str, Any]:
    """The trace file's meta: events read and dropped, fingerprint, GPU planes and hosts."""
    return {
        "base_time_ns": 0,
        "events": int(c.n),
        "dropped_events": c.dropped,
        "fingerprint": trace.fingerprint,
        "devices": {str(d): c.process_names.get(p, "") for p, d in devices.items()},
        "hosts": sorted({_host_of(pn) for pn in c.process_names.values() if _host_of(pn)}),
    }


def _gpu_planes(process_names: dict[int, str], source: str) -> dict[int, int]:
    """pid -> GPU of every ``/device:GPU:k`` process; none, or an id out of range, is an error."""
    devices = {p: int(m.group(1)) for p, n in process_names.items() if (m := _DEVICE_RE.search(n))}
    if not devices:
        raise InputError(source, "no /device:GPU:k process in the JAX trace (is it a TPU or CPU-only profile?)")
    big = [k for k in devices.values() if k > _INT32_MAX]
    if big:
        raise InputError(source, f"device id {big[0]} (/device:GPU:{big[0]}) is out of range (0 to {_INT32_MAX})")
    return devices


def _line_roles(
    thread_names: dict[tuple[int, int], str], devices: dict[int, int], source: str
) -> tuple[dict[tuple[int, int], int], dict[tuple[int, int], int], set[tuple[int, int]]]:
    """The lines of the GPU planes: the ``Stream #N`` lines' streams, the other lines' stream
    named in their label (-1: none), and the ``Steps`` lines."""
    stream_of: dict[tuple[int, int], int] = {}
    label_stream: dict[tuple[int, int], int] = {}
    steps_lines: set[tuple[int, int]] = set()
    for (p, t), tn in thread_names.items():
        if p not in devices:
            continue
        m = _STREAM_RE.match(tn)
        if m:
            if int(m.group(1)) > _INT64_MAX:
                raise InputError(source, f"stream id {m.group(1)} ({tn!r}) is out of range (0 to {_INT64_MAX})")
            stream_of[(p, t)] = int(m.group(1))
        elif tn.strip() == "Steps":
            steps_lines.add((p, t))
        else:
            f = _FROM_STREAM_RE.search(tn)
            label_stream[(p, t)] = int(f.group(1)) if f and int(f.group(1)) <= _INT64_MAX else -1
    return stream_of, label_stream, steps_lines


def _kinds(
    name_dict: list[str],
    name_codes: np.ndarray,
    on_device: np.ndarray,
    is_stream: np.ndarray,
    launch: np.ndarray,
    host_step: np.ndarray,
) -> np.ndarray:
    """Each event's kind code: decided once per distinct name, then broadcast."""
    n = len(on_device)
    gpu_kind_of_name = np.array(
        [
            KIND_CODES["memcpy"]
            if _MEMCPY_RE.search(s)
            else KIND_CODES["memset"]
            if _MEMSET_RE.search(s)
            else KIND_CODES["kernel"]
            for s in name_dict
        ],
        np.int8,
    )
    host_kind_of_name = np.array(
        [
            KIND_CODES["python"]
            if s.startswith("$")
            else KIND_CODES["runtime"]
            if _LAUNCH_NAME_RE.match(s)
            else KIND_CODES["cpu_op"]
            for s in name_dict
        ],
        np.int8,
    )
    return np.where(
        on_device,
        np.where(is_stream, gpu_kind_of_name[name_codes] if n else 0, KIND_CODES["gpu_annotation"]),
        np.where(
            launch,
            KIND_CODES["runtime"],
            np.where(host_step, KIND_CODES["annotation"], host_kind_of_name[name_codes] if n else 0),
        ),
    ).astype(np.int8)


def _no_gpu_activity(
    c: _Columns, devices: dict[int, int], stream_of: dict[tuple[int, int], int], source: str
) -> NoReturn:
    """The error of a trace without GPU events: all dropped as implausible, or none at all."""
    n_gpu_dropped = sum(k for (p, t), k in c.dropped_lines.items() if p in devices and (p, t) in stream_of)
    if n_gpu_dropped:
        raise ImplausibleTimes(
            source, f"all {n_gpu_dropped} GPU events have implausible times ({dropped_summary(c.dropped)})"
        )
    raise NoGPUActivity(
        source,
        f"no GPU activity: no events on the 'Stream #' lines of the {len(devices)} GPU plane(s) ({c.n} events in all)",
    )


def _device_parts(
    table: pa.Table,
    gpu_devices: list[int],
    device: np.ndarray,
    kinds: np.ndarray,
    corr: np.ndarray,
    gpu_mask: np.ndarray,
    coll_rows: Any,
    mem_rows: Any,
) -> list[Part]:
    """One part per GPU: its events, the host events but launches, and the launches of its
    kernels, with their side tables."""
    host = device == -1
    runtime = kinds == KIND_CODES["runtime"]
    gpu_corr_dev = (corr[gpu_mask], device[gpu_mask])
    parts = []
    for dev in gpu_devices:
        keep = (device == dev) | (host & ~runtime)
        if runtime.any():
            keep |= host & runtime & _launch_belongs(corr, dev, gpu_corr_dev)
        rows = np.flatnonzero(keep)
        parts.append(
            Part(
                device=int(dev),
                events=table.take(pa.array(rows)),
                collectives=_side_table(coll_rows, rows, COLLECTIVE_SCHEMA),
                memcpy=_side_table(mem_rows, rows, MEMCPY_SCHEMA),
                local_index=int(dev),
            )
        )
    return parts


def _host_of(process_name: str) -> str:
    """``"tw003 /device:GPU:0"`` → ``"tw003"`` (the newer layout names the host)."""
    head = process_name.split("/", 1)[0].strip()
    return head


def _line_codes(pid: np.ndarray, tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (pid, tid) pairs and the code of each event's pair."""
    if not len(pid):
        return np.empty((0, 2), np.int64), np.empty(0, np.int64)
    pc, pu = pd.factorize(pid)
    tc, tu = pd.factorize(tid)
    lc, lu = pd.factorize(pc.astype(np.int64) * len(tu) + tc)
    uniq = np.stack([np.asarray(pu)[lu // len(tu)], np.asarray(tu)[lu % len(tu)]], axis=1)
    return uniq, lc.astype(np.int64)


def _lookup(
    line_key: tuple[np.ndarray, np.ndarray],
    pid: np.ndarray,
    tid: np.ndarray,
    mapping: dict[tuple[int, int], int],
    default: int,
) -> np.ndarray:
    """``mapping[(pid, tid)]`` for every event, evaluated once per distinct line."""
    uniq, inv = line_key
    per_line = np.array([mapping.get((int(p), int(t)), default) for p, t in uniq], np.int64)
    return per_line[inv] if len(inv) else np.empty(0, np.int64)


def _step_names(
    name_dict: list[str],
    codes: np.ndarray,
    is_steps: np.ndarray,
    ts: np.ndarray,
    device: np.ndarray,
    host_step: np.ndarray,
    step_num: np.ndarray,
) -> pa.Array:
    """Rename the ``Steps`` line's events and the host step annotations to ``Step#N``."""
    out = np.array(name_dict, dtype=object)[codes]
    out[host_step] = [f"Step#{k}" for k in step_num[host_step].tolist()]
    for dev in np.unique(device[is_steps]).tolist():
        sel = np.flatnonzero(is_steps & (device == dev))
        sel = sel[np.argsort(ts[sel], kind="stable")]
        nums = []
        for i, s in enumerate(out[sel].tolist()):
            m = re.findall(r"\d+", str(s))
            nums.append(int(m[-1]) if m else i)
        out[sel] = [f"Step#{k}" for k in nums]
    return pa.array(out.tolist(), pa.string()).dictionary_encode()


def _launch_belongs(corr: np.ndarray, dev: int, gpu: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Launches whose correlation id is used by a GPU event of this device, or by none."""
    gc, gd = gpu
    return np.isin(corr, gc[gd == dev]) | ~np.isin(corr, gc)


def hlo_collective(hlo_op: str | None, kernel: str) -> str:
    """Collective type of an NCCL/RCCL kernel from its ``hlo_op``, else from its name.

    Examples
    --------
    >>> hlo_collective("all-gather-start.3", "ncclDevKernel_Generic")
    'all_gather'
    >>> hlo_collective(None, "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL")
    'reduce_scatter'
    """
    if hlo_op:
        for rx, coll in _HLO_COLLECTIVE:
            if rx.match(hlo_op):
                return coll
    return kernel_collective(kernel)


def _side_rows(
    gpu_rows: np.ndarray,
    kinds: np.ndarray,
    name_dict: list[str],
    codes: np.ndarray,
    extra: dict[int, tuple[str | None, str | None, str | None]],
) -> tuple[dict[str, list[object]], dict[str, list[object]]]:
    comm_name = np.array([bool(_COMM_RE.search(s)) for s in name_dict], bool)
    coll: dict[str, list[object]] = {f.name: [] for f in COLLECTIVE_SCHEMA}
    mem: dict[str, list[object]] = {f.name: [] for f in MEMCPY_SCHEMA}
    if not len(gpu_rows):
        return coll, mem
    k = kinds[gpu_rows]
    is_comm = (k == KIND_CODES["kernel"]) & comm_name[codes[gpu_rows]]
    for r in gpu_rows[is_comm].tolist():
        hlo, _module, _ = extra.get(r, (None, None, None))
        coll["row"].append(r)
        coll["collective"].append(hlo_collective(hlo, name_dict[codes[r]]))
        coll["group"].append(GROUP)
        coll["group_ranks"].append("")
        coll["group_size"].append(-1)
        coll["seq"].append(-1)
        coll["in_nelems"].append(-1)
        coll["out_nelems"].append(-1)
        coll["dtype"].append("")
        coll["bytes"].append(-1)
    for r in gpu_rows[k == KIND_CODES["memcpy"]].tolist():
        _, _, details = extra.get(r, (None, None, None))
        details = details or ""
        mk = _MEMKIND_RE.search(details)
        size = _SIZE_RE.search(details)
        mem["row"].append(r)
        mem["copy_kind"].append(copy_kind(name_dict[codes[r]], mk.group(1) if mk else None))
        mem["bytes"].append(int(size.group(1)) if size and int(size.group(1)) > 0 else -1)
    return coll, mem


def _side_table(cols: dict[str, list[object]], rows: np.ndarray, schema: pa.Schema) -> pa.Table:
    """The side-table rows whose event is in ``rows``, renumbered to the part's rows."""
    old = np.asarray(cols["row"], np.int64)
    pos = np.searchsorted(rows, old)
    ok = (
        (pos < len(rows)) & (rows[np.minimum(pos, max(len(rows) - 1, 0))] == old)
        if len(rows)
        else np.zeros(len(old), bool)
    )
    data = {}
    for f in schema:
        vals = np.asarray(cols[f.name], dtype=object)[ok] if len(old) else np.array([], object)
        if f.name == "row":
            data[f.name] = pa.array(pos[ok].astype(np.int64), pa.int64())
        elif pa.types.is_dictionary(f.type):
            data[f.name] = pa.array(vals.tolist(), pa.string()).dictionary_encode()
        else:
            data[f.name] = pa.array(vals.tolist(), f.type)
    return pa.table(data).cast(schema)
