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
from .analyses import ANALYSES, Analysis, run_analyses
from .batch import PART_COLUMNS, Batch, prepare
from .cache import FileRecord, ingest, read_part_tables
from .errors import DtraceError, InputError
from .intervals import AxisOverflow
from .layout import PartitionSpec
from .options import Options
from .plan import PartSpec
from .readers.base import PartTables
from .schema import SIDE_SCHEMAS


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
    """One row per part: part, rank, device, format, base_ns, session_start_ns, session_end_ns."""
    return pd.DataFrame(
        {
            "part": np.arange(len(specs), dtype=np.int32),
            "rank": np.array([s.rank for s in specs], np.int32),
            "device": np.array([s.device for s in specs], np.int32),
            "format": np.array([s.format for s in specs], dtype=object),
            "base_ns": np.array([s.base_ns for s in specs], np.int64),
            "session_start_ns": np.array([s.session_ns[0] for s in specs], np.int64),
            "session_end_ns": np.array([s.session_ns[1] for s in specs], np.int64),
        },
        columns=[*PART_COLUMNS, "session_start_ns", "session_end_ns"],
    )


def concat_parts(
    tables: Sequence[PartTables],
) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """The event table and each side table of several parts as one pandas frame each.

    Adds ``part`` (position in ``tables``) and, to the events, ``row`` (the event's row in its
    part's table). Names and kinds stay dictionary-encoded (one categorical per column, the
    parts' dictionaries unified once).
    """
    ev_tables: list[pa.Table] = []
    side: dict[str, list[pa.Table]] = {k: [] for k in SIDE_SCHEMAS}
    for i, t in enumerate(tables):
        n = t.events.num_rows
        ev = t.events.append_column("part", pa.array(np.full(n, i, np.int32)))
        ev_tables.append(ev.append_column("row", pa.array(np.arange(n, dtype=np.int64))))
        for k, s in t.side.items():
            side[k].append(s.append_column("part", pa.array(np.full(s.num_rows, i, np.int32))))
    return _to_pandas(ev_tables), {k: _to_pandas(v) for k, v in side.items()}


def _to_pandas(tables: list[pa.Table]) -> pd.DataFrame:
    t = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
    df = t.unify_dictionaries().to_pandas() if len(tables) > 1 else t.to_pandas()
    if "seq" in df.columns and df["seq"].dtype != np.int64:  # absent in some parts: null there
        df["seq"] = df["seq"].fillna(-1).astype(np.int64)
    return df


def load_tables(specs: Sequence[PartSpec]) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """The cached tables of the parts of one partition, concatenated (see :func:`concat_parts`)."""
    return concat_parts([read_part_tables(s) for s in specs])


def load_batch(specs: Sequence[PartSpec], options: Options) -> Batch:
    ev, side = load_tables(specs)
    return prepare(ev, side, parts_frame(specs), options)


# -- analysis --------------------------------------------------------------------------------
@dataclass
class PartitionResult:
    """What analysing one partition gives the client: small tables, and per-input errors."""

    index: int
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # input path -> one-line error
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
    reported per input and the other parts of the partition still complete.

    The result tables are stored under ``store`` keyed by the partition's parts, the settings
    and the analyses (:func:`dtrace.resultstore.key`); re-analysing unchanged inputs with the
    same settings loads them instead of recomputing (``reuse=False`` forces the computation).
    """
    todo = list(ANALYSES) + list(analyses or [])
    res = PartitionResult(partition.index)
    key = resultstore.key(partition, options, todo) if store else None
    if reuse and store is not None and key is not None:
        tables, note = resultstore.load(store, key, todo, [(p.rank, p.device) for p in partition.parts])
        if tables is not None:
            res.tables, res.reused = tables, True
            return res
        if note:
            res.notes.append(note)
    tables, errors = _run(list(partition.parts), options, todo)
    res.tables, res.errors = tables, errors
    if store is not None and key is not None and not errors:
        note = resultstore.save(store, key, tables)
        if note:
            res.notes.append(note)
    return res


def _run(
    specs: list[PartSpec], options: Options, analyses: list[Analysis]
) -> tuple[dict[str, pd.DataFrame], dict[str, str]]:
    """Analyse the parts together; if that fails, each half alone (recursively), so that a bad
    part fails alone and the others keep their results (in part order)."""
    try:
        return run_analyses(load_batch(specs, options), analyses), {}
    except Exception as exc:  # noqa: BLE001 - isolate the part that broke, report it below
        if len(specs) == 1:
            return {}, {specs[0].path: _describe(specs[0], exc)}
    mid = len(specs) // 2
    (t1, e1), (t2, e2) = _run(specs[:mid], options, analyses), _run(specs[mid:], options, analyses)
    tables = {
        name: pd.concat([t for t in (t1.get(name), t2.get(name)) if t is not None], ignore_index=True)
        for name in {**t1, **t2}
    }
    return tables, {**e1, **e2}


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
