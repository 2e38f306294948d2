"""Straggler detection (docs/semantics.md, "Ranks and stragglers"): signals per rank, a combined score, ``flagged`` and evidence.

Signals, computed once from the small cross-rank tables (:func:`compute_signals`):

(a) **arrives last** at matched collectives (``collectives`` from :mod:`.collectives`): count and
    share of its instances, a z-score of that count against chance (an instance of ``n`` ranks
    has a ``1/n`` chance to end with any given rank: ``(last − Σ1/n) / sqrt(Σ(1/n)(1 − 1/n))``),
    the total wait it caused the others, and ``late_ns``, the time it alone delayed instances
    (its start minus the second-latest start). One slow rank makes every other rank wait, so
    the straggler is the rank that waits *least*.
(b) **slow compute kernels** (``kernels``): per compute kernel name (NCCL excluded), the
    rank's median duration against the median over ranks of the per-rank medians; combined,
    time-weighted, as ``Σ count·own_median / Σ count·median_over_ranks`` (> 1: slower). Per
    kernel class when the table has classes, for the evidence.
(c) **step time** (``ranks``): robust z-score of the median step time.
(e) **slow GPU** (``gpu_slowness``, :mod:`.opperf`): the rank's modelled ops (op performance
    model) against the median rank at equal op, shapes and dtypes; combined time-weighted as
    ``Σ count·own_median / Σ count·median_over_ranks``. An op's time is the union of its own
    kernels, so waiting for other ranks does not enter it: clocks, power, thermals or memory of
    that GPU do.
(d) **slow link** (``collective_instances``): each instance's transfer time relative to the
    median transfer of instances of the same (op, bytes, group size) in *other* groups; a
    group's slowness is the median of its instances' log ratios; a rank's link excess is the
    smallest slowness over the groups containing it (high only if *all* its groups are slow:
    the rank common to the slow groups), floored at 0, and it must stand out from every rank
    sharing a group with it. The floor matters when a kind of group has few members: with two
    tensor-parallel groups each is the other's reference, so a slow one makes the other look
    equally fast, and those negative excesses would widen the spread the z-score divides by
    (at 16 ranks a 2× slow link scored z ≈ 2). Groups of another kind that share ranks with
    both (the data-parallel groups) tell which of the two is slow.

Methods turn signals into ``score``, ``flagged`` and ``evidence``; they live in :data:`METHODS`
and :attr:`Options.straggler_method` picks one (a registry, as HTA lets users swap its metric):

``robust`` (default)
    each signal becomes a strength ``max(0, z) / 5``; ``score`` is their sum. A rank is
    flagged by (b), (d) or (e) (intrinsic evidence: its own kernels, links or GPU) when ``z ≥ 5``
    and the effect is material (≥ 3 % slower kernels, ≥ 1.05× transfers, ≥ 3 % slower modelled
    ops with most of the compared time slower), and by (a) or (c) unless its
    lateness is explained by another candidate: a rank that waited for candidate ``f`` at least
    half as long as it later delayed others, or that shares a slow group with a slow-link
    suspect, inherits its lateness (its strength counts a quarter in the score and the evidence
    names ``f``).
``late_start``
    HTA's idea: ranks whose collectives start late. Lateness is attributed to the rank that
    caused it, not to those that inherited it: a rank's lag at an instance is its *lead time*
    (start minus the end of its own previous collective, the time since it was last released)
    minus the median lead time of the instance's members (:func:`own_lag`). Ranks that waited
    for a straggler at an earlier collective are released with it and arrive late at the next
    one together with it, but their lead time is normal. Score = robust z of the mean lag;
    flagged at ``z ≥ 5`` with a mean lag of at least 1 % of the median step.

A method is a function ``(Signals, Options) -> DataFrame`` with ``rank``, ``device``, ``score``,
``flagged``, ``evidence``; register new ones with :func:`register_method`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, cast

import numpy as np
import pandas as pd

from ..core.dtypes import empty_frame, missing_if_negative
from ..core.units import fmt_time
from ..errors import UsageError
from ..options import Options
from . import causes
from .ranks import peer_z, z_threshold

KEYS = ["rank", "device"]
Z_FLAG = 5.0
MIN_SLOWDOWN = 1.03  # (b): at least 3 % slower compute kernels
MIN_STEP_RATIO = 1.03  # (c)
MIN_LINK_RATIO = 1.05  # (d)
HELD_FLOOR = 0.005  # (f): the scale of held_z is at least 0.5 % of the median step ...
MIN_HELD_SHARE = 0.02  # (f): ... and a rank is flagged for holding the others >= 2 % of the step
MIN_GPU_SLOWDOWN = 1.03  # (e): its modelled ops at least 3 % slower at equal shapes ...
MIN_SLOWER_SHARE = 0.5  # (e): ... with most of the compared op time in slower (op, shapes)
EXPLAIN_FRACTION = 0.5

Method = Callable[["Signals", Options], pd.DataFrame]
METHODS: dict[str, Method] = {}

OUTPUT_COLUMNS = {
    "rank": "int32",
    "device": "int32",
    "score": "float64",
    "flagged": "bool",
    "cause": object,
    "cause_ns": "Int64",
    "held_ns": "int64",
    "held_share": "float64",
    "held_z": "float64",
    "z_threshold": "float64",
    "evidence": object,
    "method": object,
    "signals": object,
    "explained_by": "Int64",
    "collectives": "int64",
    "arrived_last": "int64",
    "last_share": "float64",
    "last_z": "float64",
    "wait_caused_ns": "int64",
    "late_ns": "int64",
    "collective_wait_ns": "int64",
    "compute_slowdown": "float64",
    "compute_median_slowdown": "float64",
    "compute_min_slowdown": "float64",
    "compute_slowdown_z": "float64",
    "step_ns": "int64",
    "step_z": "float64",
    "link_ratio": "float64",
    "link_z": "float64",
    "gpu_slowdown": "float64",
    "gpu_median_slowdown": "float64",
    "gpu_min_slowdown": "float64",
    "gpu_slowdown_z": "float64",
    "gpu_slower_share": "float64",
}


def register_method(name: str) -> Callable[[Method], Method]:
    """Decorator: make ``func`` available as ``straggler_method=name``."""

    def deco(func: Method) -> Method:
        METHODS[name] = func
        return func

    return deco


def check_method(name: str) -> None:
    """Raise :class:`UsageError` unless ``name`` is a registered detection method."""
    if name not in METHODS:
        raise UsageError(f"unknown straggler_method {name!r}; valid: {', '.join(METHODS)}")


# -- signals ---------------------------------------------------------------------------------


@dataclass
class Signals:
    """Per-rank signal values and the small frames the evidence quotes."""

    ranks: pd.DataFrame  # one row per (rank, device): every signal value
    waited_for: pd.DataFrame  # rank, device, last_rank, last_device, wait_ns
    top_last: pd.DataFrame  # per rank: its (group, op) with the most wait caused
    class_slowdown: pd.DataFrame  # rank, device, class, slowdown, ref_ns
    group_slowness: pd.DataFrame  # group, op, ratio, instances (compared groups only)
    membership: pd.DataFrame  # rank, device, group (compared groups only)
    op_outliers: pd.DataFrame
    excess: causes.Excess  # per rank: critical-path time per step over the median rank's


def _frame_keys(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    frames = [
        t[KEYS]
        for name in ("ranks", "breakdown", "collectives", "kernels")
        if (t := tables.get(name)) is not None and len(t) and set(KEYS) <= set(t.columns)
    ]
    if not frames:
        return empty_frame(KEYS, "int32")
    keys = pd.concat(frames, ignore_index=True).drop_duplicates().sort_values(KEYS, kind="stable")
    return keys.astype({"rank": "int32", "device": "int32"}).reset_index(drop=True)


def _arrival(
    coll: pd.DataFrame | None, inst: pd.DataFrame | None, idx: pd.MultiIndex
) -> tuple[dict[str, np.ndarray], pd.DataFrame, pd.DataFrame]:
    n = len(idx)
    zero = np.zeros(n)
    empty_w = empty_frame(("rank", "device", "last_rank", "last_device", "wait_ns"), "int64")
    empty_t = pd.DataFrame(
        {"rank": [], "device": [], "group": [], "op": [], "instances": [], "last": [], "wait_caused_ns": []}
    )
    if coll is None or not len(coll) or "last" not in coll.columns:
        return (
            {
                "collectives": zero,
                "arrived_last": zero,
                "last_share": zero,
                "chance_share": zero,
                "last_z": zero,
                "wait_caused_ns": zero,
                "late_ns": zero,
                "collective_wait_ns": zero,
                "start_lag_ns": zero,
            },
            empty_w,
            empty_t,
        )
    c = coll.loc[coll["ranks"].to_numpy() >= 2]
    ii = inst.set_index("collective") if inst is not None and len(inst) else None
    f = _arrivals(c, coll, ii)
    top = (
        f.groupby(KEYS + ["group", "op"], sort=False)
        .agg(instances=("one", "sum"), last=("last", "sum"), wait_caused_ns=("caused", "sum"))
        .reset_index()
    )
    top = top.sort_values(["wait_caused_ns", "last"], ascending=False, kind="stable").drop_duplicates(KEYS)
    return _arrival_signals(f, idx), _waited_for(c, ii, empty_w), top


def _arrivals(c: pd.DataFrame, coll: pd.DataFrame, ii: pd.DataFrame | None) -> pd.DataFrame:
    """Per shared collectives row: arrived last or not, the chance of it, the wait it caused and
    its lateness when last, its own wait and start lag."""
    p = 1.0 / c["ranks"].to_numpy(np.float64)
    wait_total = ii["wait_total_ns"].reindex(c["collective"]).to_numpy() if ii is not None else np.zeros(len(c))
    late_i = ii["late_ns"].reindex(c["collective"]).to_numpy() if ii is not None else np.zeros(len(c))
    last = c["last"].to_numpy(bool)
    return pd.DataFrame(
        {
            "rank": c["rank"].to_numpy(),
            "device": c["device"].to_numpy(),
            "one": 1,
            "last": last,
            "p": p,
            "v": p * (1 - p),
            "caused": np.where(last, wait_total, 0),
            "late": np.where(last, late_i, 0),
            "wait": c["wait_ns"].to_numpy(),
            "lag": own_lag(c, coll),
            "group": c["group"].array,  # texts as they are: an object per row is ~70 bytes
            "op": c["op"].array,
        }
    )


def _arrival_signals(f: pd.DataFrame, idx: pd.MultiIndex) -> dict[str, np.ndarray]:
    """Per (rank, device) of ``idx``: the arrival signals summed over its rows."""
    n = len(idx)
    g = f.groupby(KEYS).sum(numeric_only=True).reindex(idx).fillna(0)
    lag = f.groupby(KEYS)["lag"].mean().reindex(idx).fillna(0).to_numpy()
    count = g["one"].to_numpy()
    lastn = g["last"].to_numpy(np.float64)
    sd = np.sqrt(g["v"].to_numpy())
    return {
        "collectives": count,
        "arrived_last": lastn,
        "last_share": np.divide(lastn, count, out=np.zeros(n), where=count > 0),
        "chance_share": np.divide(g["p"].to_numpy(), count, out=np.zeros(n), where=count > 0),
        "last_z": np.divide(lastn - g["p"].to_numpy(), sd, out=np.zeros(n), where=sd > 0),
        "wait_caused_ns": g["caused"].to_numpy(),
        "late_ns": g["late"].to_numpy(),
        "collective_wait_ns": g["wait"].to_numpy(),
        "start_lag_ns": lag,
    }


def _waited_for(c: pd.DataFrame, ii: pd.DataFrame | None, empty_w: pd.DataFrame) -> pd.DataFrame:
    """Who waited for whom: every non-last member waited for the instance's last rank."""
    w = c.loc[~c["last"].to_numpy(bool)]
    lr = ii[["last_rank", "last_device"]].reindex(w["collective"]) if ii is not None else None
    if lr is None or not len(w):
        return empty_w
    wf = pd.DataFrame(
        {
            "rank": w["rank"].to_numpy(),
            "device": w["device"].to_numpy(),
            "last_rank": lr["last_rank"].to_numpy(),
            "last_device": lr["last_device"].to_numpy(),
            "wait_ns": w["wait_ns"].to_numpy(),
        }
    )
    return wf.groupby(["rank", "device", "last_rank", "last_device"], sort=False)["wait_ns"].sum().reset_index()


