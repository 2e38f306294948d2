"""The ingest cache: each input parsed once into Parquet, reused while the source is unchanged.

Layout: ``CACHE/<key>/`` per source file (``key`` from its absolute path) with
``events-p<index>-d<device>.parquet``, ``collectives-...``, ``memcpy-...`` (one per part), a
file per further side table of :data:`~dtrace.core.schema.SIDE_SCHEMAS` the part has rows in, and
``source.json`` (path, size, mtime, fingerprint, format, parts, rank hint, the side tables
registered when it was written, the fingerprint of every cached file, and a fingerprint of the
record itself). ``source.json`` is written last and atomically, so an entry is either complete
or absent; an entry written when other side tables were registered is parsed again.

The small inputs of one ingest task are stored together instead (:func:`ingest_many`): a *pack*
``CACHE/pack-<folder>-<hex>/`` holds one Parquet file per table (a row group per part) and an
``index.json`` with the same record for each of its inputs, written last. No file is created per
input (on a real file system, creating a folder and a file per input cost more CPU than parsing a
small trace). ``<folder>`` is a key of the deepest folder that holds all the pack's inputs: an
input is looked up in its own entry, then in the indexes of the packs filed under its folder or a
folder above it (each listing and index read once per process while it is unchanged).

Reuse is decided by content, not trust: an entry is reused only if its input still has the
recorded size, mtime and **fingerprint** (a 128-bit xxh3 hash of the whole file, computed at
GB/s), its record matches its own fingerprint, and every cached file reads back whole (its
fingerprint matches) as a Parquet file of the right table (columns, types and rows, from its
footer). Anything else — a changed input, a damaged or hand-edited entry, a truncated Parquet
file — is parsed again, with a note in the manifest, never an error. Cached files are data
(Parquet, JSON), never code: nothing is unpickled. Every name read from ``source.json`` must be
a plain file name of the entry's own folder, and nothing inside the cache is followed through a
symbolic link: a link where an entry or a file should be is removed (the link, never its
target) and the entry is written anew. An entry whose file still fails to decode when its
events are loaded (a file forged to match its fingerprint) fails its input once, and is
dropped so that the next run parses the input again.

An input on an object store (a URL, :mod:`dtrace.ingest.remote`) is keyed by its URL and reused while
the store states the same size and identity (version id, generation or ETag, recorded as
``identity``): the object is neither downloaded nor fingerprinted again. Where the store states
no identity, its content's fingerprint decides, as for a local file. A parse downloads the
object to a private temporary file on the worker first.

Ranks are a property of the whole input set (a file may be numbered by its sorted position),
so the cache is keyed by source and the rank is attached when the partition is loaded.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import io
import json
import os
import re
import shutil
import sqlite3
import stat
import tempfile
import threading
import traceback
import zlib
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

try:
    from isal.isal_zlib import IsalError

    # isal's stub types the class IsalError as an instance
    _ISAL_ERRORS: tuple[type[BaseException], ...] = (IsalError,)  # type: ignore[assignment]
except ImportError:  # pragma: no cover - isal is a dependency; stay importable without it
    _ISAL_ERRORS = ()

from ..core.constants import MANIFEST_MAX_BYTES, TABLE_MAX_BYTES
from ..core.fileio import atomic_write_bytes, read_regular, real_folder
from ..core.records import CachedInput, CachedPart, InputMeta, PackIndex, SourceFile, SourceVersion, convert
from ..core.schema import EVENT_SCHEMA, SIDE_SCHEMAS, empty_side
from ..errors import DtraceError, InputError, NoGPUActivity, OwnOutput
from ..readers import detect, get_reader, head_of, refuse_own_output
from ..readers._io import check_size, file_fingerprint
from ..readers.base import PartTables
from .remote import ObjectInfo, is_url, norm

CACHE_VERSION = 8  # 8: the counter_ranges and range_counters side tables (CUPTI range profiling)
PACK_MIN_INPUTS = 8
"""An ingest task of at least this many inputs stores the tables of its small inputs together
(one *pack*, :func:`ingest_many`); fewer inputs keep one entry each with their own files."""
PACK_MAX_EVENTS = 200_000
"""Larger inputs are never packed: their own files cost little next to their parse."""
PACK_MAX_INPUTS = 4096
"""Inputs in one pack at most (a task of more small inputs writes one pack per 4,096): an index
holding more records than this was not written by dtrace and is refused before its records are
checked (100,000 planted records took seconds per process that read them)."""
INDEX_MAX_BYTES = 64 << 20
"""The largest ``index.json`` read (4,096 records of a few KB each): a larger one is refused unread."""
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
SOURCE = "source.json"
INDEX = "index.json"  # a pack's records of its inputs
_PACK_NAME = re.compile(r"^pack-([0-9a-f]{12})-[0-9a-f]{24}$")
_PART_FILE = re.compile(r"^([a-z][a-z0-9_]{0,31})-p\d{1,6}-d-?\d{1,9}\.parquet$")
_PACK_FILE = re.compile(r"^([a-z][a-z0-9_]{0,31})\.parquet$")
_ALWAYS = ("events", "collectives", "memcpy")  # written for every part; other side tables when not empty
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@dataclass
class PartRecord:
    device: int
    local_index: int
    events: str
    collectives: str
    memcpy: str
    n_events: int
    checksums: dict[str, str] = field(default_factory=dict)  # file name -> xxh3 of its bytes
    side: dict[str, str] = field(default_factory=dict)  # further side table -> its file (tables with rows only)
    pack: str = ""  # the pack folder (``pack-<folder>-<hex>``) holding the files, "" for the entry's own files
    groups: dict[str, int] = field(default_factory=dict)  # in a pack: table -> its row group for this part

    def side_paths(self) -> dict[str, str]:
        """Every side table's cached file by name (``collectives``, ``memcpy``, then the others)."""
        return {"collectives": self.collectives, "memcpy": self.memcpy, **self.side}

    def to_cached(self) -> CachedPart:
        """This part as ``source.json`` keeps it: its files by name only."""
        return CachedPart(
            device=self.device,
            local_index=self.local_index,
            n_events=self.n_events,
            events=os.path.basename(self.events),
            collectives=os.path.basename(self.collectives),
            memcpy=os.path.basename(self.memcpy),
            checksums=self.checksums,
            side={k: os.path.basename(v) for k, v in self.side.items()},
            pack=self.pack,
            groups=self.groups,
        )

    @classmethod
    def from_cached(cls, p: CachedPart, d: str) -> PartRecord:
        """A part of cache entry ``d`` (its files in ``d``, or in its pack: a folder beside it)."""
        where = os.path.join(os.path.dirname(d), p.pack) if p.pack else d
        return cls(
            device=p.device,
            local_index=p.local_index,
            n_events=p.n_events,
            checksums=dict(p.checksums),  # a copy: a pack's records are shared by every lookup of this process
            events=os.path.join(where, p.events),
            collectives=os.path.join(where, p.collectives),
            memcpy=os.path.join(where, p.memcpy),
            side={k: os.path.join(where, v) for k, v in p.side.items()},
            pack=p.pack,
            groups=dict(p.groups) if p.pack else {},
        )


