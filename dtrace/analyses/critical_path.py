"""What bounds each step: a critical path through host threads, launches, the GPU and its
synchronisations (the ``step_bounds`` table).

For every (rank, device, step) the analysis walks one path backwards in time, from the end of
the step to its start, through the resources that held the step up, and splits the step's time
into what the path was waiting on: the host, GPU compute, communication, memory operations,
synchronisation, or nothing it can name. It uses the dependencies HTA's critical path analysis
uses — the order of a host thread's calls, launch edges (a kernel cannot start before its launch
call), stream order, collectives (as GPU work: a communication kernel's time includes its wait
for the other ranks), and synchronisation (a blocking runtime call ends when the GPU work it
waited for ends) — but keeps every nanosecond of the step (HTA's path skips host idle time),
and runs on every part of a partition at once.

The walk
--------
A *state* is a point in time on a resource: a host thread or the part's GPU (all its streams
pooled, as in the breakdown). Starting at the end of the step (its host window's end on the
thread holding the step annotation, or the end of its last GPU event if that is later):

GPU at time ``t``
    The GPU was working towards ``t`` since the last *host-bound start* before ``t``: a GPU event
    that ended an idle gap of the device and whose launch call started after the gap began (the
    ``host_wait`` cause of the ``device_gaps`` table: the GPU waited for the host). The interval
    from that start to ``t`` is GPU time, split like the breakdown: time some compute kernel runs
    is ``compute``, time only communication runs ``comm``, time only memory operations run
    ``memcpy``, idle time inside it (gaps the host did not cause) ``other``. Then the walk takes
    the launch edge: the interval from the end of the launch call to the start of its GPU event
    (the launch latency) is ``host`` time, and the walk continues on the launching thread at the
    end of the launch call.
host thread at time ``t``
    The thread was busy — running ops, Python, a data loader — since the last time it was
    released by the GPU: the end of a runtime call that *waited* (it lasted at least
    :data:`BLOCK_MIN_NS` and a GPU event of the part ended inside it: a synchronisation or a
    blocking copy, which waited for that event however late it returned; or a launch into a full
    queue that returned at most :data:`WAIT_TOL_NS` after it). The interval from that release to
    ``t`` is ``host`` time; the walk continues on the GPU at the end of the GPU event waited for, and the interval between that end
    and the call's return is the release latency. On a thread other than the step's (an
    autograd thread, say) the walk goes back to the step's thread at the start of the outermost
    host event around ``t``, or at ``t`` when the thread is idle there.

A runtime call that waited is a *synchronisation* when its name says so (``cudaDeviceSynchronize``,
``cudaStreamSynchronize``, ``cudaEventSynchronize``, any ``*Synchroniz*`` of CUDA, the driver or
HIP) or it copies memory (``cudaMemcpy``, ``cudaMemcpyAsync`` that blocked, ``hipMemcpy*``...),
and a *full launch queue* when it is any other call that launched GPU work. The GPU time on the
path during which the host sat in a synchronisation is ``sync`` (with the release latency), not
GPU time: the host could not run ahead to queue the rest of the step — unless nothing of the
step was launched after that call returned (the step's last synchronisation, the usual
``loss.item()``): then the step was simply waiting for its GPU work, and that time is GPU time.
Time blocked on a full launch queue is GPU time too (the GPU is the bottleneck; the host is as far
ahead as the queue lets it be).

The walk ends at the step's start (its window's start; a part without steps has one chain from
its first to its last GPU event, ``step`` ``NA``). Every interval between the two ends is
counted once, so ``host_ns + compute_ns + comm_ns + memcpy_ns + sync_ns + other_ns ==
span_ns`` exactly. The step's *bound* is the category with the most time; ``host_op`` names
the host op the path spent most host time in (the outermost host event around it on its thread,
the step annotation aside; launch latency counts for the launch's op), ``sync_op`` the one it
spent most ``sync`` time waiting in.

Notes on the algorithm: every (part, step) chain walks at once; each round moves every
unfinished chain one hop (GPU → host → GPU ...), each hop a ``searchsorted`` on arrays sorted
once (host-bound starts per part, releases per thread, outermost host events per thread), so a
round costs a few vectorised passes over the unfinished chains and the number of rounds is the
largest number of hops of any one step (a handful for a GPU-bound step, one per
synchronisation otherwise). GPU intervals are measured with the prefix-sum coverage of
:mod:`dtrace.vector.intervals` on one axis of all parts. See ``docs/semantics.md``, "What bounds
each step".

Given a :class:`PathLog`, :func:`walk` also records the intervals of every hop (arrays per hop,
as the hop computed them; :func:`~dtrace.analyses.step_path.step_path` turns them into the path,
GPU time cut by category); without one, as ``step_bounds`` runs it, it records nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from ..core.constants import KINDS
from ..core.dtypes import empty_frame, missing_if_negative
from ..vector.groups import (
    I64,
    count_by,
    cummax_by,
    dense_codes,
    first_match,
    lexsort_ints,
    max_by,
    min_by,
    sum_by,
    unique,
)
from ..vector.intervals import Axis, AxisOverflow, coverage, union
from .batch import Batch, kind_codes, launch_rows
from .queues import part_queue_limits
from .segments import last_at_or_before

CATEGORIES = ("host", "compute", "comm", "memcpy", "sync", "other")
"""What the critical path waited on, in the order of the ``*_ns`` columns."""

BLOCK_MIN_NS = 20_000
"""A runtime call that waited for the GPU lasted at least this long."""

WAIT_TOL_NS = 50_000
"""A launch into a full queue returned at most this long after the GPU event that freed it ended."""

SYNC_CALL = re.compile(r"synchroniz", re.IGNORECASE)
"""Runtime calls that wait for the GPU by name (``cudaDeviceSynchronize``, ``cuStreamSynchronize``,
``hipEventSynchronize``, ...)."""

COPY_CALL = re.compile(r"memcpy", re.IGNORECASE)
"""Runtime calls that copy memory; one synchronises when its own copy ends before it returns."""

MAX_ROUNDS = 1_000_000
"""Safety stop: a walk still unfinished after this many hops counts the rest as ``other``."""

COLUMNS: dict[str, str] = {
    "rank": "int32",
    "device": "int32",
    "step": "Int64",
    "start_ns": "int64",
    "span_ns": "int64",
    **{f"{c}_ns": "int64" for c in CATEGORIES},
    "bound": "object",
    "bound_share": "float64",
    "host_op": "object",
    "host_op_ns": "int64",
    "sync_op": "object",
    "sync_op_ns": "int64",
}
"""Output columns and dtypes (registered with the analysis)."""

_MIN = np.iinfo(np.int64).min
_MAX = np.iinfo(np.int64).max
_HOST, _COMPUTE, _COMM, _MEMCPY, _SYNC, _OTHER = range(len(CATEGORIES))
_CANDIDATE_KINDS = np.array([KINDS.index(k) for k in ("cpu_op", "annotation", "runtime")], np.int8)


class Lookup:
    """Items with a group and a time, sorted once; per query (group, t), the item of that group
    with the largest time ``<= t`` (``< t`` with ``strict``), as a position in sorted order.

    Examples
    --------
    >>> lk = Lookup(np.array([1, 0, 0]), np.array([5, 9, 4]), 2)
    >>> lk.order.tolist(), lk.last(np.array([0, 0, 1, 1]), np.array([8, 3, 5, 4])).tolist()
    ([2, 1, 0], [0, -1, 2, -1])
    >>> lk.last(np.array([0]), np.array([9]), strict=True).tolist()
    [0]
    """

    def __init__(self, group: np.ndarray, time: np.ndarray, n_groups: int) -> None:
        group, time = np.asarray(group, I64), np.asarray(time, I64)
        self.order = lexsort_ints((time, group))
        self.group, self.time = group[self.order], time[self.order]
        self.lo, self.hi = _span_by(self.group, self.time, n_groups)
        try:
            self.axis: Axis | None = Axis(self.group, self.time, n_groups)
            self.placed = self.axis.place(self.time, self.group)
        except AxisOverflow:  # groups spanning centuries (times of mixed origins): a slower exact search
            self.axis = None

    def count(self, group: np.ndarray, t: np.ndarray, *, strict: bool = False) -> np.ndarray:
        """Number of items of each query's group with time ``<= t`` (``< t`` with ``strict``)."""
        j = self.last(group, t, strict=strict)
        first = np.searchsorted(self.group, np.asarray(group, I64), side="left")
        return np.where(j >= 0, j - first + 1, 0).astype(I64)

    def last(self, group: np.ndarray, t: np.ndarray, *, strict: bool = False) -> np.ndarray:
        """Sorted position of each query's item (-1 if its group has none at or before ``t``)."""
        group, t = np.asarray(group, I64), np.asarray(t, I64)
        if not self.time.size or not t.size:
            return np.full(t.size, -1, I64)
        if self.axis is None:
            return last_at_or_before(self.group, self.time, group, t, strict=strict)
        q = self.axis.place(np.clip(t, self.lo[group] - 1, self.hi[group] + 1), group)
        j = np.searchsorted(self.placed, q, side="left" if strict else "right") - 1
        jj = np.maximum(j, 0)
        return np.where((j >= 0) & (self.group[jj] == group), j, -1).astype(I64)


