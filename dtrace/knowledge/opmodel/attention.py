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
