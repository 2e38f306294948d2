"""Which op instance owns the GPU work a host op launches: ``op_perf``'s rule, shared by the
analyses that attribute GPU work to modelled ops (``op_perf``, ``op_counters``).

The owner of a launching ``cpu_op`` is the outermost op above it (itself included) that the op
model knows by name (:data:`dtrace.knowledge.opmodel.MODEL`: ``aten::linear`` over its
``aten::addmm``), else the outermost wrapper it knows (:data:`~dtrace.knowledge.opmodel.WRAPPER`),
else the op itself; a host node that is not a ``cpu_op`` (a runtime launch outside every op) owns
its own work.
"""

from __future__ import annotations

import numpy as np

from ..calltree import build as B
from ..calltree.model import CPU_OP, Tree
from ..knowledge import opmodel
from ..vector.groups import I64


def outermost(parent: np.ndarray, mark: np.ndarray, lv: list[np.ndarray]) -> np.ndarray:
    """For every node, the outermost marked node on its path from the root (itself included), -1
    if none; ``lv`` holds the nodes per depth (:func:`dtrace.calltree.build.levels`).

    Examples
    --------
    >>> parent = np.array([-1, 0, 1, 0])  # 0 → 1 → 2, 0 → 3
    >>> lv = [np.array([0]), np.array([1, 3]), np.array([2])]
    >>> outermost(parent, np.array([False, True, True, False]), lv).tolist()
    [-1, 1, 1, -1]
    """
    out = np.where(mark, np.arange(mark.size, dtype=I64), -1)
    for nodes in lv[1:]:
        above = out[parent[nodes]]
        out[nodes] = np.where(above >= 0, above, out[nodes])
    return out


def op_owners(tree: Tree) -> np.ndarray:
    """For every host node of ``tree`` (uids ``0 .. n_host-1``): the op instance owning the GPU work
    it launches as a launcher (the module's rule)."""
    h = tree.n_host
    self_ = np.arange(h, dtype=I64)
    if not h:
        return self_
    pri_of_name = np.array([opmodel.priority(str(n)) for n in tree.names] + [0], np.int8)
    codes = np.asarray(tree.name.codes, I64)[:h]
    is_op = tree.kind[:h] == CPU_OP
    pri = np.where(is_op, pri_of_name[np.where(codes >= 0, codes, len(pri_of_name) - 1)], 0)
    parent, lv = tree.parent[:h], B.levels(tree.depth[:h])
    model = outermost(parent, pri == opmodel.MODEL, lv)
    wrap = outermost(parent, pri == opmodel.WRAPPER, lv)
    own = np.where(model >= 0, model, np.where(wrap >= 0, wrap, self_))
    return np.where(is_op, own, self_)
