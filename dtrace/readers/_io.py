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

import xxhash

from ..errors import InputTooLarge, NotRegularFile
from ..units import format_size

_gzip: types.ModuleType  # isal's igzip or the stdlib's gzip: the same GzipFile API
try:  # isal's gzip is ~1.7x faster than zlib's; fall back silently to the stdlib
    from isal import igzip as _gzip
except ImportError:  # pragma: no cover - isal is a dependency, but keep working without it
    _gzip = gzip

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
BLOCK = 16 << 20

_KINDS = [
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
]


def not_regular(mode: int) -> str | None:
    """What a file of ``st_mode`` ``mode`` is if it is not a regular file (``"a FIFO (named pipe)"``), else None.

    Examples
    --------
    >>> import stat
    >>> not_regular(stat.S_IFIFO | 0o644), not_regular(stat.S_IFREG | 0o644)
    ('a FIFO (named pipe)', None)
    """
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def refusal(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` is refused as an input without opening it (``os.stat`` only), or None for a regular file.

    A path that cannot be stat'ed is not refused here: opening it reports the real error.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    what = not_regular(mode)
    return None if what is None else f"is {what}, not a regular file: refused without reading it"


def open_regular(path: str | os.PathLike[str]) -> io.BufferedReader:
    """Open ``path`` for binary reading if it is a regular file; raise :class:`NotRegularFile` otherwise.

    The type is checked twice: with ``stat`` before opening (a FIFO is never opened, so nothing
    blocks and no device is touched) and with ``fstat`` on the open descriptor (the path may have
    been replaced in between; the open is non-blocking, so a FIFO swapped in cannot block either).
    """
    why = refusal(path)
    if why is not None:
        raise NotRegularFile(path, why)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        what = not_regular(os.fstat(fd).st_mode)
        if what is not None:
            raise NotRegularFile(path, f"is {what}, not a regular file: refused without reading it")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


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
                return g.read(n)
        except (OSError, EOFError, zlib.error):
            return b""


RESULTS_MANIFEST = "a dtrace results manifest"
# dtrace's own outputs, told by their first bytes (see own_output)
_OWN_OUTPUTS = [
    (re.compile(rb'^\s*\{\s*"dtrace_version"\s*:'), RESULTS_MANIFEST),
    (re.compile(rb'^\s*\{\s*"cache_version"\s*:\s*\d+\s*,\s*"record"\s*:'), "a dtrace cache record"),
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

    def readinto(self, b) -> int:  # type: ignore[override]
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


def sqlite_wal(path: str | os.PathLike[str]) -> str | None:
    """The write-ahead log beside an SQLite database (``<file>-wal``) if it is a regular file
    with content, else None (looked at with ``lstat`` only: never opened here)."""
    wal = os.fspath(path) + "-wal"
    try:
        st = os.lstat(wal)
    except OSError:
        return None
    return wal if stat.S_ISREG(st.st_mode) and st.st_size > 0 else None
