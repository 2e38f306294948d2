"""Launch statistics: every GPU event linked to its launch call (see docs/semantics.md, "Launches").

A GPU event (kernel, memcpy, memset) is *linked* when a host runtime call of its part carries its
correlation id (``launch_ns`` ≥ 0 in :attr:`~dtrace.analyses.batch.Batch.gpu`): that call launched it —
``cudaLaunchKernel``, ``cuLaunchKernel``, ``cudaGraphLaunch`` (all kernels of the graph),
``cudaMemcpyAsync``, ``hipLaunchKernel``, ... Per linked event, as HTA's
``get_cuda_kernel_launch_stats`` defines them:

- ``cpu_ns = launch_end_ns − launch_ns``: how long the launch call ran on the host;
- ``gpu_ns = end_ns − start_ns``: how long the event ran on the GPU;
- ``delay_ns = max(start_ns − launch_end_ns, 0)``: the *launch delay*, from the end of the call to
  the start on the GPU. A negative difference (the GPU started before the call returned: graph
  kernels, a call the GPU outran, clock skew) is clipped to 0 and counted (``negative_delay``);
- ``queue_length``: the stream's launch queue right after the event's launch was counted, itself
  included — its place in the queue (:class:`Series`; launches at the same instant, the kernels of
  a graph, are counted in event order): how much launched work was waiting ahead of it, plus one;
- ``short``: ``gpu_ns < cpu_ns`` — the GPU finished the event faster than the host launched it
  (a launch-bound event: the host cannot keep such a stream busy);
- ``runtime_outlier``: ``cpu_ns > launch_runtime_cutoff_ns``; ``delay_outlier``: ``delay_ns >
  launch_delay_cutoff_ns`` (defaults 50 µs and 100 µs, HTA's).

Tables: ``launches`` (per linked event; by default only the outliers, at most ``launch_rows`` per
part, so the table stays small for thousands of ranks), ``launch_stats`` (per rank, device and
stream) and ``launch_histogram`` (the launch delays of a part in fixed 1-2-5 bins). All parts and
streams of a partition are computed in one pass: dense group codes, grouped sums and quantiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
import pandas as pd

from ..core.constants import KINDS
from ..vector.groups import (
    I64,
    count_by,
    cumcount,
    dense_codes,
    first_match,
    lexsort_ints,
    max_by,
    quantiles_by,
    sum_by,
    unique_first,
)
from ..vector.intervals import Axis
from .batch import Batch, kind_codes
from .timeline import window

LAUNCH_COLUMNS = [
    "rank",
    "device",
    "stream",
    "step",
    "name",
    "kind",
    "launch_name",
    "start_ns",
    "launch_ns",
    "cpu_ns",
    "gpu_ns",
    "delay_ns",
    "queue_length",
    "negative_delay",
    "short",
    "runtime_outlier",
    "delay_outlier",
]
STATS_COLUMNS = [
    "rank",
    "device",
    "stream",
    "launches",
    "cpu_total_ns",
    "cpu_mean_ns",
    "cpu_median_ns",
    "cpu_p95_ns",
    "cpu_max_ns",
    "gpu_total_ns",
    "gpu_mean_ns",
    "gpu_median_ns",
    "delay_total_ns",
    "delay_mean_ns",
    "delay_median_ns",
    "delay_p95_ns",
    "delay_max_ns",
    "negative_delays",
    "runtime_outliers",
    "delay_outliers",
    "short_kernels",
    "short_gpu_ns",
    "short_share",
]
HIST_COLUMNS = ["rank", "device", "bin", "lo_ns", "hi_ns", "count", "share"]
DELAY_EDGES_NS = np.array([0] + [m * 10**e for e in range(3, 9) for m in (1, 2, 5)] + [10**9], I64)
"""Lower edges of the launch delay bins: 0, 1 µs, 2 µs, 5 µs, 10 µs, ..., 500 ms, 1 s (the last
bin is open: 1 s and longer)."""


@dataclass(frozen=True)
class Linked:
    """The linked GPU events of a batch (arrays in ``batch.gpu`` order, one entry per event), and
    the stream of every GPU event: ``gpu_group`` codes each (part, stream) of ``batch.gpu`` in
    (part, stream) order (``n_groups`` codes, one per pair of a part and a stream id of the batch,
    present or not, with their ``gpart`` and ``gstream``); ``group`` is the linked events'."""

    rows: np.ndarray  # position in batch.gpu
    part: np.ndarray
    stream: np.ndarray
    start: np.ndarray
    end: np.ndarray
    launch: np.ndarray  # launch call start
    launch_end: np.ndarray
    group: np.ndarray
    gpu_group: np.ndarray
    n_groups: int
    gpart: np.ndarray
    gstream: np.ndarray

    @property
    def cpu(self) -> np.ndarray:
        return cast(np.ndarray, self.launch_end - self.launch)

    @property
    def gpu(self) -> np.ndarray:
        return cast(np.ndarray, self.end - self.start)

    @property
    def raw_delay(self) -> np.ndarray:
        return cast(np.ndarray, self.start - self.launch_end)

    @property
    def delay(self) -> np.ndarray:
        return cast(np.ndarray, np.maximum(self.raw_delay, 0))

    def streams(self) -> np.ndarray:
        """The codes of the streams with linked events, in code order (part, then stream)."""
        return np.flatnonzero(count_by(self.group, self.n_groups))


