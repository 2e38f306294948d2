"""rocpd: the SQLite database rocprofv3 writes by default since ROCm 7 (``<host>/<pid>_results.db``).

The schema is ROCprofiler-SDK's documented one (``rocpd_tables.sql``, schema version 3; each table
named ``rocpd_<table><uuid>`` with a view ``rocpd_<table>`` over it). Read here, columns checked
with ``PRAGMA table_info`` so that versions that move a column only lose what they moved:

- ``rocpd_kernel_dispatch`` → ``kernel``: ``agent_id``, ``stream_id`` (else ``queue_id``) and
  ``tid`` (the record's own columns, schema 3.0.1; else those of its ``track_id`` →
  ``rocpd_track``), ``kernel_id`` (→ ``rocpd_info_kernel_symbol``: the
  ``formatted_kernel_name`` of its ``extdata``, else ``display_name``, else ``kernel_name``),
  ``start``/``end`` (else ``start_id``/``end_id`` → ``rocpd_timestamp.value``),
  ``grid_size_*``, ``workgroup_size_*``, ``event_id`` (→ ``rocpd_event``: ``stack_id`` is the
  internal correlation id that links a launch to its work, ``correlation_id`` the external one);
- ``rocpd_memory_copy`` → ``memcpy``: ``name_id`` (→ ``rocpd_string``: ``MEMORY_COPY_HOST_TO_DEVICE``,
  ...), ``dst_agent_id``, ``src_agent_id``, ``size``; stream, thread, times and correlation as above;
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
from typing import Any

import numpy as np

from ..errors import InputError
from ._io import SQLITE_MAGIC, check_size, file_fingerprint
from ._op_args import device_row
from ._sqlite import ReadOnlyDb
from .base import TraceFile
from .rocprof import _I64_MAX, GRID_COLUMNS, EventColumns, trace_file

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
_REQUIRED = ("rocpd_string", "rocpd_info_agent")
"""Tables every rocpd database has and the reader needs (the records' tables may be missing)."""


class READER:  # noqa: N801 - the registered reader object
    name = NAME

    @staticmethod
    def guess_can_open(path: str, head: bytes) -> bool:
        if not head.startswith(SQLITE_MAGIC):
            return False
        return b"rocpd_" in head or any(t in _tables_of(path) for t in _REQUIRED)

    @staticmethod
    def read(path: str, **options: Any) -> TraceFile:
        return read_rocpd(path, **options)


def _tables_of(path: str) -> dict[str, str]:
    """The name to read for each rocpd table: its view, else its uuid-suffixed table."""
    try:
        with ReadOnlyDb(path) as db:
            names = [r[0] for r in db.con.execute("select name from sqlite_master where type in ('table', 'view')")]
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
        self.db = ReadOnlyDb(path)
        self.con = self.db.con

    def cols(self, table: str) -> set[str]:
        name = self.names.get(table)
        return {r[1] for r in self.con.execute(f"PRAGMA table_info([{name}])")} if name else set()

    def t(self, table: str) -> str:
        return f"[{self.names[table]}]"

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        try:
            return self.con.execute(sql).fetchall()
        except sqlite3.DatabaseError as exc:
            raise InputError(self.path, f"cannot read the rocpd database: {self.db.why(exc)}") from None

    def times(self, table: str, alias: str) -> tuple[str, str]:
        """SQL for the start and end of a row of ``table`` (inline columns, else rocpd_timestamp)."""
        have = self.cols(table)
        if {"start", "end"} <= have:
            return f"{alias}.[start]", f"{alias}.[end]"
        if "rocpd_timestamp" not in self.names or not {"start_id", "end_id"} <= have:
            raise InputError(self.path, f"{table} has no start/end and the database no rocpd_timestamp table")
        ts = self.t("rocpd_timestamp")
        return (
            f"(select value from {ts} where id = {alias}.start_id)",
            f"(select value from {ts} where id = {alias}.end_id)",
        )

    def correlation(self, alias: str, table: str) -> tuple[str, str]:
        """SQL for a row's internal correlation id (the launch link: its event's ``stack_id``, as
        rocprofv3 writes it; ``correlation_id`` in a database without ``stack_id``) and its external
        correlation id (``correlation_id`` next to a ``stack_id``; -1 otherwise)."""
        if "event_id" not in self.cols(table) or "rocpd_event" not in self.names:
            return "-1", "-1"
        have = self.cols("rocpd_event")

        def of_event(column: str) -> str:
            if column not in have:
                return "-1"
            return f"coalesce((select [{column}] from {self.t('rocpd_event')} where id = {alias}.event_id), -1)"

        if "stack_id" in have:
            return of_event("stack_id"), of_event("correlation_id")
        return of_event("correlation_id"), "-1"

    def has(self, table: str, column: str) -> bool:
        """Whether rows of ``table`` state ``column``, in their own columns or through their track."""
        return column in self.cols(table) or ("track_id" in self.cols(table) and column in self.cols("rocpd_track"))

    def where(self, table: str, column: str, alias: str, missing: int = -1) -> str:
        """SQL for where a row of ``table`` ran (``tid``, ``agent_id``, ``queue_id``, ``stream_id``):
        its own column (schema 3.0.1), else its track's, else ``missing``."""
        if column in self.cols(table):
            return f"coalesce({alias}.[{column}], {missing})"
        if self.has(table, column):
            return f"coalesce((select [{column}] from {self.t('rocpd_track')} where id = {alias}.track_id), {missing})"
        return str(missing)

    def stream(self, table: str, alias: str, missing: int = -1) -> str:
        """SQL for a row's stream: its HIP stream, else its HSA queue."""
        column = "stream_id" if self.has(table, "stream_id") else "queue_id"
        return self.where(table, column, alias, missing)

    def strings(self, ids: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """The texts of ``rocpd_string`` ids: each id's index into the distinct texts returned (an
        unknown id is "")."""
        uniq, inv = np.unique(ids, return_inverse=True)
        known = dict(self.rows(f"select id, string from {self.t('rocpd_string')}"))
        return inv.reshape(-1).astype(np.int64), ["" if known.get(i) is None else str(known[i]) for i in uniq.tolist()]


def _ints(rows: list[tuple[Any, ...]], path: str, what: str) -> list[np.ndarray]:
    """The columns of ``rows`` (integers, NULL already replaced in SQL) as int64 arrays; a value that
    is not an integer (SQLite keeps whatever a writer stored) is an input error naming ``what``."""
    a = np.array(rows)
    if a.ndim != 2 or a.dtype.kind not in "iu" or (a.dtype.kind == "u" and int(a.max()) > np.iinfo(np.int64).max):
        raise InputError(path, f"{what} holds a value that is not a 64-bit integer where one belongs")
    return [np.ascontiguousarray(a[:, i], dtype=np.int64) for i in range(a.shape[1])]


def read_rocpd(path: str, *, max_input_size: int | None = None, **_: Any) -> TraceFile:
    """Read one rocpd database into one part per GPU agent with activity (see the module notes)."""
    check_size(path, os.path.getsize(path), max_input_size)
    db = _Db(path)
    try:
        for need in _REQUIRED:
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
        ev = EventColumns(path, pid if isinstance(pid, int) and 0 <= pid <= _I64_MAX else -1)
        ev.agents_source = "rocpd_info_agent"
        _agents(db, ev)
        cols = [_kernels(db, ev), _copies(db, ev), *_regions(db, ev)]
        ev.set_columns([c for c in cols if c is not None] or [ev.base(0, "kernel")])
    finally:
        db.db.close()
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
    ev.host_agents = {int(r[0]) for r in rows if str(r[1]).upper() != "GPU" and isinstance(r[0], int)}
    for i, (aid, _type, type_index, logical, product) in enumerate(gpus):
        dev = type_index if isinstance(type_index, int) else logical if isinstance(logical, int) else i
        dev = ev.device_id(int(dev), f"rocpd_info_agent {aid}")
        ev.device_of[int(aid)] = int(dev)
        ev.device_names[int(dev)] = str(product or "")
        if product:  # the GPU's name for the roofline (ROCm: AMD)
            ev.device_tables[int(dev)] = device_row(int(dev), str(product), "amd", "", None, None)


def _kernels(db: _Db, ev: EventColumns) -> dict[str, np.ndarray] | None:
    table = "rocpd_kernel_dispatch"
    if table not in db.names:
        return None
    have = db.cols(table)
    start, end = db.times(table, "K")
    dims = [
        f"coalesce(K.[{c}], -1)" if c in have else "-1"
        for c in (
            "grid_size_x",
            "grid_size_y",
            "grid_size_z",
            "workgroup_size_x",
            "workgroup_size_y",
            "workgroup_size_z",
        )
    ]
    internal, external = db.correlation("K", table)
    rows = db.rows(
        f"select {start}, {end}, {db.where(table, 'agent_id', 'K')}, {db.stream(table, 'K')}, "
        f"{db.where(table, 'tid', 'K')}, {internal}, {external}, coalesce(K.kernel_id, -1), {', '.join(dims)} "
        f"from {db.t(table)} K order by K.id"
    )
    c = ev.base(len(rows), "kernel")
    if not rows:
        return c
    cols = _ints(rows, db.path, table)
    c["start"], c["end"] = cols[0], cols[1]
    c["device"] = ev.devices(cols[2], "a kernel dispatch")
    c["stream"], c["tid"], c["correlation"], c["external_id"] = cols[3], cols[4], cols[5], _external(cols[6])
    for j, col in enumerate(GRID_COLUMNS):
        c[col] = cols[8 + j]
    uniq, inv = np.unique(cols[7], return_inverse=True)
    names = _kernel_names(db)
    missing = [int(k) for k in uniq.tolist() if k not in names]
    if missing:
        raise InputError(
            db.path, f"a kernel dispatch names kernel_id {missing[0]}, which rocpd_info_kernel_symbol lacks"
        )
    ev.kernel_names(c, [names[int(k)] for k in uniq.tolist()], inv.reshape(-1))
    return c


def _external(v: np.ndarray) -> np.ndarray:
    """External correlation ids: 0 (unset) and below are -1."""
    return np.where(v > 0, v, -1)


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
    internal, external = db.correlation("M", table)
    rows = db.rows(
        f"select {start}, {end}, coalesce(M.dst_agent_id, -1), coalesce(M.src_agent_id, -1), "
        f"{db.stream(table, 'M', missing=-2)}, {db.where(table, 'tid', 'M')}, {internal}, {external}, "
        f"coalesce(M.size, -1), coalesce(M.name_id, -1) from {db.t(table)} M order by M.id"
    )
    c = ev.base(len(rows), "memcpy")
    if not rows:
        return c
    cols = _ints(rows, db.path, table)
    c["start"], c["end"] = cols[0], cols[1]
    inv, names = db.strings(cols[9])
    ev.copy_columns(c, np.asarray(names, dtype=object)[inv], cols[2], cols[3], cols[4])
    c["tid"], c["correlation"] = cols[5], cols[6]
    c["external_id"], c["bytes"] = _external(cols[7]), cols[8]
    return c


def _regions(db: _Db, ev: EventColumns) -> list[dict[str, np.ndarray]]:
    table = "rocpd_region"
    if table not in db.names or "rocpd_event" not in db.names:
        return []
    start, end = db.times(table, "R")
    internal, external = db.correlation("R", table)
    category = f"coalesce((select category_id from {db.t('rocpd_event')} where id = R.event_id), -1)"
    rows = db.rows(
        f"select {start}, {end}, {db.where(table, 'tid', 'R')}, {internal}, {external}, "
        f"coalesce(R.name_id, -1), {category} from {db.t(table)} R order by R.id"
    )
    if rows:
        cols = _ints(rows, db.path, table)
        name_inv, names = db.strings(cols[5])
        cat_inv, cats = db.strings(cols[6])
    out = []
    for prefix, kind in _HOST_KINDS:
        sel = np.zeros(0, np.int64)
        if rows:  # the rows of the categories with this prefix (each distinct category looked at once)
            sel = np.flatnonzero(np.isin(cat_inv, [i for i, x in enumerate(cats) if x.upper().startswith(prefix)]))
        c = ev.base(sel.size, kind)
        if sel.size:
            c["start"], c["end"], c["tid"] = cols[0][sel], cols[1][sel], cols[2][sel]
            c["correlation"], c["external_id"] = cols[3][sel], _external(cols[4][sel])
            used, inv = np.unique(name_inv[sel], return_inverse=True)
            c["name"] = ev.codes([names[i] for i in used.tolist()])[inv.reshape(-1)]
        out.append(c)
    return out
