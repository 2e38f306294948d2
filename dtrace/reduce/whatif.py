"""What-if estimates (the ``whatif`` table): the step time if a straggler, a kernel class or the
communication were faster, from a replay of each step's cross-rank dependencies.

Model
-----
Each rank's step is a chain of nodes (:mod:`dtrace.analyses.segments`): the step start, the
point its work had reached when each collective was launched (``ready``), the points where its
work resumed after waiting for a collective (``gate``) and the end of its work. Between two
nodes the rank did some work (the union of its compute, memcpy and memset) and some idle time
that no collective explains (``free``: launch gaps, host stalls). The replay recomputes every
time in order of dependency, on the clock-corrected time line of ``clock_offsets``:

- a node: ``t = max(t_prev + work × factor + free − host × (1 − ψ), collective end + delay)``,
  where the second term only exists for a gate (``delay``: how long after the collective's end
  the work resumed in the trace) and ``host`` is the part of ``free`` the work waited for the host
  (``ψ`` 1 unless a scenario makes the host faster);
- a step start: where it was in the trace, unless the rank started the step after its previous
  step had ended (a synchronous training loop: the host waited for the GPU), then that long
  after the replayed end of the previous step;
- a rank's arrival at a collective: ``max(its ready node, the end of the previous collective on
  the same stream) + lag`` (``lag``: the launch latency seen in the trace);
- a collective instance ends when its last member arrives plus its transfer time (``transfer_ns``,
  the shortest duration over its ranks), on every member (each keeps the few µs by which its own
  end differed in the trace);
- a rank's step ends at the later of its last work and its last collective end. The job's step
  time is the median over ranks of these spans (the ``steps`` table's ``step_ns``).

Without changes the replay reproduces the trace (``fit_ns`` shows how closely). Scenarios:

``stragglers_at_median``
    the cause each flagged straggler (``stragglers``) is flagged for is removed. A straggler of a
    GPU cause (``gpu_slow``, ``gpu_contended``; or none given) runs its kernels at the median
    rank's speed: per kernel class, its time is scaled by ``Σ count·median-rank mean duration /
    Σ own time`` over the compute kernel names it shares with other ranks (``kernels``; every
    instance counts, so a contended GPU's long tail goes too). A *host-bound* straggler — flagged
    for a host cause (``host_loader``, ``host_sync``, ``host_stall``, ``host_launch``), or without a
    GPU cause its work waited for its host (``segments.host_ns``) at least :data:`HOST_BOUND`
    times as long as the median rank's — keeps its kernels and gets the median rank's host: its
    waits for the host (launch gaps, the lead-in before each step's first GPU event, the part of a
    collective's launch lag after its launch came late) scale by median / own, and its work between
    two collectives becomes the median rank's there (late launches serialise streams that overlap
    when the host is ahead: :func:`median_work`);
``speedup:<class>=<x>``
    the class's kernels take ``1/x`` of their time on every rank (the results hold the three
    compute classes with the most time, leftover classes such as ``other`` aside, at
    ``x = 1.2``; ``dtrace whatif --class C --speedup X`` asks for others);
``comm_hidden``
    every collective transfer takes no time: what is left is the compute and the waiting that
    arrival skew causes.

Work scales by the share of each class in an interval (overlapping streams scale together;
classes beyond the four an interval names scale by the rank's ``*`` factor, 1 for a speedup).

Limits
------
Dependencies are inferred from one trace: a collective waits for the work launched before it;
work waits for a collective when it resumed within :data:`~dtrace.analyses.segments.GATE_TOL_NS`
after the collective ended. A dependency that never made anything wait in the trace is not
seen, so a scenario that speeds up work can be optimistic where a collective would newly become
the bottleneck. A collective launched right after a blocking wait on another stream, with no
work in between, keeps that wait as a fixed lag. Host time enters only as the time the work
waited for the host, and changes only for host-bound stragglers; the host's own work between
launches is not replayed (host time that made nothing wait is invisible), and a step that
overlapped the previous one keeps its start. Memory and cache effects of a faster kernel, and
changed overlap between compute and communication kernels sharing the GPU, are not modelled.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd

from ..core.constants import DEFAULT_SPEEDUP, SPEEDUP_RANGE
from ..core.dtypes import empty_frame, missing_if_negative
from ..errors import DtraceError
from ..knowledge.classify import OTHER as _BUILTIN_LEFTOVER
from ..knowledge.classify import REGEX_LEFTOVER, SUBSTRING_LEFTOVER
from ..options import Options

KEYS = ["rank", "device"]
LEFTOVERS = (_BUILTIN_LEFTOVER, SUBSTRING_LEFTOVER, REGEX_LEFTOVER)
TOP_CLASSES = 3
NEG = -np.inf

COLUMNS: dict[str, object] = {
    "step": "Int64",
    "scenario": object,
    "detail": object,
    "ranks": "int64",
    "observed_ns": "int64",
    "replayed_ns": "int64",
    "estimate_ns": "int64",
    "saved_ns": "int64",
    "saved_share": "float64",
    "fit_ns": "int64",
}
HOST_BOUND = 2.0
"""A flagged straggler is host-bound when its GPU waited for its host at least this many times as
long as the median rank's did (summed ``segments.host_ns``)."""
OTHER = "*"
"""Class name of a node's time outside its named classes; a factor for it applies to a rank's
unnamed classes (default 1)."""


@dataclass
class Scenario:
    """One what-if: per (rank, device, class) work factors (missing: 1) and a transfer scale."""

    name: str
    detail: str
    factors: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["rank", "device", "class", "factor"]))
    transfer_scale: float = 1.0
    host: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["rank", "device", "factor"]))
    """Per (rank, device), the factor its GPU's waits for the host scale by (missing: 1)."""
    median_work: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["rank", "device"]))
    """(rank, device) parts whose work per interval becomes the median rank's (:func:`median_work`)."""