def own_lag(rows: pd.DataFrame, every: pd.DataFrame) -> np.ndarray:
    """How much later than the instance's median member each row's rank arrived, counting only
    the lateness it did not inherit.

    A rank's *lead time* to a collective is its start minus the end of its own previous
    collective (the latest end before the start, over every collective of the rank in
    ``every``): the time it spent computing since it was last released. Ranks that waited for a
    straggler at an earlier collective are released late together with it, so their lead time
    is normal; the straggler's is long. The lag is the lead time minus the median lead time of
    the instance's members (rows without a previous collective: NaN, left out of the median).

    Examples
    --------
    >>> every = pd.DataFrame({"rank": [0, 1, 2, 0, 1, 2], "device": [0, 1, 2, 0, 1, 2],
    ...     "collective": [0, 0, 0, 1, 1, 1], "start_ns": [0, 0, 90, 200, 300, 200],
    ...     "end_ns": [100, 100, 100, 400, 400, 400]})
    >>> own_lag(every, every).tolist()  # rank 1 took 200 ns to its second collective, the others 100
    [nan, nan, nan, 0.0, 100.0, 0.0]
    """
    if not len(rows):
        return np.zeros(0)
    keys = ["rank", "device"]
    ends = every[keys + ["end_ns"]].sort_values("end_ns", kind="stable").rename(columns={"end_ns": "t"})
    starts = pd.DataFrame(
        {
            "rank": rows["rank"].to_numpy(),
            "device": rows["device"].to_numpy(),
            "t": rows["start_ns"].to_numpy(np.int64),
            "i": np.arange(len(rows)),
        }
    )
    starts = starts.sort_values("t", kind="stable")
    ends["released"] = ends["t"]
    hit = pd.merge_asof(starts, ends, on="t", by=keys, direction="backward", allow_exact_matches=False)
    lead = np.full(len(rows), np.nan)
    lead[hit["i"].to_numpy()] = (hit["t"] - hit["released"]).to_numpy(np.float64)
    med = pd.Series(lead).groupby(rows["collective"].to_numpy()).transform("median").to_numpy()
    return cast(np.ndarray, lead - med)


