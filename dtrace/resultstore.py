"""Stored per-partition result tables, so an unchanged job is not analysed twice.

``CACHE/results/<key>/`` holds one Arrow IPC file per table of one partition and
``entry.json`` (written last: the tables, their row counts and fingerprints). The key hashes
everything the tables depend on: the dtrace version, the analyses (names, declared columns,
and for users' own analyses their code), the settings (a class-map file by its content) and,
per part, its rank, device, format, time origin and the fingerprint of its input.

Stored results are data, never code (no pickle): on load every file must match its fingerprint,
every table must have its declared columns with their dtypes and only rows of the partition's
own (rank, device) parts, and the breakdown one row for each of them; anything else is
recomputed, with a note, never an error, and the damaged entry is replaced. File names are made here from table names, never read from disk,
and links are not followed.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import stat
import tempfile
import time
from typing import Any, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from ._version import __version__
from .analyses import Analysis, conform, has_dtype
from .cache import _NOFOLLOW, fingerprint_bytes, read_file
from .hardware import spec_identity
from .layout import PartitionSpec
from .options import Options

STORE_VERSION = 1
ENTRY = "entry.json"
MAX_ENTRIES = 256
PER_PART_TABLE = "breakdown"
"""The table with exactly one row per (rank, device) part of a partition."""


def store_dir(cache_dir: str) -> str:
    return os.path.join(cache_dir, "results")


def open_store(cache_dir: str) -> str | None:
    """The result store of ``cache_dir`` as a real folder (created if needed), or None when it
    cannot be (then nothing is stored). A link or a file where the store belongs is removed
    (the link, never its target): results are never read from, written to or pruned in a
    folder elsewhere."""
    d = store_dir(cache_dir)
    try:
        try:
            if not stat.S_ISDIR(os.lstat(d).st_mode):
                os.unlink(d)
        except FileNotFoundError:
            pass
        os.makedirs(d, exist_ok=True)
        return d if stat.S_ISDIR(os.lstat(d).st_mode) else None
    except OSError:
        return None


def _code_identity(func: Any) -> str:
    """What identifies an analysis function's behaviour: its module and name, and its code."""
    name = f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"
    if name.startswith("dtrace."):
        return name  # built in: the dtrace version covers its code
    try:
        src = inspect.getsource(func)
    except (OSError, TypeError):
        code = getattr(func, "__code__", None)
        src = repr((code.co_code, code.co_consts)) if code is not None else repr(func)
    return name + ":" + hashlib.sha1(src.encode()).hexdigest()


def _classmap_identity(options: Options) -> Any:
    cm = options.classmap
    if cm is None:
        return None
    if isinstance(cm, (str, os.PathLike)):
        try:
            return ["file", fingerprint_bytes(read_file(os.fspath(cm)))]
        except OSError:
            return None
    try:
        return ["map", json.dumps(cm, sort_keys=True)]
    except (TypeError, ValueError):
        return None


def key(partition: PartitionSpec, options: Options, analyses: Sequence[Analysis]) -> str | None:
    """The store key of a partition's results; None when they cannot be keyed (a class map
    object that is neither a file nor JSON-able)."""
    cm = _classmap_identity(options)
    if options.classmap is not None and cm is None:
        return None
    opts = options.to_json()
    opts["classmap"] = cm
    opts.pop("gpu_spec", None)  # read by a reducer only: per-partition results do not depend on it
    ident = {
        "version": [__version__, STORE_VERSION],
        "analyses": [[a.table, sorted(a.columns.items()), _code_identity(a.func)] for a in analyses],
        "options": opts,
        "parts": [[p.rank, p.device, p.format, p.base_ns, p.fingerprint, p.local_index] for p in partition.parts],
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:32]


def run_key(
    inputs: Sequence[Sequence[Any]], options: Options, analyses: Sequence[Analysis], settings: dict[str, Any]
) -> str | None:
    """The key of a whole run's results: every input (path, size, mtime, fingerprint), the
    settings, the analyses and the dtrace version. Equal keys give equal results."""
    cm = _classmap_identity(options)
    if options.classmap is not None and cm is None:
        return None
    opts = options.to_json()
    opts["classmap"] = cm
    opts["gpu_spec"] = spec_identity(options.gpu_spec)  # a changed spec file changes the roofline
    ident = {
        "version": [__version__, STORE_VERSION],
        "options": opts,
        "settings": settings,
        "analyses": [[a.table, sorted(a.columns.items()), _code_identity(a.func)] for a in analyses],
        "inputs": sorted([list(i) for i in inputs]),
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:32]


