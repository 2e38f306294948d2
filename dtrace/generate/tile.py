"""Build large Kineto traces from a real one: tile it in time, replicate it across ranks.

Benchmarks need inputs of hundreds of MB and jobs of hundreds of ranks; they are generated
from the small real traces rather than committed (CONTRIBUTING.md, benchmarks). :func:`tile_trace` writes
``times`` back-to-back copies of a source trace's events into one valid Kineto JSON document:

- every timestamp of copy ``i`` is shifted by ``i * period`` (the source's span plus a small
  gap, in whole µs);
- identifiers that link events (``args.correlation``, ``External id``, ``Sequence number``,
  ``Python id``/``Python parent id``, collective ``Seq``, ``Ev Idx``, ``Record function id`` and
  the ``id`` of flow events) are offset by ``i * (max + 1)`` so they stay unique, and
  ``ProfilerStep#N`` becomes ``ProfilerStep#(N + i * steps)`` so every copy is its own iteration;
- metadata events (``ph: "M"``) are written once;
- ``rank`` rewrites ``distributedInfo.rank`` (a replica of the trace for another rank) and
  ``jitter`` shortens the duration of each GPU event by a random fraction in ``[0, jitter)``
  (seeded per rank), so replicas differ like real ranks do without overlapping on a stream.

The events are copied as *text*: each event keeps the source's layout (indentation, key
order, number formatting) and only the numbers above are rewritten, integer part only, so a
``ts`` such as ``1712195495505582.988`` keeps its nanosecond digits exactly (a float64 could
not). Bytes per event, and so every MB/s figure measured on a tiled trace, are those of the
real trace. The output is written as it is produced (a batch of events at a time, optionally
through gzip); only the source is held in memory.

Examples
--------
>>> info = tile_trace("h100_owlv2.json.gz", "big.json", times=8)      # doctest: +SKIP
>>> info["events"], info["json_bytes"]                                 # doctest: +SKIP
(1056796, 445140517)
"""

from __future__ import annotations

import functools
import math
import os
import re
from typing import Any, BinaryIO

import msgspec
import numpy as np

from ..core.fileio import atomic_write
from ..core.units import format_size
from ..errors import InputError, UsageError
from ..readers._io import GZIP_MAGIC, _gzip, open_regular

ID_ARGS = (
    "correlation",
    "External id",
    "external id",
    "Sequence number",
    "Python id",
    "Python parent id",
    "Seq",
    "Ev Idx",
    "Record function id",
)
"""Integer arguments that link events and must stay unique across copies."""
MAX_TILED_BYTES = 64 << 30
"""The largest tiled trace (``times`` × the source's JSON): the input size dtrace reads by default."""
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"})
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_FIELDS = re.compile(
    rb'"(ts|id|'
    + b"|".join(re.escape(k.encode()) for k in ID_ARGS)
    + rb')"(\s*:\s*)(-?\d+)(?![\d.eE])|"(ts)"(\s*:\s*)(-?\d+)(\.\d+)(?![\deE])'
)
_STEP_NAME = re.compile(rb'"name"(\s*:\s*)"ProfilerStep#(\d+)"')
_DUR = re.compile(rb'"dur"(\s*:\s*)(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)')
_BATCH = 20_000


class _Args(msgspec.Struct, gc=False):
    correlation: Any = None
    ext: Any = msgspec.field(default=None, name="External id")
    ext_old: Any = msgspec.field(default=None, name="external id")
    seq_number: Any = msgspec.field(default=None, name="Sequence number")
    py_id: Any = msgspec.field(default=None, name="Python id")
    py_parent: Any = msgspec.field(default=None, name="Python parent id")
    seq: Any = msgspec.field(default=None, name="Seq")
    ev_idx: Any = msgspec.field(default=None, name="Ev Idx")
    rf_id: Any = msgspec.field(default=None, name="Record function id")


_ARG_FIELDS = dict(zip(_Args.__struct_fields__, ID_ARGS))


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    args: Any = None


