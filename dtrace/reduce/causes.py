"""Why a straggler is late: one cause per flagged rank, from a fixed vocabulary, with its evidence
(docs/semantics.md, "Ranks and stragglers").

A rank that holds the others back spends its step on something the median rank does not. The
``step_bounds`` table walks each step's critical path and splits it into ``host``, ``compute``,
``comm``, ``memcpy``, ``sync`` and ``other`` time; per rank, the mean per step of each category
minus the median rank's is its *excess* there (:func:`excess_per_step`). A straggler's ``comm``
excess is negative (it waits least) and the category it spent that time in is its cause:

=================  ==========================================================================
cause              when
=================  ==========================================================================
``gpu_slow``       the excess is GPU compute and its instances are slower as a whole (a shift:
                   clocks, power, thermals, a weaker part)
``gpu_contended``  the excess is GPU compute held by a few much slower instances (a long tail:
                   another process time-slicing the GPU); the time-weighted slowdown is well
                   above the slowdown of the typical instance (the smaller of the median and
                   the fastest instance's)
``host_loader``    the excess is host time, mostly in a data loader (``DataLoader``,
                   ``__next__``, ``_next_data``, ``fetch``)
``host_sync``      the excess is synchronisation (the host blocked in a
                   ``cudaStreamSynchronize``, ``.item()``, a blocking copy) or host time in such
                   an op
``host_stall``     the excess is host time, mostly in one other host op (named)
``host_launch``    the excess is host time spread over the launches (slow dispatch, Python
                   overhead: the GPU waits for each launch)
``memcpy``         the excess is memory copies on the critical path
``link``           its collectives transfer slower than comparable groups (signal d)
``late``           it held the others back, but no category of its own time explains it
=================  ==========================================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..core.units import fmt_time

KEYS = ["rank", "device"]
CATEGORIES = ("host", "compute", "sync", "memcpy")
CAUSES = (
    "gpu_slow",
    "gpu_contended",
    "host_loader",
    "host_sync",
    "host_stall",
    "host_launch",
    "memcpy",
    "link",
    "late",
)
"""The cause vocabulary (module docs), in the order ``dtrace show`` lists them."""

LOADER = re.compile(r"dataloader|data_loader|_next_data|__next__|\bfetch|collate|prefetch", re.IGNORECASE)
SYNC = re.compile(r"synchroni[sz]e|\bitem\b|_local_scalar_dense|\.cpu\b|nonzero|memcpy(?!async)|barrier", re.IGNORECASE)
TAIL = 0.5
"""A GPU is *contended* when the slowdown of its median instance is at most this share of its
time-weighted slowdown's excess over 1 (most of the lost time is in a few instances)."""
MIN_TAIL = 0.03
"""... and its time-weighted slowdown is at least 1 + this."""
ONE_OP = 0.5
"""Host excess is a stall in one op when that op holds at least this share of it ..."""
LAUNCH_GAPS = 4.0
"""... unless its GPU waited for the host this many more times per step than the median rank's did
(many short waits, one per launch: the host is slow at launching, not stalled once)."""
EXPLAINS = 0.25
"""A category explains a rank's held time when its excess per step is at least this share of it."""


@dataclass
class Excess:
    """Per rank (rows of the signals frame): each category's excess per step over the median rank,
    and the host op its host time went to."""

    per_category: dict[str, np.ndarray]
    host_op: np.ndarray  # the op with the most host time on the rank's critical paths ("" none)
    host_op_excess: np.ndarray  # that op's host time per step minus the median rank's in it
    sync_op: np.ndarray
    available: np.ndarray  # the rank has step_bounds rows


def excess_per_step(step_bounds: pd.DataFrame | None, idx: pd.MultiIndex) -> Excess:
    """Each rank's critical-path time per step by category, minus the median rank's (module docs)."""
    n = len(idx)
    empty = Excess(
        {c: np.zeros(n) for c in CATEGORIES},
        np.full(n, "", object),
        np.zeros(n),
        np.full(n, "", object),
        np.zeros(n, bool),
    )
    if (
        step_bounds is None
        or not len(step_bounds)
        or not set(KEYS + [f"{c}_ns" for c in CATEGORIES]) <= set(step_bounds.columns)
    ):
        return empty
    sb = step_bounds
    g = sb.groupby(KEYS, sort=False)
    means = g[[f"{c}_ns" for c in CATEGORIES]].mean().reindex(idx)
    available = means.notna().all(axis=1).to_numpy()
    per = {}
    for c in CATEGORIES:
        v = means[f"{c}_ns"].to_numpy(np.float64)
        med = float(np.nanmedian(v)) if available.any() else 0.0
        per[c] = np.where(available, v - med, 0.0)
    host_op, host_op_excess = _top_op(sb, idx, "host_op", "host_op_ns", g.size())
    sync_op, _ = _top_op(sb, idx, "sync_op", "sync_op_ns", g.size())
    return Excess(per, host_op, host_op_excess, sync_op, available)


