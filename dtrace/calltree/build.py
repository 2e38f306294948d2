"""Vectorised construction of the host → GPU tree (docs/semantics.md, "Host op tree and ops").

Everything here works on plain numpy arrays and runs in O(n log n) without a per-event Python
loop; the Python loops that remain run over *rounds* (``log`` of the longest sibling run) or
over *tree levels* (the nesting depth, tens), each round one vectorised step over all events.

Notes on the algorithms
-----------------------
:func:`nest` — parents by time containment. Host events of one (pid, tid) sorted by start, then
longest first, form a preorder. The classic stack sweep pops every event that has ended before
the next one starts and makes the top of the stack the parent. Its result is

    ``parent(i) = max { j < i in the same thread : end_j > start_i }``,

the latest-starting event still open when ``i`` starts. (Proof: an event above the found one
would have been popped only by an event starting after it ended, i.e. after ``start_i``.)
That maximum is found for all events at once by pointer jumping: every event keeps a candidate
``c`` (initially its predecessor) with the invariant "every event between ``c`` and me ended by
my start". If ``c`` is still open at my start it is the parent; otherwise every event between
``c``'s own candidate and ``c`` ended by ``c``'s start, hence by mine, so the candidate jumps to
``cand[c]``. Candidates double their reach per round (Wyllie's list ranking), so a run of
``m`` siblings needs ``log2 m`` rounds.

An event that starts inside its parent but ends after it (a *partial overlap*: timestamp
rounding, or a misreported duration) keeps that parent — deterministic, the rule TraceLens's
Trace2Tree applies — and is counted in ``overlaps``; nothing is clipped.

:func:`depths` — list ranking by pointer doubling (``log2`` of the depth rounds).

:func:`subtree_end`, :func:`nearest_ancestor` — one vectorised step per tree level (bottom-up
for the last descendant of each node, top-down for the nearest ancestor of a kind). Since the
host nodes are in preorder, the subtree of ``i`` is the index range ``[i, subtree_end[i])``.

:func:`grouped_union` — the measure of the union of intervals per group (HTA's sort / running
maximum / new-segment formulation, with the running maximum reset per group).
"""

from __future__ import annotations

import numpy as np

from ..vector.groups import I64, cummax_by, dense_codes, first_match, lexsort_ints
from ..vector.intervals import Axis, AxisOverflow


