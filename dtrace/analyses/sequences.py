"""The ``kernel_sequences`` table: the sequences of GPU kernels that top-level host ops launch.

HTA's "frequent CUDA kernel sequences" for every op at once — the fusion candidates: an op that
launches the same kernels in the same order, many times, is where a fused kernel (or a CUDA
graph) saves launch overhead and the idle time between the kernels.

Definition (docs/semantics.md, "Host op tree and ops"). An *instance* is a **top-level**
``cpu_op``: one with no ``cpu_op`` above it in the host → GPU tree of its part (the outermost op
of its thread; annotations such as ``ProfilerStep#N`` or ``## forward ##`` and runtime calls do
not count as ops above it). Its *sequence* is the names of the GPU events (kernels, memcpy,
memset) launched anywhere in its subtree, linked to their launch calls by correlation id, in GPU
start order (ties in the trace's order). Instances with fewer than ``sequence_min_len``
(default 3) GPU events are left out. One row per (rank, device, op name, sequence):

``sequence``
    the names joined by :data:`SEPARATOR`;
``length``
    GPU events in the sequence;
``count``
    instances of the op that launched exactly this sequence;
``gpu_ns``
    the GPU events' durations summed over those instances (HTA's "GPU kernel duration");
``span_ns``
    per instance, first GPU start to last GPU end, summed: ``span_ns − gpu_ns`` is about the
    idle time between the kernels (the kernels of one instance usually run one after another)
    that fusing them would remove;
``host_ns``
    the instances' host durations summed (HTA's "CPU op duration").

Rows are sorted per part by ``count`` (largest first), then op and sequence, as HTA sorts its
patterns. GPU events are the part's after the options (step, ``linked_only``, clipping); with a
step selected and host step windows, only the instances that start inside the step's window
count. GPU work launched outside every ``cpu_op`` (a top-level ``cudaGraphLaunch``) has no
instance and is not in the table.

Differences from HTA's ``get_frequent_cuda_kernel_sequences(operator_name)``: HTA looks at one
operator name (a substring) at a time, on one rank, and starts from the matching ops of the
*shallowest depth among the matches* — any op, nested or not, and user annotations too, and
with its backward thread hung below the main thread's ``## backward ##`` annotation. Here every
top-level op of every part is an instance; the same op nested in another is not. Where HTA's
roots are top-level ops (``autograd::engine::evaluate_function: MmBackward0``, most
``aten::`` ops of a forward pass) the two agree: same count, same sequences, same summed
durations.

Algorithm (vectorised; no Python per event): each GPU event's instance is found by one
``searchsorted`` over the top-level ops (host nodes are in preorder, so their subtrees are
disjoint UID ranges); a stable sort by instance keeps GPU start order within it; a polynomial
hash of each instance's name codes (one ``np.add.reduceat``) with the length groups the
instances; every instance is then compared with the first of its group element by element, so
the grouping is exact (a hash collision, never seen in practice, is split by a Python pass over
the colliding instances only). Names are joined once per distinct sequence.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..calltree.model import CPU_OP, Tree
from ..core.dtypes import empty_frame, text_column
from ..vector.groups import I64, dense_codes, lexsort_ints, sum_by, unique, unique_first, unique_inverse
from .batch import Batch
from .ops import step_windows

COLUMNS = {
    "rank": "int32",
    "device": "int32",
    "op": "object",
    "sequence": "object",
    "length": "int64",
    "count": "int64",
    "gpu_ns": "int64",
    "span_ns": "int64",
    "host_ns": "int64",
}
"""Declared output columns and dtypes."""

SEPARATOR = " | "
"""Between the kernel names of a ``sequence``."""

_BASE = np.uint64(0x9E3779B97F4A7C15)
"""Odd multiplier of the polynomial hash (mod 2**64) of a sequence of name codes."""


def kernel_sequences(batch: Batch) -> pd.DataFrame:
    """Per part, op and kernel sequence: instances, GPU, span and host time (module docstring)."""
    tree = Tree.of_batch(batch)
    top = top_level_ops(tree, *step_windows(batch))
    owner, gpu = launched_below(tree, top)
    n_of = np.bincount(owner, minlength=top.size)
    long_enough = n_of >= int(batch.options.sequence_min_len)
    inst = np.flatnonzero(long_enough)  # the instances kept, as indices into top
    if not inst.size:
        return empty_frame(COLUMNS)
    sel = long_enough[owner]
    gpu = gpu[sel]
    which = np.searchsorted(inst, owner[sel])  # each GPU event's instance, 0..inst.size-1, sorted
    length = n_of[inst]
    first = np.zeros(inst.size, I64)
    np.cumsum(length[:-1], out=first[1:])
    codes = np.asarray(tree.name.codes, I64)[gpu]
    seq, n_seq = sequence_keys(codes, first, length)
    uid = top[inst]
    part = tree.part[uid]
    op_codes, op = unique_inverse(np.asarray(tree.name.codes, I64)[uid])  # the ops' names; each instance's among them
    op_names = tree.names[op_codes]
    key, n_keys = dense_codes(part, op, seq)
    start, end = tree.start_ns[gpu], tree.end_ns[gpu]
    span = np.maximum.reduceat(end, first) - start[first]
    rep = unique_first(key)[1]  # the first instance of each row
    texts = _texts(tree.names, codes, first, length, seq, n_seq)
    count = np.bincount(key, minlength=n_keys).astype(I64)
    order = lexsort_ints((_string_ranks(texts)[seq[rep]], _string_ranks(op_names)[op[rep]], -count, part[rep]))
    rep = rep[order]
    keys = batch.keys(part[rep])
    return pd.DataFrame(
        {
            "rank": keys["rank"],
            "device": keys["device"],
            "op": text_column(op_names, op[rep]),
            "sequence": text_column(texts, seq[rep]),
            "length": length[rep],
            "count": count[order],
            "gpu_ns": sum_by(key[which], end - start, n_keys)[order],
            "span_ns": sum_by(key, span, n_keys)[order],
            "host_ns": sum_by(key, tree.end_ns[uid] - tree.start_ns[uid], n_keys)[order],
        }
    )


def top_level_ops(
    tree: Tree, window_start: np.ndarray | None = None, window_end: np.ndarray | None = None
) -> np.ndarray:
    """UIDs (ascending) of the ``cpu_op`` nodes with no ``cpu_op`` above them; with per-part
    windows (as :meth:`Tree.ops_by_part` takes them), only those starting inside their part's."""
    h = tree.n_host
    top = (tree.kind[:h] == CPU_OP) & (tree.launcher_op[:h] < 0)
    if window_start is not None and window_end is not None:
        lo, hi = window_start[tree.part[:h]], window_end[tree.part[:h]]
        top &= (lo > hi) | ((tree.start_ns[:h] >= lo) & (tree.start_ns[:h] < hi))
    return np.flatnonzero(top).astype(I64)


