"""Stored per-partition result tables, so an unchanged job is not analysed twice.

``CACHE/results/<key>/`` holds one Arrow IPC file per table of one partition and
``entry.json`` (written last: the tables, their row counts and fingerprints). The key hashes
everything the tables depend on: the dtrace version, the analyses (names, declared columns,
and for users' own analyses everything their function depends on: :func:`function_identity`),
the settings (a class-map file by its content) and,
per part, its rank, device, format, time origin and the fingerprint of its input.

Stored results are data, never code (no pickle): on load every file must match its fingerprint,
every table must have its declared columns with their dtypes and only rows of the partition's
own (rank, device) parts, and the breakdown one row for each of them; anything else is
recomputed, with a note, never an error, and the damaged entry is replaced. File names are made here from table names, never read from disk,
and links are not followed.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
import os
import shutil
import stat
import sys
import sysconfig
import tempfile
import threading  # noqa: F401 - used in a docstring example
import time
import types
from typing import Any, Sequence

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa

from .._version import __version__
from ..analyses import Analysis
from ..core.constants import MANIFEST_MAX_BYTES
from ..core.dtypes import conform, dtype_is
from ..core.fileio import real_folder
from ..core.records import StoredTable, StoreEntry, convert
from ..core.spill import ipc_options
from ..ingest.cache import _NOFOLLOW, fingerprint_bytes, read_file
from ..ingest.ranks import PartSpec
from ..knowledge.hardware import spec_identity
from ..options import Options
from .layout import PartitionSpec

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
        real_folder(d)
        return d if stat.S_ISDIR(os.lstat(d).st_mode) else None
    except OSError:
        return None


class _Unkeyable(Exception):
    """A value an analysis depends on that cannot be hashed deterministically."""


# code installed with Python or in its site-packages is a library: identified by its name (a
# changed library version does not invalidate stored results; --recompute does)
_LIBRARY_DIRS = tuple(
    sorted(
        {
            os.path.realpath(p) + os.sep
            for k, p in sysconfig.get_paths().items()
            if k in ("stdlib", "platstdlib", "purelib", "platlib")
        }
    )
)
_PLAIN = (type(None), bool, int, float, complex, str, bytes)


def _is_library(filename: str | None, module: str | None) -> bool:
    """Whether code lives in dtrace, in Python's own library or in an installed package (else it
    is the user's own code, whose dependencies are hashed)."""
    if module == "__main__" or (filename or "").startswith("<"):  # a script, or code typed or exec'd
        return False
    if module is not None and (module == "builtins" or module.split(".")[0] == "dtrace"):
        return True
    if not filename:  # compiled into the interpreter
        return True
    return os.path.realpath(filename).startswith(_LIBRARY_DIRS)


def _module_file(module: str | None) -> str | None:
    return getattr(sys.modules.get(module or ""), "__file__", None)


def function_identity(func: Any) -> str | None:
    """A digest of everything a user's analysis function depends on, or None when some of it
    cannot be hashed deterministically (then its results are never reused).

    Covered: its code (bytecode, constants, nested functions), its default and keyword-only
    default arguments, the contents of its closure cells, and the module globals its code names
    when they are plain data (numbers, strings, bytes, containers of them, numpy arrays, pandas
    frames, enums, dataclass instances) — recursively for the user's own functions, classes and
    modules it refers to, and through ``functools.partial`` and bound methods. Functions,
    classes and modules of dtrace, Python's library and installed packages are identified by
    their names. Anything else (an open file, an arbitrary object) makes the function unkeyable.

    Examples
    --------
    >>> scale = 2
    >>> f = lambda x: x * scale
    >>> a = function_identity(f); scale = 3; a == function_identity(f)
    False
    >>> function_identity(lambda x, lock=threading.Lock(): x) is None  # state of no value
    True
    """
    h = hashlib.blake2b(digest_size=20)
    try:
        _feed(h, func, set())
    except (_Unkeyable, RecursionError):
        return None
    return h.hexdigest()


