"""The Kineto reader's two side tables for the op performance model: ``op_args`` and ``devices``.

``op_args``: the arguments ``record_shapes=True`` records on a ``cpu_op`` (``Input Dims``,
``Input type``, ``Input Strides``, ``Concrete Inputs``), kept for the ops the performance model
has a formula for (:func:`dtrace.knowledge.opmodel.priority` ``MODEL``: the only ones whose arguments are
read; a training step records shapes on many more — views, ``empty``, wrappers — and keeping
those cost the reader 10 % for nothing). The reader's ``Args`` struct decodes them
as ``msgspec.Raw`` — the JSON text is only delimited, never turned into Python lists — and
:class:`OpArgsBuffer` copies the texts of each block's host ops out with C-level ``map`` calls
(no Python code per event), the four texts of an op joined by :data:`~dtrace.core.schema.ARGS_SEP`
into one dictionary-encoded column: a training step repeats the same few hundred combinations,
so the column holds a small dictionary and int32 codes. The op model parses each distinct
combination once (:mod:`dtrace.knowledge.opmodel`).

``devices``: the part's GPU as ``deviceProperties`` describes it (name, vendor, compute
capability, multiprocessors, memory), one row, for matching the hardware peaks
(:mod:`dtrace.knowledge.hardware`).
"""

from __future__ import annotations

import functools
import operator
from itertools import chain
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.constants import KIND_CODES
from ..core.schema import ARGS_SEP, DEVICE_SCHEMA, OP_ARGS_SCHEMA
from ..knowledge import opmodel
from ._scanned import join_spans

NO_RAW = msgspec.Raw()
"""The default of an absent ``msgspec.Raw`` argument (its text is empty)."""

FIELDS = ("input_dims", "input_type", "input_strides", "concrete")
_GET_ALL = operator.attrgetter(*FIELDS)
_CPU_OP = KIND_CODES["cpu_op"]
_SEP = ARGS_SEP.encode()
_MODEL_NAMES = pa.array(sorted(n for n, e in opmodel.REGISTRY.items() if e.priority == opmodel.MODEL), pa.string())
_MODEL_PREFIXES = tuple(p for p, e in opmodel.PREFIXES.items() if e.priority == opmodel.MODEL)  # Inductor's triton_*