class _Source:
    """A source trace: its top-level keys as raw JSON, its events as raw text, and what to shift."""

    def __init__(self, path: str) -> None:
        with open_regular(path) as f:  # a FIFO or a device is refused, never waited on
            data = f.read()
        if data[:2] == GZIP_MAGIC:
            try:
                data = _gzip.decompress(data)
            except (OSError, EOFError) as exc:
                raise InputError(path, f"corrupt gzip stream: {exc}") from None
        try:
            doc = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
            raw_events = doc.get("traceEvents")
            if raw_events is None:
                raise InputError(path, "no 'traceEvents' array in the JSON document")
            self.events: list[msgspec.Raw] = msgspec.json.decode(raw_events, type=list[msgspec.Raw])
            typed = msgspec.json.decode(raw_events, type=list[_Event])
        except msgspec.DecodeError as exc:
            raise InputError(path, f"invalid JSON: {exc}") from None
        if not self.events:
            raise InputError(path, "the trace has no events to tile")
        keys = list(doc)
        cut = keys.index("traceEvents")
        self.head = {k: doc[k] for k in keys[:cut]}
        self.tail = {k: doc[k] for k in keys[cut + 1 :]}
        self.data = data  # the Raw values point into it
        n = len(typed)
        self.meta_event = np.fromiter((e.ph == "M" for e in typed), bool, n)
        self.gpu = np.fromiter(
            (
                isinstance(e.cat, str) and e.cat.lower() in GPU_CATEGORIES and isinstance(e.dur, (int, float))
                for e in typed
            ),
            bool,
            n,
        )
        self._measure(typed)

    def _measure(self, typed: list[_Event]) -> None:
        span = _time_span(typed)
        self.period_us = int(math.ceil(span)) + max(1, int(math.ceil(span * 0.001)))
        id_max, flow_max = _id_maxima(typed)
        self.id_span = {k: v + 1 for k, v in id_max.items() if v >= 0}
        if flow_max >= 0:
            self.id_span["id"] = flow_max + 1
        steps = _step_numbers(typed)
        self.step_span = (max(steps) - min(steps) + 1) if steps else 0


def _time_span(typed: list[_Event]) -> float:
    """Microseconds from the first event's start to the last one's end (0 without timed events)."""
    lo, hi = math.inf, -math.inf
    for e in typed:
        ts = e.ts
        if isinstance(ts, (int, float)):
            dur = e.dur if isinstance(e.dur, (int, float)) and e.dur > 0 else 0
            lo, hi = min(lo, ts), max(hi, ts + dur)
    return (hi - lo) if lo != math.inf else 0


def _id_maxima(typed: list[_Event]) -> tuple[dict[str, int], int]:
    """The largest value of each of :data:`ID_ARGS` in the events' args, and of the flow ids
    (-1 where there is none)."""
    id_max = dict.fromkeys(ID_ARGS, -1)
    flow_max = -1
    for e in typed:
        if isinstance(e.id, int):
            flow_max = max(flow_max, e.id)
        a = e.args
        if isinstance(a, dict):
            for k in ID_ARGS:
                v = a.get(k)
                if isinstance(v, int) and v > id_max[k]:
                    id_max[k] = v
    return id_max, flow_max


def _step_numbers(typed: list[_Event]) -> list[int]:
    """The numbers of the ``ProfilerStep#N`` events."""
    steps: list[int] = []
    for e in typed:
        if isinstance(e.name, str) and e.name.startswith("ProfilerStep#"):
            m = _STEP.match(e.name)
            if m:
                steps.append(int(m.group(1)))
    return steps


@functools.lru_cache(maxsize=2)
def _load(path: str, size: int, mtime_ns: int) -> _Source:
    """The parsed source (cached by path, size and mtime, so replicating to many ranks parses once)."""
    return _Source(path)


def _rewriter(shift_us: int, offsets: dict[str, int]) -> Any:
    """``re.sub`` callback adding ``shift_us`` to ``ts`` and the offsets to the id fields."""
    offs = {k.encode(): v for k, v in offsets.items()}
    offs[b"ts"] = shift_us

    def sub(m: re.Match[bytes]) -> bytes:
        if m.group(1) is not None:
            key, sep, whole = m.group(1), m.group(2), int(m.group(3))
            off = offs.get(key, 0)
            if off == 0 or (whole < 0 and key != b"ts"):
                return m.group(0)
            return b'"%s"%s%d' % (key, sep, whole + off)
        whole = int(m.group(6))
        if whole < 0:  # -0.5 + 3 is 2.5, not 3.5: fall back to float arithmetic
            return b'"ts"%s%r' % (m.group(5), float(m.group(6) + m.group(7)) + shift_us)
        return b'"ts"%s%d%s' % (m.group(5), whole + shift_us, m.group(7))

    return sub


def _jitter(raw: bytes, factor: float) -> bytes:
    def sub(m: re.Match[bytes]) -> bytes:
        return b'"dur"%s%.3f' % (m.group(1), float(m.group(2)) * factor)

    return _DUR.sub(sub, raw, count=1)


def _copy_text(src: _Source, i: int, factors: np.ndarray | None) -> list[bytes]:
    """The events of copy ``i`` as text, in batches joined by ``,``."""
    idx = np.arange(len(src.events))
    if i > 0:
        idx = idx[~src.meta_event]
    sub = _rewriter(i * src.period_us, {k: i * s for k, s in src.id_span.items()}) if i else None
    step_off = i * src.step_span

    def step_sub(m: re.Match[bytes]) -> bytes:
        return b'"name"%s"ProfilerStep#%d"' % (m.group(1), int(m.group(2)) + step_off)

    gpu = src.gpu
    out = []
    for lo in range(0, len(idx), _BATCH):
        pieces = []
        for j in idx[lo : lo + _BATCH].tolist():
            r = bytes(src.events[j])
            if factors is not None and gpu[j]:
                r = _jitter(r, float(factors[j]))
            pieces.append(r)
        text = b",\n".join(pieces)
        if sub is not None:
            text = _FIELDS.sub(sub, text)
            if step_off:
                text = _STEP_NAME.sub(step_sub, text)
        out.append(text)
    return out


