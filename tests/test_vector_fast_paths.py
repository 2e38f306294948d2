"""The sort-free fast paths of dtrace.vector give exactly what numpy's own functions (or a plain
reading of the definition) give, on keys in small and in huge ranges, sorted and unsorted."""

import numpy as np
import pandas as pd

from dtrace.core.dtypes import text_column
from dtrace.vector.groups import (
    cummax_by,
    dense_codes,
    first_match,
    joint_keys,
    lexsort_ints,
    member,
    text_codes,
    unique,
    unique_first,
    unique_inverse,
)
from dtrace.vector.intervals import difference, union

RNG = np.random.default_rng(23)


def _keys(n: int) -> np.ndarray:
    """An integer key column: a few small values, a huge range, or epoch-like nanoseconds."""
    kind = RNG.integers(0, 4)
    if kind == 0:
        return RNG.integers(-3, 5, n)
    if kind == 1:
        return RNG.integers(-(2**62), 2**62, n)
    if kind == 2:
        return RNG.integers(0, 10**12, n) + 1_700_000_000_000_000_000
    return np.sort(RNG.integers(0, 40, n))


def test_lexsort_ints_is_numpys_lexsort():
    for _ in range(400):
        n = int(RNG.integers(0, 80))
        keys = tuple(_keys(n) for _ in range(int(RNG.integers(1, 5))))
        assert lexsort_ints(keys).tolist() == np.lexsort(keys).tolist()


def test_unique_helpers_are_numpys_unique():
    for _ in range(300):
        n = int(RNG.integers(1, 80))
        x = _keys(n).astype(RNG.choice([np.int64, np.int32])) if RNG.random() < 0.5 else RNG.integers(0, 30, n)
        values, index, inverse = np.unique(x, return_index=True, return_inverse=True)
        assert unique(x).tolist() == values.tolist()
        v, first = unique_first(x)
        assert (v.tolist(), first.tolist()) == (values.tolist(), index.tolist())
        v, inv = unique_inverse(x)
        assert (v.tolist(), inv.tolist()) == (values.tolist(), inverse.tolist())
        assert v.dtype == values.dtype


def test_dense_codes_rank_the_distinct_tuples():
    for _ in range(300):
        n = int(RNG.integers(1, 60))
        keys = [_keys(n) for _ in range(int(RNG.integers(1, 4)))]
        tuples = list(zip(*(k.tolist() for k in keys)))
        rank = {t: i for i, t in enumerate(sorted(set(tuples)))}
        codes, count = dense_codes(*keys)
        assert codes.tolist() == [rank[t] for t in tuples] and count == len(rank)


