"""The ``op_perf`` and ``devices`` tables: FLOPs, bytes and GPU time of every modelled op of every
part (docs/semantics.md, "Op performance model").

**Which op owns a GPU event.** Every GPU event linked to a launch has a launcher (the first
``cpu_op`` above its launch call, else the launch call itself: :mod:`dtrace.calltree`). Its
*modelled op* is the outermost ``cpu_op`` above the launcher (the launcher included) whose name
has a model of priority ``MODEL`` (:mod:`dtrace.knowledge.opmodel`); failing that, the outermost
``WRAPPER`` (``aten::linear``, ``aten::matmul``, ``aten::scaled_dot_product_attention``); failing
that, the launcher itself, an op without a model. So ``aten::layer_norm`` owns the kernels of
the ``aten::native_layer_norm`` inside it, ``aten::addmm`` those of ``aten::linear``, and every
GPU event belongs to exactly one op instance: family and rank totals never count a kernel twice.
This is the op TraceLens's unified perf summary collects (its traversal stops at the first op
with a perf model), so the rows compare one to one. Communication kernels (category ``comm``)
and GPU events without a launch are left out: their time is not the op's arithmetic.

**Time of an instance** = the union of its GPU events (kernels, memcpy, memset; a CUDA graph's
kernels belong to the graph launch), so concurrent kernels count once.

**Phase.** An inference server's step annotations (:mod:`dtrace.knowledge.opmodel.serving`) say
whether a step is prefill, decode or both (``mixed``): an op instance's ``phase`` is that of the
nearest such annotation above it (``""``: none). The attention ops over a KV cache also take the
sequences that annotation sums (``seqs``) into their model.

**Rows**: one per (rank, device, op, shapes, dtypes, strides, scalar arguments, phase, step
sequences of the ops that read them), the recorded texts normalised (no spaces), with the
instances' count, summed, shortest, median and longest time, and the model's per-instance FLOPs
and bytes. Each distinct (op, arguments, sequences) is modelled once per partition. The hardware
roofline is added across ranks, where the peaks are known (:mod:`dtrace.reduce.opperf`).
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa

from ..calltree import build as B
from ..calltree.model import KINDS, Tree
from ..core.dtypes import empty_frame
from ..core.schema import ARGS_SEP
from ..knowledge import opmodel
from ..vector.groups import (
    I64,
    dense_codes,
    first_match,
    lexsort_ints,
    string_rank,
    sum_by,
    unique_first,
    unique_inverse,
)
from .batch import Batch
from .owners import op_owners

COLUMNS = {
    "rank": "int32",
    "device": "int32",
    "op": "object",
    "family": "object",
    "backward": "bool",
    "modelled": "bool",
    "shapes": "object",
    "dtypes": "object",
    "strides": "object",
    "args": "object",
    "phase": "object",
    "seqs": "object",
    "count": "int64",
    "kernels": "int64",
    "gpu_ns": "int64",
    "min_ns": "int64",
    "median_ns": "int64",
    "max_ns": "int64",
    "flops": "float64",
    "bytes": "float64",
    "unit": "object",
    "precision": "object",
    "params": "object",
    "note": "object",
}
"""Declared output columns of ``op_perf`` (per partition)."""

DEVICE_COLUMNS = {
    "rank": "int32",
    "device": "int32",
    "name": "object",
    "vendor": "object",
    "capability": "object",
    "sms": "int64",
    "memory_bytes": "int64",
}
"""Declared output columns of ``devices``."""

UNMODELLED = "unmodelled"
_ARG_COLS = ("dims", "types", "strides", "concrete")
_ANNOTATION = KINDS.index("annotation")
_PHASES = np.array(opmodel.PHASES, dtype=object)


def modelled_op(tree: Tree) -> np.ndarray:
    """For each GPU node of ``tree`` (in order), the uid of the op instance that owns it (-1: unlinked).

    See the module docs: the outermost ``MODEL`` op above its launcher, else the outermost
    ``WRAPPER``, else the launcher (:func:`dtrace.analyses.owners.op_owners`).
    """
    launcher = tree.launcher_op[tree.n_host :]
    if not tree.n_host:
        return np.full(tree.n_gpu, -1, I64)
    own = op_owners(tree)
    return np.where(launcher >= 0, own[np.maximum(launcher, 0)], -1).astype(I64)


def serving_steps(tree: Tree, uids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For the host nodes ``uids``: the code of their phase in ``opmodel.PHASES`` and the code of
    their step's sums in the returned texts (-1: none), from the nearest step annotation above
    each (itself included; :func:`dtrace.knowledge.opmodel.read_marker`)."""
    none = np.full(uids.size, -1, I64)
    h = tree.n_host
    read = [opmodel.read_marker(str(n)) for n in tree.names]
    phase_of_name = np.array([opmodel.PHASES.index(p) if p else -1 for p, _ in read] + [-1], I64)
    if not h or not (phase_of_name >= 0).any():
        return none, none, np.empty(0, object)
    step_of_name, texts = pd.factorize(np.array([t or None for _, t in read] + [None], dtype=object))
    codes = tree._name_codes[:h]
    codes = np.where(codes >= 0, codes, len(phase_of_name) - 1)
    annotation = tree.kind[:h] == _ANNOTATION
    parent, lv = tree.parent[:h], B.levels(tree.depth[:h])
    out = []
    for per_name in (phase_of_name, step_of_name):
        mark = annotation & (per_name[codes] >= 0)
        near = np.where(mark, np.arange(h, dtype=I64), B.nearest_ancestor(parent, mark, lv))[uids]
        out.append(np.where(near >= 0, per_name[codes[np.maximum(near, 0)]], -1).astype(I64))
    return out[0], out[1], np.asarray(texts, dtype=object)