def _open(dst: str, gz: bool) -> BinaryIO:
    if gz:
        return _gzip.open(dst, "wb", compresslevel=1)  # type: ignore[return-value]
    return open(dst, "wb", buffering=1 << 20)


def _set_distributed_info(
    head: dict[str, bytes], tail: dict[str, bytes], rank: int | None, world_size: int | None
) -> None:
    """Set ``rank`` and ``world_size`` (those given) in the trace's ``distributedInfo`` (where it
    is, after the events or before them; added before them when the source has none)."""
    where = tail if "distributedInfo" in tail else head
    info = msgspec.json.decode(where["distributedInfo"]) if "distributedInfo" in where else {}
    if not isinstance(info, dict):
        info = {}
    if rank is not None:
        info["rank"] = int(rank)
    if world_size is not None:
        info["world_size"] = int(world_size)
    where["distributedInfo"] = msgspec.json.encode(info)


def tile_trace(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    times: int,
    rank: int | None = None,
    jitter: float = 0.0,
    seed: int = 0,
    gzip: bool = False,
    world_size: int | None = None,
) -> dict[str, Any]:
    """Write ``times`` copies of the trace ``src``, one after the other in time, to ``dst``.

    Parameters
    ----------
    src
        A Kineto JSON trace (``.json`` or gzip-compressed; detected from the content).
    dst
        Output path. Written to a temporary file first and renamed, so it is complete or absent.
    times
        Number of copies (>= 1). Events, size and duration grow about linearly.
    rank
        Set ``distributedInfo.rank`` (else the source's is kept). Use one call per rank to
        build a multi-rank job from one trace.
    jitter
        Shorten each GPU event's duration by a random fraction in ``[0, jitter)``
        (``0 <= jitter < 1``); 0 keeps durations exactly.
    seed
        Seed of the jitter; combined with ``rank`` so each rank gets its own perturbation.
    gzip
        Compress the output with gzip (fast level).
    world_size
        Set ``distributedInfo.world_size`` too.

    Returns
    -------
    dict
        ``path``, ``events`` (events written), ``json_bytes`` (uncompressed size),
        ``file_bytes`` (size on disk), ``times``, ``rank``, ``period_us`` (time shift between
        copies) and ``source_events``.
    """
    if isinstance(times, bool) or not isinstance(times, int) or times < 1:
        raise UsageError(f"times must be an integer >= 1, got {times!r}")
    if not 0.0 <= jitter < 1.0:
        raise UsageError(f"jitter must be in [0, 1), got {jitter!r}")
    src, dst = os.fspath(src), os.fspath(dst)
    try:
        st = os.stat(src)
    except OSError as exc:
        raise InputError(src, f"cannot read the file: {exc.strerror}") from None
    source = _load(os.path.abspath(src), st.st_size, st.st_mtime_ns)
    if times * len(source.data) > MAX_TILED_BYTES:
        raise UsageError(
            f"times={times:,}: {times:,} copies of {src} ({format_size(len(source.data))} of JSON) would be more "
            f"than {format_size(MAX_TILED_BYTES)}, the input size dtrace reads by default"
        )
    head = {k: bytes(v) for k, v in source.head.items()}
    tail = {k: bytes(v) for k, v in source.tail.items()}
    if rank is not None or world_size is not None:
        _set_distributed_info(head, tail, rank, world_size)
    rng = np.random.default_rng([seed, 0 if rank is None else int(rank) + 1])

    n_out = json_bytes = 0

    def fill(tmp: str) -> None:
        nonlocal n_out, json_bytes
        with _open(tmp, gzip) as out:

            def write(b: bytes) -> None:
                nonlocal json_bytes
                json_bytes += len(b)
                out.write(b)

            write(
                b"{\n"
                + b"".join(b"  %s: %s,\n" % (msgspec.json.encode(k), v) for k, v in head.items())
                + b'  "traceEvents": [\n'
            )
            first = True
            for i in range(times):
                factors = 1.0 - jitter * rng.random(len(source.events)) if jitter > 0 else None
                for text in _copy_text(source, i, factors):
                    write(text if first else b",\n" + text)
                    first = False
                n_out += len(source.events) - (int(source.meta_event.sum()) if i else 0)
            write(b"\n  ]" + b"".join(b",\n  %s: %s" % (msgspec.json.encode(k), v) for k, v in tail.items()) + b"\n}\n")

    atomic_write(dst, fill)
    return {
        "path": dst,
        "events": n_out,
        "json_bytes": json_bytes,
        "file_bytes": os.path.getsize(dst),
        "times": times,
        "rank": rank,
        "period_us": source.period_us,
        "source_events": len(source.events),
    }
