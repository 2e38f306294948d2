"""Per-partition analyses: pure functions ``Batch -> small DataFrame``, one per results table.

A :class:`~dtrace.analyses.batch.Batch` holds any number of (rank, device) parts; every analysis
computes all of them in one vectorised pass and returns rows keyed by ``rank`` and ``device``.
Each is registered with its declared output columns and dtypes; :func:`run_analyses` conforms
every output to its declaration, and a contract test runs all of them on an empty partition
and on partitions of many parts. Adding an analysis is one module and one line in
:data:`ANALYSES`; users pass their own :class:`Analysis` objects to :func:`dtrace.analyze`.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa

from ..core.dtypes import (  # noqa: F401
    BOOL,
    DTYPES,
    F64,
    I32,
    I64,
    NI64,
    STR,
    as_declared,
    conform,
    has_dtype,
    missing_if_negative,
)
from ..errors import UsageError
from . import breakdown as _bd
from . import collectives as _coll
from . import counters as _counters
from . import critical_path as _cp
from . import gaps as _gaps
from . import kernels as _kern
from . import launches as _launch
from . import memops as _mem
from . import memory as _memory
from . import opperf as _opperf
from . import ops as _ops
from . import queues as _queues
from . import ranges as _ranges
from . import segments as _seg
from . import sequences as _seqs
from .batch import Batch

_KEYS = {"rank": I32, "device": I32}
#: the statistics of the idle gaps of a stream (``gaps``) or a device (``device_gaps``)
_GAP_STATS = {
    "events": I64,
    "span_ns": I64,
    "gaps": I64,
    "idle_ns": I64,
    "mean_ns": I64,
    "min_ns": I64,
    "max_ns": I64,
    "std_ns": I64,
    **{f"{c}_ns": I64 for c in _gaps.CAUSES},
    **{f"{c}_gaps": I64 for c in _gaps.CAUSES},
}
_BD = {c: I64 for c in _bd.VALUE_COLUMNS}
_ITER = {"iters": I64, "count_per_iter": F64, "total_per_iter_ns": I64}


@dataclass(frozen=True)
class Analysis:
    """One results table computed per partition.

    Parameters
    ----------
    table
        Name of the results table (a Parquet file in OUT, ``results.<table>``).
    func
        ``func(batch) -> DataFrame``: a pure module-level function of a
        :class:`~dtrace.analyses.batch.Batch` (any number of parts), with ``rank`` and ``device`` columns.
    columns
        Declared output columns and dtypes (``"int64"``, ``"int32"``, ``"Int64"`` (nullable: ``NA``
        for a missing value), ``"float64"``, ``"bool"``, ``"object"`` for text); extra columns are
        kept as they come. In a built-in table a float column declared as an integer is rounded
        half to even (every ``*_ns`` column is an integer number of ns: a mean of 2.5 ns is 2);
        in a user's table a float that is not a whole number is an error.

    Raises
    ------
    UsageError
        A table name that is not a plain identifier, a ``func`` that is not callable, columns
        that are not a mapping of names to the dtypes above.

    Examples
    --------
    >>> Analysis("t", 5, {"rank": "int32"})
    Traceback (most recent call last):
    dtrace.errors.UsageError: analysis 't': func must be a function of a Batch, not int
    """

    table: str
    func: Callable[[Batch], pd.DataFrame]
    columns: dict[str, str]

    def __post_init__(self) -> None:
        if not isinstance(self.table, str) or not self.table.isidentifier() or self.table.startswith("_"):
            raise UsageError(f"analysis table name {self.table!r} is not a plain identifier (letters, digits, _)")
        if not callable(self.func):
            raise UsageError(
                f"analysis {self.table!r}: func must be a function of a Batch, not {type(self.func).__name__}"
            )
        if not isinstance(self.columns, Mapping) or not self.columns:
            raise UsageError(
                f"analysis {self.table!r}: columns must be a dict of column name -> dtype "
                f"(one of {', '.join(DTYPES)}), not {type(self.columns).__name__}"
            )
        for col, dtype in self.columns.items():
            if not isinstance(col, str) or _dtype_name(dtype) not in DTYPES:
                raise UsageError(
                    f"analysis {self.table!r}: column {col!r} has dtype {dtype!r}; dtypes: {', '.join(DTYPES)}"
                )


def _dtype_name(dtype: object) -> str | None:
    """The declared dtype's name (``"int64"``, ``np.int64`` and ``object`` are accepted)."""
    if isinstance(dtype, str):
        return dtype
    try:
        return str(np.dtype(dtype))  # type: ignore[call-overload]
    except TypeError:
        return None