def _feed(h: Any, v: Any, seen: set[int], names: frozenset[str] = frozenset()) -> None:
    """Hash ``v`` into ``h`` (see :func:`function_identity`); ``names``: the attribute names the
    referring code uses (for a user module: which of its attributes it depends on)."""
    t = type(v)
    if _feed_atom(h, v, t):
        return
    if id(v) in seen:  # a cycle (a function calling itself, a list holding itself)
        h.update(b"cycle;")
        return
    seen = seen | {id(v)}
    if not (_feed_data(h, v, t, seen) or _feed_code_of(h, v, seen, names) or _feed_other(h, v, t, seen)):
        raise _Unkeyable(repr(t))


def _feed_atom(h: Any, v: Any, t: type) -> bool:
    """Hash a plain value, an enum member or a NumPy scalar; whether ``v`` was one."""
    if t in _PLAIN:
        h.update(f"{t.__name__}:{v!r};".encode())
    elif isinstance(v, enum.Enum):
        h.update(f"enum:{t.__module__}.{t.__qualname__}.{v.name};".encode())
    elif isinstance(v, np.generic):
        if v.dtype.kind == "O":
            raise _Unkeyable(repr(t))
        h.update(f"np:{v.dtype.str}:".encode() + v.tobytes())
    else:
        return False
    return True


def _feed_data(h: Any, v: Any, t: type, seen: set[int]) -> bool:
    """Hash a container, an array or a pandas object; whether ``v`` was one."""
    if isinstance(v, (tuple, list)):
        h.update(f"{t.__name__}[{len(v)}](".encode())
        for x in v:
            _feed(h, x, seen)
        h.update(b")")
    elif isinstance(v, (set, frozenset)):
        h.update(f"{t.__name__}[{len(v)}](".encode())
        for d in sorted(_digest(x, seen) for x in v):  # iteration order of a set is not stable
            h.update(d)
        h.update(b")")
    elif isinstance(v, dict):
        h.update(f"dict[{len(v)}](".encode())
        for k, x in v.items():
            _feed(h, k, seen)
            _feed(h, x, seen)
        h.update(b")")
    elif isinstance(v, np.ndarray):
        if v.dtype.hasobject:
            _feed(h, v.tolist(), seen)
        else:
            h.update(f"ndarray:{v.dtype.str}:{v.shape};".encode() + np.ascontiguousarray(v).tobytes())
    elif isinstance(v, (pd.DataFrame, pd.Series, pd.Index)):
        try:
            hashed = pd.util.hash_pandas_object(v, index=not isinstance(v, pd.Index)).to_numpy()
        except TypeError as exc:
            raise _Unkeyable(repr(t)) from exc
        frame = v.to_frame() if isinstance(v, (pd.Series, pd.Index)) else v
        h.update(f"pandas:{t.__name__}:{list(map(str, frame.columns))}:{list(map(str, frame.dtypes))};".encode())
        h.update(hashed.tobytes())
    else:
        return False
    return True


def _feed_code_of(h: Any, v: Any, seen: set[int], names: frozenset[str]) -> bool:
    """Hash a function, method, partial, module or class (the user's: what its code uses);
    whether ``v`` was one."""
    if isinstance(v, types.FunctionType):
        _feed_function(h, v, seen)
    elif isinstance(v, types.MethodType):
        h.update(b"method:")
        _feed(h, v.__func__, seen)
        _feed(h, v.__self__, seen)
    elif isinstance(v, functools.partial):
        h.update(b"partial:")
        for x in (v.func, v.args, v.keywords):
            _feed(h, x, seen)
    elif isinstance(v, types.ModuleType):
        _feed_module(h, v, seen, names)
    elif isinstance(v, type):
        _feed_class(h, v, seen)
    else:
        return False
    return True


