"""Communication kernels of every rank, one row each: the input of cross-rank collective matching.

A row per comm kernel (category ``comm``, kind ``kernel``) of every part of the partition, with its stream, times, the
collective's normalized name (``op``), process group, ``seq`` and message bytes from the
reader's collective side table (keyed by the kernel's ``row``). Where the trace carries no
collective args the op is inferred from the kernel name (``ncclKernel_AllReduce_*`` →
``all_reduce``, ``ncclDevKernel_SendRecv`` → ``send_recv``, ...; see :data:`OP_PATTERNS`) and
the group, seq and bytes are unknown (``""``, ``NA``). Two order indices let
:mod:`dtrace.reduce.collectives` match instances across ranks without a ``seq``: the position
within (group, op) and the position on the stream, both by start time.

Ranks have a few hundred to a few thousand comm kernels per trace, so these rows are small
enough to send to the client.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..core.dtypes import empty_frame, missing_if_negative, text_column
from ..vector.groups import I64, cumcount, dense_codes, first_match, lexsort_ints, unique_inverse
from .batch import Batch

# kernel name → collective (case-insensitive re.search, first match wins)
OP_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"all_?reduce|allreduce|cross_device_reduce", "all_reduce"),
    (r"all_?gather", "all_gather"),
    (r"reduce_?scatter", "reduce_scatter"),
    (r"all_?to_?all", "all_to_all"),
    (r"send_?recv", "send_recv"),
    (r"broadcast|bcast", "broadcast"),
    (r"(?<![a-z])send|_send", "send"),
    (r"recv", "recv"),
    (r"reduce", "reduce"),
)
UNKNOWN_OP = "other"

DECLARED: dict[str, str] = {
    "rank": "int32",
    "device": "int32",
    "stream": "int64",
    "start_ns": "int64",
    "end_ns": "int64",
    "op": "object",
    "group": "object",
    "group_ranks": "object",
    "group_size": "Int64",
    "seq": "Int64",
    "bytes": "Int64",
    "dtype": "object",
    "step": "Int64",
    "order_op": "int64",
    "order_stream": "int64",
}
"""Output columns and dtypes (registered with the analysis)."""


def infer_op(name: str) -> str:
    """The collective a communication kernel performs, from its name.

    Examples
    --------
    >>> infer_op("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)")
    'all_reduce'
    >>> infer_op("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)")
    'send_recv'
    >>> infer_op("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
    'reduce_scatter'
    """
    for rx, op in _COMPILED:
        if rx.search(name):
            return op
    return UNKNOWN_OP


_COMPILED = tuple((re.compile(p, re.I), op) for p, op in OP_PATTERNS)


def _side_column(side: pd.DataFrame | None, name: str, pos: np.ndarray, default: int) -> np.ndarray:
    """The integer column ``name`` of ``side`` at ``pos`` (``len(side)`` or no ``side``: ``default``)."""
    if side is None or name not in side.columns:
        return np.full(len(pos), default, I64)
    values: np.ndarray = np.append(side[name].to_numpy(), default)[pos]
    return values.astype(I64)


def _side_text(side: pd.DataFrame | None, name: str, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The text column ``name`` of ``side`` at ``pos`` (``len(side)``, a missing value or no
    ``side``: ``""``) as distinct strings and a code per row into them (equal strings, equal
    codes): the rows' strings are built once, by :func:`text_column`."""
    if side is None or name not in side.columns:
        return np.array([""], dtype=object), np.zeros(len(pos), I64)
    col = side[name]
    cat = col if isinstance(col.dtype, pd.CategoricalDtype) else col.astype("category")
    labels = np.array([str(c) for c in cat.cat.categories] + [""], dtype=object)
    codes = cat.cat.codes.to_numpy().astype(I64)
    codes = np.append(np.where(codes < 0, len(labels) - 1, codes), len(labels) - 1)[pos]
    return _distinct(labels, codes)


def _distinct(labels: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``labels`` without repeats, and ``codes`` into them (a few labels: one dict pass)."""
    first: dict[str, int] = {}
    to = np.array([first.setdefault(v, len(first)) for v in labels], I64)
    return np.array(list(first), dtype=object), to[codes] if to.size else codes


def comm_kernels(batch: Batch) -> pd.DataFrame:
    """One row per communication kernel of every part, sorted by (part, start time)."""
    g = batch.gpu
    if not len(g):
        return empty_frame(DECLARED)
    sel = (g["category"] == "comm").to_numpy(bool) & (g["kind"] == "kernel").to_numpy(bool)
    if not sel.any():
        return empty_frame(DECLARED)
    idx = np.flatnonzero(sel)
    part = g["part"].to_numpy(I64)[idx]
    start = g["start_ns"].to_numpy(I64)[idx]
    stream = g["stream"].to_numpy(I64)[idx]
    o = lexsort_ints((stream, start, part))
    idx, part, start, stream = idx[o], part[o], start[o], stream[o]
    names = g["name"].array  # classify each distinct comm name once
    used, inv = unique_inverse(np.asarray(names.codes)[idx])
    inferred = np.array([infer_op(str(names.categories[c])) for c in used], dtype=object)
    side = batch.collectives
    if len(side):
        side = side.drop_duplicates(["part", "row"])
        pos = first_match((side["part"].to_numpy(I64), side["row"].to_numpy(I64)), (part, g["row"].to_numpy(I64)[idx]))
        pos = np.where(pos >= 0, pos, len(side))  # len(side) selects the default
    else:
        side, pos = None, np.zeros(len(idx), I64)
    # the stated collective, else the one the kernel's name says
    coll, coll_code = _side_text(side, "collective", pos)
    op, op_code = _distinct(
        np.concatenate([coll, inferred]), np.where(coll[coll_code] != "", coll_code, len(coll) + inv)
    )
    group, group_code = _side_text(side, "group", pos)
    ranks, ranks_code = _side_text(side, "group_ranks", pos)
    dtype, dtype_code = _side_text(side, "dtype", pos)
    key = dense_codes(part, group_code, ranks_code, op_code)[0]
    return pd.DataFrame(
        {
            **batch.keys(part),
            "stream": stream,
            "start_ns": start,
            "end_ns": g["end_ns"].to_numpy(I64)[idx],
            "op": text_column(op, op_code),
            "group": text_column(group, group_code),
            "group_ranks": text_column(ranks, ranks_code),
            "group_size": missing_if_negative(_side_column(side, "group_size", pos, -1)),
            "seq": missing_if_negative(_side_column(side, "seq", pos, -1)),
            "bytes": missing_if_negative(_side_column(side, "bytes", pos, -1)),
            "dtype": text_column(dtype, dtype_code),
            "step": missing_if_negative(g["step"].to_numpy(I64)[idx]),  # NA: outside every step
            "order_op": cumcount(key),
            "order_stream": cumcount(dense_codes(part, stream)[0]),
        }
    )
