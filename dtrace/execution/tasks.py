"""The tasks of a run: plain module-level functions the engine maps over (no Dask here).

A partition is a list of whole (rank, device) parts (:class:`~dtrace.partitions.layout.PartitionSpec`):
:func:`load_tables` reads their cached event and side tables into one frame each (a ``part``
column says whose rows they are), :func:`analyze_partition` prepares the
:class:`~dtrace.analyses.batch.Batch` and runs every analysis over all parts at once, reusing the
partition's stored result tables when its events and the settings are unchanged
(:mod:`dtrace.partitions.store`). :func:`ingest_files` parses (or reuses) a batch of inputs.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from ..analyses import ANALYSES, Analysis, run_analyses, run_own_analyses
from ..analyses.batch import PART_COLUMNS, Batch, prepare
from ..core import spill as spillfiles
from ..core.memory import release_memory
from ..core.schema import SIDE_SCHEMAS
from ..core.spill import Spilled
from ..errors import DtraceError, InputError
from ..ingest.cache import FileRecord, ingest_many, read_parts_tables
from ..ingest.ranks import PartSpec
from ..options import Options
from ..partitions import store as resultstore
from ..partitions.layout import PartitionSpec
from ..readers.base import PartTables
from ..vector.intervals import AxisOverflow


def ingest_files(
    paths: Sequence[str],
    cache_dir: str,
    fmt: str | None = None,
    reuse: bool = True,
    reader_options: dict[str, Any] | None = None,
) -> list[FileRecord]:
    """Parse (or reuse from the cache) each input of one ingest task."""
    try:
        return ingest_many(list(paths), cache_dir, fmt=fmt, reuse=reuse, reader_options=reader_options)
    finally:
        release_memory()


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
    ev = _with_part([t.events for t in tables], row=True)
    return ev, {k: _with_part([t.side[k] for t in tables], row=False) for k in SIDE_SCHEMAS}


def _with_part(tables: list[pa.Table], row: bool) -> pd.DataFrame:
    """The tables of several parts as one frame, with ``part`` (and ``row``: the row in its part's
    table) after the first table's columns, then the columns only later tables have (null
    elsewhere) — built once for the whole batch, not per part."""
    counts = np.fromiter((t.num_rows for t in tables), np.int64, len(tables))
    t = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
    first = tables[0].column_names
    order = [*first, "part", *(["row"] if row else []), *(c for c in t.column_names if c not in first)]
    t = t.append_column("part", pa.array(np.repeat(np.arange(len(tables), dtype=np.int32), counts)))
    if row:
        starts = np.cumsum(counts) - counts
        t = t.append_column("row", pa.array(np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(starts, counts)))
    t = t.select(order)
    # the parts' chunks made one (their dictionaries unified as unify_dictionaries does) before
    # pandas sees them: half the cost of converting hundreds of small chunks per column; one
    # block per column: no consolidated copy of all the int64 columns at the cold run's peak of memory
    df = (t.combine_chunks() if len(tables) > 1 else t).to_pandas(split_blocks=True)
    if "seq" in df.columns and df["seq"].dtype != np.int64:  # absent in some parts: null there
        df["seq"] = df["seq"].fillna(-1).astype(np.int64)
    return df


def load_tables(specs: Sequence[PartSpec]) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """The cached tables of the parts of one partition, concatenated (see :func:`concat_parts`)."""
    return concat_parts(read_parts_tables(specs))


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
    failed_tables: dict[str, str] = field(default_factory=dict)  # a user's table -> one-line error
    reused: bool = False  # every store group of the partition came from the store
    reused_paths: set[str] = field(default_factory=set)  # inputs whose every part's results did
    notes: list[str] = field(default_factory=list)
    spilled: dict[str, Spilled] = field(default_factory=dict)  # tables left in the spill folder


def analyze_partition(
    partition: PartitionSpec,
    options: Options,
    analyses: Sequence[Analysis] | None = None,
    reuse: bool = True,
    store: str | None = None,
    spill: str | None = None,
) -> PartitionResult:
    """Run every analysis on one partition. Never raises for bad data: failed parts are
    reported per input and the other parts of the partition still complete; a user's analysis
    that fails fails its own table only (:attr:`PartitionResult.failed_tables`).

    The result tables are stored under ``store`` per store group of the partition, keyed by
    the group's parts, the settings and the analyses (:func:`dtrace.partitions.store.key`);
    re-analysing unchanged inputs with the same settings loads them instead of recomputing
    (``reuse=False`` forces the computation). The groups that are not stored are analysed
    together, in one batch.

    With a ``spill`` folder, the tables are written there (:mod:`dtrace.core.spill`) and only
    their file names travel back (:attr:`PartitionResult.spilled`): the client reads a table when
    a reducer needs it, and streams the others into the results files.
    """
    own = list(analyses or [])
    kept = resultstore.reusable(list(ANALYSES) + own)  # one depending on an unhashable value is always run
    fresh = [a for a in own if a not in kept]
    res = PartitionResult(partition.index)
    groups = partition.store_groups()
    keys = _store_keys(groups, options, kept, store)
    hit, stored = _load_groups(store if reuse else None, groups, keys, kept, res.notes)
    missed = [i for i in range(len(groups)) if i not in hit]
    todo, done = _parts_of(groups, missed), _parts_of(groups, hit)
    pieces: list[_Grouped] = [stored] if stored is not None else []
    computed = _compute(res, todo, [groups[i] for i in missed], missed, options, own)
    if computed is not None:
        pieces.append(computed)
    if fresh and done:  # stored groups still need the analyses that are never stored
        pieces.append(_run_never_stored(res, done, [groups[i] for i in hit], hit, options, fresh))
    res.tables = _assemble(pieces)
    _note_reuse(res, done, todo)
    _keep(res, store, computed, keys, groups, missed, kept, spill)
    return res


def _keep(
    res: PartitionResult,
    store: str | None,
    computed: _Grouped | None,
    keys: list[str | None],
    groups: Sequence[Sequence[PartSpec]],
    missed: list[int],
    kept: list[Analysis],
    spill: str | None,
) -> None:
    """Store the computed groups' tables; leave the partition's tables in the spill folder (a
    table that is the computed one as it was stored goes there as the Arrow table made for the
    store: each table becomes Arrow once)."""
    arrow: dict[str, pa.Table] = {}
    if store is not None and computed is not None:
        arrow = _store_computed(store, computed, keys, groups, missed, kept, res)
    if spill is not None:
        held = computed.tables if computed is not None else {}
        # a table as stored goes as it is, but for the texts that travel as categories
        same = {n: t for n, t in arrow.items() if n not in SHARED_TEXT and res.tables.get(n) is held[n]}
        _spill(res, spill, same)


SHARED_TEXT = {"collectives": ("group_ranks",)}
"""Text columns of the tables the client reduces that repeat a long value on many rows (a
collective's rank list, kilobytes at thousands of ranks): they travel as categories and reach
the reducers as objects sharing one string per distinct value (``dtrace.api._read_spilled``). Only
tables that the reducers replace: the results never hold a category."""


def _spill(res: PartitionResult, folder: str, arrow: dict[str, pa.Table]) -> None:
    """Write the partition's tables to the spill folder (their repeated texts as categories; a
    table of ``arrow`` as it is); only their file names go back."""
    tables = {n: arrow[n] if n in arrow else _shared_text(n, df) for n, df in res.tables.items()}
    res.spilled = spillfiles.write(folder, res.index, tables)
    res.tables = {}


def _shared_text(name: str, df: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in SHARED_TEXT.get(name, ()) if c in df.columns]
    return df.astype({c: "category" for c in cols}) if cols and len(df) else df


def _note_reuse(res: PartitionResult, done: list[PartSpec], todo: list[PartSpec]) -> None:
    """Whether the whole partition was loaded, and the inputs whose results all were."""
    res.reused = bool(done) and not todo
    res.reused_paths = {p.path for p in done} - {p.path for p in todo} - set(res.errors)


def _store_computed(
    store: str,
    computed: _Grouped,
    keys: list[str | None],
    groups: Sequence[Sequence[PartSpec]],
    missed: list[int],
    kept: list[Analysis],
    res: PartitionResult,
) -> dict[str, pa.Table]:
    """Store the computed groups' tables, unless an analysis whose tables are stored failed; the
    Arrow tables made of them (none when nothing was stored)."""
    if any(a.table in res.failed_tables for a in kept):
        return {}
    return _save_groups(store, computed, [keys[i] for i in missed], [groups[i] for i in missed], kept, res)


def _store_keys(
    groups: Sequence[Sequence[PartSpec]], options: Options, kept: list[Analysis], store: str | None
) -> list[str | None]:
    """Each group's key in the result store (None for every group without a store)."""
    if store is None:
        return [None] * len(groups)
    return list(resultstore.keys(groups, options, kept))