ANALYSES: list[Analysis] = [
    Analysis(
        "breakdown",
        _bd.breakdown,
        {
            **_KEYS,
            **_BD,
            "memset_ns": I64,
            "gpu_events": I64,
            "streams": I64,
            "steps": I64,
            "first_ns": I64,
            "last_ns": I64,
            "clipped_events": I64,
            "clipped_ns": I64,
            "comm_overlap_share": F64,
        },
    ),
    Analysis("streams", _bd.streams, {**_KEYS, "stream": I64, **_BD, "events": I64}),
    Analysis(
        "kernels",
        _kern.kernel_stats,
        {
            **_KEYS,
            "name": STR,
            "category": STR,
            "kind": STR,
            "class": STR,
            "count": I64,
            "total_ns": I64,
            "mean_ns": I64,
            "median_ns": I64,
            "min_ns": I64,
            "max_ns": I64,
            "std_ns": I64,
            "time_share": F64,
            "count_share": F64,
            **_ITER,
        },
    ),
    Analysis(
        "classes",
        _kern.class_stats,
        {
            **_KEYS,
            "class": STR,
            "classifier": STR,
            "count": I64,
            "total_ns": I64,
            "mean_ns": I64,
            "kernels": I64,
            "time_share": F64,
            "count_share": F64,
            **_ITER,
        },
    ),
    Analysis(
        "nccl",
        _kern.nccl_stats,
        {**_KEYS, "collective": STR, "count": I64, "total_ns": I64, "mean_ns": I64, "time_share": F64, **_ITER},
    ),
    Analysis(
        "memops",
        _mem.memop_stats,
        {
            **_KEYS,
            "op": STR,
            "count": I64,
            "total_ns": I64,
            "mean_ns": I64,
            "min_ns": I64,
            "max_ns": I64,
            "bytes": NI64,
            "bandwidth_bytes_per_s": F64,
            "time_share": F64,
            **_ITER,
        },
    ),
    Analysis(
        "gaps",
        _gaps.gap_stats,
        {
            **_KEYS,
            "stream": I64,
            **_GAP_STATS,
        },
    ),
    Analysis(
        "device_gaps",
        _gaps.device_gap_stats,
        {
            **_KEYS,
            **_GAP_STATS,
        },
    ),
    Analysis(
        "device_gap_histogram",
        _gaps.device_gap_histogram,
        {**_KEYS, "bin": I64, "lo_ns": I64, "hi_ns": I64, "count": I64, "total_ns": I64},
    ),
    Analysis(
        "gap_histogram",
        _gaps.gap_histogram,
        {**_KEYS, "stream": I64, "bin": I64, "lo_ns": I64, "hi_ns": I64, "count": I64, "total_ns": I64},
    ),
    Analysis(
        "transitions",
        _gaps.transitions,
        {
            **_KEYS,
            "stream": I64,
            "prev_name": STR,
            "next_name": STR,
            "count": I64,
            "total_ns": I64,
            "mean_ns": I64,
            "min_ns": I64,
            "max_ns": I64,
            "std_ns": I64,
        },
    ),
    Analysis(
        "steps",
        _bd.steps,
        {**_KEYS, "step": I64, "step_ns": I64, **_BD, "host_ns": I64, "events": I64, "comm_overlap_share": F64},
    ),
    Analysis(
        "nvtx_ranges",
        _ranges.range_stats,
        {
            **_KEYS,
            "name": STR,
            "count": I64,
            "with_gpu": I64,
            "range_ns": I64,
            "proj_ns": I64,
            "proj_mean_ns": I64,
            "proj_min_ns": I64,
            "proj_max_ns": I64,
            "gpu_events": I64,
            "kernel_ns": I64,
            "non_comm_kernel_ns": I64,
            **_BD,
        },
    ),
    Analysis("ops", _ops.ops, _ops.COLUMNS),
    Analysis("kernel_sequences", _seqs.kernel_sequences, _seqs.COLUMNS),  # across ranks: reduce.sequences
    Analysis("op_perf", _opperf.op_perf, _opperf.COLUMNS),  # roofline added across ranks by reduce.opperf
    Analysis("devices", _opperf.devices, _opperf.DEVICE_COLUMNS),
    Analysis("kernel_counters", _counters.kernel_counters, _counters.COLUMNS),  # CUPTI range profiling
    Analysis("kernel_counter_values", _counters.kernel_counter_values, _counters.VALUE_COLUMNS),
    Analysis("op_counters", _counters.op_counters, _counters.OP_COLUMNS),
    Analysis("collectives", _coll.comm_kernels, _coll.DECLARED),  # matched across ranks by reduce.collectives
    Analysis("segments", _seg.segments, _seg.COLUMNS),  # per-rank dependency chains, replayed by reduce.whatif
    Analysis("step_bounds", _cp.step_bounds, _cp.COLUMNS),  # what bounds each step: its critical path
    Analysis(
        "launches",
        _launch.launches,
        {
            **_KEYS,
            "stream": I64,
            "step": I64,
            "name": STR,
            "kind": STR,
            "launch_name": STR,
            "start_ns": I64,
            "launch_ns": I64,
            "cpu_ns": I64,
            "gpu_ns": I64,
            "delay_ns": I64,
            "queue_length": I64,
            "negative_delay": BOOL,
            "short": BOOL,
            "runtime_outlier": BOOL,
            "delay_outlier": BOOL,
        },
    ),
    Analysis(
        "launch_stats",
        _launch.launch_stats,
        {
            **_KEYS,
            "stream": I64,
            "launches": I64,
            **{f"cpu_{c}_ns": I64 for c in ("total", "mean", "median", "p95", "max")},
            **{f"gpu_{c}_ns": I64 for c in ("total", "mean", "median")},
            **{f"delay_{c}_ns": I64 for c in ("total", "mean", "median", "p95", "max")},
            "negative_delays": I64,
            "runtime_outliers": I64,
            "delay_outliers": I64,
            "short_kernels": I64,
            "short_gpu_ns": I64,
            "short_share": F64,
        },
    ),
    Analysis(
        "launch_histogram",
        _launch.launch_histogram,
        {**_KEYS, "bin": I64, "lo_ns": I64, "hi_ns": NI64, "count": I64, "share": F64},
    ),
    Analysis(
        "queues",
        _queues.queues,
        {
            **_KEYS,
            "stream": I64,
            "launches": I64,
            "points": I64,
            **{f"length_{c}": F64 for c in ("mean", "std", "min", "p25", "median", "p75", "max", "time_mean")},
            "span_ns": I64,
            "limit": NI64,
            "blocked_ns": I64,
            "starved_ns": I64,
            "blocked_share": F64,
            "starved_share": F64,
        },
    ),
    Analysis(
        "queue_timeline",
        _queues.queue_timeline,
        {
            **_KEYS,
            "stream": I64,
            "bin": I64,
            "lo_ns": I64,
            "hi_ns": I64,
            "step": I64,
            "length_max": I64,
            "length_mean": F64,
            "starved_ns": I64,
        },
    ),
    Analysis(
        "memory",
        _memory.memory,
        {
            **_KEYS,
            "events": I64,
            "allocations": I64,
            "frees": I64,
            "allocated_bytes": I64,
            "freed_bytes": I64,
            "start_allocated_bytes": I64,
            "end_allocated_bytes": I64,
            "peak_allocated_bytes": I64,
            "peak_ns": I64,
            "peak_op": STR,
            "peak_step": I64,
            "peak_reserved_bytes": I64,
        },
    ),
    Analysis(
        "memory_timeline",
        _memory.memory_timeline,
        {
            **_KEYS,
            "bin": I64,
            "lo_ns": I64,
            "hi_ns": I64,
            "step": I64,
            "allocated_bytes": I64,
            "allocated_max_bytes": I64,
            "reserved_bytes": I64,
            "reserved_max_bytes": I64,
        },
    ),
    Analysis(
        "memcpy_timeline",
        _mem.memcpy_timeline,
        {
            **_KEYS,
            "op": STR,
            "bin": I64,
            "lo_ns": I64,
            "hi_ns": I64,
            "step": I64,
            "copies": I64,
            "bytes": I64,
            "busy_ns": I64,
            "bandwidth_bytes_per_s": F64,
        },
    ),
]


