"""Hardware counters of profiled kernels: ``kernel_counters``, ``kernel_counter_values`` and
``op_counters`` (docs/semantics.md, "Hardware counters").

A trace recorded with CUPTI range profiling holds one *counter range* per profiled kernel (the
reader's ``counter_ranges`` and ``range_counters`` side tables: :mod:`dtrace.readers._counters`)
and no kernel events: nothing links a range to the launch call of its kernel but their order.
Kineto splits its profiling span evenly between the ranges, so their times say nothing of when the
kernel ran; they only order the ranges.

**Pairing.** Per part, the n-th range by start (ties in file order) is paired with the n-th kernel
launch call by start (ties in file order): a host ``runtime`` event whose name is a kernel launch
(:data:`KERNEL_LAUNCH`: ``cudaLaunchKernel``, ``cudaLaunchKernelExC``, ``cuLaunchKernel``,
``hipLaunchKernel``, ...; graph launches and copies are not). Where the counts differ, what can be
paired is paired in order and the rest is not (``paired`` false); ``launches`` gives the part's
count of launch calls on every row, so a count that differs from the part's ranges is plain to see
(HTA refuses such a rank).

**Ops.** From the launch call in the host tree (:class:`~dtrace.calltree.model.Tree`):
``top_op`` is the outermost ``cpu_op`` above it, ``bottom_op`` the innermost (HTA's top- and
bottom-level op), ``op`` the op instance that owns its kernels under the op performance model's
rule (the outermost modelled op above the launcher, else the outermost wrapper, else the
launcher; the launch call itself outside every ``cpu_op``: as ``op_perf`` assigns kernels).

**FLOPs.** ``measured_flops`` of a range is ``Σ w·value`` over its SASS instruction counters
``smsp__sass_thread_inst_executed_op_{d,f,h}{add,fma,mul}_pred_on.sum`` (:data:`SASS_FLOPS`:
``w`` = 2 for a fused multiply-add, 1 for an add or a multiply; fp64, fp32 and fp16), NaN for a
range without any of them. ``op_counters`` sums them per (rank, device, ``op``) beside the FLOPs
the op model gives the same op instances from their recorded shapes
(:func:`dtrace.knowledge.opmodel.estimate`, as ``op_perf`` does).

Everything is vectorised over the partition's parts; nothing runs per range but the op model,
once per distinct (op, arguments).
"""

from __future__ import annotations

import functools
import re
from typing import Any, cast

import numpy as np
import pandas as pd

from ..calltree import build as B
from ..calltree.model import CPU_OP, Tree
from ..core.constants import KINDS
from ..core.dtypes import empty_frame, missing_if_negative, text_column
from ..core.schema import ARGS_SEP
from ..knowledge import opmodel
from ..vector.groups import (
    I64,
    count_by,
    cumcount,
    dense_codes,
    first_match,
    lexsort_ints,
    string_rank,
    unique_first,
    unique_inverse,
)
from .batch import Batch, kind_codes
from .owners import op_owners, outermost

COLUMNS = {
    "rank": "int32",
    "device": "int32",
    "range": "int64",
    "name": "object",
    "start_ns": "int64",
    "dur_ns": "int64",
    "paired": "bool",
    "launches": "int64",
    "launch_name": "object",
    "launch_ns": "Int64",
    "correlation": "Int64",
    "kernel": "object",
    "top_op": "object",
    "bottom_op": "object",
    "op": "object",
    "counters": "int64",
    "measured_flops": "float64",
}
"""Declared columns of ``kernel_counters`` (one row per counter range)."""

VALUE_COLUMNS = {"rank": "int32", "device": "int32", "range": "int64", "counter": "object", "value": "float64"}
"""Declared columns of ``kernel_counter_values`` (one row per range and counter)."""

OP_COLUMNS = {
    "rank": "int32",
    "device": "int32",
    "op": "object",
    "instances": "int64",
    "kernels": "int64",
    "measured_flops": "float64",
    "modelled": "int64",
    "modelled_flops": "float64",
    "ratio": "float64",
}
"""Declared columns of ``op_counters`` (one row per part and op that owns counter ranges)."""

KERNEL_LAUNCH = re.compile(r"^(?:cuda|cu|hip)(?:Ext)?(?:Module)?Launch(?:Cooperative)?Kernel")
"""A launch call of one kernel (``cudaLaunchKernel``, ``cudaLaunchKernelExC``, ``cuLaunchKernel``,
``hipLaunchKernel``, ``hipExtModuleLaunchKernel``, ``cudaLaunchCooperativeKernel``, ...)."""

