"""Kernel statistics, kernel classes and per-collective (NCCL) statistics per (rank, device).

Only GPU activity counts (kernel, memcpy and memset events on the device); runtime/driver
launch calls are host events and never appear here.

Notes on the algorithm: events are grouped by (part, name code) — one dense pair code per
distinct name of each part, never a string per event. Counts and totals are ``bincount`` s and
``reduceat`` s over the pair codes; the median, min and max come from one sort by (pair,
duration), which leaves each pair's durations as a sorted run whose ends and middle are read by
index; the standard deviation is the sample one (``ddof=1``, as ``nsys stats`` and the GPU
Kernel Analyzer report it; 0 for a single event). The class of each distinct name comes from
:mod:`dtrace.knowledge.classify`, once per name.

Per-iteration figures divide by :meth:`dtrace.analyses.batch.Batch.iterations`: the ``iters`` option when
given, else the number of steps found in the part (one with a step filter), else 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..core.dtypes import empty_frame, text_column
from ..knowledge.classify import Classifier, classifier_for, collective_label
from ..vector.groups import I64, dense_codes, first_match, lexsort_ints, string_rank, sum_by, unique, unique_first
from .batch import Batch

KERNEL_COLUMNS = [
    "rank",
    "device",
    "name",
    "category",
    "kind",
    "class",
    "count",
    "total_ns",
    "mean_ns",
    "median_ns",
    "min_ns",
    "max_ns",
    "std_ns",
    "time_share",
    "count_share",
    "iters",
    "count_per_iter",
    "total_per_iter_ns",
]
CLASS_COLUMNS = [
    "rank",
    "device",
    "class",
    "classifier",
    "count",
    "total_ns",
    "mean_ns",
    "kernels",
    "time_share",
    "count_share",
    "iters",
    "count_per_iter",
    "total_per_iter_ns",
]
NCCL_COLUMNS = [
    "rank",
    "device",
    "collective",
    "count",
    "total_ns",
    "mean_ns",
    "time_share",
    "iters",
    "count_per_iter",
    "total_per_iter_ns",
]


def collective_codes(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """Per GPU event: the code of the collective its side-table row states (0: none), and the
    labels (label 0 is ``""``)."""
    g, side = batch.gpu, batch.collectives
    if not len(side) or "collective" not in side.columns:
        return np.zeros(len(g), I64), np.array([""], object)
    pos = first_match(
        (side["part"].to_numpy(I64), side["row"].to_numpy(I64)), (g["part"].to_numpy(I64), g["row"].to_numpy(I64))
    )
    codes, labels = pd.factorize(side["collective"].astype(str).to_numpy(object))
    out = np.where(pos >= 0, codes[np.maximum(pos, 0)] + 1, 0).astype(I64)
    return out, np.r_[np.array([""], object), np.asarray(labels, object)]


def per_name(batch: Batch, full: bool, by_collective: bool = False) -> tuple[pd.DataFrame, Classifier]:
    """One row per (part, distinct name) — and, with ``by_collective``, per collective the
    kernels' args state (one RCCL ``Generic`` kernel name runs every collective): part, name,
    kind, category, class, count, total (and, if ``full``, the mean, median, min, max and
    sample std of the durations)."""
    g = batch.gpu
    names = g["name"].array
    cats = np.asarray(names.categories, dtype=object)
    part = g["part"].to_numpy(I64)
    ccodes, clabels = collective_codes(batch) if by_collective else (np.zeros(len(g), I64), np.array([""], object))
    pair, k = dense_codes(part, np.asarray(names.codes, I64), ccodes)
    dur = g["end_ns"].to_numpy(I64) - g["start_ns"].to_numpy(I64)
    count = np.bincount(pair, minlength=k).astype(I64)
    starts = np.concatenate(([0], np.cumsum(count)[:-1])).astype(I64)
    srt = _sort_by_code_then_duration(pair, dur) if full else np.argsort(pair, kind="stable")
    d = dur[srt]
    total = np.add.reduceat(d, starts) if k else np.empty(0, I64)  # int64: exact
    first = srt[starts]  # one event of each pair (kind and category follow from the name)
    ncode = np.asarray(names.codes, I64)[first]
    kcode = np.asarray(g["kind"].array.codes, I64)[first]
    ccode = np.asarray(g["category"].array.codes, I64)[first]
    kind_lab, cat_lab = _texts(g["kind"]), _texts(g["category"])
    classifier = classifier_for(batch.options)
    # each distinct (name, kind, category, collective) classified once, not once per part
    triple, _ = dense_codes(ncode, kcode, ccode, ccodes[first])
    one = unique_first(triple)[1]
    cls = np.asarray(
        classifier.classify(
            cats[ncode[one]],
            kind_lab[kcode[one]],
            cat_lab[ccode[one]],
            collectives=clabels[ccodes[first][one]] if by_collective else None,
        ),
        dtype=object,
    )
    # the text columns built once per distinct value (dense codes: the distinct tuples are 0..m-1)
    out = pd.DataFrame(
        {
            "part": part[first],
            "name": text_column(cats, ncode),
            "category": text_column(cat_lab, ccode),
            "kind": text_column(kind_lab, kcode),
            "class": text_column(cls, triple),
            "count": count,
            "total_ns": total.astype(I64),
            "_rank": string_rank(cats)[ncode] if k else np.zeros(0, I64),  # the order of the names
        }
    )
    if by_collective:
        out["collective"] = text_column(clabels, ccodes[first])
    if full:
        mean = total / count
        out["mean_ns"] = mean
        out["median_ns"] = (d[starts + (count - 1) // 2] + d[starts + count // 2]) / 2.0
        out["min_ns"] = d[starts]
        out["max_ns"] = d[starts + count - 1]
        sq = np.bincount(pair, weights=(dur - mean[pair]) ** 2, minlength=k)
        out["std_ns"] = np.sqrt(np.divide(sq, count - 1, out=np.zeros(k), where=count > 1))
    return out, classifier


def _per_collective_name(batch: Batch) -> tuple[pd.DataFrame, Classifier]:
    """:func:`per_name` by collective without the duration statistics, once per batch (the
    ``classes`` and ``nccl`` tables share it: never mutate it)."""
    return batch.derived("kernels.per_collective_name", lambda b: per_name(b, full=False, by_collective=True))


def _texts(col: pd.Series) -> np.ndarray:
    """The categories of a categorical column as text (objects)."""
    return np.asarray(col.array.categories, dtype=object).astype(str).astype(object)


def _sort_by_code_then_duration(codes: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """``np.lexsort((dur, codes))``, as one argsort of a combined key when it fits in int64."""
    span = int(dur.max()) + 1 if len(dur) else 1
    if len(dur) and int(dur.min()) >= 0 and (int(codes.max()) + 1) * span < 2**62:
        return np.argsort(codes * span + dur)
    return lexsort_ints((dur, codes))


def _shares_and_iters(out: pd.DataFrame, batch: Batch) -> pd.DataFrame:
    """Shares of each row's part GPU time and events, and per-iteration figures."""
    g = batch.gpu
    n = batch.n_parts
    gp = g["part"].to_numpy(I64)
    part_time = sum_by(gp, g["end_ns"].to_numpy(I64) - g["start_ns"].to_numpy(I64), n).astype(np.float64)
    part_events = np.bincount(gp, minlength=n).astype(np.float64)
    p = out["part"].to_numpy(I64)
    it = batch.iterations()[p]
    out["time_share"] = out["total_ns"].to_numpy() / np.where(part_time > 0, part_time, 1.0)[p]
    out["count_share"] = out["count"].to_numpy() / np.maximum(part_events, 1.0)[p]
    out["iters"] = it.astype(I64)
    out["count_per_iter"] = out["count"].to_numpy() / it
    out["total_per_iter_ns"] = out["total_ns"].to_numpy() / it
    return out


