"""One partition's work, as plain functions the Dask layer maps over (no Dask here).

:func:`ingest_file` parses (or reuses) one input; :func:`analyze_partition` loads one
(rank, device) part from the cache and runs every per-rank analysis, returning small frames.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
import traceback
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from . import __version__
from .analyses import ANALYSES, run_part_analyses
from .cache import FileRecord, ingest
from .errors import DtraceError
from .options import Options
from .plan import PartSpec
from .prepare import PartData, prepare


def ingest_file(path: str, cache_dir: str, fmt: str | None = None, reuse: bool = True,
                reader_options: dict[str, Any] | None = None) -> FileRecord:
    return ingest(path, cache_dir, fmt=fmt, reuse=reuse, reader_options=reader_options)


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


def result_key(spec: PartSpec, options: Options) -> str | None:
    """Key of a part's analysis results: its cached events, rank, options and dtrace version.

    None when the results cannot be keyed (a class map given as an in-memory object).
    """
    cm = options.classmap
    if cm is not None and not isinstance(cm, (str, os.PathLike)):
        return None
    st = os.stat(spec.events)
    ident = [__version__, spec.events, st.st_size, st.st_mtime_ns, spec.rank, spec.device, spec.format,
             spec.base_ns, [a.table for a in ANALYSES], json.dumps(options.to_json(), sort_keys=True, default=str)]
    if cm is not None:
        cst = os.stat(cm)
        ident += [os.path.abspath(cm), cst.st_size, cst.st_mtime_ns]
    return hashlib.sha1(repr(ident).encode()).hexdigest()[:24]


def _results_path(spec: PartSpec, key: str) -> str:
    return os.path.join(os.path.dirname(spec.events), f"results-{key}.pkl")


def _load_results(path: str) -> dict[str, pd.DataFrame] | None:
    try:
        with open(path, "rb") as f:
            tables = pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, ValueError):
        return None
    return tables if isinstance(tables, dict) else None


def _store_results(path: str, tables: dict[str, pd.DataFrame]) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-results-")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(tables, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:  # a read-only or full cache only costs the reuse next time
        if os.path.exists(tmp):
            os.unlink(tmp)


def analyze_partition(spec: PartSpec, options: Options, reuse: bool = True) -> dict[str, Any]:
    """Run the per-rank analyses of one part. Never raises for bad data: returns an error.

    The small result frames are kept beside the part's cached events, keyed by
    :func:`result_key`; re-analysing unchanged inputs with the same options loads them
    instead of recomputing (``reuse=False`` forces the computation).
    """
    try:
        key = result_key(spec, options)
        path = _results_path(spec, key) if key else None
        if reuse and path is not None:
            tables = _load_results(path)
            if tables is not None and all(a.table in tables for a in ANALYSES):
                return {"spec": spec, "tables": tables, "error": None, "reused": True}
        part = load_part(spec, options)
        tables = run_part_analyses(part)
        if path is not None:
            _store_results(path, tables)
        return {"spec": spec, "tables": tables, "error": None, "reused": False}
    except DtraceError as exc:
        return {"spec": spec, "tables": {}, "error": f"{spec.path}: {exc}"}
    except Exception as exc:  # keep the other ranks going; say where it broke
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        return {"spec": spec, "tables": {},
                "error": (f"{spec.path}: internal error in analysis of rank {spec.rank} ({type(exc).__name__}: "
                          f"{exc} at {os.path.basename(tb.filename)}:{tb.lineno})")}
