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
    reused: bool = False  # every store group of the partition came from the store
    reused_paths: set[str] = field(default_factory=set)  # inputs whose every part's results did
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
    kept = resultstore.reusable(list(ANALYSES) + own)  # one depending on an unhashable value is always run
    fresh = [a for a in own if a not in kept]
    res = PartitionResult(partition.index)
    groups = partition.store_groups()
    keys = resultstore.keys(groups, options, kept) if store is not None else [None] * len(groups)
    stored: list[dict[str, pd.DataFrame] | None] = [None] * len(groups)
    for i, (group, key) in enumerate(zip(groups, keys)):
        if reuse and store is not None and key is not None:
            stored[i], note = resultstore.load(store, key, kept, [(p.rank, p.device) for p in group])
            if note:
                res.notes.append(note)
    todo = [p for g, t in zip(groups, stored) if t is None for p in g]
    done = [p for g, t in zip(groups, stored) if t is not None for p in g]
    computed: list[dict[str, pd.DataFrame]] = [{} for _ in groups]
    if todo:
        tables, res.errors, res.failed_tables = _run(todo, options, list(ANALYSES), own)
        missed = [i for i, t in enumerate(stored) if t is None]
        for i, t in zip(missed, _split_by_group(tables, [groups[i] for i in missed])):
            computed[i] = t
    if fresh and done:  # stored groups still need the analyses that are never stored
        tables, errors, failed = _run(done, options, [], fresh)
        res.errors.update({k: v for k, v in errors.items() if k not in res.errors})
        res.failed_tables = {**failed, **res.failed_tables}
        hit = [i for i, t in enumerate(stored) if t is not None]
        for i, t in zip(hit, _split_by_group(tables, [groups[i] for i in hit])):
            computed[i] = t
    per_group = [{**(s or {}), **c} for s, c in zip(stored, computed)]
    res.tables = _concat_groups(per_group) if len(groups) > 1 else per_group[0]
    res.reused = bool(done) and not todo
    res.reused_paths = {p.path for p in done} - {p.path for p in todo} - set(res.errors)
    if store is not None and not res.failed_tables:
        for group, key, was, t in zip(groups, keys, stored, per_group):
            if key is not None and was is None and not any(p.path in res.errors for p in group):
                note = resultstore.save(store, key, {a.table: t[a.table] for a in kept})
                if note:
                    res.notes.append(note)
    return res


def _split_by_group(tables: dict[str, pd.DataFrame], groups: list[Sequence[PartSpec]]) -> list[dict[str, pd.DataFrame]]:
    """Each table's rows cut by store group (groups are whole ranks in rank order), in order."""
    if len(groups) == 1:
        return [tables]
    firsts = np.array([g[0].rank for g in groups], np.int64)
    out: list[dict[str, pd.DataFrame]] = [{} for _ in groups]
    for name, df in tables.items():
        gid = np.searchsorted(firsts, df["rank"].to_numpy(np.int64), side="right") - 1
        order = np.argsort(gid, kind="stable")
        cuts = np.searchsorted(gid[order], np.arange(len(groups) + 1))
        for i in range(len(groups)):  # a few groups per partition
            out[i][name] = df.iloc[order[cuts[i] : cuts[i + 1]]].reset_index(drop=True)
    return out


def _concat_groups(per_group: list[dict[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """The tables of consecutive store groups as one table each (in group order)."""
    names = dict.fromkeys(n for t in per_group for n in t)
    out = {}
    for name in names:
        frames = [t[name] for t in per_group if name in t]
        nonempty = [f for f in frames if len(f)]
        out[name] = pd.concat(nonempty, ignore_index=True) if len(nonempty) > 1 else (nonempty or frames)[0]
    return out


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
