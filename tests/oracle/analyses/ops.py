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

COLUMNS = {"rank": "int32", "device": "int32", "op": "object", "launcher_kind": "object", "count": "int64",
           "host_ns": "int64",
           "gpu_direct_ns": "int64", "gpu_subtree_ns": "int64", "kernels": "int64", "subtree_kernels": "int64"}
"""Declared output columns and dtypes."""


def ops(part: PartData) -> pd.DataFrame:
    """Per op name of one partition: count, host time, direct and subtree GPU time, kernels."""
    window = None
    steps = part.steps
    if part.options.step is not None and len(steps) and (steps["source"] == "host").all():
        window = (int(steps["start_ns"].min()), int(steps["end_ns"].max()))
    tree = Tree.from_part(part)
    table = tree.ops(window).assign(launcher_kind="cpu_op")
    table = pd.concat([table, _runtime_launchers(tree, window)], ignore_index=True)
    table.insert(0, "device", np.full(len(table), part.device, np.int32))
    table.insert(0, "rank", np.full(len(table), part.rank, np.int32))
    return table[list(COLUMNS)]


def _runtime_launchers(tree: Tree, window: tuple[int, int] | None) -> pd.DataFrame:
    """Issue 14 (changed on purpose): a launch call outside every cpu_op is the launcher of its
    GPU events, one row per call name. Computed here from the GPU nodes whose launcher op is
    missing, grouped by their launch call."""
    h = tree.n_host
    g = np.arange(h, tree.size)
    g = g[(tree.parent[g] >= 0) & (tree.launcher_op[g] < 0)]
    launch = tree.parent[g]
    if window is not None:
        inside = (tree.start_ns[launch] >= window[0]) & (tree.start_ns[launch] < window[1])
        g, launch = g[inside], launch[inside]
    rows = []
    names = np.array([tree.name_of(int(u)) for u in launch], dtype=object)
    for name in sorted(set(names.tolist())):
        sel = names == name
        calls = np.unique(launch[sel])
        union = _union_len(tree.start_ns[g[sel]], tree.end_ns[g[sel]])
        rows.append({"op": name, "count": calls.size, "host_ns": int((tree.end_ns[calls] - tree.start_ns[calls]).sum()),
                     "gpu_direct_ns": union, "gpu_subtree_ns": union, "kernels": int(sel.sum()),
                     "subtree_kernels": int(sel.sum()), "launcher_kind": "runtime"})
    return pd.DataFrame(rows, columns=["op", "count", "host_ns", "gpu_direct_ns", "gpu_subtree_ns", "kernels",
                                       "subtree_kernels", "launcher_kind"])


def _union_len(start: np.ndarray, end: np.ndarray) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(zip(start.tolist(), end.tolist())):
        if cur_e is None or s > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (0 if cur_e is None else cur_e - cur_s)