def _compute(
    res: PartitionResult,
    todo: list[PartSpec],
    groups: list[Sequence[PartSpec]],
    missed: list[int],
    options: Options,
    own: list[Analysis],
) -> _Grouped | None:
    """Run every analysis on the parts whose tables were not stored (None when there are none);
    their errors go to ``res``."""
    if not todo:
        return None
    tables, res.errors, res.failed_tables = _run(todo, options, list(ANALYSES), own)
    return _Grouped.cut(tables, groups, missed)


def _parts_of(groups: Sequence[Sequence[PartSpec]], which: list[int]) -> list[PartSpec]:
    """The parts of the groups at these indices, in order."""
    return [p for i in which for p in groups[i]]


def _run_never_stored(
    res: PartitionResult,
    done: list[PartSpec],
    groups: list[Sequence[PartSpec]],
    hit: list[int],
    options: Options,
    fresh: list[Analysis],
) -> _Grouped:
    """Run the analyses that are never stored on the parts whose other tables were loaded; their
    errors join ``res``'s (the first one found per input stays)."""
    tables, errors, failed = _run(done, options, [], fresh)
    res.errors.update({k: v for k, v in errors.items() if k not in res.errors})
    res.failed_tables = {**failed, **res.failed_tables}
    return _Grouped.cut(tables, groups, hit)