def load(
    store: str, key: str, analyses: Sequence[Analysis], parts: Sequence[tuple[int, int]] | None = None
) -> tuple[dict[str, pd.DataFrame] | None, str | None]:
    """The stored tables of ``key`` if the entry is intact, else ``(None, note)``.

    ``parts``: the partition's (rank, device) pairs; then every table's rows must be theirs and
    the :data:`PER_PART_TABLE` must hold one row for each (no part dropped or added).
    """
    d = os.path.join(store, key)
    try:
        if not stat.S_ISDIR(os.lstat(d).st_mode):
            _discard(store, d)
            return None, f"stored results {d} are not a folder; recomputing"
        entry = json.loads(read_file(os.path.join(d, ENTRY)))
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        _discard(store, d)
        return None, f"stored results {d} are damaged ({exc}); recomputing"
    try:
        tables = {}
        listed = entry["tables"]
        for a in analyses:
            info = listed[a.table]
            data = read_file(os.path.join(d, f"{a.table}.arrow"))
            if fingerprint_bytes(data) != info["fingerprint"]:
                raise ValueError(f"{a.table}.arrow does not match its fingerprint")
            t = pa.ipc.open_file(pa.BufferReader(data)).read_all()
            if t.num_rows != info["rows"]:
                raise ValueError(f"{a.table}.arrow has {t.num_rows} rows, not {info['rows']}")
            df = t.to_pandas()
            _check_dtypes(df, a)
            if parts is not None:
                _check_parts(df, a.table, parts)
            tables[a.table] = conform(df, a.columns, a.table)
    except (OSError, ValueError, TypeError, KeyError, pa.ArrowException) as exc:
        _discard(store, d)
        return None, f"stored results {d} are damaged ({exc}); recomputing"
    _touch(os.path.join(d, ENTRY))
    return tables, None


def _discard(store: str, d: str) -> None:
    """Remove a damaged entry so that the recomputed results can be stored in its place: it is
    first renamed away (atomic; a link is renamed, never followed), then deleted."""
    try:
        gone = tempfile.mkdtemp(prefix=".tmp-", dir=store)
    except OSError:
        return
    moved = os.path.join(gone, "entry")
    try:
        os.replace(d, moved)
        if not stat.S_ISDIR(os.lstat(moved).st_mode):
            os.unlink(moved)
    except OSError:
        pass
    shutil.rmtree(gone, ignore_errors=True)


def _check_parts(df: pd.DataFrame, table: str, parts: Sequence[tuple[int, int]]) -> None:
    want = np.array(sorted(set(parts)), dtype=np.int64).reshape(-1, 2)
    got = np.stack([df["rank"].to_numpy(np.int64), df["device"].to_numpy(np.int64)], axis=1)
    codes = want[:, 0] << 32 | (want[:, 1] & 0xFFFFFFFF)
    found = got[:, 0] << 32 | (got[:, 1] & 0xFFFFFFFF)
    if not np.isin(found, codes).all():
        raise ValueError(f"{table} has rows of (rank, device) pairs that are not this partition's")
    if table == PER_PART_TABLE and (len(found) != len(codes) or not np.isin(codes, found).all()):
        raise ValueError(f"{table} does not have one row per (rank, device) of this partition")


def _check_dtypes(df: pd.DataFrame, a: Analysis) -> None:
    for col, want in a.columns.items():
        if col not in df.columns:
            raise ValueError(f"{a.table}: column {col!r} missing")
        if len(df) and not has_dtype(df[col], want):
            raise ValueError(f"{a.table}: column {col!r} is {df[col].dtype}, not {want}")


def _touch(path: str) -> None:
    try:
        os.utime(path, follow_symlinks=False)
    except OSError:
        pass


def save(store: str, key: str, tables: dict[str, pd.DataFrame]) -> str | None:
    """Store a partition's tables under ``key`` (atomically: a complete entry or none)."""
    try:
        os.makedirs(store, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=store)
    except OSError as exc:
        return f"cannot store results in {store}: {exc.strerror or exc}"
    try:
        listed = {}
        for name, df in tables.items():
            sink = pa.BufferOutputStream()
            t = pa.Table.from_pandas(df, preserve_index=False)
            # zstd: names repeat across rows (transitions, kernels), ~100x smaller, read back in ms
            with pa.ipc.new_file(sink, t.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
                w.write_table(t)
            data = sink.getvalue().to_pybytes()
            _write_new(os.path.join(tmp, f"{name}.arrow"), data)
            listed[name] = {"rows": t.num_rows, "fingerprint": fingerprint_bytes(data)}
        _write_new(
            os.path.join(tmp, ENTRY),
            json.dumps({"version": STORE_VERSION, "key": key, "tables": listed, "created": time.time()}).encode(),
        )
        try:
            os.replace(tmp, os.path.join(store, key))
        except OSError:  # another run stored the same key meanwhile: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
    except (OSError, pa.ArrowException) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        return f"cannot store results in {store}: {getattr(exc, 'strerror', None) or exc}"
    return None


def _write_new(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def prune(store: str, keep: set[str], max_entries: int = MAX_ENTRIES) -> None:
    """Remove the least recently used entries beyond ``max_entries`` (never those in ``keep``)
    and unfinished temporary folders of crashed runs older than an hour."""
    try:
        names = os.listdir(store)
    except OSError:
        return
    now = time.time()
    entries = []
    for n in names:
        p = os.path.join(store, n)
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if n.startswith(".tmp-"):
            if now - st.st_mtime > 3600:
                shutil.rmtree(p, ignore_errors=True)
            continue
        if n in keep:
            continue
        try:
            used = os.lstat(os.path.join(p, ENTRY)).st_mtime
        except OSError:
            used = st.st_mtime
        entries.append((used, p))
    extra = len(entries) + len(keep) - max(max_entries, len(keep))
    for _, p in sorted(entries)[: max(extra, 0)]:
        if os.path.islink(p):
            os.unlink(p)
        else:
            shutil.rmtree(p, ignore_errors=True)