@dataclass
class Graph:
    """The replay's dependency graph, in arrays (see the module docstring)."""

    # nodes, sorted by (chain, node)
    chain: np.ndarray
    first: np.ndarray  # first node of its chain (the step start)
    t: np.ndarray  # observed, clock-corrected, relative to origin (float)
    work: np.ndarray
    free: np.ndarray
    host: np.ndarray  # the part of free (of the lead-in, for a start node) the GPU waited for the host
    gate_row: np.ndarray  # collectives row a gate waits for (-1 none)
    delay: np.ndarray  # gate: resume − that row's end
    end_node: np.ndarray  # per chain: its end node
    tied_prev: np.ndarray  # per chain: the previous step's chain it started after (-1: start stays)
    gap: np.ndarray  # per chain: observed start − previous chain's observed end
    # collectives rows
    inst: np.ndarray
    ready: np.ndarray  # node index (-1 none)
    pred: np.ndarray  # previous row on the same (rank, device, stream) (-1 none)
    lag: np.ndarray
    lag_host: np.ndarray  # the part of lag the collective waited for its launch
    start: np.ndarray  # observed arrival (relative)
    end: np.ndarray  # observed end (relative)
    rho: np.ndarray  # own end − (last arrival + transfer)
    transfer: np.ndarray  # per instance
    row_chain: np.ndarray  # chain of each row (-1 none)
    row_keys: pd.DataFrame  # rank, device of each row
    # processing order
    node_levels: list[np.ndarray]
    row_levels: list[np.ndarray]
    inst_row_levels: list[np.ndarray]
    # chains
    chains: pd.DataFrame  # rank, device, step
    class_rows: pd.DataFrame  # node, rank, device, class, ns (the class time of each node's interval)
    kind: np.ndarray  # per node: start, ready, gate or end

    # keys every scenario looks its factors up by: built once per graph
    @functools.cached_property
    def node_keys(self) -> pd.MultiIndex:
        """(rank, device) of every node."""
        return pd.MultiIndex.from_frame(self.chains[KEYS].iloc[self.chain].astype(np.int64))

    @functools.cached_property
    def class_keys(self) -> tuple[pd.MultiIndex, pd.MultiIndex]:
        """(rank, device, class) of every class row, and (rank, device, :data:`OTHER`)."""
        c = self.class_rows
        other = np.full(len(c), OTHER, object)
        return pd.MultiIndex.from_frame(c[KEYS + ["class"]]), pd.MultiIndex.from_arrays([c["rank"], c["device"], other])


def take(values: np.ndarray, idx: np.ndarray, fill: float | int) -> np.ndarray:
    """``values[idx]`` where ``idx >= 0``, else ``fill`` (also when ``values`` is empty); rows of
    a 2-d ``values``.

    Examples
    --------
    >>> take(np.array([5, 6]), np.array([1, -1]), 0).tolist()
    [6, 0]
    >>> take(np.array([[5, 7], [6, 8]]), np.array([1, -1]), 0).tolist()
    [[6, 8], [0, 0]]
    """
    idx = np.asarray(idx, np.int64)
    if not len(values):
        return np.full((len(idx), *values.shape[1:]), fill, dtype=np.result_type(values.dtype, type(fill)))
    return np.where(_rows(idx >= 0, values.ndim), values[np.maximum(idx, 0)], fill)


def _rows(mask: np.ndarray, ndim: int) -> np.ndarray:
    """A mask of rows, shaped to select whole rows of an array of ``ndim`` dimensions."""
    return mask if ndim == 1 else mask[:, None]