SASS_FLOPS = {
    f"smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum": 2.0 if op == "fma" else 1.0
    for p in ("d", "f", "h")
    for op in ("add", "fma", "mul")
}
"""The SASS instruction counters that count floating-point work, and FLOPs per instruction."""


def kernel_counters(batch: Batch) -> pd.DataFrame:
    """One row per counter range of every part: its launch, ops and measured FLOPs."""
    return batch.derived("counters.ranges", _ranges)[0]


def kernel_counter_values(batch: Batch) -> pd.DataFrame:
    """The counters of every range, long form: one row per (range, counter) as recorded."""
    vals = batch.side_table("range_counters")
    if not len(vals):
        return empty_frame(VALUE_COLUMNS)
    part = vals["part"].to_numpy(I64)
    order = lexsort_ints((np.arange(part.size, dtype=I64), vals["range"].to_numpy(I64), part))
    keys = batch.keys(part[order])
    return pd.DataFrame(
        {
            "rank": keys["rank"],
            "device": keys["device"],
            "range": vals["range"].to_numpy(I64)[order],
            "counter": _texts(vals["counter"], order),
            "value": vals["value"].to_numpy(np.float64)[order],
        }
    )


def op_counters(batch: Batch) -> pd.DataFrame:
    """Per part and owning op: instances, ranges, measured FLOPs beside the op model's."""
    table, own = batch.derived("counters.ranges", _ranges)
    return _op_counters(batch, table, own)


# -- ranges and launches ----------------------------------------------------------------------
def _ranges(batch: Batch) -> tuple[pd.DataFrame, np.ndarray]:
    """``kernel_counters``, and the tree node of the op instance owning each row (-1: unpaired)."""
    ranges = batch.side_table("counter_ranges")
    if not len(ranges):
        return empty_frame(COLUMNS), np.empty(0, I64)
    rpart = ranges["part"].to_numpy(I64)
    order = lexsort_ints((ranges["range"].to_numpy(I64), ranges["start_ns"].to_numpy(I64), rpart))
    rpart = rpart[order]
    start = ranges["start_ns"].to_numpy(I64)[order]
    launch, n_launches = _paired_launches(batch, rpart)
    h = batch.host
    has = launch >= 0
    tree = Tree.of_batch(batch)
    uid = _tree_nodes(tree, _host_ints(h, "part", launch), _host_ints(h, "row", launch), has)
    flops, n_counters = _measured(batch, rpart, ranges["range"].to_numpy(I64)[order])
    keys = batch.keys(rpart)
    corr = _host_ints(h, "correlation", launch)
    top, bottom, own = _ops_of(tree, uid)
    table = pd.DataFrame(
        {
            "rank": keys["rank"],
            "device": keys["device"],
            "range": ranges["range"].to_numpy(I64)[order],
            "name": _texts(ranges["name"], order),
            "start_ns": start,
            "dur_ns": ranges["end_ns"].to_numpy(I64)[order] - start,
            "paired": has,
            "launches": n_launches[rpart],
            "launch_name": _texts(h["name"], np.where(has, launch, -1)),
            "launch_ns": missing_if_negative(_host_ints(h, "start_ns", launch)),
            "correlation": missing_if_negative(corr),
            "kernel": _kernel_names(batch, rpart, corr),
            "top_op": _node_names(tree, top),
            "bottom_op": _node_names(tree, bottom),
            "op": _node_names(tree, own),
            "counters": n_counters,
            "measured_flops": flops,
        }
    )
    return table, own


def _host_ints(h: pd.DataFrame, col: str, rows: np.ndarray) -> np.ndarray:
    """An integer column of the host events at ``rows`` (-1: none, and -1 there)."""
    v = h[col].to_numpy(I64)
    return np.where(rows >= 0, v[np.maximum(rows, 0)], -1) if v.size else np.full(rows.size, -1, I64)


