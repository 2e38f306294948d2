"""Kernel statistics, kernel classes and per-collective (NCCL) statistics per (rank, device).

SPEC §4 "Kernel statistics and classes". Only GPU activity counts (kernel, memcpy and memset
events on the device); runtime/driver launch calls are host events and never appear here.

Notes on the algorithm: events are grouped by their name's dictionary code, never by string.
Counts and totals are ``bincount`` s over the codes; the median, min and max come from one
``lexsort`` by (code, duration), which leaves each name's durations as a sorted run whose
ends and middle are read by index; the standard deviation is the sample one (``ddof=1``, as
``nsys stats`` and the GPU Kernel Analyzer report it; 0 for a single event). The class of each
distinct name comes from :mod:`dtrace.knowledge.classify`.

Per-iteration figures divide by :func:`iterations`: the ``iters`` option when given, else the
number of steps found in the part (one with a step filter), else 1.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from dtrace.knowledge.classify import Classifier, classifier_for, collective_label
from ..prepare import PartData

KERNEL_COLUMNS = ["rank", "device", "name", "category", "kind", "class", "count", "total_ns", "mean_ns",
                  "median_ns", "min_ns", "max_ns", "std_ns", "time_share", "count_share", "iters",
                  "count_per_iter", "total_per_iter_ns"]
CLASS_COLUMNS = ["rank", "device", "class", "classifier", "count", "total_ns", "mean_ns", "kernels",
                 "time_share", "count_share", "iters", "count_per_iter", "total_per_iter_ns"]
NCCL_COLUMNS = ["rank", "device", "collective", "count", "total_ns", "mean_ns", "time_share", "iters",
                "count_per_iter", "total_per_iter_ns"]


def iterations(part: PartData) -> int:
    """The divisor of per-iteration figures: ``iters`` option, else steps found, else 1."""
    if part.options.iters:
        return int(part.options.iters)
    return max(len(part.steps), 1)


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: [] for c in columns})


def _codes(part: PartData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Name codes (compacted to names present), the distinct names, and durations."""
    g = part.gpu
    names = g["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names.astype("category")
    codes = names.cat.codes.to_numpy().astype(np.int64)
    cats = names.cat.categories.to_numpy(dtype=object)
    present = np.bincount(codes, minlength=len(cats)) > 0
    if not present.all():  # a step filter leaves unused categories behind
        remap = np.cumsum(present) - 1
        codes = remap[codes]
        cats = cats[present]
    dur = (g["end_ns"].to_numpy() - g["start_ns"].to_numpy()).astype(np.int64)
    return codes, cats, dur


def _sort_by_code_then_duration(codes: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """``np.lexsort((dur, codes))``, as one argsort of a combined key when it fits in int64."""
    span = int(dur.max()) + 1 if len(dur) else 1
    if len(dur) and int(dur.min()) >= 0 and (int(codes.max()) + 1) * span < 2 ** 62:
        return np.argsort(codes * span + dur)
    return np.lexsort((dur, codes))


def _collective_codes(part: PartData) -> tuple[np.ndarray, np.ndarray]:
    """Per GPU event: code of the collective its side-table row states (0: none), and the labels."""
    g, side = part.gpu, part.collectives
    if not len(side) or "collective" not in side.columns:
        return np.zeros(len(g), np.int64), np.array([""], object)
    side = side.drop_duplicates("row")
    pos = pd.Index(side["row"].to_numpy(np.int64)).get_indexer(g["row"].to_numpy(np.int64))
    codes, labels = pd.factorize(side["collective"].astype(str).to_numpy(object))
    out = np.where(pos >= 0, codes[np.maximum(pos, 0)] + 1, 0).astype(np.int64)
    return out, np.r_[np.array([""], object), np.asarray(labels, object)]


def _per_name(part: PartData, full: bool, by_collective: bool = False) -> tuple[pd.DataFrame, Classifier]:
    """One row per distinct name (and, with ``by_collective``, per collective its args state):
    kind, category, class, count, total (and, if ``full``, the mean, median, min, max and sample
    std of the durations)."""
    codes, names, dur = _codes(part)
    coll = np.array([""], object)
    if by_collective:
        ccodes, coll = _collective_codes(part)
        pair, inv = np.unique(codes * len(coll) + ccodes, return_inverse=True)
        codes, names, coll = inv.reshape(-1), names[pair // len(coll)], coll[pair % len(coll)]
    k = len(names)
    count = np.bincount(codes, minlength=k).astype(np.int64)
    starts = np.concatenate(([0], np.cumsum(count)[:-1]))
    srt = _sort_by_code_then_duration(codes, dur) if full else np.argsort(codes, kind="stable")
    d = dur[srt]
    total = np.add.reduceat(d, starts)  # int64: exact, unlike float bincount weights
    first = srt[starts]  # one event of each name (kind and category follow from the name)
    g = part.gpu  # index first, convert after: string conversions of whole columns are slow
    kind = g["kind"].iloc[first].astype(str).to_numpy(dtype=object)
    category = g["category"].iloc[first].astype(str).to_numpy(dtype=object)
    classifier = classifier_for(part.options)
    cls = np.asarray(classifier.classify(names, kind, category,
                                         collectives=coll if by_collective else None), dtype=object)
    out = pd.DataFrame({"name": names, "category": category, "kind": kind, "class": cls,
                        "count": count, "total_ns": total.astype(np.int64)})
    if by_collective:
        out["collective"] = coll
    if full:
        mean = total / count
        out["mean_ns"] = mean
        out["median_ns"] = (d[starts + (count - 1) // 2] + d[starts + count // 2]) / 2.0
        out["min_ns"] = d[starts]
        out["max_ns"] = d[starts + count - 1]
        sq = np.bincount(codes, weights=(dur - mean[codes]) ** 2, minlength=k)
        out["std_ns"] = np.sqrt(np.divide(sq, count - 1, out=np.zeros(k), where=count > 1))
    return out, classifier


def _shares_and_iters(out: pd.DataFrame, part: PartData) -> pd.DataFrame:
    g = part.gpu
    total = float((g["end_ns"].to_numpy() - g["start_ns"].to_numpy()).sum()) or 1.0
    n = max(len(g), 1)
    it = iterations(part)
    out["time_share"] = out["total_ns"].to_numpy() / total
    out["count_share"] = out["count"].to_numpy() / n
    out["iters"] = np.int64(it)
    out["count_per_iter"] = out["count"].to_numpy() / it
    out["total_per_iter_ns"] = out["total_ns"].to_numpy() / it
    return out


def kernel_stats(part: PartData) -> pd.DataFrame:
    """The ``kernels`` table: one row per (rank, device, name), sorted by total time.

    Columns: category, kind, class, count, total/mean/median/min/max/std durations, the
    name's share of the part's GPU time and of its GPU events, and per-iteration count/time.
    """
    if not len(part.gpu):
        return _empty(KERNEL_COLUMNS)
    per, _ = _per_name(part, full=True)
    per.insert(0, "rank", np.int32(part.rank))
    per.insert(1, "device", np.int32(part.device))
    out = _shares_and_iters(per, part)[KERNEL_COLUMNS]
    return out.sort_values(["total_ns", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)


def class_stats(part: PartData) -> pd.DataFrame:
    """The ``classes`` table: one row per (rank, device, class) with count, total time,
    number of distinct kernel names, shares and per-iteration figures."""
    if not len(part.gpu):
        return _empty(CLASS_COLUMNS)
    per, classifier = _per_name(part, full=False, by_collective=True)
    grp = per.groupby("class", sort=True)
    out = pd.DataFrame({"count": grp["count"].sum(), "total_ns": grp["total_ns"].sum(),
                        "kernels": grp["name"].nunique()}).reset_index()
    out["mean_ns"] = out["total_ns"] / out["count"]
    out.insert(0, "rank", np.int32(part.rank))
    out.insert(1, "device", np.int32(part.device))
    out["classifier"] = classifier.label
    out = _shares_and_iters(out, part)[CLASS_COLUMNS]
    return out.sort_values(["total_ns", "class"], ascending=[False, True], kind="stable").reset_index(drop=True)


def nccl_stats(part: PartData) -> pd.DataFrame:
    """The ``nccl`` table: communication kernels per (rank, device, collective).

    The collective is the GPU Performance Analyser's label (``AllGather``, ``SendRecv``, ...:
    see :func:`dtrace.knowledge.classify.collective_label`). Rows are the kernels of class ``nccl`` under
    a substring map, otherwise the kernels of category ``comm``.
    """
    if not len(part.gpu):
        return _empty(NCCL_COLUMNS)
    per, classifier = _per_name(part, full=False, by_collective=True)
    sel = classifier.is_nccl(per["class"].to_numpy(), per["category"].to_numpy())
    per = per.loc[sel]
    if not len(per):
        return _empty(NCCL_COLUMNS)
    labels = np.array([collective_label(n, c) for n, c in zip(per["name"], per["collective"])], dtype=object)
    per = per.drop(columns="collective")
    grp = per.assign(collective=labels).groupby("collective", sort=True)
    out = pd.DataFrame({"count": grp["count"].sum(), "total_ns": grp["total_ns"].sum()}).reset_index()
    out["mean_ns"] = out["total_ns"] / out["count"]
    out.insert(0, "rank", np.int32(part.rank))
    out.insert(1, "device", np.int32(part.device))
    out = _shares_and_iters(out, part)
    return out[NCCL_COLUMNS].sort_values(["total_ns", "collective"], ascending=[False, True],
                                         kind="stable").reset_index(drop=True)
