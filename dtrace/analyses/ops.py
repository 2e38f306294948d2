"""The ``ops`` table: GPU time per host op, per (rank, device, op name).

Built from the host → GPU forest of the partition (:mod:`dtrace.calltree`): host events nest
by time containment per (part, thread), launches link to GPU events of the same part by
correlation id.

Rows are *launchers*: every ``cpu_op`` name (``launcher_kind`` ``cpu_op``) and, for GPU work
launched outside every ``cpu_op`` — a top-level ``cudaGraphLaunch``/``hipGraphLaunch`` replaying
a CUDA/HIP graph (vLLM graph execution), a ``cudaLaunchKernel`` under a bare annotation — the
launch call itself, one row per call name (``launcher_kind`` ``runtime``; TraceLens counts the
runtime launch as the launcher op the same way). So every GPU event linked to a launch call is
the direct event of exactly one row, and no GPU time is left out of the table.

Columns: ``launcher_kind``, ``count`` (instances), ``host_ns`` (sum of the instances'
durations), ``gpu_direct_ns`` (union of the op's direct GPU events: those whose launcher — the
first ``cpu_op`` above the launch call, else the launch call — is an instance of this row),
``gpu_subtree_ns`` (union of the GPU events anywhere below an instance; for a ``runtime`` row
its direct events), ``kernels`` and ``subtree_kernels`` (their counts). Unions run over all instances of the name, so nested same-name ops and concurrent
kernels count once. GPU events are the part's (its device, after the analysis options:
step selection, ``linked_only``, stream-overlap clipping); with a step selected and host step
windows, only the op instances that start inside the step's window count.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..calltree.model import Tree
from ..vector.groups import I64, max_by, min_by
from .batch import Batch

COLUMNS = {
    "rank": "int32",
    "device": "int32",
    "op": "object",
    "launcher_kind": "object",
    "count": "int64",
    "host_ns": "int64",
    "gpu_direct_ns": "int64",
    "gpu_subtree_ns": "int64",
    "kernels": "int64",
    "subtree_kernels": "int64",
}
"""Declared output columns and dtypes."""


def ops(batch: Batch) -> pd.DataFrame:
    """Per launcher (op name and kind) of every part: count, host time, direct and subtree GPU
    time, kernels."""
    table = Tree.of_batch(batch).ops_by_part(*step_windows(batch))
    keys = batch.keys(table["part"].to_numpy(I64))
    table.insert(0, "device", keys["device"])
    table.insert(0, "rank", keys["rank"])
    return table[list(COLUMNS)]


def step_windows(batch: Batch) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per part, the host window whose op instances count with a step selected: ``(None, None)``
    without one; else each part's (start, end) of its host step windows, and start > end (every
    op counts) for a part whose steps are GPU windows or that has none."""
    steps = batch.steps
    if batch.options.step is None or not len(steps):
        return None, None
    n = batch.n_parts
    host = (steps["source"] == "host").to_numpy(bool)
    sp = steps["part"].to_numpy(I64)
    all_host = np.bincount(sp[host], minlength=n) == np.bincount(sp, minlength=n)
    big = np.iinfo(np.int64).max
    lo = min_by(sp, steps["start_ns"].to_numpy(I64), n, big)
    hi = max_by(sp, steps["end_ns"].to_numpy(I64), n, -big - 1)
    has = all_host & (np.bincount(sp, minlength=n) > 0)
    return np.where(has, lo, 1), np.where(has, hi, 0)  # lo > hi: the part keeps every op
