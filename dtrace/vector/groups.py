"""Vectorised grouping primitives on numpy arrays: composite keys, lookups, running counts.

A partition holds many (rank, device) parts, so every per-partition computation groups by the
part first. These helpers turn several integer key columns into one dense int64 code, find the
first matching row of a key in another table, and count positions inside groups — each in one
vectorised pass, never a Python loop over groups or rows.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pandas as pd

I64 = np.int64


def unique(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values (``np.unique``, sort-based: numpy 2's hash-based ``np.unique`` is
    many times slower on large integer arrays).

    Examples
    --------
    >>> unique(np.array([3, 1, 3, 2])).tolist()
    [1, 2, 3]
    """
    x = np.asarray(x)
    seen = _seen(x)
    if seen is not None:  # integers in a small range: a table of the values present, no sort
        return (np.flatnonzero(seen[0]) + seen[1]).astype(x.dtype)
    s = np.sort(x)
    return s[np.r_[True, s[1:] != s[:-1]]] if s.size else s


def _seen(x: np.ndarray, limit: int = 0) -> tuple[np.ndarray, int] | None:
    """For integers in a range below ``limit`` (default a few times their number): which values of
    the range occur (a bool table from the smallest value) and that smallest value; else None."""
    if not x.size or x.ndim != 1 or not _ints(x):
        return None
    lo, hi = int(x.min()), int(x.max())
    if hi - lo >= (limit or max(4 * x.size, 1 << 16)):
        return None
    seen = np.zeros(hi - lo + 1, bool)
    seen[x.astype(I64) - lo] = True
    return seen, lo


