"""Embedding, gathers and scatters: ``embedding``, ``embedding_dense_backward``, ``index_select``,
``gather``, the KV-cache writes of serving (docs/semantics.md, "Op performance model").

With ``n`` the indices and ``r`` the elements gathered per index (a table row, ``D``):

    forward   FLOPs = 0                       bytes = n·r·size(x) read + n·r·size(x) written
                                                      + n·size(index)
    embedding backward FLOPs = n·D (the rows added up)
              bytes = n·D·size(dy) + n·size(index) read + V·D·size(dy) written (the dense
                      gradient of the V×D table, zeroed and accumulated)

A KV-cache write scatters the step's new keys and values into their cache slots: SGLang's
``sglang::store_cache(k, v, k_cache, v_cache, loc, ..)`` and vLLM's
``_C_cache_ops::reshape_and_cache[_flash](key, value, key_cache, value_cache, slot_mapping, ..)``.
With ``n`` the slots (``|loc|``) and ``r_k``, ``r_v`` the elements of a token's key and value:

    FLOPs = 0         bytes = n·(r_k·size(k) + r_v·size(v)) read + the same rows written in the
                              caches' types (n·(r_k·size(k_cache) + r_v·size(v_cache))) + n·size(loc)

Assumptions: only the gathered rows are read (not the whole table); index sorting and the
atomics of the backward cost nothing extra; a KV-cache write moves only its tokens' rows
(``n`` may be fewer than the key tensor's rows: padding tokens are not written).
"""

from __future__ import annotations

from ._args import NotModelled, OpArgs
from .base import VECTOR, Estimate, register


def _gathered(a: OpArgs, x_at: int, index_at: int, per_index: int) -> Estimate:
    n = a.numel(index_at)
    out = n * per_index
    nbytes = 2.0 * out * a.bpe(x_at) + a.tensor_bytes(index_at)
    return Estimate(0.0, nbytes, VECTOR, a.precision(x_at), f"{n} indices x {per_index}")


def embedding(a: OpArgs) -> Estimate:
    """``aten::embedding(weight, indices, padding_idx, scale_grad, sparse)``.

    Examples
    --------
    >>> e = embedding(OpArgs.parse("aten::embedding", "[[50000, 4096], [8192], [], [], []]",
    ...     '["c10::BFloat16", "long int", "Scalar", "Scalar", "Scalar"]', ""))
    >>> e.bytes == 2 * 8192 * 4096 * 2 + 8192 * 8
    True
    """
    w = a.shape(0)
    if len(w) != 2:
        raise NotModelled(f"{a.name}: weight {list(w)} is not a table")
    return _gathered(a, 0, 1, w[1])


def index_select(a: OpArgs) -> Estimate:
    """``aten::index_select(x, dim, index)``: whole slices along ``dim``."""
    x = a.shape(0)
    dim = a.integer(1, 0) % max(len(x), 1)
    per = a.numel(0) // x[dim] if x and x[dim] else 0
    return _gathered(a, 0, 2, per)


def gather(a: OpArgs) -> Estimate:
    """``aten::gather(x, dim, index, sparse_grad)``: one element per index."""
    return _gathered(a, 0, 2, 1)


def embedding_backward(a: OpArgs) -> Estimate:
    """``aten::embedding_dense_backward(dy, indices, num_weights, padding_idx, scale_grad)`` and
    ``aten::embedding_backward(dy, indices, num_weights, padding_idx, scale_grad, sparse)``."""
    dy = a.shape(0)
    v = a.integer(2, 0)
    if not dy or v <= 0:
        raise NotModelled(f"{a.name}: gradient shape or table size not recorded")
    d = dy[-1]
    n = a.numel(1)
    nbytes = a.tensor_bytes(0) + a.tensor_bytes(1) + v * d * a.bpe(0)
    return Estimate(float(n * d), float(nbytes), VECTOR, a.precision(0), f"{n} indices x {d} into {v} rows")


def kv_cache_write(a: OpArgs) -> Estimate:
    """``store_cache(k, v, k_cache, v_cache, loc, ..)``, ``reshape_and_cache_flash(key, value,
    key_cache, value_cache, slot_mapping, ..)``: the module docs.

    Examples
    --------
    >>> e = kv_cache_write(OpArgs.parse("sglang::store_cache", "[[16, 1024], [16, 1024], [99, 1024], [99, 1024], [16]]",
    ...     '["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "long int"]', ""))
    >>> e.flops, e.bytes == 2 * 2 * 16 * 1024 * 2 + 16 * 8
    (0.0, True)
    """
    n = a.numel(4)
    sk, sv = a.shape(0), a.shape(1)
    if not sk or not sv or sk[0] < n or sv[0] < n:
        raise NotModelled(f"{a.name}: {n} slots for keys {list(sk)} and values {list(sv)}")
    rk, rv = a.numel(0) // sk[0], a.numel(1) // sv[0]
    nbytes = n * (rk * (a.bpe(0) + a.bpe(2)) + rv * (a.bpe(1) + a.bpe(3))) + a.tensor_bytes(4)
    return Estimate(0.0, float(nbytes), VECTOR, a.precision(0), f"{n} slots x {rk}+{rv}")


register("gather", ["aten::embedding"], embedding, wrapper=True)  # it calls index_select
register("gather", ["aten::index_select"], index_select)
register("gather", ["aten::gather"], gather)
register("gather", ["aten::embedding_backward", "aten::embedding_dense_backward"], embedding_backward)
register(
    "gather",
    ["sglang::store_cache", "_C_cache_ops::reshape_and_cache_flash", "_C_cache_ops::reshape_and_cache"],
    kv_cache_write,
)