def _paired_launches(batch: Batch, rpart: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per range (``rpart`` in range order), the row in ``batch.host`` of the launch call paired
    with it (-1: none), and per part its number of kernel launch calls."""
    h = batch.host
    is_launch = np.zeros(len(h), bool)
    if len(h):
        is_launch = (kind_codes(h["kind"]) == KINDS.index("runtime")) & _matches(h["name"], KERNEL_LAUNCH)
    rows = np.flatnonzero(is_launch)
    lpart = h["part"].to_numpy(I64)[rows]
    rows = rows[lexsort_ints((h["row"].to_numpy(I64)[rows], h["start_ns"].to_numpy(I64)[rows], lpart))]
    lpart = h["part"].to_numpy(I64)[rows]
    hit = first_match((lpart, cumcount(lpart)), (rpart, cumcount(rpart)))
    return np.where(hit >= 0, rows[np.maximum(hit, 0)] if rows.size else -1, -1), count_by(lpart, batch.n_parts)


def _categorical(col: pd.Series) -> pd.Series:
    """A text column as a categorical (as the batch's name columns already are)."""
    return col if isinstance(col.dtype, pd.CategoricalDtype) else col.astype("category")


def _matches(names: pd.Series, rx: re.Pattern[str]) -> np.ndarray:
    """Whether each value of a (categorical) name column matches ``rx``: once per distinct name."""
    cat = _categorical(names)
    lut = np.array([bool(rx.match(str(c))) for c in cat.cat.categories] + [False], bool)
    return cast(np.ndarray, lut[cat.cat.codes.to_numpy()])  # code -1 (a missing name): the False at the end


def _texts(col: pd.Series, rows: np.ndarray) -> Any:
    """The values of a (categorical) text column at ``rows`` (-1: ``""``), one string per distinct value."""
    cat = _categorical(col)
    values = np.array([*map(str, cat.cat.categories), ""], dtype=object)
    codes = cat.cat.codes.to_numpy().astype(I64)[np.maximum(rows, 0)] if len(cat) else np.full(rows.size, -1, I64)
    return text_column(values, np.where((rows >= 0) & (codes >= 0), codes, len(values) - 1))


def _kernel_names(batch: Batch, rpart: np.ndarray, corr: np.ndarray) -> Any:
    """The name of the GPU kernel each paired launch launched (by correlation; ``""`` where the
    trace has no kernel events, as a range-profiled trace has none)."""
    g = batch.gpu
    if not len(g):
        return text_column(np.array([""], dtype=object), np.zeros(rpart.size, I64))
    hit = first_match((g["part"].to_numpy(I64), g["correlation"].to_numpy(I64)), (rpart, corr))
    return _texts(g["name"], np.where(corr >= 0, hit, -1))


def _tree_nodes(tree: Tree, part: np.ndarray, row: np.ndarray, has: np.ndarray) -> np.ndarray:
    """The tree node (uid) of each host event (part, row) where ``has``; -1 elsewhere."""
    h = tree.n_host
    uid = first_match((tree.part[:h], tree.row[:h]), (part, row))
    return np.where(has, uid, -1)


def _node_names(tree: Tree, nodes: np.ndarray) -> Any:
    """The names of the tree nodes ``nodes`` (-1: ``""``) as a text column."""
    values = np.array([*map(str, tree.names), ""], dtype=object)
    codes = np.asarray(tree.name.codes, I64)
    c = codes[np.maximum(nodes, 0)] if codes.size else np.full(nodes.size, -1, I64)
    return text_column(values, np.where((nodes >= 0) & (c >= 0), c, len(values) - 1))


def _ops_of(tree: Tree, uid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For launch-call nodes ``uid`` (-1: none): the outermost and innermost ``cpu_op`` above each,
    and the op instance owning its kernels (``op_perf``'s rule, :func:`dtrace.analyses.owners.op_owners`)."""
    h = tree.n_host
    none = np.full(uid.size, -1, I64)
    if not h or not uid.size:
        return none, none, none
    is_op = tree.kind[:h] == CPU_OP
    at = np.maximum(uid, 0)
    bottom = np.where(uid >= 0, tree.launcher_op[at], -1)  # the nearest cpu_op above the call
    top = np.where(uid >= 0, outermost(tree.parent[:h], is_op, B.levels(tree.depth[:h]))[at], -1)
    own = op_owners(tree)[np.maximum(bottom, 0)]
    return top, bottom, np.where(bottom >= 0, own, uid)  # outside every cpu_op: the launch call


def _measured(batch: Batch, rpart: np.ndarray, rnum: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per range (part, number): FLOPs from its SASS instruction counters (NaN without any) and
    its number of counters."""
    vals = batch.side_table("range_counters")
    n = rpart.size
    if not len(vals):
        return np.full(n, np.nan), np.zeros(n, I64)
    at = first_match((rpart, rnum), (vals["part"].to_numpy(I64), vals["range"].to_numpy(I64)))
    ok = at >= 0
    counter = _categorical(vals["counter"])
    weight = np.array([SASS_FLOPS.get(str(c), np.nan) for c in counter.cat.categories] + [np.nan])
    w = weight[counter.cat.codes.to_numpy()][ok]
    sass = ~np.isnan(w)
    idx = at[ok]
    flops = np.bincount(idx[sass], weights=w[sass] * vals["value"].to_numpy(np.float64)[ok][sass], minlength=n)
    with_sass = np.bincount(idx[sass], minlength=n) > 0
    return np.where(with_sass, flops, np.nan), np.bincount(idx, minlength=n).astype(I64)


# -- per op -----------------------------------------------------------------------------------
def _op_counters(batch: Batch, kc: pd.DataFrame, own: np.ndarray) -> pd.DataFrame:
    """``op_counters`` from ``kernel_counters`` and the owning op instance of each of its rows."""
    sel = np.flatnonzero(own >= 0)
    if not sel.size:
        return empty_frame(OP_COLUMNS)
    tree = Tree.of_batch(batch)
    own = own[sel]
    part, name = tree.part[own], np.asarray(tree.name.codes, I64)[own]
    key, n = dense_codes(part, name)
    inst, inst_of = unique_inverse(own)  # the op instances, each row's among them
    inst_key = np.zeros(inst.size, I64)
    inst_key[inst_of] = key
    model = _modelled_flops(batch, tree, inst)
    measured = kc["measured_flops"].to_numpy(np.float64)[sel]
    meas = np.where(
        np.bincount(key[~np.isnan(measured)], minlength=n) > 0,
        np.bincount(key, weights=np.nan_to_num(measured), minlength=n),
        np.nan,
    )
    modelled = count_by(inst_key[~np.isnan(model)], n)
    modelled_sum = np.where(modelled > 0, np.bincount(inst_key, weights=np.nan_to_num(model), minlength=n), np.nan)
    instances = count_by(inst_key, n)
    full = (modelled == instances) & (modelled_sum > 0)
    rep = unique_first(key)[1]
    order = lexsort_ints((string_rank(tree.names)[name[rep]], part[rep]))
    keys = batch.keys(part[rep][order])
    return pd.DataFrame(
        {
            "rank": keys["rank"],
            "device": keys["device"],
            "op": _node_names(tree, own[rep][order]),
            "instances": instances[order],
            "kernels": count_by(key, n)[order],
            "measured_flops": meas[order],
            "modelled": modelled[order],
            "modelled_flops": modelled_sum[order],
            "ratio": np.where(full, meas / np.where(full, modelled_sum, 1.0), np.nan)[order],
        }
    )


def _modelled_flops(batch: Batch, tree: Tree, inst: np.ndarray) -> np.ndarray:
    """The op model's FLOPs of each op instance (tree nodes ``inst``) from its recorded arguments
    (the ``op_args`` side table), NaN where there is none; once per distinct (op, arguments)."""
    side = batch.side_table("op_args")
    names = np.asarray(tree.name.codes, I64)[inst]
    args = np.full(inst.size, -1, I64)
    texts = np.empty(0, dtype=object)
    if len(side):
        col = _categorical(side["args"])
        hit = first_match((side["part"].to_numpy(I64), side["row"].to_numpy(I64)), (tree.part[inst], tree.row[inst]))
        raw = col.cat.codes.to_numpy().astype(I64)
        args = np.where(hit >= 0, raw[np.maximum(hit, 0)], -1)
        texts = np.asarray(col.cat.categories, dtype=object)
    is_op = tree.kind[inst] == CPU_OP
    combo, n = dense_codes(names, args, is_op.astype(I64))
    first = unique_first(combo)[1]
    flops = np.array(
        [
            _flops(str(tree.names[names[i]]), str(texts[args[i]]) if args[i] >= 0 else "")
            if is_op[i] and names[i] >= 0
            else np.nan
            for i in first.tolist()
        ],
        np.float64,
    )
    return flops[combo] if n else np.empty(0, np.float64)


@functools.lru_cache(maxsize=1 << 12)
def _flops(op: str, args: str) -> float:
    """The op model's FLOPs of one op from its ``op_args`` text (:data:`~dtrace.core.schema.ARGS_SEP`
    after each of dims, types, strides, concrete inputs), NaN where it has none."""
    dims, types, _strides, concrete, *_ = [*args.split(ARGS_SEP), "", "", "", ""]
    e = opmodel.estimate(op, dims, types, concrete)
    return np.nan if isinstance(e, str) else float(e.flops)
