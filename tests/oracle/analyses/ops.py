"""The ``ops`` table (SPEC §5): GPU time per host op, per (rank, device, op name).

Built from the host → GPU tree of the partition (:mod:`dtrace.calltree`): host events nest
by time containment per thread, launches link to GPU events by correlation id.

Columns: ``count`` (instances), ``host_ns`` (sum of the instances' durations),
``gpu_direct_ns`` (union of the op's direct GPU events: those whose launcher op — the first
``cpu_op`` above the launch call — is an instance of this op), ``gpu_subtree_ns`` (union of
the GPU events anywhere below an instance), ``kernels`` and ``subtree_kernels`` (their
counts). Unions run over all instances of the name, so nested same-name ops and concurrent
kernels count once. GPU events are the partition's (its device, after the analysis options:
step selection, ``linked_only``, stream-overlap clipping); with a step selected and host step
windows, only the op instances that start inside the step's window count.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..calltree.model import Tree
from ..prepare import PartData

COLUMNS = {"rank": "int32", "device": "int32", "op": "object", "count": "int64", "host_ns": "int64",
           "gpu_direct_ns": "int64", "gpu_subtree_ns": "int64", "kernels": "int64", "subtree_kernels": "int64"}
"""Declared output columns and dtypes."""


def ops(part: PartData) -> pd.DataFrame:
    """Per op name of one partition: count, host time, direct and subtree GPU time, kernels."""
    window = None
    steps = part.steps
    if part.options.step is not None and len(steps) and (steps["source"] == "host").all():
        window = (int(steps["start_ns"].min()), int(steps["end_ns"].max()))
    table = Tree.from_part(part).ops(window)
    table.insert(0, "device", np.full(len(table), part.device, np.int32))
    table.insert(0, "rank", np.full(len(table), part.rank, np.int32))
    return table[list(COLUMNS)]
