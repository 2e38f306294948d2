"""The compiled scanner of Kineto events (``_scan.c``): loading it, and choosing it or the pure path.

The scanner walks each block of the events array once in C, without a Python object per event:
``ph``/``cat``/``name`` (and string pids/tids) become codes of strings interned across the
file's blocks, ``pid``/``tid``/``ts``/``dur`` and the integer arguments (``External id``,
``external id``, ``correlation``, ``stream``, ``device``, ``Sequence number``) fill int64 and
float64 columns, and the texts of the ``record_shapes`` arguments and of ``kind`` are kept as
byte spans of the block. An event it does not fully decode itself (a rare argument, an escape
or a non-ASCII byte outside the names, a value of an unexpected type, an integer written as a
string, a duplicate key, a ``[memory]`` event) is left to msgspec by its byte span, and a block
that is not a JSON array it can walk goes wholly to msgspec: the tables are those of the pure
path (msgspec structs, :mod:`.kineto`), which stays the reference.

The extension is optional (``setup.py``: built by pip with the machine's C compiler, skipped
without one). ``DTRACE_PURE_SCAN=1`` forces the pure path; ``DTRACE_REQUIRE_SCANNER=1`` makes
the test suite fail where the extension is missing (CI sets it).
"""

from __future__ import annotations

import os
from typing import Any

try:
    from ._scan import Scanner, first_codes, join_spans
except ImportError:  # no C compiler when the package was installed: the pure path
    Scanner = None  # type: ignore[assignment,misc]
    first_codes = join_spans = None  # type: ignore[assignment]

__all__ = ["AVAILABLE", "Scanner", "first_codes", "join_spans", "new_scanner", "pure_forced"]

AVAILABLE = Scanner is not None
"""The compiled scanner is built and importable."""


def pure_forced() -> bool:
    """``DTRACE_PURE_SCAN`` is set (and not ``0``): read with the pure-Python path."""
    return os.environ.get("DTRACE_PURE_SCAN", "") not in ("", "0")


def new_scanner() -> Any:
    """A fresh scanner for one file (its strings are interned across the file's blocks), or None
    where the pure path reads (the extension missing, or ``DTRACE_PURE_SCAN`` set)."""
    if Scanner is None or pure_forced():
        return None
    return Scanner()