def _grouped_cummax(values: np.ndarray, run_id: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` within each run of equal ``run_id`` (runs contiguous), NaN
    skipped (NaN where the value is NaN, as pandas' ``cummax``); down each column of a 2-d
    ``values``.

    A doubling scan (log2 of the longest run steps of whole-array operations): the replay calls
    this once per level on a handful of values, where a pandas group-by costs ~0.5 ms a call.

    Examples
    --------
    >>> _grouped_cummax(np.array([1.0, 3.0, 2.0, 5.0, np.nan, 4.0]), np.array([1, 1, 1, 2, 2, 2])).tolist()
    [1.0, 3.0, 3.0, 5.0, nan, 5.0]
    """
    nan = np.isnan(values)
    out = np.where(nan, -np.inf, values).astype(np.float64)
    d = 1
    while d < len(out):
        prev = np.where(_rows(run_id[d:] == run_id[:-d], out.ndim), out[:-d], -np.inf)
        np.maximum(out[d:], prev, out=out[d:])
        d *= 2
    out[nan] = np.nan
    return out


def _levels(
    chain: np.ndarray,
    gate_row: np.ndarray,
    inst: np.ndarray,
    ready: np.ndarray,
    pred: np.ndarray,
    n_inst: int,
    row_chain: np.ndarray,
    start_node: np.ndarray,
    tied_prev: np.ndarray,
    end_node: np.ndarray,
    guess: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Integer levels so that every dependency is processed before what depends on it.

    Nodes need their chain predecessor and their gate's instance (a tied step start: the whole
    previous step); arrivals need their ready node and the previous instance on their stream;
    an instance needs all its arrivals. Starting from ``guess`` (the rank-local order of
    instances), levels are raised until every constraint holds; a dependency cycle (collectives
    matched inconsistently) raises :class:`DtraceError`.
    """
    n_nodes, n_chains = len(chain), len(end_node)
    li = guess.astype(np.int64).copy()
    ln = np.zeros(n_nodes, np.int64)
    big = np.int64(1) << 40
    tied = tied_prev >= 0
    has_rows = row_chain >= 0
    for _ in range(max(n_inst, 1) + n_chains + 2):
        gl = take(li, take(inst, gate_row, -1), -1) + 1  # 0 without a gate
        if tied.any():
            chain_li = np.full(n_chains, -1, np.int64)
            np.maximum.at(chain_li, row_chain[has_rows], li[inst[has_rows]])
            prev = tied_prev[tied]
            gl[start_node[tied]] = np.maximum(ln[end_node[prev]], chain_li[prev]) + 1
        new_ln = np.maximum.accumulate(gl + chain * big) - chain * big if n_nodes else gl
        lr = np.maximum(take(new_ln, ready, 0), take(li, take(inst, pred, -1), -1) + 1)
        need = np.zeros(n_inst, np.int64)
        np.maximum.at(need, inst, lr)
        new_li = np.maximum(li, need)
        if np.array_equal(new_li, li) and np.array_equal(new_ln, ln):
            return ln, lr, li
        li, ln = new_li, new_ln
    raise DtraceError("the collectives' order is inconsistent across ranks (a dependency cycle): no what-if replay")


def _slices(levels: np.ndarray, order: np.ndarray, n_levels: int) -> list[np.ndarray]:
    srt = order[np.argsort(levels[order], kind="stable")]
    bounds = np.searchsorted(levels[srt], np.arange(n_levels + 1))
    return [srt[bounds[v] : bounds[v + 1]] for v in range(n_levels)]


def build_graph(tables: dict[str, pd.DataFrame]) -> Graph | None:
    """The dependency graph of every step from ``segments``, ``collectives`` and ``clock_offsets``."""
    prepared = _graph_inputs(tables)
    if prepared is None:
        return None
    nodes, coll = prepared
    n_off, origin, t, s, e, c_own = _common_clock(nodes, coll, tables.get("clock_offsets"))
    kind = nodes["kind"].astype(str).to_numpy(object)
    gate_row, delay, ready = _node_rows(nodes, coll, kind, c_own, t, e)

    chain_key = nodes[KEYS + ["step"]]
    chain = chain_key.groupby(KEYS + ["step"], sort=False).ngroup().to_numpy(np.int64)
    chains = chain_key.drop_duplicates().reset_index(drop=True)
    first = np.r_[True, chain[1:] != chain[:-1]]
    end_node = np.flatnonzero(np.r_[chain[1:] != chain[:-1], True])

    # collectives rows: instance, previous row on the stream, lag, end residual
    inst, n_inst, pred = _instances(coll, s)
    lag, lag_host = _lags(nodes, t, s, e, ready, pred, n_off, origin)
    transfer, rho = _residuals(coll, s, e, inst, n_inst)
    row_chain = _row_chains(coll, chains)
    start_node = np.flatnonzero(first)
    tied_prev, gap = _tied_steps(chains, t, e, start_node, end_node, row_chain)
    node_levels, row_levels, inst_row_levels = _processing_levels(
        coll, s, len(t), (chain, gate_row, inst, ready, pred, n_inst, row_chain, start_node, tied_prev, end_node)
    )
    return Graph(
        chain=chain,
        first=first,
        t=t,
        work=nodes["work_ns"].to_numpy(np.float64),
        free=nodes["free_ns"].to_numpy(np.float64),
        host=nodes["host_ns"].to_numpy(np.float64),
        kind=kind,
        gate_row=gate_row,
        delay=delay,
        end_node=end_node,
        tied_prev=tied_prev,
        gap=np.where(tied_prev >= 0, gap, 0.0),
        inst=inst,
        ready=ready,
        pred=pred,
        lag=lag,
        lag_host=lag_host,
        start=s,
        end=e,
        rho=rho,
        transfer=transfer,
        row_chain=row_chain,
        row_keys=pd.DataFrame({"rank": coll["rank"].to_numpy(np.int64), "device": coll["device"].to_numpy(np.int64)}),
        node_levels=node_levels,
        row_levels=row_levels,
        inst_row_levels=inst_row_levels,
        chains=chains,
        class_rows=_class_rows(nodes),
    )


def _graph_inputs(tables: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The segments' nodes in chain order and the collectives rows, missing values as -1
    (``None``: no segments)."""
    seg = tables.get("segments")
    if seg is None or not len(seg):
        return None
    coll = tables.get("collectives")
    if coll is None:
        coll = empty_frame(
            ("collective", "rank", "device", "stream", "start_ns", "end_ns", "transfer_ns", "clock_offset_ns", "step"),
            "int64",
        )
    # missing values (NA: no step, no collective) become -1 for the arithmetic below
    if "host_ns" not in seg.columns:  # results of an older dtrace: host time unknown
        seg = seg.assign(host_ns=0, comm_launch_ns=pd.array([pd.NA] * len(seg), dtype="Int64"))
    nullable = ("step", "comm_stream", "comm_start_ns", "comm_launch_ns")
    seg = seg.assign(**{c: seg[c].to_numpy(np.int64, na_value=-1) for c in nullable})
    coll = coll.assign(step=coll["step"].to_numpy(np.int64, na_value=-1))
    nodes = seg.sort_values(KEYS + ["step", "node"], kind="stable").reset_index(drop=True)
    return nodes, coll.reset_index(drop=True)


def _common_clock(
    nodes: pd.DataFrame, coll: pd.DataFrame, offsets: pd.DataFrame | None
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each node's clock offset, the origin, the nodes' times and the rows' starts and ends on
    the common clock after the origin, and the rows' starts on their own clock."""
    off = pd.Series(0, index=pd.MultiIndex.from_frame(nodes[KEYS].drop_duplicates()), dtype=np.int64)
    if offsets is not None and len(offsets):
        o = offsets.set_index(KEYS)["offset_ns"]
        off = o.reindex(off.index).fillna(0).astype(np.int64)
    nkey = pd.MultiIndex.from_frame(nodes[KEYS])
    n_off = off.reindex(nkey).to_numpy(np.int64)
    t_abs = nodes["time_ns"].to_numpy(np.int64) - n_off
    c_off = coll["clock_offset_ns"].to_numpy(np.int64)
    s_abs = coll["start_ns"].to_numpy(np.int64)
    e_abs = coll["end_ns"].to_numpy(np.int64)
    origin = int(min(t_abs.min(), s_abs.min() if len(s_abs) else t_abs.min()))
    t = (t_abs - origin).astype(np.float64)
    s = (s_abs - origin).astype(np.float64)
    e = (e_abs - origin).astype(np.float64)
    return n_off, origin, t, s, e, s_abs + c_off


def _node_rows(
    nodes: pd.DataFrame, coll: pd.DataFrame, kind: np.ndarray, c_own: np.ndarray, t: np.ndarray, e: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nodes -> their collectives row (by rank, device, stream and own-clock start): each gate
    node's row and its delay after the row's end, and each row's ready node."""
    row_key = pd.MultiIndex.from_arrays(
        [
            coll["rank"].to_numpy(np.int64),
            coll["device"].to_numpy(np.int64),
            coll["stream"].to_numpy(np.int64),
            c_own,
        ]
    )
    has_comm = nodes["comm_stream"].to_numpy() >= 0
    probe = pd.MultiIndex.from_arrays(
        [
            nodes["rank"].to_numpy(np.int64),
            nodes["device"].to_numpy(np.int64),
            nodes["comm_stream"].to_numpy(np.int64),
            nodes["comm_start_ns"].to_numpy(np.int64),
        ]
    )
    # a trace may hold the same collective kernel twice (same stream and start): the first row is its
    first = np.flatnonzero(~row_key.duplicated())
    found = row_key[first].get_indexer(probe) if len(first) else np.full(len(probe), -1, np.int64)
    hit = np.where(has_comm & (found >= 0), first[np.maximum(found, 0)] if len(first) else -1, -1)
    is_gate = (kind == "gate") & (hit >= 0)
    gate_row = np.where(is_gate, hit, -1).astype(np.int64)
    delay = np.where(is_gate, t - take(e, hit, 0.0), 0.0)
    ready = np.full(len(coll), -1, np.int64)
    is_ready = (kind == "ready") & (hit >= 0)
    ready[hit[is_ready]] = np.flatnonzero(is_ready)
    return gate_row, delay, ready


def _instances(coll: pd.DataFrame, s: np.ndarray) -> tuple[np.ndarray, int, np.ndarray]:
    """Each row's instance (numbered from 0), the number of instances, and the previous row on
    its stream (-1: none)."""
    n_rows = len(coll)
    inst = coll["collective"].to_numpy(np.int64)
    _, inst = np.unique(inst, return_inverse=True)
    n_inst = int(inst.max()) + 1 if n_rows else 0
    so = np.lexsort((s, coll["stream"].to_numpy(), coll["device"].to_numpy(), coll["rank"].to_numpy()))
    same = np.zeros(n_rows, bool)
    if n_rows > 1:
        same[1:] = (
            (coll["rank"].to_numpy()[so][1:] == coll["rank"].to_numpy()[so][:-1])
            & (coll["device"].to_numpy()[so][1:] == coll["device"].to_numpy()[so][:-1])
            & (coll["stream"].to_numpy()[so][1:] == coll["stream"].to_numpy()[so][:-1])
        )
    pred = np.full(n_rows, -1, np.int64)
    pred[so[same]] = so[np.flatnonzero(same) - 1]
    return inst, n_inst, pred


def _lags(
    nodes: pd.DataFrame,
    t: np.ndarray,
    s: np.ndarray,
    e: np.ndarray,
    ready: np.ndarray,
    pred: np.ndarray,
    n_off: np.ndarray,
    origin: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's lag (its start after both its ready node and the previous row on its stream)
    and the part of it after the collective's own launch started late (the host)."""
    r_ready = take(t, ready, NEG)
    r_pred = take(e, pred, NEG)
    base = np.maximum(r_ready, r_pred)
    lag = np.where(np.isfinite(base), np.maximum(s - base, 0.0), 0.0)
    c_launch = nodes["comm_launch_ns"].to_numpy(np.int64)
    launch = np.where(c_launch >= 0, (c_launch - n_off - origin).astype(np.float64), np.nan)
    r_launch = take(launch, ready, np.nan)
    lag_host = np.where(np.isfinite(base) & np.isfinite(r_launch), np.clip(r_launch - base, 0.0, lag), 0.0)
    return lag, lag_host


def _residuals(
    coll: pd.DataFrame, s: np.ndarray, e: np.ndarray, inst: np.ndarray, n_inst: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each instance's transfer time, and each row's end after its instance's last start plus
    the transfer."""
    transfer = np.zeros(n_inst)
    if len(coll):
        transfer[inst] = coll["transfer_ns"].to_numpy(np.float64)
    last = np.full(n_inst, NEG)
    np.maximum.at(last, inst, s)
    return transfer, e - (last[inst] + transfer[inst])


def _row_chains(coll: pd.DataFrame, chains: pd.DataFrame) -> np.ndarray:
    """Each row's chain (rank, device, step; -1: none)."""
    if not len(coll):
        return np.zeros(0, np.int64)
    ck = pd.MultiIndex.from_frame(chains)
    rows = pd.MultiIndex.from_arrays(
        [coll["rank"].to_numpy(np.int64), coll["device"].to_numpy(np.int64), coll["step"].to_numpy(np.int64)]
    )
    return cast(np.ndarray, ck.get_indexer(rows))


def _tied_steps(
    chains: pd.DataFrame,
    t: np.ndarray,
    e: np.ndarray,
    start_node: np.ndarray,
    end_node: np.ndarray,
    row_chain: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """A step that started after the rank's previous step ended waited for it (synchronous
    loop): each chain's previous chain when so (-1: not tied), and its start after that end."""
    obs_end = t[end_node].copy()
    if len(row_chain):
        ok = row_chain >= 0
        np.maximum.at(obs_end, row_chain[ok], e[ok])
    same_part = np.r_[
        False,
        (chains["rank"].to_numpy()[1:] == chains["rank"].to_numpy()[:-1])
        & (chains["device"].to_numpy()[1:] == chains["device"].to_numpy()[:-1]),
    ]
    prev_chain = np.where(same_part, np.arange(len(chains)) - 1, -1)
    gap = t[start_node] - take(obs_end, prev_chain, np.inf)
    tied_prev = np.where((prev_chain >= 0) & (gap >= 0), prev_chain, -1).astype(np.int64)
    return tied_prev, gap


_Links = tuple[
    np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray
]
"""The arguments of :func:`_levels` but the guess: chain, gate_row, inst, ready, pred, n_inst,
row_chain, start_node, tied_prev, end_node."""


def _processing_levels(
    coll: pd.DataFrame, s: np.ndarray, n_nodes: int, links: _Links
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """The nodes, rows and rows by instance of each processing level (:func:`_levels` of
    ``links``); the guess is each instance's largest rank-local position."""
    inst, n_inst = links[2], links[5]
    n_rows = len(coll)
    local = pd.Series(s).groupby([coll["rank"].to_numpy(), coll["device"].to_numpy()]).rank(method="first")
    guess = np.zeros(n_inst, np.int64)
    if n_rows:
        np.maximum.at(guess, inst, local.to_numpy(np.int64))
    ln, lr, li = _levels(*links, guess)
    n_levels = int(max(ln.max(initial=0), lr.max(initial=0), li.max(initial=0))) + 1
    node_levels = _slices(ln, np.arange(n_nodes), n_levels)
    row_levels = _slices(lr, np.arange(n_rows), n_levels)
    inst_row_levels = _slices(li[inst] if n_rows else np.zeros(0, np.int64), np.arange(n_rows), n_levels)
    return node_levels, row_levels, inst_row_levels


def _class_rows(nodes: pd.DataFrame) -> pd.DataFrame:
    """(node, rank, device, class, class_ns) of every class slot of every node with time, the
    rest of each node's time as :data:`OTHER`."""
    slots = [int(c[6:]) for c in nodes.columns if c.startswith("class_") and c[6:].isdigit()]
    node_ids, rank, device = np.arange(len(nodes)), nodes["rank"].to_numpy(), nodes["device"].to_numpy()

    def slot(names: np.ndarray | str, ns: np.ndarray) -> pd.DataFrame:
        keep = ns > 0  # only slots with time: no text of the others is copied
        cls = names[keep] if isinstance(names, np.ndarray) else names
        return pd.DataFrame(
            {"node": node_ids[keep], "rank": rank[keep], "device": device[keep], "class": cls, "class_ns": ns[keep]}
        )

    parts = [
        slot(nodes[f"class_{i}"].astype(str).to_numpy(object), nodes[f"class_{i}_ns"].to_numpy(np.int64)) for i in slots
    ]
    parts.append(slot(OTHER, nodes["other_class_ns"].to_numpy(np.int64)))
    return pd.concat(parts, ignore_index=True)


def node_factors(g: Graph, factors: pd.DataFrame) -> np.ndarray:
    """Per node, the factor its work scales by: the class-time-weighted mean of the class factors."""
    phi = np.ones(len(g.t))
    if factors is None or not len(factors) or not len(g.class_rows):
        return phi
    c = g.class_rows
    f = factors.drop_duplicates(KEYS + ["class"], keep="last").set_index(KEYS + ["class"])["factor"]
    own_class, other_class = g.class_keys
    fac = f.reindex(own_class).to_numpy(np.float64)
    star = f.reindex(other_class)
    fac = np.where(np.isnan(fac), star.fillna(1.0).to_numpy(np.float64), fac)
    ns = c["class_ns"].to_numpy(np.float64)
    node = c["node"].to_numpy(np.int64)
    num = np.bincount(node, weights=ns * fac, minlength=len(phi))
    den = np.bincount(node, weights=ns, minlength=len(phi))
    return np.divide(num, den, out=phi, where=den > 0)


def median_work(g: Graph, parts: pd.DataFrame | None, phi: np.ndarray) -> np.ndarray:
    """``phi`` with the nodes of ``parts`` (rank, device) set so that their work between two
    collectives becomes the median rank's: the work of the nodes after the k-th ``ready`` node up to
    the next (gates between them included, whether a rank has them or not) is scaled to the median,
    over the chains of the same step with as many collectives, of their work there (where such
    chains exist and the own work is not 0)."""
    if parts is None or not len(parts) or not len(g.t):
        return phi
    ready = (g.kind == "ready").astype(np.int64)
    first_of_chain = np.flatnonzero(g.first)[g.chain]
    before = np.cumsum(ready) - ready  # ready nodes strictly before, counted from the chain's start
    k = before - before[first_of_chain]
    total = np.bincount(g.chain, weights=ready).astype(np.int64)[g.chain]
    step = g.chains["step"].to_numpy(np.int64)[g.chain]
    group = pd.DataFrame({"chain": g.chain, "k": k})
    own = pd.Series(g.work).groupby([group["chain"], group["k"]], sort=False).transform("sum").to_numpy()
    per = pd.DataFrame({"step": step, "total": total, "k": k, "chain": g.chain, "own": own})
    once = per.drop_duplicates(["chain", "k"])
    med = once.groupby(["step", "total", "k"], sort=False)["own"].median()
    med_w = med.reindex(pd.MultiIndex.from_frame(per[["step", "total", "k"]])).to_numpy(np.float64)
    mine = g.node_keys.isin(pd.MultiIndex.from_frame(parts[KEYS].astype(np.int64)))
    ok = mine & (own > 0)
    out: np.ndarray = phi.copy()
    out[ok] = med_w[ok] / own[ok]
    return out


def host_factors(g: Graph, host: pd.DataFrame | None) -> tuple[np.ndarray, np.ndarray]:
    """Per node and per collectives row, the factor the GPU's waits for the host scale by."""
    psi_node, psi_row = np.ones(len(g.t)), np.ones(len(g.start))
    if host is None or not len(host):
        return psi_node, psi_row
    f = host.drop_duplicates(KEYS, keep="last").set_index(KEYS)["factor"].astype(np.float64)
    psi_node = f.reindex(g.node_keys).fillna(1.0).to_numpy(np.float64)
    if len(g.start):
        psi_row = f.reindex(pd.MultiIndex.from_frame(g.row_keys)).fillna(1.0).to_numpy(np.float64)
    return psi_node, psi_row


def replay(
    g: Graph,
    phi: np.ndarray,
    transfer_scale: float = 1.0,
    psi: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Replayed span (end − start) of every chain, with work scaled by ``phi`` per node,
    transfers by ``transfer_scale`` and the GPU's waits for the host by ``psi`` (per node, per
    collectives row; :func:`host_factors`). One scenario of :func:`replay_many`."""
    psi_node, psi_row = psi if psi is not None else (np.ones(len(g.t)), np.ones(len(g.start)))
    spans = replay_many(g, phi[:, None], np.array([transfer_scale], np.float64), (psi_node[:, None], psi_row[:, None]))
    return spans[:, 0]


def replay_many(
    g: Graph, phi: np.ndarray, transfer_scale: np.ndarray, psi: tuple[np.ndarray, np.ndarray]
) -> np.ndarray:
    """:func:`replay` of ``k`` scenarios at once: ``phi`` and ``psi`` have a column per scenario
    (nodes × k, nodes × k and rows × k), ``transfer_scale`` a value per scenario; the spans of
    every chain, chains × k. Each column is computed by the same operations, in the same order,
    as one scenario alone (the same bits); the levels are walked once for all of them."""
    n, k = phi.shape
    psi_node, psi_row = psi
    cut = g.host[:, None] * (1.0 - psi_node)  # host waits removed (a start node: its lead-in)
    w = g.free[:, None] - cut + g.work[:, None] * phi
    w[g.first] = 0.0
    state = _ReplayState(
        tn=np.full((n, k), np.nan),
        arrive=np.full((len(g.start), k), np.nan),
        zr=np.full((len(g.start), k), np.nan),
        comm_end=np.full((len(g.end_node), k), NEG),
    )
    lag = g.lag[:, None] - g.lag_host[:, None] * (1.0 - psi_row)
    transfer = g.transfer[:, None] * transfer_scale[None, :]
    for v in range(len(g.node_levels)):
        if len(g.node_levels[v]):
            _replay_nodes(g, g.node_levels[v], w, cut, state)
        if len(g.row_levels[v]):
            _replay_arrivals(g, g.row_levels[v], lag, state)
        if len(g.inst_row_levels[v]):
            _replay_instances(g, g.inst_row_levels[v], transfer, state)
    return cast(np.ndarray, np.maximum(state.tn[g.end_node], state.comm_end) - state.tn[g.first])


@dataclass
class _ReplayState:
    """The replayed times so far, a column per scenario: nodes (``tn``), the rows' arrivals and
    ends (``zr``), and the latest collective end of each chain."""

    tn: np.ndarray
    arrive: np.ndarray
    zr: np.ndarray
    comm_end: np.ndarray


def _replay_nodes(g: Graph, ns: np.ndarray, w: np.ndarray, cut: np.ndarray, st: _ReplayState) -> None:
    """The times of the nodes ``ns`` (one level): each run of consecutive nodes of a chain is its
    predecessor's time plus the running work, or a fixed time (a step start, a gate's collective
    end plus its delay, a tied step's previous end plus its gap) when that is later."""
    tn = st.tn
    first = g.first[ns]
    gate = g.gate_row[ns]
    fixed = np.where(first[:, None], g.t[ns][:, None] - cut[ns], NEG)
    has = gate >= 0
    fixed[has] = st.zr[gate[has]] + g.delay[ns][has][:, None]
    prev_chain = np.where(first, g.tied_prev[g.chain[ns]], -1)
    tied = prev_chain >= 0
    if tied.any():
        pc = prev_chain[tied]
        gap = g.gap[g.chain[ns][tied]][:, None]
        fixed[tied] = np.maximum(tn[g.end_node[pc]], st.comm_end[pc]) + gap - np.minimum(cut[ns][tied], gap)
    ch = g.chain[ns]
    run_first = np.r_[True, (ch[1:] != ch[:-1]) | (ns[1:] != ns[:-1] + 1)]
    run_id = np.cumsum(run_first)
    ww = w[ns]
    cw = np.cumsum(ww, axis=0)
    before = (cw - ww)[run_first]
    wsum = cw - before[run_id - 1]
    prev = np.where((first | ~run_first)[:, None], NEG, tn[np.maximum(ns - 1, 0)])
    base = prev[run_first][run_id - 1]
    tn[ns] = wsum + np.maximum(base, _grouped_cummax(fixed - wsum, run_id))


def _replay_arrivals(g: Graph, rs: np.ndarray, lag: np.ndarray, st: _ReplayState) -> None:
    """The arrivals of the rows ``rs`` (one level): after their ready node and the previous row
    on their stream (where neither: as in the trace), plus the lag."""
    a = np.maximum(take(st.tn, g.ready[rs], NEG), take(st.zr, g.pred[rs], NEG))
    st.arrive[rs] = np.where(np.isfinite(a), a, g.start[rs][:, None]) + lag[rs]


def _replay_instances(g: Graph, ir: np.ndarray, transfer: np.ndarray, st: _ReplayState) -> None:
    """The ends of the rows ``ir`` (their instances complete at this level): the instance's last
    arrival plus its transfer, plus each row's residual; each chain's latest collective end."""
    inst = g.inst[ir]
    last = np.full(transfer.shape, NEG)
    np.maximum.at(last, inst, st.arrive[ir])
    st.zr[ir] = last[inst] + transfer[inst] + g.rho[ir][:, None]
    ok = ir[g.row_chain[ir] >= 0]
    np.maximum.at(st.comm_end, g.row_chain[ok], st.zr[ok])


def observed_span(g: Graph) -> np.ndarray:
    """The observed span of every chain: from its start to its last work or collective end."""
    end = g.t[g.end_node].copy()
    if len(g.row_chain):
        ok = g.row_chain >= 0
        comm_end = np.full(len(end), NEG)
        np.maximum.at(comm_end, g.row_chain[ok], g.end[ok])
        end = np.maximum(end, comm_end)
    return cast(np.ndarray, end - g.t[g.first])


# -- scenarios -------------------------------------------------------------------------------


def straggler_factors(tables: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, list[tuple[int, int]]]:
    """Per (flagged rank, device, class): median-rank time / own time over shared compute kernels."""
    empty = pd.DataFrame({"rank": [], "device": [], "class": [], "factor": []})
    sg = tables.get("stragglers")
    if sg is None or not len(sg):
        return empty, []
    fl = sg.loc[sg["flagged"].astype(bool)]
    flagged = sorted(zip(fl["rank"].astype(int), fl["device"].astype(int)))
    k = tables.get("kernels")
    if not flagged or k is None or not len(k):
        return empty, flagged
    # the cause each straggler is flagged for is what its scenario removes: a host stall or a slow
    # link is not taken out of its kernels
    gpu_side = [key for key, cause in zip(flagged, _causes_of(fl, flagged)) if not _host_or_link(cause)]
    k = k.loc[k["category"].astype(str).to_numpy() == "compute"]
    k = k.loc[k.groupby("name", observed=True)["rank"].transform("nunique").to_numpy() >= 2]
    k = k.loc[k["count"].to_numpy() > 0]
    cnt = k["count"].to_numpy(np.float64)
    # time-weighted: every instance counts (a contended GPU's few stretched kernels too)
    own = k["total_ns"].to_numpy(np.float64) if "total_ns" in k.columns else cnt * k["median_ns"].to_numpy(np.float64)
    ref = pd.Series(own / cnt).groupby(k["name"].to_numpy()).transform("median").to_numpy(np.float64)
    f = pd.DataFrame(
        {
            "rank": k["rank"].to_numpy(np.int64),
            "device": k["device"].to_numpy(np.int64),
            "class": k["class"].astype(str).to_numpy(object),
            "own": own,
            "ref": cnt * ref,
        }
    )
    fk = pd.MultiIndex.from_frame(f[KEYS])
    f = f.loc[fk.isin(pd.MultiIndex.from_tuples(gpu_side, names=KEYS))] if gpu_side else f.iloc[:0]
    g = f.groupby(KEYS + ["class"], sort=True)[["own", "ref"]].sum().reset_index()
    overall = f.groupby(KEYS, sort=True)[["own", "ref"]].sum().reset_index().assign(**{"class": OTHER})
    g = pd.concat([g, overall[g.columns]], ignore_index=True)
    g = g.loc[g["own"].to_numpy() > 0]
    return pd.DataFrame(
        {"rank": g["rank"], "device": g["device"], "class": g["class"], "factor": g["ref"] / g["own"]}
    ).reset_index(drop=True), flagged


def _causes_of(fl: pd.DataFrame, keys: list[tuple[int, int]]) -> list[str]:
    """The ``cause`` of each flagged (rank, device) in ``keys`` ("" where the table has none)."""
    if "cause" not in fl.columns:
        return [""] * len(keys)
    by_key = {(int(r), int(d)): str(c) for r, d, c in zip(fl["rank"], fl["device"], fl["cause"].fillna(""))}
    return [by_key.get(k, "") for k in keys]


def _host_or_link(cause: str) -> bool:
    return cause.startswith("host_") or cause == "link"


def _span(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (f" … ({len(ranks)} ranks)" if len(ranks) > 8 else "")


def default_scenarios(
    tables: dict[str, pd.DataFrame], speedup: dict[str, float] | None = None, *, top_classes: int = TOP_CLASSES
) -> list[Scenario]:
    """(a) stragglers at median speed, (b) class speedups, (c) hidden communication.

    ``speedup`` (``{class: x}``) replaces the default (b) scenarios: the ``top_classes`` compute
    classes with the most time, each :data:`DEFAULT_SPEEDUP` times faster.
    """
    out = []
    factors, flagged = straggler_factors(tables)
    host = straggler_host_factors(tables, flagged)
    if flagged:
        ranks = _span(sorted({r for r, _d in flagged}))
        sg = tables["stragglers"]
        fl = sg.loc[sg["flagged"].astype(bool)]
        named = sorted({c for c in _causes_of(fl, flagged) if c})
        why = f" (causes removed: {', '.join(named)})" if named else ""
        detail = f"rank {ranks}: compute and host at the median rank's speed{why}" + _factor_note(factors, host)
    else:
        detail = "no straggler flagged: nothing to change"
    out.append(Scenario("stragglers_at_median", detail, factors, host=host, median_work=host[KEYS]))
    if speedup is None:
        speedup = {c: DEFAULT_SPEEDUP for c in top_compute_classes(tables, top_classes)}
    for cls, x in speedup.items():
        try:
            x = float(x)
        except (TypeError, ValueError):
            raise DtraceError(f"speedup of class {cls!r} must be a number, not {x!r}") from None
        if not SPEEDUP_RANGE[0] <= x <= SPEEDUP_RANGE[1]:  # inf, nan and 1e-308 (durations beyond int64) too
            raise DtraceError(
                f"speedup of class {cls!r} must be from {SPEEDUP_RANGE[0]:g} to {SPEEDUP_RANGE[1]:g}, got {x:g}"
            )
        keys = _all_parts(tables)
        fac = keys.assign(**{"class": str(cls), "factor": 1.0 / x})
        out.append(Scenario(f"speedup:{cls}={x:g}", f"{cls} kernels {x:g}× as fast on every rank", fac))
    out.append(
        Scenario(
            "comm_hidden", "every collective transfer takes no time (waiting for late ranks stays)", transfer_scale=0.0
        )
    )
    return out


def straggler_host_factors(tables: dict[str, pd.DataFrame], flagged: list[tuple[int, int]]) -> pd.DataFrame:
    """Per flagged host-bound (rank, device): how its GPU's waits for the host scale when its host
    runs like the median rank's: ``median over parts of H / own H``, H the summed
    ``segments.host_ns`` (time its GPU waited for the host: launch gaps, the collectives' launch
    lag and the lead-in of each step). Host-bound: H at least :data:`HOST_BOUND` times the median."""
    empty = pd.DataFrame({"rank": [], "device": [], "factor": []})
    seg = tables.get("segments")
    if not flagged or seg is None or not len(seg) or "host_ns" not in seg.columns:
        return empty
    per = seg.groupby(KEYS, sort=True)["host_ns"].sum()
    med = float(per.median())
    sg = tables.get("stragglers")
    causes = _causes_of(sg.loc[sg["flagged"].astype(bool)], flagged) if sg is not None else [""] * len(flagged)
    host_cause = pd.Series(
        [c.startswith("host_") for c in causes], index=pd.MultiIndex.from_tuples(flagged, names=KEYS)
    )
    gpu_cause = pd.Series([c.startswith("gpu_") for c in causes], index=host_cause.index)
    own = per.reindex(host_cause.index).dropna()
    # host-bound: flagged for a host cause, or (no cause) its GPU waited for it HOST_BOUND × the median
    bound = host_cause.reindex(own.index).to_numpy(bool) | (
        (own.to_numpy() >= HOST_BOUND * med) & ~gpu_cause.reindex(own.index).to_numpy(bool)
    )
    own = own.loc[bound & (own.to_numpy() > med) & (own.to_numpy() > 0)]
    return pd.DataFrame(
        {
            "rank": own.index.get_level_values(0).to_numpy(np.int64),
            "device": own.index.get_level_values(1).to_numpy(np.int64),
            "factor": med / own.to_numpy(np.float64),
        }
    )


def _factor_note(factors: pd.DataFrame, host: pd.DataFrame | None = None) -> str:
    """`` (rank 5: compute time ×0.833; rank 3: host waits ×0.012, work per interval the median
    rank's)``: each straggler's overall compute factor, or its host factor when it is host-bound."""
    overall = factors.loc[factors["class"].astype(str).to_numpy() == OTHER]
    comp = {(int(r), int(d)): f for r, d, f in zip(overall["rank"], overall["device"], overall["factor"])}
    hf = {} if host is None else {(int(r), int(d)): f for r, d, f in zip(host["rank"], host["device"], host["factor"])}
    if not comp and not hf:
        return " (no compute kernels shared with other ranks and no waits for the host: unchanged)"
    parts = [
        f"rank {key[0]}: host waits ×{hf[key]:.3f}, work per interval the median rank's"
        if key in hf
        else f"rank {key[0]}: compute time ×{comp[key]:.3f}"
        for key in sorted(set(comp) | set(hf))
    ]
    return " (" + "; ".join(parts[:4]) + (" …" if len(parts) > 4 else "") + ")"


def _all_parts(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    seg = tables.get("segments")
    if seg is None or not len(seg):
        return pd.DataFrame({"rank": [], "device": []})
    return seg[KEYS].drop_duplicates().reset_index(drop=True)


def top_compute_classes(tables: dict[str, pd.DataFrame], n: int = TOP_CLASSES) -> list[str]:
    """The ``n`` kernel classes of compute kernels with the most time over all ranks (``kernels``),
    leaving out the classifiers' leftover classes (``other``, ``others``, ``misc``)."""
    k = tables.get("kernels")
    if k is None or not len(k):
        return []
    k = k.loc[(k["category"].astype(str).to_numpy() == "compute") & ~k["class"].astype(str).isin(LEFTOVERS).to_numpy()]
    tot = k.groupby(k["class"].astype(str))["total_ns"].sum().sort_values(ascending=False, kind="stable")
    return [str(x) for x in tot.index[:n]]


# -- the table -------------------------------------------------------------------------------


def estimate(tables: dict[str, pd.DataFrame], scenarios: list[Scenario], graph: Graph | None = None) -> pd.DataFrame:
    """The ``whatif`` table: one row per (step, scenario)."""
    g = graph if graph is not None else build_graph(tables)
    if g is None or not len(g.t):
        return empty_frame(COLUMNS)
    obs = observed_span(g)
    spans = _replay_scenarios(g, scenarios)
    base = spans[:, 0]
    steps = g.chains["step"].to_numpy(np.int64)
    keep = steps >= 0 if (steps >= 0).any() else np.ones(len(steps), bool)
    frames = []
    for j, sc in enumerate(scenarios):
        est = spans[:, j + 1]
        frames.append(
            pd.DataFrame(
                {
                    "step": steps[keep],
                    "scenario": sc.name,
                    "detail": sc.detail,
                    "obs": obs[keep],
                    "base": base[keep],
                    "est": est[keep],
                    "fit": np.abs(base - obs)[keep],
                }
            )
        )
    f = pd.concat(frames, ignore_index=True)
    agg = (
        f.groupby(["step", "scenario"], sort=False)
        .agg(
            detail=("detail", "first"),
            ranks=("obs", "size"),
            observed_ns=("obs", "median"),
            replayed_ns=("base", "median"),
            estimate_ns=("est", "median"),
            fit_ns=("fit", "max"),
        )
        .reset_index()
    )
    order = {sc.name: i for i, sc in enumerate(scenarios)}
    agg = agg.sort_values(
        ["step", "scenario"], key=lambda s: s.map(order) if s.name == "scenario" else s, kind="stable"
    ).reset_index(drop=True)
    out = pd.DataFrame(
        {
            "step": missing_if_negative(agg["step"].to_numpy(np.int64)),  # NA: a trace without steps
            "scenario": agg["scenario"].to_numpy(object),
            "detail": agg["detail"].to_numpy(object),
            "ranks": agg["ranks"].to_numpy(np.int64),
            "observed_ns": np.rint(agg["observed_ns"]).astype(np.int64),
            "replayed_ns": np.rint(agg["replayed_ns"]).astype(np.int64),
            "estimate_ns": np.rint(agg["estimate_ns"]).astype(np.int64),
        }
    )
    out["saved_ns"] = out["replayed_ns"] - out["estimate_ns"]
    out["saved_share"] = np.divide(
        out["saved_ns"].to_numpy(np.float64),
        out["replayed_ns"].to_numpy(np.float64),
        out=np.zeros(len(out)),
        where=out["replayed_ns"].to_numpy() > 0,
    )
    out["fit_ns"] = np.rint(agg["fit_ns"]).astype(np.int64)
    return out


def _replay_scenarios(g: Graph, scenarios: list[Scenario]) -> np.ndarray:
    """The replayed spans of every chain (chains × 1 + scenarios): without changes, then each
    scenario's (:func:`replay_many`: one walk of the levels for all)."""
    ones_n, ones_r = np.ones(len(g.t)), np.ones(len(g.start))
    phis, scales, psi_nodes, psi_rows = [ones_n], [1.0], [ones_n], [ones_r]
    for sc in scenarios:
        phis.append(median_work(g, sc.median_work, node_factors(g, sc.factors)))
        scales.append(float(sc.transfer_scale))
        psi_node, psi_row = host_factors(g, sc.host)
        psi_nodes.append(psi_node)
        psi_rows.append(psi_row)
    return replay_many(
        g,
        np.stack(phis, axis=1),
        np.array(scales, np.float64),
        (np.stack(psi_nodes, axis=1), np.stack(psi_rows, axis=1)),
    )


def reduce_whatif(tables: dict[str, pd.DataFrame], options: Options) -> dict[str, pd.DataFrame]:
    """The ``whatif`` table with the default scenarios (see the module docstring)."""
    try:
        return {"whatif": estimate(tables, default_scenarios(tables))}
    except DtraceError:
        return {"whatif": empty_frame(COLUMNS)}


def whatif(results: Any, *, speedup: dict[str, float] | None = None, step: int | None = None) -> pd.DataFrame:
    """What-if estimates of loaded results with your scenarios (a results directory by its path:
    :func:`dtrace.whatif`).

    Parameters
    ----------
    results
        ``dtrace.load(OUT)``: anything with ``table_names``, ``table(name)`` and ``path``.
    speedup
        ``{class: x}``: each class ``x`` times as fast on every rank (default: the three compute
        classes with the most time, 1.2× each).
    step
        Only this step.

    Examples
    --------
    >>> from dtrace.reduce.whatif import whatif                       # doctest: +SKIP
    >>> whatif(dtrace.load("run42/results"), speedup={"gemm": 1.5})   # doctest: +SKIP
    """
    res = results
    need = ("segments", "collectives", "clock_offsets", "kernels", "classes", "stragglers")
    tables = {n: res.table(n) for n in need if n in res.table_names}
    if "segments" not in tables:
        raise DtraceError(
            f"{res.path or 'results'}: no segments table (analysed by an older dtrace): run dtrace analyze again"
        )
    out = estimate(tables, default_scenarios(tables, speedup))
    if step is not None:
        out = out.loc[out["step"].eq(step).fillna(False).to_numpy(bool)].reset_index(drop=True)
    return out


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per scenario: the mean over steps of the ``whatif`` table's times.

    Examples
    --------
    >>> t = pd.DataFrame({"step": [1, 1, 2, 2], "scenario": ["a", "b", "a", "b"], "detail": ["x", "y", "x", "y"],
    ...                   "observed_ns": [10, 10, 12, 12], "replayed_ns": [10, 10, 12, 12],
    ...                   "estimate_ns": [8, 9, 10, 11], "fit_ns": [0, 0, 1, 1]})
    >>> summary(t)[["scenario", "steps", "estimate_ns", "saved_ns", "saved_share"]].to_dict("list")
    {'scenario': ['a', 'b'], 'steps': [2, 2], 'estimate_ns': [9, 10], 'saved_ns': [2, 1], 'saved_share': [0.18181818181818182, 0.09090909090909091]}
    """
    if not len(table):
        return empty_frame(
            {
                "scenario": object,
                "detail": object,
                "steps": "int64",
                "observed_ns": "int64",
                "replayed_ns": "int64",
                "estimate_ns": "int64",
                "saved_ns": "int64",
                "saved_share": "float64",
                "fit_ns": "int64",
            }
        )
    g = table.groupby("scenario", sort=False)
    out = pd.DataFrame(
        {
            "detail": g["detail"].first(),
            "steps": g["step"].nunique(dropna=False),
            "observed_ns": g["observed_ns"].mean(),
            "replayed_ns": g["replayed_ns"].mean(),
            "estimate_ns": g["estimate_ns"].mean(),
            "fit_ns": g["fit_ns"].max(),
        }
    ).reset_index()
    for c in ("observed_ns", "replayed_ns", "estimate_ns"):
        out[c] = np.rint(out[c].to_numpy(np.float64)).astype(np.int64)
    out["saved_ns"] = out["replayed_ns"] - out["estimate_ns"]
    out["saved_share"] = np.divide(
        out["saved_ns"].to_numpy(np.float64),
        out["replayed_ns"].to_numpy(np.float64),
        out=np.zeros(len(out)),
        where=out["replayed_ns"].to_numpy() > 0,
    )
    cols = [
        "scenario",
        "detail",
        "steps",
        "observed_ns",
        "replayed_ns",
        "estimate_ns",
        "saved_ns",
        "saved_share",
        "fit_ns",
    ]
    return out[cols]
