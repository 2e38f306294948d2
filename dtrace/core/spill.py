"""A run's per-rank tables kept where they were computed: the spill folder.

A table that no cross-rank reducer reads (``queue_timeline``, ``launches``, ``transitions``, ...)
never travels to the client as a frame. Each analyse task writes its partition's rows of it to
the run's spill folder, one Arrow IPC file per (partition, table) (:func:`write`), and hands back
only the file names (:class:`Spilled`). The client streams the files of a table, in partition
(rank) order, into the results file one row group each (:func:`dtrace.results.StagedResults.stage_parts`),
so it holds one partition's rows of one table at a time, whatever the job's size.

The spill folder is ``CACHE/spill/<run id>/``: the ingest cache is where the workers already write
what the client later reads (a cluster's workers share it), and it is on the results folder's file
system by default. A task that is run again (its worker died, its partition was split) writes new
files under new names; the client reads only the files of the results it kept, and the folder goes
with the run (:func:`remove`). While its run lives, the folder holds a lock (``flock`` on
``.lock``); a run that starts removes the spill folders whose lock is free (their run crashed).
"""

from __future__ import annotations

import os
import shutil
import uuid

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX: a crashed run's folder stays
    fcntl = None  # type: ignore[assignment]
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa

SPILL = "spill"

_LZ4 = pa.ipc.IpcWriteOptions(compression="lz4", use_threads=False)
_PLAIN = pa.ipc.IpcWriteOptions(use_threads=False)
COMPRESS_FROM_BYTES = 64 << 10
"""Arrow IPC files of per-rank tables are lz4-compressed from this size of their table on: a
smaller one (most tables of a partition: a row per rank, per stream or per kernel name) is
written as it is, its file no larger (the footer and schema dominate it) and read back in half
the time — the client reads one file per partition and table."""


def ipc_options(table: pa.Table) -> pa.ipc.IpcWriteOptions:
    """How to write ``table`` as an Arrow IPC file: lz4 from :data:`COMPRESS_FROM_BYTES` on."""
    return _LZ4 if table.nbytes >= COMPRESS_FROM_BYTES else _PLAIN


@dataclass(frozen=True)
class Spilled:
    """One partition's rows of one table, in the spill folder."""

    path: str
    rows: int
    bytes: int = 0  # the file's size: what the client reads of it, at most


LOCK = ".lock"
_locks: dict[str, int] = {}  # this process's spill folders -> their lock's descriptor


def make(cache_dir: str) -> str:
    """A new spill folder for one run under ``cache_dir``, locked while the run lives; the folders
    of runs that crashed (their lock free) are removed first."""
    root = os.path.join(cache_dir, SPILL)
    _remove_abandoned(root)
    path = os.path.join(root, uuid.uuid4().hex)
    os.makedirs(path)
    if fcntl is not None:
        fd = os.open(os.path.join(path, LOCK), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        _locks[path] = fd
    return path


def _remove_abandoned(root: str) -> None:
    """Remove the spill folders under ``root`` whose lock no live run holds."""
    if fcntl is None:
        return
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for e in entries:
        if e.is_symlink() or not e.is_dir(follow_symlinks=False):
            continue
        try:
            fd = os.open(os.path.join(e.path, LOCK), os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue  # no lock (yet): a run starting now, or not ours
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a live run holds it
        finally:
            os.close(fd)
        shutil.rmtree(e.path, ignore_errors=True)


def write(folder: str, index: int, tables: Mapping[str, pd.DataFrame | pa.Table]) -> dict[str, Spilled]:
    """Write each non-empty table of partition ``index`` into ``folder`` (a frame, or the Arrow
    table made of it without its index); where each went. An empty table is not written (the
    client makes the table's empty frame when no partition has rows)."""
    out: dict[str, Spilled] = {}
    tag = uuid.uuid4().hex[:12]  # a task run again writes new files: never one another task reads
    for name, df in tables.items():
        if not len(df):
            continue
        t = df if isinstance(df, pa.Table) else pa.Table.from_pandas(df, preserve_index=False, nthreads=1)
        path = os.path.join(folder, f"{name}-{index:06d}-{tag}.arrow")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, t.schema, options=ipc_options(t)) as w:
            w.write_table(t)
        out[name] = Spilled(path, t.num_rows, os.path.getsize(path))
    return out


def read(part: Spilled) -> pa.Table:
    """The rows of one spilled partition of a table."""
    with pa.OSFile(part.path, "rb") as f:
        return pa.ipc.open_file(f).read_all()


def read_schema(part: Spilled) -> pa.Schema:
    """The schema of a spilled partition of a table (its file's footer only)."""
    with pa.OSFile(part.path, "rb") as f:
        return pa.ipc.open_file(f).schema


def read_all(parts: Sequence[Spilled]) -> pa.Table | None:
    """The rows of every spilled partition of a table as one Arrow table (None: no parts), in
    the partitions' :func:`unified_schema`."""
    tables = [read(p) for p in parts]
    if not tables:
        return None
    schema = unified_schema([t.schema for t in tables])
    return pa.concat_tables([conformed(t, schema) for t in tables])


def unified_schema(schemas: Sequence[pa.Schema]) -> pa.Schema:
    """One schema for the partitions of a table: each column's type where it is not null (a
    column null in one partition, text in another), with the pandas metadata of a partition that
    has every column's type."""
    if all(s.equals(schemas[0]) for s in schemas):
        return schemas[0]
    typed = pa.unify_schemas([s.remove_metadata() for s in schemas], promote_options="permissive")
    full = [s for s in schemas if not any(pa.types.is_null(f.type) for f in s)]
    return typed.with_metadata((full or schemas)[0].metadata)


def conformed(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """``t`` in ``schema`` (its types cast, its metadata replaced)."""
    return t.cast(schema) if not t.schema.equals(schema) else t.replace_schema_metadata(schema.metadata)


def remove(folder: str | None) -> None:
    """Remove a run's spill folder (and the ``spill`` folder above it once it is empty)."""
    if folder is None:
        return
    fd = _locks.pop(folder, None)
    shutil.rmtree(folder, ignore_errors=True)
    if fd is not None:
        os.close(fd)
    try:
        os.rmdir(os.path.dirname(folder))
    except OSError:
        pass