def thread_groups(part: np.ndarray, pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """An int64 code per (part, pid, tid) (equal triples, equal codes; ordered by part, then pid)."""
    return dense_codes(part, pid, tid, compact=False)[0]


def preorder(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Permutation sorting events by (group, start, longest first); ties keep input order."""
    if group.size == 0:
        return np.empty(0, I64)
    try:  # (group, start) as one key: each group's starts on its own stretch of one line
        g, _ = dense_codes(group)
        key = Axis(g, start, int(g.max()) + 1).place(start, g)
    except AxisOverflow:
        return lexsort_ints((-(end - start), start, group))
    return lexsort_ints((-(end - start), key))


def nest(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, int]:
    """Parent of every event by time containment; events must be in :func:`preorder`.

    Returns
    -------
    parent, rounds
        ``parent[i]`` is the index of ``i``'s parent or -1 for a root; ``rounds`` is the
        number of pointer-jumping rounds used.

    Examples
    --------
    >>> g = np.zeros(5, np.int64)
    >>> s = np.array([0, 1, 2, 5, 12]); e = np.array([10, 4, 3, 9, 13])
    >>> nest(g, s, e)[0].tolist()
    [-1, 0, 1, 0, -1]
    """
    n = start.size
    parent = np.full(n, -1, I64)
    if n == 0:
        return parent, 0
    idx = np.arange(n, dtype=I64)
    first = np.empty(n, bool)
    first[0] = True
    first[1:] = group[1:] != group[:-1]
    cand = idx - 1
    cand[first] = -1  # no candidate before the first event of a thread
    active = np.flatnonzero(cand >= 0)
    rounds = 0
    while active.size:
        rounds += 1
        c = cand[active]
        hit = end[c] > start[active]
        parent[active[hit]] = c[hit]  # cand keeps c: a valid candidate for the jumps of others
        miss = active[~hit]
        nxt = cand[cand[miss]]  # read all before writing: one synchronous round
        cand[miss] = nxt
        active = miss[nxt >= 0]
    return parent, rounds


def depths(parent: np.ndarray) -> np.ndarray:
    """Depth of every node (roots 0) by pointer doubling.

    Examples
    --------
    >>> depths(np.array([-1, 0, 1, 0, -1])).tolist()
    [0, 1, 2, 1, 0]
    """
    d = (parent >= 0).astype(I64)
    ptr = parent.copy()
    active = np.flatnonzero(ptr >= 0)
    while active.size:
        p = ptr[active]
        new_d = d[active] + np.where(p >= 0, d[p], 0)
        new_p = ptr[p]
        d[active] = new_d
        ptr[active] = new_p
        active = active[new_p >= 0]
    return d


def levels(depth: np.ndarray) -> list[np.ndarray]:
    """Node indices per depth, ``levels[k]`` holding the nodes of depth ``k`` in index order."""
    if depth.size == 0:
        return []
    small = depth.astype(np.int16) if int(depth.max()) < (1 << 15) and int(depth.min()) >= 0 else depth
    order = np.argsort(small, kind="stable")  # stable: a radix sort for 16-bit depths
    bounds = np.searchsorted(depth[order], np.arange(int(depth.max()) + 2))
    return [order[bounds[k] : bounds[k + 1]] for k in range(len(bounds) - 1)]


def subtree_end(parent: np.ndarray, lv: list[np.ndarray]) -> np.ndarray:
    """One past the last descendant of each node (nodes in preorder): subtree = ``[i, end)``."""
    last = np.arange(parent.size, dtype=I64)
    for nodes in reversed(lv[1:]):
        np.maximum.at(last, parent[nodes], last[nodes])
    return last + 1


def nearest_ancestor(parent: np.ndarray, mask: np.ndarray, lv: list[np.ndarray]) -> np.ndarray:
    """For each node the closest proper ancestor with ``mask`` set, or -1."""
    anc = np.full(parent.size, -1, I64)
    for nodes in lv[1:]:
        p = parent[nodes]
        anc[nodes] = np.where(mask[p], p, anc[p])
    return anc


def link_by_correlation(
    launch_part: np.ndarray, launch_corr: np.ndarray, gpu_part: np.ndarray, gpu_corr: np.ndarray
) -> np.ndarray:
    """Index into ``launch_corr`` of the launch of each GPU event of the same part (-1 if none).

    Every GPU event carrying a launch's correlation id links to it, so a CUDA/HIP graph launch
    (one ``cudaGraphLaunch`` call, many kernels with its correlation) links to all its kernels.
    Where several launches share an id the first one wins; ids below 0 link nothing.
    """
    if gpu_corr.size == 0:
        return np.empty(0, I64)
    pos = np.flatnonzero(launch_corr >= 0)
    found = first_match((launch_part[pos], launch_corr[pos]), (gpu_part, gpu_corr))
    return np.where((found >= 0) & (gpu_corr >= 0), pos[np.maximum(found, 0)] if pos.size else -1, -1).astype(I64)


def grouped_union(group: np.ndarray, start: np.ndarray, end: np.ndarray, n_groups: int) -> np.ndarray:
    """``|∪ intervals|`` of each group ``0..n_groups-1`` (int64 ns; 0 for empty groups).

    Examples
    --------
    >>> grouped_union(np.array([0, 0, 1, 0]), np.array([0, 5, 0, 2]), np.array([3, 8, 4, 4]), 3).tolist()
    [7, 4, 0]
    """
    out = np.zeros(n_groups, I64)
    if group.size == 0:
        return out
    order = lexsort_ints((start, group))
    g = group[order]
    s = start[order]
    run = cummax_by(g, end[order])
    new = np.empty(g.size, bool)
    new[0] = True
    new[1:] = (g[1:] != g[:-1]) | (s[1:] > run[:-1])
    heads = np.flatnonzero(new)
    tails = np.append(heads[1:] - 1, g.size - 1)
    np.add.at(out, g[heads], run[tails] - s[heads])
    return out


def sum_by(group: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Exact int64 sum of ``values`` per group."""
    out = np.zeros(n_groups, I64)
    np.add.at(out, group, values.astype(I64))
    return out
