"""rocpd: the SQLite database rocprofv3 writes by default since ROCm 7 (``<host>/<pid>_results.db``).

The schema is ROCprofiler-SDK's documented one (``rocpd_tables.sql``, schema version 3; each table
named ``rocpd_<table><uuid>`` with a view ``rocpd_<table>`` over it). Read here, columns checked
with ``PRAGMA table_info`` so that versions that move a column only lose what they moved:

- ``rocpd_kernel_dispatch`` → ``kernel``: ``track_id`` (→ ``rocpd_track``: ``agent_id``,
  ``stream_id``/``queue_id``, ``tid``), ``kernel_id`` (→ ``rocpd_info_kernel_symbol``: the
  ``formatted_kernel_name`` of its ``extdata``, else ``display_name``, else ``kernel_name``),
  ``start_id``/``end_id`` (→ ``rocpd_timestamp.value``; or ``start``/``end`` columns),
  ``grid_size_*``, ``workgroup_size_*``, ``event_id`` (→ ``rocpd_event.correlation_id``);
- ``rocpd_memory_copy`` → ``memcpy``: ``name_id`` (→ ``rocpd_string``: ``MEMORY_COPY_HOST_TO_DEVICE``,
  ...), ``dst_agent_id``, ``src_agent_id``, ``size``, times and correlation as above;
- ``rocpd_region`` → host events by their event's category (``rocpd_event.category_id`` →
  ``rocpd_string``): ``HIP_*`` → ``runtime``, ``RCCL_*`` → ``cpu_op``, ``MARKER_*`` →
  ``annotation``; HSA and other low-level regions are not read;
- ``rocpd_info_agent`` (``type`` ``GPU``: device ``type_index``, else ``logical_index``),
  ``rocpd_info_process`` (``pid``, ``init``/``fini``: the profiling session).

Events and side tables are built as for the JSON output (:mod:`.rocprof`), so the two formats of
one run give the same tables. One process per database.
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ._io import SQLITE_MAGIC, check_size, file_fingerprint
from .base import TraceFile
from .rocprof import GRID_COLUMNS, EventColumns, trace_file

NAME = "rocpd"
TABLES = (
    "rocpd_kernel_dispatch",
    "rocpd_memory_copy",
    "rocpd_region",
    "rocpd_timestamp",
    "rocpd_track",
    "rocpd_event",
    "rocpd_string",
    "rocpd_info_agent",
    "rocpd_info_process",
    "rocpd_info_kernel_symbol",
)
_SUFFIX = re.compile(r"^[_0-9A-Za-z\-]*$")
_HOST_KINDS = (("HIP", "runtime"), ("RCCL", "cpu_op"), ("MARKER", "annotation"))


class READER:  # noqa: N801 - the registered reader object
    name = NAME

    @staticmethod
    def guess_can_open(path: str, head: bytes) -> bool:
        if not head.startswith(SQLITE_MAGIC):
            return False
        return b"rocpd_" in head or bool(_tables_of(path).get("rocpd_kernel_dispatch"))

    @staticmethod
    def read(path: str, **options: Any) -> TraceFile:
        return read_rocpd(path, **options)


def _connect(path: str) -> sqlite3.Connection:
    return sqlite3.connect(Path(os.path.abspath(path)).as_uri() + "?mode=ro", uri=True)


def _tables_of(path: str) -> dict[str, str]:
    """The name to read for each rocpd table: its view, else its uuid-suffixed table."""
    try:
        con = _connect(path)
        try:
            names = [r[0] for r in con.execute("select name from sqlite_master where type in ('table', 'view')")]
        finally:
            con.close()
    except sqlite3.DatabaseError:
        return {}
    out: dict[str, str] = {}
    for t in TABLES:
        if t in names:
            out[t] = t
            continue
        # a suffixed table (rocpd_event<uuid>), not a longer table name (rocpd_event_x is not rocpd_event)
        cands = sorted(n for n in names if n.startswith(t) and n != t and _SUFFIX.match(n[len(t) :]))
        cands = [n for n in cands if not any(n.startswith(o) and len(o) > len(t) for o in TABLES)]
        if cands:
            out[t] = cands[0]
    return out


class _Db:
    def __init__(self, path: str) -> None:
        self.path = path
        self.names = _tables_of(path)
        self.con = _connect(path)

    def cols(self, table: str) -> set[str]:
        name = self.names.get(table)
        return {r[1] for r in self.con.execute(f"PRAGMA table_info([{name}])")} if name else set()

    def t(self, table: str) -> str:
        return f"[{self.names[table]}]"

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        try:
            return self.con.execute(sql).fetchall()
        except sqlite3.DatabaseError as exc:
            raise InputError(self.path, f"cannot read the rocpd database: {exc}") from None

    def times(self, table: str, alias: str) -> tuple[str, str]:
        """SQL for the start and end of a row of ``table`` (inline columns, else rocpd_timestamp)."""
        have = self.cols(table)
        if {"start", "end"} <= have:
            return f"{alias}.[start]", f"{alias}.[end]"
        if "rocpd_timestamp" not in self.names:
            raise InputError(self.path, f"{table} has no start/end and the database no rocpd_timestamp table")
        ts = self.t("rocpd_timestamp")
        return (
            f"(select value from {ts} where id = {alias}.start_id)",
            f"(select value from {ts} where id = {alias}.end_id)",
        )

    def correlation(self, alias: str, table: str) -> str:
        if "event_id" in self.cols(table) and "rocpd_event" in self.names:
            return f"coalesce((select correlation_id from {self.t('rocpd_event')} where id = {alias}.event_id), -1)"
        return "-1"

    def track(self, column: str, alias: str) -> str:
        if column not in self.cols("rocpd_track"):
            return "-1"
        return f"coalesce((select [{column}] from {self.t('rocpd_track')} where id = {alias}.track_id), -1)"

    def string(self, expr: str) -> str:
        return f"(select string from {self.t('rocpd_string')} where id = {expr})"


def _arr(rows: list[tuple[Any, ...]], i: int) -> np.ndarray:
    return np.array([-1 if r[i] is None else int(r[i]) for r in rows], np.int64)


def read_rocpd(path: str, *, max_input_size: int | None = None, **_: Any) -> TraceFile:
    """Read one rocpd database into one part per GPU agent with activity (see the module notes)."""
    check_size(path, os.path.getsize(path), max_input_size)
    db = _Db(path)
    try:
        for need in ("rocpd_track", "rocpd_string", "rocpd_info_agent"):
            if need not in db.names:
                raise InputError(path, f"not a rocpd database: no {need} table")
        procs = (
            db.rows(f"select pid, init, fini from {db.t('rocpd_info_process')}")
            if ("rocpd_info_process" in db.names)
            else []
        )
        if len(procs) > 1:
            raise InputError(
                path, f"the rocpd database holds {len(procs)} processes; dtrace reads one process per file"
            )
        pid, init, fini = procs[0] if procs else (-1, None, None)
        ev = EventColumns(path, int(pid if pid is not None else -1))
        _agents(db, ev)
        cols = [_kernels(db, ev), _copies(db, ev), *_regions(db, ev)]
        ev.set_columns([c for c in cols if c is not None] or [ev.base(0, "kernel")])
    finally:
        db.con.close()
    session = (int(init), int(fini)) if isinstance(init, int) and isinstance(fini, int) and 0 <= init <= fini else None
    return trace_file(
        path,
        ev,
        fmt=NAME,
        session=session,
        meta={"fingerprint": file_fingerprint(path), "pid": ev.pid},
        missing="the rocpd database has no rocpd_kernel_dispatch or rocpd_memory_copy rows",
    )


def _agents(db: _Db, ev: EventColumns) -> None:
    have = db.cols("rocpd_info_agent")
    pick = [c if c in have else "null" for c in ("id", "type", "type_index", "logical_index", "product_name")]
    rows = db.rows(f"select {', '.join(pick)} from {db.t('rocpd_info_agent')} order by id")
    gpus = [r for r in rows if str(r[1]).upper() == "GPU"]
    for i, (aid, _type, type_index, logical, product) in enumerate(gpus):
        dev = type_index if isinstance(type_index, int) else logical if isinstance(logical, int) else i
        ev.device_of[int(aid)] = int(dev)
        ev.device_names[int(dev)] = str(product or "")


def _kernels(db: _Db, ev: EventColumns) -> dict[str, np.ndarray] | None:
    table = "rocpd_kernel_dispatch"
    if table not in db.names:
        return None
    have = db.cols(table)
    start, end = db.times(table, "K")
    dims = [
        f"K.[{c}]" if c in have else "-1"
        for c in (
            "grid_size_x",
            "grid_size_y",
            "grid_size_z",
            "workgroup_size_x",
            "workgroup_size_y",
            "workgroup_size_z",
        )
    ]
    stream = db.track("stream_id", "K") if "stream_id" in db.cols("rocpd_track") else db.track("queue_id", "K")
    rows = db.rows(
        f"select {start}, {end}, {db.track('agent_id', 'K')}, {stream}, {db.track('tid', 'K')}, "
        f"{db.correlation('K', table)}, K.kernel_id, {', '.join(dims)} from {db.t(table)} K order by K.id"
    )
    c = ev.base(len(rows), "kernel")
    if not rows:
        return c
    c["start"], c["end"] = _arr(rows, 0), _arr(rows, 1)
    c["device"] = ev.devices(_arr(rows, 2), "a kernel dispatch")
    c["stream"], c["tid"], c["correlation"] = _arr(rows, 3), _arr(rows, 4), _arr(rows, 5)
    for j, col in enumerate(GRID_COLUMNS):
        c[col] = _arr(rows, 7 + j)
    kid = _arr(rows, 6)
    uniq, inv = np.unique(kid, return_inverse=True)
    names = _kernel_names(db)
    missing = [int(k) for k in uniq.tolist() if k not in names]
    if missing:
        raise InputError(
            db.path, f"a kernel dispatch names kernel_id {missing[0]}, which rocpd_info_kernel_symbol lacks"
        )
    ev.kernel_names(c, [names[int(k)] for k in uniq.tolist()], inv.reshape(-1))
    return c


def _kernel_names(db: _Db) -> dict[int, str]:
    if "rocpd_info_kernel_symbol" not in db.names:
        return {}
    have = db.cols("rocpd_info_kernel_symbol")
    picks = []
    if "extdata" in have:
        picks.append("json_extract(extdata, '$.formatted_kernel_name')")
    picks += [c for c in ("display_name", "kernel_name") if c in have]
    name = f"coalesce({', '.join(picks)}, '')" if picks else "''"
    try:
        rows = db.rows(f"select id, {name} from {db.t('rocpd_info_kernel_symbol')}")
    except InputError:  # a SQLite without JSON functions
        plain: list[str] = [c for c in ("display_name", "kernel_name") if c in have] or ["''"]
        rows = db.rows(f"select id, coalesce({', '.join(plain)}, '') from {db.t('rocpd_info_kernel_symbol')}")
    return {int(i): str(n) for i, n in rows}


def _copies(db: _Db, ev: EventColumns) -> dict[str, np.ndarray] | None:
    table = "rocpd_memory_copy"
    if table not in db.names:
        return None
    start, end = db.times(table, "M")
    stream = db.track("stream_id", "M") if "stream_id" in db.cols("rocpd_track") else db.track("queue_id", "M")
    rows = db.rows(
        f"select {start}, {end}, coalesce(M.dst_agent_id, -1), coalesce(M.src_agent_id, -1), {stream}, "
        f"{db.track('tid', 'M')}, {db.correlation('M', table)}, coalesce(M.size, -1), {db.string('M.name_id')} "
        f"from {db.t(table)} M order by M.id"
    )
    c = ev.base(len(rows), "memcpy")
    if not rows:
        return c
    c["start"], c["end"] = _arr(rows, 0), _arr(rows, 1)
    ev.copy_columns(c, np.array([str(r[8] or "") for r in rows], object), _arr(rows, 2), _arr(rows, 3))
    c["stream"], c["tid"], c["correlation"], c["bytes"] = _arr(rows, 4), _arr(rows, 5), _arr(rows, 6), _arr(rows, 7)
    return c


def _regions(db: _Db, ev: EventColumns) -> list[dict[str, np.ndarray]]:
    table = "rocpd_region"
    if table not in db.names or "rocpd_event" not in db.names:
        return []
    start, end = db.times(table, "R")
    category = db.string(f"(select category_id from {db.t('rocpd_event')} where id = R.event_id)")
    rows = db.rows(
        f"select {start}, {end}, {db.track('tid', 'R')}, {db.correlation('R', table)}, {db.string('R.name_id')}, "
        f"coalesce({category}, '') from {db.t(table)} R order by R.id"
    )
    out = []
    for prefix, kind in _HOST_KINDS:
        sel = [r for r in rows if str(r[5]).upper().startswith(prefix)]
        c = ev.base(len(sel), kind)
        if sel:
            c["start"], c["end"], c["tid"], c["correlation"] = _arr(sel, 0), _arr(sel, 1), _arr(sel, 2), _arr(sel, 3)
            c["name"] = ev.codes([str(r[4] or "") for r in sel])
        out.append(c)
    return out