@dataclass
class FileRecord:
    """What ingest knows about one input (small; travels from workers to the client)."""

    path: str
    format: str = ""
    size: int = 0
    mtime_ns: int = 0
    fingerprint: str = ""
    parts: list[PartRecord] = field(default_factory=list)
    rank_hint: int | None = None
    rank_per_device: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    error_type: str | None = None
    cached: bool = False
    notes: list[str] = field(default_factory=list)
    identity: str = ""  # an object's identity on its store (remote inputs; "" for local files)

    def to_cached(self) -> CachedInput:
        """The record ``source.json`` keeps of this input: its parts name their files only (an
        entry never points outside its folder), and the side tables registered now."""
        return CachedInput(
            path=self.path,
            format=self.format,
            size=self.size,
            mtime_ns=self.mtime_ns,
            fingerprint=self.fingerprint,
            parts=[p.to_cached() for p in self.parts],
            rank_per_device=self.rank_per_device,
            meta=self.meta,
            rank_hint=self.rank_hint,
            identity=self.identity,
            side_tables=sorted(SIDE_SCHEMAS),
        )

    @classmethod
    def from_cached(cls, r: CachedInput, d: str) -> FileRecord:
        """The record of cache entry ``d`` from its ``source.json`` (the files of its parts in
        ``d``, or in their pack beside it)."""
        return cls(
            path=r.path,
            format=r.format,
            size=r.size,
            mtime_ns=r.mtime_ns,
            fingerprint=r.fingerprint,
            parts=[PartRecord.from_cached(p, d) for p in r.parts],
            rank_hint=r.rank_hint,
            rank_per_device=r.rank_per_device,
            meta=dict(r.meta),
            identity=r.identity or "",
        )


class CacheError(DtraceError):
    """The cache folder itself cannot be used (not a folder, a link, unwritable)."""


def entry_dir(cache_dir: str, path: str) -> str:
    """The cache entry of an input: named by a hash of its absolute path or URL (a name that is
    not valid UTF-8 — Linux names are bytes, read as surrogate escapes — hashes like any other)."""
    key = hashlib.sha1(norm(path).encode("utf-8", "surrogatepass")).hexdigest()[:20]
    return os.path.join(cache_dir, key)