def _compute_kernels(
    kernels: pd.DataFrame | None, idx: pd.MultiIndex
) -> tuple[np.ndarray, np.ndarray, np.ndarray, pd.DataFrame]:
    """Signal (b): per rank, its compute kernels' time against the median rank's at equal names,
    time-weighted (``Σ own time / Σ count·median over ranks of the mean``: every instance counts,
    so a long tail of slow instances shows) and at the median instance (``Σ count·own median /
    Σ count·median over ranks of the median``: a shift of every instance shows in both) and at the
    fastest instance (the same with the minimum: a GPU whose fastest instances are as fast as the
    others' lost its time in a tail); and the time-weighted figure per class, for the evidence."""
    n = len(idx)
    empty = pd.DataFrame({"rank": [], "device": [], "class": [], "slowdown": [], "ref_ns": [], "own_ns": []})
    if kernels is None or not len(kernels) or "median_ns" not in kernels.columns:
        return np.ones(n), np.ones(n), np.ones(n), empty
    k = kernels
    # the rows kept as positions and only the columns used taken at them: a million rows at 16k
    # ranks, every frame filter a copy; texts compared and grouped as codes (no object per row)
    compute = (k["category"] == "compute").to_numpy(bool) if "category" in k.columns else np.ones(len(k), bool)
    codes, names = pd.factorize(k["name"].astype(str))  # the name test once per distinct name
    comm = pd.Series(names).str.contains("nccl|rccl", case=False, regex=True).to_numpy(bool)
    sel = np.flatnonzero(compute & ~comm[codes] & (k["count"].to_numpy() > 0))
    if not len(sel):
        return np.ones(n), np.ones(n), np.ones(n), empty
    rank = k["rank"].to_numpy()
    ranks_per_name = pd.Series(rank[sel]).groupby(codes[sel]).transform("nunique").to_numpy()
    sel = sel[ranks_per_name >= 2]
    if not len(sel):
        return np.ones(n), np.ones(n), np.ones(n), empty
    name = codes[sel]
    cnt = k["count"].to_numpy(np.float64)[sel]
    med = k["median_ns"].to_numpy(np.float64)[sel]
    total = k["total_ns"].to_numpy(np.float64)[sel] if "total_ns" in k.columns else cnt * med
    low = k["min_ns"].to_numpy(np.float64)[sel] if "min_ns" in k.columns else med
    # the median over ranks per name, of the mean, median and fastest instance: one group-by
    per_name = pd.DataFrame({"mean": total / cnt, "med": med, "low": low}).groupby(name).transform("median")
    ref, ref_med, ref_low = (per_name[c].to_numpy(np.float64) for c in ("mean", "med", "low"))
    cls_code, cls_names = (
        pd.factorize(k["class"].astype(str)) if "class" in k.columns else (np.zeros(len(k), np.int64), ["compute"])
    )
    f = pd.DataFrame(
        {
            "rank": rank[sel],
            "device": k["device"].to_numpy()[sel],
            "own": total,
            "ref": cnt * ref,
            "own_med": cnt * med,
            "ref_med": cnt * ref_med,
            "own_low": cnt * low,
            "ref_low": cnt * ref_low,
            "class": cls_code[sel],
        }
    )
    g = f.groupby(KEYS)[["own", "ref", "own_med", "ref_med", "own_low", "ref_low"]].sum().reindex(idx)

    def ratio(a: str, b: str) -> np.ndarray:
        den = g[b].to_numpy()
        out = np.divide(g[a].to_numpy(), den, out=np.ones(n), where=np.nan_to_num(den) > 0)
        return cast(np.ndarray, np.nan_to_num(out, nan=1.0))

    by_class = f.groupby(KEYS + ["class"], sort=False)[["own", "ref"]].sum().reset_index()
    by_class["class"] = np.asarray(cls_names, dtype=object)[by_class["class"].to_numpy()]
    by_class["slowdown"] = by_class["own"] / by_class["ref"].where(by_class["ref"] > 0)
    by_class = by_class.rename(columns={"ref": "ref_ns", "own": "own_ns"})
    return ratio("own", "ref"), ratio("own_med", "ref_med"), ratio("own_low", "ref_low"), by_class