def _span_by(group: np.ndarray, time: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest time per group (0 and 0 for a group without times)."""
    lo, hi = min_by(group, time, n_groups, _MAX), max_by(group, time, n_groups, _MIN)
    empty = lo > hi
    return np.where(empty, 0, lo), np.where(empty, 0, hi)


def _take(values: np.ndarray, idx: np.ndarray, fill: int) -> np.ndarray:
    """``values[idx]`` where ``idx >= 0``, else ``fill``."""
    if not values.size:
        return np.full(idx.size, fill, I64)
    return np.where(idx >= 0, values[np.maximum(idx, 0)], fill).astype(I64)


def _labels(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, labels)`` of a categorical or plain text column (codes into labels; -1 missing)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy().astype(I64), np.asarray(col.cat.categories, dtype=object)
    codes, labels = pd.factorize(col.to_numpy(object))
    return codes.astype(I64), np.asarray(labels, dtype=object)


def _blocks(
    thread: np.ndarray, start: np.ndarray, end: np.ndarray, candidate: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Outermost host events per thread: (block of each row (-1 none), head row, thread, start,
    end of each block), blocks in (thread, start) order. Rows nest by containment (sorted by start,
    longest first); one that starts inside a block joins it, and the block ends at the latest end
    of its rows."""
    rows = np.flatnonzero(candidate)
    blk = np.full(thread.size, -1, I64)
    if not rows.size:
        z = np.zeros(0, I64)
        return blk, z, z, z, z
    o = rows[lexsort_ints((-end[rows], start[rows], thread[rows]))]
    th, s = thread[o], start[o]
    run = cummax_by(th, end[o])
    first = np.r_[True, th[1:] != th[:-1]]
    top = first | (s >= np.r_[_MIN, run[:-1]])
    blk[o] = np.cumsum(top) - 1
    heads = np.flatnonzero(top)
    last = np.r_[heads[1:] - 1, o.size - 1]
    return blk, o[heads], th[heads], s[heads], run[last]


def step_bounds(batch: Batch) -> pd.DataFrame:
    """The ``step_bounds`` rows of every part of the partition (see the module docstring)."""
    if not len(batch.gpu) and not len(batch.steps):
        return empty_frame(COLUMNS)
    host, gpu, ch = walk_setup(batch)
    n = ch["part"].size
    if not n:
        return empty_frame(COLUMNS)
    acc, host_segs, op_time, sync_time = walk(host, gpu, ch)
    host_op, host_op_ns = _top_names(n, host.name_lab, _op_shares(host_segs, op_time, host))
    sync_op, sync_op_ns = _top_names(n, host.name_lab, _concat(sync_time))

    span = ch["end"] - ch["t0"]
    best = np.argmax(acc, axis=1)
    best_ns = acc[np.arange(n), best]
    return pd.DataFrame(
        {
            **batch.keys(ch["part"]),
            "step": missing_if_negative(ch["step"]),
            "start_ns": ch["t0"],
            "span_ns": span,
            **{f"{cat}_ns": acc[:, i] for i, cat in enumerate(CATEGORIES)},
            "bound": np.where(span > 0, np.asarray(CATEGORIES, dtype=object)[best], ""),
            "bound_share": np.divide(best_ns, span, out=np.zeros(n), where=span > 0),
            "host_op": host_op,
            "host_op_ns": host_op_ns,
            "sync_op": sync_op,
            "sync_op_ns": sync_op_ns,
        }
    )


def walk_setup(batch: Batch) -> tuple["HostSide", "GpuSide", dict[str, np.ndarray]]:
    """The host and GPU sides of a partition as the walk reads them, and its chains (one per step
    window, or per part without steps): part, step, t0, end, on_gpu, thread, last_launch."""
    host = _host_side(batch)
    gpu = _gpu_side(batch, host)
    ch = _chains(batch, gpu.part, gpu.start, gpu.end, batch.gpu["step"].to_numpy(I64), gpu.l_start, host, gpu.lrow)
    return host, gpu, ch


@dataclass
class HostSide:
    """The host side of a partition, as the walk reads it."""

    part: np.ndarray  # per host event
    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    thread: np.ndarray  # (part, pid, tid) code
    name_code: np.ndarray
    name_lab: np.ndarray
    step_row: np.ndarray  # per step window: the host event of its annotation (-1: none)
    blk: np.ndarray  # per host event: its outermost event's block (-1 none)
    blk_name: np.ndarray  # per block, in (thread, start) order
    blk_thread: np.ndarray
    blk_start: np.ndarray
    blk_end: np.ndarray
    blk_row: np.ndarray  # per block: its first (outermost) host event
    blocks: Lookup  # blocks by (thread, start)
    rel: Lookup | None = None  # releases by (thread, end of the call)
    rel_row: np.ndarray = field(default_factory=lambda: np.zeros(0, I64))  # host event of each release
    rel_gpu: np.ndarray = field(default_factory=lambda: np.zeros(0, I64))  # end of the GPU event it waited for
    rel_sync: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # a synchronisation (else a full queue)
    rel_gpu_row: np.ndarray = field(default_factory=lambda: np.zeros(0, I64))  # the GPU event it waited for


@dataclass
class GpuSide:
    """The GPU side of a partition: its events, their launches, host-bound starts, coverage."""

    part: np.ndarray
    start: np.ndarray
    end: np.ndarray
    lrow: np.ndarray  # host event of the launch call (-1 unknown)
    l_start: np.ndarray
    bd: "_Boundaries"
    split: Callable[[np.ndarray, np.ndarray, np.ndarray], list[np.ndarray]]
    axis: Axis  # the parts' GPU times on one line
    cov: list[tuple[np.ndarray, np.ndarray]]  # unions on the axis: compute, compute or comm, all
    lo: np.ndarray  # per part: first GPU time
    hi: np.ndarray  # per part: last GPU time
    kind: np.ndarray  # per event: _COMPUTE, _COMM or _MEMCPY (what its time counts as alone)


def _host_side(batch: Batch) -> HostSide:
    """Threads, outermost host events and the step annotations' rows."""
    h = batch.host
    hp = h["part"].to_numpy(I64)
    hs, he = h["start_ns"].to_numpy(I64), h["end_ns"].to_numpy(I64)
    hk = kind_codes(h["kind"]) if len(h) else np.zeros(0, np.int8)
    thread, _n = dense_codes(hp, h["pid"].to_numpy(I64), h["tid"].to_numpy(I64))
    name_code, name_lab = _labels(h["name"]) if len(h) else (np.zeros(0, I64), np.zeros(0, object))
    steps = batch.steps
    sp = steps["part"].to_numpy(I64)
    s0, s1 = steps["start_ns"].to_numpy(I64), steps["end_ns"].to_numpy(I64)
    ann = np.flatnonzero(hk == KINDS.index("annotation"))
    step_row = _take(ann, first_match((hp[ann], hs[ann], he[ann]), (sp, s0, s1)), -1)
    step_row = np.where((steps["source"] == "host").to_numpy(bool), step_row, -1)
    not_step = np.ones(len(h), bool)
    not_step[step_row[step_row >= 0]] = False
    blk, head, b_th, b_s, b_e = _blocks(thread, hs, he, np.isin(hk, _CANDIDATE_KINDS) & not_step)
    n_threads = max(int(thread.max(initial=-1)) + 1, 1)
    return HostSide(
        part=hp,
        start=hs,
        end=he,
        kind=hk,
        thread=thread,
        name_code=name_code,
        name_lab=name_lab,
        step_row=step_row,
        blk=blk,
        blk_name=name_code[head],
        blk_thread=b_th,
        blk_start=b_s,
        blk_end=b_e,
        blk_row=head,
        blocks=Lookup(b_th, b_s, n_threads),
    )


def _gpu_side(batch: Batch, host: HostSide) -> GpuSide:
    """Launch calls of the GPU events, the releases of the host threads, the host-bound starts and
    the coverage of compute, communication and all GPU work per part."""
    g, n_parts = batch.gpu, batch.n_parts
    gp = g["part"].to_numpy(I64)
    gs, ge = g["start_ns"].to_numpy(I64), g["end_ns"].to_numpy(I64)
    lrow = launch_rows(batch)
    l_start, l_end = _take(host.start, lrow, -1), _take(host.end, lrow, -1)

    xr, x_gpu, x_sync, x_row = _releases(host, g, gp, ge, lrow, l_start, part_queue_limits(batch))
    host.rel = Lookup(host.thread[xr], host.end[xr], max(int(host.thread.max(initial=-1)) + 1, 1))
    o = host.rel.order
    host.rel_row, host.rel_gpu, host.rel_sync, host.rel_gpu_row = xr[o], x_gpu[o], x_sync[o], x_row[o]

    # host-bound starts: an event after every earlier event of its part ended, launched after that
    o = lexsort_ints((ge, gs, gp))
    op, os_ = gp[o], gs[o]
    run = cummax_by(op, ge[o])
    first = np.r_[True, op[1:] != op[:-1]] if o.size else np.zeros(0, bool)
    busy_prev = np.where(first, _MIN, np.r_[_MIN, run[:-1]] if o.size else run)
    launch_o = l_start[o]
    hb = o[(first | (os_ > busy_prev)) & (launch_o >= 0) & (launch_o > busy_prev)]
    bd = _Boundaries(Lookup(gp[hb], gs[hb], n_parts), hb, gs, np.minimum(l_end, gs), host.thread, host.blk, lrow)

    cat_code, cat_lab = _labels(g["category"])
    is_c = np.isin(cat_code, np.flatnonzero(cat_lab.astype(str) == "compute"))
    is_cm = is_c | np.isin(cat_code, np.flatnonzero(cat_lab.astype(str) == "comm"))
    axis = Axis(np.r_[gp, gp], np.r_[gs, ge], n_parts)  # queries are clamped to their part's GPU times
    pls, ple = axis.place(gs, gp), axis.place(ge, gp)
    cov = [union(pls[m], ple[m]) for m in (is_c, is_cm, np.ones(gp.size, bool))]
    g_lo, g_hi = _span_by(np.r_[gp, gp], np.r_[gs, ge], n_parts)

    def split(p: np.ndarray, u: np.ndarray, w: np.ndarray) -> list[np.ndarray]:
        """GPU time of [u, w] of parts p: compute, communication alone, memory operations alone, idle."""
        lo, hi = g_lo[p], g_hi[p]
        pu, pw = axis.place(np.clip(u, lo, hi), p), axis.place(np.clip(w, lo, hi), p)
        c, cm, a = (coverage(x, pw) - coverage(x, pu) for x in cov)
        return [c, cm - c, a - cm, (w - u) - a]

    kind = np.where(is_c, _COMPUTE, np.where(is_cm, _COMM, _MEMCPY))
    return GpuSide(gp, gs, ge, lrow, l_start, bd, split, axis, cov, g_lo, g_hi, kind)


@dataclass
class PathLog:
    """The intervals a walk went through, recorded hop by hop when asked (``walk(..., path=)``;
    assembled by :mod:`dtrace.analyses.step_path`). Each entry holds arrays over the chains one hop
    moved, the hop's number first (a later hop is earlier in time)."""

    hops: int = 0
    host: list[tuple[np.ndarray, ...]] = field(default_factory=list)  # (hop, chain, thread, from, to)
    gpu: list[tuple[np.ndarray, ...]] = field(default_factory=list)  # (hop, chain, from, to): split by category later
    sync: list[tuple[np.ndarray, ...]] = field(default_factory=list)  # (hop, chain, from, to, op name code)
    launch: list[tuple[np.ndarray, ...]] = field(default_factory=list)  # (hop, chain, from, to, boundary position)
    release: list[tuple[np.ndarray, ...]] = field(default_factory=list)  # (hop, chain, from, to, thread, release, sync)
    other: list[tuple[np.ndarray, ...]] = field(default_factory=list)  # (hop, chain, from, to)

    def add(self, to: list[tuple[np.ndarray, ...]], *arrays: np.ndarray) -> None:
        """Record one hop's intervals of one sort."""
        to.append((np.full(arrays[0].size, self.hops, I64), *arrays))


def walk(
    host: HostSide, gpu: GpuSide, ch: dict[str, np.ndarray], path: PathLog | None = None
) -> tuple[np.ndarray, list[tuple[np.ndarray, ...]], list[tuple[np.ndarray, ...]], list[tuple[np.ndarray, ...]]]:
    """Every chain's walk from its end to its start, one hop per round for all unfinished chains:
    the time per category (chains × :data:`CATEGORIES`), the host intervals (chain, thread, from,
    to), the launch latencies (chain, op name, ns) and the synchronisation time (chain, op name, ns).
    With ``path``, every interval is also recorded there (nothing is when it is ``None``)."""
    c_part, c_t0 = ch["part"], ch["t0"]
    n = c_part.size
    assert host.rel is not None
    acc = np.zeros((n, len(CATEGORIES)), I64)
    host_segs: list[tuple[np.ndarray, ...]] = []
    op_time: list[tuple[np.ndarray, ...]] = []
    sync_time: list[tuple[np.ndarray, ...]] = []

    cid = np.arange(n, dtype=I64)
    on_gpu = ch["on_gpu"].copy()
    t = ch["end"].copy()
    res = ch["thread"].copy()  # the thread of host states
    blocked_from = np.full(n, _MAX, I64)  # GPU states entered from a synchronisation: its call's start
    blocked_name = np.full(n, -1, I64)
    live = t > c_t0
    cid, on_gpu, t, res, blocked_from, blocked_name = (
        a[live] for a in (cid, on_gpu, t, res, blocked_from, blocked_name)
    )
    for _round in range(MAX_ROUNDS):
        if not cid.size:
            break
        t0 = c_t0[cid]
        nxt_t = np.full(cid.size, _MIN, I64)
        nxt_gpu = np.zeros(cid.size, bool)
        nxt_res = np.full(cid.size, -1, I64)
        nxt_from = np.full(cid.size, _MAX, I64)
        nxt_name = np.full(cid.size, -1, I64)

        gi = np.flatnonzero(on_gpu)
        if gi.size:  # GPU time back to the last host-bound start, then its launch
            nxt_t[gi], nxt_res[gi] = _gpu_hop(
                host,
                gpu,
                c_part,
                (cid[gi], t[gi], t0[gi]),
                (blocked_from[gi], blocked_name[gi]),
                acc,
                op_time,
                sync_time,
                path,
            )
        hi = np.flatnonzero(~on_gpu)
        if hi.size:  # host time back to the thread's last release (or to the step's thread)
            nxt_t[hi], nxt_gpu[hi], nxt_res[hi], nxt_from[hi], nxt_name[hi] = _host_hop(
                host, ch, (cid[hi], t[hi], t0[hi]), res[hi], acc, host_segs, sync_time, path
            )

        back = nxt_t > t  # going forward in time (cannot happen with consistent input): end the walk
        alive = (nxt_t > t0) & ~back
        np.add.at(acc[:, _OTHER], cid, np.where(back, t - t0, 0))
        if path is not None:
            path.add(path.other, cid[back], t0[back], t[back])
        cid, on_gpu, t, res, blocked_from, blocked_name = (
            a[alive] for a in (cid, nxt_gpu, nxt_t, nxt_res, nxt_from, nxt_name)
        )
    if cid.size:  # the safety stop
        np.add.at(acc[:, _OTHER], cid, t - c_t0[cid])
        if path is not None:
            path.add(path.other, cid, c_t0[cid], t)
    return acc, host_segs, op_time, sync_time


def _gpu_hop(
    host: HostSide,
    gpu: GpuSide,
    c_part: np.ndarray,
    at: tuple[np.ndarray, np.ndarray, np.ndarray],
    blocked: tuple[np.ndarray, np.ndarray],
    acc: np.ndarray,
    op_time: list[tuple[np.ndarray, ...]],
    sync_time: list[tuple[np.ndarray, ...]],
    path: PathLog | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One hop of the chains ``at`` (chain, time, chain start) in a GPU state: GPU time back to
    the last host-bound start (the part after a synchronisation entered at ``blocked`` (its
    call's start, name) is sync), then its launch latency. Returns the next time (``_MIN``: the
    walk ends) and the launching thread."""
    bd = gpu.bd
    c, tt, lo = at
    blocked_from, blocked_name = blocked
    k = bd.lookup.last(c_part[c], tt)
    sk = _take(bd.start, k, _MIN)
    u = np.minimum(np.maximum(sk, lo), tt)
    w = np.clip(blocked_from, u, tt)
    for cat, v in zip((_COMPUTE, _COMM, _MEMCPY, _OTHER), gpu.split(c_part[c], u, w)):
        np.add.at(acc[:, cat], c, v)
    np.add.at(acc[:, _SYNC], c, tt - w)
    sync_time.append((c, blocked_name, tt - w))
    go = (k >= 0) & (sk > lo)
    hk_t = np.maximum(_take(bd.host_t, k, _MIN), lo)
    lat = np.where(go, sk - hk_t, 0)
    np.add.at(acc[:, _HOST], c, lat)
    op_time.append((c, _take(host.blk_name, _take(bd.block, k, -1), -1), lat))
    if path is not None:
        path.hops += 1
        path.add(path.gpu, c, u, w)
        path.add(path.sync, c, w, tt, blocked_name)
        path.add(path.launch, c[go], hk_t[go], sk[go], k[go])
    return np.where(go, hk_t, _MIN), _take(bd.thread, k, -1)


def _host_hop(
    host: HostSide,
    ch: dict[str, np.ndarray],
    at: tuple[np.ndarray, np.ndarray, np.ndarray],
    r: np.ndarray,
    acc: np.ndarray,
    host_segs: list[tuple[np.ndarray, ...]],
    sync_time: list[tuple[np.ndarray, ...]],
    path: PathLog | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One hop of the chains ``at`` (chain, time, chain start) in a host state on thread ``r``:
    host time back to the thread's last release (or to the step's thread). Returns the next
    time, whether it is a GPU state, the next thread, and the start and name of the
    synchronisation a GPU state is entered from."""
    rel = host.rel
    assert rel is not None
    c, tt, lo = at
    x = rel.last(r, tt, strict=True)
    xb = _take(rel.time, x, _MIN)
    mine = ch["thread"][c]
    other = (mine >= 0) & (r != mine)
    b = host.blocks.last(r, tt, strict=True)
    inside = (b >= 0) & (_take(host.blk_end, b, _MIN) >= tt)
    xs = np.where(other, np.where(inside, _take(host.blk_start, b, _MIN), tt), _MIN)
    stop = np.maximum(np.maximum(xb, xs), lo)
    np.add.at(acc[:, _HOST], c, tt - stop)
    host_segs.append((c, r, stop, tt))
    released = (xb >= xs) & (xb > lo)
    row = _take(host.rel_row, x, -1)
    gpu_t = np.maximum(_take(host.rel_gpu, x, _MIN), lo)
    terminal = xb >= ch["last_launch"][c]
    is_sync = _take(host.rel_sync.astype(I64), x, 0).astype(bool) & ~terminal
    lat = np.where(released, xb - gpu_t, 0)
    np.add.at(acc[:, _SYNC], c, np.where(is_sync, lat, 0))
    np.add.at(acc[:, _OTHER], c, np.where(is_sync, 0, lat))
    rel_name = _take(host.blk_name, _take(host.blk, row, -1), -1)
    sync_time.append((c, rel_name, np.where(is_sync, lat, 0)))
    if path is not None:
        path.hops += 1
        path.add(path.host, c, r, stop, tt)
        path.add(path.release, *(a[released] for a in (c, gpu_t, xb, r, x, is_sync.astype(I64))))
    switch = ~released & (stop > lo)
    return (
        np.where(released, gpu_t, np.where(switch, xs, _MIN)),
        released,
        np.where(switch, mine, -1),
        np.where(released & is_sync, _take(host.start, row, _MAX), _MAX),
        np.where(released & is_sync, rel_name, -1),
    )


class _Boundaries:
    """The host-bound starts of a partition: where the GPU waited for a launch."""

    def __init__(
        self,
        lookup: Lookup,
        rows: np.ndarray,
        start: np.ndarray,
        host_t: np.ndarray,
        thread: np.ndarray,
        blk: np.ndarray,
        lrow: np.ndarray,
    ) -> None:
        r = rows[lookup.order]  # GPU rows in sorted order
        self.lookup = lookup
        self.start = start[r]
        self.host_t = host_t[r]  # end of the launch call (the kernel's start if that is earlier)
        self.row = r
        self.launch = lrow[r]
        self.thread = _take(thread, self.launch, -1)
        self.block = _take(blk, self.launch, -1)


def _releases(
    host: HostSide,
    g: pd.DataFrame,
    gp: np.ndarray,
    ge: np.ndarray,
    lrow: np.ndarray,
    l_start: np.ndarray,
    limits: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The runtime calls that waited for the GPU: (host row, end of the GPU event waited for,
    whether it is a synchronisation, that GPU event's row).

    - a ``*Synchroniz*`` call that lasted at least :data:`BLOCK_MIN_NS` and inside which a GPU
      event of the part ended: the last such event, however long after it the call returned;
    - a ``*Memcpy*`` call whose own copy ended inside it: the copy (a blocking copy waits for its
      copy; the time from the copy's end to the return is its release latency);
    - any other launch call made with its part's queue limit (``limits``, per part:
      :func:`~dtrace.analyses.queues.part_queue_limits`) of launches queued on its stream —
      launched and not yet started on the GPU, as :mod:`dtrace.analyses.queues` counts them —
      that returned at most :data:`WAIT_TOL_NS` after a GPU event ended inside it: that event (a
      full queue; not a synchronisation).
    """
    n_parts = limits.size
    hp, hs, he = host.part, host.start, host.end
    runtime = host.kind == KINDS.index("runtime")
    # the names of the runtime calls (a few of the host's names) matched once each
    n_names = len(host.name_lab)
    nc = np.where(host.name_code < 0, n_names, host.name_code)
    used = unique(nc[runtime & (nc < n_names)])
    is_sync_name, is_copy_name = np.zeros(n_names + 1, bool), np.zeros(n_names + 1, bool)
    used_names = [str(host.name_lab[i]) for i in used.tolist()]
    is_sync_name[used] = [bool(SYNC_CALL.search(x)) for x in used_names]
    is_copy_name[used] = [bool(COPY_CALL.search(x)) for x in used_names]
    sync_call = runtime & is_sync_name[nc]
    copy_call = runtime & is_copy_name[nc] & ~sync_call
    gpu_of = np.full(hp.size, -1, I64)  # a GPU event each launch call launched
    linked = np.flatnonzero(lrow >= 0)
    gpu_of[lrow[linked]] = linked
    launch_call = runtime & (gpu_of >= 0) & ~sync_call & ~copy_call

    ends = Lookup(gp, ge, n_parts)
    # synchronisations by name: the last GPU end before the call returned
    xs = np.flatnonzero(sync_call & (he - hs >= BLOCK_MIN_NS))
    j = ends.last(hp[xs], he[xs])
    e_sync, r_sync = _take(ends.time, j, _MIN), _take(ends.order, j, -1)
    # copies: their own copy
    xc = np.flatnonzero(copy_call & (gpu_of >= 0))
    e_copy = ge[gpu_of[xc]]
    # launches into a full queue: those a GPU event's end released (few), then their queue's length
    xq = np.flatnonzero(launch_call)
    j = ends.last(hp[xq], he[xq])
    e_queue, r_queue = _take(ends.time, j, _MIN), _take(ends.order, j, -1)
    maybe = e_queue >= np.maximum(hs[xq], he[xq] - WAIT_TOL_NS)
    xq, e_queue, r_queue = xq[maybe], e_queue[maybe], r_queue[maybe]
    if xq.size:
        stream_code, n_streams = dense_codes(gp, g["stream"].to_numpy(I64))
        known = l_start >= 0
        launched = Lookup(stream_code[known], l_start[known], n_streams)
        started = Lookup(stream_code[known], g["start_ns"].to_numpy(I64)[known], n_streams)
        sc = stream_code[gpu_of[xq]]
        queued = launched.count(sc, hs[xq]) - started.count(sc, hs[xq])  # its own launch included, as HTA counts
        full = queued >= limits[hp[xq]]
        xq, e_queue, r_queue = xq[full], e_queue[full], r_queue[full]
    xr = np.r_[xs, xc, xq]
    x_gpu = np.r_[e_sync, e_copy, e_queue]
    x_row = np.r_[r_sync, gpu_of[xc], r_queue]
    x_sync = np.r_[np.ones(xs.size + xc.size, bool), np.zeros(xq.size, bool)]
    # a synchronisation or a blocking copy waited for what it waited for, however late it returned
    # (its release latency is part of the wait); a launch into a full queue only when a GPU event
    # ended just before it returned
    lo = np.where(x_sync, hs[xr], np.maximum(hs[xr], he[xr] - WAIT_TOL_NS))
    waited = (x_gpu >= lo) & (x_gpu <= he[xr])
    return xr[waited], x_gpu[waited], x_sync[waited], x_row[waited]


def _chains(
    batch: Batch,
    gp: np.ndarray,
    gs: np.ndarray,
    ge: np.ndarray,
    g_step: np.ndarray,
    l_start: np.ndarray,
    host: HostSide,
    lrow: np.ndarray,
) -> dict[str, np.ndarray]:
    """Per chain (a step window, or a part without steps): part, step, start, end, where the walk
    starts (GPU or the step's thread), the step's thread and its last launch."""
    n_parts = batch.n_parts
    steps = batch.steps
    sp, s_step = steps["part"].to_numpy(I64), steps["step"].to_numpy(I64)
    s0, s1 = steps["start_ns"].to_numpy(I64), steps["end_ns"].to_numpy(I64)
    s_host = (steps["source"] == "host").to_numpy(bool)

    # the part's main launching thread (for chains without a host step window)
    thread, step_row = host.thread, host.step_row
    lth = _take(thread, lrow, -1)
    has = lth >= 0
    hp_, lt_ = gp[has], lth[has]
    tcode, tn = dense_codes(hp_, lt_)
    main = np.full(n_parts, -1, I64)
    if tn:
        cnt = count_by(tcode, tn)
        first_of = np.zeros(tn, I64)
        first_of[tcode] = np.arange(tcode.size)
        order = lexsort_ints((-cnt, hp_[first_of]))
        best_part = hp_[first_of[order]]
        keep = np.r_[True, best_part[1:] != best_part[:-1]]
        main[best_part[keep]] = lt_[first_of[order[keep]]]

    no_steps = (count_by(sp, n_parts) == 0) & (count_by(gp, n_parts) > 0)
    ns = np.flatnonzero(no_steps)
    part = np.r_[sp, ns]
    step = np.r_[s_step, np.full(ns.size, -1, I64)]
    t0 = np.r_[s0, min_by(gp, gs, n_parts, _MAX)[ns]]
    w_end = np.r_[s1, max_by(gp, ge, n_parts, 0)[ns]]
    host_win = np.r_[s_host, np.zeros(ns.size, bool)]

    # the chain's own GPU work: its step's events (all events for a part without steps)
    own = (g_step >= 0) | no_steps[gp]
    a, b = dense_codes(np.r_[gp[own], part], np.r_[g_step[own], step])
    ga, ca = a[: int(own.sum())], a[int(own.sum()) :]
    own_end = max_by(ga, ge[own], b, _MIN)[ca]
    last_launch = max_by(ga, l_start[own], b, -1)[ca]
    step_thread = np.r_[_take(thread, step_row, -1), np.full(ns.size, -1, I64)]
    host_end = host_win & (step_thread >= 0) & (w_end >= own_end)
    end = np.where(host_win, np.maximum(w_end, own_end), np.where(own_end > _MIN, own_end, w_end))
    return {
        "part": part,
        "step": step,
        "t0": t0,
        "end": end,
        "on_gpu": ~host_end,
        "thread": np.where(step_thread >= 0, step_thread, main[part]),
        "last_launch": np.where(last_launch >= 0, last_launch, _MIN),
    }


def _concat(chunks: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not chunks:
        z = np.zeros(0, I64)
        return z, z, z
    return tuple(np.concatenate([c[i] for c in chunks]).astype(I64) for i in range(3))  # type: ignore[return-value]


def _op_shares(
    host_segs: list[tuple[np.ndarray, ...]], op_time: list[tuple[np.ndarray, ...]], host: HostSide
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(chain, op name code, ns): the host time of each chain's path inside each outermost host
    event, plus the launch latencies."""
    if host_segs:
        c, th, x, t = (np.concatenate([s[i] for s in host_segs]) for i in range(4))
        keep = t > x
        c, th, x, t = c[keep], th[keep], x[keep], t[keep]
    else:
        c = th = x = t = np.zeros(0, I64)
    blk_name, blk_th, blk_s, blk_e, blocks = host.blk_name, host.blk_thread, host.blk_start, host.blk_end, host.blocks
    # the blocks overlapping [x, t]: from the first whose end is after x to the last starting before t
    ends = Lookup(blk_th, blk_e, int(blocks.lo.size)) if blk_th.size else None
    if ends is not None and c.size:
        i0 = ends.last(th, x) + 1  # positions: blocks are sorted by (thread, start) and by (thread, end) alike
        i0 = np.where(i0 == 0, _first_of(blk_th, th), i0)
        i1 = blocks.last(th, t, strict=True) + 1
        i1 = np.where(i1 == 0, i0, i1)
        cnt = np.maximum(i1 - i0, 0)
        seg = np.repeat(np.arange(c.size), cnt)
        bi = i0[seg] + (np.arange(seg.size) - np.repeat(np.cumsum(cnt) - cnt, cnt))
        ov = np.minimum(blk_e[bi], t[seg]) - np.maximum(blk_s[bi], x[seg])
        ok = ov > 0
        oc, on, ons = c[seg][ok], blk_name[bi][ok], ov[ok]
    else:
        oc = on = ons = np.zeros(0, I64)
    lc, ln, lns = _concat(op_time)
    return np.r_[oc, lc], np.r_[on, ln], np.r_[ons, lns]


def _first_of(sorted_group: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Position of the first item of each query's group in an array sorted by group."""
    return np.searchsorted(sorted_group, group, side="left").astype(I64)


def _top_names(
    n: int, labels: np.ndarray, shares: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Per chain, the name with the most time in ``shares`` (chain, name code, ns) and that time."""
    c, name, ns = shares
    keep = (name >= 0) & (ns > 0)
    c, name, ns = c[keep], name[keep], ns[keep]
    out_name = np.full(n, "", dtype=object)
    out_ns = np.zeros(n, I64)
    if c.size:
        code, m = dense_codes(c, name)
        tot = sum_by(code, ns, m)
        first = np.full(m, 0, I64)
        first[code] = np.arange(code.size)
        cc, nn = c[first], name[first]
        o = lexsort_ints((nn, -tot, cc))
        win = o[np.r_[True, cc[o][1:] != cc[o][:-1]]]
        out_name[cc[win]] = labels[nn[win]].astype(str)
        out_ns[cc[win]] = tot[win]
    return out_name, out_ns