class OpArgsBuffer:
    """The recorded argument texts of the host ops, collected block by block."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []
        self.texts: list[pa.Array] = []

    def add(self, kinds: np.ndarray, args: list[Any], base: int, names: pa.DictionaryArray) -> None:
        """Keep the argument texts of the block's ``cpu_op`` events with a model that recorded shapes.

        ``kinds`` are the block's kind codes, ``args`` its decoded ``args`` structs, ``base``
        the row of its first event in the file's event table and ``names`` its event names
        (dictionary-encoded: the model's op names are looked up once per distinct name). The
        four texts of each op are joined by :data:`~dtrace.core.schema.ARGS_SEP` in one ``b"".join``
        (no bytes object per event).
        """
        rows = _modelled_rows(kinds, names)
        if not rows.size:
            return
        quads = list(map(_GET_ALL, map(args.__getitem__, rows.tolist())))  # (dims, types, strides, concrete)
        # every text followed by the separator, in one join; JSON text never holds it raw, so the
        # separators' positions give each op's span and whether it recorded dims
        data = _SEP.join(chain.from_iterable(quads)) + _SEP
        seps = np.flatnonzero(np.frombuffer(data, np.uint8) == _SEP[0])
        ends = seps[3::4] + 1
        starts = np.r_[0, ends[:-1]]
        has = seps[0::4] > starts  # "Input Dims" recorded (not empty)
        if not has.any():
            return
        offsets = np.r_[0, ends].astype(np.int64)
        arr = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), len(quads), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )
        self.rows.append(rows[has].astype(np.int64) + base)
        self.texts.append(arr if has.all() else arr.filter(pa.array(has)))

    def add_spans(
        self,
        kinds: np.ndarray,
        base: int,
        names: pa.DictionaryArray,
        text: memoryview,
        spans: np.ndarray,
        decoded: dict[int, Any],
    ) -> None:
        """:meth:`add` for a block the compiled scanner read (:mod:`._scanned`): the texts are
        gathered from the block ``text`` by the extension's ``join_spans``, no Python per event.

        ``spans`` holds ``(row, field, start, end)``: the byte span in ``text`` of argument
        ``field`` (the index in :data:`FIELDS`) of the block's event ``row``; ``decoded`` the
        ``args`` of the events msgspec decoded instead (by row), whose texts are taken from them.
        """
        rows = _modelled_rows(kinds, names)
        if not rows.size:
            return
        source = np.frombuffer(text, np.uint8)
        starts = np.zeros((len(rows), len(FIELDS)), np.int64)
        ends = np.zeros_like(starts)
        selected = np.zeros(len(kinds), bool)
        selected[rows] = True
        wanted = spans[selected[spans[:, 0]] & (spans[:, 1] < len(FIELDS))] if len(spans) else spans
        at = np.searchsorted(rows, wanted[:, 0])
        starts[at, wanted[:, 1]] = wanted[:, 2]
        ends[at, wanted[:, 1]] = wanted[:, 3]
        own = sorted((int(np.searchsorted(rows, r)), a) for r, a in decoded.items() if selected[r])
        if own:  # the few events msgspec decoded: their texts appended after the block's
            extra = [bytes(t) for _, a in own for t in _GET_ALL(a)]
            own_len = np.array([len(t) for t in extra], np.int64).reshape(-1, len(FIELDS))
            at_extra = len(source) + np.cumsum(own_len.ravel()).reshape(own_len.shape) - own_len
            source = np.concatenate([source, np.frombuffer(b"".join(extra), np.uint8)])
            pos = [i for i, _ in own]
            starts[pos], ends[pos] = at_extra, at_extra + own_len
        has = ends[:, 0] > starts[:, 0]  # "Input Dims" recorded (not empty)
        if not has.any():
            return
        lengths = (ends[has] - starts[has]).ravel()
        pairs = np.stack([starts[has].ravel(), ends[has].ravel()], axis=1)
        assert join_spans is not None  # a scanned block: the extension is built
        data = join_spans(source, np.ascontiguousarray(pairs, np.int64), _SEP[0])  # every text, then the separator
        offsets = np.r_[0, np.cumsum(lengths + 1)[len(FIELDS) - 1 :: len(FIELDS)]].astype(np.int64)
        arr = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), int(has.sum()), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )
        self.rows.append(rows[has].astype(np.int64) + base)
        self.texts.append(arr)

    def table(self, kept: np.ndarray | None) -> pa.Table:
        """The ``op_args`` side table; ``kept`` (sorted rows of the events kept, None: all)
        renumbers the rows after implausible events were dropped."""
        if not self.rows:
            return OP_ARGS_SCHEMA.empty_table()
        rows = np.concatenate(self.rows)
        texts = pa.chunked_array(self.texts, pa.large_binary()).combine_chunks()
        if kept is not None:
            pos = np.minimum(np.searchsorted(kept, rows), max(len(kept) - 1, 0))
            ok = kept[pos] == rows if len(kept) else np.zeros(len(rows), bool)
            rows = pos[ok].astype(np.int64)
            texts = texts.filter(pa.array(ok))
        return pa.Table.from_arrays([pa.array(rows, pa.int64()), _dictionary(texts)], schema=OP_ARGS_SCHEMA)


def _modelled_rows(kinds: np.ndarray, names: pa.DictionaryArray) -> np.ndarray:
    """The rows of a block's host ops whose name an op model knows (names looked up once per
    distinct name; a generated kernel's by its name's prefix)."""
    modelled = pc.is_in(names.dictionary, value_set=_MODEL_NAMES).to_numpy(zero_copy_only=False)
    for prefix in _MODEL_PREFIXES:
        generated = pc.fill_null(pc.starts_with(names.dictionary, prefix), False)
        modelled = modelled | generated.to_numpy(zero_copy_only=False)
    if not modelled.any():
        return np.zeros(0, np.int64)
    idx = names.indices.to_numpy(zero_copy_only=False)
    return np.flatnonzero((kinds == _CPU_OP) & modelled[idx])


def _dictionary(texts: pa.Array) -> pa.DictionaryArray:
    """Binary texts as dictionary-encoded strings: only the distinct values are checked as UTF-8."""
    enc = texts.dictionary_encode()
    return pa.DictionaryArray.from_arrays(enc.indices.cast(pa.int32()), enc.dictionary.cast(pa.string()))


def vendor_of(name: str, warp_size: Any) -> str:
    """``amd`` or ``nvidia`` from a device's name and warp size (``""`` if neither says).

    Examples
    --------
    >>> vendor_of("AMD Instinct MI300X", 64), vendor_of("AMD Radeon Graphics", 64), vendor_of("NVIDIA H200", 32)
    ('amd', 'amd', 'nvidia')
    """
    low = (name or "").lower()
    if low.startswith("amd") or "instinct" in low or "radeon" in low or warp_size == 64:
        return "amd"
    if low.startswith(("nvidia", "tesla")) or warp_size == 32:
        return "nvidia"
    return ""


def device_table(properties: list[Any] | None, device: int) -> pa.Table:
    """The ``devices`` side table of one part: the ``deviceProperties`` entry whose ``id`` is
    ``device`` (empty if the trace does not describe it). The ranks of a job describe the same
    few GPUs: each distinct entry becomes a table once per process (tables are immutable)."""
    for d in properties or []:
        if not isinstance(d, dict) or d.get("id") != device:
            continue
        try:
            entry = msgspec.json.encode(d)
        except (TypeError, ValueError, msgspec.EncodeError):
            return _device_table(d, device)
        if b"null" in entry:  # a NaN or an infinity encodes as null too: that entry is not cached
            return _device_table(d, device)
        return _device_entry_table(entry, device)
    return DEVICE_SCHEMA.empty_table()


@functools.lru_cache(maxsize=1 << 10)
def _device_entry_table(entry: bytes, device: int) -> pa.Table:
    """:func:`_device_table` of a ``deviceProperties`` entry given as its JSON, once per process."""
    return _device_table(msgspec.json.decode(entry), device)


def _device_table(d: dict[str, Any], device: int) -> pa.Table:
    """The ``devices`` table of the ``deviceProperties`` entry ``d`` of ``device``."""
    name = str(d.get("name") or "")
    major, minor = d.get("computeMajor"), d.get("computeMinor")
    cap = f"{major}.{minor}" if isinstance(major, int) and isinstance(minor, int) else ""
    return device_row(device, name, vendor_of(name, d.get("warpSize")), cap, d.get("numSms"), d.get("totalGlobalMem"))


def device_row(device: int, name: str, vendor: str, capability: str, sms: Any, memory_bytes: Any) -> pa.Table:
    """A one-row ``devices`` table (a count that is not a positive int32/int64: -1, unknown), for
    any reader that knows its device: Kineto's ``deviceProperties``, rocprofv3's agents, Nsight
    Systems' ``TARGET_INFO_GPU``."""

    def count(v: Any, bits: int) -> int:
        ok = isinstance(v, int) and not isinstance(v, bool) and 0 < v < (1 << (bits - 1))
        return int(v) if ok else -1

    return pa.table(
        {
            "device": pa.array([device], pa.int32()),
            "name": pa.array([name]).dictionary_encode(),
            "vendor": pa.array([vendor]).dictionary_encode(),
            "capability": pa.array([capability]).dictionary_encode(),
            "sms": pa.array([count(sms, 32)], pa.int32()),
            "memory_bytes": pa.array([count(memory_bytes, 64)], pa.int64()),
        }
    ).cast(DEVICE_SCHEMA)
