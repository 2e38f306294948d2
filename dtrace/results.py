"""The results contract (docs/semantics.md, "Results tables"): ``OUT/<table>.parquet`` + ``OUT/manifest.json``.

Writing is atomic per run: every table is first written to ``OUT/.staging-<run>/`` with the
run id in its Parquet metadata; the old manifest is removed, the tables are renamed into
place, and the new manifest is renamed in last. A crash leaves either the previous complete
results or no manifest at all (``load`` then says the results are incomplete) — never a
manifest describing half-written tables.

Results folders are shared and hand-edited, so nothing read from a manifest is trusted:

- table names are identifiers (:data:`TABLE_NAME`; they are also ``Results`` attributes), and
  a table's file must resolve inside OUT, or :class:`~dtrace.errors.ResultsError` is raised;
- a table the previous run wrote and this one does not is deleted only if its name is valid,
  it is a regular file (not a link) directly in OUT, and its Parquet metadata carries the run
  id of the manifest that lists it;
- renames replace a table file or manifest that is a symbolic link with a regular file, never
  writing through the link;
- a staging folder holds a lock (``flock``) while its run writes; the next write removes the
  staging folders whose lock is free (their run crashed) and leaves those of live runs, and
  anything named ``.staging-*`` that dtrace did not make (a file, a link, a folder holding
  other files).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tempfile
import time
import uuid
import weakref
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import fields
from typing import Any, Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX: staging folders are cleaned by age alone
    fcntl = None  # type: ignore[assignment]

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from .core import spill
from .core.constants import MANIFEST_MAX_BYTES, TABLE_MAX_BYTES
from .core.fileio import open_regular, read_regular
from .core.records import Manifest, RecordError, convert
from .core.spill import Spilled
from .errors import OutputError, ResultsError, UsageError
from .ingest.remote import is_url
from .ingest.unchanged import tables_intact
from .options import Options

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
CACHE = "cache"
#: What a table name must look like (the results contract's names are identifiers).
TABLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
STAGING_PREFIX = ".staging-"
PROBE_PREFIX = ".dtrace-probe-"
#: The files a staging folder holds besides its lock and manifest (a table; a table being written).
TABLE_FILE = re.compile(r"[A-Za-z][A-Za-z0-9_]*\.parquet(\.tmp)?")
_LOCK = ".lock"
#: A staging folder without a lock file younger than this may be a run that is just starting.
_STAGING_GRACE_S = 600.0 if fcntl is not None else 86400.0


class Results:
    """The tables of one analysis, as pandas DataFrames (``results.breakdown``, ...).

    Tables load lazily from disk for :func:`load`; :attr:`manifest` describes the run:
    version, options, and every input with its rank(s), format, status and error message (the
    JSON object, as written); :attr:`record` is the same manifest typed.
    """

    def __init__(
        self,
        tables: dict[str, pd.DataFrame] | None = None,
        manifest: dict[str, Any] | None = None,
        path: str | None = None,
        ranks: Iterable[int] | None = None,
    ) -> None:
        self._tables = dict(tables or {})
        self.manifest = manifest or {}
        self.path = path
        self._only_ranks = None if ranks is None else frozenset(int(r) for r in ranks)

    # -- access -------------------------------------------------------------------------
    @property
    def manifest(self) -> dict[str, Any]:
        return self._manifest

    @manifest.setter
    def manifest(self, value: dict[str, Any]) -> None:
        self._manifest = value
        self._record: Manifest | None = None

    @property
    def record(self) -> Manifest:
        """The manifest as a typed :class:`~dtrace.core.records.Manifest` (fields dtrace does not
        declare there stay in :attr:`manifest` only). Values are taken as they are written
        (a NumPy number as the number). Typed once, at the first use (a manifest of thousands of
        inputs takes tens of ms): a change made to :attr:`manifest` in place after that is not
        seen here; assigning a new manifest is."""
        if self._record is None:
            plain = msgspec.to_builtins(self.manifest, enc_hook=_plain)
            where = os.path.join(self.path, MANIFEST) if self.path else "the results' manifest (in memory)"
            self._record = check_manifest(plain, where, written=self.path is not None)
        return self._record

    @property
    def table_names(self) -> list[str]:
        return list(self.manifest.get("tables", self._tables))

    def table(self, name: str, ranks: Iterable[int] | None = None) -> pd.DataFrame:
        """Table ``name``; with ``ranks`` (or the ``ranks`` the results were loaded with), only the
        rows of those ranks of a table with a ``rank`` column, read from disk without the row
        groups of other ranks (a table across ranks is whole)."""
        want = self._only_ranks if ranks is None else frozenset(int(r) for r in ranks)
        if name not in self._tables or (ranks is not None and self.path is not None):
            if name in self.failed_tables:
                raise KeyError(f"no table {name!r}: {self.failed_tables[name]}")
            if self.path is None or name not in self.table_names:
                raise KeyError(f"no table {name!r}; tables: {', '.join(self.table_names)}")
            df = _read_table(table_path(self.path, name), self.manifest.get("run_id"), want)
            if ranks is not None:
                return df  # a slice asked for here: not kept as the table
            self._tables[name] = df
        df = self._tables[name]
        if want is not None and self.path is None and "rank" in df.columns:
            return df.loc[df["rank"].isin(want).to_numpy()].reset_index(drop=True)
        return df

    def __getattr__(self, name: str) -> pd.DataFrame:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self.table(name)
        except KeyError as exc:
            raise AttributeError(str(exc)) from None

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self.table(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.table_names)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.table_names))

    @property
    def inputs(self) -> pd.DataFrame:
        """One row per input: path, format, ranks, status, error."""
        return pd.DataFrame(self.manifest.get("inputs", []))

    @property
    def errors(self) -> list[str]:
        return [i["error"] for i in self.manifest.get("inputs", []) if i.get("status") == "error"]

    @property
    def failed_tables(self) -> dict[str, str]:
        """Your own analyses that failed: table name → one-line error (their tables are absent)."""
        failed = self.manifest.get("failed_tables")
        return dict(failed) if isinstance(failed, dict) else {}

    @property
    def ok(self) -> bool:
        """Every input analysed and every table computed."""
        return not self.errors and not self.failed_tables

    def __repr__(self) -> str:
        n_ok = sum(1 for i in self.manifest.get("inputs", []) if i.get("status") == "ok")
        return (
            f"<dtrace.Results {self.path or '(in memory)'}: {n_ok} inputs ok, {len(self.errors)} failed; "
            f"tables: {', '.join(self.table_names)}"
            + (f"; failed tables: {', '.join(self.failed_tables)}" if self.failed_tables else "")
            + ">"
        )


def _plain(v: object) -> object:
    """A value the manifest's JSON holds for ``v``: a NumPy scalar's number, else its text
    (what :func:`write_results` writes)."""
    return v.item() if isinstance(v, np.generic) else str(v)


def cache_of(out: str | os.PathLike[str]) -> str:
    """The ingest cache of the results folder ``out``: ``OUT/cache``, always (for results on an
    object store, the local cache of :func:`dtrace.ingest.remote.default_cache`).

    The manifest's ``cache`` field only records where the run's cache was; it is never read as a
    path (a hand-edited or copied manifest could point anywhere). The cache of a run made with
    ``--cache DIR`` is read by passing ``DIR`` again (``cache=DIR``, ``--cache DIR``).

    Examples
    --------
    >>> cache_of("run42/results")
    'run42/results/cache'
    """
    if is_url(os.fspath(out)):  # results on an object store: a local cache of their own
        from .ingest.remote import default_cache  # noqa: PLC0415

        return default_cache(os.fspath(out))
    return os.path.join(os.fspath(out), CACHE)


def table_path(out: str, name: object) -> str:
    """``OUT/<name>.parquet`` for a valid table name whose file resolves inside ``OUT``.

    Raises
    ------
    ResultsError
        The name is not an identifier (``../x``, ``/abs/x``), or the file is a link that
        leads out of ``OUT``.
    """
    if not isinstance(name, str) or not TABLE_NAME.fullmatch(name):
        raise ResultsError(
            f"{os.path.join(out, MANIFEST)}: invalid table name {name!r} (table names are "
            "identifiers: letters, digits and _); the manifest was edited or damaged"
        )
    path = os.path.join(out, f"{name}.parquet")
    root = os.path.realpath(out)
    real = os.path.realpath(path)
    if os.path.commonpath([root, real]) != root:
        raise ResultsError(f"{path}: resolves to {real}, outside the results directory; refusing to read it")
    return path


def _read_table(path: str, run_id: str | None, ranks: frozenset[int] | None = None) -> pd.DataFrame:
    try:
        if ranks is None:
            # a FIFO planted in OUT is refused, never waited on; parsed from memory (faster than a
            # Python file object, as fast as a path); not the dataset API: ~1 ms less per table
            t = pq.ParquetFile(pa.BufferReader(read_regular(path, limit=TABLE_MAX_BYTES))).read(use_threads=False)
        else:
            t = _read_ranks(path, ranks)
    except (OSError, pa.ArrowInvalid) as exc:
        raise ResultsError(f"{path}: cannot read results table: {exc}") from None
    md = t.schema.metadata or {}
    got = md.get(b"dtrace.run_id", b"").decode()
    if run_id and got != run_id:
        raise ResultsError(
            f"{path}: table is from another run ({got}) than the manifest ({run_id}); "
            "the results directory is inconsistent, re-run dtrace analyze"
        )
    return t.to_pandas()


def _read_ranks(path: str, ranks: frozenset[int]) -> pa.Table:
    """The rows of ``ranks`` of a table file, reading only the row groups whose ``rank``
    statistics admit one of them (a table written from partitions has a row group per rank
    range); a table without a rank column is read whole."""
    with open_regular(path) as f:
        pf = pq.ParquetFile(f)
        names = pf.schema_arrow.names
        if "rank" not in names:
            return pf.read(use_threads=False)
        col = names.index("rank")
        wanted = np.array(sorted(ranks), np.int64)
        groups = []
        for i in range(pf.metadata.num_row_groups):
            st = pf.metadata.row_group(i).column(col).statistics
            if st is None or not st.has_min_max or _any_between(wanted, st.min, st.max):
                groups.append(i)
        t = pf.read_row_groups(groups, use_threads=False) if groups else pf.schema_arrow.empty_table()
    keep = np.isin(t.column("rank").to_numpy(zero_copy_only=False), wanted)
    return t.filter(pa.array(keep))


def _any_between(values: np.ndarray, lo: int, hi: int) -> bool:
    """Whether a value of the sorted ``values`` lies in ``[lo, hi]``."""
    i = int(np.searchsorted(values, lo))
    return i < len(values) and int(values[i]) <= hi


def check_results_dir(out: str) -> None:
    """Make sure results can be written to ``out`` before any work: create it if needed and
    write (and remove) a probe file in it.

    Raises
    ------
    OutputError
        One line naming the path: ``out`` is a file, ``out/manifest.json`` is a folder, or
        ``out`` cannot be created or written (read-only, no permission, disk full).
    """
    if os.path.lexists(out) and not os.path.isdir(out):
        raise OutputError(f"{out}: exists and is not a folder; cannot write results there")
    manifest = os.path.join(out, MANIFEST)
    if os.path.isdir(manifest) and not os.path.islink(manifest):
        raise OutputError(f"{manifest} is a folder, not a results manifest; remove it or write the results elsewhere")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{out}: cannot create the results folder: {exc.strerror or exc}") from None
    try:
        fd, probe = tempfile.mkstemp(prefix=PROBE_PREFIX, dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{out}: cannot write results there: {exc.strerror or exc}") from None


def write_results(out: str, tables: dict[str, pd.DataFrame], manifest: dict[str, Any]) -> Results:
    """Write ``tables`` and ``manifest`` to ``out`` atomically (see module docstring).

    Raises
    ------
    ResultsError
        ``out`` cannot be written (a file, read-only, disk full, a folder named
        ``manifest.json``); the previous results are left as they were.
    """
    with StagedResults(out) as staged:
        return staged.commit(tables, manifest)


class StagedResults:
    """A run's results on their way into ``out``: tables are staged as soon as they are final,
    and :meth:`commit` puts the whole run in place (:func:`write_results` is both at once).

    :meth:`stage` converts a table to Arrow in the calling thread (pandas is not read from two
    threads) and leaves the compression and the writing, which run without the GIL, to a
    background thread: the tables the reducers do not change are written while the reducers run
    (``dtrace analyze``'s client is otherwise alone on the machine then). A table staged and then
    replaced (another object under its name at :meth:`commit`) is staged again; one not named at
    :meth:`commit` is not committed. The staging does not hold the frames it writes. Leaving the
    ``with`` block without a commit removes the staging folder; nothing in ``out`` changed.

    Raises
    ------
    ResultsError
        ``out`` cannot hold results (at the start) or a table cannot be written (at
        :meth:`commit`); the previous results are left as they were.
    """

    def __init__(self, out: str) -> None:
        _prepare_out(out)
        clean_staging(out)
        self.out = out
        self.run_id = uuid.uuid4().hex
        self._lock: int | None = None
        self._staged: dict[str, tuple[weakref.ref[pd.DataFrame], Future[str]]] = {}
        self._streamed: dict[str, Future[str]] = {}
        self._pool = ThreadPoolExecutor(min(4, os.cpu_count() or 1), thread_name_prefix="dtrace-write")
        try:
            self.staging: str | None = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out)
            self._lock = _lock(self.staging)
        except OSError as exc:
            self.close()
            raise _write_error(out, exc) from None

    def __enter__(self) -> StagedResults:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stage(self, tables: Mapping[str, pd.DataFrame]) -> None:
        """Start writing ``tables`` into the staging folder (tagged with :attr:`run_id`); their
        writes run in the background."""
        _check_names(tables)
        for name, df in tables.items():
            t = _arrow_table(df, self.run_id)
            self._staged[name] = (weakref.ref(df), self._pool.submit(_write_table, self._staging_dir(), name, t))

    def stage_parts(self, name: str, parts: Sequence[Spilled]) -> None:
        """Start writing table ``name`` from the files of its partitions (in rank order), a row
        group each, in the background: the table is never whole in memory. It stays on disk;
        :meth:`commit` lists it, the :class:`Results` it returns read it when asked."""
        _check_names([name])
        self._streamed[name] = self._pool.submit(_write_parts, self._staging_dir(), name, list(parts), self.run_id)

    def commit(self, tables: dict[str, pd.DataFrame], manifest: dict[str, Any], staged: Iterable[str] = ()) -> Results:
        """Stage the tables not staged yet (or replaced since), wait for every write, then replace
        the previous results: the old manifest removed, the tables renamed into place, the new
        manifest last. The results are ``tables``, the tables staged from parts
        (:meth:`stage_parts`) and those named in ``staged``: staged earlier, no longer held by the
        caller (the :class:`Results` returned reads them from the folder)."""
        _check_names(tables)
        run_id = manifest.setdefault("run_id", self.run_id)
        manifest["format_version"] = FORMAT_VERSION
        fresh = run_id == self.run_id  # else the manifest names its own run: every table is tagged with it
        streamed, held = self._others(tables, staged, fresh)
        manifest["tables"] = sorted({*tables, *streamed, *held})
        stale = {n: df for n, df in tables.items() if not (fresh and n in self._staged and self._staged[n][0]() is df)}
        wait([self._staged[n][1] for n in stale if n in self._staged])  # an earlier write of the same file ends first
        staging = self._staging_dir()
        # Arrow converts, compresses and writes without the GIL: the rest is staged in parallel
        converted = self._pool.map(lambda item: (item[0], _arrow_table(item[1], run_id)), stale.items())
        for name, t in list(converted):
            self._staged[name] = (weakref.ref(stale[name]), self._pool.submit(_write_table, staging, name, t))
        try:  # a write that failed raises here
            fps = {name: self._staged[name][1].result() for name in {*tables, *held}}
            fps.update({name: f.result() for name, f in streamed.items()})
        except OSError as exc:
            raise _write_error(self.out, exc) from None
        manifest["table_fingerprints"] = {name: fps[name] for name in manifest["tables"]}
        self._put_in_place(staging, manifest)
        return Results(tables, manifest, self.out)

    def _others(
        self, tables: Mapping[str, object], staged: Iterable[str], fresh: bool
    ) -> tuple[dict[str, Future[str]], set[str]]:
        """The tables committed besides ``tables``: those streamed from parts, and those ``staged``
        earlier that the caller let go."""
        streamed = {n: f for n, f in self._streamed.items() if n not in tables}
        held = set(staged) - set(tables)
        if held - set(self._staged):
            raise ValueError(f"tables never staged: {sorted(held - set(self._staged))}")
        if streamed and not fresh:
            raise ResultsError(f"{self.out}: tables staged from parts are tagged with this run, not the manifest's")
        return streamed, held

    def _put_in_place(self, staging: str, manifest: dict[str, Any]) -> None:
        """Write the manifest, then replace the previous results: the old manifest removed, the
        tables renamed into place, the new manifest last."""
        try:
            with open(os.path.join(staging, MANIFEST), "wb") as f:
                f.write(_manifest_json(manifest))
            _retire_previous(self.out, set(manifest["tables"]))
            for name in manifest["tables"]:
                os.replace(os.path.join(staging, f"{name}.parquet"), os.path.join(self.out, f"{name}.parquet"))
            os.replace(os.path.join(staging, MANIFEST), os.path.join(self.out, MANIFEST))
        except OSError as exc:
            raise _write_error(self.out, exc) from None

    def close(self) -> None:
        """Wait for the writes still running, release the lock and remove the staging folder."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
        staging, self.staging = getattr(self, "staging", None), None
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)

    def _staging_dir(self) -> str:
        if self.staging is None:
            raise ResultsError(f"{self.out}: these results were already written or given up")
        return self.staging