def launched_below(tree: Tree, top: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For the GPU events launched below one of the host nodes ``top`` (ascending UIDs whose
    subtrees are disjoint): the index into ``top`` of that node and the GPU UID, sorted by
    node, then GPU start (the GPU nodes' own order)."""
    h = tree.n_host
    launch = tree.parent[h:]
    if not top.size or not launch.size:
        return np.empty(0, I64), np.empty(0, I64)
    at = np.searchsorted(top, launch, side="right") - 1  # the last of top at or before the launch call
    ok = (launch >= 0) & (at >= 0)
    ok &= launch < tree.subtree_end[top[np.maximum(at, 0)]]
    gpu = h + np.flatnonzero(ok)
    owner = at[ok]
    order = np.argsort(owner, kind="stable")
    return owner[order].astype(I64), gpu[order].astype(I64)


def sequence_keys(
    codes: np.ndarray, first: np.ndarray, length: np.ndarray, base: np.uint64 = _BASE
) -> tuple[np.ndarray, int]:
    """One dense key per distinct sequence (keys in no particular order): ``codes[first[i] :
    first[i] + length[i]]`` is the sequence of instance ``i`` (instances back to back, none
    empty). Equal sequences, equal keys, exactly: instances are grouped by length and a polynomial hash (mod 2**64, base ``base``),
    then each is compared with its group's first instance; groups where a hash collided are
    split by comparing the sequences themselves.

    Examples
    --------
    >>> codes, first, length = np.array([1, 2, 3, 1, 2, 3, 3, 2, 1]), np.array([0, 3, 6]), np.array([3, 3, 3])
    >>> k, n = sequence_keys(codes, first, length)  # 1 2 3, 1 2 3, 3 2 1
    >>> bool(k[0] == k[1] != k[2]), n
    (True, 2)
    >>> k, n = sequence_keys(codes, first, length, base=np.uint64(0))  # every hash collides: split exactly
    >>> bool(k[0] == k[1] != k[2]), n
    (True, 2)
    """
    n = first.size
    if not n:
        return np.empty(0, I64), 0
    which = np.repeat(np.arange(n, dtype=I64), length)
    pos = np.arange(codes.size, dtype=I64) - first[which]
    powers = np.ones(int(length.max()), np.uint64)
    if powers.size > 1:
        np.cumprod(np.full(powers.size - 1, base, np.uint64), out=powers[1:])  # wraps mod 2**64
    terms = (codes.astype(np.uint64) + np.uint64(1)) * powers[pos]
    digest = np.add.reduceat(terms, first).view(I64)  # wraps mod 2**64
    key, n_keys = dense_codes(length, digest)
    rep = unique_first(key)[1]
    same = codes == codes[first[rep[key]][which] + pos]
    if same.all():
        return key, n_keys
    return _split_collisions(codes, first, length, key, unique(key[which[~same]]))


def _split_collisions(
    codes: np.ndarray, first: np.ndarray, length: np.ndarray, key: np.ndarray, bad: np.ndarray
) -> tuple[np.ndarray, int]:
    """``key`` with the instances of the keys ``bad`` (whose hashes collided) re-keyed by their
    sequences themselves, then made dense again."""
    out = key.copy()
    seen: dict[tuple[int, ...], int] = {}
    for i in np.flatnonzero(np.isin(key, bad)).tolist():
        s = (int(key[i]), *codes[first[i] : first[i] + length[i]].tolist())
        out[i] = seen.setdefault(s, int(key.max()) + 1 + len(seen))
    return dense_codes(out)


def _texts(
    names: np.ndarray, codes: np.ndarray, first: np.ndarray, length: np.ndarray, seq: np.ndarray, n_seq: int
) -> np.ndarray:
    """The text of each distinct sequence: its names joined by :data:`SEPARATOR` (built once per
    distinct sequence)."""
    rep = unique_first(seq)[1]
    out = np.empty(n_seq, object)
    for k, i in enumerate(rep.tolist()):
        out[k] = SEPARATOR.join(names[codes[first[i] : first[i] + length[i]]].astype(str).tolist())
    return out


def _string_ranks(values: np.ndarray) -> np.ndarray:
    """Rank of each of a few distinct strings in string order (one Python sort of them)."""
    order = sorted(range(len(values)), key=lambda i: str(values[i]))
    rank = np.empty(len(values), I64)
    rank[order] = np.arange(len(values), dtype=I64)
    return rank
