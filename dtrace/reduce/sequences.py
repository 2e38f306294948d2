"""Kernel sequences across ranks: ``kernel_sequences_xrank``, one row per (op, sequence).

From the per-part ``kernel_sequences`` table (:mod:`dtrace.analyses.sequences`): over the
(rank, device) parts where a top-level op launched a sequence, ``parts``, the total ``count``
and its spread per part (``median_count``, ``min_count``, ``max_count``), the summed
``gpu_ns``, ``span_ns`` and ``host_ns``, the median part's ``gpu_ns`` (``median_gpu_ns``) and
the part with the most GPU time in it (``max_rank``, ``max_device``). Sorted by ``count``
(largest first), then ``gpu_ns`` (largest first), op and sequence: the sequences a job runs most
often come first, as HTA sorts its patterns.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.dtypes import conform, empty_frame, text_column
from ..options import Options
from ..vector.groups import I64, count_by, dense_codes, lexsort_ints, max_by, min_by, quantile_by, sum_by, unique_first

Tables = dict[str, pd.DataFrame]

XRANK_COLUMNS = {
    "op": "object",
    "sequence": "object",
    "length": "int64",
    "parts": "int64",
    "count": "int64",
    "median_count": "float64",
    "min_count": "int64",
    "max_count": "int64",
    "gpu_ns": "int64",
    "median_gpu_ns": "int64",
    "span_ns": "int64",
    "host_ns": "int64",
    "max_rank": "int32",
    "max_device": "int32",
}
"""Declared columns of ``kernel_sequences_xrank``."""


def kernel_sequences_xrank(tables: Tables, options: Options) -> Tables:
    """Cross-rank aggregates of ``kernel_sequences`` (see the module docstring): one factorisation
    of the op and sequence texts, then numpy per (op, sequence)."""
    seqs = tables.get("kernel_sequences")
    if seqs is None or not len(seqs):
        return {"kernel_sequences_xrank": empty_frame(XRANK_COLUMNS)}
    op_code, ops = _sorted_codes(seqs["op"])
    seq_code, texts = _sorted_codes(seqs["sequence"])
    key, n = dense_codes(op_code, seq_code)
    first = unique_first(key)[1]
    count, gpu = seqs["count"].to_numpy(I64), seqs["gpu_ns"].to_numpy(I64)
    at_max = lexsort_ints((np.arange(key.size), -gpu, key))[np.r_[0, np.cumsum(count_by(key, n))[:-1]]]
    total, total_gpu = sum_by(key, count, n), sum_by(key, gpu, n)
    med_count, med_gpu = quantile_by(key, count, n, 0.5), quantile_by(key, gpu, n, 0.5)
    order = lexsort_ints((seq_code[first], op_code[first], -total_gpu, -total))  # texts sorted: codes in text order
    out = pd.DataFrame(
        {
            "op": text_column(np.asarray(ops, object), op_code[first][order]),
            "sequence": text_column(np.asarray(texts, object), seq_code[first][order]),
            "length": seqs["length"].to_numpy(I64)[first][order],
            "parts": count_by(key, n)[order],
            "count": total[order],
            "median_count": med_count[order],
            "min_count": min_by(key, count, n, int(np.iinfo(np.int64).max))[order],
            "max_count": max_by(key, count, n, 0)[order],
            "gpu_ns": total_gpu[order],
            "median_gpu_ns": med_gpu[order],
            "span_ns": sum_by(key, seqs["span_ns"].to_numpy(I64), n)[order],
            "host_ns": sum_by(key, seqs["host_ns"].to_numpy(I64), n)[order],
            "max_rank": seqs["rank"].to_numpy(np.int32)[at_max][order],
            "max_device": seqs["device"].to_numpy(np.int32)[at_max][order],
        }
    )
    return {"kernel_sequences_xrank": conform(out, XRANK_COLUMNS, "kernel_sequences_xrank")}


def _sorted_codes(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Codes of a text column in the order of its sorted distinct values, and those values. The
    column is hashed as it is (Arrow strings in C++: sequences are kilobytes long, and as Python
    objects with a sort they took 110 ms of 10,000 rows), then only the few distinct texts sorted.

    Examples
    --------
    >>> codes, texts = _sorted_codes(pd.Series(["b", "a", "b", None]))
    >>> codes.tolist(), texts.tolist()
    ([2, 1, 2, 0], ['', 'a', 'b'])
    """
    codes, uniques = pd.factorize(col.fillna(""), sort=False)
    texts = np.asarray(uniques, dtype=object)
    order = np.argsort(texts, kind="stable")
    rank = np.empty(order.size, I64)
    rank[order] = np.arange(order.size, dtype=I64)
    return rank[codes], texts[order]
