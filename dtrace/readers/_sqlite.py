"""Open an SQLite input (an Nsight Systems report, a rocpd database) without writing beside it.

A database alone is opened read-only and immutable: no lock, and no ``-shm``/``-wal`` files
created in the input's folder. One with a write-ahead log (``-wal``: its latest changes) or a
rollback journal (``-journal``: a transaction in progress) beside it is copied, with that file,
into a temporary folder and read there: SQLite applies the log (or rolls the journal back) in
the copy, so what is read is the database as its writer last left it, and the input's folder is
never written to.

Reading is bounded in time (:data:`DB_SECONDS`, more for a large file: :func:`time_budget`): a
database whose tables are views that never finish (a recursive CTE, a huge cross join) is
interrupted, and the input fails in one line instead of hanging the run.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from ._io import open_regular

SIDE_FILES = ("-wal", "-journal")
"""Files beside a database that hold part of its content (fingerprinted with it)."""


DB_SECONDS = 120.0
"""The least time a database may take to read, all its queries together ..."""
DB_BYTES_PER_S = 20e6
"""... and more for a large one: its size at this rate (a 10 GB report: 500 s)."""
_CHECK_EVERY = 20_000
"""SQLite virtual-machine steps between two looks at the clock."""


def time_budget(path: str) -> float:
    """Seconds the database at ``path`` may take to read (:data:`DB_SECONDS` at least)."""
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    return max(DB_SECONDS, size / DB_BYTES_PER_S)


class ReadOnlyDb:
    """A read-only connection (``con``) to the SQLite file ``path``; :meth:`close` removes the
    temporary copy, if one was made. A context manager. A query running past the database's time
    budget (:func:`time_budget`) is interrupted (``sqlite3.OperationalError``, and
    :attr:`timed_out` is set)."""

    def __init__(self, path: str) -> None:
        apath = os.path.abspath(path)
        self.tmp: str | None = None
        self.budget = time_budget(apath)
        self.timed_out = False
        self._deadline = time.monotonic() + self.budget
        side = [s for s in SIDE_FILES if os.path.lexists(apath + s)]
        if not side:
            self.con = sqlite3.connect(Path(apath).as_uri() + "?mode=ro&immutable=1", uri=True)
            self.con.set_progress_handler(self._late, _CHECK_EVERY)
            return
        self.tmp = tempfile.mkdtemp(prefix="dtrace-sqlite-")
        try:
            copy = os.path.join(self.tmp, "db.sqlite")
            for src, dst in [(apath, copy)] + [(apath + s, copy + s) for s in side]:
                with open_regular(src) as f, open(dst, "xb") as g:
                    shutil.copyfileobj(f, g, 1 << 22)
            self.con = sqlite3.connect(copy)
            self.con.set_progress_handler(self._late, _CHECK_EVERY)
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise

    def _late(self) -> int:
        """SQLite's progress handler: non-zero (interrupt) once the budget is spent."""
        if time.monotonic() > self._deadline:
            self.timed_out = True
            return 1
        return 0

    def why(self, exc: BaseException) -> str:
        """The reason to print for a query's error: the time budget when it was interrupted."""
        if self.timed_out:
            return f"reading it took longer than {self.budget:.0f} s (a view or table that never ends?): interrupted"
        return str(exc)

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