def test_dense_codes_of_keys_in_long_runs():
    """Keys of thousands of rows in runs of one value (a thread's id on its consecutive events),
    of a huge range: coded by their runs, the same codes as ranking every row."""
    for _ in range(20):
        n = int(RNG.integers(5_000, 40_000))
        runs = int(RNG.integers(1, n // 10))
        values = RNG.choice(_keys(8), runs) if RNG.random() < 0.5 else RNG.integers(-(2**62), 2**62, runs)
        key = np.repeat(values, np.diff(np.sort(np.r_[0, RNG.integers(0, n, runs - 1), n])))
        other = RNG.integers(0, 3, key.size)
        _, want = np.unique(np.stack([key, other], axis=1), axis=0, return_inverse=True)
        codes, count = dense_codes(key, other)
        assert codes.tolist() == want.reshape(-1).tolist() and count == int(want.max()) + 1


def test_dense_codes_of_floats_in_runs():
    key = np.repeat([2.5, -1.0, 1e300, -1.0, 2.5, 0.0], 2_000)
    codes, count = dense_codes(key)
    assert count == 4 and codes.tolist() == np.repeat([2, 0, 3, 0, 2, 1], 2_000).tolist()


def test_member_is_numpys_isin():
    for _ in range(300):
        a = _keys(int(RNG.integers(0, 200))).astype(
            RNG.choice([np.int64, np.int32, np.uint32]) if RNG.random() < 0.3 else np.int64
        )
        b = (
            a[RNG.integers(0, max(a.size, 1), int(RNG.integers(0, 50)))]
            if a.size and RNG.random() < 0.7
            else _keys(int(RNG.integers(0, 50)))
        )
        assert member(a, b).tolist() == np.isin(a, b).tolist()
    rows = RNG.integers(0, 3_000_000, 5_000)  # a partition's event rows against a few kept ones
    kept = RNG.integers(0, 3_000_000, 300)
    assert member(rows, kept).tolist() == np.isin(rows, kept).tolist()


def test_first_match_finds_the_first_equal_row():
    for _ in range(300):
        nl, nr, nk = int(RNG.integers(0, 40)), int(RNG.integers(0, 40)), int(RNG.integers(1, 4))
        left = [RNG.integers(-2, 3, nl) if RNG.random() < 0.7 else RNG.integers(-(2**62), 2**62, nl) for _ in range(nk)]
        right = [np.concatenate([k[: nr // 2], RNG.integers(-2, 3, nr - min(nr // 2, k.size))]) for k in left]
        lt, rt = list(zip(*(k.tolist() for k in left))), list(zip(*(k.tolist() for k in right)))
        want = [lt.index(t) if t in lt else -1 for t in rt]
        assert first_match(tuple(left), tuple(right)).tolist() == want


def test_joint_keys_order_and_equality_like_the_tuples():
    left = (np.array([0, 1, 1]), np.array([5, -7, 9]))
    right = (np.array([1, 0]), np.array([9, 4]))
    lk, rk = joint_keys(left, right)
    pairs = list(zip(*(np.concatenate(k).tolist() for k in zip(left, right))))
    keys = np.concatenate([lk, rk]).tolist()
    assert sorted(range(5), key=lambda i: pairs[i]) == sorted(range(5), key=lambda i: keys[i])
    assert lk[2] == rk[0]
    assert joint_keys((np.array([0.5]),), (np.array([1.5]),)) is None  # not integers


def test_cummax_by_restarts_per_group():
    for _ in range(200):
        group = np.sort(RNG.integers(0, 5, int(RNG.integers(1, 50))))
        values = RNG.integers(-(10**15), 10**15, group.size)
        want = pd.Series(values).groupby(group, sort=False).cummax().tolist()
        assert cummax_by(group, values).tolist() == want


def test_difference_holds_exactly_the_points_of_a_not_in_b():
    for _ in range(300):

        def segments():
            s = RNG.integers(0, 40, int(RNG.integers(0, 7)))
            return union(s, s + RNG.integers(0, 6, s.size))

        a, b = segments(), segments()
        covered = lambda u, t: any(s <= t < e for s, e in zip(*u))  # noqa: E731 - a plain reading of a union
        s, e = difference(a, b)
        assert [t for t in range(50) if covered(a, t) and not covered(b, t)] == [
            t for t in range(50) if covered((s, e), t)
        ]
        assert (s[1:] > e[:-1]).all()  # sorted, disjoint, not touching
        if b[0].size:  # (without b, a comes back as it is)
            assert (e > s).all()  # no empty segment


def test_text_column_is_the_column_pandas_makes_of_the_strings():
    values = np.array(["b", "a", "ccc"], dtype=object)
    codes = np.array([2, 0, 0, 1, -1])
    made = pd.DataFrame({"x": text_column(values, codes)})
    plain = pd.DataFrame({"x": values[codes]})
    pd.testing.assert_frame_equal(made, plain)
    empty = pd.DataFrame({"x": text_column(values, np.array([], np.int64))})
    pd.testing.assert_frame_equal(empty, pd.DataFrame({"x": values[np.array([], np.int64)]}))
    mixed = np.array(["a", 1], dtype=object)
    pd.testing.assert_frame_equal(
        pd.DataFrame({"x": text_column(mixed, np.array([1, 0]))}), pd.DataFrame({"x": mixed[[1, 0]]})
    )


def test_text_codes_is_numpys_unique_of_the_texts():
    """``np.unique(values.astype(str), return_inverse=True)`` on names (unicode, None, numbers,
    empty texts), without its fixed-width array: the same sorted texts and positions."""
    pool = ["gemm", "nccl:all_reduce", "", "Ü-kernel", "a" * 40, None, 3, 2.5, "None", "3"]
    for _ in range(30):
        values = np.array([pool[i] for i in RNG.integers(0, len(pool), RNG.integers(0, 200))], dtype=object)
        want, winv = np.unique(values.astype(str), return_inverse=True)
        got, inv = text_codes(values)
        assert got == want.tolist() and inv.tolist() == winv.reshape(-1).tolist()