def _feed_module(h: Any, v: types.ModuleType, seen: set[int], names: frozenset[str]) -> None:
    """Hash a module by name; the user's module: also the attributes the code uses of it."""
    h.update(f"module:{v.__name__};".encode())
    if not _is_library(getattr(v, "__file__", None), v.__name__):  # the user's module: what the code uses of it
        for n in sorted(names):
            if n in vars(v):
                h.update(f"attr:{n}=".encode())
                _feed(h, vars(v)[n], seen)


def _feed_class(h: Any, v: type, seen: set[int]) -> None:
    """Hash a class by name; the user's class: also its methods and class attributes."""
    h.update(f"class:{v.__module__}.{v.__qualname__};".encode())
    if not _is_library(_module_file(v.__module__), v.__module__):  # the user's class: its methods and class attributes
        for n, x in sorted(vars(v).items()):
            if not (n.startswith("__") and n.endswith("__")) or n in ("__init__", "__call__"):
                h.update(f"attr:{n}=".encode())
                _feed(h, x.__func__ if isinstance(x, (staticmethod, classmethod)) else x, seen)


def _feed_other(h: Any, v: Any, t: type, seen: set[int]) -> bool:
    """Hash a library callable (by name), a dataclass, an instance of the user's class or a
    property; whether ``v`` was one."""
    if (
        isinstance(v, (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodDescriptorType))
        or (callable(v) and _is_library(_module_file(getattr(v, "__module__", None)), getattr(v, "__module__", None)))
    ) and (qualname := getattr(v, "__qualname__", None) or getattr(v, "__name__", None)):
        h.update(f"library:{getattr(v, '__module__', None)}.{qualname};".encode())
    elif dataclasses.is_dataclass(v):
        h.update(f"dataclass:{t.__module__}.{t.__qualname__}(".encode())
        for f in dataclasses.fields(v):
            h.update(f"{f.name}=".encode())
            _feed(h, getattr(v, f.name), seen)
        h.update(b")")
    elif hasattr(v, "__dict__") and not _is_library(_module_file(t.__module__), t.__module__):
        h.update(b"object:")  # an instance of the user's own class: its class and its attributes
        _feed(h, t, seen)
        _feed(h, vars(v), seen)
    elif isinstance(v, property):
        for x in (v.fget, v.fset, v.fdel):
            _feed(h, x, seen)
    else:
        return False
    return True


def _feed_function(h: Any, func: types.FunctionType, seen: set[int]) -> None:
    code = func.__code__
    h.update(f"function:{func.__module__}.{func.__qualname__};".encode())
    if _is_library(code.co_filename, func.__module__):
        return  # dtrace's, Python's or an installed package's: its name identifies it
    names = _feed_code(h, code)
    _feed(h, func.__defaults__, seen)
    _feed(h, func.__kwdefaults__, seen)
    cells = func.__closure__ or ()
    for name, cell in zip(code.co_freevars, cells):
        h.update(f"cell:{name}=".encode())
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell (a name bound later)
            value = None
        _feed(h, value, seen, names)
    glob = func.__globals__
    for name in sorted(names):
        if name in glob:
            h.update(f"global:{name}=".encode())
            _feed(h, glob[name], seen, names)


def _feed_code(h: Any, code: types.CodeType) -> frozenset[str]:
    """Hash a code object (its nested ones included); the names it and they use."""
    h.update(code.co_code)
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _feed_code(h, c)
        else:
            h.update(f"{type(c).__name__}:{c!r};".encode())
    h.update(
        repr((code.co_names, code.co_varnames, code.co_freevars, code.co_argcount, code.co_kwonlyargcount)).encode()
    )
    return frozenset(names)


def _digest(v: Any, seen: set[int]) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    _feed(h, v, seen)
    return h.digest()


def _analysis_identity(a: Analysis) -> list[Any] | None:
    """What identifies an analysis's tables: its table, declared columns and function (None:
    it depends on something that cannot be hashed, so its results are never reused)."""
    func = function_identity(a.func)
    return None if func is None else [a.table, sorted(a.columns.items()), func]


