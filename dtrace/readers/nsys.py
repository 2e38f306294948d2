"""Nsight Systems reports: ``*.sqlite`` (``nsys export --type sqlite``) and ``*.nsys-rep``.

Tables read (each only if present, columns through ``PRAGMA table_info``, since both change
between nsys versions):

- ``CUPTI_ACTIVITY_KIND_KERNEL`` → ``kernel`` (name: ``demangledName``, else ``shortName``);
- ``CUPTI_ACTIVITY_KIND_MEMCPY`` → ``memcpy`` named like ``nsys stats``
  (``[CUDA memcpy Host-to-Device]``), with ``copyKind`` and ``bytes`` in the memcpy side table;
- ``CUPTI_ACTIVITY_KIND_MEMSET`` → ``memset`` (``[CUDA memset]``);
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` → ``runtime`` (launch calls, linked by ``correlationId``);
- ``NVTX_EVENTS`` push/pop and start/end ranges → host ``annotation`` events (marks and
  unterminated ranges are dropped); text from ``text`` or ``textId``;
- ``StringIds`` for names, ``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` for absolute time.

Timestamps are integer ns relative to the session start; adding ``utcEpochNs`` makes them
absolute, so reports of different ranks line up. ``globalTid``/``globalPid`` pack the host
ids: ``pid = gid // 0x1000000 % 0x1000000``, ``tid = gid % 0x1000000``. Every (process,
device) pair with GPU activity becomes one part and its own rank (``rank_per_device``), with
the host events of its process. NCCL kernels become rows of the collectives side table
(collective type from the kernel name).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa

from ..core.constants import COMM_KERNEL, KIND_CODES, kernel_collective
from ..core.dtypes import empty_frame
from ..core.schema import (
    COLLECTIVE_SCHEMA,
    KIND_DICT,
    MEMCPY_SCHEMA,
    TIME_MAX_NS,
    TIME_MIN_NS,
    dropped_summary,
    implausible_times,
    side_table,
    validate_events,
)
from ..errors import ImplausibleTimes, InputError, NoGPUActivity
from ..vector.groups import text_codes
from ._io import SQLITE_MAGIC, check_size, file_fingerprint, open_regular
from ._op_args import device_row, vendor_of
from ._sqlite import ReadOnlyDb
from .base import Part, TraceFile

NAME = "nsys"


GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
PID_SHIFT = 0x1000000
_I64_MIN, _I64_MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)
_NULL = np.iinfo(np.int64).min  # a NULL start/end read as an integer

# ENUM_CUDA_MEMCPY_OPER labels (used when the report lacks the enum table)
MEMCPY_LABELS = {
    0: "Unknown",
    1: "Host-to-Device",
    2: "Device-to-Host",
    3: "Host-to-Array",
    4: "Array-to-Host",
    5: "Array-to-Array",
    6: "Array-to-Device",
    7: "Device-to-Array",
    8: "Device-to-Device",
    9: "Host-to-Host",
    10: "Peer-to-Peer",
    11: "Unified Host-to-Device",
    12: "Unified Device-to-Host",
    13: "Unified Device-to-Device",
}
COPY_KIND = {
    1: "H2D",
    2: "D2H",
    3: "H2D",
    4: "D2H",
    5: "D2D",
    6: "D2D",
    7: "D2D",
    8: "D2D",
    9: "H2H",
    10: "P2P",
    11: "H2D",
    12: "D2H",
    13: "D2D",
}
NVTX_RANGE_TYPES = {59: "NvtxPushPopRange", 60: "NvtxStartEndRange", 70: "NvtxtPushPopRange", 71: "NvtxtStartEndRange"}


class READER:  # noqa: N801 - the registered reader object
    name = NAME

    @staticmethod
    def guess_can_open(path: str, head: bytes) -> bool:
        if head.startswith(SQLITE_MAGIC):
            return True
        return path.lower().endswith((".nsys-rep", ".qdrep"))

    @staticmethod
    def read(path: str, **options: Any) -> TraceFile:
        return read_nsys(path, **options)


def split_gid(gid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(pid, tid)`` packed in an nsys ``globalTid``/``globalPid``.

    Examples
    --------
    >>> pid, tid = split_gid(np.array([281761330250412]))
    >>> int(pid[0]), int(tid[0])
    (17068, 17068)
    """
    g = np.asarray(gid, np.int64)
    return (g // PID_SHIFT) % PID_SHIFT, g % PID_SHIFT


def export_sqlite(path: str, workdir: str) -> str:
    """Convert a ``.nsys-rep`` to SQLite with ``nsys export`` (needs ``nsys`` on PATH)."""
    exe = shutil.which("nsys")
    if exe is None:
        raise InputError(
            path,
            "is an Nsight Systems report (.nsys-rep); converting it needs the 'nsys' "
            "command on PATH, or export it first: nsys export --type sqlite -o "
            "REPORT.sqlite REPORT.nsys-rep",
        )
    out = os.path.join(workdir, Path(path).stem + ".sqlite")
    proc = subprocess.run(
        [exe, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", out, path],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or not os.path.exists(out):
        msg = (proc.stderr or proc.stdout or "").strip().splitlines()
        raise InputError(path, f"nsys export failed (exit {proc.returncode}): {msg[-1] if msg else 'no output'}")
    return out


def read_nsys(path: str, *, max_input_size: int | None = None, **_: Any) -> TraceFile:
    """Read one Nsight Systems report into one :class:`Part` per (process, device).

    Events with implausible times are dropped and counted by reason in
    ``meta["dropped_events"]``; ``max_input_size`` limits the SQLite file (of a ``.nsys-rep``:
    the report and its export).
    """
    if not _is_sqlite(path):
        if path.lower().endswith((".nsys-rep", ".qdrep")):
            check_size(path, os.path.getsize(path), max_input_size)
            tmp = tempfile.mkdtemp(prefix="dtrace-nsys-")
            try:
                db = export_sqlite(path, tmp)
                check_size(path, os.path.getsize(db), max_input_size)
                tf = _read_sqlite(db, source=path)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            tf.meta["fingerprint"] = file_fingerprint(path)
            return tf
        raise InputError(path, "not a SQLite database (expected an 'nsys export --type sqlite' file)")
    check_size(path, os.path.getsize(path), max_input_size)
    tf = _read_sqlite(path, source=path)
    tf.meta["fingerprint"] = file_fingerprint(path)
    return tf


def _is_sqlite(path: str) -> bool:
    with open_regular(path) as f:
        return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC


class _Db:
    """A read-only SQLite report with column-tolerant table reads (see :class:`ReadOnlyDb`)."""

    def __init__(self, path: str, source: str) -> None:
        self.source = source
        self.db: ReadOnlyDb | None = None
        try:
            self.db = ReadOnlyDb(path)
            self.con = self.db.con
            self.tables = {r[0] for r in self.con.execute("select name from sqlite_master where type='table'")}
        except sqlite3.DatabaseError as exc:
            self.close()
            raise InputError(source, f"not a readable SQLite database: {exc}") from None

    def _why(self, exc: BaseException) -> str:
        return self.db.why(exc) if self.db is not None else str(exc)

    def close(self) -> None:
        if self.db is not None:
            self.db.close()

    def columns(self, table: str) -> set[str]:
        if table not in self.tables:
            return set()
        return {r[1] for r in self.con.execute(f"PRAGMA table_info([{table}])")}

    def read(self, table: str, wanted: dict[str, Any], where: str = "") -> pd.DataFrame:
        """Columns of ``table``; a missing column is filled with its default from ``wanted``."""
        have = self.columns(table)
        present = [c for c in wanted if c in have]
        if not present:
            return empty_frame(wanted)
        sql = f"select {', '.join(f'[{c}]' for c in present)} from [{table}]" + (f" where {where}" if where else "")
        try:
            rows = self.con.execute(sql).fetchall()
        except sqlite3.DatabaseError as exc:
            raise InputError(self.source, f"cannot read table {table}: {self._why(exc)}") from None
        cols = list(zip(*rows)) if rows else [() for _ in present]
        out = {}
        for c in wanted:
            if c in present:
                out[c] = list(cols[present.index(c)])
            else:
                out[c] = [wanted[c]] * len(rows)
        return pd.DataFrame(out)

    def read_ints(self, table: str, wanted: dict[str, int]) -> pd.DataFrame:
        """Integer columns of ``table`` as int64 (NULLs and missing columns become the default).

        ``coalesce`` in SQL keeps every value an integer, so the rows convert to one int64
        array in C instead of column by column through Python objects.
        """
        have = self.columns(table)
        present = [c for c in wanted if c in have]
        if not present:
            return pd.DataFrame({c: np.empty(0, np.int64) for c in wanted})
        sql = f"select {', '.join(f'coalesce([{c}], {int(wanted[c])})' for c in present)} from [{table}]"
        try:
            rows = self.con.execute(sql).fetchall()
            arr = np.array(rows, dtype=np.int64).reshape(len(rows), len(present))
        except sqlite3.DatabaseError as exc:
            raise InputError(self.source, f"cannot read table {table}: {self._why(exc)}") from None
        except (TypeError, ValueError, OverflowError) as exc:
            raise InputError(self.source, f"table {table} has a non-integer value: {exc}") from None
        return pd.DataFrame(
            {c: arr[:, present.index(c)] if c in present else np.full(len(rows), wanted[c], np.int64) for c in wanted}
        )

    def strings(self, ids: np.ndarray) -> dict[int, str]:
        """``StringIds`` values of ``ids``."""
        if "StringIds" not in self.tables or not len(ids):
            return {}
        want = set(int(i) for i in ids)
        out: dict[int, str] = {}
        for i, v in self.con.execute("select id, value from StringIds"):
            if i in want:
                out[int(i)] = str(v)
        return out

    def scalar(self, sql: str) -> Any:
        try:
            row = self.con.execute(sql).fetchone()
        except sqlite3.DatabaseError:
            return None
        return row[0] if row else None


def _ints(s: pd.Series, default: int = -1) -> np.ndarray:
    """An integer column whose NULLs become ``default``."""
    return pd.to_numeric(s, errors="coerce").fillna(default).to_numpy(np.int64) if len(s) else np.empty(0, np.int64)


def _times(s: pd.Series, bad: int) -> np.ndarray:
    """An int64 time column; a value int64 cannot hold (a REAL ``1e30``, NaN) becomes ``bad``
    (int64 min for starts, max for ends), which :func:`dtrace.core.schema.implausible_times` then
    drops: never a wrapped or clipped time, never a numpy warning."""
    v = pd.to_numeric(s, errors="coerce")
    if v.dtype.kind in "iu":
        return cast(np.ndarray, v.to_numpy(np.int64))
    f = v.to_numpy(np.float64)
    ok = np.abs(f) < 2.0**62  # False for NaN
    return np.where(ok, np.where(ok, f, 0).astype(np.int64), bad)


def _read_sqlite(path: str, *, source: str) -> TraceFile:
    db = _Db(path, source)
    try:
        return _read_db(db, source)
    finally:
        db.close()


def _session_start(value: Any, source: str) -> int:
    """The session start in ns since the epoch (0 if the report has none); a value that is not
    an integer number fails the input."""
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            pass
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(
            source,
            f"the session start (TARGET_INFO_SESSION_START_TIME.utcEpochNs = {value!r:.40}) "
            "is not an integer number of ns",
        )
    return value


def _read_db(db: _Db, source: str) -> TraceFile:
    """The parts of an exported report: session origin, GPU activity, host calls and NVTX
    ranges as one event table, then split per (process, device) with the side tables."""
    origin = _session_origin(db, source)
    gpu = _gpu_activity(db, source)
    rt = db.read_ints(
        "CUPTI_ACTIVITY_KIND_RUNTIME", {"start": 0, "end": 0, "globalTid": 0, "correlationId": -1, "nameId": -1}
    )
    nvtx = _nvtx(db)
    cols, name_dict = _event_columns(db, gpu, rt, nvtx)
    start_f = cols["start"].astype(np.float64)
    keep, dropped = implausible_times(start_f + origin, cols["end"].astype(np.float64) - start_f, source)
    if keep is not None:  # dropped rows stay in the table with harmless times; no part takes them
        cols["start"][~keep] = 0
        cols["end"][~keep] = 0
    kept = np.ones(len(cols["start"]), bool) if keep is None else keep
    table = validate_events(_event_table(cols, name_dict, origin), source)
    keys = _device_keys(cols, gpu.n, kept)
    if not keys:
        raise ImplausibleTimes(source, f"all {gpu.n} GPU events have implausible times ({dropped_summary(dropped)})")
    parts = _parts(table, cols, gpu, kept, keys, _devices(db))
    meta = {
        "base_time_ns": origin,
        "session_start_utc_ns": origin,
        "events": int(kept.sum()),
        "dropped_events": dropped,
        "processes": sorted({p for p, _ in keys}),
        "devices": sorted({d for _, d in keys}),
        "schema_version": str(
            db.scalar("select value from META_DATA_EXPORT where name='EXPORT_SCHEMA_VERSION'")
            if "META_DATA_EXPORT" in db.tables
            else ""
        ),
        "nvtx_ranges": int(len(nvtx)),
    }
    return TraceFile(path=source, format=NAME, parts=parts, rank_hint=None, rank_per_device=True, meta=meta)


def _session_origin(db: _Db, source: str) -> int:
    """The session start (UTC epoch ns) that the report's times count from."""
    present = [t for t in GPU_TABLES if t in db.tables]
    if not present:
        raise InputError(
            source,
            "no CUPTI_ACTIVITY_KIND_KERNEL, _MEMCPY or _MEMSET table: the report has no "
            "CUDA trace (profile with 'nsys profile --trace=cuda')",
        )
    origin = (
        db.scalar("select utcEpochNs from TARGET_INFO_SESSION_START_TIME")
        if "utcEpochNs" in db.columns("TARGET_INFO_SESSION_START_TIME")
        else None
    )
    origin = _session_start(origin, source)
    if not TIME_MIN_NS <= origin < TIME_MAX_NS:
        raise ImplausibleTimes(source, f"the session start (utcEpochNs {origin}) is outside 1970-2200")
    return origin


_GPU_BASE = {"start": _NULL, "end": _NULL, "deviceId": -1, "streamId": -1, "correlationId": -1, "globalPid": 0}
"""The columns read from every GPU activity table (kernels, copies, sets), with their defaults."""


@dataclass
class _GpuActivity:
    """The kernel, memcpy and memset rows of a report (in that order in the event table)."""

    kernels: pd.DataFrame
    copies: pd.DataFrame
    sets: pd.DataFrame
    name_col: str | None

    @property
    def n(self) -> int:
        return len(self.kernels) + len(self.copies) + len(self.sets)


def _gpu_activity(db: _Db, source: str) -> _GpuActivity:
    """The GPU activity tables; a report without any, or with rows lacking times, fails."""
    kcols = db.columns("CUPTI_ACTIVITY_KIND_KERNEL")
    name_col = next((c for c in ("demangledName", "shortName", "mangledName", "name") if c in kcols), None)
    gpu = _GpuActivity(
        kernels=db.read_ints("CUPTI_ACTIVITY_KIND_KERNEL", {**_GPU_BASE, **({name_col: -1} if name_col else {})}),
        copies=db.read_ints("CUPTI_ACTIVITY_KIND_MEMCPY", {**_GPU_BASE, "copyKind": 0, "bytes": -1}),
        sets=db.read_ints("CUPTI_ACTIVITY_KIND_MEMSET", {**_GPU_BASE, "bytes": -1}),
        name_col=name_col,
    )
    if gpu.n == 0:
        raise NoGPUActivity(source, "no GPU activity: the report's kernel, memcpy and memset tables are empty")
    for t, df in (("KERNEL", gpu.kernels), ("MEMCPY", gpu.copies), ("MEMSET", gpu.sets)):
        if len(df) and ((df["start"] == _NULL).any() or (df["end"] == _NULL).any()):
            raise InputError(source, f"CUPTI_ACTIVITY_KIND_{t} lacks start/end times")
    return gpu


def _event_columns(
    db: _Db, gpu: _GpuActivity, rt: pd.DataFrame, nvtx: pd.DataFrame
) -> tuple[dict[str, np.ndarray], list[str]]:
    """The event columns (GPU rows first, then runtime calls, then NVTX ranges) with ``code``
    indexing the returned name list: kernels through StringIds, copies and sets named as nsys
    stats names them."""
    kname_ids = _ints(gpu.kernels[gpu.name_col]) if gpu.name_col else np.full(len(gpu.kernels), -1, np.int64)
    strings = db.strings(np.unique(kname_ids))
    labels = dict(MEMCPY_LABELS)
    if "ENUM_CUDA_MEMCPY_OPER" in db.tables:
        labels.update({int(i): str(lbl) for i, lbl in db.con.execute("select id, label from ENUM_CUDA_MEMCPY_OPER")})
    uniq_k, inv_k = np.unique(kname_ids, return_inverse=True)
    kernel_dict = [strings.get(int(i), f"<kernel {int(i)}>") for i in uniq_k.tolist()]
    uniq_c, inv_c = np.unique(_ints(gpu.copies["copyKind"], 0), return_inverse=True)
    copy_dict = [f"[CUDA memcpy {labels.get(int(k), 'Unknown')}]" for k in uniq_c.tolist()]
    n_k, n_c, n_s = len(gpu.kernels), len(gpu.copies), len(gpu.sets)
    rows = pd.concat([df[list(_GPU_BASE)] for df in (gpu.kernels, gpu.copies, gpu.sets)], ignore_index=True)
    g_pid, _ = split_gid(_ints(rows["globalPid"], 0))
    name_dict = kernel_dict + copy_dict + ["[CUDA memset]"]
    frames = [
        dict(
            device=_ints(rows["deviceId"]),
            stream=_ints(rows["streamId"]),
            pid=g_pid,
            tid=_ints(rows["streamId"]),
            kind=np.concatenate(
                [
                    np.full(n_k, KIND_CODES["kernel"]),
                    np.full(n_c, KIND_CODES["memcpy"]),
                    np.full(n_s, KIND_CODES["memset"]),
                ]
            ).astype(np.int8),
            code=np.concatenate(
                [
                    inv_k.reshape(-1),
                    len(kernel_dict) + inv_c.reshape(-1),
                    np.full(n_s, len(kernel_dict) + len(copy_dict)),
                ]
            ).astype(np.int64),
            start=_ints(rows["start"], 0),
            end=_ints(rows["end"], 0),
            corr=_ints(rows["correlationId"]),
        )
    ]
    # host: runtime calls and NVTX ranges
    frames.append(_runtime_frame(db, rt, name_dict))
    frames.append(_nvtx_frame(nvtx, name_dict))
    cols = {k: np.concatenate([np.asarray(f[k]) for f in frames]) for k in frames[0]}
    # for the side tables: each kernel's name code and each copy's kind, by the GPU rows' order
    cols["kernel_code"], cols["copy_code"] = inv_k.reshape(-1), inv_c.reshape(-1)
    cols["kernel_names"] = np.array(kernel_dict, object)
    cols["copy_kinds"] = uniq_c
    return cols, name_dict


def _runtime_frame(db: _Db, rt: pd.DataFrame, name_dict: list[str]) -> dict[str, np.ndarray]:
    """The event columns of the runtime calls; their names are appended to ``name_dict``."""
    rt_names = db.strings(np.unique(_ints(rt["nameId"]))) if len(rt) else {}
    rt_pid, rt_tid = split_gid(_ints(rt["globalTid"], 0))
    uniq_r, inv_r = np.unique(_ints(rt["nameId"]), return_inverse=True)
    off = len(name_dict)
    name_dict += [rt_names.get(int(i), f"<runtime {int(i)}>") for i in uniq_r.tolist()]
    return dict(
        device=np.full(len(rt), -1),
        stream=np.full(len(rt), -1),
        pid=rt_pid,
        tid=rt_tid,
        kind=np.full(len(rt), KIND_CODES["runtime"], np.int8),
        code=off + inv_r.reshape(-1),
        start=_ints(rt["start"], 0),
        end=_ints(rt["end"], 0),
        corr=_ints(rt["correlationId"]),
    )


def _nvtx_frame(nvtx: pd.DataFrame, name_dict: list[str]) -> dict[str, np.ndarray]:
    """The event columns of the NVTX ranges; their texts are appended to ``name_dict``."""
    off = len(name_dict)
    uniq_n, inv_n = text_codes(nvtx["text"]) if len(nvtx) else ([], np.empty(0, np.int64))
    name_dict += uniq_n
    return dict(
        device=np.full(len(nvtx), -1),
        stream=np.full(len(nvtx), -1),
        pid=nvtx["pid"].to_numpy(np.int64),
        tid=nvtx["tid"].to_numpy(np.int64),
        kind=np.full(len(nvtx), KIND_CODES["annotation"], np.int8),
        code=off + inv_n.reshape(-1),
        start=nvtx["start"].to_numpy(np.int64),
        end=nvtx["end"].to_numpy(np.int64),
        corr=np.full(len(nvtx), -1),
    )


def _event_table(cols: dict[str, np.ndarray], name_dict: list[str], origin: int) -> pa.Table:
    """The normalized event table of all rows (times made absolute by ``origin``)."""
    n = len(cols["start"])
    # a name can occur in several sources (an NVTX range named like a kernel): one dictionary entry
    uniq_names, remap = text_codes(name_dict)
    names = pa.DictionaryArray.from_arrays(
        pa.array(remap[cols["code"]].astype(np.int32)), pa.array(uniq_names, pa.string())
    )
    return pa.table(
        {
            "rank": np.full(n, -1, np.int32),
            "device": cols["device"].astype(np.int32),
            "stream": cols["stream"].astype(np.int64),
            "pid": cols["pid"].astype(np.int64),
            "tid": cols["tid"].astype(np.int64),
            "kind": pa.DictionaryArray.from_arrays(pa.array(cols["kind"].astype(np.int32)), KIND_DICT),
            "name": names,
            "start_ns": cols["start"].astype(np.int64) + origin,
            "end_ns": cols["end"].astype(np.int64) + origin,
            "correlation": cols["corr"].astype(np.int64),
            "external_id": np.full(n, -1, np.int64),
        }
    )


def _device_keys(cols: dict[str, np.ndarray], n_gpu: int, kept: np.ndarray) -> list[tuple[int, int]]:
    """The (process, device) pairs with kept GPU events, sorted: one part each."""
    pairs = (
        pd.DataFrame({"p": cols["pid"][:n_gpu][kept[:n_gpu]], "d": cols["device"][:n_gpu][kept[:n_gpu]]})
        .drop_duplicates()
        .sort_values(["p", "d"])
    )
    return list(zip(pairs["p"].astype(int).tolist(), pairs["d"].astype(int).tolist()))


def _parts(
    table: pa.Table,
    cols: dict[str, np.ndarray],
    gpu: _GpuActivity,
    kept: np.ndarray,
    keys: list[tuple[int, int]],
    devices: dict[int, pa.Table],
) -> list[Part]:
    """One part per (process, device): its GPU rows and its process's host rows, with the
    collective and memcpy side tables (built once over the whole table, split per part)."""
    n_k, n_c, n_gpu = len(gpu.kernels), len(gpu.copies), gpu.n
    k_code = cols["kernel_code"]
    coll_of_name = np.array(
        [kernel_collective(s) if COMM_KERNEL.search(s) else "" for s in cols["kernel_names"]], object
    )
    coll_rows = np.flatnonzero(coll_of_name[k_code] != "") if n_k else np.empty(0, np.int64)
    coll_types = coll_of_name[k_code[coll_rows]] if n_k else np.empty(0, object)
    mem_rows = np.arange(n_k, n_k + n_c)
    mem_kind = (
        np.array([COPY_KIND.get(int(k), "other") for k in cols["copy_kinds"].tolist()], object)[cols["copy_code"]]
        if n_c
        else np.empty(0, object)
    )
    mem_bytes = _ints(gpu.copies["bytes"])
    g_pid, gdev, host_pid = cols["pid"][:n_gpu], cols["device"][:n_gpu], cols["pid"][n_gpu:]
    parts: list[Part] = []
    for idx, (p, d) in enumerate(keys):
        rows = np.concatenate([np.flatnonzero((g_pid == p) & (gdev == d)), n_gpu + np.flatnonzero(host_pid == p)])
        rows = rows[kept[rows]]
        parts.append(
            Part(
                device=d,
                events=table.take(pa.array(rows)),
                collectives=_collectives(coll_rows, coll_types, rows),
                memcpy=_memcpy(mem_rows, mem_kind, mem_bytes, rows),
                local_index=idx,
                side={"devices": devices[d]} if d in devices else {},
            )
        )
    return parts


MAX_GPUS = 4096
"""At most this many rows of ``TARGET_INFO_GPU`` are read (a report describes its node's GPUs)."""


def _devices(db: _Db) -> dict[int, pa.Table]:
    """The ``devices`` table of each device id, from ``TARGET_INFO_GPU`` (name, compute capability,
    SMs, memory); none where the report lacks it. Devices are matched by ``id``, the CUPTI
    ``deviceId`` of the activity tables (``cuDevice`` where ``id`` is missing)."""
    if "TARGET_INFO_GPU" not in db.tables:
        return {}
    wanted = {"id": None, "cuDevice": None, "name": "", "computeMajor": None, "computeMinor": None}
    wanted |= {"smCount": None, "totalMemory": None, "threadsPerWarp": None}
    rows = db.read("TARGET_INFO_GPU", wanted, where=f"1 limit {MAX_GPUS}")
    out: dict[int, pa.Table] = {}
    for r in rows.itertuples(index=False):
        dev = r.id if isinstance(r.id, int) else r.cuDevice
        if not isinstance(dev, int) or isinstance(dev, bool) or not 0 <= dev < 2**31 or dev in out:
            continue
        name = r.name if isinstance(r.name, str) else ""
        major, minor = r.computeMajor, r.computeMinor
        cap = f"{major}.{minor}" if isinstance(major, int) and isinstance(minor, int) else ""
        out[dev] = device_row(dev, name, vendor_of(name, r.threadsPerWarp), cap, r.smCount, r.totalMemory)
    return out


def _nvtx(db: _Db) -> pd.DataFrame:
    """Terminated push/pop and start/end NVTX ranges: start, end, pid, tid, text."""
    cols = db.columns("NVTX_EVENTS")
    empty = pd.DataFrame(
        {
            "start": np.empty(0, np.int64),
            "end": np.empty(0, np.int64),
            "pid": np.empty(0, np.int64),
            "tid": np.empty(0, np.int64),
            "text": np.empty(0, object),
        }
    )
    if not cols or "start" not in cols or "end" not in cols:
        return empty
    types = dict(NVTX_RANGE_TYPES)
    if "ENUM_NSYS_EVENT_TYPE" in db.tables:
        types = {
            int(i): str(nm)
            for i, nm in db.con.execute("select id, name from ENUM_NSYS_EVENT_TYPE")
            if str(nm).endswith(("PushPopRange", "StartEndRange"))
        } or types
    where = "[end] is not null"
    if "eventType" in cols:
        where += f" and eventType in ({', '.join(str(t) for t in types)})"
    ev = db.read("NVTX_EVENTS", {"start": None, "end": None, "globalTid": 0, "text": None, "textId": None}, where=where)
    if not len(ev):
        return empty
    text = np.array(ev["text"].astype(object).to_numpy(), dtype=object)  # writable copy
    missing = pd.isna(text)
    if missing.any():
        ids = _ints(ev["textId"])
        strings = db.strings(np.unique(ids[missing]))
        text[missing] = [strings.get(int(i), "") for i in ids[missing].tolist()]
    pid, tid = split_gid(_ints(ev["globalTid"], 0))
    return pd.DataFrame(
        {
            "start": _times(ev["start"], _I64_MIN),
            "end": _times(ev["end"], _I64_MAX),
            "pid": pid,
            "tid": tid,
            "text": text,
        }
    )


def _renumber(rows_all: np.ndarray, part_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which of ``rows_all`` are in the part (rows sorted) and their positions in it."""
    order = np.argsort(part_rows, kind="stable")
    srt = part_rows[order]
    pos = np.searchsorted(srt, rows_all)
    pos = np.minimum(pos, max(len(srt) - 1, 0))
    ok = (srt[pos] == rows_all) if len(srt) else np.zeros(len(rows_all), bool)
    return ok, order[pos[ok]] if len(srt) else np.empty(0, np.int64)


def _collectives(rows: np.ndarray, types: np.ndarray, part_rows: np.ndarray) -> pa.Table:
    ok, pos = _renumber(rows, part_rows)
    return side_table(COLLECTIVE_SCHEMA, {"row": pos, "collective": types[ok].tolist()})


def _memcpy(rows: np.ndarray, kinds: np.ndarray, nbytes: np.ndarray, part_rows: np.ndarray) -> pa.Table:
    ok, pos = _renumber(rows, part_rows)
    return pa.table(
        {
            "row": pa.array(pos.astype(np.int64), pa.int64()),
            "copy_kind": pa.array(kinds[ok].tolist(), pa.string()).dictionary_encode(),
            "bytes": pa.array(nbytes[ok].astype(np.int64), pa.int64()),
        }
    ).cast(MEMCPY_SCHEMA)
