"""Units for people: the one place that turns integer ns and byte counts into readable text.

Tables hold integer ns and bytes; renderers and the CLI call these functions to show them
(:func:`pick_unit` for a whole column, :func:`time_unit` for one value or an axis,
:func:`fmt_time`, :func:`fmt_bytes`, :func:`format_size` for single values).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


def _finite(v: Any) -> bool:
    """Whether a number is finite (NumPy's scalars too; numpy is imported only for other kinds:
    the input planner and the up-to-date path import this module without numpy)."""
    try:
        return math.isfinite(v)
    except TypeError:
        import numpy  # noqa: PLC0415

        return bool(numpy.isfinite(v))


TIME_UNITS = (("s", 1e9), ("ms", 1e6), ("µs", 1e3), ("ns", 1.0))
"""Time units, largest first, with their size in ns."""


def time_unit(max_ns: float) -> tuple[str, float]:
    """The unit that shows ``max_ns`` with 1–3 integer digits: ``("ms", 1e6)``, ...

    Examples
    --------
    >>> time_unit(2.5e9), time_unit(37_000), time_unit(12)
    (('s', 1000000000.0), ('µs', 1000.0), ('ns', 1.0))
    """
    m = abs(float(max_ns)) if _finite(max_ns) else 0.0
    for unit, scale in TIME_UNITS:
        if m >= scale:
            return unit, scale
    return "ns", 1.0


def pick_unit(values: np.ndarray) -> tuple[str, float]:
    """A readable time unit for ns values: the largest one that keeps the median magnitude ≥ 1.

    Zeros and NaN are ignored; an all-zero column is shown in µs.

    Examples
    --------
    >>> import numpy as np
    >>> pick_unit(np.array([3_000_000, 12_000_000])), pick_unit(np.array([0, 0]))
    (('ms', 1000000.0), ('µs', 1000.0))
    >>> pick_unit(np.array([250, -400]))
    ('ns', 1.0)
    """
    import numpy as np  # noqa: PLC0415

    v = np.abs(np.asarray(values, dtype=np.float64))
    v = v[np.isfinite(v) & (v > 0)]
    if not v.size:
        return "µs", 1e3
    return time_unit(float(np.median(v)))


BYTE_UNITS = (("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10), ("B", 1.0))
"""Byte units, largest first (binary, as memory is counted)."""
RATE_UNITS = (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("KB/s", 1e3), ("B/s", 1.0))
"""Byte rates, largest first (decimal, as bandwidth is quoted)."""


def _pick(values: np.ndarray, units: tuple[tuple[str, float], ...]) -> tuple[str, float]:
    """The largest of ``units`` that keeps the median magnitude of the finite non-zero values ≥ 1."""
    import numpy as np  # noqa: PLC0415

    v = np.abs(np.asarray(values, dtype=np.float64))
    v = v[np.isfinite(v) & (v > 0)]
    m = float(np.median(v)) if v.size else 0.0
    return next(((u, s) for u, s in units if m >= s), units[-1])


def pick_bytes_unit(values: np.ndarray) -> tuple[str, float]:
    """A readable unit for a column of byte counts (median magnitude ≥ 1 of it).

    Examples
    --------
    >>> import numpy as np
    >>> pick_bytes_unit(np.array([2_551_428_096, 1 << 30])), pick_bytes_unit(np.array([0, 512]))
    (('GiB', 1073741824.0), ('B', 1.0))
    """
    return _pick(values, BYTE_UNITS)


def pick_rate_unit(values: np.ndarray) -> tuple[str, float]:
    """A readable unit for a column of bytes per second.

    Examples
    --------
    >>> import numpy as np
    >>> pick_rate_unit(np.array([4.8e12, 3.3e12]))
    ('TB/s', 1000000000000.0)
    """
    return _pick(values, RATE_UNITS)


def fmt_time(ns: Any, *, trim: bool = False) -> str:
    """One time value with its own unit and three significant digits.

    ``trim`` drops trailing zeros (``3.4 s``, not ``3.40 s``) and shows whole ns, for running text.

    Examples
    --------
    >>> fmt_time(612_058_000), fmt_time(1_500), fmt_time(-2_000_000), fmt_time(0), fmt_time(float("nan"))
    ('612 ms', '1.50 µs', '-2.00 ms', '0', '–')
    >>> fmt_time(None)  # pandas' NA too
    '–'
    >>> fmt_time(9_999_600), fmt_time(99_960)
    ('10.0 ms', '100 µs')
    >>> fmt_time(212_300_000, trim=True), fmt_time(35_200, trim=True), fmt_time(3.4e9, trim=True)
    ('212 ms', '35.2 µs', '3.4 s')
    """
    try:
        v = float(ns)  # None, pandas' NA: missing
    except (TypeError, ValueError):
        return "–"
    if not _finite(v):
        return "–"
    if v == 0 and not trim:
        return "0"
    unit, scale = time_unit(v)
    x = v / scale
    if trim:
        return f"{x:.3g} {unit}" if abs(x) < 100 and unit != "ns" else f"{x:.0f} {unit}"
    return f"{sig3(x)} {unit}"


def fmt_pct(frac: float | None) -> str:
    """A fraction as a percentage: ``0.1234 → '12.3 %'``."""
    if frac is None or not _finite(frac):
        return "–"
    return f"{100.0 * frac:.1f} %"


def fmt_num(v: float | None) -> str:
    """A count or plain number: thousands separators, three significant digits for fractions."""
    if v is None or not _finite(v):
        return "–"
    if float(v).is_integer():
        return f"{int(v):,}"
    return sig3(v)


def fmt_bytes(v: float | None) -> str:
    """A byte count in B/KiB/MiB/GiB, three significant digits (negative: unknown)."""
    if v is None or not _finite(v) or v < 0:
        return "–"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(v) >= scale:
            return f"{sig3(v / scale)} {unit}"
    return f"{int(v)} B"


def format_size(n: int) -> str:
    """A size limit exactly: ``65536`` → ``'64 KiB'``; exact multiples of a binary unit keep that unit.

    Examples
    --------
    >>> format_size(64 << 30), format_size(1000)
    ('64 GiB', '1000 bytes')
    """
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def sig3(x: float) -> str:
    """Three significant digits with fixed decimals (``9.996 → '10.0'``, not ``'10.00'``)."""
    a = abs(x)
    decimals = 0 if a >= 100 else (1 if a >= 10 else 2)
    if decimals and abs(round(x, decimals)) >= 10 ** (3 - decimals):
        decimals -= 1
    return f"{x:,.{decimals}f}"