def reusable(analyses: Sequence[Analysis]) -> list[Analysis]:
    """The analyses whose results can be stored and reused (see :func:`function_identity`)."""
    return [a for a in analyses if _analysis_identity(a) is not None]


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


def key(parts: PartitionSpec | Sequence[PartSpec], options: Options, analyses: Sequence[Analysis]) -> str | None:
    """The store key of the results of some parts (a store group, :func:`dtrace.partitions.layout.store_groups`);
    None when they cannot be keyed (a class map object that is neither a file nor JSON-able, an
    analysis that depends on a value that cannot be hashed: pass only the :func:`reusable` ones)."""
    return keys([parts.parts if isinstance(parts, PartitionSpec) else parts], options, analyses)[0]


def keys(groups: Sequence[Sequence[PartSpec]], options: Options, analyses: Sequence[Analysis]) -> list[str | None]:
    """The store key of each group of parts (see :func:`key`); the settings and the analyses
    are hashed once."""
    cm = _classmap_identity(options)
    analysed = [_analysis_identity(a) for a in analyses]
    if (options.classmap is not None and cm is None) or None in analysed:
        return [None] * len(groups)
    opts = options.to_json()
    opts["classmap"] = cm
    opts.pop("gpu_spec", None)  # read by a reducer only: per-partition results do not depend on it
    common = json.dumps(
        {"version": [__version__, STORE_VERSION], "analyses": analysed, "options": opts}, sort_keys=True, default=str
    )
    out: list[str | None] = []
    for parts in groups:
        ident = [[p.rank, p.device, p.format, p.base_ns, p.fingerprint, p.local_index] for p in parts]
        out.append(hashlib.sha256((common + json.dumps(ident, default=str)).encode()).hexdigest()[:32])
    return out


