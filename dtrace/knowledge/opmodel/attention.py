"""Attention: every ``scaled_dot_product_attention`` backend, flash-attention forward, backward
and varlen (docs/semantics.md, "Op performance model").

Per batch element and query head, with ``P`` the (query, key) pairs attended:

    forward   FLOPs = 2·P·d_qk (S = QKᵀ) + 2·P·d_v (O = PV)
    backward  FLOPs = 2·P·d_qk (S recomputed) + 2·P·d_v (dV) + 2·P·d_v (dP) + 2·P·d_qk (dQ)
                      + 2·P·d_qk (dK), plus the sums of dK and dV over the query heads that
                      share a key head (grouped-query attention)
    forward   bytes = Q + K + V read, O written
    backward  bytes = Q + K + V + O + dO read, dQ + dK + dV written

times ``B·H_q``. ``P = N_q·N_kv`` without a mask; with ``is_causal`` it is the number of pairs
the causal mask keeps, exactly: ``Σᵢ min(i + 1, N_kv)`` for PyTorch's top-left aligned mask
(``N(N + 1)/2`` for ``N_q = N_kv = N``), ``Σᵢ clamp(i + 1 + N_kv − N_q, 0, N_kv)`` for
flash-attention's bottom-right aligned one. Softmax FLOPs are left out (an order of ``d``
smaller). Every tensor counts in its own element type. Every fused backward recomputes the
scores (flash, memory-efficient and cuDNN kernels all do). Varlen ops record only the total
tokens, the number of sequences and the longest one: one sequence of the longest length and the
rest of equal length is assumed (TraceLens's estimate). Assumptions: Q, K, V, O stream through
HBM once (the tiles' re-reads hit the cache); the softmax statistics and dropout masks are not
counted.

**Serving attention** reads the keys and values of every sequence of the step from a paged KV
cache; its recorded arguments hold the step's query tokens (and the cache) but not the
sequences. With ``Σsq`` the query tokens, ``Σsk`` the keys of all sequences and ``P`` the pairs
(causal: ``Σ (sq·sk − sq(sq−1)/2)``, each sequence's queries being its last ``sq`` positions):

    FLOPs = 2·H_q·P·(d_qk + d_v)
    bytes = Σsq·H_q·(d_qk·size(q) + d_v·size(o))  (Q read, O written)
            + Σsk·H_kv·(d_qk·size(k) + d_v·size(v))  (each sequence's keys and values read once)

The sums come from the step's annotation (:mod:`.serving`) where the trace has one and its
queries are the op's (``Σsq`` at most its query rows: padding tokens attend to nothing):
``vllm::unified_attention_with_output(query, key, value, output, ..)`` (causal: a decoder's
layers) is modelled only then. ``aiter::mha_batch_prefill(q, k_cache, v_cache, cu_seqlens_q,
kv_indptr, kv_page_indices, max_seqlen_q, max_seqlen_k, dropout, scale, soft_cap, zero_tensors,
is_causal, ..)`` falls back on its arguments: ``n`` sequences (``cu_seqlens_q``), the longest
query ``max_seqlen_q`` and the rest equal (the varlen convention above), every sequence with the
same cached prefix ``max_seqlen_k − max_seqlen_q`` (none when they are equal: a plain prefill).
The sequence metadata (offsets, page tables) is not counted.
"""

from __future__ import annotations

from collections.abc import Callable

from ._args import NotModelled, OpArgs
from .base import MATRIX, Estimate, register

BHND, BNHD, THD = "bhnd", "bnhd", "thd"  # layouts: (batch, heads, seq, dim), (batch, seq, heads, dim), varlen


