"""Each rank's dependency chain per step: the compute between its collectives (the ``segments`` table).

The what-if replay (:mod:`dtrace.reduce.whatif`) needs, per rank and step, what the rank's GPU
did between the points where it depends on other ranks. This analysis cuts the rank's *work*
(every GPU activity that is not communication: compute kernels, memcpy, memset; all streams
pooled) at **nodes**, in time order per (rank, device, step):

``start``
    the first GPU event of the step (the host started the step here);
``ready``
    one per communication kernel: the point the rank's work had reached when the collective
    was launched (the latest end of the work launched before it, by launch time; by start time
    where the launch is unknown), never after the kernel's start. A collective cannot start
    before this point;
``gate``
    where the work resumes after waiting for a collective: a busy period of the work union
    starts at most :data:`GATE_TOL_NS` after a communication kernel ended inside the idle gap
    before it (and, where the launch is known, the resuming event was launched before that end:
    the GPU waited for the collective, not for the host);
``end``
    the last end of the step's work.

Each node row describes the interval since the previous node of its chain: ``work_ns`` (the
union of the work in it), ``wait_ns`` (for a gate: the idle time waiting for its collective),
``free_ns`` (the rest: idle time the collective does not explain, e.g. launch gaps; it stays
fixed in a replay unless the host is made faster), ``host_ns`` (the part of ``free_ns`` the work
waited for the host: gaps of the work whose next work event's launch call started after the gap
began; for a ``start`` node, the time the work waited for the host between the step's host
window start and its first GPU event) and the kernel classes of the work in it: ``class_1`` ... ``class_4`` with
``class_1_ns`` ... (the union of each class's events in the interval, largest first; ``""`` and
0 where the interval has fewer classes) and ``other_class_ns`` (the sum over its other classes).
One row per node keeps the table small: a step has about two nodes per collective. ``ready`` and ``gate`` nodes name their communication kernel by
``comm_stream``, ``comm_start_ns`` (its own-clock start; ``NA`` for the other nodes) and
``comm_launch_ns`` (the start of its launch call; ``NA`` when unknown), which
:mod:`dtrace.reduce.whatif` joins to the matched ``collectives``. ``step`` is ``NA`` for the
chain of the events outside every step (a trace without steps).

Notes on the algorithm: everything is vectorised over parts and steps (chains). Unions come
from a grouped running maximum of ends; "the last X at or before t in the same group" is one
joint ``lexsort`` of data and queries (:func:`last_at_or_before`), so no group/time key has to
fit a single int64; a union's coverage ``|U ∩ (-inf, t]|`` is a grouped prefix sum read at
that index. The core, :func:`segment_rows`, takes a frame of GPU events with ``part``,
``rank`` and ``device`` columns (many parts at once); :func:`segments` runs it on a
:class:`~dtrace.analyses.batch.Batch`.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pandas as pd

from ..core.dtypes import empty_frame, missing_if_negative, text_column, text_values
from ..knowledge.classify import Classifier, classifier_for
from ..vector.groups import cummax_by, dense_codes, lexsort_ints, unique, unique_first, unique_inverse
from .batch import Batch

GATE_TOL_NS = 20_000
"""A work period starting at most this long after a collective ended waited for it."""

KINDS = ("start", "ready", "gate", "end")

CLASS_SLOTS = 4
"""Each node names the classes with the most time in its interval, at most this many."""

COLUMNS: dict[str, str] = {
    "rank": "int32",
    "device": "int32",
    "step": "Int64",
    "node": "int64",
    "kind": "object",
    "time_ns": "int64",
    "work_ns": "int64",
    "wait_ns": "int64",
    "free_ns": "int64",
    "host_ns": "int64",
    "comm_stream": "Int64",
    "comm_start_ns": "Int64",
    "comm_launch_ns": "Int64",
    **{c: t for i in range(1, CLASS_SLOTS + 1) for c, t in ((f"class_{i}", "object"), (f"class_{i}_ns", "int64"))},
    "other_class_ns": "int64",
}
"""Output columns and dtypes (registered with the analysis)."""


def last_at_or_before(
    data_group: np.ndarray,
    data_value: np.ndarray,
    query_group: np.ndarray,
    query_value: np.ndarray,
    *,
    strict: bool = False,
) -> np.ndarray:
    """For each query, the data index with the largest value ``<=`` (``<`` if strict) the query's
    value in the same group (the latest such on ties); -1 if none.

    Examples
    --------
    >>> last_at_or_before(np.array([0, 0, 1]), np.array([5, 9, 1]), np.array([0, 0, 1, 2]),
    ...                   np.array([9, 4, 7, 7])).tolist()
    [1, -1, 2, -1]
    >>> last_at_or_before(np.array([0, 0]), np.array([5, 9]), np.array([0]), np.array([9]), strict=True).tolist()
    [0]
    """
    nd, nq = len(data_value), len(query_value)
    if not nq:
        return np.zeros(0, np.int64)
    if not nd:
        return np.full(nq, -1, np.int64)
    g = np.concatenate([np.asarray(data_group, np.int64), np.asarray(query_group, np.int64)])
    v = np.concatenate([np.asarray(data_value, np.int64), np.asarray(query_value, np.int64)])
    code, n_groups = dense_codes(g)
    lo, span = int(v.min()), int(v.max()) - int(v.min()) + 1
    if span * max(n_groups, 1) < (1 << 62):  # (group, value) as one int64 key: one sort of the data
        key = code * span + (v - lo)
        od = np.argsort(key[:nd], kind="stable")  # equal keys in data order: the latest is last
        j = np.searchsorted(key[:nd][od], key[nd:], side="left" if strict else "right") - 1
        jj = od[np.maximum(j, 0)]
        return np.where((j >= 0) & (code[jj] == code[nd:]), jj, -1).astype(np.int64)
    is_q = np.r_[np.zeros(nd, bool), np.ones(nq, bool)]
    # on equal values a data item sorts before the query (<=) or after it (<)
    tie = np.where(is_q, 0 if strict else 1, 1 if strict else 0)
    order = lexsort_ints((np.arange(nd + nq), tie, v, g))
    gs = g[order]
    new_group = np.r_[True, gs[1:] != gs[:-1]]
    pos = np.arange(nd + nq)
    group_first = np.maximum.accumulate(np.where(new_group, pos, 0))
    last_data_pos = np.maximum.accumulate(np.where(~is_q[order], pos, -1))
    hit = (last_data_pos >= group_first) & (last_data_pos >= 0)
    found = np.where(hit, order[np.maximum(last_data_pos, 0)], -1)
    out = np.empty(nq, np.int64)
    qmask = is_q[order]
    out[order[qmask] - nd] = found[qmask]
    return out


def _labels(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, labels)`` of a categorical or plain column (codes into labels; -1 missing)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy().astype(np.int64), np.asarray(col.cat.categories, dtype=object)
    codes, labels = pd.factorize(col.to_numpy(object))
    return codes.astype(np.int64), np.asarray(labels, dtype=object)


def _is(codes: np.ndarray, labels: np.ndarray, value: str) -> np.ndarray:
    hit = np.flatnonzero(labels.astype(str) == value)
    return codes == hit[0] if len(hit) else np.zeros(len(codes), bool)


def _unions(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per group, the union of intervals: (group, seg_start, seg_end, prefix, first_event).

    ``prefix`` is the covered length of the group's earlier segments; ``first_event`` the index
    (into the inputs) of the event that opens each segment. Segments are sorted by (group, start).
    """
    if not len(start):
        z = np.zeros(0, np.int64)
        return z, z, z, z, z
    order = lexsort_ints((start, group))
    g, s, e = group[order], start[order], end[order]
    run = cummax_by(g, e)
    first_in_group = np.r_[True, g[1:] != g[:-1]]
    prev_run = np.r_[np.int64(0), run[:-1]]
    new = first_in_group | (s > prev_run)
    heads = np.flatnonzero(new)
    tails = np.r_[heads[1:] - 1, len(s) - 1]
    seg_g, seg_s, seg_e = g[heads], s[heads], run[tails]
    length = seg_e - seg_s
    csum = np.cumsum(length) - length
    gfirst = np.r_[True, seg_g[1:] != seg_g[:-1]]
    base = np.maximum.accumulate(np.where(gfirst, np.arange(len(seg_g)), 0))
    prefix = csum - csum[base]
    return seg_g, seg_s, seg_e, prefix, order[heads]