def _write_error(out: str, exc: OSError) -> ResultsError:
    where = f" ({exc.filename})" if exc.filename else ""
    return ResultsError(f"{out}: cannot write results: {exc.strerror or exc}{where}")


def _manifest_json(manifest: dict[str, Any]) -> bytes:
    """The manifest as indented JSON: msgspec's (10x the json module's speed at 4,096 inputs);
    the json module's \\u escapes where a path that is not UTF-8 holds surrogates."""
    try:
        return msgspec.json.format(msgspec.json.encode(manifest, enc_hook=_plain), indent=1)
    except UnicodeEncodeError:
        return json.dumps(manifest, indent=1, default=_plain).encode()


def _check_names(names: Iterable[str]) -> None:
    for name in names:
        if not TABLE_NAME.fullmatch(name):
            raise ValueError(f"invalid table name {name!r}: table names are identifiers")


def _prepare_out(out: str) -> None:
    """Create ``out``; one-line errors when it cannot hold results."""
    try:
        os.makedirs(out, exist_ok=True)
    except FileExistsError:
        raise ResultsError(f"{out}: exists and is not a directory; cannot write results there") from None
    except OSError as exc:
        raise ResultsError(f"{out}: cannot create the results directory: {exc.strerror}") from None
    old_manifest = os.path.join(out, MANIFEST)
    if os.path.isdir(old_manifest) and not os.path.islink(old_manifest):
        raise ResultsError(f"{old_manifest} is a directory, not a manifest; remove it or write the results elsewhere")


