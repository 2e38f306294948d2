"""Interval arithmetic on int64 ns, vectorised with numpy.

A *union* is a pair of sorted arrays ``(starts, ends)`` of disjoint, non-touching segments.
Notes on the algorithms:

- :func:`union`: sort by start, take the running maximum of ends; a new segment begins where
  a start exceeds the running maximum of all previous ends (HTA's readable formulation).
- :func:`overlap`: the measure of ``A ∩ B`` for two unions, via the coverage function
  ``cov_B(t) = |B ∩ (-inf, t]|`` evaluated at A's boundaries with ``searchsorted`` and a prefix
  sum of B's lengths: ``|A ∩ B| = Σ cov_B(a_end) - cov_B(a_start)``. O((n+m) log m), no loop.
"""

from __future__ import annotations

import numpy as np

Union = tuple[np.ndarray, np.ndarray]
EMPTY: Union = (np.empty(0, np.int64), np.empty(0, np.int64))


def union(starts: np.ndarray, ends: np.ndarray) -> Union:
    """Merge possibly overlapping intervals into sorted disjoint segments.

    Examples
    --------
    >>> s, e = union(np.array([5, 0, 2, 20]), np.array([8, 3, 4, 25]))
    >>> s.tolist(), e.tolist()
    ([0, 5, 20], [4, 8, 25])
    """
    starts = np.asarray(starts, np.int64)
    ends = np.asarray(ends, np.int64)
    if starts.size == 0:
        return EMPTY
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    e = ends[order]
    run_max = np.maximum.accumulate(e)
    new = np.empty(s.size, bool)
    new[0] = True
    new[1:] = s[1:] > run_max[:-1]
    first = np.flatnonzero(new)
    seg_start = s[first]
    last = np.append(first[1:] - 1, s.size - 1)
    seg_end = run_max[last]
    return seg_start, seg_end


def measure(u: Union) -> int:
    """Total length of a union."""
    return int((u[1] - u[0]).sum())


def coverage(u: Union, t: np.ndarray) -> np.ndarray:
    """``|u ∩ (-inf, t]|`` for each value of ``t``."""
    s, e = u
    t = np.asarray(t, np.int64)
    if s.size == 0:
        return np.zeros(t.shape, np.int64)
    prefix = np.concatenate(([0], np.cumsum(e - s)))
    j = np.searchsorted(s, t, side="right") - 1
    jj = np.maximum(j, 0)
    inside = np.minimum(t, e[jj]) - s[jj]
    return np.where(j >= 0, prefix[jj] + np.maximum(inside, 0), 0)


def overlap(a: Union, b: Union) -> int:
    """``|a ∩ b|`` for two unions."""
    if a[0].size == 0 or b[0].size == 0:
        return 0
    return int((coverage(b, a[1]) - coverage(b, a[0])).sum())


def merge(*us: Union) -> Union:
    """Union of several unions."""
    s = np.concatenate([u[0] for u in us]) if us else EMPTY[0]
    e = np.concatenate([u[1] for u in us]) if us else EMPTY[1]
    return union(s, e)


def clip_stream_overlaps(
    start: np.ndarray, end: np.ndarray, stream: np.ndarray, keep: np.ndarray | None = None
) -> tuple[np.ndarray, int, int]:
    """Clip events that run past the next event's start on the same stream.

    A stream executes its work in order, so an event whose end passes the next event's start
    (ROCm duration overrun) is cut at that start. ``keep`` marks events that may legitimately
    overlap each other (CUDA kernels under programmatic dependent launch): an event with
    ``keep`` set is cut only at the start of the first later event of its stream without
    ``keep``. Returns the new ends, the number of clipped events and the nanoseconds removed.
    Input order is kept.

    Examples
    --------
    >>> s, e, st = np.array([0, 10, 15]), np.array([12, 20, 30]), np.zeros(3, np.int64)
    >>> clip_stream_overlaps(s, e, st)[0].tolist()
    [10, 15, 30]
    >>> clip_stream_overlaps(s, e, st, keep=np.array([True, True, False]))[0].tolist()
    [12, 15, 30]
    """
    n = start.size
    if n < 2:
        return end.copy(), 0, 0
    order = np.lexsort((start, stream))
    s = start[order]
    e = end[order]
    st = stream[order]
    idx = np.arange(n)
    if keep is None:
        bound = np.minimum(idx + 1, n - 1)  # the next event
    else:
        k = np.asarray(keep, bool)[order]
        # the first later event without keep (n: none), by a running minimum from the right
        later = np.minimum.accumulate(np.where(k, n, idx)[::-1])[::-1]
        nxt_free = np.empty(n, np.int64)
        nxt_free[:-1] = later[1:]
        nxt_free[-1] = n
        bound = np.where(k, nxt_free, idx + 1)
    # n: no later event to cut at (the last event, or a keep event with no free event after it)
    valid = (bound > idx) & (bound < n)
    bound = np.minimum(bound, n - 1)
    valid &= st[bound] == st
    lim = s[bound]
    over = valid & (e > lim)
    new_e = e.copy()
    new_e[over] = np.maximum(lim[over], s[over])
    out = np.empty(n, np.int64)
    out[order] = new_e
    return out, int(over.sum()), int((e - new_e).sum())


class AxisOverflow(ArithmeticError):
    """The groups' time spans do not fit side by side on one int64 line."""


