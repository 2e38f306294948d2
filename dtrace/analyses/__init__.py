"""Per-rank analyses: pure functions ``PartData -> small DataFrame``, one per results table.

Each is registered with its declared output columns and dtypes; :func:`run_part_analyses`
conforms every output to its declaration, and a contract test runs all of them on an empty
partition. Adding an analysis is one module and one line in :data:`ANALYSES`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from ..prepare import PartData
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
    table: str
    func: Callable[[PartData], pd.DataFrame]
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


def conform(df: pd.DataFrame, columns: dict[str, str], table: str) -> pd.DataFrame:
    """Check that ``df`` has the declared columns (extra ones allowed) and cast their dtypes."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise TypeError(f"analysis {table!r} did not produce the declared columns {missing}")
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


def run_part_analyses(part: PartData, only: set[str] | None = None) -> dict[str, pd.DataFrame]:
    """Run every registered analysis (or those in ``only``) on one partition."""
    results = {}
    for a in ANALYSES:
        if only is not None and a.table not in only:
            continue
        results[a.table] = conform(a.func(part), a.columns, a.table)
    return results
