"""The ``ops`` table: GPU time per host op, per (rank, device, op name).

Built from the host → GPU forest of the partition (:mod:`dtrace.calltree`): host events nest
by time containment per (part, thread), launches link to GPU events of the same part by
correlation id.

Columns: ``count`` (instances), ``host_ns`` (sum of the instances' durations),
``gpu_direct_ns`` (union of the op's direct GPU events: those whose launcher op — the first
``cpu_op`` above the launch call — is an instance of this op), ``gpu_subtree_ns`` (union of
the GPU events anywhere below an instance), ``kernels`` and ``subtree_kernels`` (their
counts). Unions run over all instances of the name, so nested same-name ops and concurrent
kernels count once. GPU events are the part's (its device, after the analysis options:
step selection, ``linked_only``, stream-overlap clipping); with a step selected and host step
windows, only the op instances that start inside the step's window count.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..batch import Batch
from ..calltree import Tree
from ..groups import I64, max_by, min_by

COLUMNS = {"rank": "int32", "device": "int32", "op": "object", "count": "int64", "host_ns": "int64",
           "gpu_direct_ns": "int64", "gpu_subtree_ns": "int64", "kernels": "int64", "subtree_kernels": "int64"}
"""Declared output columns and dtypes."""


def ops(batch: Batch) -> pd.DataFrame:
    """Per op name of every part: count, host time, direct and subtree GPU time, kernels."""
    lo = hi = None
    steps = batch.steps
    if batch.options.step is not None and len(steps):
        # parts whose step windows are host windows keep the op instances inside them
        n = batch.n_parts
        host = (steps["source"] == "host").to_numpy(bool)
        sp = steps["part"].to_numpy(I64)
        all_host = np.bincount(sp[host], minlength=n) == np.bincount(sp, minlength=n)
        big = np.iinfo(np.int64).max
        lo = min_by(sp, steps["start_ns"].to_numpy(I64), n, big)
        hi = max_by(sp, steps["end_ns"].to_numpy(I64), n, -big - 1)
        has = all_host & (np.bincount(sp, minlength=n) > 0)
        lo, hi = np.where(has, lo, 1), np.where(has, hi, 0)  # lo > hi: the part keeps every op
    table = Tree.from_batch(batch).ops_by_part(lo, hi)
    keys = batch.keys(table["part"].to_numpy(I64))
    table.insert(0, "device", keys["device"])
    table.insert(0, "rank", keys["rank"])
    return table[list(COLUMNS)]