def _top_op(
    sb: pd.DataFrame, idx: pd.MultiIndex, name: str, ns: str, steps: pd.Series
) -> tuple[np.ndarray, np.ndarray]:
    """Per rank, the op with the most ``ns`` over its steps, and that time per step minus the
    median rank's time per step in the same op (ranks without it: 0)."""
    n = len(idx)
    out_op, out_ex = np.full(n, "", object), np.zeros(n)
    if name not in sb.columns or ns not in sb.columns:
        return out_op, out_ex
    f = sb.loc[sb[name].astype(str).str.len().to_numpy() > 0, KEYS + [name, ns]]
    if not len(f):
        return out_op, out_ex
    f = f.assign(**{name: f[name].astype(str)})
    per = f.groupby(KEYS + [name], sort=False)[ns].sum().reset_index()
    per_step = per[ns].to_numpy(np.float64) / steps.reindex(pd.MultiIndex.from_frame(per[KEYS])).to_numpy(np.float64)
    per = per.assign(per_step=per_step)
    # the median rank's time in each op: ranks without the op count as 0
    med = _median_with_zeros(per[name].to_numpy(object), per["per_step"].to_numpy(np.float64), max(len(steps), 1))
    top = per.sort_values("per_step", ascending=False, kind="stable").drop_duplicates(KEYS).set_index(KEYS)
    top = top.reindex(idx)
    has = top[name].notna().to_numpy()
    out_op[has] = top[name].to_numpy(object)[has]
    out_ex[has] = top["per_step"].to_numpy(np.float64)[has] - med.reindex(top[name][has]).to_numpy(np.float64)
    return out_op, out_ex