def causal_pairs(nq: int, nkv: int, bottom_right: bool = False) -> int:
    """Pairs a causal mask keeps for ``nq`` queries and ``nkv`` keys.

    Examples
    --------
    >>> causal_pairs(4, 4), causal_pairs(2, 4), causal_pairs(2, 4, bottom_right=True), causal_pairs(4, 2)
    (10, 3, 7, 7)
    """
    shift = nkv - nq if bottom_right else 0
    # row i keeps clamp(i + 1 + shift, 0, nkv) keys: none before row `first`, all from row `full` on
    first = min(nq, max(0, -shift))
    full = min(nq, max(first, nkv - 1 - shift))
    ramp = (full - first) * (1 + shift) + (full * (full - 1) - first * (first - 1)) // 2
    return ramp + (nq - full) * nkv


def _dims(a: OpArgs, i: int, layout: str) -> tuple[int, int, int, int]:
    """(batch, heads, seq, head dim) of tensor argument ``i``."""
    s = a.shape(i)
    if layout == THD:
        if len(s) != 3:
            raise NotModelled(f"{a.name}: argument {i} is not (tokens, heads, dim): {list(s)}")
        return 1, s[1], s[0], s[2]
    if len(s) != 4:
        raise NotModelled(f"{a.name}: argument {i} is not 4-d: {list(s)}")
    b, x, y, d = s
    return (b, x, y, d) if layout == BHND else (b, y, x, d)


