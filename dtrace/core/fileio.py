"""File access every layer shares: reading only regular files, and atomic writes.

Reading: every file dtrace opens — inputs, and everything under a results folder (the manifest,
tables, cache records and Parquet files, stored results), class maps, scheduler files — is opened
through :func:`open_regular` (or :func:`read_regular`): a FIFO, a device, a socket or a folder is
refused with :class:`NotRegularError` (an ``OSError``) before anything reads from it, so a node
planted in a shared folder can never block a command or feed it endless bytes.

Writing: every file dtrace writes whole (cache entries, reports, CSVs, timelines, generated
traces) goes through :func:`atomic_write`, so a reader never sees half a file and a failed write
leaves nothing behind. See docs/architecture.md, "Caching and trust".
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import stat
import tempfile
from typing import Callable

_KINDS = [
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
]
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class NotRegularError(OSError):
    """A path that must be a regular file is something else (a FIFO, a device, a socket, a
    folder); ``strerror`` says what, in words (``"is a FIFO (named pipe), not a regular file:
    refused without reading it"``)."""


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


def refusal(path: str | os.PathLike[str], *, follow_links: bool = True) -> str | None:
    """Why ``path`` is refused without opening it (``stat`` only), or None for a regular file.

    A path that cannot be stat'ed is not refused here: opening it reports the real error.
    """
    try:
        mode = (os.stat if follow_links else os.lstat)(path).st_mode
    except OSError:
        return None
    if not follow_links and stat.S_ISLNK(mode):
        return "is a symbolic link: refused without following it"
    what = not_regular(mode)
    return None if what is None else f"is {what}, not a regular file: refused without reading it"


def open_regular(path: str | os.PathLike[str], *, follow_links: bool = True) -> io.BufferedReader:
    """Open ``path`` for binary reading if it is a regular file; raise :class:`NotRegularError` otherwise.

    The type is checked twice: with ``stat`` before opening (a FIFO is never opened, so nothing
    blocks and no device is touched) and with ``fstat`` on the open descriptor (the path may have
    been replaced in between; the open is non-blocking, so a FIFO swapped in cannot block either).
    ``follow_links=False`` refuses a symbolic link too (``O_NOFOLLOW``).

    Examples
    --------
    >>> import os, tempfile
    >>> fifo = os.path.join(tempfile.mkdtemp(), "manifest.json"); os.mkfifo(fifo)
    >>> open_regular(fifo)
    Traceback (most recent call last):
    dtrace.core.fileio.NotRegularError: [Errno 22] is a FIFO (named pipe), not a regular file: refused without reading it: '...manifest.json'
    """
    why = refusal(path, follow_links=follow_links)
    if why is not None:
        raise NotRegularError(errno.EINVAL, why, os.fspath(path))
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags | (0 if follow_links else _NOFOLLOW))
    try:
        what = not_regular(os.fstat(fd).st_mode)
        if what is not None:
            raise NotRegularError(
                errno.EINVAL, f"is {what}, not a regular file: refused without reading it", os.fspath(path)
            )
        f = os.fdopen(fd, "rb")
        f.raw.name = os.fspath(path)  # type: ignore[attr-defined]  # the path, not the descriptor, in messages
        return f
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], *, follow_links: bool = True, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_regular`).

    ``limit``: refuse a file larger than this many bytes (``OSError`` ``EFBIG``): by its size before
    reading it, and by what was read (a file that grew meanwhile).
    """
    with open_regular(path, follow_links=follow_links) as f:
        if limit is not None and os.fstat(f.fileno()).st_size > limit:  # refused unread (a sparse 4 GB file)
            raise OSError(errno.EFBIG, f"is larger than {limit:,} bytes: refused", os.fspath(path))
        data = f.read()  # to its end (read(n) would allocate n bytes first)
    if limit is not None and len(data) > limit:
        raise OSError(errno.EFBIG, f"is larger than {limit:,} bytes: refused", os.fspath(path))
    return data


def real_folder(path: str) -> None:
    """Make ``path`` a real folder (created if needed): anything else there — a symbolic link, a
    file, a FIFO, a socket — is removed first, never followed nor opened."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass
    os.makedirs(path, exist_ok=True)


def default_mode() -> int:
    """The mode a plain ``open`` gives a new file (``0o666`` less the umask)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write(
    path: str,
    write: Callable[[str], None],
    *,
    mode: int | None = None,
    prefix: str = ".tmp-",
    through: bool = False,
) -> None:
    """Call ``write(tmp)`` on a new temporary file in the folder of ``path``, then rename it to ``path``.

    The rename replaces a file or a symbolic link at ``path`` itself, never the link's target
    (what dtrace's own folders need). On any failure (``write`` raising included) the temporary
    file is removed and the exception propagates.

    ``through=True`` is for a path the user named (``-o``): a rename happens only over a regular
    file or where nothing is; a symbolic link (``/dev/stdout``) or a node that is not a regular
    file (a FIFO, a character device such as ``/dev/full``) is written through, in place, once
    the whole content is ready (:func:`write_through`), so the node stays what it is.

    Parameters
    ----------
    path
        The file to write; its folder must exist.
    write
        Writes the whole content to the path it is given.
    mode
        Permission bits of the file (default: as a plain ``open`` would create it).
    prefix
        Prefix of the temporary file's name (dtrace's own folders clean up their prefix).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> atomic_write(str(d / "a.txt"), lambda tmp: pathlib.Path(tmp).write_text("hi"))
    >>> (d / "a.txt").read_text(), [p.name for p in d.iterdir()]
    ('hi', ['a.txt'])
    """
    if through and _written_through(path):
        write_through(path, write)
        return
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=os.path.dirname(os.path.abspath(path)))
    try:
        os.close(fd)
        write(tmp)
        os.chmod(tmp, default_mode() if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def _written_through(path: str) -> bool:
    """Whether ``path`` is a symbolic link or an existing node that is not a regular file or a folder."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISLNK(st.st_mode) or not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode))


def write_through(path: str, write: Callable[[str], None]) -> None:
    """Call ``write(tmp)`` on a temporary file elsewhere, then copy its bytes into ``path``, opened
    for writing as it is (a link followed, a device or a FIFO written, nothing renamed).

    Writing into ``path`` starts only once the content is whole, so a failure while producing
    it leaves ``path`` untouched. A FIFO is opened like ``cat > FIFO`` would: it waits for a
    reader.
    """
    with tempfile.TemporaryDirectory(prefix="dtrace-") as d:
        tmp = os.path.join(d, "content")
        write(tmp)
        with open(tmp, "rb") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)


def atomic_write_bytes(path: str, data: bytes, *, mode: int | None = None, prefix: str = ".tmp-") -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`): through the temporary
    file's own descriptor (no second open by name; a cache writes one per input)."""
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=os.path.dirname(os.path.abspath(path)))
    try:
        with open(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), default_mode() if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