def _canonical(texts: np.ndarray, json_strings: bool) -> np.ndarray:
    """Recorded argument texts without formatting differences (``[[4096, 4096]]`` → ``[[4096,4096]]``)."""
    out = np.empty(len(texts), dtype=object)
    for i, t in enumerate(texts.tolist()):
        t = "" if t is None or t != t else str(t)
        if json_strings and t:
            try:
                t = msgspec.json.encode(msgspec.json.decode(t)).decode()
            except msgspec.DecodeError:
                pass
        else:
            t = "".join(t.split())  # shapes and strides hold numbers only: no whitespace matters
        out[i] = t
    return out


def _arg_codes(batch: Batch, part: np.ndarray, row: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per op instance, a code per argument column (-1: none recorded) and, per column, the
    canonical texts the codes index."""
    side = batch.side_table("op_args")
    n = part.size
    if not len(side) or not n:
        return np.full((len(_ARG_COLS), n), -1, I64), [np.empty(0, object)] * len(_ARG_COLS)
    hit = first_match((side["part"].to_numpy(I64), side["row"].to_numpy(I64)), (part, row))
    c = side["args"]
    if not isinstance(c.dtype, pd.CategoricalDtype):
        c = c.astype("category")
    raw = c.cat.codes.to_numpy()
    # the four texts of each distinct combination (a few hundred), never of each op
    split = [str(t).split(ARGS_SEP) for t in np.asarray(c.cat.categories, dtype=object)]
    codes, texts = [], []
    for i, json_strings in enumerate((False, True, False, True)):
        canon = _canonical(np.array([p[i] if len(p) > i else "" for p in split], dtype=object), json_strings)
        ccodes, uniq = pd.factorize(canon)  # equal canonical texts share a code
        per_row = np.where(raw >= 0, ccodes[np.maximum(raw, 0)] if len(ccodes) else -1, -1)
        codes.append(np.where(hit >= 0, per_row[np.maximum(hit, 0)], -1).astype(I64))
        texts.append(np.asarray(uniq, dtype=object))
    return np.vstack(codes), texts


def op_perf(batch: Batch) -> pd.DataFrame:
    """Per (rank, device, op, arguments): instances, GPU time and the op model's FLOPs and bytes."""
    gpu = batch.gpu
    if not len(gpu):
        return empty_frame(COLUMNS)
    tree = Tree.of_batch(batch)
    h = tree.n_host
    own = modelled_op(tree)
    gpart, grow = tree.part[h:], tree.row[h:]
    at = first_match((gpu["part"].to_numpy(I64), gpu["row"].to_numpy(I64)), (gpart, grow))
    comm = (gpu["category"] == "comm").to_numpy(bool)
    keep = np.flatnonzero((own >= 0) & (at >= 0) & ~comm[np.maximum(at, 0)])
    if not keep.size:
        return empty_frame(COLUMNS)
    inst, inst_of = unique_inverse(own[keep])
    ns = B.grouped_union(inst_of, tree.start_ns[h + keep], tree.end_ns[h + keep], inst.size)
    kernels = np.bincount(inst_of, minlength=inst.size).astype(I64)
    part = tree.part[inst]
    name_code = tree._name_codes[inst]
    args, texts = _arg_codes(batch, part, tree.row[inst])
    phase, step, step_texts = serving_steps(tree, inst)
    if (step >= 0).any():  # the step's sums enter the rows of the ops whose model reads them only
        reads = np.array([opmodel.reads_step(str(n)) for n in tree.names] + [False], bool)
        step = np.where(reads[np.where(name_code >= 0, name_code, len(reads) - 1)], step, -1)
    key, n_keys = dense_codes(part, name_code, *args, phase, step)
    _, first = unique_first(key)
    s = pd.Series(ns).groupby(key)
    cols: dict[str, np.ndarray] = {
        "count": np.bincount(key, minlength=n_keys).astype(I64),
        "kernels": sum_by(key, kernels, n_keys),
        "gpu_ns": sum_by(key, ns, n_keys),
        "min_ns": s.min().to_numpy(I64),
        "median_ns": np.rint(s.median().to_numpy(np.float64)).astype(I64),  # half to even, as conform
        "max_ns": s.max().to_numpy(I64),
    }
    # text columns as (codes, distinct values): built as Arrow strings by one take each, at the end
    text: dict[str, tuple[np.ndarray, np.ndarray]] = {"op": (name_code[first], tree.names)}
    for col, codes, uniq in zip(("shapes", "dtypes", "strides", "args"), args[:, first], texts):
        text[col] = (codes, uniq)
    text["phase"] = (phase[first], _PHASES)
    text["seqs"] = (step[first], step_texts)
    combo, _ = dense_codes(name_code[first], args[0, first], args[1, first], args[3, first], step[first])
    cols_m, text_m = _models(text, combo)
    cols.update(cols_m)
    text.update(text_m)
    op_rank = string_rank(tree.names)[name_code[first]] if len(tree.names) else np.zeros(len(first), I64)
    order = lexsort_ints((op_rank, -cols["gpu_ns"], part[first]))
    cols.update(batch.keys(part[first]))
    out = {c: (str_column(text[c][0][order], text[c][1]) if c in text else cols[c][order]) for c in COLUMNS}
    return pd.DataFrame(out)


_STR = pd.Series([""]).dtype  # pandas' text dtype (Arrow-backed strings in pandas 3)


def str_column(codes: np.ndarray, values: np.ndarray) -> pd.Series:
    """``values[codes]`` (code -1: ``""``) as a text column, built by one Arrow take (no Python
    string per row)."""
    vals = pa.array([*np.asarray(values, dtype=object).tolist(), ""], pa.string())
    idx = np.where(codes >= 0, codes, len(vals) - 1).astype(np.int32)
    return pd.Series(pa.DictionaryArray.from_arrays(pa.array(idx), vals).cast(pa.string()), dtype=_STR)


def _models(
    text: dict[str, tuple[np.ndarray, np.ndarray]], combo: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """The model's columns, computed once per distinct (op, shapes, dtypes, args): ``combo``
    numbers those (dense codes, one per row). Returns the numeric and bool columns per row and the
    text columns as (codes, values)."""
    _, first = unique_first(combo)

    def at(col: str) -> list[str]:
        codes, values = text[col]
        c = codes[first]
        return [str(values[i]) if i >= 0 else "" for i in c.tolist()]

    rows = [_model_row(*texts) for texts in zip(at("op"), at("shapes"), at("dtypes"), at("args"), at("seqs"))]
    names = ["family", "backward", "modelled", "flops", "bytes", "unit", "precision", "params", "note"]
    per = list(zip(*rows)) if rows else [()] * len(names)
    cols: dict[str, np.ndarray] = {}
    texts: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, vals in zip(names, per):
        kind = COLUMNS[name]
        if kind == "object":
            texts[name] = (combo, np.array(vals, dtype=object))
        else:
            arr = np.array(vals, dtype=kind)
            cols[name] = arr[combo] if len(arr) else arr
    return cols, texts


@functools.lru_cache(maxsize=1 << 16)
def _model_row(op: str, d: str, t: str, c: str, step: str = "") -> tuple[Any, ...]:
    """The model's values of one distinct (op, shapes, dtypes, args, step sums): family, backward,
    modelled, flops, bytes, unit, precision, params, note. Kept per process (a pure function of
    the texts; the parts of a job repeat the same ops)."""
    fam = opmodel.family(op)
    e = opmodel.estimate(op, d, t, c, step) if fam else "no model for this op"
    back = opmodel.is_backward(op)
    if isinstance(e, str):
        return (fam or UNMODELLED, back, False, np.nan, np.nan, "", "", "", e)
    return (fam, back, True, e.flops, e.bytes, e.unit, e.precision, e.params, "")


def devices(batch: Batch) -> pd.DataFrame:
    """One row per part: its GPU's name, vendor, compute capability, multiprocessors and memory
    as the trace states them (``""`` and -1 where it does not)."""
    n = batch.n_parts
    side = batch.side_table("devices")
    p_dev = batch.parts["device"].to_numpy(I64)
    hit = np.full(n, -1, I64)
    if len(side):
        sp, sd = side["part"].to_numpy(I64), side["device"].to_numpy(I64)
        mine = np.flatnonzero(sd == p_dev[sp])
        hit = first_match((sp[mine],), (np.arange(n, dtype=I64),))
        hit = np.where(hit >= 0, mine[np.maximum(hit, 0)] if mine.size else -1, -1)
    out = pd.DataFrame(batch.keys(np.arange(n, dtype=I64)))
    for col, fill in (("name", ""), ("vendor", ""), ("capability", ""), ("sms", -1), ("memory_bytes", -1)):
        vals = side[col].astype(object if fill == "" else np.int64).to_numpy() if len(side) else np.array([], object)
        picked = vals[np.maximum(hit, 0)] if len(vals) else np.full(n, fill, dtype=object)
        out[col] = np.where(hit >= 0, picked, fill).astype(object if fill == "" else np.int64)
    return out