def _attention(
    a: OpArgs,
    q_at: int,
    layout: str,
    causal: bool,
    backward: bool,
    bottom_right: bool = False,
    seqs: tuple[int, int, int, int] | None = None,
) -> Estimate:
    b, hq, nq, dqk = _dims(a, q_at, layout)
    bk, hkv, nkv, dk = _dims(a, q_at + 1, layout)
    bv, hv, nv, dv = _dims(a, q_at + 2, layout)
    if b != bk or b != bv or hkv != hv or nkv != nv or dqk != dk or hkv == 0 or hq % hkv:
        raise NotModelled(f"{a.name}: q, k, v shapes do not fit together")
    if seqs is not None:  # varlen: (sequences q, sequences kv, longest q, longest kv)
        n_q, n_kv, max_q, max_kv = seqs
        pairs = _pairs(max_q, max_kv, causal, bottom_right)
        if n_q > 1 and n_kv > 1:
            pairs += (n_q - 1) * _pairs((nq - max_q) // (n_q - 1), (nkv - max_kv) // (n_kv - 1), causal, bottom_right)
    else:
        pairs = _pairs(nq, nkv, causal, bottom_right)
    heads = b * hq
    fwd = heads * 2.0 * pairs * (dqk + dv)
    q, k, v = a.tensor_bytes(q_at), a.tensor_bytes(q_at + 1), a.tensor_bytes(q_at + 2)
    o = b * hq * nq * dv * a.bpe(q_at)
    params = f"B={b} heads={hq}" + (f"/{hkv}" if hkv != hq else "") + f" Nq={nq} Nkv={nkv} d={dqk}"
    params += (" causal" if causal else "") + (f" seqs={seqs[0]}" if seqs is not None else "")
    if not backward:
        return Estimate(fwd, q + k + v + o, MATRIX, a.precision(q_at), params)
    reduce_gqa = b * nkv * (dqk + dv) * (hq // hkv - 1)
    flops = heads * 2.0 * pairs * (3 * dqk + 2 * dv) + reduce_gqa
    return Estimate(flops, 2 * (q + k + v + o), MATRIX, a.precision(q_at), params)


def _pairs(nq: int, nkv: int, causal: bool, bottom_right: bool) -> float:
    return float(causal_pairs(nq, nkv, bottom_right) if causal else nq * nkv)


def _model(
    q_at: int, layout: str, causal_at: int, backward: bool, mask_type: bool = False, bottom_right: bool = False
) -> Callable[[OpArgs], Estimate]:
    def model(a: OpArgs) -> Estimate:
        if mask_type:  # xformers' custom_mask_type: 0 none, 1 causal from the top left, 2 from the bottom right
            kind = a.integer(causal_at, 0)
            return _attention(a, q_at, layout, kind > 0, backward, bottom_right=kind == 2)
        return _attention(a, q_at, layout, a.flag(causal_at), backward, bottom_right=bottom_right)

    return model


def _varlen(q_at: int, cu_at: int, max_at: int, causal_at: int, backward: bool) -> Callable[[OpArgs], Estimate]:
    def model(a: OpArgs) -> Estimate:
        seqs = (a.numel(cu_at) - 1, a.numel(cu_at + 1) - 1, a.integer(max_at, 0), a.integer(max_at + 1, 0))
        if min(seqs) < 1:
            raise NotModelled(f"{a.name}: sequence lengths not recorded")
        return _attention(a, q_at, THD, a.flag(causal_at), backward, bottom_right=True, seqs=seqs)

    return model


def _serving(a: OpArgs, o_at: int, sq: int, sk: int, pairs: float, params: str) -> Estimate:
    """Attention over a paged KV cache of the step's sums (the module docs): q at 0, the key
    and value tensors (or caches) at 1 and 2, ``(.., heads, dim)``; the output's type at ``o_at``
    (-1: q's)."""
    sq_shape, sk_shape, sv_shape = a.shape(0), a.shape(1), a.shape(2)
    if len(sq_shape) != 3 or len(sk_shape) < 3 or len(sv_shape) < 3 or sq < 1 or sq > sq_shape[0]:
        raise NotModelled(f"{a.name}: q {list(sq_shape)} is not (tokens, heads, dim) for {sq} query tokens")
    _, hq, dqk = sq_shape
    hkv, dv = sk_shape[-2], sv_shape[-1]
    if hkv < 1 or hq % hkv or sk_shape[-1] != dqk:
        raise NotModelled(f"{a.name}: q, k, v heads do not fit together")
    bpe_o = a.bpe(o_at) if o_at >= 0 and a.present(o_at) else a.bpe(0)
    nbytes = sq * hq * (dqk * a.bpe(0) + dv * bpe_o) + sk * hkv * (dqk * a.bpe(1) + dv * a.bpe(2))
    flops = 2.0 * hq * pairs * (dqk + dv)
    return Estimate(flops, float(nbytes), MATRIX, a.precision(0), f"heads={hq}/{hkv} d={dqk} {params}")


def _step_sums(a: OpArgs, causal: bool) -> tuple[int, int, float, str] | None:
    """``(Σsq, Σsk, pairs, params)`` from the step's annotation, None if the trace has none."""
    if a.step is None:
        return None
    sq, sk, pairs = a.step.total(causal)
    c, g = a.step.context.n, a.step.generation.n
    return sq, sk, float(pairs), f"sq={sq} sk={sk} seqs={c}+{g}" + (" causal" if causal else "")


def unified_attention(a: OpArgs) -> Estimate:
    """``vllm::unified_attention_with_output(query, key, value, output, layer_name, ..)``."""
    sums = _step_sums(a, causal=True)
    if sums is None:
        raise NotModelled(f"{a.name}: the step's sequences are not recorded (no execute_.._context_.. annotation)")
    return _serving(a, 3, *sums)


def mha_batch_prefill(a: OpArgs) -> Estimate:
    """``aiter::mha_batch_prefill(q, k_cache, v_cache, cu_seqlens_q, kv_indptr, ..)``: the module docs.

    Examples
    --------
    >>> e = mha_batch_prefill(OpArgs.parse("aiter::mha_batch_prefill",
    ...     "[[8, 4, 16], [99, 2, 16], [99, 2, 16], [3], [3], [8], [], [], [], [], [], [], []]",
    ...     '["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "int", "int", "int"' + ', "Scalar"' * 7 + "]",
    ...     '["", "", "", "", "", "", "4", "4", "0.", "0.25", "0.", "False", "True"]'))
    >>> e.flops == 2 * 4 * 2 * 10 * 32, e.bytes == 8 * 4 * 32 * 2 + 8 * 2 * 32 * 2  # 2 sequences of 4: 10 pairs each
    (True, True)
    """
    causal = a.flag(12)
    sums = _step_sums(a, causal)
    if sums is None or sums[0] > a.shape(0)[0]:
        sums = _prefill_sums(a, causal)
    return _serving(a, -1, *sums)


def _prefill_sums(a: OpArgs, causal: bool) -> tuple[int, int, float, str]:
    """``(Σsq, Σsk, pairs, params)`` of a batch prefill from its arguments (the module docs)."""
    n, tq = a.numel(3) - 1, a.shape(0)[0]
    max_q, max_k = a.integer(6, 0), a.integer(7, 0)
    if n < 1 or max_q < 1 or max_q > tq:
        raise NotModelled(f"{a.name}: sequence lengths not recorded")
    prefix = max(max_k - max_q, 0)
    pairs = _pairs(max_q, max_q + prefix, causal, True)
    if n > 1:
        rest = (tq - max_q) // (n - 1)
        pairs += (n - 1) * _pairs(rest, rest + prefix, causal, True)
    params = f"sq={tq} seqs={n} max_q={max_q} prefix={prefix}" + (" causal" if causal else "")
    return tq, tq + n * prefix, pairs, params


def _flash_attn_backward(a: OpArgs) -> Estimate:
    """``flash_attn::_flash_attn_backward``: ``causal`` follows ``softmax_scale`` (position 11 in
    flash-attention 2.x; 10 in older releases)."""
    at = 11 if a.text(11) in ("True", "False") else 10
    return _attention(a, 1, BNHD, a.flag(at), True, bottom_right=True)


# (name, q position, layout, is_causal position, backward)
_SDPA = [
    ("aten::_scaled_dot_product_flash_attention", 0, BHND, 4, False),
    ("aten::_scaled_dot_product_efficient_attention", 0, BHND, 6, False),
    ("aten::_scaled_dot_product_cudnn_attention", 0, BHND, 6, False),
    ("aten::_scaled_dot_product_attention_math", 0, BHND, 5, False),
    ("aten::_scaled_dot_product_fused_attention_overrideable", 0, BHND, 5, False),
    ("aten::_flash_attention_forward", 0, BNHD, 8, False),
    ("aten::_cudnn_attention_forward", 0, BHND, 10, False),
    ("aten::_scaled_dot_product_flash_attention_backward", 1, BHND, 11, True),
    ("aten::_scaled_dot_product_efficient_attention_backward", 1, BHND, 11, True),
    ("aten::_scaled_dot_product_cudnn_attention_backward", 1, BHND, 14, True),
    ("aten::_flash_attention_backward", 1, BNHD, 11, True),
    ("aten::_cudnn_attention_backward", 1, BHND, 14, True),
]
for _name, _q, _layout, _causal, _bwd in _SDPA:
    register("attention", [_name], _model(_q, _layout, _causal, _bwd))
register("attention", ["aten::_efficient_attention_forward"], _model(0, BNHD, 9, False, mask_type=True))
register("attention", ["aten::_efficient_attention_backward"], _model(1, BNHD, 14, True, mask_type=True))
register("attention", ["aten::scaled_dot_product_attention"], _model(0, BHND, 5, False), wrapper=True)
register(
    "attention", ["flash_attn::_flash_attn_forward", "FlashAttnFunc"], _model(0, BNHD, 5, False, bottom_right=True)
)
register("attention", ["flash_attn::_flash_attn_backward"], _flash_attn_backward)
register("attention", ["flash_attn::_flash_attn_varlen_forward"], _varlen(0, 3, 5, 9, False))
register("attention", ["flash_attn::_flash_attn_varlen_backward"], _varlen(1, 9, 11, 15, True))
register("attention", ["vllm::unified_attention_with_output"], unified_attention, step=True)
register("attention", ["aiter::mha_batch_prefill"], mha_batch_prefill, step=True)
