"""Open an SQLite input (an Nsight Systems report, a rocpd database) without writing beside it.

A database alone is opened read-only and immutable: no lock, and no ``-shm``/``-wal`` files
created in the input's folder. One with a write-ahead log (``-wal``: its latest changes) or a
rollback journal (``-journal``: a transaction in progress) beside it is copied, with that file,
into a temporary folder and read there: SQLite applies the log (or rolls the journal back) in
the copy, so what is read is the database as its writer last left it, and the input's folder is
never written to.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

from ._io import open_regular

SIDE_FILES = ("-wal", "-journal")
"""Files beside a database that hold part of its content (fingerprinted with it)."""


class ReadOnlyDb:
    """A read-only connection (``con``) to the SQLite file ``path``; :meth:`close` removes the
    temporary copy, if one was made. A context manager."""

    def __init__(self, path: str) -> None:
        apath = os.path.abspath(path)
        self.tmp: str | None = None
        side = [s for s in SIDE_FILES if os.path.lexists(apath + s)]
        if not side:
            self.con = sqlite3.connect(Path(apath).as_uri() + "?mode=ro&immutable=1", uri=True)
            return
        self.tmp = tempfile.mkdtemp(prefix="dtrace-sqlite-")
        try:
            copy = os.path.join(self.tmp, "db.sqlite")
            for src, dst in [(apath, copy)] + [(apath + s, copy + s) for s in side]:
                with open_regular(src) as f, open(dst, "xb") as g:
                    shutil.copyfileobj(f, g, 1 << 22)
            self.con = sqlite3.connect(copy)
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise

    def close(self) -> None:
        con = getattr(self, "con", None)
        if con is not None:
            con.close()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def __enter__(self) -> ReadOnlyDb:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