def _loo_medians(values: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """For each value, the median of the *other* values of its class (leave-one-out).

    Comparing a group with the median of the other groups keeps a slow group from pulling its
    own reference up (with two groups the plain median would halve its excess).

    Examples
    --------
    >>> _loo_medians(np.array([1.0, 2.0, 10.0, 5.0]), np.array([0, 0, 0, 1])).tolist()
    [6.0, 5.5, 1.5, nan]
    """
    out = np.full(len(values), np.nan)
    order = np.argsort(cls, kind="stable")
    bounds = np.r_[0, np.flatnonzero(np.diff(cls[order])) + 1, len(order)]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        idx = order[lo:hi]
        v = values[idx]
        if len(v) < 2:
            continue
        for j, i in enumerate(idx):
            out[i] = np.median(np.delete(v, j))
    return out


def _links(
    inst: pd.DataFrame | None, coll: pd.DataFrame | None, idx: pd.MultiIndex
) -> tuple[np.ndarray, np.ndarray, pd.DataFrame, pd.DataFrame]:
    n = len(idx)
    empty_g = pd.DataFrame({"group": [], "op": [], "ratio": [], "instances": []})
    empty_m = pd.DataFrame({"rank": [], "device": [], "group": []})
    if inst is None or not len(inst) or coll is None or not len(coll):
        return np.zeros(n), np.zeros(n), empty_g, empty_m
    i = inst.loc[(inst["ranks"].to_numpy() >= 2) & (inst["transfer_ns"].to_numpy() > 0)]
    if not len(i):
        return np.zeros(n), np.zeros(n), empty_g, empty_m
    gkey = i["group"].astype(str) + "|" + i["group_ranks"].astype(str)
    cls = pd.DataFrame(
        {
            "op": i["op"].to_numpy(),
            "b": i["bytes"].to_numpy(np.int64, na_value=-1),  # -1: unknown
            "n": i["group_size"].to_numpy(),
            "g": gkey.to_numpy(),
            "t": np.log(i["transfer_ns"].to_numpy(np.float64)),
            "c": i["collective"].to_numpy(),
        }
    )
    ngroups = cls.groupby(["op", "b", "n"])["g"].transform("nunique").to_numpy()
    cls = cls.loc[ngroups >= 2]
    if not len(cls):
        return np.zeros(n), np.zeros(n), empty_g, empty_m
    gm = cls.groupby(["op", "b", "n", "g"], sort=True)["t"].median()
    ref = pd.Series(_loo_medians(gm.to_numpy(), gm.index.droplevel("g").factorize()[0]), index=gm.index)
    cls["r"] = cls["t"].to_numpy() - ref.reindex(pd.MultiIndex.from_frame(cls[["op", "b", "n", "g"]])).to_numpy()
    # the group keys (long texts: the group's rank list) as codes in their sorted order from here on
    gcode, keys = pd.factorize(cls["g"], sort=True)
    keys = np.asarray(keys, dtype=object)
    cls["g"] = gcode
    gs = cls.groupby("g")["r"].median()
    gdesc = cls.groupby("g").agg(op=("op", lambda s: ", ".join(sorted(set(s)))), instances=("r", "size"))
    group_slow = pd.DataFrame(
        {
            "group": [g.split("|", 1)[0] for g in keys[gs.index]],
            "key": keys[gs.index],
            "op": gdesc["op"].reindex(gs.index).to_numpy(),
            "ratio": np.exp(gs.to_numpy()),
            "instances": gdesc["instances"].reindex(gs.index).to_numpy(),
        }
    )
    # membership: which ranks took part in the compared groups
    ck = coll.loc[coll["collective"].isin(cls["c"].unique())]
    key_of = pd.Series(gcode, index=cls["c"].to_numpy())
    key_of = key_of[~key_of.index.duplicated()]
    mem = pd.DataFrame(
        {
            "rank": ck["rank"].to_numpy(),
            "device": ck["device"].to_numpy(),
            "key": key_of.reindex(ck["collective"]).to_numpy(),
        }
    ).drop_duplicates()
    mem["gs"] = gs.reindex(mem["key"]).to_numpy()
    # a slow link only slows transfers: a group faster than its reference is no evidence (with two
    # groups of a kind each is the other's reference, so one slow group makes the other look fast)
    excess_s = mem.groupby(KEYS)["gs"].min().clip(lower=0.0)
    mem["excess"] = excess_s.reindex(pd.MultiIndex.from_frame(mem[KEYS])).to_numpy()
    # per group: the largest and second-largest member excess, to compare each rank with its co-members
    srt = mem.sort_values(["key", "excess"], ascending=[True, False], kind="stable")
    top1 = srt.groupby("key").nth(0).set_index("key")
    top2 = srt.groupby("key").nth(1).set_index("key")
    t1 = top1.reindex(mem["key"])
    is_top = (t1["rank"].to_numpy() == mem["rank"].to_numpy()) & (t1["device"].to_numpy() == mem["device"].to_numpy())
    other = np.where(is_top, top2["excess"].reindex(mem["key"]).fillna(-np.inf).to_numpy(), t1["excess"].to_numpy())
    mem["other"] = other
    other_max = mem.groupby(KEYS)["other"].max()
    excess = excess_s.reindex(idx).fillna(0).to_numpy()
    margin = excess - other_max.reindex(idx).fillna(-np.inf).to_numpy()
    membership = pd.DataFrame(
        {"rank": mem["rank"].to_numpy(), "device": mem["device"].to_numpy(), "group": keys[mem["key"].to_numpy()]},
        index=mem.index,
    )
    return excess, margin, group_slow, membership


def compute_signals(tables: dict[str, pd.DataFrame]) -> Signals:
    """Every signal of every (rank, device), from the cross-rank tables (see the module docs)."""
    keys = _frame_keys(tables)
    idx = pd.MultiIndex.from_frame(keys)
    coll, inst = tables.get("collectives"), tables.get("collective_instances")
    arrival, waited_for, top_last = _arrival(coll, inst, idx)
    slowdown, median_slowdown, min_slowdown, class_slow = _compute_kernels(tables.get("kernels"), idx)
    excess, margin, group_slow, membership = _links(inst, coll, idx)
    ranks = tables.get("ranks")
    if ranks is not None and len(ranks):
        r = ranks.set_index(KEYS)
        step = r["step_ns"].reindex(idx).fillna(0).to_numpy(np.float64)
        total = r["total_ns"].reindex(idx).fillna(0).to_numpy(np.float64)
        idle = r["idle_ns"].reindex(idx).fillna(0).to_numpy(np.float64) if "idle_ns" in r else np.zeros(len(idx))
        host_wait = (
            r["host_wait_ns"].reindex(idx).fillna(0).to_numpy(np.float64)
            if "host_wait_ns" in r
            else np.full(len(idx), np.nan)
        )
    else:
        step = total = idle = np.zeros(len(idx))
        host_wait = np.full(len(idx), np.nan)
    step_med = float(np.median(step)) if len(step) else 0.0
    frame = keys.copy()
    for k, v in arrival.items():
        frame[k] = v
    frame["compute_slowdown"] = slowdown
    frame["compute_median_slowdown"] = median_slowdown
    frame["compute_min_slowdown"] = min_slowdown
    frame["compute_slowdown_z"] = peer_z(slowdown, floor=0.005)
    frame["step_ns"] = step
    frame["step_ratio"] = step / step_med if step_med > 0 else np.ones(len(step))
    frame["step_z"] = peer_z(step, floor=0.005 * step_med)
    _held_signal(frame, ranks, idx, step_med)
    frame["total_ns"] = total
    frame["idle_ns"] = idle
    frame["host_wait_ns"] = host_wait
    frame["link_excess"] = excess
    frame["link_ratio"] = np.exp(excess)
    frame["link_margin"] = margin
    frame["link_z"] = peer_z(excess, floor=math.log(1.01))
    _gpu_signal(frame, tables.get("gpu_slowness"), idx)
    steps = np.maximum(frame["steps"].to_numpy(np.float64), 1.0)
    if np.isfinite(host_wait).all() and len(host_wait):
        per_step = host_wait / steps
        frame["host_wait_excess_ns"] = per_step - float(np.median(per_step))
    gaps = tables.get("device_gaps")
    if gaps is not None and len(gaps) and "host_wait_gaps" in gaps.columns:
        n_gaps = gaps.groupby(KEYS)["host_wait_gaps"].sum().reindex(idx).fillna(0).to_numpy(np.float64) / steps
        frame["host_wait_gaps_excess"] = n_gaps - float(np.median(n_gaps))
    op_out = tables.get("op_outliers")
    return Signals(
        frame,
        waited_for,
        top_last,
        class_slow,
        group_slow,
        membership,
        op_out if op_out is not None else pd.DataFrame(),
        causes.excess_per_step(tables.get("step_bounds"), idx),
    )


def _held_signal(frame: pd.DataFrame, ranks: pd.DataFrame | None, idx: pd.MultiIndex, step_med: float) -> None:
    """Signal (f) into ``frame``: how long the rank held the others back (module docs).

    In a synchronous job every rank's step lasts as long as the slowest rank's; what differs is how
    much of it each rank spent waiting for the others in collectives. The median rank's
    ``collective_wait_ns`` minus the rank's own is the time it spent on its own work while the
    others waited for it: ``held_ns`` (negative: it waited more than the median rank), per step
    ``held_step_ns``, as a share of the median step ``held_share``, and its z-score against its
    peers (scale at least :data:`HELD_FLOOR` of the median step).
    """
    n = len(idx)
    if ranks is None or not len(ranks) or "collective_wait_ns" not in ranks.columns:
        for col in ("held_ns", "held_step_ns", "held_share", "held_z"):
            frame[col] = np.zeros(n)
        frame["wait_step_ns"] = np.full(n, np.nan)
        frame["steps"] = np.ones(n)
        return
    r = ranks.set_index(KEYS)
    wait = r["collective_wait_ns"].reindex(idx).to_numpy(np.float64)
    count = r["collectives"].reindex(idx).fillna(0).to_numpy(np.float64) if "collectives" in r else np.zeros(n)
    steps = r["steps"].reindex(idx).fillna(0).to_numpy(np.float64) if "steps" in r else np.zeros(n)
    steps = np.maximum(steps, 1.0)
    joined = (count > 0) & np.isfinite(wait)
    per_step = np.where(joined, np.nan_to_num(wait) / steps, np.nan)
    med = float(np.nanmedian(per_step)) if joined.any() else 0.0
    held_step = np.where(joined, med - np.nan_to_num(per_step), 0.0)
    frame["steps"] = steps
    frame["wait_step_ns"] = per_step
    frame["held_step_ns"] = held_step
    frame["held_ns"] = held_step * steps
    frame["held_share"] = held_step / step_med if step_med > 0 else np.zeros(n)
    z = np.zeros(n)
    if joined.sum() >= 2:
        z[joined] = peer_z(held_step[joined], floor=HELD_FLOOR * step_med)
    frame["held_z"] = z


def _gpu_signal(frame: pd.DataFrame, slow: pd.DataFrame | None, idx: pd.MultiIndex) -> None:
    """Signal (e) into ``frame``: the ``gpu_slowness`` table's values per rank (1, 0 without it)."""
    n = len(idx)
    cols = {
        "gpu_slowdown": 1.0,
        "gpu_median_slowdown": 1.0,
        "gpu_min_slowdown": 1.0,
        "gpu_slowdown_z": 0.0,
        "gpu_slower_share": 0.0,
        "gpu_worst_op": "",
        "gpu_worst_ratio": np.nan,
    }
    src = {
        "gpu_median_slowdown": "median_slowdown",
        "gpu_min_slowdown": "min_slowdown",
        "gpu_slower_share": "slower_share",
        "gpu_worst_op": "worst_op",
        "gpu_worst_ratio": "worst_ratio",
    }
    g = None
    if slow is not None and len(slow) and set(KEYS) <= set(slow.columns):
        g = slow.drop_duplicates(KEYS).set_index(KEYS).reindex(idx)
    for col, fill in cols.items():
        name = src.get(col, col)
        if g is not None and name in g.columns:
            frame[col] = g[name].fillna(fill).to_numpy(object if isinstance(fill, str) else np.float64)
        else:
            frame[col] = np.full(n, fill, dtype=object if isinstance(fill, str) else np.float64)


# -- evidence text ---------------------------------------------------------------------------

_PLURAL = {
    "all_reduce": "all-reduces",
    "all_gather": "all-gathers",
    "reduce_scatter": "reduce-scatters",
    "all_to_all": "all-to-alls",
    "send_recv": "send/recvs",
    "broadcast": "broadcasts",
    "send": "sends",
    "recv": "recvs",
    "reduce": "reduces",
    "barrier": "barriers",
}


def _plural(op: str) -> str:
    return _PLURAL.get(op, f"{op} collectives")


def _pg(group: str) -> str:
    return group if group.startswith("stream ") else f"pg {group}"


class _Evidence:
    """Builds the evidence sentences of one rank from :class:`Signals` (lookups prepared once)."""

    def __init__(self, sig: Signals) -> None:
        self.sig = sig
        self.top = sig.top_last.set_index(KEYS) if len(sig.top_last) else None
        cs = sig.class_slowdown
        self._cls = cs.assign(extra=cs["own_ns"] - cs["ref_ns"]).set_index(KEYS).sort_index() if len(cs) else None
        self.group_ratio = (
            sig.group_slowness.set_index("key")["ratio"] if len(sig.group_slowness) else pd.Series(dtype="float64")
        )
        self.group_info = sig.group_slowness.set_index("key") if len(sig.group_slowness) else None
        self._members = sig.membership.set_index(KEYS).sort_index() if len(sig.membership) else None
        oo = sig.op_outliers
        self.ops = {}
        if len(oo) and {"rank", "device", "op", "ratio"} <= set(oo.columns):
            if "comm" in oo.columns:  # a collective's time includes waiting for others: no evidence
                oo = oo.loc[~oo["comm"].to_numpy(bool)]
            best = oo.sort_values("ratio", ascending=False, kind="stable").drop_duplicates(KEYS)
            self.ops = {
                (int(r), int(d)): (str(o), float(x))
                for r, d, o, x in best[["rank", "device", "op", "ratio"]].itertuples(index=False)
            }
        w = sig.ranks["wait_step_ns"].to_numpy(np.float64)
        self.median_wait_step = float(np.nanmedian(w)) if np.isfinite(w).any() else 0.0

    def members(self, key: tuple[int, int]) -> list[str]:
        """The compared process groups containing (rank, device)."""
        if self._members is None or key not in self._members.index:
            return []
        groups: list[str] = self._members.loc[[key], "group"].tolist()  # pandas is untyped here
        return groups

    def classes(self, key: tuple[int, int]) -> pd.DataFrame | None:
        if self._cls is None or key not in self._cls.index:
            return None
        return self._cls.loc[[key]].reset_index(drop=True)

    def arrival(self, row: dict[str, Any]) -> str:
        key = (row["rank"], row["device"])
        n, last = int(row["collectives"]), int(row["arrived_last"])
        if n == 0:
            return ""
        text = f"arrived last at {100 * last / n:.0f} % of its {n} collectives"
        if self.top is not None and key in self.top.index:
            t = self.top.loc[key]
            if int(t["last"]) > 0:
                text = (
                    f"arrived last at {100 * t['last'] / t['instances']:.0f} % of {int(t['instances'])} "
                    f"{_plural(str(t['op']))} on {_pg(str(t['group']))}"
                )
                if int(t["instances"]) < n:
                    text += f" ({100 * last / n:.0f} % of all its {n} collectives)"
        return text + f", making the others wait {fmt_time(row['wait_caused_ns'], trim=True)} in total"

    def kernels(self, row: dict[str, Any]) -> str:
        overall = float(row["compute_slowdown"])
        g = self.classes((row["rank"], row["device"]))
        if g is None or not len(g):
            return f"its compute kernels run {overall:.2f}× the median rank"
        pick = g.loc[g["extra"].idxmax()] if overall > 1 else g.loc[g["ref_ns"].idxmax()]
        cname = str(pick["class"])
        label = "compute" if cname in ("compute", "", "nan") else cname
        text = f"its {label} kernels run {float(pick['slowdown']):.2f}× the median rank"
        if label != "compute" and len(g) > 1:
            text += f" (all compute kernels {overall:.2f}×)"
        return text

    def held(self, row: dict[str, Any], threshold: float) -> str:
        per_step = float(row["held_step_ns"])
        own = float(row["wait_step_ns"])
        return (
            f"held the others back {fmt_time(per_step, trim=True)} per step ({100 * float(row['held_share']):.1f} % of "
            f"the median step; {fmt_time(float(row['held_ns']), trim=True)} in all): it waited "
            f"{fmt_time(max(own, 0.0), trim=True)} per step in collectives against {fmt_time(self.median_wait_step, trim=True)} "
            f"for the median rank (z {float(row['held_z']):+.1f}, threshold {threshold:.1f} at {len(self.sig.ranks):,} ranks)"
        )

    def step(self, row: dict[str, Any]) -> str:
        return (
            f"its median step takes {fmt_time(row['step_ns'], trim=True)}, {float(row['step_ratio']):.2f}× the median "
            f"rank (z {float(row['step_z']):+.1f})"
        )

    def link(self, row: dict[str, Any]) -> str:
        groups = self.members((row["rank"], row["device"]))
        parts = []
        if self.group_info is not None:
            info = self.group_info.reindex(groups).dropna(subset=["ratio"]).sort_values("ratio", ascending=False)
            parts = [
                f"{_pg(str(g))} {op} {ratio:.2f}×"
                for g, op, ratio in info[["group", "op", "ratio"]].itertuples(index=False)
            ][:4]
        text = (
            f"collectives of the {len(groups)} process groups containing it transfer "
            f"{float(row['link_ratio']):.2f}× slower than comparable groups"
        )
        if parts:
            text += " (" + ", ".join(parts) + ")"
        return text + ", and it is the rank common to the slow groups: check its links (NVLink, NIC, switch port)"

    def gpu(self, row: dict[str, Any]) -> str:
        text = (
            f"its GPU runs the modelled ops {float(row['gpu_slowdown']):.2f}× the median rank's time at equal op, "
            f"shapes and dtypes ({100 * float(row['gpu_slower_share']):.0f} % of the compared op time in slower shapes"
        )
        if row["gpu_worst_op"]:
            text += f"; most lost in {row['gpu_worst_op']}, {float(row['gpu_worst_ratio']):.2f}×"
        return text + "): check its clocks, power and thermals"

    def op_outlier(self, row: dict[str, Any]) -> str:
        o = self.ops.get((int(row["rank"]), int(row["device"])))
        return f"host op {o[0]} takes {o[1]:.2f}× the median rank" if o else ""


# -- methods ---------------------------------------------------------------------------------


def _shares_slow_group(r: tuple[int, int], f: tuple[int, int], ev: _Evidence) -> bool:
    a, b = set(ev.members(r)), set(ev.members(f))
    common = a & b
    return any(float(ev.group_ratio.get(g, 1.0)) >= 1.05 for g in common)


def _output(sig: Signals, method: str, decided: dict[str, Any]) -> pd.DataFrame:
    """The ``stragglers`` table: the method's ``decided`` columns (score, flagged, evidence, ...),
    every other output column the signal's value in its declared dtype; sorted by score."""
    decided = {"method": method, **decided}
    if "explained_by" in decided:
        decided["explained_by"] = missing_if_negative(decided["explained_by"])
    n = len(sig.ranks)
    out = pd.DataFrame(
        {
            name: decided[name]
            if name in decided
            else sig.ranks[name].to_numpy(dtype)
            if name in sig.ranks
            else np.full(n, "" if dtype is object else 0, dtype=dtype if dtype != "Int64" else "float64")
            for name, dtype in OUTPUT_COLUMNS.items()
        }
    )
    out = out.sort_values(["score", "rank"], ascending=[False, True], kind="stable")
    return out.reset_index(drop=True)


Key = tuple[int, int]  # (rank, device)


@dataclass
class _PerSignal:
    """One array per signal, in the row order of :attr:`Signals.ranks` (see the module docstring)."""

    held: np.ndarray  # (f) held the others back: waited least in collectives
    kernels: np.ndarray  # (b) slow compute kernels
    step: np.ndarray  # (c) slow steps
    link: np.ndarray  # (d) slow links
    gpu: np.ndarray  # (e) slow GPU (modelled ops at equal shapes)


def _strengths(ranks: pd.DataFrame, threshold: float) -> _PerSignal:
    """Each signal's strength ``max(0, z) / threshold``: 1 at the flagging threshold."""

    def strength(z_column: str) -> np.ndarray:
        return cast(np.ndarray, np.maximum(ranks[z_column].to_numpy(np.float64), 0) / threshold)

    return _PerSignal(
        strength("held_z"),
        strength("compute_slowdown_z"),
        strength("step_z"),
        strength("link_z"),
        strength("gpu_slowdown_z"),
    )


def _gates(ranks: pd.DataFrame, strength: _PerSignal) -> _PerSignal:
    """Which signals each rank passes: strong (strength ≥ 1, its z-score at the threshold for the
    number of ranks compared) and material.

    Material means: (f) it held the others back at least :data:`MIN_HELD_SHARE` of the median
    step per step; (b) its compute kernels are :data:`MIN_SLOWDOWN` slower; (c) its steps are
    :data:`MIN_STEP_RATIO` longer; (d) its links are :data:`MIN_LINK_RATIO` slower and stand out
    from every rank sharing a group with it (margin at least half its excess); (e) its modelled
    ops are :data:`MIN_GPU_SLOWDOWN` slower, most of the compared time (:data:`MIN_SLOWER_SHARE`)
    in slower (op, shapes).
    """
    held = (strength.held >= 1) & (ranks["held_share"].to_numpy(np.float64) >= MIN_HELD_SHARE)
    kernels = (strength.kernels >= 1) & (ranks["compute_slowdown"].to_numpy() >= MIN_SLOWDOWN)
    step = (strength.step >= 1) & (ranks["step_ratio"].to_numpy() >= MIN_STEP_RATIO)
    link = (
        (strength.link >= 1)
        & (ranks["link_ratio"].to_numpy() >= MIN_LINK_RATIO)
        & (ranks["link_margin"].to_numpy() >= 0.5 * ranks["link_excess"].to_numpy())
    )
    gpu = (
        (strength.gpu >= 1)
        & (ranks["gpu_slowdown"].to_numpy() >= MIN_GPU_SLOWDOWN)
        & (ranks["gpu_slower_share"].to_numpy() >= MIN_SLOWER_SHARE)
    )
    return _PerSignal(held, kernels, step, link, gpu)


def _waits_on(waited_for: pd.DataFrame, candidates: set[Key]) -> dict[tuple[Key, Key], float]:
    """``wait_ns`` of every (waiting rank, candidate it waited for) pair of :attr:`Signals.waited_for`."""
    if not len(waited_for) or not candidates:
        return {}
    last = pd.MultiIndex.from_arrays([waited_for["last_rank"], waited_for["last_device"]])
    on_candidate = waited_for.loc[last.isin(list(candidates))]
    columns = ["rank", "device", "last_rank", "last_device", "wait_ns"]
    return {
        ((int(rank), int(device)), (int(last_rank), int(last_device))): float(wait_ns)
        for rank, device, last_rank, last_device, wait_ns in on_candidate[columns].itertuples(index=False)
    }


def _explain_away(sig: Signals, gate: _PerSignal, ev: _Evidence) -> tuple[np.ndarray, np.ndarray]:
    """Candidates without intrinsic evidence ((b), (d), (e)) whose signal another candidate explains.

    (f) A rank that waited for a candidate that held the others back more than it did, at least
    :data:`EXPLAIN_FRACTION` of the time it held them back itself, is a victim of that candidate: a long stall on one rank reshuffles the waits of the
    others (the members of its groups are released together and wait differently at the next
    collectives), by a fraction of the stall; a rank that shares a slow group with a slow-link
    suspect arrives late at its other groups' collectives because of that link. (c) A long step, in a job whose ranks are not all
    synchronised, follows from the candidate ``f`` the rank waited for the longest, if that wait is
    at least :data:`EXPLAIN_FRACTION` of the time the rank later delayed others and ``f`` did not
    wait as much for it; failing that, from a slow-link suspect it shares a slow group with.

    Returns
    -------
    explained_by : numpy.ndarray
        Per rank, the rank its signal follows from (-1: none).
    by_link : numpy.ndarray
        Per rank, whether that is through a shared slow link.
    """
    ranks = sig.ranks
    keys: list[Key] = list(zip(ranks["rank"].to_numpy().tolist(), ranks["device"].to_numpy().tolist()))
    position = {k: i for i, k in enumerate(keys)}
    candidate_rows = np.flatnonzero(gate.held | gate.kernels | gate.step | gate.link | gate.gpu)
    candidates = {keys[i] for i in candidate_rows}
    waits = _waits_on(sig.waited_for, candidates)
    late_ns = ranks["late_ns"].to_numpy(np.float64)
    held_ns = ranks["held_ns"].to_numpy(np.float64)
    link_suspects = [keys[i] for i in np.flatnonzero(gate.link)]
    explained_by = np.full(len(ranks), -1, np.int64)
    by_link = np.zeros(len(ranks), bool)
    for i in candidate_rows:
        if gate.kernels[i] or gate.link[i] or gate.gpu[i]:
            continue
        me = keys[i]
        if gate.held[i]:
            source = _victim_of(me, candidates, waits, held_ns, position)
        else:
            source = _waited_longest_for(me, candidates, waits, late_ns[i], late_ns, position)
        if source is None:
            source = next((x for x in link_suspects if x != me and _shares_slow_group(me, x, ev)), None)
            by_link[i] = source is not None
        if source is not None:
            explained_by[i] = source[0]
    return explained_by, by_link


def _victim_of(
    me: Key, candidates: set[Key], waits: dict[tuple[Key, Key], float], held_ns: np.ndarray, position: dict[Key, int]
) -> Key | None:
    """The candidate that held the others back more than ``me`` and that ``me`` waited for at least
    :data:`EXPLAIN_FRACTION` of the time it held the others back itself (the longest such wait)."""
    mine = held_ns[position[me]]
    source, source_wait = None, 0.0
    for other in candidates:
        wait = waits.get((me, other), 0.0)
        if other != me and held_ns[position[other]] > mine and wait >= EXPLAIN_FRACTION * mine and wait > source_wait:
            source, source_wait = other, wait
    return source


def _waited_longest_for(
    me: Key,
    candidates: set[Key],
    waits: dict[tuple[Key, Key], float],
    my_late: float,
    late_ns: np.ndarray,
    position: dict[Key, int],
) -> Key | None:
    """The candidate ``me`` waited for the longest, if that wait is at least
    :data:`EXPLAIN_FRACTION` of its own lateness and the other did not wait as much for ``me``."""
    source, source_wait = None, 0.0
    for other in candidates:
        if other == me:
            continue
        wait = waits.get((me, other), 0.0)
        wait_back = waits.get((other, me), 0.0)
        inherits = wait >= EXPLAIN_FRACTION * max(my_late, 1.0)
        mutual = wait_back >= EXPLAIN_FRACTION * max(late_ns[position[other]], 1.0)
        if inherits and not mutual and wait > source_wait:
            source, source_wait = other, wait
    return source


@dataclass
class _Verdict:
    """The robust method's decision for every rank (rows of :attr:`Signals.ranks`)."""

    gate: _PerSignal
    flagged: np.ndarray
    explained_by: np.ndarray
    by_link: np.ndarray
    threshold: float
    cause: np.ndarray = field(default_factory=lambda: np.zeros(0, object))
    cause_ns: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cause_text: list[str] = field(default_factory=list)


def _causes(sig: Signals, v: _Verdict) -> None:
    """One cause per flagged rank (:mod:`.causes`), its time per step and its sentence."""
    n = len(sig.ranks)
    v.cause, v.cause_ns, v.cause_text = np.full(n, "", object), np.full(n, np.nan), [""] * n
    for i in np.flatnonzero(v.flagged):
        gpu = bool(v.gate.kernels[i] or v.gate.gpu[i])
        cause, amount, text = causes.attribute(
            sig.ranks, sig.excess, int(i), link=bool(v.gate.link[i]), gpu=gpu, held=bool(v.gate.held[i])
        )
        v.cause[i], v.cause_ns[i], v.cause_text[i] = cause, amount, text


def _evidence_texts(ranks: pd.DataFrame, v: _Verdict, ev: _Evidence) -> tuple[list[str], list[str]]:
    """Per rank, the evidence sentence and the signals it passed (``"f,b"``)."""
    inherited = v.explained_by >= 0
    evidence, signals = [], []
    for i, row in enumerate(ranks.to_dict("records")):
        parts, passed = _signal_evidence(i, row, v, ev)
        if inherited[i]:
            how = "the slow link at that rank" if v.by_link[i] else "waiting for it"
            parts.append(f"not a root cause: this follows from rank {int(v.explained_by[i])} ({how})")
        op = ev.op_outlier(row)
        if op and parts:
            parts.append(op)
        if not parts:
            parts.append(_quiet(row, v.threshold))
        evidence.append(f"rank {int(row['rank'])} " + "; ".join(p for p in parts if p))
        signals.append(",".join(passed))
    return evidence, signals


def _signal_evidence(i: int, row: dict[str, Any], v: _Verdict, ev: _Evidence) -> tuple[list[str], list[str]]:
    """The sentences of the signals rank ``i`` passed, its cause, and their letters."""
    parts, passed = [], []
    gate = v.gate
    if gate.held[i]:
        parts.append(ev.held(row, v.threshold))
        passed.append("f")
    if v.flagged[i] and v.cause_text[i]:
        parts.append(v.cause_text[i])
    if v.flagged[i] and row["arrived_last"] > 0 and gate.held[i]:
        parts.append(ev.arrival(row))
    if gate.kernels[i]:
        parts.append(ev.kernels(row))
        passed.append("b")
    for on, text, letter in ((gate.step, ev.step, "c"), (gate.link, ev.link, "d"), (gate.gpu, ev.gpu, "e")):
        if on[i]:
            parts.append(text(row))
            passed.append(letter)
    return parts, passed


@register_method("robust")
def robust_method(sig: Signals, options: Options) -> pd.DataFrame:
    """One straggler model for every fault kind (module docstring).

    Phases: each signal's strength against the threshold for the number of ranks
    (:func:`_strengths`, :func:`~.ranks.z_threshold`) and gate (:func:`_gates`), long steps
    another candidate explains (:func:`_explain_away`), then flag, cause (:mod:`.causes`), score
    and evidence.
    """
    ranks = sig.ranks
    threshold = z_threshold(len(ranks), Z_FLAG)
    strength = _strengths(ranks, threshold)
    gate = _gates(ranks, strength)
    ev = _Evidence(sig)
    explained_by, by_link = _explain_away(sig, gate, ev)
    inherited = explained_by >= 0
    flagged = gate.kernels | gate.link | gate.gpu | ((gate.held | gate.step) & ~inherited)
    v = _Verdict(gate, flagged, explained_by, by_link, threshold)
    _causes(sig, v)
    score = (
        np.where(inherited, 0.25, 1.0) * (strength.held + strength.step)
        + strength.kernels
        + strength.link
        + strength.gpu
    )
    evidence, signals = _evidence_texts(ranks, v, ev)
    return _output(
        sig,
        "robust",
        {
            "score": score.astype(np.float64),
            "flagged": flagged.astype(bool),
            "cause": v.cause,
            "cause_ns": pd.array(
                np.where(np.isfinite(v.cause_ns), np.rint(v.cause_ns), np.nan), dtype="Float64"
            ).astype("Int64"),
            "evidence": evidence,
            "signals": signals,
            "explained_by": explained_by,
            "z_threshold": np.full(len(ranks), threshold),
        },
    )


def _quiet(row: dict[str, Any], threshold: float) -> str:
    return (
        f"shows no straggler signal (waited {fmt_time(max(-float(row['held_step_ns']), 0.0), trim=True)} more per step "
        f"than the median rank in collectives, held z {float(row['held_z']):+.1f} of {threshold:.1f}; "
        f"compute kernels {float(row['compute_slowdown']):.2f}× the median rank, step z {float(row['step_z']):+.1f})"
        if float(row["held_step_ns"]) < 0
        else f"shows no straggler signal (held the others back {fmt_time(float(row['held_step_ns']), trim=True)} per "
        f"step, held z {float(row['held_z']):+.1f} of {threshold:.1f}; compute kernels "
        f"{float(row['compute_slowdown']):.2f}× the median rank, step z {float(row['step_z']):+.1f})"
    )


@register_method("late_start")
def late_start_method(sig: Signals, options: Options) -> pd.DataFrame:
    """HTA-style: ranks whose collectives start late relative to the other members."""
    r = sig.ranks
    lag = r["start_lag_ns"].to_numpy(np.float64)
    step_med = float(np.median(r["step_ns"])) if len(r) else 0.0
    threshold = z_threshold(len(r), Z_FLAG)
    z = peer_z(lag, floor=max(1.0, 0.001 * step_med))
    flagged = (z >= threshold) & (lag >= 0.01 * step_med)
    score = np.maximum(z, 0) / threshold
    evidence = [
        f"rank {int(k)} reaches its collectives {fmt_time(v, trim=True)} later than the median member on average, "
        f"counted from its previous collective's end (z {zz:+.1f})"
        for k, v, zz in zip(r["rank"].to_numpy(), lag, z)
    ]
    return _output(
        sig,
        "late_start",
        {
            "score": score,
            "flagged": flagged,
            "cause": np.where(flagged, "late", ""),
            "evidence": evidence,
            "signals": ["a" if f else "" for f in flagged],
            "explained_by": np.full(len(r), -1),
            "z_threshold": np.full(len(r), threshold),
        },
    )


def reduce_stragglers(tables: dict[str, pd.DataFrame], options: Options) -> dict[str, pd.DataFrame]:
    """The ``stragglers`` table, one row per (rank, device), sorted by score (highest first)."""
    check_method(options.straggler_method)
    sig = compute_signals(tables)
    if not len(sig.ranks):
        return {"stragglers": empty_frame(OUTPUT_COLUMNS)}
    return {"stragglers": METHODS[options.straggler_method](sig, options)}