def run_key(
    inputs: Sequence[Sequence[Any]], options: Options, analyses: Sequence[Analysis], settings: dict[str, Any]
) -> str | None:
    """The key of a whole run's results: every input (path, size, mtime, fingerprint), the
    settings, the analyses and the dtrace version. Equal keys give equal results; None when an
    analysis depends on a value that cannot be hashed (such a run is never up to date)."""
    cm = _classmap_identity(options)
    analysed = [_analysis_identity(a) for a in analyses]
    if (options.classmap is not None and cm is None) or None in analysed:
        return None
    opts = options.to_json()
    opts["classmap"] = cm
    opts["gpu_spec"] = spec_identity(options.gpu_spec)  # a changed spec file changes the roofline
    ident = {
        "version": [__version__, STORE_VERSION],
        "options": opts,
        "settings": settings,
        "analyses": analysed,
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
    tables, note = load_arrow(store, key, analyses, parts)
    if tables is None:
        return None, note
    try:
        return frames(tables, analyses), None
    except (ValueError, TypeError, KeyError, pa.ArrowException) as exc:
        return None, discard(store, key, exc)


def frames(tables: dict[str, pa.Table], analyses: Sequence[Analysis]) -> dict[str, pd.DataFrame]:
    """Stored Arrow tables (of one entry, or of several concatenated) as pandas frames with
    their declared dtypes; a table without them raises ``ValueError``."""
    out = {}
    for a in analyses:
        df = tables[a.table].to_pandas()
        _check_dtypes(df, a)
        out[a.table] = conform(df, a.columns, a.table)
    return out


def discard(store: str, key: str, why: BaseException) -> str:
    """Remove the damaged entry ``key`` (see :func:`_discard`); the note that says so."""
    d = os.path.join(store, key)
    _discard(store, d)
    return f"stored results {d} are damaged ({why}); recomputing"


def load_arrow(
    store: str, key: str, analyses: Sequence[Analysis], parts: Sequence[tuple[int, int]] | None = None
) -> tuple[dict[str, pa.Table] | None, str | None]:
    """The stored tables of ``key`` as Arrow tables, each file checked against its fingerprint
    and row count and, with ``parts``, its rows against the parts (see :func:`load`); their
    dtypes are checked when they become frames (:func:`frames`)."""
    d = os.path.join(store, key)
    try:
        if not stat.S_ISDIR(os.lstat(d).st_mode):
            _discard(store, d)
            return None, f"stored results {d} are not a folder; recomputing"
        entry = convert(json.loads(read_file(os.path.join(d, ENTRY), MANIFEST_MAX_BYTES)), StoreEntry)
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        _discard(store, d)
        return None, f"stored results {d} are damaged ({exc}); recomputing"
    try:
        tables = {}
        for a in analyses:
            info = entry.tables[a.table]
            data = read_file(os.path.join(d, f"{a.table}.arrow"))
            if fingerprint_bytes(data) != info.fingerprint:
                raise ValueError(f"{a.table}.arrow does not match its fingerprint")
            t = pa.ipc.open_file(pa.BufferReader(data)).read_all()
            if t.num_rows != info.rows:
                raise ValueError(f"{a.table}.arrow has {t.num_rows} rows, not {info.rows}")
            if parts is not None:
                _check_parts(t, a.table, parts)
            tables[a.table] = t
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


def _check_parts(t: pa.Table, table: str, parts: Sequence[tuple[int, int]]) -> None:
    want = np.array(sorted(set(parts)), dtype=np.int64).reshape(-1, 2)
    got = np.stack(
        [t.column(c).to_numpy(zero_copy_only=False).astype(np.int64) for c in ("rank", "device")], axis=1
    ).reshape(-1, 2)
    codes = want[:, 0] << 32 | (want[:, 1] & 0xFFFFFFFF)
    found = got[:, 0] << 32 | (got[:, 1] & 0xFFFFFFFF)
    if not np.isin(found, codes).all():
        raise ValueError(f"{table} has rows of (rank, device) pairs that are not this partition's")
    if table == PER_PART_TABLE and (len(found) != len(codes) or not np.isin(codes, found).all()):
        raise ValueError(f"{table} does not have one row per (rank, device) of this partition")


def _check_dtypes(df: pd.DataFrame, a: Analysis) -> None:
    dtypes = dict(zip(df.columns, df.dtypes))
    for col, want in a.columns.items():
        if col not in dtypes:
            raise ValueError(f"{a.table}: column {col!r} missing")
        if len(df) and not dtype_is(dtypes[col], want):
            raise ValueError(f"{a.table}: column {col!r} is {dtypes[col]}, not {want}")


def _touch(path: str) -> None:
    try:
        os.utime(path, follow_symlinks=False)
    except OSError:
        pass


def save(store: str, key: str, tables: dict[str, pd.DataFrame | pa.Table]) -> str | None:
    """Store a store group's tables (frames, or Arrow tables made from them) under ``key``
    (atomically: a complete entry or none)."""
    try:
        os.makedirs(store, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=store)
    except OSError as exc:
        return f"cannot store results in {store}: {exc.strerror or exc}"
    try:
        listed: dict[str, StoredTable] = {}
        for name, df in tables.items():
            sink = pa.BufferOutputStream()
            t = df if isinstance(df, pa.Table) else pa.Table.from_pandas(df, preserve_index=False, nthreads=1)
            # lz4 (from 64 KB): names repeat across rows (transitions, kernels), ~10-30x smaller;
            # written twice and read back 2-3x as fast as zstd (which makes files 2-3x smaller still)
            with pa.ipc.new_file(sink, t.schema, options=ipc_options(t)) as w:
                w.write_table(t)
            data = sink.getvalue().to_pybytes()
            _write_new(os.path.join(tmp, f"{name}.arrow"), data)
            listed[name] = StoredTable(rows=t.num_rows, fingerprint=fingerprint_bytes(data))
        entry = StoreEntry(version=STORE_VERSION, key=key, tables=listed, created=time.time())
        _write_new(os.path.join(tmp, ENTRY), msgspec.json.encode(entry))
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