def member(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.isin(a, b)``; for integer keys in a range of a few million, by a table of ``b``'s values
    (one pass over each, no sort): numpy chooses its table only for a range below six times
    the two sizes, and sorts both arrays otherwise (a partition's event rows against its few
    thousand kept rows).

    Examples
    --------
    >>> member(np.array([5, 7, 9]), np.array([9, 5])).tolist()
    [True, False, True]
    """
    a, b = np.asarray(a), np.asarray(b)
    seen = _seen(b, limit=max(6 * (a.size + b.size), 1 << 22)) if a.size and _ints(a) else None
    if seen is not None:
        table, lo = seen
        k = a.astype(I64) - lo
        inside = (k >= 0) & (k < table.size)
        return np.where(inside, table[np.where(inside, k, 0)], False)
    return cast(np.ndarray, np.isin(a, b))


def _ints(x: np.ndarray) -> bool:
    """Whether ``x`` holds integers that int64 holds (no uint64)."""
    return x.dtype.kind in "iu" and x.dtype != np.uint64


def unique_first(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values and the index of the first occurrence of each.

    Examples
    --------
    >>> v, i = unique_first(np.array([3, 1, 3, 2, 1]))
    >>> v.tolist(), i.tolist()
    ([1, 2, 3], [1, 3, 0])
    """
    x = np.asarray(x)
    seen = _seen(x) if x.size > 1 and (x[1:] < x[:-1]).any() else None  # a sorted x sorts in one pass
    if seen is not None:  # integers in a small range, out of order: the least index per value, no sort
        first = np.full(seen[0].size, x.size, I64)
        np.minimum.at(first, x.astype(I64) - seen[1], np.arange(x.size, dtype=I64))
        present = np.flatnonzero(seen[0])
        return (present + seen[1]).astype(x.dtype), first[present]
    order = np.argsort(x, kind="stable")
    s = x[order]
    m = np.r_[True, s[1:] != s[:-1]] if s.size else np.zeros(0, bool)
    return s[m], order[m].astype(I64)


def unique_inverse(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values and, for each element, the index of its value among them.

    Examples
    --------
    >>> v, inv = unique_inverse(np.array([3, 1, 3, 2]))
    >>> v.tolist(), inv.tolist()
    ([1, 2, 3], [2, 0, 2, 1])
    """
    x = np.asarray(x)
    seen = _seen(x)
    if seen is not None:  # integers in a small range: ranks from a table of the values present
        rank = np.cumsum(seen[0], dtype=I64) - 1
        return (np.flatnonzero(seen[0]) + seen[1]).astype(x.dtype), rank[x.astype(I64) - seen[1]]
    order = np.argsort(x, kind="stable")
    s = x[order]
    m = np.r_[True, s[1:] != s[:-1]] if s.size else np.zeros(0, bool)
    inv = np.empty(x.size, I64)
    inv[order] = np.cumsum(m) - 1
    return s[m], inv


def dense_codes(*keys: np.ndarray, compact: bool = True) -> tuple[np.ndarray, int]:
    """One dense code per distinct tuple of ``keys`` (codes ordered like the sorted tuples).

    Returns the codes and their number. Works for any integer keys (no range assumptions).
    ``compact=False`` may return codes with gaps (still ordered like the tuples, and the number
    returned is then an upper bound), saving a sort when only order and equality matter.

    Examples
    --------
    >>> codes, n = dense_codes(np.array([2, 0, 2, 0]), np.array([5, 9, 5, 1]))
    >>> codes.tolist(), n
    ([2, 1, 2, 0], 3)
    """
    if not keys or keys[0].size == 0:
        return np.zeros(0 if not keys else keys[0].size, I64), 0
    size = keys[0].size
    code, n = _key_codes(np.asarray(keys[0]))
    for k in keys[1:]:
        kc, m = _key_codes(np.asarray(k))
        code *= m
        code += kc
        n *= m
        if n > (1 << 40):  # keep the product small: re-densify before it could overflow
            uniq, code = unique_inverse(code)
            n = int(uniq.size)
    if not compact:
        return code, n
    if n <= max(4 * size, 1 << 16):  # codes in a small range: rank them by a table, no sort
        seen = np.zeros(n, bool)
        seen[code] = True
        rank = np.cumsum(seen, dtype=I64) - 1
        return rank[code], int(rank[-1]) + 1
    uniq, inv = unique_inverse(code)
    return inv, int(uniq.size)


def _key_codes(k: np.ndarray) -> tuple[np.ndarray, int]:
    """Codes of one key ordered like its values, and their number (an upper bound where they
    have gaps): an integer key in a small range is its offset from the smallest value (no hash,
    no sort), any other key its rank among the distinct values."""
    if (k.dtype.kind in "ib" or (k.dtype.kind == "u" and k.dtype.itemsize < 8)) and k.size:
        lo, hi = int(k.min()), int(k.max())
        if hi - lo < max(2 * k.size, 1 << 16):
            return k.astype(I64) - lo, hi - lo + 1
    if k.dtype.kind in "iufb" and k.ndim == 1 and k.size > 4096:
        # a key in long runs (a thread's id on its consecutive events): the runs' values coded
        starts, ends = run_bounds(k)
        if starts.size <= k.size // 8:
            rc, uniq = pd.factorize(k[starts], sort=True)
            return np.repeat(rc.astype(I64), ends - starts), max(len(uniq), 1)
    kc, uniq = pd.factorize(k, sort=True)
    return kc.astype(I64), max(len(uniq), 1)


def shared_codes(left: tuple[np.ndarray, ...], right: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Dense codes of key tuples of two tables in one code space (equal tuples, equal codes)."""
    n = left[0].size
    both = tuple(np.concatenate([np.asarray(a), np.asarray(b)]) for a, b in zip(left, right))
    codes, _ = dense_codes(*both)
    return codes[:n], codes[n:]


def joint_keys(left: tuple[np.ndarray, ...], right: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray] | None:
    """One int64 key per row of two tables of integer key columns (equal tuples, equal keys;
    ordered like the tuples, but not dense: see :func:`shared_codes`), each column offset by the
    least value of both tables: no sort, no hash. None where a column is not of integers or
    their ranges multiply past 2**62.

    Examples
    --------
    >>> [k.tolist() for k in joint_keys((np.array([0, 1]), np.array([5, 7])), (np.array([1]), np.array([7])))]
    [[0, 5], [5]]
    """
    lkey, rkey = np.zeros(left[0].size, I64), np.zeros(right[0].size, I64)
    total = 1
    for a, b in zip(left, right):
        a, b = np.asarray(a), np.asarray(b)
        if any(k.dtype.kind not in "iub" or k.dtype == np.uint64 for k in (a, b)):
            return None
        lo = min(int(a.min()), int(b.min()))
        span = max(int(a.max()), int(b.max())) - lo + 1
        total *= span
        if total >= 1 << 62:
            return None
        lkey = lkey * span + (a.astype(I64) - lo)
        rkey = rkey * span + (b.astype(I64) - lo)
    return lkey, rkey


def first_match(left: tuple[np.ndarray, ...], right: tuple[np.ndarray, ...]) -> np.ndarray:
    """For each row of ``right``, the index of the first row of ``left`` with equal keys, or -1.

    Examples
    --------
    >>> first_match((np.array([0, 0, 1, 0]), np.array([7, 8, 7, 7])),
    ...             (np.array([0, 1, 1, 0]), np.array([7, 7, 8, 8]))).tolist()
    [0, 2, -1, 1]
    """
    if right[0].size == 0:
        return np.empty(0, I64)
    if left[0].size == 0:
        return np.full(right[0].size, -1, I64)
    both = joint_keys(left, right)
    lc, rc = both if both is not None else shared_codes(left, right)
    uniq, first = unique_first(lc)
    j = np.searchsorted(uniq, rc)
    jj = np.minimum(j, uniq.size - 1)
    return np.where(uniq[jj] == rc, first[jj], -1).astype(I64)


def lexsort_ints(keys: tuple[np.ndarray, ...] | list[np.ndarray]) -> np.ndarray:
    """``np.lexsort(keys)`` (the last key primary, ties in input order) for integer keys, the same
    permutation several times faster on data not already in order: the leading keys whose ranges
    multiply below 2**62 become one int64 key sorted by one stable argsort; the remaining keys
    order only the runs of equal leading keys (``np.lexsort`` on those rows alone).

    Examples
    --------
    >>> lexsort_ints((np.array([3, 1, 2, 1]), np.array([0, 1, 0, 0]))).tolist()
    [3, 2, 0, 1]
    """
    ks = [np.asarray(k) for k in keys]
    if not ks or not ks[0].size or any(k.dtype.kind not in "iub" or k.dtype == np.uint64 for k in ks):
        return cast(np.ndarray, np.lexsort(ks))
    combined = np.zeros(ks[0].size, I64)
    total, used = 1, 0
    for k in reversed(ks):  # the primary key first
        lo, hi = int(k.min()), int(k.max())
        if total * (hi - lo + 1) >= 1 << 62:
            break
        total *= hi - lo + 1
        combined = combined * (hi - lo + 1) + (k.astype(I64) - lo)
        used += 1
    if not used:
        return cast(np.ndarray, np.lexsort(ks))
    order = np.argsort(combined, kind="stable")
    rest = ks[: len(ks) - used]
    if rest:
        c = combined[order]
        tie = np.zeros(c.size, bool)
        tie[1:] = c[1:] == c[:-1]
        tie[:-1] |= tie[1:]
        pos = np.flatnonzero(tie)  # the runs of equal leading keys, in place
        if pos.size:
            sub = order[pos]
            order[pos] = sub[np.lexsort([k[sub] for k in rest] + [combined[sub]])]
    return order


def text_codes(values: Any) -> tuple[list[str], np.ndarray]:
    """The distinct texts of a column of ``values`` (each value as ``str(value)``; bytes decoded
    as UTF-8), sorted, and each value's position among them: what ``np.unique(values.astype(str),
    return_inverse=True)`` gives for texts, None and numbers, without NumPy's fixed-width strings,
    as wide as the longest value for every row (one name of a megabyte among a million events
    asked for terabytes). Hashes the values, converts and sorts the distinct ones only; a text
    ending in NUL characters keeps them (NumPy's strings drop them).

    Examples
    --------
    >>> names, codes = text_codes(np.array(["b", "a", None, "b"], dtype=object))
    >>> names, codes.tolist()
    (['None', 'a', 'b'], [2, 1, 0, 2])
    >>> text_codes(np.array([1, 1.0, "1"], dtype=object))[1].tolist()  # texts "1", "1.0", "1"
    [0, 1, 0]
    """
    obj = np.asarray(values, dtype=object).ravel()
    codes, uniq = pd.factorize(obj, use_na_sentinel=False)
    distinct = np.asarray(uniq, dtype=object).tolist()
    if not all(type(u) is str for u in distinct):  # not only texts: 1 and 1.0 hash alike, their texts differ
        texts_of = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in obj.tolist()]
        codes, uniq = pd.factorize(np.array(texts_of, dtype=object), use_na_sentinel=False)
        distinct = np.asarray(uniq, dtype=object).tolist()
    texts = sorted(distinct)  # distinct texts now: factorized strings
    at = {t: i for i, t in enumerate(texts)}
    remap = np.fromiter((at[u] for u in distinct), I64, len(distinct))
    return texts, remap[codes] if codes.size else np.empty(0, I64)


_WIDEST = 1024
"""The longest text :func:`string_rank` sorts as a NumPy string array (fixed width); beyond, as
Python strings (the same order: by code point, ties in first-seen order)."""


def string_rank(values: Any) -> np.ndarray:
    """Rank of each value in string order (equal strings, equal ranks): sorts the distinct
    values only, so a column of a few names over millions of rows costs one hash pass (of the
    Arrow strings themselves for a pandas text column's array, without a Python string each).

    Examples
    --------
    >>> string_rank(np.array(["b", "a", "b", "c"], dtype=object)).tolist()
    [1, 0, 1, 2]
    >>> string_rank(pd.array(["b", "a", "b"], dtype="str")).tolist()
    [1, 0, 1]
    >>> string_rank(np.array(["b" * 2000, "a" * 2000 + "z", "b" * 2000, "a" * 2001], dtype=object)).tolist()
    [2, 1, 2, 0]
    """
    text = isinstance(values, pd.api.extensions.ExtensionArray) and isinstance(values.dtype, pd.StringDtype)
    codes, uniq = pd.factorize(values if text else np.asarray(values, dtype=object), use_na_sentinel=False)
    strs = [str(u) for u in np.asarray(uniq, dtype=object)]
    if max(map(len, strs), default=0) <= _WIDEST:
        order = np.argsort(np.array(strs, dtype=str), kind="stable")
    else:  # NumPy's strings are as wide as the longest one: a name of a megabyte made each a megabyte
        order = np.array(sorted(range(len(strs)), key=strs.__getitem__), dtype=np.intp)
    rank = np.empty(order.size, I64)
    rank[order] = np.arange(order.size)
    return rank[codes] if codes.size else np.empty(0, I64)


def cumcount(codes: np.ndarray) -> np.ndarray:
    """Position of each element among the earlier elements with the same code.

    Examples
    --------
    >>> cumcount(np.array([3, 1, 3, 3, 1])).tolist()
    [0, 0, 1, 2, 1]
    """
    n = len(codes)
    if not n:
        return np.zeros(0, I64)
    order = np.argsort(codes, kind="stable")
    c = np.asarray(codes)[order]
    starts = np.r_[0, np.flatnonzero(c[1:] != c[:-1]) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    out = np.empty(n, I64)
    out[order] = np.arange(n) - run_start
    return out


def cummax_by(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` restarting at each new value of ``group`` (sorted by group).

    Examples
    --------
    >>> cummax_by(np.array([0, 0, 0, 1, 1]), np.array([5, 3, 7, 1, 2])).tolist()
    [5, 5, 7, 1, 2]
    """
    n = len(values)
    if not n:
        return np.zeros(0, I64)
    v = np.asarray(values, I64)
    gi = np.cumsum(np.r_[True, group[1:] != group[:-1]]) - 1
    lo = int(v.min())
    span = int(v.max()) - lo + 1
    if (int(gi[-1]) + 1) * span < 2**62:  # one accumulate over group-offset values
        off = gi * span
        return cast(np.ndarray, np.maximum.accumulate(v - lo + off) - off + lo)
    return cast(np.ndarray, pd.Series(v).groupby(gi, sort=False).cummax().to_numpy(I64))


def run_bounds(sorted_codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive) of each run of equal consecutive values (in a sorted array: of
    each distinct value)."""
    n = sorted_codes.size
    if not n:
        return np.empty(0, I64), np.empty(0, I64)
    starts = np.r_[0, np.flatnonzero(sorted_codes[1:] != sorted_codes[:-1]) + 1].astype(I64)
    return starts, np.r_[starts[1:], n].astype(I64)


def sum_by(group: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Exact int64 sum of ``values`` per group ``0..n_groups-1``."""
    out = np.zeros(n_groups, I64)
    if group.size:
        np.add.at(out, group, np.asarray(values).astype(I64))
    return out


def min_by(group: np.ndarray, values: np.ndarray, n_groups: int, fill: int) -> np.ndarray:
    """Minimum of int64 ``values`` per group (``fill`` for empty groups)."""
    out = np.full(n_groups, fill, I64)
    if group.size:
        np.minimum.at(out, group, np.asarray(values).astype(I64))
    return out


def max_by(group: np.ndarray, values: np.ndarray, n_groups: int, fill: int) -> np.ndarray:
    """Maximum of int64 ``values`` per group (``fill`` for empty groups)."""
    out = np.full(n_groups, fill, I64)
    if group.size:
        np.maximum.at(out, group, np.asarray(values).astype(I64))
    return out


def count_by(group: np.ndarray, n_groups: int) -> np.ndarray:
    return np.bincount(group, minlength=n_groups).astype(I64) if group.size else np.zeros(n_groups, I64)


def quantile_by(group: np.ndarray, values: np.ndarray, n_groups: int, q: float) -> np.ndarray:
    """The ``q`` quantile of ``values`` per group ``0..n_groups-1`` (NaN for an empty group), with
    linear interpolation between the two nearest values (numpy's and pandas' default).

    Examples
    --------
    >>> quantile_by(np.array([0, 0, 0, 2, 0]), np.array([4, 1, 3, 9, 2]), 3, 0.5).tolist()
    [2.5, nan, 9.0]
    >>> quantile_by(np.array([1, 1, 1]), np.array([10, 0, 20]), 2, 0.25).tolist()
    [nan, 5.0]
    """
    return quantiles_by(group, values, n_groups, (q,))[0]


def quantiles_by(group: np.ndarray, values: np.ndarray, n_groups: int, qs: tuple[float, ...]) -> list[np.ndarray]:
    """Several quantiles of ``values`` per group (see :func:`quantile_by`), all from one sort of
    the values by (group, value): one int64 key when the values are non-negative integers whose
    range times the groups fits in it, else a lexicographic sort.

    Examples
    --------
    >>> [q.tolist() for q in quantiles_by(np.array([0, 0, 1, 0]), np.array([3, 1, 7, 2]), 2, (0.0, 1.0))]
    [[1.0, 7.0], [3.0, 7.0]]
    """
    group = np.asarray(group, I64)
    if not group.size:
        return [np.full(n_groups, np.nan) for _ in qs]
    v = np.asarray(values)
    top = int(v.max()) + 1 if v.dtype.kind in "iu" and v.min() >= 0 else 0
    if top and top * max(n_groups, 1) < (1 << 62):
        # stable (timsort): values that arrive grouped and partly ordered sort in a few passes
        key = np.sort(group * top + v.astype(I64), kind="stable")
        sv = key - np.repeat(np.arange(n_groups, dtype=I64) * top, count_by(group, n_groups))
        sv = sv.astype(np.float64)
    else:
        sv = v[np.lexsort((v, group))].astype(np.float64)
    n = count_by(group, n_groups)
    first = np.concatenate(([0], np.cumsum(n)[:-1]))
    has = n > 0
    out = []
    for q in qs:
        res = np.full(n_groups, np.nan)
        pos = q * (n[has] - 1)  # within the group, so the fraction does not depend on where it sits
        k = np.floor(pos)
        lo = first[has] + k.astype(I64)
        hi = np.minimum(lo + 1, first[has] + n[has] - 1)
        res[has] = sv[lo] + (sv[hi] - sv[lo]) * (pos - k)
        out.append(res)
    return out
