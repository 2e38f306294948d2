"""Byte-level helpers shared by readers: sniffing, reading (gunzipped, fingerprinted) content."""
from __future__ import annotations

import gzip
import io
import os
import zlib
from typing import BinaryIO

import xxhash

try:  # isal's gzip is ~1.7x faster than zlib's; fall back silently to the stdlib
    from isal import igzip as _gzip
except ImportError:  # pragma: no cover - isal is a dependency, but keep working without it
    _gzip = gzip  # type: ignore[assignment]

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
BLOCK = 16 << 20


def read_head(path: str | os.PathLike[str], n: int = 4096) -> bytes:
    """First ``n`` bytes of the *content* (gunzipped if the file is gzip)."""
    with open(path, "rb") as f:
        raw = f.read(n)
    if raw[:2] == GZIP_MAGIC:
        try:
            with _gzip.open(path, "rb") as g:
                return g.read(n)
        except (OSError, EOFError, zlib.error):
            return b""
    return raw


def is_gzip(path: str | os.PathLike[str]) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


class HashingReader(io.RawIOBase):
    """Wrap a binary file and hash every byte read through it (the file's fingerprint)."""

    def __init__(self, f: BinaryIO) -> None:
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
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._raw = open(path, "rb")
        if hasattr(os, "posix_fadvise"):  # one sequential pass: let the kernel read ahead further
            os.posix_fadvise(self._raw.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        self._hashing = HashingReader(self._raw)
        self._buffered = io.BufferedReader(self._hashing, buffer_size=1 << 20)
        self.compressed = self._buffered.peek(2)[:2] == GZIP_MAGIC
        self._gz = _gzip.GzipFile(fileobj=self._buffered, mode="rb") if self.compressed else None

    def readinto(self, view: memoryview) -> int:
        if self._gz is None:
            return self._buffered.readinto(view)
        data = self._gz.read(len(view))
        view[:len(data)] = data
        return len(data)

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
    """The fingerprint of a file's bytes: a 128-bit xxh3 hash (non-cryptographic, GB/s)."""
    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()