def _median_with_zeros(keys: np.ndarray, values: np.ndarray, n: int) -> pd.Series:
    """Per key, the median of its values padded with zeros to ``n`` (the ranks without the op
    spent no time in it); values are >= 0.

    Examples
    --------
    >>> _median_with_zeros(np.array(["a", "a", "b"], object), np.array([4.0, 2.0, 6.0]), 4).to_dict()
    {'a': 1.0, 'b': 0.0}
    """
    codes, uniq = pd.factorize(keys)
    order = np.lexsort((values, codes))
    codes, values = codes[order], values[order]
    count = np.bincount(codes, minlength=len(uniq))
    first = np.r_[0, np.cumsum(count)[:-1]]
    zeros = n - count  # zeros come first in each key's padded, sorted values

    def at(pos: int) -> np.ndarray:
        inside = pos >= zeros
        idx = np.where(inside, first + pos - zeros, 0)
        return np.where(inside, values[np.minimum(idx, len(values) - 1)], 0.0)

    return pd.Series((at((n - 1) // 2) + at(n // 2)) / 2, index=uniq)


def _gpu_cause(slowdown: float, median_slowdown: float) -> str:
    """``gpu_contended`` for a long tail of slow instances, ``gpu_slow`` for a shift of all."""
    excess = slowdown - 1.0
    if excess >= MIN_TAIL and median_slowdown - 1.0 <= TAIL * excess:
        return "gpu_contended"
    return "gpu_slow"


def _host_cause(op: str, op_excess: float, host_excess: float, extra_gaps: float) -> str:
    if op and LOADER.search(op):
        return "host_loader"
    if op and SYNC.search(op):
        return "host_sync"
    if op and host_excess > 0 and op_excess >= ONE_OP * host_excess and not extra_gaps >= LAUNCH_GAPS:
        return "host_stall"
    return "host_launch"


def attribute(ranks: pd.DataFrame, ex: Excess, i: int, *, link: bool, gpu: bool, held: bool) -> tuple[str, float, str]:
    """The cause of row ``i`` of the signals frame ``ranks``, its time per step, and the evidence.

    ``link``, ``gpu`` and ``held``: whether the rank passed the slow-link gate, a slow-GPU gate
    (its kernels or modelled ops slower at equal names or shapes) and the held-the-others gate.
    """
    row = ranks.iloc[i]
    if not ex.available[i]:
        return _without_paths(row, link=link, gpu=gpu)
    per = {c: float(ex.per_category[c][i]) for c in CATEGORIES}
    best = max(CATEGORIES, key=lambda c: per[c])
    held_ns = float(row.get("held_step_ns", 0.0)) if held else 0.0
    if gpu and best != "compute" and per["compute"] > 0 and per["compute"] >= 0.5 * per[best]:
        best = "compute"
    if per[best] <= 0 or per[best] < EXPLAINS * held_ns:
        return _unexplained(row, best, per[best], link=link, gpu=gpu)
    if link and not held_ns:
        return "link", float("nan"), ""
    return _explained(row, ex, i, best, per[best])


def _explained(row: pd.Series, ex: Excess, i: int, best: str, amount: float) -> tuple[str, float, str]:
    """The cause of the category ``best`` that accounts for the rank's held time."""
    if best == "compute":
        slow, typical = _gpu_slowdowns(row)
        cause = _gpu_cause(slow, typical)
        return cause, amount, _gpu_text(cause, slow, typical, amount)
    if best == "memcpy":
        return "memcpy", amount, f"cause memcpy: memory copies hold its steps {fmt_time(amount)} more per step"
    if best == "sync":
        return "host_sync", amount, _sync_text(str(ex.sync_op[i]) or str(ex.host_op[i]), amount)
    return _host(row, str(ex.host_op[i]), float(ex.host_op_excess[i]), amount)


def _without_paths(row: pd.Series, *, link: bool, gpu: bool) -> tuple[str, float, str]:
    """No critical paths (no host events): the cause from the intrinsic signals alone."""
    if gpu:
        slow, typical = _gpu_slowdowns(row)
        cause = _gpu_cause(slow, typical)
        return cause, float("nan"), _gpu_text(cause, slow, typical, float("nan"))
    if link:
        return "link", float("nan"), ""
    host = float(row.get("host_wait_excess_ns", 0.0))
    if host > 0:
        return "host_launch", host, f"cause host_launch: its GPU waited for its host {fmt_time(host)} more per step"
    return "late", float("nan"), "cause late: no part of its own time explains it"


def _unexplained(row: pd.Series, best: str, amount: float, *, link: bool, gpu: bool) -> tuple[str, float, str]:
    """Nothing of its own time explains what it held the others back: its link, its GPU, or late."""
    if link:
        return "link", float("nan"), ""
    if gpu:
        slow, typical = _gpu_slowdowns(row)
        cause = _gpu_cause(slow, typical)
        return cause, float("nan"), _gpu_text(cause, slow, typical, float("nan"))
    return (
        "late",
        float("nan"),
        f"cause late: no part of its own time explains it (the most, {best}, {fmt_time(max(amount, 0.0))} "
        "more per step than the median rank)",
    )


def _sync_text(op: str, amount: float) -> str:
    where = f" in `{op}`" if op else ""
    return (
        f"cause host_sync: its host blocked on the GPU{where} {fmt_time(amount)} more per step than the "
        "median rank, so it could not queue the rest of the step ahead"
    )


def _host(row: pd.Series, op: str, op_ex: float, amount: float) -> tuple[str, float, str]:
    """A host cause: the loader, a synchronising op, a stall in one op, or slow launches."""
    cause = _host_cause(op, op_ex, amount, float(row.get("host_wait_gaps_excess", 0.0)))
    if cause == "host_launch":
        text = (
            f"cause host_launch: its host spent {fmt_time(amount)} more per step than the median rank "
            "launching work (spread over its ops: slow dispatch, Python overhead), and its GPU waited for it"
        )
    else:
        text = (
            f"cause {cause}: its host spent {fmt_time(amount)} more per step than the median rank, "
            f"{fmt_time(max(op_ex, 0.0))} of it in `{op}`, before launching work"
        )
    return cause, amount, text


def _gpu_slowdowns(row: pd.Series) -> tuple[float, float]:
    """The rank's GPU slowdown, time-weighted, and that of its typical instance (the smaller of the
    median and the fastest instance's: with few instances per name the median can be a slow one):
    the modelled ops' when they show more than the kernels' (equal shapes are the better
    comparison), else the kernels'."""

    def pick(prefix: str) -> tuple[float, float]:
        typical = min(float(row.get(f"{prefix}_median_slowdown", 1.0)), float(row.get(f"{prefix}_min_slowdown", 1.0)))
        return float(row.get(f"{prefix}_slowdown", 1.0)), typical

    k, g = pick("compute"), pick("gpu")
    return g if g[0] > k[0] else k


def _gpu_text(cause: str, slow: float, med_slow: float, amount: float) -> str:
    extra = f"{fmt_time(amount)} more GPU compute per step than the median rank; " if np.isfinite(amount) else ""
    if cause == "gpu_contended":
        return (
            f"cause gpu_contended: {extra}its kernels take {slow:.2f}× the median rank's time in all, but its "
            f"typical instance {med_slow:.2f}×: a few instances take far longer (a long tail), as when another "
            "process time-slices the GPU"
        )
    return (
        f"cause gpu_slow: {extra}its kernels take {slow:.2f}× the median rank's time at equal names or shapes "
        f"(typical instance {med_slow:.2f}×): check its clocks, power and thermals"
    )