def _save_groups(
    store: str,
    computed: _Grouped,
    keys: list[str | None],
    groups: Sequence[Sequence[PartSpec]],
    kept: list[Analysis],
    res: PartitionResult,
) -> dict[str, pa.Table]:
    """Store each computed group's tables (but those of a group with a failed input): every
    table becomes Arrow once, each group's rows a slice of it; those Arrow tables."""
    if not all(a.table in computed.tables for a in kept):  # every part failed: nothing to store
        return {}
    # one thread: the tables are small, and a thread pool per table costs more than it saves
    arrow = {a.table: pa.Table.from_pandas(computed.tables[a.table], preserve_index=False, nthreads=1) for a in kept}
    for j, (key, group) in enumerate(zip(keys, groups)):
        if key is None or any(p.path in res.errors for p in group):
            continue
        note = resultstore.save(store, key, {n: t.slice(*computed.rows(n, j)) for n, t in arrow.items()})
        if note:
            res.notes.append(note)
    return arrow


@dataclass
class _Grouped:
    """Tables of some store groups of a partition (``groups``: their positions), rows in group
    order; ``cuts[table]``: where each group's rows start (and the last one ends)."""

    tables: dict[str, pd.DataFrame]
    groups: list[int]
    cuts: dict[str, np.ndarray]

    @classmethod
    def cut(cls, tables: dict[str, pd.DataFrame], groups: list[Sequence[PartSpec]], where: list[int]) -> _Grouped:
        """Order each table's rows by store group (groups are whole ranks in rank order; the
        analyses' rows already come in part order, so this rarely moves a row)."""
        firsts = np.array([g[0].rank for g in groups], np.int64)
        out, cuts = {}, {}
        for name, df in tables.items():
            gid = np.searchsorted(firsts, df["rank"].to_numpy(np.int64), side="right") - 1
            if len(gid) > 1 and (gid[1:] < gid[:-1]).any():
                order = np.argsort(gid, kind="stable")
                df, gid = df.iloc[order].reset_index(drop=True), gid[order]
            out[name] = df
            cuts[name] = np.searchsorted(gid, np.arange(len(groups) + 1))
        return cls(out, where, cuts)

    def rows(self, table: str, j: int) -> tuple[int, int]:
        """Offset and length of the rows of the ``j``-th of these groups in ``table``."""
        c = self.cuts[table]
        return int(c[j]), int(c[j + 1] - c[j])


def _load_groups(
    store: str | None,
    groups: Sequence[Sequence[PartSpec]],
    keys: list[str | None],
    kept: list[Analysis],
    notes: list[str],
) -> tuple[list[int], _Grouped | None]:
    """The store groups whose entries are intact, and their tables: the Arrow tables of every
    entry are checked file by file, concatenated per table and made frames once."""
    if store is None:
        return [], None
    hit: list[int] = []
    arrows: list[dict[str, pa.Table]] = []
    for i, (group, key) in enumerate(zip(groups, keys)):
        if key is None:
            continue
        tables, note = resultstore.load_arrow(store, key, kept, [(p.rank, p.device) for p in group])
        if note:
            notes.append(note)
        if tables is not None:
            hit.append(i)
            arrows.append(tables)
    if not hit:
        return [], None
    try:
        merged = {a.table: _concat_arrow([t[a.table] for t in arrows]) for a in kept}
        frames = resultstore.frames(merged, kept)
    except (ValueError, TypeError, KeyError, pa.ArrowException) as exc:  # one of them is damaged: none is used
        notes.extend(resultstore.discard(store, keys[i] or "", exc) for i in hit)
        return [], None
    cuts = {a.table: np.concatenate([[0], np.cumsum([t[a.table].num_rows for t in arrows])]) for a in kept}
    return hit, _Grouped(frames, hit, cuts)


def _concat_arrow(tables: list[pa.Table]) -> pa.Table:
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="default")


def _assemble(pieces: list[_Grouped]) -> dict[str, pd.DataFrame]:
    """Each table over all store groups, in group order, from the pieces that hold them."""
    if len(pieces) == 1:
        return pieces[0].tables  # every group stored, or every group computed: already in order
    names = dict.fromkeys(n for g in pieces for n in g.tables)
    out = {}
    for name in names:
        has = [g for g in pieces if name in g.tables]
        slices = sorted(
            ((i, g, j) for g in has for j, i in enumerate(g.groups)), key=lambda x: x[0]
        )  # a few groups per partition
        frames = [g.tables[name].iloc[slice(*_span(g.rows(name, j)))] for _, g, j in slices]
        nonempty = [f for f in frames if len(f)]
        out[name] = (
            pd.concat(nonempty, ignore_index=True)
            if len(nonempty) > 1
            else (nonempty[0] if nonempty else has[0].tables[name].iloc[:0]).reset_index(drop=True)
        )
    return out


def _span(offset_length: tuple[int, int]) -> tuple[int, int]:
    return offset_length[0], offset_length[0] + offset_length[1]


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
