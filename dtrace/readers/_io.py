"""Byte-level helpers shared by readers: sniffing, reading (gunzipped, fingerprinted) content.

Every file is opened through :func:`open_regular`: an input that is not a regular file (a FIFO,
a device, a socket, a folder) is refused with a one-line error before anything reads from it,
so an input can never block the run in ``open`` or ``read``.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import stat
import types
import zlib
from typing import TYPE_CHECKING

import xxhash

from ..core.fileio import NotRegularError
from ..core.fileio import open_regular as _open_regular
from ..core.units import format_size
from ..errors import InputTooLarge, NotRegularFile

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

_gzip: types.ModuleType  # isal's igzip or the stdlib's gzip: the same GzipFile API
try:  # isal's gzip is ~1.7x faster than zlib's; fall back silently to the stdlib
    from isal import igzip as _gzip
except ImportError:  # pragma: no cover - isal is a dependency, but keep working without it
    _gzip = gzip

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
BLOCK = 4 << 20
"""Bytes of decompressed JSON decoded at a time by the chunked readers. The decoded structs of a
block take a few times its size and their memory stays with the process once freed: 4 MiB keeps
them in the cache while the block's columns are pulled out (as fast as 16 MiB, or faster) and
the reader's peak memory ~80 MB lower on a 300 MB trace than 16 MiB (``bench/ingest.py``)."""


def open_regular(path: str | os.PathLike[str]) -> io.BufferedReader:
    """Open the input ``path`` for binary reading if it is a regular file
    (:func:`dtrace.core.fileio.open_regular`); raise :class:`NotRegularFile` naming it otherwise."""
    try:
        return _open_regular(path)
    except NotRegularError as exc:
        raise NotRegularFile(path, str(exc.strerror)) from None


def check_size(path: str | os.PathLike[str], size: int, limit: int | None) -> None:
    """Raise :class:`InputTooLarge` if ``size`` bytes of content exceed ``limit`` (None: no limit)."""
    if limit is not None and size > limit:
        raise InputTooLarge(
            path,
            f"its content is larger than the input size limit of {format_size(limit)} "
            "(--max-input-size / max_input_size)",
        )


def read_head(path: str | os.PathLike[str], n: int = 4096) -> bytes:
    """First ``n`` bytes of the *content* (gunzipped if the file is gzip)."""
    with open_regular(path) as f:
        raw = f.read(n)
        if raw[:2] != GZIP_MAGIC:
            return raw
        f.seek(0)
        try:
            with _gzip.GzipFile(fileobj=f, mode="rb") as g:
                head: bytes = g.read(n)  # _gzip is a module chosen at run time: untyped to mypy
                return head
        except (OSError, EOFError, zlib.error):
            return b""


RESULTS_MANIFEST = "a dtrace results manifest"
# dtrace's own outputs, told by their first bytes (see own_output)
_OWN_OUTPUTS = [
    (re.compile(rb'^\s*\{\s*"dtrace_version"\s*:'), RESULTS_MANIFEST),
    (re.compile(rb'^\s*\{\s*"cache_version"\s*:\s*\d+\s*,\s*"record"\s*:'), "a dtrace cache record"),
    (re.compile(rb'^\s*\{\s*"cache_version"\s*:\s*\d+\s*,\s*"records"\s*:'), "a dtrace cache index"),
    (
        re.compile(rb'^\s*\{\s*"version"\s*:\s*\d+\s*,\s*"key"\s*:\s*"[0-9a-f]{32}"\s*,\s*"tables"\s*:'),
        "an entry of dtrace's result store",
    ),
    (re.compile(rb'^\s*\{\s*"otherData"\s*:\s*\{\s*"generator"\s*:\s*"dtrace [^"]*timeline"'), "a dtrace timeline"),
]
TIMELINE_GENERATOR = re.compile(r"^dtrace \S+ timeline$")
"""``otherData.generator`` of a trace ``dtrace timeline`` wrote."""


def own_output(head: bytes) -> str | None:
    r"""What dtrace output ``head`` (the first bytes of a file's content) starts, or None: a
    results manifest, an ingest cache record, a stored result entry or a timeline export are
    recognised by their content, wherever they sit and whatever their names.

    Examples
    --------
    >>> own_output(b'{\n "dtrace_version": "0.1.0",\n "created": "2026-11-26"'), own_output(b'{"traceEvents": [')
    ('a dtrace results manifest', None)
    """
    return next((what for pattern, what in _OWN_OUTPUTS if pattern.match(head)), None)


def is_gzip(path: str | os.PathLike[str]) -> bool:
    with open_regular(path) as f:
        return f.read(2) == GZIP_MAGIC


