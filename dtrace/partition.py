"""One partition's work, as plain functions the Dask layer maps over (no Dask here).

A partition is a list of whole (rank, device) parts (:class:`~dtrace.layout.PartitionSpec`):
:func:`load_tables` reads their cached event and side tables into one frame each (a ``part``
column says whose rows they are), :func:`analyze_partition` prepares the
:class:`~dtrace.batch.Batch` and runs every analysis over all parts at once, reusing the
partition's stored result tables when its events and the settings are unchanged
(:mod:`dtrace.resultstore`). :func:`ingest_files` parses (or reuses) a batch of inputs.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from . import resultstore
from .analyses import ANALYSES, Analysis, run_analyses, run_own_analyses
from .batch import PART_COLUMNS, Batch, prepare
from .cache import FileRecord, ingest, read_part_tables
from .errors import DtraceError, InputError
from .intervals import AxisOverflow
from .layout import PartitionSpec
from .options import Options
from .plan import PartSpec


def ingest_files(
    paths: Sequence[str],
    cache_dir: str,
    fmt: str | None = None,
    reuse: bool = True,
    reader_options: dict[str, Any] | None = None,
) -> list[FileRecord]:
    """Parse (or reuse from the cache) each input of one ingest task."""
    return [ingest(p, cache_dir, fmt=fmt, reuse=reuse, reader_options=reader_options) for p in paths]


# -- loading ---------------------------------------------------------------------------------
def parts_frame(specs: Sequence[PartSpec]) -> pd.DataFrame:
    """One row per part: part, rank, device, format, base_ns."""
    return pd.DataFrame(
        {
            "part": np.arange(len(specs), dtype=np.int32),
            "rank": np.array([s.rank for s in specs], np.int32),
            "device": np.array([s.device for s in specs], np.int32),
            "format": np.array([s.format for s in specs], dtype=object),
            "base_ns": np.array([s.base_ns for s in specs], np.int64),
        },
        columns=list(PART_COLUMNS),
    )


def concat_parts(
    tables: Sequence[tuple[pa.Table, pa.Table, pa.Table]],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The event, collective and memcpy tables of several parts as one pandas frame each.

    Adds ``part`` (position in ``tables``) and, to the events, ``row`` (the event's row in its
    part's table). Names and kinds stay dictionary-encoded (one categorical per column, the
    parts' dictionaries unified once).
    """
    ev_tables, coll, mem = [], [], []
    for i, (ev, c, m) in enumerate(tables):
        n = ev.num_rows
        ev = ev.append_column("part", pa.array(np.full(n, i, np.int32)))
        ev_tables.append(ev.append_column("row", pa.array(np.arange(n, dtype=np.int64))))
        coll.append(c.append_column("part", pa.array(np.full(c.num_rows, i, np.int32))))
        mem.append(m.append_column("part", pa.array(np.full(m.num_rows, i, np.int32))))
    return _to_pandas(ev_tables), _to_pandas(coll), _to_pandas(mem)


def _to_pandas(tables: list[pa.Table]) -> pd.DataFrame:
    t = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
    df = t.unify_dictionaries().to_pandas() if len(tables) > 1 else t.to_pandas()
    if "seq" in df.columns and df["seq"].dtype != np.int64:  # absent in some parts: null there
        df["seq"] = df["seq"].fillna(-1).astype(np.int64)
    return df


def load_tables(specs: Sequence[PartSpec]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The cached tables of the parts of one partition, concatenated (see :func:`concat_parts`)."""
    return concat_parts([read_part_tables(s) for s in specs])


def load_batch(specs: Sequence[PartSpec], options: Options) -> Batch:
    ev, coll, mem = load_tables(specs)
    return prepare(ev, coll, mem, parts_frame(specs), options)


# -- analysis --------------------------------------------------------------------------------
@dataclass
class PartitionResult:
    """What analysing one partition gives the client: small tables, and per-input errors."""

    index: int
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # input path -> one-line error
    failed_tables: dict[str, str] = field(default_factory=dict)  # a user's table -> one-line error
    reused: bool = False
    notes: list[str] = field(default_factory=list)


def analyze_partition(
    partition: PartitionSpec,
    options: Options,
    analyses: Sequence[Analysis] | None = None,
    reuse: bool = True,
    store: str | None = None,
) -> PartitionResult:
    """Run every analysis on one partition. Never raises for bad data: failed parts are
    reported per input and the other parts of the partition still complete; a user's analysis
    that fails fails its own table only (:attr:`PartitionResult.failed_tables`).

    The result tables are stored under ``store`` keyed by the partition's parts, the settings
    and the analyses (:func:`dtrace.resultstore.key`); re-analysing unchanged inputs with the
    same settings loads them instead of recomputing (``reuse=False`` forces the computation).
    """
    own = list(analyses or [])
    todo = list(ANALYSES) + own
    kept = resultstore.reusable(todo)  # an analysis depending on an unhashable value is always run
    fresh = [a for a in own if a not in kept]
    res = PartitionResult(partition.index)
    key = resultstore.key(partition, options, kept) if store else None
    if reuse and store is not None and key is not None:
        tables, note = resultstore.load(store, key, kept, [(p.rank, p.device) for p in partition.parts])
        if tables is not None:
            res.tables, res.reused = tables, True
            if fresh:
                more, res.errors, res.failed_tables = _run(list(partition.parts), options, [], fresh)
                res.tables.update(more)
            return res
        if note:
            res.notes.append(note)
    res.tables, res.errors, res.failed_tables = _run(list(partition.parts), options, list(ANALYSES), own)
    if store is not None and key is not None and not res.errors and not res.failed_tables:
        note = resultstore.save(store, key, {a.table: res.tables[a.table] for a in kept})
        if note:
            res.notes.append(note)
    return res


def _run(
    specs: list[PartSpec], options: Options, builtin: list[Analysis], own: list[Analysis]
) -> tuple[dict[str, pd.DataFrame], dict[str, str], dict[str, str]]:
    """Analyse the parts together; if that fails, each half alone (recursively), so that a bad
    part fails alone and the others keep their results (in part order). The user's analyses
    (``own``) each fail their own table only: ``(tables, {path: error}, {table: error})``."""
    try:
        batch = load_batch(specs, options)
        tables = run_analyses(batch, builtin)
    except Exception as exc:  # noqa: BLE001 - isolate the part that broke, report it below
        if len(specs) == 1:
            return {}, {specs[0].path: _describe(specs[0], exc)}, {}
    else:
        more, failed = run_own_analyses(batch, own)
        return {**tables, **more}, {}, failed
    mid = len(specs) // 2
    (t1, e1, f1), (t2, e2, f2) = _run(specs[:mid], options, builtin, own), _run(specs[mid:], options, builtin, own)
    tables = {
        name: pd.concat([t for t in (t1.get(name), t2.get(name)) if t is not None], ignore_index=True)
        for name in {**t1, **t2}
    }
    return tables, {**e1, **e2}, {**f2, **f1}


def _describe(spec: PartSpec, exc: BaseException) -> str:
    if isinstance(exc, InputError) and exc.path == spec.path:
        return str(exc)
    if isinstance(exc, DtraceError):
        return f"{spec.path}: {exc}"
    if isinstance(exc, AxisOverflow):
        return f"{spec.path}: rank {spec.rank} device {spec.device}: the events span too long a time to analyse ({exc})"
    tb = traceback.extract_tb(exc.__traceback__)[-1]
    return (
        f"{spec.path}: internal error in analysis of rank {spec.rank} ({type(exc).__name__}: {exc} at "
        f"{os.path.basename(tb.filename)}:{tb.lineno})"
    )