def linked(batch: Batch) -> Linked:
    """The GPU events of ``batch`` that have a launch call, with every event's stream code
    (computed once per batch)."""
    return batch.derived("launches.linked", _linked)


def series(batch: Batch) -> "Series":
    """The launch queue series of every stream of ``batch`` (computed once per batch)."""
    return batch.derived("launches.series", lambda b: Series(b, linked(b)))


def _linked(batch: Batch) -> Linked:
    g = batch.gpu
    launch = g["launch_ns"].to_numpy(I64)
    rows = np.flatnonzero(launch >= 0)
    gp, gs = g["part"].to_numpy(I64), g["stream"].to_numpy(I64)
    # (part, stream) codes in their order, with gaps for absent pairs: no sort of the events
    pc, parts = pd.factorize(gp, sort=True)
    sc, streams = pd.factorize(gs, sort=True)
    n_streams = max(len(streams), 1)
    code = pc.astype(I64) * n_streams + sc
    n = len(parts) * n_streams
    every = np.arange(n, dtype=I64)
    return Linked(
        rows=rows,
        part=gp[rows],
        stream=gs[rows],
        start=g["start_ns"].to_numpy(I64)[rows],
        end=g["end_ns"].to_numpy(I64)[rows],
        launch=launch[rows],
        launch_end=g["launch_end_ns"].to_numpy(I64)[rows],
        group=code[rows],
        gpu_group=code,
        n_groups=n,
        gpart=np.asarray(parts, I64)[every // n_streams] if n else np.zeros(0, I64),
        gstream=np.asarray(streams, I64)[every % n_streams] if n else np.zeros(0, I64),
    )


class Series:
    """The launch queue of every stream as change points (see :mod:`dtrace.analyses.queues`).

    Each linked event adds a launch point (+1, at its call's start) and a start point (-1, at its
    GPU start). Every stream's times are laid on one line (:attr:`axis`, a
    :class:`~dtrace.vector.intervals.Axis` that also spans its GPU events and its part's timeline
    window), so one stable sort of ``2 × time + (start)`` orders all points by (stream, time), the
    launches before the starts at equal times (in event order), and one cumulative sum gives every
    length: each stream's points add up to 0, so the sum is back at 0 where the next stream
    begins. Attributes: ``group``, ``t`` (trace time), ``pt`` (on the axis), ``v`` (the length
    from the point on), ``dur`` (to the stream's next point; 0 for its last), ``last``, and
    ``at_launch`` (each linked event's length right after its launch point: its place in the
    queue, itself included).
    """

    def __init__(self, batch: Batch, lk: Linked) -> None:
        rep, rep_of = one_entry_per_launch(lk)
        group, launch, start = lk.group[rep], lk.launch[rep], lk.start[rep]
        n = rep.size
        lo, width = window(batch)  # every time of a part lies in its window: its bounds span the axis
        wlo = lo[lk.gpart]
        whi = wlo + width[lk.gpart] * int(batch.options.timeline_bins)
        codes = np.arange(lk.n_groups, dtype=I64)
        self.axis = Axis(np.concatenate([codes, codes]), np.concatenate([wlo, whi]), lk.n_groups)
        key = np.concatenate([self.axis.place(launch, group) * 2, self.axis.place(start, group) * 2 + 1])
        order = np.argsort(key, kind="stable")
        self.group = np.concatenate([group, group])[order]
        self.pt = key[order] // 2
        self.t = self.pt - self.axis.shift[self.group]
        self.v = np.cumsum(np.where(order < n, 1, -1)).astype(I64)
        same = np.zeros(order.size, bool)
        same[:-1] = self.group[1:] == self.group[:-1]
        self.dur = np.zeros(order.size, I64)
        self.dur[:-1] = np.where(same[:-1], self.pt[1:] - self.pt[:-1], 0)
        self.last = ~same
        where = np.empty(order.size, I64)
        where[order] = np.arange(order.size)
        self.at_launch = self.v[where[:n]][rep_of]


def one_entry_per_launch(lk: Linked) -> tuple[np.ndarray, np.ndarray]:
    """The linked events that enter a stream's launch queue, one per launch call and stream: a
    graph launch (``cudaGraphLaunch``, ``hipGraphLaunch``) links every kernel of the graph to one
    call, but the runtime queues the graph as one piece of work, not one entry per kernel; it
    leaves the queue when its first kernel on the stream starts. Events of one call share its
    start and end (``launch``, ``launch_end``).

    Returns
    -------
    rep : numpy.ndarray
        Positions (in ``lk``'s order) of the events that enter the queue: the earliest-starting
        event of each (stream, call), in ``lk``'s order.
    rep_of : numpy.ndarray
        For every linked event, the position in ``rep`` of its call's entry.

    Examples
    --------
    >>> import types
    >>> lk = types.SimpleNamespace(group=np.array([0, 0, 0, 0]), launch=np.array([10, 10, 10, 20]),
    ...     launch_end=np.array([15, 15, 15, 25]), start=np.array([40, 30, 50, 60]))
    >>> [a.tolist() for a in one_entry_per_launch(lk)]  # a graph of 3 kernels, then a kernel
    [[1, 3], [0, 0, 0, 1]]
    """
    n = lk.group.size
    if not n:
        return np.zeros(0, I64), np.zeros(0, I64)
    order = lexsort_ints((lk.start, lk.launch_end, lk.launch, lk.group))
    key = (lk.group[order], lk.launch[order], lk.launch_end[order])
    new = np.ones(n, bool)
    new[1:] = (key[0][1:] != key[0][:-1]) | (key[1][1:] != key[1][:-1]) | (key[2][1:] != key[2][:-1])
    if new.all():
        return np.arange(n, dtype=I64), np.arange(n, dtype=I64)
    first = order[new]  # each call's earliest event, in key order
    rep = np.sort(first)
    call = np.cumsum(new) - 1  # the call of each event in key order
    rep_of = np.empty(n, I64)
    rep_of[order] = np.searchsorted(rep, first)[call]
    return rep.astype(I64), rep_of


def launches(batch: Batch) -> pd.DataFrame:
    """The ``launches`` table: linked GPU events (outliers only, at most ``launch_rows`` per part,
    unless ``launch_rows`` is ``None``), by part, then GPU start."""
    o = batch.options
    lk = linked(batch)
    cpu, delay = lk.cpu, lk.delay
    rt_out = cpu > o.launch_runtime_cutoff_ns
    dl_out = delay > o.launch_delay_cutoff_ns
    if o.launch_rows is None:
        sel = np.arange(lk.rows.size)
    else:
        # the worst outliers of each part: by how many times its cut-off the call or the delay is
        score = np.maximum(_ratio(cpu, o.launch_runtime_cutoff_ns), _ratio(delay, o.launch_delay_cutoff_ns))
        cand = np.flatnonzero(rt_out | dl_out)
        cand = cand[lexsort_ints((-score[cand], lk.part[cand]))]
        sel = cand[cumcount(lk.part[cand]) < o.launch_rows] if cand.size else cand
    sel = sel[lexsort_ints((sel, lk.start[sel], lk.part[sel]))]
    g = batch.gpu
    grow = lk.rows[sel]
    part = lk.part[sel]
    name = g["name"]
    out = pd.DataFrame(
        {
            **batch.keys(part),
            "stream": lk.stream[sel],
            "step": g["step"].to_numpy(I64)[grow],
            "name": np.asarray(name.cat.categories, dtype=object)[name.cat.codes.to_numpy()[grow]],
            "kind": np.asarray(g["kind"].cat.categories, dtype=object)[g["kind"].cat.codes.to_numpy()[grow]],
            "launch_name": _launch_names(batch, part, g["correlation"].to_numpy(I64)[grow]),
            "start_ns": lk.start[sel],
            "launch_ns": lk.launch[sel],
            "cpu_ns": cpu[sel],
            "gpu_ns": lk.gpu[sel],
            "delay_ns": delay[sel],
            "queue_length": series(batch).at_launch[sel],
            "negative_delay": lk.raw_delay[sel] < 0,
            "short": lk.gpu[sel] < cpu[sel],
            "runtime_outlier": rt_out[sel],
            "delay_outlier": dl_out[sel],
        }
    )
    return out


def _ratio(x: np.ndarray, cutoff: int) -> np.ndarray:
    """``x / cutoff`` (a cut-off of 0: any positive value is infinitely beyond it)."""
    if cutoff > 0:
        return x / float(cutoff)
    return np.where(x > 0, np.inf, 0.0)


def _launch_names(batch: Batch, part: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """The name of each event's launch call (the first runtime call of its part with its correlation
    id, as :func:`dtrace.analyses.batch.prepare` links them)."""
    if not part.size:
        return np.array([], object)
    h = batch.host
    hcorr = h["correlation"].to_numpy(I64)
    # the runtime calls with one of the wanted ids (few), in host order: the first one of a part wins
    is_launch = (kind_codes(h["kind"]) == KINDS.index("runtime")) & (hcorr >= 0) & np.isin(hcorr, corr)
    idx = first_match((h["part"].to_numpy(I64)[is_launch], hcorr[is_launch]), (part, corr))
    names = h["name"]
    codes = names.cat.codes.to_numpy()[is_launch]
    cats = np.asarray(names.cat.categories, dtype=object)
    return np.where(idx >= 0, cats[codes[np.maximum(idx, 0)]] if codes.size else "", "").astype(object)


def launch_stats(batch: Batch) -> pd.DataFrame:
    """The ``launch_stats`` table: per (rank, device, stream), the launch figures of its linked events."""
    o = batch.options
    lk = linked(batch)
    if not lk.rows.size:
        return pd.DataFrame({c: [] for c in STATS_COLUMNS})
    n, grp = lk.n_groups, lk.group
    cpu, gpu, delay = lk.cpu, lk.gpu, lk.delay
    count = count_by(grp, n)
    cnt = np.maximum(count, 1).astype(np.float64)
    short = gpu < cpu
    n_short = count_by(grp[short], n)
    cpu_med, cpu_p95 = quantiles_by(grp, cpu, n, (0.5, 0.95))
    (gpu_med,) = quantiles_by(grp, gpu, n, (0.5,))
    delay_med, delay_p95 = quantiles_by(grp, delay, n, (0.5, 0.95))
    cols = {
        "launches": count,
        "cpu_total_ns": sum_by(grp, cpu, n),
        "cpu_mean_ns": sum_by(grp, cpu, n) / cnt,
        "cpu_median_ns": cpu_med,
        "cpu_p95_ns": cpu_p95,
        "cpu_max_ns": max_by(grp, cpu, n, 0),
        "gpu_total_ns": sum_by(grp, gpu, n),
        "gpu_mean_ns": sum_by(grp, gpu, n) / cnt,
        "gpu_median_ns": gpu_med,
        "delay_total_ns": sum_by(grp, delay, n),
        "delay_mean_ns": sum_by(grp, delay, n) / cnt,
        "delay_median_ns": delay_med,
        "delay_p95_ns": delay_p95,
        "delay_max_ns": max_by(grp, delay, n, 0),
        "negative_delays": count_by(grp[lk.raw_delay < 0], n),
        "runtime_outliers": count_by(grp[cpu > o.launch_runtime_cutoff_ns], n),
        "delay_outliers": count_by(grp[delay > o.launch_delay_cutoff_ns], n),
        "short_kernels": n_short,
        "short_gpu_ns": sum_by(grp[short], gpu[short], n),
        "short_share": n_short / cnt,
    }
    present = lk.streams()
    return pd.DataFrame(
        {**batch.keys(lk.gpart[present]), "stream": lk.gstream[present], **{k: v[present] for k, v in cols.items()}}
    )


def launch_histogram(batch: Batch) -> pd.DataFrame:
    """The ``launch_histogram`` table: per (rank, device), how many launch delays fall in each bin
    of :data:`DELAY_EDGES_NS` (every stream pooled; empty bins left out)."""
    lk = linked(batch)
    if not lk.rows.size:
        return pd.DataFrame({c: [] for c in HIST_COLUMNS})
    nb = DELAY_EDGES_NS.size
    b = np.searchsorted(DELAY_EDGES_NS, lk.delay, side="right") - 1
    cell = lk.part * nb + b
    codes, cells = dense_codes(cell)
    _, first = unique_first(codes)
    count = count_by(codes, cells)
    part, bins = lk.part[first], b[first]
    per_part = count_by(lk.part, batch.n_parts).astype(np.float64)
    hi = np.append(DELAY_EDGES_NS[1:], -1)[bins]
    return pd.DataFrame(
        {
            **batch.keys(part),
            "bin": bins.astype(I64),
            "lo_ns": DELAY_EDGES_NS[bins],
            "hi_ns": pd.arrays.IntegerArray(np.maximum(hi, 0), hi < 0),
            "count": count,
            "share": count / per_part[part],
        }
    )