def _arrow_table(df: pd.DataFrame, run_id: str) -> pa.Table:
    """Table ``df`` as Arrow, tagged with the run id."""
    t = pa.Table.from_pandas(df, preserve_index=False)
    return t.replace_schema_metadata({**(t.schema.metadata or {}), b"dtrace.run_id": run_id.encode()})


def _write_table(staging: str, name: str, t: pa.Table) -> str:
    """Write table ``name`` into the staging folder; its fingerprint."""
    buf = io.BytesIO()
    pq.write_table(t, buf, compression="zstd")
    data = buf.getvalue()
    with open(os.path.join(staging, f"{name}.parquet"), "wb") as f:
        f.write(data)
    return xxhash.xxh3_128_hexdigest(data)


def _write_parts(staging: str, name: str, parts: list[Spilled], run_id: str) -> str:
    """Write table ``name`` into the staging folder from its partitions' spilled files, a row
    group each (one partition's rows in memory at a time), in their unified schema; its
    fingerprint."""
    schema = spill.unified_schema([spill.read_schema(p) for p in parts])
    schema = schema.with_metadata({**(schema.metadata or {}), b"dtrace.run_id": run_id.encode()})
    path = os.path.join(staging, f"{name}.parquet")
    digest = xxhash.xxh3_128()
    with pq.ParquetWriter(path, schema, compression="zstd") as w:
        for p in parts:
            w.write_table(spill.conformed(spill.read(p), schema))
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _retire_previous(out: str, tables: set[str]) -> None:
    """Remove the previous manifest (a link is removed, never followed) and the tables it listed
    that the new results do not have."""
    old_manifest = os.path.join(out, MANIFEST)
    if os.path.lexists(old_manifest):
        old = _previous_manifest(out)
        os.unlink(old_manifest)  # a link is removed, never followed
        if old:
            _remove_stale_tables(out, old, tables)