def _finish(out: pd.DataFrame, batch: Batch, key: str, columns: list[str]) -> pd.DataFrame:
    """Keys, shares and the order of every per-part table: part, total descending, ``key``."""
    p = out["part"].to_numpy(I64)
    out = _shares_and_iters(out, batch)
    for col, v in reversed(list(batch.keys(p).items())):
        out.insert(0, col, v)
    rank = out["_rank"].to_numpy(I64) if "_rank" in out.columns else string_rank(out[key].array)
    order = lexsort_ints((rank, -out["total_ns"].to_numpy(I64), p))
    return out.iloc[order][columns].reset_index(drop=True)


def kernel_stats(batch: Batch) -> pd.DataFrame:
    """The ``kernels`` table: one row per (rank, device, name), sorted by total time per part.

    Columns: category, kind, class, count, total/mean/median/min/max/std durations, the
    name's share of the part's GPU time and of its GPU events, and per-iteration count/time.
    """
    if not len(batch.gpu):
        return empty_frame(KERNEL_COLUMNS)
    per, _ = per_name(batch, full=True)
    return _finish(per, batch, "name", KERNEL_COLUMNS)


def _grouped(per: pd.DataFrame, key: str, values: Any) -> tuple[pd.DataFrame, np.ndarray]:
    """Sum count and total over (part, ``values``) of per-name rows, and count the distinct names
    of each group; rows in (part, value) order."""
    part = per["part"].to_numpy(I64)
    vcode, distinct = pd.factorize(values)  # a text column's values: hashed by Arrow, no objects
    distinct = np.asarray(distinct, dtype=object)
    group, n = dense_codes(part, string_rank(distinct)[vcode] if len(vcode) else vcode.astype(I64))
    name_code, _ = pd.factorize(per["name"].array)
    width = max(int(name_code.max(initial=0)) + 1, 1)
    pairs = unique(group * width + name_code)  # distinct (group, name)
    first = unique_first(group)[1]
    count = sum_by(group, per["count"].to_numpy(I64), n)
    total = sum_by(group, per["total_ns"].to_numpy(I64), n)
    kernels = np.bincount(pairs // width, minlength=n).astype(I64) if n else np.zeros(0, I64)
    out = pd.DataFrame(
        {
            "part": part[first],
            key: text_column(distinct, vcode[first]),
            "_rank": string_rank(distinct)[vcode[first]] if n else np.zeros(0, I64),
            "count": count,
            "total_ns": total,
            "kernels": kernels,
        }
    )
    out["mean_ns"] = out["total_ns"] / out["count"]
    return out, kernels


def class_stats(batch: Batch) -> pd.DataFrame:
    """The ``classes`` table: one row per (rank, device, class) with count, total time,
    number of distinct kernel names, shares and per-iteration figures."""
    if not len(batch.gpu):
        return empty_frame(CLASS_COLUMNS)
    per, classifier = _per_collective_name(batch)
    out, _ = _grouped(per, "class", per["class"].array)
    out["classifier"] = classifier.label
    return _finish(out, batch, "class", CLASS_COLUMNS)


def nccl_stats(batch: Batch) -> pd.DataFrame:
    """The ``nccl`` table: communication kernels per (rank, device, collective).

    The collective is the GPU Performance Analyser's label (``AllGather``, ``SendRecv``, ...:
    see :func:`dtrace.knowledge.classify.collective_label`). Rows are the kernels of class ``nccl`` under
    a substring map, otherwise the kernels of category ``comm``.
    """
    if not len(batch.gpu):
        return empty_frame(NCCL_COLUMNS)
    per, classifier = _per_collective_name(batch)
    per = per.loc[classifier.is_nccl(per["class"].to_numpy(), per["category"].to_numpy())]
    if not len(per):
        return empty_frame(NCCL_COLUMNS)
    labels = np.array(
        [collective_label(str(n), str(c)) for n, c in zip(per["name"], per["collective"])], dtype=object
    )  # one per distinct (part, name, collective)
    out, _ = _grouped(per, "collective", labels)
    return _finish(out, batch, "collective", NCCL_COLUMNS)
