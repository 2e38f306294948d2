"""Interval arithmetic against a brute-force timeline computed in the test."""

import numpy as np
import pytest

from dtrace.analyses.breakdown import breakdown_values
from dtrace.vector.intervals import clip_stream_overlaps, measure, overlap, union


def brute(starts, ends, horizon):
    t = np.zeros(horizon, bool)
    for s, e in zip(starts, ends):
        t[s:e] = True
    return t


@pytest.mark.parametrize("seed", range(20))
def test_union_and_overlap_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    n, m, h = rng.integers(0, 40), rng.integers(0, 40), 500
    a_s = rng.integers(0, h - 20, n)
    a_e = a_s + rng.integers(0, 20, n)
    b_s = rng.integers(0, h - 20, m)
    b_e = b_s + rng.integers(0, 20, m)
    A, B = union(a_s, a_e), union(b_s, b_e)
    ta, tb = brute(a_s, a_e, h), brute(b_s, b_e, h)
    assert measure(A) == ta.sum()
    assert overlap(A, B) == (ta & tb).sum()
    assert np.all(A[0][1:] > A[1][:-1])  # disjoint, non-touching, sorted


@pytest.mark.parametrize("seed", range(10))
def test_breakdown_invariant_and_brute_force(seed):
    rng = np.random.default_rng(100 + seed)
    n, h = 60, 2000
    s = rng.integers(0, h - 50, n)
    e = s + rng.integers(0, 50, n)
    cat = rng.choice(["compute", "comm", "memcpy", "memset"], n)
    v = breakdown_values(s, e, cat)
    comp = brute(s[cat == "compute"], e[cat == "compute"], h)
    comm = brute(s[cat == "comm"], e[cat == "comm"], h)
    mem = brute(s[np.isin(cat, ["memcpy", "memset"])], e[np.isin(cat, ["memcpy", "memset"])], h)
    assert v["computation_ns"] == comp.sum()
    assert v["exposed_comm_ns"] == (comm & ~comp).sum()
    assert v["exposed_memcpy_ns"] == (mem & ~comp & ~comm).sum()
    assert v["busy_ns"] == (comp | comm | mem).sum()
    assert v["total_ns"] == e.max() - s.min()
    assert v["computation_ns"] + v["exposed_comm_ns"] + v["exposed_memcpy_ns"] + v["idle_ns"] == v["total_ns"]


def test_clip_stream_overlaps():
    start = np.array([0, 10, 0, 5])
    end = np.array([15, 20, 3, 8])
    stream = np.array([1, 1, 2, 2])
    new_end, n, ns = clip_stream_overlaps(start, end, stream)
    assert new_end.tolist() == [10, 20, 3, 8]
    assert (n, ns) == (1, 5)


def test_clip_keeps_overlapping_kernels_of_the_last_stream():
    """Kernels that may overlap (``keep``, PDL) are cut only at a later event without ``keep`` on
    their stream; the last events of the input have none, whatever stream comes last (a part's
    kernels must not be cut or kept depending on the parts batched after it)."""
    start, end = np.array([0, 10, 0, 10]), np.array([15, 20, 15, 20])
    keep = np.ones(4, bool)
    for stream in ([1, 1, 2, 2], [2, 2, 1, 1]):
        new_end, n, ns = clip_stream_overlaps(start, end, np.array(stream), keep=keep)
        assert new_end.tolist() == [15, 20, 15, 20] and (n, ns) == (0, 0)
    # a memset after them on the same stream still cuts them
    new_end, n, ns = clip_stream_overlaps(
        np.array([0, 10, 12]), np.array([15, 20, 13]), np.zeros(3, np.int64), keep=np.array([True, True, False])
    )
    assert new_end.tolist() == [12, 12, 13] and (n, ns) == (2, 11)


def test_empty():
    assert measure(union(np.array([]), np.array([]))) == 0
    assert breakdown_values(np.array([], np.int64), np.array([], np.int64), np.array([]))["total_ns"] == 0
