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
from typing import cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core.dtypes import empty_frame, missing_if_negative
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


def _side_column(
    side: pd.DataFrame, name: str, pos: np.ndarray, default: str | int, dtype: npt.DTypeLike
) -> np.ndarray:
    if name not in side.columns:
        return np.full(len(pos), default, dtype)
    col = side[name]
    if isinstance(col.dtype, pd.CategoricalDtype) or col.dtype == object or pd.api.types.is_string_dtype(col.dtype):
        cat = col if isinstance(col.dtype, pd.CategoricalDtype) else col.astype("category")
        # object arrays throughout: a fixed-width unicode array would copy every (long) group-ranks
        # string into each row's slot
        labels = np.array([str(c) for c in cat.cat.categories] + [default], dtype=object)
        codes = cat.cat.codes.to_numpy()
        codes = np.where(codes < 0, len(labels) - 1, codes)
        vals = labels[np.append(codes, len(labels) - 1)[pos]]
        return cast(np.ndarray, vals.astype(dtype))
    arr = np.append(col.to_numpy(), default)
    return cast(np.ndarray, arr[pos].astype(dtype))


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
    inferred = np.array([infer_op(str(names.categories[c])) for c in used], dtype=object)[inv]
    n = len(idx)
    side = batch.collectives
    if len(side):
        side = side.drop_duplicates(["part", "row"])
        pos = first_match((side["part"].to_numpy(I64), side["row"].to_numpy(I64)), (part, g["row"].to_numpy(I64)[idx]))
        pos = np.where(pos >= 0, pos, len(side))  # len(side) selects the default
        coll = _side_column(side, "collective", pos, "", object)
        op = np.where(coll != "", coll, inferred)
        group = _side_column(side, "group", pos, "", object)
        group_ranks = _side_column(side, "group_ranks", pos, "", object)
        group_size = _side_column(side, "group_size", pos, -1, I64)
        seq = _side_column(side, "seq", pos, -1, I64)
        nbytes = _side_column(side, "bytes", pos, -1, I64)
        dtype = _side_column(side, "dtype", pos, "", object)
    else:
        op = inferred
        group = np.full(n, "", object)
        group_ranks = np.full(n, "", object)
        group_size = np.full(n, -1, I64)
        seq = np.full(n, -1, I64)
        nbytes = np.full(n, -1, I64)
        dtype = np.full(n, "", object)
    key = dense_codes(part, pd.factorize(group)[0], pd.factorize(group_ranks)[0], pd.factorize(op)[0])[0]
    return pd.DataFrame(
        {
            **batch.keys(part),
            "stream": stream,
            "start_ns": start,
            "end_ns": g["end_ns"].to_numpy(I64)[idx],
            "op": op.astype(object),
            "group": group,
            "group_ranks": group_ranks,
            "group_size": missing_if_negative(group_size),
            "seq": missing_if_negative(seq),
            "bytes": missing_if_negative(nbytes),
            "dtype": dtype,
            "step": missing_if_negative(g["step"].to_numpy(I64)[idx]),  # NA: outside every step
            "order_op": cumcount(key),
            "order_stream": cumcount(dense_codes(part, stream)[0]),
        }
    )
