"""Atomic file writes: a temporary file beside the target, renamed into place.

Every file dtrace writes whole (cache entries, reports, CSVs, timelines, generated traces) goes
through :func:`atomic_write`, so a reader never sees half a file and a failed write leaves
nothing behind. See docs/architecture.md, "Caching and trust".
"""

from __future__ import annotations

import os
import tempfile
from typing import Callable


def default_mode() -> int:
    """The mode a plain ``open`` gives a new file (``0o666`` less the umask)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write(path: str, write: Callable[[str], None], *, mode: int | None = None, prefix: str = ".tmp-") -> None:
    """Call ``write(tmp)`` on a new temporary file in the folder of ``path``, then rename it to ``path``.

    The rename replaces a file or a symbolic link at ``path`` itself, never the link's target.
    On any failure (``write`` raising included) the temporary file is removed and the exception
    propagates.

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


def atomic_write_bytes(path: str, data: bytes, *, mode: int | None = None, prefix: str = ".tmp-") -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`)."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    atomic_write(path, write, mode=mode, prefix=prefix)
