"""Per-partition analyses: pure functions ``Batch -> small DataFrame``, one per results table.

A :class:`~dtrace.batch.Batch` holds any number of (rank, device) parts; every analysis
computes all of them in one vectorised pass and returns rows keyed by ``rank`` and ``device``.
Each is registered with its declared output columns and dtypes; :func:`run_analyses` conforms
every output to its declaration, and a contract test runs all of them on an empty partition
and on partitions of many parts. Adding an analysis is one module and one line in
:data:`ANALYSES`; users pass their own :class:`Analysis` objects to :func:`dtrace.analyze`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from ..batch import Batch
from . import breakdown as _bd
from . import collectives as _coll
from . import gaps as _gaps
from . import kernels as _kern
from . import memops as _mem
from . import ranges as _ranges
from . import ops as _ops
from . import segments as _seg

I64, I32, STR, F64, BOOL = "int64", "int32", "object", "float64", "bool"
_KEYS = {"rank": I32, "device": I32}
_BD = {c: I64 for c in _bd.VALUE_COLUMNS}
_ITER = {"iters": I64, "count_per_iter": F64, "total_per_iter_ns": F64}


@dataclass(frozen=True)
class Analysis:
    """One results table computed per partition.

    Parameters
    ----------
    table
        Name of the results table (a Parquet file in OUT, ``results.<table>``).
    func
        ``func(batch) -> DataFrame``: a pure module-level function of a
        :class:`~dtrace.batch.Batch` (any number of parts), with ``rank`` and ``device`` columns.
    columns
        Declared output columns and dtypes (``"int64"``, ``"int32"``, ``"float64"``, ``"bool"``,
        ``"object"`` for text); extra columns are kept as they come.
    """

    table: str
    func: Callable[[Batch], pd.DataFrame]
    columns: dict[str, str]


ANALYSES: list[Analysis] = [
    Analysis("breakdown", _bd.breakdown, {**_KEYS, **_BD, "memset_ns": I64, "gpu_events": I64, "streams": I64,
                                          "steps": I64, "first_ns": I64, "last_ns": I64,
                                          "clipped_events": I64, "clipped_ns": I64}),
    Analysis("streams", _bd.streams, {**_KEYS, "stream": I64, **_BD, "events": I64}),
    Analysis("kernels", _kern.kernel_stats, {**_KEYS, "name": STR, "category": STR, "kind": STR, "class": STR,
                                             "count": I64, "total_ns": I64, "mean_ns": F64, "median_ns": F64,
                                             "min_ns": I64, "max_ns": I64, "std_ns": F64, "time_share": F64,
                                             "count_share": F64, **_ITER}),
    Analysis("classes", _kern.class_stats, {**_KEYS, "class": STR, "classifier": STR, "count": I64, "total_ns": I64,
                                            "mean_ns": F64, "kernels": I64, "time_share": F64, "count_share": F64,
                                            **_ITER}),
    Analysis("nccl", _kern.nccl_stats, {**_KEYS, "collective": STR, "count": I64, "total_ns": I64, "mean_ns": F64,
                                        "time_share": F64, **_ITER}),
    Analysis("memops", _mem.memop_stats, {**_KEYS, "op": STR, "count": I64, "total_ns": I64, "mean_ns": F64,
                                          "min_ns": I64, "max_ns": I64, "bytes": I64, "bandwidth_bytes_per_s": F64,
                                          "time_share": F64, **_ITER}),
    Analysis("gaps", _gaps.gap_stats, {**_KEYS, "stream": I64, "events": I64, "span_ns": I64, "gaps": I64,
                                       "idle_ns": I64, "mean_ns": F64, "min_ns": I64, "max_ns": I64, "std_ns": F64,
                                       **{f"{c}_ns": I64 for c in _gaps.CAUSES},
                                       **{f"{c}_gaps": I64 for c in _gaps.CAUSES}}),
    Analysis("device_gaps", _gaps.device_gap_stats, {**_KEYS, "events": I64, "span_ns": I64, "gaps": I64,
                                                     "idle_ns": I64, "mean_ns": F64, "min_ns": I64, "max_ns": I64,
                                                     "std_ns": F64, **{f"{c}_ns": I64 for c in _gaps.CAUSES},
                                                     **{f"{c}_gaps": I64 for c in _gaps.CAUSES}}),
    Analysis("device_gap_histogram", _gaps.device_gap_histogram, {**_KEYS, "bin": I64, "lo_ns": F64, "hi_ns": F64,
                                                                  "count": I64, "total_ns": I64}),
    Analysis("gap_histogram", _gaps.gap_histogram, {**_KEYS, "stream": I64, "bin": I64, "lo_ns": F64, "hi_ns": F64,
                                                    "count": I64, "total_ns": I64}),
    Analysis("transitions", _gaps.transitions, {**_KEYS, "stream": I64, "prev_name": STR, "next_name": STR,
                                                "count": I64, "total_ns": I64, "mean_ns": F64, "min_ns": I64,
                                                "max_ns": I64, "std_ns": F64}),
    Analysis("steps", _bd.steps, {**_KEYS, "step": I64, "step_ns": I64, **_BD, "host_ns": I64, "events": I64}),
    Analysis("nvtx_ranges", _ranges.range_stats, {**_KEYS, "name": STR, "count": I64, "with_gpu": I64,
                                                  "range_ns": I64, "proj_ns": I64, "proj_mean_ns": F64,
                                                  "proj_min_ns": I64, "proj_max_ns": I64, "gpu_events": I64,
                                                  "kernel_ns": I64, "non_comm_kernel_ns": I64, **_BD}),
    Analysis("ops", _ops.ops, _ops.COLUMNS),
    Analysis("collectives", _coll.comm_kernels, _coll.DECLARED),  # matched across ranks by reduce.collectives
    Analysis("segments", _seg.segments, _seg.COLUMNS),  # per-rank dependency chains, replayed by reduce.whatif
]


def has_dtype(col: pd.Series, want: str) -> bool:
    """Whether ``col`` already has the declared dtype (``object`` means text: any string dtype)."""
    if want == STR:
        return col.dtype == object or pd.api.types.is_string_dtype(col.dtype)
    return str(col.dtype) == want


def conform(df: pd.DataFrame, columns: dict[str, str], table: str) -> pd.DataFrame:
    """Check that ``df`` has the declared columns (extra ones allowed) and cast their dtypes.

    Text columns (declared ``object``) may be object or pandas string columns.
    """
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise TypeError(f"analysis {table!r} did not produce the declared columns {missing}")
    if all(has_dtype(df[c], want) for c, want in columns.items()):
        return df
    out = {}
    for c in df.columns:
        if c in columns:
            want = columns[c]
            col = df[c]
            if want == STR:
                out[c] = col.astype(object).to_numpy() if len(col) else np.array([], object)
            else:
                out[c] = col.to_numpy().astype(want) if len(col) else np.array([], want)
        else:
            out[c] = df[c].to_numpy()
    return pd.DataFrame(out, columns=list(df.columns))


def run_analyses(batch: Batch, analyses: list[Analysis] | None = None, only: set[str] | None = None
                 ) -> dict[str, pd.DataFrame]:
    """Run every registered analysis (or the given ones; or those whose table is in ``only``) on
    one partition."""
    todo = ANALYSES if analyses is None else analyses
    return {a.table: conform(a.func(batch), a.columns, a.table) for a in todo if only is None or a.table in only}
