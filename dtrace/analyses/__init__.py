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
from . import kernels as _kern

I64, I32, STR, F64, BOOL = "int64", "int32", "object", "float64", "bool"
_KEYS = {"rank": I32, "device": I32}
_BD = {c: I64 for c in _bd.VALUE_COLUMNS}


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
    Analysis("kernels", _kern.kernel_stats, {**_KEYS, "name": STR, "category": STR, "kind": STR, "count": I64,
                                             "total_ns": I64, "mean_ns": F64, "median_ns": F64, "min_ns": I64,
                                             "max_ns": I64, "std_ns": F64, "time_share": F64,
                                             "count_share": F64}),
    Analysis("steps", _bd.steps, {**_KEYS, "step": I64, "step_ns": I64, **_BD, "host_ns": I64, "events": I64}),
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