class HashingReader(io.RawIOBase):
    """Wrap a binary file and hash every byte read through it (the file's fingerprint)."""

    def __init__(self, f: io.BufferedReader) -> None:
        self._f = f
        self.hash = xxhash.xxh3_128()

    def readable(self) -> bool:
        return True

    def readinto(self, b: WriteableBuffer) -> int:
        n = self._f.readinto(b)
        if n:
            self.hash.update(memoryview(b)[:n])
        return n or 0


class Content:
    """The decompressed content of a file, read into caller-owned buffers, hashed on the way.

    ``readinto(view)`` fills ``view`` (a writable memoryview) with up to ``len(view)`` bytes of
    content and returns the count (0 at the end). Plain files are read straight into the
    caller's buffer (no intermediate copy); gzip files are decompressed a block at a time.
    :meth:`finish` reads what is left of the file so that :attr:`fingerprint` is the hash of the
    file's bytes on disk. Use as a context manager.

    ``max_size`` bounds the content (decompressed) bytes: reading past it raises
    :class:`~dtrace.errors.InputTooLarge`, so a gzip bomb costs at most ``max_size`` bytes of
    decompression. ``size`` counts the content bytes read so far.
    """

    def __init__(self, path: str | os.PathLike[str], *, max_size: int | None = None) -> None:
        self.path = os.fspath(path)
        self.max_size = max_size
        self.size = 0
        self._raw = open_regular(path)
        if hasattr(os, "posix_fadvise"):  # one sequential pass: let the kernel read ahead further
            os.posix_fadvise(self._raw.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        self._hashing = HashingReader(self._raw)
        self._buffered = io.BufferedReader(self._hashing, buffer_size=1 << 20)
        self.compressed = self._buffered.peek(2)[:2] == GZIP_MAGIC
        self._gz = _gzip.GzipFile(fileobj=self._buffered, mode="rb") if self.compressed else None

    def readinto(self, view: memoryview) -> int:
        if self._gz is None:
            n = self._buffered.readinto(view)
        else:
            data = self._gz.read(len(view))
            view[: len(data)] = data
            n = len(data)
        self.size += n
        check_size(self.path, self.size, self.max_size)
        return n

    def finish(self) -> None:
        """Drain the file so the hash covers all of it (also if the content ended early)."""
        while self._hashing.read(1 << 20):
            pass

    @property
    def fingerprint(self) -> str:
        return self._hashing.hash.hexdigest()

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> "Content":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def file_fingerprint(path: str | os.PathLike[str]) -> str:
    """The fingerprint of a file's bytes: a 128-bit xxh3 hash (non-cryptographic, GB/s).

    An SQLite database in WAL mode keeps its latest changes in ``<file>-wal`` beside it (the
    database file itself is unchanged until a checkpoint): its bytes are part of the fingerprint.
    """
    h = xxhash.xxh3_128()
    with open_regular(path) as f:
        head = f.read(len(SQLITE_MAGIC))
        h.update(head)
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    wal = sqlite_wal(path) if head == SQLITE_MAGIC else None
    if wal is not None:
        h.update(b"\0dtrace-sqlite-wal\0")
        with open_regular(wal) as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()


def read_content(path: str | os.PathLike[str], *, max_size: int | None = None) -> tuple[bytearray, str]:
    """The whole decompressed content of a file and the fingerprint of its bytes on disk.

    For formats whose document must be decoded in one piece (rocprofv3 JSON). The buffer grows
    by doubling from the file's size (gzip: from the size its trailer states), so a plain file
    is read straight into its final buffer; ``max_size`` bounds the content as in :class:`Content`.
    """
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        if f.read(2) == GZIP_MAGIC and size >= 4:
            f.seek(-4, os.SEEK_END)
            size = max(size, int.from_bytes(f.read(4), "little"))
    buf = bytearray(max(size, 1) + 1)
    n = 0
    with Content(path, max_size=max_size) as content:
        while True:
            if n == len(buf):
                grown = bytearray(2 * len(buf))
                grown[:n] = buf
                buf = grown
            with memoryview(buf) as mv:
                got = content.readinto(mv[n:])
            if not got:
                break
            n += got
        content.finish()
        fingerprint = content.fingerprint
    del buf[n:]
    return buf, fingerprint


def sqlite_wal(path: str | os.PathLike[str]) -> str | None:
    """The write-ahead log beside an SQLite database (``<file>-wal``) if it is a regular file
    with content, else None (looked at with ``lstat`` only: never opened here)."""
    wal = os.fspath(path) + "-wal"
    try:
        st = os.lstat(wal)
    except OSError:
        return None
    return wal if stat.S_ISREG(st.st_mode) and st.st_size > 0 else None