def intact(out: str, manifest: Manifest) -> bool:
    """Whether every table the manifest lists is in ``out`` with the bytes it was written with
    (:func:`dtrace.ingest.unchanged.tables_intact`; the names are checked first)."""
    try:
        for name in manifest.tables:
            table_path(out, name)  # a name that leads outside OUT: not intact
    except ResultsError:
        return False
    return tables_intact(out, manifest.tables, manifest.table_fingerprints)


def _previous_manifest(out: str) -> dict[str, Any] | None:
    """The manifest being replaced, if it is a readable JSON object (else nothing is cleaned up)."""
    try:
        old = _read_manifest(out, missing_ok=True)
    except ResultsError:
        return None
    return old if isinstance(old, dict) else None


def _remove_stale_tables(out: str, old: dict[str, Any], keep: set[str]) -> None:
    """Delete the previous run's tables this run does not write (see the module docstring)."""
    names = old.get("tables")
    run_id = old.get("run_id")
    if not isinstance(names, list) or not isinstance(run_id, str):
        return
    for name in names:
        if not isinstance(name, str) or not TABLE_NAME.fullmatch(name) or name in keep:
            continue
        p = os.path.join(out, f"{name}.parquet")
        if os.path.islink(p) or not os.path.isfile(p):
            continue
        try:
            with open_regular(p, follow_links=False) as f:
                md = pq.read_schema(f).metadata or {}
        except (OSError, pa.ArrowInvalid):
            continue
        if md.get(b"dtrace.run_id", b"").decode(errors="replace") == run_id:
            os.unlink(p)