def run_analyses(
    batch: Batch, analyses: list[Analysis] | None = None, only: set[str] | None = None
) -> dict[str, pd.DataFrame]:
    """Run every registered analysis (or the given ones; or those whose table is in ``only``) on
    one partition."""
    todo = ANALYSES if analyses is None else analyses
    return {a.table: conform(a.func(batch), a.columns, a.table) for a in todo if only is None or a.table in only}


def run_own_analyses(batch: Batch, analyses: list[Analysis]) -> tuple[dict[str, pd.DataFrame], dict[str, str]]:
    """Run users' analyses on one partition, each on its own: one that raises (out of memory,
    ``SystemExit`` and ``KeyboardInterrupt`` included), returns something other than a DataFrame,
    lacks a declared column, puts a fraction or a value beyond the range in an integer column, or
    returns a frame Arrow cannot convert fails its own table — ``(tables, {table: one-line
    error})`` — never the built-in tables or the inputs."""
    tables, failed = {}, {}
    for a in analyses:
        try:
            df = conform(a.func(batch), a.columns, a.table, strict=True)
            pa.Table.from_pandas(df, preserve_index=False)  # a frame Arrow cannot store fails here, not later
            tables[a.table] = df
        # the user's code: its table fails, nothing else — sys.exit() and a KeyboardInterrupt it raises too
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001
            failed[a.table] = own_analysis_error(a.table, exc)
    return tables, failed


def own_analysis_error(table: str, exc: BaseException) -> str:
    """One line naming the failed analysis, the error and where it was raised."""
    where = ""
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"analysis {table!r} failed: {type(exc).__name__}: {text[:500]}{where}"
