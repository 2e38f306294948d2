"""Differences between two analyses (run A → run B): what got slower, what got faster.

Pure functions of two :class:`~dtrace.results.Results`; nothing is read or written here.
Four levels, each from the table that carries it:

``breakdown``
    The breakdown components (``computation``, ``exposed_comm``, ``exposed_memcpy``,
    ``idle``, ``busy``, ``total``, ``comm``, ``memcpy``) from ``breakdown``; no counts.
``class``
    Kernel classes from ``classes`` (else the ``class`` column of ``kernels``, else its
    ``category``): launch count and GPU time.
``kernel``
    Kernel names from ``kernels``: launch count and GPU time.
``op``
    Host ops from ``ops``: call count and GPU time of the op's subtree (``gpu_subtree_ns``,
    the GPU time the op costs including the ops it calls).

Values are summed over ranks and, with ``per="gpu"`` (the default), divided by the number
of (rank, device) parts of that run, so runs of different sizes compare per GPU; with
``per="job"`` they are job totals. Times stay integer ns (rounded after the division);
counts per GPU are fractional. Rows present in one run only have zeros for the other and
``presence`` ``only_a`` / ``only_b``. Within a level, rows are sorted by impact: absolute
time delta, then absolute count delta, then key.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from ..core.constants import DIFF_LEVELS as LEVELS
from ..core.constants import DIFF_PER as PER
from ..core.dtypes import empty_frame
from ..errors import UsageError
from ..results import Results

COLUMNS = (
    "level",
    "key",
    "presence",
    "count_a",
    "count_b",
    "count_delta",
    "time_a_ns",
    "time_b_ns",
    "time_delta_ns",
    "time_ratio",
)
BREAKDOWN_KEYS = ("computation", "exposed_comm", "exposed_memcpy", "idle", "busy", "total", "comm", "memcpy")


def _has(results: Results, name: str) -> bool:
    return name in results.table_names


def class_source(results: Results) -> tuple[pd.DataFrame, str] | None:
    """Per (rank, device, class): ``count``, ``total_ns``, and where the classes came from.

    ``classes`` when present, else the ``kernels`` table grouped by its ``class`` column, else
    by its ``category``; ``None`` when neither table exists.
    """
    if _has(results, "classes"):
        c = results.table("classes")
        if {"rank", "device", "class", "count", "total_ns"} <= set(c.columns):
            return c[["rank", "device", "class", "count", "total_ns"]], "classes"
    if _has(results, "kernels"):
        k = results.table("kernels")
        col = "class" if "class" in k.columns else ("category" if "category" in k.columns else None)
        if col is None:
            return None
        g = (
            k.groupby(["rank", "device", col], observed=True, sort=True)[["count", "total_ns"]]
            .sum()
            .reset_index()
            .rename(columns={col: "class"})
        )
        return g, f"kernels.{col}"
    return None


def level_totals(results: Results, level: str) -> pd.DataFrame | None:
    """``key``, ``count``, ``time_ns`` summed over all ranks for one level; ``None`` if absent.

    Examples
    --------
    >>> import pandas as pd
    >>> from dtrace.results import Results
    >>> k = pd.DataFrame({"rank": [0, 1], "device": [0, 1], "name": ["gemm", "gemm"],
    ...                   "count": [2, 3], "total_ns": [10, 20]})
    >>> level_totals(Results({"kernels": k}), "kernel").to_dict("records")
    [{'key': 'gemm', 'count': 5.0, 'time_ns': 30}]
    """
    if level not in LEVELS:
        raise UsageError(f"unknown diff level {level!r}; valid: {', '.join(LEVELS)}")
    if level == "breakdown":
        if not _has(results, "breakdown"):
            return None
        bd = results.table("breakdown")
        keys = [k for k in BREAKDOWN_KEYS if f"{k}_ns" in bd.columns]
        return pd.DataFrame(
            {"key": keys, "count": np.full(len(keys), np.nan), "time_ns": [int(bd[f"{k}_ns"].sum()) for k in keys]}
        )
    if level == "class":
        src = class_source(results)
        if src is None:
            return None
        frame, key = src[0], "class"
        count, time = "count", "total_ns"
    elif level == "kernel":
        if not _has(results, "kernels"):
            return None
        frame, key, count, time = results.table("kernels"), "name", "count", "total_ns"
    else:
        if not _has(results, "ops"):
            return None
        frame, key, count, time = results.table("ops"), "op", "count", "gpu_subtree_ns"
    g = frame.groupby(frame[key].astype(str), sort=True)[[count, time]].sum()
    return pd.DataFrame(
        {"key": g.index.to_numpy(object), "count": g[count].to_numpy(np.float64), "time_ns": g[time].to_numpy(np.int64)}
    )


def n_parts(results: Results) -> int:
    """Number of (rank, device) parts of a run (from ``breakdown``, else ``kernels``)."""
    for name in ("breakdown", "kernels", "classes", "ops"):
        if _has(results, name):
            t = results.table(name)
            if {"rank", "device"} <= set(t.columns) and len(t):
                return int(len(t[["rank", "device"]].drop_duplicates()))
    return 0


def diff_totals(a: pd.DataFrame, b: pd.DataFrame, *, level: str, n_a: int = 1, n_b: int = 1) -> pd.DataFrame:
    """Diff two ``key, count, time_ns`` frames, each divided by its part count first.

    Examples
    --------
    >>> import pandas as pd
    >>> a = pd.DataFrame({"key": ["x", "y"], "count": [4.0, 2.0], "time_ns": [100, 50]})
    >>> b = pd.DataFrame({"key": ["x", "z"], "count": [4.0, 1.0], "time_ns": [160, 5]})
    >>> d = diff_totals(a, b, level="kernel")
    >>> d[["key", "presence", "time_delta_ns", "count_delta"]].to_dict("records")  # doctest: +NORMALIZE_WHITESPACE
    [{'key': 'x', 'presence': 'both', 'time_delta_ns': 60, 'count_delta': 0.0},
     {'key': 'y', 'presence': 'only_a', 'time_delta_ns': -50, 'count_delta': -2.0},
     {'key': 'z', 'presence': 'only_b', 'time_delta_ns': 5, 'count_delta': 1.0}]
    """
    na, nb = max(int(n_a), 1), max(int(n_b), 1)
    m = pd.merge(
        a[["key", "count", "time_ns"]],
        b[["key", "count", "time_ns"]],
        on="key",
        how="outer",
        suffixes=("_a", "_b"),
        sort=True,
        indicator=True,
    )
    where = m["_merge"].astype(str).to_numpy()
    in_a = where != "right_only"
    in_b = where != "left_only"
    count_a = m["count_a"].to_numpy(np.float64) / na
    count_b = m["count_b"].to_numpy(np.float64) / nb
    count_a = np.where(in_a, count_a, 0.0)
    count_b = np.where(in_b, count_b, 0.0)
    time_a = np.rint(np.nan_to_num(m["time_ns_a"].to_numpy(np.float64)) / na).astype(np.int64)
    time_b = np.rint(np.nan_to_num(m["time_ns_b"].to_numpy(np.float64)) / nb).astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(time_a > 0, time_b / np.where(time_a > 0, time_a, 1), np.nan)
    out = pd.DataFrame(
        {
            "level": level,
            "key": m["key"].to_numpy(object),
            "presence": np.where(in_a & in_b, "both", np.where(in_a, "only_a", "only_b")).astype(object),
            "count_a": count_a,
            "count_b": count_b,
            "count_delta": count_b - count_a,
            "time_a_ns": time_a,
            "time_b_ns": time_b,
            "time_delta_ns": time_b - time_a,
            "time_ratio": ratio,
        }
    )
    order = np.lexsort(
        (
            out["key"].to_numpy(str),
            -np.abs(np.nan_to_num(out["count_delta"].to_numpy())),
            -np.abs(out["time_delta_ns"].to_numpy()),
        )
    )
    return out.iloc[order].reset_index(drop=True)


def diff(a: Results, b: Results, *, levels: Iterable[str] = LEVELS, per: str = "gpu") -> pd.DataFrame:
    """Per level (breakdown, class, kernel, op): count and time of A and B and their deltas.

    Levels whose table is absent from either run are left out (see :func:`missing_levels`).

    Parameters
    ----------
    a, b
        The two runs (``dtrace.load(...)`` or ``dtrace.analyze(...)``); deltas are ``b − a``.
    levels
        Which levels to compare, in output order.
    per
        ``"gpu"``: values per (rank, device) part of each run; ``"job"``: job totals.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`COLUMNS`; ``time_*_ns`` int64, ``count_*`` float64, ``time_ratio``
        ``b / a`` (NaN when A has no time), sorted by impact within each level.
    """
    if per not in PER:
        raise UsageError(f"unknown per {per!r}; valid: {', '.join(PER)}")
    levels = list(levels)
    for lv in levels:
        if lv not in LEVELS:
            raise UsageError(f"unknown diff level {lv!r}; valid: {', '.join(LEVELS)}")
    na, nb = (n_parts(a), n_parts(b)) if per == "gpu" else (1, 1)
    frames = []
    for lv in levels:
        ta, tb = level_totals(a, lv), level_totals(b, lv)
        if ta is None or tb is None:
            continue
        frames.append(diff_totals(ta, tb, level=lv, n_a=na, n_b=nb))
    if not frames:
        return empty()
    return pd.concat(frames, ignore_index=True)


def missing_levels(a: Results, b: Results, levels: Iterable[str] = LEVELS) -> dict[str, str]:
    """``{level: reason}`` for the levels :func:`diff` leaves out."""
    out = {}
    for lv in levels:
        gone = [name for name, r in (("A", a), ("B", b)) if level_totals(r, lv) is None]
        if gone:
            table = {"breakdown": "breakdown", "class": "classes/kernels", "kernel": "kernels", "op": "ops"}[lv]
            out[lv] = f"table {table} absent in run {' and '.join(gone)}"
    return out


def empty() -> pd.DataFrame:
    """An empty diff with the declared columns and dtypes."""
    dtypes = {
        "level": object,
        "key": object,
        "presence": object,
        "count_a": np.float64,
        "count_b": np.float64,
        "count_delta": np.float64,
        "time_a_ns": np.int64,
        "time_b_ns": np.int64,
        "time_delta_ns": np.int64,
        "time_ratio": np.float64,
    }
    return empty_frame({c: dtypes[c] for c in COLUMNS})