def _lock(staging: str) -> int | None:
    """Create and hold the lock of a staging folder (released when the fd closes or the process dies)."""
    if fcntl is None:
        return None
    fd = os.open(os.path.join(staging, _LOCK), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _staging_in_use(path: str) -> bool:
    """Whether a live run still writes into this staging folder."""
    try:
        fd = os.open(os.path.join(path, _LOCK), os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:  # no lock: a run about to take it, or one that crashed long ago
        try:
            return time.time() - os.lstat(path).st_mtime < _STAGING_GRACE_S
        except OSError:
            return False
    except OSError:
        return True
    try:
        if fcntl is None:
            return time.time() - os.fstat(fd).st_mtime < _STAGING_GRACE_S
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        return False
    finally:
        os.close(fd)


def clean_staging(out: str) -> list[str]:
    """Remove the ``.staging-*`` folders that crashed writes left in ``out``; return their names.

    Only what dtrace made is removed: a folder holding nothing but a staging folder's files (its
    lock, tables and manifest). A user's file or link named ``.staging-*``, or a folder holding
    anything else, stays; a staging folder whose lock a live run holds is left alone.
    """
    removed: list[str] = []
    try:
        entries = list(os.scandir(out))
    except OSError:
        return removed
    for e in entries:
        if not e.name.startswith(STAGING_PREFIX) or e.is_symlink() or not e.is_dir(follow_symlinks=False):
            continue
        if not _made_by_dtrace(e.path) or _staging_in_use(e.path):
            continue
        shutil.rmtree(e.path, ignore_errors=True)
        removed.append(e.name)
    return removed


def _made_by_dtrace(folder: str) -> bool:
    """Whether ``folder`` holds only what a staging folder holds: its lock, ``*.parquet`` tables
    and the manifest (plain files; an empty folder too, a run that died before its lock)."""
    try:
        with os.scandir(folder) as it:
            for e in it:
                ours = e.name in (_LOCK, MANIFEST) or TABLE_FILE.fullmatch(e.name) is not None
                if not ours or e.is_symlink() or not e.is_file(follow_symlinks=False):
                    return False
    except OSError:
        return False
    return True


def _read_manifest(path: str, missing_ok: bool = False) -> dict[str, Any] | None:
    mf = os.path.join(path, MANIFEST)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ResultsError(
            f"{path}: is a file, not a results directory (to look at one trace: dtrace kernels, gaps "
            f"or ops FILE; to analyse it: dtrace analyze FILE -o OUT)"
        )
    if os.path.islink(mf):
        root, real = os.path.realpath(path), os.path.realpath(mf)
        if os.path.commonpath([root, real]) != root:
            raise ResultsError(f"{mf}: is a link to {real}, outside the results directory; refusing to read it")
    if os.path.isdir(mf):
        raise ResultsError(f"{mf} is a directory, not a manifest")
    try:
        doc: dict[str, Any] | None = json.loads(
            read_regular(mf, limit=MANIFEST_MAX_BYTES)
        )  # a FIFO or a device is refused
        return doc
    except FileNotFoundError:
        if missing_ok:
            return None
        if os.path.isdir(path) and any(n.endswith(".parquet") for n in os.listdir(path)):
            raise ResultsError(f"{path}: results are incomplete (no {MANIFEST}: the run did not finish)") from None
        raise ResultsError(f"{path}: not a dtrace results directory (no {MANIFEST})") from None
    except OSError as exc:
        raise ResultsError(f"{mf}: cannot read the manifest: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:
        raise ResultsError(f"{mf}: invalid manifest: {exc}") from None


def check_manifest(manifest: object, where: str, *, written: bool = True) -> Manifest:
    """The typed manifest (:class:`~dtrace.core.records.Manifest`) of a JSON value read from ``where``,
    checked (it may have been edited by hand); a wrong field raises a one-line ResultsError.
    A ``written`` manifest lists its tables (one of a run kept in memory need not).

    Examples
    --------
    >>> check_manifest({"tables": ["breakdown"], "seconds": 1.5}, "m.json").seconds
    1.5
    >>> check_manifest({"tables": ["../x"]}, "m.json")
    Traceback (most recent call last):
    dtrace.errors.ResultsError: m.json: invalid table name '../x' (table names are identifiers: letters, digits and _); the manifest was edited or damaged
    """

    def bad(what: str) -> ResultsError:
        return ResultsError(f"{where}: {what} (the manifest was edited or damaged)")

    if written and isinstance(manifest, dict) and "tables" not in manifest:
        raise bad("field 'tables' is missing")
    try:
        record = convert(manifest, Manifest)
    except RecordError as exc:
        if not exc.path:
            raise bad(f"the manifest is a JSON {type(manifest).__name__}, not an object") from None
        if re.fullmatch(r"tables\[\d+\]", exc.path):
            raise ResultsError(
                f"{where}: invalid table name {exc.value!r} (table names are identifiers: letters, digits "
                "and _); the manifest was edited or damaged"
            ) from None
        top = "." not in exc.path and "[" not in exc.path  # a field of the manifest itself
        raise bad(f"field {exc.path!r}{str(exc)[len(exc.path) :]}" if top else str(exc)) from None
    _check_options(record.options, bad)
    return record


def validate_manifest(manifest: object, where: str) -> dict[str, Any]:
    """``manifest`` itself (the JSON object) once :func:`check_manifest` found nothing wrong.

    Examples
    --------
    >>> validate_manifest({"tables": ["breakdown"], "seconds": 1.5}, "m.json")["seconds"]
    1.5
    >>> validate_manifest({"tables": "breakdown"}, "m.json")
    Traceback (most recent call last):
    dtrace.errors.ResultsError: m.json: field 'tables' is a str, expected a list (the manifest was edited or damaged)
    """
    check_manifest(manifest, where)
    assert isinstance(manifest, dict)  # check_manifest refuses anything else
    return manifest


def load_remote(url: str) -> Results:
    """The results at ``url`` (an object store), every table read into memory from a temporary copy."""
    import shutil  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    from .ingest.remote import download_results  # noqa: PLC0415

    local = tempfile.mkdtemp(prefix="dtrace-results-")
    try:
        if not download_results(url, local):
            raise ResultsError(f"{url}: no results there (no {MANIFEST})")
        return in_memory(load(local))
    finally:
        shutil.rmtree(local, ignore_errors=True)


def in_memory(res: Results) -> Results:
    """``res`` with every table read, detached from its folder (which may then be removed)."""
    tables = {name: res.table(name) for name in res.table_names}
    return Results(tables, dict(res.manifest), None)


def _check_options(opts: dict[str, Any], bad: Any) -> None:
    """The recorded analysis options must be valid :class:`~dtrace.options.Options` (renderers and
    the timeline read them back)."""
    known = {f.name for f in fields(Options)}
    try:
        Options.from_kwargs(**{k: v for k, v in opts.items() if k in known and k != "classmap"})
    except (UsageError, TypeError, ValueError) as exc:
        raise bad(f"field 'options': {exc}") from None


def load(path: str | os.PathLike[str], ranks: Iterable[int] | None = None) -> Results:
    """Open a results directory written by ``dtrace analyze``; with ``ranks``, every table with a
    ``rank`` column holds only those ranks' rows, read without the row groups of other ranks (a
    per-rank table of a large job is written a row group per rank range).

    Raises
    ------
    ResultsError
        ``path`` is not a results directory, or its manifest is damaged or from a newer dtrace.

    Examples
    --------
    >>> r = dtrace.load("run42/results")          # doctest: +SKIP
    >>> r.breakdown.head()                        # doctest: +SKIP
    >>> r = dtrace.load("s3://bucket/run42/results/")   # doctest: +SKIP
    >>> dtrace.load("run42/results", ranks=[7]).launches   # doctest: +SKIP

    Results on an object store (a URL) are downloaded and read whole (every table in memory).
    """
    path = os.fspath(path)
    if is_url(path):
        res = load_remote(path)
        return Results(res._tables, res.manifest, None, ranks)
    manifest = validate_manifest(_read_manifest(path), os.path.join(path, MANIFEST))
    version = int(manifest.get("format_version", 0))  # an int: checked
    if version > FORMAT_VERSION:
        raise ResultsError(f"{path}: written by a newer dtrace (format {version}); upgrade")
    return Results(None, manifest, path, ranks)