def check_cache_dir(cache_dir: str) -> None:
    """Create the cache folder if needed and check that it can be written (a probe file);
    refuse a non-folder or a symbolic link, in one line naming the folder (:class:`CacheError`)."""
    try:
        st = os.lstat(cache_dir)
    except FileNotFoundError:
        try:
            os.makedirs(cache_dir, exist_ok=True)
            st = os.lstat(cache_dir)
        except OSError as exc:
            raise CacheError(f"{cache_dir}: cannot create the cache folder: {exc.strerror or exc}") from None
    except OSError as exc:
        raise CacheError(f"{cache_dir}: cannot use the cache folder: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise CacheError(
            f"{cache_dir}: the cache folder is a symbolic link; dtrace does not follow links in its "
            "cache (use another folder: --cache DIR, cache=DIR)"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise CacheError(
            f"{cache_dir}: exists and is not a folder; remove it or use another folder (--cache DIR, cache=DIR)"
        )
    try:
        fd, probe = tempfile.mkstemp(prefix=".tmp-", dir=cache_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise CacheError(f"{cache_dir}: cannot write to the cache folder: {exc.strerror or exc}") from None


# -- reading ---------------------------------------------------------------------------------
def read_file(path: str, limit: int = TABLE_MAX_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, never through a symbolic link; a
    FIFO or a device is refused without blocking (:func:`dtrace.core.fileio.read_regular`)."""
    return read_regular(path, follow_links=False, limit=limit)


def fingerprint_bytes(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def lookup(
    cache_dir: str, path: str, *, verify: bool = True, info: ObjectInfo | None = None
) -> tuple[FileRecord | None, str | None]:
    """The cached record of ``path`` if its entry is intact and its input unchanged.

    Returns ``(record, None)`` on a hit, else ``(None, note)`` with why the entry was not used
    (``None`` when there simply is none). ``verify=False`` skips hashing the input (the size and
    mtime still decide) and the cached files: only for reading the cache of a finished analysis.
    For a URL, ``info`` is what the store says of the object now (asked if not given); its size
    and identity decide, and an object whose store states no identity is fingerprinted (downloaded)
    when ``verify`` is set.
    """
    apath = norm(path)
    notes: list[str] = []
    fingerprint = functools.cache(lambda: file_fingerprint(apath))  # hashed once, however many records
    for found in _records(cache_dir, apath):
        if isinstance(found, str):
            notes.append(found)
            continue
        rec, sums, d = found
        same, note = _same_input(rec, apath, info, verify, fingerprint)
        damaged = (
            next((why for part in rec.parts if (why := _damaged_part(part, d, sums))), None)
            if same and verify
            else None
        )
        if same and damaged is None:
            rec.cached = True
            return rec, None
        notes.extend(n for n in (note, damaged) if n)
    return None, notes[0] if notes else None


def _records(cache_dir: str, apath: str) -> Iterator[tuple[FileRecord, dict[str, str], str] | str]:
    """The records of ``apath`` that the cache holds, with their files' checksums and their
    folder: its own entry's, then those of the packs that may hold it (a local input); or why one
    cannot be used."""
    d = entry_dir(cache_dir, apath)
    entry = _read_entry(d, apath)
    if isinstance(entry, tuple):
        yield (*entry, d)
    elif entry is not None:
        yield entry
    if not is_url(apath):
        yield from _packed_records(cache_dir, apath)


def _read_entry(d: str, apath: str) -> tuple[FileRecord, dict[str, str]] | str | None:
    """The record of cache entry ``d`` (of input ``apath``) and its files' checksums; else why
    it cannot be used (None when there simply is none, or it is another dtrace's)."""
    try:
        if stat.S_ISLNK(os.lstat(d).st_mode):
            return f"cache entry {d} is a symbolic link; parsing again"
        raw = read_file(os.path.join(d, SOURCE), MANIFEST_MAX_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cache entry {d} is unreadable ({exc.strerror or exc}); parsing again"
    try:
        rec, sums = _parse_source(raw, d)
    except _OtherVersion:
        return None  # written by another dtrace: an ordinary re-parse
    except (ValueError, RecursionError) as exc:
        return f"cache entry {d} is damaged ({_one_line(exc)}); parsing again"
    if rec.path != apath:
        return f"cache entry {d} belongs to another input; parsing again"
    return rec, sums


def _same_input(
    rec: FileRecord, apath: str, info: ObjectInfo | None, verify: bool, fingerprint: Callable[[], str]
) -> tuple[bool, str | None]:
    """Whether the input is the one ``rec`` was parsed from, and if not, a note to report (None:
    an ordinary re-parse, nothing to report). ``fingerprint``: the local input's, when asked."""
    if is_url(apath):
        same = _same_object(rec, apath, info, verify)
        return (True, None) if same is True else (False, same or None)
    try:
        st = os.stat(apath)
    except OSError:
        return False, None
    if rec.size != st.st_size or rec.mtime_ns != st.st_mtime_ns:
        return False, None  # the input changed: an ordinary re-parse, nothing to report
    if verify and fingerprint() != rec.fingerprint:
        return False, f"{apath}: content changed although size and mtime did not; parsing again"
    return True, None


def _damaged_part(part: PartRecord, d: str, sums: dict[str, str]) -> str | None:
    """Why a part's cached files (in entry ``d``, or its pack) cannot be used; None when intact."""
    where = os.path.dirname(part.events) if part.pack else d
    try:
        if part.pack and not stat.S_ISDIR(os.lstat(where).st_mode):  # a link is never followed
            return f"cache entry {d}: its pack {part.pack} is not a folder; parsing again"
    except OSError:
        return f"cache entry {d}: its pack {part.pack} is missing; parsing again"
    for kind, path in {"events": part.events, **part.side_paths()}.items():
        name = os.path.basename(path)
        try:
            pf = _parquet_file(os.path.join(where, name), sums[name])
            _check_parquet(pf, kind, part.n_events if kind == "events" else None, part.groups.get(kind))
        except OSError as exc:
            why = "is damaged" if exc.errno == errno.EIO else "is missing or unreadable"
            return f"cache entry {where}: {name} {why}; parsing again"
        except (ValueError, pa.ArrowException) as exc:
            return f"cache entry {where}: {name} is not a table dtrace wrote ({_one_line(exc)}); parsing again"
    return None


_OPEN = threading.local()


@contextmanager
def shared_files() -> Iterator[None]:
    """Within this block, each cached file is read, fingerprinted and opened once however many
    parts it holds (the parts of a pack; :func:`lookup` and :func:`read_part_tables`), and the
    row groups :func:`read_parts_tables` read ahead are kept for the parts that take them."""
    outer = getattr(_OPEN, "files", None), getattr(_OPEN, "rows", None)
    if outer[0] is None:
        _OPEN.files, _OPEN.rows = {}, {}
    try:
        yield
    finally:
        _OPEN.files, _OPEN.rows = outer


def _parquet_file(path: str, want: str | None) -> pq.ParquetFile:
    """The Parquet file at ``path`` (never through a link) if its bytes have the fingerprint
    ``want`` (None: not checked); ``OSError`` (``EIO`` when the fingerprint does not match) or
    ``ArrowException`` otherwise. Inside :func:`shared_files`, each file is read once."""
    files = getattr(_OPEN, "files", None)
    got = files.get(path) if files is not None else None
    if got is None:
        data = read_file(path)
        got = (fingerprint_bytes(data), data, None)
        if files is not None:
            files[path] = got
    fp, data, pf = got
    if want is not None and fp != want:
        raise OSError(errno.EIO, "content does not match its fingerprint")
    if pf is None:
        pf = pq.ParquetFile(pa.BufferReader(data))
        if files is not None:
            files[path] = (fp, data, pf)
    return pf


def _same_object(rec: FileRecord, url: str, info: ObjectInfo | None, verify: bool) -> bool | str:
    """Whether the object at ``url`` is the one ``rec`` was parsed from: True, or a note ("" for an
    ordinary change). Size and identity decide; without an identity, the fingerprint (a download)."""
    from .remote import RemoteError, local_copy, stat  # noqa: PLC0415

    try:
        now = info if info is not None else stat(url)
    except RemoteError:
        return ""  # ingest reports the error
    if now.size != rec.size or now.identity != rec.identity:
        return ""
    if now.identity or not verify:
        return True
    try:
        with local_copy(url) as local:
            same = file_fingerprint(local) == rec.fingerprint
    except RemoteError:
        return ""
    return True if same else f"{url}: content changed although its size did not; parsing again"


def _check_parquet(f: pq.ParquetFile, kind: str, rows: int | None, group: int | None = None) -> None:
    """Check that ``f`` is a Parquet file of a ``kind`` table (its footer only: the columns
    and their types, and ``rows`` rows if given — in row group ``group`` of a pack); raise
    ValueError or ArrowException if not.

    Its fingerprint matched, so only a hand-made file can fail this: a file of another format
    (a pickle renamed ``.parquet`` is never unpickled, Arrow only parses Parquet), another table,
    or another part's events.
    """
    schema = f.schema_arrow
    for want in EVENT_SCHEMA if kind == "events" else SIDE_SCHEMAS[kind]:
        i = schema.get_field_index(want.name)
        if i < 0 or schema.field(i).type != want.type:
            raise ValueError(f"column {want.name!r} missing or not {want.type}")
    if group is not None and not 0 <= group < f.num_row_groups:
        raise ValueError(f"no row group {group}")
    have = f.metadata.num_rows if group is None else f.metadata.row_group(group).num_rows
    if rows is not None and have != rows:
        raise ValueError(f"{have} rows, not {rows}")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


class _OtherVersion(Exception):
    """The entry was written by another version of the cache."""


def _record_fingerprint(record: Any) -> str:
    """The fingerprint of a ``source.json`` record (as JSON, keys sorted): any change to a record,
    a flipped digit included, is seen."""
    return fingerprint_bytes(json.dumps(record, sort_keys=True).encode())


def _parse_source(raw: bytes, d: str) -> tuple[FileRecord, dict[str, str]]:
    """The record of cache entry ``d`` from its ``source.json``, strictly validated, and its files'
    checksums (raises ValueError, :class:`~dtrace.core.records.RecordError` included, or
    :class:`_OtherVersion`)."""
    doc = json.loads(raw)
    _check_version(doc)
    source = convert(doc, SourceFile)
    if source.record_fingerprint != _record_fingerprint(source.record):
        raise ValueError("the record does not match its fingerprint")
    r, sums = _checked_record(source.record, "record")
    if any(p.pack for p in r.parts):
        raise ValueError("record.parts name a pack: an entry's parts are its own files")
    return FileRecord.from_cached(r, d), sums


def _check_version(doc: object) -> None:
    """Raise :class:`_OtherVersion` for a document another version of the cache wrote."""
    if convert(doc, SourceVersion).cache_version != CACHE_VERSION:
        raise _OtherVersion()


def _checked_record(record: dict[str, Any], at: str) -> tuple[CachedInput, dict[str, str]]:
    """An input's record (at ``at`` in its document), strictly validated, and its files' checksums;
    :class:`_OtherVersion` when it was written while other side tables were registered."""
    if record.get("side_tables") != sorted(SIDE_SCHEMAS):
        raise _OtherVersion()  # parse again
    r = convert(record, CachedInput, at=at)
    convert(r.meta, InputMeta, at=f"{at}.meta")  # the values the planner and the manifest read
    sums: dict[str, str] = {}
    for i, p in enumerate(r.parts):
        _check_part(p, f"{at}.parts[{i}]")
        sums.update(p.checksums)
    return r, sums


# -- packs -----------------------------------------------------------------------------------
def _folder_key(folder: str) -> str:
    """The key packs are filed under: of the deepest folder that holds all their inputs."""
    return hashlib.sha1(folder.encode("utf-8", "surrogatepass")).hexdigest()[:12]


@functools.lru_cache(maxsize=256)
def _folder_keys(folder: str) -> tuple[str, ...]:
    """The keys of ``folder`` and of each folder above it (once per folder: its inputs share them)."""
    above = os.path.dirname(folder)
    return (_folder_key(folder), *(() if above == folder else _folder_keys(above)))


def _packed_records(cache_dir: str, apath: str) -> Iterator[tuple[FileRecord, dict[str, str], str] | str]:
    """The records of ``apath`` in the packs filed under its folders (:func:`_records`)."""
    try:
        st = os.lstat(cache_dir)
    except OSError:
        return
    packs = _packs_by_folder(cache_dir, (st.st_ino, st.st_mtime_ns, st.st_nlink))
    for key in _folder_keys(os.path.dirname(apath)):
        for name in packs.get(key, ()):
            d = os.path.join(cache_dir, name)
            index = _read_index(d)
            if isinstance(index, str):
                yield index
            elif apath in index:
                r, sums = index[apath]
                yield FileRecord.from_cached(r, d), dict(sums), d


@functools.lru_cache(maxsize=8)
def _packs_by_folder(cache_dir: str, state: tuple[int, int, int]) -> dict[str, tuple[str, ...]]:
    """The packs of the cache folder by their folder key; listed once per ``state`` of the cache
    folder (inode, mtime, link count: a new pack folder changes the count)."""
    by_key: dict[str, list[str]] = {}
    try:
        with os.scandir(cache_dir) as entries:
            for e in entries:
                m = _PACK_NAME.match(e.name)
                if m is not None:
                    by_key.setdefault(m.group(1), []).append(e.name)
    except OSError:
        return {}
    return {k: tuple(sorted(v)) for k, v in by_key.items()}


INDEXES_KEPT = 1 << 14
"""Parsed pack indexes kept per process. A lookup reads every pack of its folder, in the same
order each time: with fewer kept than there are packs, a least-recently-used cache misses on every
one (16,384 ranks in 300 packs re-parsed every index for every input, hours instead of a minute).
A parsed index of 64 small inputs is a few tens of KB."""


def _read_index(d: str) -> dict[str, tuple[CachedInput, dict[str, str]]] | str:
    """The records of pack ``d`` by input path, or why they cannot be used ({} for a pack another
    dtrace wrote, or one still being written). The index is read once per process while the
    same file is there; a link where the pack or its index should be is never followed."""
    try:
        if not stat.S_ISDIR(os.lstat(d).st_mode):
            return f"cache pack {d} is not a folder; parsing again"
        st = os.lstat(os.path.join(d, INDEX))
    except FileNotFoundError:
        return {}
    except OSError as exc:
        return f"cache pack {d} is unreadable ({exc.strerror or exc}); parsing again"
    return _index_of(d, (st.st_ino, st.st_size, st.st_mtime_ns))


@functools.lru_cache(maxsize=INDEXES_KEPT)
def _index_of(d: str, state: tuple[int, int, int]) -> dict[str, tuple[CachedInput, dict[str, str]]] | str:
    """:func:`_read_index` once per ``state`` (inode, size, mtime) of the index file."""
    try:
        raw = read_file(os.path.join(d, INDEX), INDEX_MAX_BYTES)
    except OSError as exc:
        return f"cache pack {d}: its index is unreadable ({exc.strerror or exc}); parsing again"
    try:
        return _parse_index(raw, os.path.basename(d))
    except _OtherVersion:
        return {}
    except (ValueError, RecursionError) as exc:
        return f"cache pack {d}: its index is damaged ({_one_line(exc)}); parsing again"


def _parse_index(raw: bytes, name: str) -> dict[str, tuple[CachedInput, dict[str, str]]]:
    """The records of pack ``name``'s ``index.json``, each strictly validated, by input path."""
    doc = json.loads(raw)
    _check_version(doc)
    records = doc.get("records") if isinstance(doc, dict) else None
    n = len(records) if isinstance(records, list) else 0
    if n > PACK_MAX_INPUTS:
        raise ValueError(f"it holds {n:,} records, more than a pack's {PACK_MAX_INPUTS:,}")
    index = convert(doc, PackIndex)
    if index.records_fingerprint != _record_fingerprint(index.records):
        raise ValueError("the records do not match their fingerprint")
    out = {}
    next_group: dict[str, int] = {}  # per table file: the row group the next part must name
    for i, record in enumerate(index.records):
        r, sums = _checked_record(record, f"records[{i}]")
        if not r.parts or any(p.pack != name for p in r.parts):
            raise ValueError(f"records[{i}].parts are not all in this pack")
        # a pack's parts fill each table's row groups in the order of its records: a record can
        # only name the row groups its own input wrote (one edited to read another's rows, its
        # fingerprint recomputed, breaks the sequence)
        for p in r.parts:
            for kind, group in sorted(p.groups.items()):
                if group != next_group.get(kind, 0):
                    raise ValueError(f"records[{i}] names row group {group} of {kind}, not its own")
                next_group[kind] = group + 1
        out[r.path] = (r, sums)
    return out


def _check_part(p: CachedPart, at: str) -> None:
    """What a part's record says of its files, beyond the types :class:`CachedPart` checks: its
    side tables are registered ones, each file is named as dtrace names it (in its pack, or in its
    entry), a checksum per file, and in a pack a row group per table."""
    if not set(p.side) <= set(SIDE_SCHEMAS) - set(_ALWAYS):
        raise ValueError(f"{at}.side names a table that is not a side table")
    names = {"events": p.events, "collectives": p.collectives, "memcpy": p.memcpy, **p.side}
    for table, name in names.items():
        m = (_PACK_FILE if p.pack else _PART_FILE).match(name)
        if m is None or m.group(1) != table:
            raise ValueError(f"invalid part file name {name!r}")
    if set(p.checksums) != set(names.values()):
        raise ValueError(f"{at}.checksums is not one per file of the part")
    if p.pack and set(p.groups) != set(names):
        raise ValueError(f"{at}.groups is not a row group per table")


def read_part_tables(spec: Any, only: Collection[str] | None = None) -> PartTables:
    """The cached event table and side tables of a part, each checked whole.

    ``spec`` has ``events``, ``collectives``, ``memcpy`` paths, ``side`` (further side table →
    path, as pairs or a dict) and ``checksums`` (file name → fingerprint); ``only``: the side
    tables to read (the others come back empty, their files untouched; default every one).
    Raises :class:`InputError` naming the input when a file is damaged.
    """
    paths = _table_paths(spec)
    if only is not None:
        paths = {k: v for k, v in paths.items() if k == "events" or k in only}
    groups = _row_groups(spec)
    out: dict[str, pa.Table] = {}
    for kind, path in paths.items():
        name = os.path.basename(path)
        try:
            pf = _parquet_file(path, dict(spec.checksums or ()).get(name))
            if kind in groups:  # a pack: this part's row group
                out[kind] = _row_group(pf, path, groups[kind])
            else:
                out[kind] = pf.read(use_threads=False)
        except (OSError, pa.ArrowException) as exc:
            msg = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            if groups:  # every input of the pack is parsed again next time (their files are checked then)
                _drop_file(path)
            else:
                _drop_entry(os.path.dirname(path))
            raise InputError(
                spec.path,
                f"its cached {name} is damaged ({msg}); run again (it will be parsed again) or pass --no-cache",
            ) from None
    return PartTables(out.pop("events"), {k: out[k] if k in out else empty_side(k) for k in SIDE_SCHEMAS})


def _table_paths(spec: Any) -> dict[str, str]:
    """Each table of a part → the cached file holding it."""
    return {"events": spec.events, "collectives": spec.collectives, "memcpy": spec.memcpy, **dict(spec.side)}


def _row_groups(spec: Any) -> dict[str, int]:
    """Each table of a part in a pack → its row group there (empty: the part's own files)."""
    return dict(getattr(spec, "groups", ()) or ())


def _row_group(pf: pq.ParquetFile, path: str, group: int) -> pa.Table:
    """Row group ``group`` of a pack file: read with its neighbours by :func:`read_parts_tables`, or now."""
    got = (getattr(_OPEN, "rows", None) or {}).get((path, group))
    return got if got is not None else pf.read_row_group(group, use_threads=False)


def read_parts_tables(specs: Sequence[Any]) -> list[PartTables]:
    """:func:`read_part_tables` of each part, the row groups a pack file holds for them read
    in one call per file (a partition of a thousand small ranks reads a few dozen times, not four
    thousand). A file that does not read whole is left to :func:`read_part_tables`, whose error
    names the input."""
    with shared_files():
        for path, (want, wanted) in _pack_groups(specs).items():
            _read_groups(path, want, sorted(wanted), _OPEN.rows)
        return [read_part_tables(s) for s in specs]


def _pack_groups(specs: Sequence[Any]) -> dict[str, tuple[str | None, set[int]]]:
    """Each pack file the parts read → (its fingerprint, the row groups they need)."""
    out: dict[str, tuple[str | None, set[int]]] = {}
    for s in specs:
        paths = _table_paths(s)
        checksums = dict(s.checksums or ())
        for kind, group in _row_groups(s).items():
            path = paths.get(kind)
            if path is not None:
                out.setdefault(path, (checksums.get(os.path.basename(path)), set()))[1].add(group)
    return out


def _read_groups(path: str, want: str | None, wanted: list[int], rows: dict[tuple[str, int], pa.Table]) -> None:
    """Row groups ``wanted`` of a pack file read in one call, one table each into ``rows``;
    nothing when the file does not read (the part that reads it reports it)."""
    if len(wanted) < 2:
        return
    try:
        pf = _parquet_file(path, want)
        whole = pf.read_row_groups(wanted, use_threads=False)
        sizes = [pf.metadata.row_group(g).num_rows for g in wanted]
    except (OSError, pa.ArrowException, IndexError):
        return
    start = 0
    for g, n in zip(wanted, sizes):
        rows[(path, g)] = whole.slice(start, n)
        start += n


def _drop_file(path: str) -> None:
    """Remove a damaged file of a pack (never through a link): the entries that use it are
    parsed again."""
    try:
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)
    except OSError:
        pass


def _drop_entry(d: str) -> None:
    """Make the next run parse the input of entry ``d`` again (its ``source.json`` is removed;
    a link is never followed)."""
    try:
        if stat.S_ISDIR(os.lstat(d).st_mode):
            os.unlink(os.path.join(d, SOURCE))
    except OSError:
        pass


# -- writing ---------------------------------------------------------------------------------
def _atomic_write_bytes(path: str, data: bytes) -> None:
    """Write a cache file (private, as the cache is) in place of whatever is at ``path``: a folder
    there is removed, a link replaced (never followed)."""
    _remove_folder(path)
    atomic_write_bytes(path, data, mode=0o600)


def parquet_bytes(table: pa.Table | list[pa.Table]) -> bytes:
    """A table as Parquet bytes, laid out for fast reloads.

    lz4 (written and read back twice as fast as zstd for 12 % more bytes); Parquet dictionary
    encoding only for the columns that are dictionaries in Arrow (names, kinds), delta encoding
    for the integer columns (timestamps and ids grow steadily), no column statistics (nothing
    filters on them). A 4,800-event rank: 65 KB (1/27 of its JSON), written in 0.9 ms, read back
    in 0.4 ms.
    """
    tables = table if isinstance(table, list) else [table]
    schema = tables[0].schema
    dict_cols = [f.name for f in schema if pa.types.is_dictionary(f.type)]
    int_cols = {f.name: "DELTA_BINARY_PACKED" for f in schema if pa.types.is_integer(f.type)}
    buf = io.BytesIO()
    if len(tables) == 1:
        pq.write_table(
            tables[0],
            buf,
            compression="lz4",
            row_group_size=1 << 20,
            use_dictionary=dict_cols or False,
            column_encoding=int_cols or None,
            write_statistics=False,
        )
        return buf.getvalue()
    with pq.ParquetWriter(
        buf,
        schema,
        compression="lz4",
        use_dictionary=dict_cols or False,
        column_encoding=int_cols or None,
        write_statistics=False,
    ) as w:
        for t in tables:  # a row group each (a pack: one per part), even an empty one
            w.write_table(t, row_group_size=max(t.num_rows, 1))
    return buf.getvalue()


def _remove_folder(path: str) -> None:
    """Remove a folder where a file of the cache belongs (its content too; links in it are not followed)."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
    except FileNotFoundError:
        pass


def _fresh_entry(d: str, record: str = SOURCE) -> bool:
    """Make ``d`` a real folder without its ``record`` file (``source.json``, or a pack's
    ``index.json``): until the new one is written, the entry is absent. Anything else there (a
    symbolic link, a file, a FIFO, a socket) is removed — never followed, never opened. True when
    the folder was created now (so it is empty)."""
    try:
        os.mkdir(d)  # the usual case, a new entry: nothing there to look at or remove
        return True
    except OSError:
        pass
    real_folder(d)
    src = os.path.join(d, record)
    _remove_folder(src)
    try:
        os.unlink(src)
    except FileNotFoundError:
        pass
    return False


def _ingest_url(
    rec: FileRecord,
    cache_dir: str,
    fmt: str | None,
    reader_options: dict[str, Any] | None,
    reuse: bool,
    copies: list[str],
) -> FileRecord | None:
    """:func:`ingest` of an object store URL (``rec.path``): its cached record if intact, else None
    once parsed into ``rec`` from a local copy (appended to ``copies`` while it exists)."""
    from .remote import local_copy, stat  # noqa: PLC0415 - only runs that read URLs

    url = rec.path
    info = stat(url)
    # the identity stands for the content; a listing and a HEAD state the time differently
    rec.size, rec.mtime_ns, rec.identity = info.size, 0, info.identity
    if reuse:
        hit, note = lookup(cache_dir, url, info=info)
        if hit is not None:
            return hit
        if note:
            rec.notes.append(note)
    # an object larger than the limit holds more content than the limit (compression only shrinks
    # a trace): refused before a byte is downloaded
    check_size(url, info.size, (reader_options or {}).get("max_input_size"))
    with local_copy(url) as local:
        copies.append(local)
        try:
            _parse(rec, local, cache_dir, fmt, reader_options)
        except InputError as exc:  # name the object, not its temporary copy
            raise type(exc)(url, exc.problem.replace(local, url)) from None
    return None


def ingest(
    path: str,
    cache_dir: str,
    *,
    fmt: str | None = None,
    reader_options: dict[str, Any] | None = None,
    reuse: bool = True,
    pending: list[tuple[FileRecord, Any]] | None = None,
) -> FileRecord:
    """Parse ``path`` (a file or a URL) into the cache (or reuse an intact entry). Never raises for
    a bad input: the returned record carries the one-line error instead.

    ``pending`` (:func:`ingest_many`): a small local input's parsed file is appended there with
    its record, to be written into the task's pack, instead of into an entry of its own."""
    apath = norm(path)
    rec = FileRecord(path=apath)
    copies: list[str] = []  # a URL's local copy, for the error message
    try:
        if is_url(apath):
            hit = _ingest_url(rec, cache_dir, fmt, reader_options, reuse, copies)
            if hit is not None:
                return hit
        else:
            st = os.stat(apath)
            rec.size, rec.mtime_ns = st.st_size, st.st_mtime_ns
            if reuse:
                hit, note = lookup(cache_dir, apath)
                if hit is not None:
                    return hit
                if note:
                    rec.notes.append(note)
            _parse(rec, apath, cache_dir, fmt, reader_options, pending)
    except Exception as exc:  # noqa: BLE001 - a bad input fails alone, in one line
        rec.error, rec.error_type = ingest_error(apath, exc, copies[-1] if copies else None)
        if isinstance(exc, OwnOutput) and not is_url(apath):
            # skipped, not failed: a later run is up to date only if it is unchanged
            try:
                rec.fingerprint = file_fingerprint(apath)
            except (OSError, DtraceError):
                pass
    if rec.error_type == NoGPUActivity.__name__:
        rec.format = rec.format or "kineto"
    return rec


def _parse(
    rec: FileRecord,
    source: str,
    cache_dir: str,
    fmt: str | None,
    reader_options: dict[str, Any] | None,
    pending: list[tuple[FileRecord, Any]] | None = None,
) -> None:
    """Read ``source`` (the input itself, or a local copy of a remote one) into the cache entry of
    ``rec.path`` and fill ``rec`` (raises for a bad input)."""
    apath = rec.path
    head = head_of(source)
    refuse_own_output(apath, head)  # dtrace's results, cache, timelines: skipped, never read
    reader = get_reader(fmt) if fmt else detect(source, head)
    tf = reader.read(source, **(reader_options or {}))
    refuse_own_output(apath, head, tf.meta)
    for part in tf.parts:  # ids the event tables and partitions hold as int32
        if not _I32_MIN <= part.device <= _I32_MAX:
            raise InputError(apath, f"device id {part.device} is out of range ({_I32_MIN} to {_I32_MAX})")
    rec.format = tf.format
    rec.rank_hint = tf.rank_hint
    rec.rank_per_device = tf.rank_per_device
    rec.meta = dict(tf.meta)
    rec.fingerprint = rec.meta.pop("fingerprint", "") or file_fingerprint(source)
    if pending is not None and sum(p.events.num_rows for p in tf.parts) <= PACK_MAX_EVENTS:
        pending.append((rec, tf))  # written with the other small inputs of the task
        return
    _write_entry(rec, tf, cache_dir)


def _write_entry(rec: FileRecord, tf: Any, cache_dir: str) -> None:
    """Write an input's parsed parts into its own entry: a Parquet file per table per part."""
    d = entry_dir(cache_dir, rec.path)
    _fresh_entry(d)
    for part in tf.parts:
        # keyed by position too: processes of one nsys report may share a device id
        tables = {k: t for k, t in {"events": part.events, **part.side_tables()}.items() if k in _ALWAYS or t.num_rows}
        names = {k: f"{k}-p{part.local_index}-d{part.device}.parquet" for k in tables}
        pr = PartRecord(
            device=part.device,
            local_index=part.local_index,
            n_events=part.events.num_rows,
            events=os.path.join(d, names["events"]),
            collectives=os.path.join(d, names["collectives"]),
            memcpy=os.path.join(d, names["memcpy"]),
            side={k: os.path.join(d, names[k]) for k in tables if k not in _ALWAYS},
        )
        for k, table in tables.items():
            data = parquet_bytes(table)
            pr.checksums[names[k]] = fingerprint_bytes(data)
            _atomic_write_bytes(os.path.join(d, names[k]), data)
        rec.parts.append(pr)
    _write_source(rec, d)


def _write_source(rec: FileRecord, d: str) -> None:
    """Write the entry's ``source.json`` (last: until then the entry is absent)."""
    record = _as_read_back(rec.to_cached())
    source = SourceFile(cache_version=CACHE_VERSION, record=record, record_fingerprint=_record_fingerprint(record))
    _atomic_write_bytes(os.path.join(d, SOURCE), _compact_json(source))


def _as_read_back(value: Any) -> Any:
    """A record as JSON will read it back (a reader's meta value that JSON has no type for is
    written as text), so that its fingerprint is that of what is read."""
    return json.loads(json.dumps(msgspec.to_builtins(value, enc_hook=str)))


def _compact_json(value: Any) -> bytes:
    # compact: Python's JSON encoder indents only in pure Python, at several times the cost
    return json.dumps(msgspec.to_builtins(value)).encode()


def ingest_many(
    paths: list[str],
    cache_dir: str,
    *,
    fmt: str | None = None,
    reader_options: dict[str, Any] | None = None,
    reuse: bool = True,
) -> list[FileRecord]:
    """:func:`ingest` of every input of one task; with :data:`PACK_MIN_INPUTS` inputs or more, the
    tables of the small local ones that are parsed go into one *pack*: ``CACHE/pack-<folder>-<hex>/``
    with one Parquet file per table, a row group per part, each file fingerprinted like an entry's
    own, and ``index.json``: each input's record, as its own entry's ``source.json`` would hold it.

    An input's record names the pack's files and its row groups, so a bad input fails alone (it
    has no rows in the pack, and no record) and a damaged pack file makes its inputs parse again
    (:func:`lookup` checks every file a record uses, :func:`read_part_tables` removes a damaged
    one). The pack is named by its inputs' paths and fingerprints (parsing the same inputs again
    writes the same pack) and filed under the deepest folder that holds them all (where
    :func:`lookup` looks for it).
    """
    if len(paths) < PACK_MIN_INPUTS:
        return [ingest(p, cache_dir, fmt=fmt, reader_options=reader_options, reuse=reuse) for p in paths]
    if len(paths) > PACK_MAX_INPUTS:
        step = PACK_MAX_INPUTS
        chunks = [paths[i : i + step] for i in range(0, len(paths), step)]
        return [
            r for c in chunks for r in ingest_many(c, cache_dir, fmt=fmt, reader_options=reader_options, reuse=reuse)
        ]
    pending: list[tuple[FileRecord, Any]] = []
    with shared_files():
        records = [
            ingest(p, cache_dir, fmt=fmt, reader_options=reader_options, reuse=reuse, pending=pending) for p in paths
        ]
    if pending:
        try:
            _write_pack(cache_dir, pending)
        except Exception as exc:  # noqa: BLE001 - e.g. no space: the task's packed inputs fail, in one line
            for rec, _ in pending:
                rec.parts = []
                rec.error, rec.error_type = ingest_error(rec.path, exc)
    return records


def _write_pack(cache_dir: str, pending: list[tuple[FileRecord, Any]]) -> None:
    """Write the pack of ``pending`` (parsed inputs with their records), then each input's entry."""
    pending = _packable(cache_dir, pending)
    if not pending:
        return
    ident = json.dumps([[rec.path, rec.fingerprint] for rec, _ in pending])
    folder = os.path.commonpath([os.path.dirname(rec.path) for rec, _ in pending])
    name = f"pack-{_folder_key(folder)}-{hashlib.sha1(ident.encode('utf-8', 'surrogatepass')).hexdigest()[:24]}"
    d = os.path.join(cache_dir, name)
    _fresh_entry(d, INDEX)
    by_kind: dict[str, list[pa.Table]] = {}
    for rec, tf in pending:
        rec.parts.extend(_pack_part(part, d, name, by_kind) for part in tf.parts)  # device ids checked by _parse
    sums = {}
    for k, tables in by_kind.items():
        data = parquet_bytes(tables)
        sums[f"{k}.parquet"] = fingerprint_bytes(data)
        _atomic_write_bytes(os.path.join(d, f"{k}.parquet"), data)
    for rec, _ in pending:
        for pr in rec.parts:
            pr.checksums = {f"{k}.parquet": sums[f"{k}.parquet"] for k in pr.groups}
    records = _as_read_back([rec.to_cached() for rec, _ in pending])
    index = PackIndex(cache_version=CACHE_VERSION, records=records, records_fingerprint=_record_fingerprint(records))
    _atomic_write_bytes(os.path.join(d, INDEX), _compact_json(index))
    for rec, _ in pending:  # an entry of its own from an earlier run is stale now: the pack's record replaces it
        _drop_entry(entry_dir(cache_dir, rec.path))


def _packable(cache_dir: str, pending: list[tuple[FileRecord, Any]]) -> list[tuple[FileRecord, Any]]:
    """The inputs of ``pending`` whose tables have the types of the first: the others are written
    to their own entries here (a pack holds one schema per table)."""
    schemas: dict[str, pa.Schema] = {}
    packed = []
    for rec, tf in pending:
        kinds = [(k, t) for p in tf.parts for k, t in {"events": p.events, **p.side_tables()}.items()]
        if all(schemas.setdefault(k, t.schema).equals(t.schema) for k, t in kinds):
            packed.append((rec, tf))
        else:
            _write_entry(rec, tf, cache_dir)
    return packed


def _pack_part(part: Any, d: str, name: str, by_kind: dict[str, list[pa.Table]]) -> PartRecord:
    """Add the tables of ``part`` to the pack's row groups (``by_kind``) and return its record."""
    groups: dict[str, int] = {}
    for k, table in {"events": part.events, **part.side_tables()}.items():
        if k in _ALWAYS or table.num_rows:
            groups[k] = len(by_kind.setdefault(k, []))
            by_kind[k].append(table)
    return PartRecord(
        device=part.device,
        local_index=part.local_index,
        n_events=part.events.num_rows,
        events=os.path.join(d, "events.parquet"),
        collectives=os.path.join(d, "collectives.parquet"),
        memcpy=os.path.join(d, "memcpy.parquet"),
        side={k: os.path.join(d, f"{k}.parquet") for k in groups if k not in _ALWAYS},
        pack=name,
        groups=groups,
    )


UNDECODABLE: tuple[type[BaseException], ...] = (
    UnicodeDecodeError,
    sqlite3.DatabaseError,
    zlib.error,
    EOFError,
    *_ISAL_ERRORS,
)
"""Exceptions that by their type say an input's bytes cannot be decoded (text that is not UTF-8,
a damaged SQLite database, a damaged compressed stream). A reader should say so itself; one that
does not still fails its input with this one-line description, never an "internal error"."""


def ingest_error(apath: str, exc: BaseException, local: str | None = None) -> tuple[str, str]:
    """The one-line error (naming ``apath``) and its type for an exception met while ingesting
    (``local``: the temporary copy of a remote input, which counts as the input itself)."""
    if isinstance(exc, InputError):
        return str(exc), type(exc).__name__
    if isinstance(exc, DtraceError):
        return f"{apath}: {exc}", type(exc).__name__
    if isinstance(exc, MemoryError):
        return f"{apath}: out of memory while reading", "MemoryError"
    if isinstance(exc, RecursionError):  # a decoder met JSON nested deeper than Python's stack
        return f"{apath}: the JSON is nested too deeply to read", InputError.__name__
    if isinstance(exc, OSError):
        read = {apath, os.path.abspath(local) if local else apath}
        where = "writing the cache" if exc.filename and os.path.abspath(str(exc.filename)) not in read else "reading"
        return f"{apath}: error while {where}: {exc.strerror or exc}", "OSError"
    if isinstance(exc, UNDECODABLE):  # the input's own bytes, whichever reader met them: not a bug of ours
        return f"{apath}: {undecodable(exc)}", InputError.__name__
    # a bug or an unforeseen format quirk: fail this input only
    tb = traceback.extract_tb(exc.__traceback__)[-1]
    return (
        f"{apath}: internal error while reading ({type(exc).__name__}: {exc} "
        f"at {os.path.basename(tb.filename)}:{tb.lineno})"
    ), "InternalError"


def undecodable(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        bad = exc.object[exc.start : exc.start + 1]
        byte = f"byte 0x{bytes(bad).hex()}" if isinstance(bad, (bytes, bytearray, memoryview)) and bad else "a byte"
        return f"not valid UTF-8 text ({byte}: {exc.reason}); is it a trace file?"
    if isinstance(exc, sqlite3.DatabaseError):
        return f"the SQLite database cannot be read: {_one_line(exc)}"
    return f"damaged compressed data ({type(exc).__name__}: {_one_line(exc) or 'ends early'})"


def verify(rec: FileRecord) -> bool:
    """True if the source's content still has the recorded fingerprint (a remote input is downloaded)."""
    if is_url(rec.path):
        from .remote import local_copy  # noqa: PLC0415

        with local_copy(rec.path) as local:
            return file_fingerprint(local) == rec.fingerprint
    return file_fingerprint(rec.path) == rec.fingerprint
