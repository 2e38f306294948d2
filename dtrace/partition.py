"""One partition's work, as plain functions the Dask layer maps over (no Dask here).

:func:`ingest_file` parses (or reuses) one input; :func:`analyze_partition` loads one
(rank, device) part from the cache and runs every per-rank analysis, returning small frames.
"""
from __future__ import annotations

import os
import traceback
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from .analyses import run_part_analyses
from .cache import FileRecord, ingest
from .errors import DtraceError
from .options import Options
from .plan import PartSpec
from .prepare import PartData, prepare


def ingest_file(path: str, cache_dir: str, fmt: str | None = None, reuse: bool = True) -> FileRecord:
    return ingest(path, cache_dir, fmt=fmt, reuse=reuse)


def load_events(spec: PartSpec) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The cached event and side tables of one part as pandas (categoricals for names)."""
    ev = pq.read_table(spec.events).to_pandas()
    ev["rank"] = np.full(len(ev), spec.rank, np.int32)
    coll = pq.read_table(spec.collectives).to_pandas()
    mem = pq.read_table(spec.memcpy).to_pandas()
    return ev, coll, mem


def load_part(spec: PartSpec, options: Options) -> PartData:
    ev, coll, mem = load_events(spec)
    return prepare(ev, coll, mem, rank=spec.rank, device=spec.device, fmt=spec.format, options=options,
                   base_ns=spec.base_ns)


def analyze_partition(spec: PartSpec, options: Options) -> dict[str, Any]:
    """Run the per-rank analyses of one part. Never raises for bad data: returns an error."""
    try:
        part = load_part(spec, options)
        return {"spec": spec, "tables": run_part_analyses(part), "error": None}
    except DtraceError as exc:
        return {"spec": spec, "tables": {}, "error": f"{spec.path}: {exc}"}
    except Exception as exc:  # keep the other ranks going; say where it broke
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        return {"spec": spec, "tables": {},
                "error": (f"{spec.path}: internal error in analysis of rank {spec.rank} ({type(exc).__name__}: "
                          f"{exc} at {os.path.basename(tb.filename)}:{tb.lineno})")}