def _coverage(u: tuple[np.ndarray, ...], group: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``|U_group ∩ (-inf, t]|`` for each query (group, t)."""
    seg_g, seg_s, seg_e, prefix = u[0], u[1], u[2], u[3]
    j = last_at_or_before(seg_g, seg_s, group, t)
    jj = np.maximum(j, 0)
    if not len(seg_s):
        return np.zeros(len(t), np.int64)
    inside = np.clip(t - seg_s[jj], 0, seg_e[jj] - seg_s[jj])
    return np.where(j >= 0, prefix[jj] + inside, 0).astype(np.int64)


def _ranked_coverage(u: tuple[np.ndarray, ...], rank: np.ndarray, t: np.ndarray, t_prev: np.ndarray) -> np.ndarray:
    """``|U ∩ (t_prev, t]|`` for each query, ``rank`` giving the position of its group among
    the sorted distinct groups of the union ``u`` (from :func:`_unions`, sorted by group and
    start): the segments' (group rank, start) are already one sorted int64 key, so a binary
    search finds every query's last segment (no sort); :func:`_coverage` where the key would
    not fit."""
    seg_g, seg_s = u[0], u[1]
    if not len(rank) or not len(seg_s):
        return np.zeros(len(rank), np.int64)
    lo = min(int(seg_s.min()), int(t.min()), int(t_prev.min()))
    span = max(int(seg_s.max()), int(t.max()), int(t_prev.max())) - lo + 1
    seg_rank = np.cumsum(np.r_[False, seg_g[1:] != seg_g[:-1]])
    if span * (int(seg_rank[-1]) + 1) >= (1 << 62):
        groups = seg_g[np.r_[0, np.flatnonzero(seg_g[1:] != seg_g[:-1]) + 1]][rank]
        out: np.ndarray = _coverage(u, groups, t) - _coverage(u, groups, t_prev)
        return out
    key = seg_rank * span + (seg_s - lo)
    base = rank * span - lo
    out = _covered(u, seg_rank, key, rank, base, t) - _covered(u, seg_rank, key, rank, base, t_prev)
    return out


def _covered(
    u: tuple[np.ndarray, ...], seg_rank: np.ndarray, key: np.ndarray, rank: np.ndarray, base: np.ndarray, t: np.ndarray
) -> np.ndarray:
    """:func:`_coverage` at ``t`` of queries whose group key starts at ``base``, on the sorted
    segment key of :func:`_ranked_coverage`."""
    seg_s, seg_e, prefix = u[1], u[2], u[3]
    j = np.searchsorted(key, base + t, side="right") - 1
    jj = np.maximum(j, 0)
    inside = np.clip(t - seg_s[jj], 0, seg_e[jj] - seg_s[jj])
    return np.where((j >= 0) & (seg_rank[jj] == rank), prefix[jj] + inside, 0).astype(np.int64)


def segment_rows(
    gpu: pd.DataFrame,
    classifier: Classifier,
    gate_tol_ns: int = GATE_TOL_NS,
    steps: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The ``segments`` rows of many parts at once (see the module docstring).

    Parameters
    ----------
    gpu
        GPU events of one or more parts: ``part``, ``rank``, ``device``, ``stream``, ``kind``,
        ``name``, ``start_ns``, ``end_ns``, ``launch_ns`` (-1 unknown), ``category``, ``step``.
    classifier
        Gives each distinct (name, kind, category) its kernel class.
    gate_tol_ns
        How soon after a collective's end resuming work counts as having waited for it.
    steps
        The step windows (``part``, ``step``, ``start_ns``, ``source``): a step with a host
        window counts, in its start node's ``host_ns``, the time the GPU waited for the host
        between the window's start and the step's first GPU event.
    """
    if not len(gpu):
        return empty_frame(COLUMNS)
    cat_code, cat_lab = _labels(gpu["category"])
    kind_code, kind_lab = _labels(gpu["kind"])
    comm_cat = _is(cat_code, cat_lab, "comm")
    is_comm = comm_cat & _is(kind_code, kind_lab, "kernel")
    is_work = ~comm_cat
    keep = is_comm | is_work
    if not keep.any():
        return empty_frame(COLUMNS)
    part_all = gpu["part"].to_numpy(np.int64)
    start_all = gpu["start_ns"].to_numpy(np.int64)
    end_all = gpu["end_ns"].to_numpy(np.int64)
    launch_all = gpu["launch_ns"].to_numpy(np.int64)

    # chains: one per (part, step); S = first start of the chain's events
    chain_all, c_part, c_step, c_start = _chains(keep, part_all, gpu["step"].to_numpy(np.int64), start_all)
    n_chains = len(c_part)
    w = np.flatnonzero(is_work)
    k = np.flatnonzero(is_comm)
    w_s, w_e = start_all[w], end_all[w]

    # work union per chain; chain end = last work end (the start when the chain has no work)
    union = _unions(chain_all[w], w_s, w_e)
    c_end = c_start.copy()
    np.maximum.at(c_end, union[0], union[2])
    ready = _ready_points(part_all, start_all, launch_all, w, k, w_e, c_start[chain_all[k]])
    gates = _gates(union, c_start, c_part, part_all[k], end_all[k], launch_all[w], gate_tol_ns)
    ch, t, nk, comm, pe = _nodes(c_start, c_end, k, chain_all[k], ready, gates)
    first = np.r_[True, ch[1:] != ch[:-1]]
    t_prev = np.where(first, t, np.r_[t[:1], t[:-1]])
    pos = np.arange(len(t))
    node_no = pos - np.maximum.accumulate(np.where(first, pos, 0))

    work = _coverage(union, ch, t) - _coverage(union, ch, t_prev)
    wait = np.where(nk == 2, t - np.maximum(pe, t_prev), 0)
    wait = np.clip(wait, 0, t - t_prev)
    free = np.maximum(t - t_prev - work - wait, 0)
    host = _host_waits(part_all[w], w_s, w_e, launch_all[w], c_part, c_step, c_start, ch, nk, t, t_prev, wait, steps)

    has_comm = comm >= 0
    cidx = np.maximum(comm, 0)
    launched = has_comm & (launch_all[cidx] >= 0)
    _pu, p_first = unique_first(part_all)
    p_idx = np.searchsorted(_pu, c_part[ch])
    stream_all = gpu["stream"].to_numpy(np.int64)
    cols: dict[str, object] = {
        "rank": gpu["rank"].to_numpy()[p_first][p_idx].astype(np.int32),
        "device": gpu["device"].to_numpy()[p_first][p_idx].astype(np.int32),
        "step": missing_if_negative(c_step[ch]),
        "node": node_no.astype(np.int64),  # NA: outside every step
        "kind": np.asarray(KINDS, dtype=object)[nk],
        "time_ns": t,
        "work_ns": work.astype(np.int64),
        "wait_ns": wait.astype(np.int64),
        "free_ns": free.astype(np.int64),
        "host_ns": np.minimum(host, np.where(nk == 0, host, free)).astype(np.int64),
        "comm_stream": pd.arrays.IntegerArray(np.where(has_comm, stream_all[cidx], 0).astype(np.int64), ~has_comm),
        "comm_start_ns": pd.arrays.IntegerArray(np.where(has_comm, start_all[cidx], 0).astype(np.int64), ~has_comm),
        "comm_launch_ns": pd.arrays.IntegerArray(np.where(launched, launch_all[cidx], 0).astype(np.int64), ~launched),
    }
    ccode, cnames = _work_classes(_labels(gpu["name"]), (kind_code, kind_lab), (cat_code, cat_lab), w, classifier)
    cols.update(_class_columns(chain_all[w], w_s, w_e, ccode, cnames, ch, t, t_prev, n_chains))
    return pd.DataFrame(cols)


def _chains(
    keep: np.ndarray, part_all: np.ndarray, step_all: np.ndarray, start_all: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each kept event's chain (one per part and step; -1: not kept), and each chain's part,
    step and first start."""
    step_u, step_c = unique_inverse(step_all[keep])
    chain_u, chain_codes = unique_inverse(part_all[keep] * len(step_u) + step_c)
    chain_all = np.full(len(keep), -1, np.int64)
    chain_all[keep] = chain_codes
    c_part = chain_u // len(step_u)
    c_step = step_u[chain_u % len(step_u)]
    c_start = np.full(len(chain_u), np.iinfo(np.int64).max)
    np.minimum.at(c_start, chain_codes, start_all[keep])
    return chain_all, c_part, c_step, c_start


def _ready_points(
    part_all: np.ndarray,
    start_all: np.ndarray,
    launch_all: np.ndarray,
    w: np.ndarray,
    k: np.ndarray,
    w_e: np.ndarray,
    k_chain_start: np.ndarray,
) -> np.ndarray:
    """Per collective ``k``: the latest end of the work ``w`` launched before it (per part, by
    launch order), within its chain's start and its own start."""
    key_all = np.where(launch_all >= 0, launch_all, start_all)
    w_part = part_all[w]
    o = lexsort_ints((key_all[w], w_part))
    runmax = cummax_by(w_part[o], w_e[o])
    j = last_at_or_before(w_part[o], key_all[w][o], part_all[k], key_all[k], strict=True)
    ready = np.where(j >= 0, runmax[np.maximum(j, 0)] if len(runmax) else 0, np.iinfo(np.int64).min)
    return cast(np.ndarray, np.maximum(np.minimum(ready, start_all[k]), k_chain_start))


def _gates(
    union: tuple[np.ndarray, ...],
    c_start: np.ndarray,
    c_part: np.ndarray,
    k_part: np.ndarray,
    k_e: np.ndarray,
    w_launch: np.ndarray,
    gate_tol_ns: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Gates: a work period that resumes right after a collective ended in the gap before it.
    Their chains, times, collectives (positions in ``k_part``) and the previous work ends."""
    seg_g, seg_s, seg_e, _prefix, seg_first = union
    if not len(seg_g):
        none = np.zeros(0, np.int64)
        return none, none, none, none
    gfirst = np.r_[True, seg_g[1:] != seg_g[:-1]]
    prev_end = np.where(gfirst, c_start[seg_g] - 1, np.r_[np.int64(0), seg_e[:-1]])
    seg_part = c_part[seg_g]
    ko = np.argsort(k_e, kind="stable")
    jk = last_at_or_before(k_part[ko], k_e[ko], seg_part, seg_s)
    hit = jk >= 0
    kk = ko[np.maximum(jk, 0)] if len(ko) else np.zeros(len(seg_s), np.int64)
    g_end = k_e[kk] if len(k_e) else np.zeros(len(seg_s), np.int64)
    resume_launch = w_launch[seg_first]
    is_gate = (
        hit & (g_end > prev_end) & (seg_s - g_end <= gate_tol_ns) & ((resume_launch < 0) | (resume_launch < g_end))
    )
    gi = np.flatnonzero(is_gate)
    return seg_g[gi], seg_s[gi], kk[gi], prev_end[gi]


def _nodes(
    c_start: np.ndarray,
    c_end: np.ndarray,
    k: np.ndarray,
    k_chain: np.ndarray,
    ready: np.ndarray,
    gates: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The nodes in chain order (chain, time, kind code, collective event, previous work end of
    a gate); the end node comes last even when a ready point lies after the last work end."""
    gate_chain, gate_t, gate_k, gate_pe = gates
    n_chains, n_k, n_g = len(c_start), len(k), len(gate_t)
    ch = np.concatenate([np.arange(n_chains), k_chain, gate_chain, np.arange(n_chains)])
    t = np.concatenate([c_start, ready, gate_t, c_end])
    nk = np.concatenate(
        [np.zeros(n_chains, np.int8), np.ones(n_k, np.int8), np.full(n_g, 2, np.int8), np.full(n_chains, 3, np.int8)]
    )
    comm = np.concatenate(
        [np.full(n_chains, -1), k, k[gate_k] if n_g else np.zeros(0, np.int64), np.full(n_chains, -1)]
    ).astype(np.int64)
    pe = np.concatenate([np.full(n_chains + n_k, -1), gate_pe, np.full(n_chains, -1)]).astype(np.int64)
    last_t = np.full(n_chains, np.iinfo(np.int64).min)
    np.maximum.at(last_t, ch, t)
    t = np.where(nk == 3, last_t[ch], t)
    o = lexsort_ints((nk, t, ch))
    return ch[o], t[o], nk[o], comm[o], pe[o]


def _work_classes(
    names: tuple[np.ndarray, np.ndarray],
    kinds: tuple[np.ndarray, np.ndarray],
    cats: tuple[np.ndarray, np.ndarray],
    w: np.ndarray,
    classifier: Classifier,
) -> tuple[np.ndarray, np.ndarray]:
    """Each work event's class code and the class names, classifying each distinct (name, kind,
    category) once (``names``, ``kinds``, ``cats``: each event's code and the labels)."""
    (name_code, name_lab), (kind_code, kind_lab), (cat_code, cat_lab) = names, kinds, cats
    trip = (name_code[w] * (len(kind_lab) + 1) + kind_code[w]) * (len(cat_lab) + 1) + cat_code[w]
    tuniq, tcode = unique_inverse(trip)
    t_name = tuniq // ((len(kind_lab) + 1) * (len(cat_lab) + 1))
    t_kind = tuniq // (len(cat_lab) + 1) % (len(kind_lab) + 1)
    t_cat = tuniq % (len(cat_lab) + 1)
    cls_of = np.asarray(
        classifier.classify(
            [str(x) for x in name_lab[t_name]], [str(x) for x in kind_lab[t_kind]], [str(x) for x in cat_lab[t_cat]]
        ),
        dtype=object,
    )
    cnames, ccode_u = np.unique(cls_of, return_inverse=True)
    return ccode_u[tcode], cnames


def _class_columns(
    w_chain: np.ndarray,
    w_s: np.ndarray,
    w_e: np.ndarray,
    ccode: np.ndarray,
    cnames: np.ndarray,
    ch: np.ndarray,
    t: np.ndarray,
    t_prev: np.ndarray,
    n_chains: int,
) -> dict[str, Any]:
    """Per-class unions and each node's class time: the node's :data:`CLASS_SLOTS` largest
    classes (``class_<i>``, ``class_<i>_ns``), the rest summed (``other_class_ns``)."""
    n_cls = max(len(cnames), 1)
    cgroup = w_chain * n_cls + ccode
    cu = _unions(cgroup, w_s, w_e)
    pairs = unique(cu[0]) if len(cu[0]) else np.zeros(0, np.int64)
    pc_chain, pc_cls = pairs // n_cls, pairs % n_cls
    per_chain = np.bincount(pc_chain, minlength=n_chains)
    chain_pair0 = np.r_[0, np.cumsum(per_chain)[:-1]]
    reps = per_chain[ch]
    ni = np.repeat(np.arange(len(t)), reps)
    off = np.arange(len(ni)) - np.repeat(np.cumsum(reps) - reps, reps)
    pi = chain_pair0[ch[ni]] + off
    cls_ns = _ranked_coverage(cu, pi, t[ni], t_prev[ni])
    pos_rows = cls_ns > 0
    ni, cls_ns, cls_code = ni[pos_rows], cls_ns[pos_rows], pc_cls[pi[pos_rows]]
    # the node's CLASS_SLOTS largest classes, the rest summed
    o2 = lexsort_ints((cls_code, -cls_ns, ni))
    ni, cls_ns, cls_code = ni[o2], cls_ns[o2], cls_code[o2]
    rank_in_node = np.arange(len(ni)) - np.searchsorted(ni, ni)
    labels = text_values(np.append(np.asarray(cnames, dtype=object), ""))  # the last: no class
    cols: dict[str, Any] = {}
    for slot in range(CLASS_SLOTS):
        m = rank_in_node == slot
        name = np.full(len(t), len(cnames), np.int64)
        ns = np.zeros(len(t), np.int64)
        name[ni[m]] = cls_code[m]
        ns[ni[m]] = cls_ns[m]
        cols[f"class_{slot + 1}"] = text_column(labels, name)
        cols[f"class_{slot + 1}_ns"] = ns
    rest = rank_in_node >= CLASS_SLOTS
    cols["other_class_ns"] = np.bincount(ni[rest], weights=cls_ns[rest], minlength=len(t)).astype(np.int64)
    return cols


def _host_waits(
    part: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    launch: np.ndarray,
    c_part: np.ndarray,
    c_step: np.ndarray,
    c_start: np.ndarray,
    ch: np.ndarray,
    nk: np.ndarray,
    t: np.ndarray,
    t_prev: np.ndarray,
    wait: np.ndarray,
    steps: pd.DataFrame | None,
) -> np.ndarray:
    """Per node, the time the rank's work waited for the host before it: the gaps of its work
    (``part``, ``start``, ``end``, ``launch``: the work events, all streams pooled) whose next
    event was launched after the gap began, inside the node's interval outside its collective
    wait; for a start node, between its step's host window start and the step's first GPU event."""
    n_parts = int(max(part.max(initial=-1), c_part.max(initial=-1))) + 1
    if not part.size:
        return np.zeros(len(t), np.int64)
    o = lexsort_ints((end, start, part))
    p, s, e, lo = part[o], start[o], end[o], launch[o]
    run = cummax_by(p, e)
    first = np.r_[True, p[1:] != p[:-1]]
    busy = np.r_[np.int64(0), run[:-1]]
    # the window start of each chain with a host window (the chain's start otherwise)
    w_start = c_start.copy()
    host = (steps["source"] == "host").to_numpy(bool) if steps is not None and len(steps) else np.zeros(0, bool)
    if steps is not None and host.any():
        key = pd.MultiIndex.from_arrays(
            [steps["part"].to_numpy(np.int64)[host], steps["step"].to_numpy(np.int64)[host]]
        )
        j = key.get_indexer(pd.MultiIndex.from_arrays([c_part, c_step])) if key.size else np.full(c_part.size, -1)
        w_start = np.where(
            j >= 0, np.minimum(steps["start_ns"].to_numpy(np.int64)[host][np.maximum(j, 0)], c_start), c_start
        )
    p_lo = np.full(n_parts, np.iinfo(np.int64).max)
    np.minimum.at(p_lo, c_part, w_start)
    busy = np.where(first, np.minimum(p_lo[p], s), busy)
    gap = (lo >= 0) & (lo > busy) & (s > busy) & (first | (s > busy))
    hu = _unions(p[gap], busy[gap], s[gap])
    node_part = c_part[ch]
    upto = t - wait
    since = np.where(nk == 0, w_start[ch], t_prev)
    return cast(np.ndarray, np.maximum(_coverage(hu, node_part, upto) - _coverage(hu, node_part, since), 0))


def segments(batch: Batch) -> pd.DataFrame:
    """The ``segments`` table of every part of the partition (see the module docstring)."""
    if not len(batch.gpu):
        return empty_frame(COLUMNS)
    return segment_rows(batch.gpu, classifier_for(batch.options), steps=batch.steps)