class Axis:
    """Groups of intervals laid side by side on one int64 line, lengths kept exact.

    Group ``g``'s times ``t`` move to ``t - lo[g] + offset[g]``, where ``lo[g]`` is the group's
    smallest time and the offsets leave a gap of :attr:`GAP` ns between consecutive groups'
    spans. Within a group every difference is unchanged; across groups nothing touches. So the
    one-line algorithms of this module (:func:`union`, :func:`overlap`, :func:`coverage`,
    :func:`merge`) run over all groups at once, and a segment's group is found back from its
    position (:meth:`group_of`). This is how a partition of many (rank, device) parts — or
    many streams, steps or threads — is measured in one pass.

    Raises :class:`AxisOverflow` when the spans summed exceed 2**62 ns (146 years): the caller
    then measures fewer groups at a time.

    Parameters
    ----------
    group
        Group code (``0..n_groups-1``) of each time in ``times``.
    times
        Every time that will be placed on the axis (starts, ends, query points).
    n_groups
        Number of groups.
    """

    GAP = 2

    def __init__(self, group: np.ndarray, times: np.ndarray, n_groups: int) -> None:
        big = np.iinfo(np.int64).max
        group = np.asarray(group, np.int64)
        times = np.asarray(times, np.int64)
        lo = np.full(n_groups, big, np.int64)
        hi = np.full(n_groups, -big - 1, np.int64)
        if times.size:
            np.minimum.at(lo, group, times)
            np.maximum.at(hi, group, times)
        empty = lo > hi
        lo[empty] = 0
        hi[empty] = 0
        span = hi.astype(np.float64) - lo.astype(np.float64)
        if float(span.sum()) + float(self.GAP) * (n_groups + 1) >= 2.0**62:
            raise AxisOverflow(f"{n_groups} groups span {span.sum():.3g} ns in all")
        width = (hi - lo) + self.GAP
        self.offset = (
            np.concatenate(([0], np.cumsum(width)[:-1])).astype(np.int64) if n_groups else np.empty(0, np.int64)
        )
        self.shift = self.offset - lo
        self.n_groups = int(n_groups)

    def place(self, t: np.ndarray, group: np.ndarray) -> np.ndarray:
        """Times ``t`` of groups ``group`` on the axis."""
        return np.asarray(t, np.int64) + self.shift[np.asarray(group, np.int64)]

    def group_of(self, v: np.ndarray) -> np.ndarray:
        """Group of each axis position (a segment start, say)."""
        return np.searchsorted(self.offset, np.asarray(v, np.int64), side="right") - 1


def measure_by(u: Union, axis: Axis) -> np.ndarray:
    """Length of a union on ``axis`` per group (int64, exact)."""
    out = np.zeros(axis.n_groups, np.int64)
    if u[0].size:
        np.add.at(out, axis.group_of(u[0]), u[1] - u[0])
    return out


def overlap_by(a: Union, b: Union, axis: Axis) -> np.ndarray:
    """``|a ∩ b|`` per group for two unions on the same axis."""
    out = np.zeros(axis.n_groups, np.int64)
    if a[0].size and b[0].size:
        np.add.at(out, axis.group_of(a[0]), coverage(b, a[1]) - coverage(b, a[0]))
    return out


def difference(a: Union, b: Union) -> Union:
    """``a − b`` for two unions (sorted disjoint segments).

    Examples
    --------
    >>> s, e = difference((np.array([0, 20]), np.array([10, 30])), (np.array([5]), np.array([25])))
    >>> s.tolist(), e.tolist()
    ([0, 25], [5, 30])
    """
    if a[0].size == 0 or b[0].size == 0:
        return a
    # a cut by the gaps of b (b's complement on the whole line), pieces that touch merged
    big = np.iinfo(np.int64).max
    gaps = (np.concatenate(([-big - 1], b[1])), np.concatenate((b[0], [big])))
    return union(*intersect(a, gaps))


def intersect(a: Union, b: Union) -> Union:
    """``a ∩ b`` for two unions (sorted disjoint segments): each segment of ``a`` cut by the
    segments of ``b`` it overlaps, found by ``searchsorted`` (no sort of the two together).

    Examples
    --------
    >>> s, e = intersect((np.array([0, 20]), np.array([10, 30])), (np.array([5, 12]), np.array([8, 25])))
    >>> s.tolist(), e.tolist()
    ([5, 20], [8, 25])
    """
    if a[0].size == 0 or b[0].size == 0:
        return EMPTY
    i0 = np.searchsorted(b[1], a[0], side="right")  # the first segment of b ending after a starts
    i1 = np.searchsorted(b[0], a[1], side="left")  # past the last one starting before a ends
    k = np.maximum(i1 - i0, 0)
    ai = np.repeat(np.arange(a[0].size), k)
    bj = np.repeat(i0, k) + np.arange(ai.size) - np.repeat(np.cumsum(k) - k, k)
    s = np.maximum(a[0][ai], b[0][bj])
    e = np.minimum(a[1][ai], b[1][bj])
    keep = e > s
    return s[keep], e[keep]


def complement(u: Union, lo: int, hi: int) -> Union:
    """``[lo, hi) − u`` for a union ``u`` inside ``[lo, hi)``.

    Examples
    --------
    >>> s, e = complement((np.array([2, 6]), np.array([4, 8])), 0, 10)
    >>> s.tolist(), e.tolist()
    ([0, 4, 8], [2, 6, 10])
    """
    s = np.concatenate(([lo], u[1]))
    e = np.concatenate((u[0], [hi]))
    keep = e > s
    return s[keep].astype(np.int64), e[keep].astype(np.int64)


def inside(u: Union, t: np.ndarray) -> np.ndarray:
    """Whether each ``t`` lies inside a segment of ``u`` (half-open ``[start, end)``)."""
    s, e = u
    if s.size == 0:
        return np.zeros(np.shape(t), bool)
    j = np.searchsorted(s, t, side="right") - 1
    return (j >= 0) & (t < e[np.maximum(j, 0)])
