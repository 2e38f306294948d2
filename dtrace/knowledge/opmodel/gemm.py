"""Matrix products: ``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``_scaled_mm`` (fp8), ``_grouped_mm``,
and the composites ``matmul`` and ``linear`` (docs/semantics.md, "Op performance model").

For ``C = A·B`` with ``A`` of M×K and ``B`` of K×N (a batch of ``b`` such products):

    FLOPs = b · 2·M·N·K  (+ b·M·N for an added bias/input C)
    bytes = every tensor operand read once + the output written once
            (A, B, a bias or added C, fp8 scales, group offsets; the output M×N in its own type)

Each operand counts in its own element type; the output has the first matrix's type, or the
``out_dtype`` an op names (``_scaled_mm`` of fp8 to bf16), or an ``out=`` tensor's (``mm.out``,
which Inductor calls: that tensor is written, not read). Assumptions: operands are read from
and the output written to HBM exactly once (perfect reuse on chip); a transposed operand costs
nothing extra. ``linear`` and ``matmul`` are wrappers (they own only the GPU work no inner
``mm``/``addmm``/``bmm`` owns), so their inner products are the modelled ops, as TraceLens
models them.

The serving libraries' linear layers have ``linear``'s semantics, ``Y = X·Wᵀ (+ bias)`` with
``X`` of ``(..., K)`` and ``W`` of N×K: ``aiter::gemm_a16w16(A, B, bias, otype, scale_a,
scale_b, scale_c)`` (aiter's ``tuned_gemm``; the output in ``otype``, else A's type; the
optional per-tensor scales read) and ``vllm::rocm_unquantized_gemm(x, weight, bias)``. They own
the ``aten::mm`` they may fall back to.
"""

from __future__ import annotations

from math import prod

from ._args import NotModelled, OpArgs, broadcast, bytes_per_element
from .base import MATRIX, Estimate, register

# input arguments of each product: a tensor after them is an ``out=`` tensor (``mm.out``, as
# Inductor calls it): the output, written, not read
_INPUTS = {
    "aten::mm": 2, "aten::bmm": 2, "aten::mv": 2, "aten::dot": 2, "aten::vdot": 2, "aten::matmul": 2,
    "aten::addmm": 3, "aten::_addmm_activation": 3, "aten::baddbmm": 3, "aten::linear": 3,
    "vllm::rocm_unquantized_gemm": 3, "aten::_grouped_mm": 4, "aten::_scaled_mm": 6, "aten::_scaled_grouped_mm": 7,
}  # fmt: skip


def _inputs(a: OpArgs) -> tuple[float, int]:
    """Bytes of the tensor arguments read (the inputs) and the position of an ``out=`` tensor (-1: none)."""
    n = min(_INPUTS.get(a.name, len(a)), len(a))
    outs = [i for i in range(n, len(a)) if a.has(i)]
    return float(sum(a.tensor_bytes(i) for i in range(n) if a.has(i))), outs[0] if outs else -1


def _matrix(a: OpArgs, i: int) -> tuple[int, int]:
    s = a.shape(i)
    if len(s) != 2:
        raise NotModelled(f"argument {i} of {a.name} is not a matrix: {list(s)}")
    return s[0], s[1]


def _estimate(
    a: OpArgs, batch: int, m: int, n: int, k: int, *, bias: bool, out_elems: int, out_bpe: float, prec: str
) -> Estimate:
    flops = batch * 2.0 * m * n * k + (batch * m * n if bias else 0)
    params = f"M={m} N={n} K={k}" + (f" batch={batch}" if batch != 1 else "") + (" +bias" if bias else "")
    reads, out_at = _inputs(a)
    return Estimate(flops, reads + out_elems * (a.bpe(out_at) if out_at >= 0 else out_bpe), MATRIX, prec, params)


def mm(a: OpArgs) -> Estimate:
    """``aten::mm(A, B)``.

    Examples
    --------
    >>> e = mm(OpArgs.parse("aten::mm", "[[4096, 4096], [4096, 4096]]", '["c10::BFloat16", "c10::BFloat16"]', ""))
    >>> e.flops == 2 * 4096**3, e.bytes == 3 * 4096 * 4096 * 2, e.precision
    (True, True, 'bf16')
    """
    m, k = _matrix(a, 0)
    k2, n = _matrix(a, 1)
    if k != k2:
        raise NotModelled(f"{a.name}: inner dimensions differ ({k} and {k2})")
    return _estimate(a, 1, m, n, k, bias=False, out_elems=m * n, out_bpe=a.bpe(0), prec=a.precision(0))


def addmm(a: OpArgs) -> Estimate:
    """``aten::addmm(C, A, B, beta, alpha)`` and ``aten::_addmm_activation``: ``A·B`` plus C."""
    m, k = _matrix(a, 1)
    _, n = _matrix(a, 2)
    return _estimate(a, 1, m, n, k, bias=True, out_elems=m * n, out_bpe=a.bpe(1), prec=a.precision(1))


def bmm(a: OpArgs) -> Estimate:
    """``aten::bmm(A, B)``: a batch of products of the same shapes."""
    sa, sb = a.shape(0), a.shape(1)
    if len(sa) != 3 or len(sb) != 3:
        raise NotModelled(f"{a.name} needs 3-d operands, got {list(sa)} and {list(sb)}")
    b, m, k = sa
    return _estimate(a, b, m, sb[2], k, bias=False, out_elems=b * m * sb[2], out_bpe=a.bpe(0), prec=a.precision(0))


def baddbmm(a: OpArgs) -> Estimate:
    """``aten::baddbmm(C, A, B, beta, alpha)``: a batch of products plus C."""
    sa, sb = a.shape(1), a.shape(2)
    if len(sa) != 3 or len(sb) != 3:
        raise NotModelled(f"{a.name} needs 3-d operands, got {list(sa)} and {list(sb)}")
    b, m, k = sa
    return _estimate(a, b, m, sb[2], k, bias=True, out_elems=b * m * sb[2], out_bpe=a.bpe(1), prec=a.precision(1))


def scaled_mm(a: OpArgs) -> Estimate:
    """``aten::_scaled_mm(A, B, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)``:
    an fp8 product; the output in ``out_dtype`` (else A's type)."""
    m, k = _matrix(a, 0)
    _, n = _matrix(a, 1)
    out = a.scalar_type(6)
    out_bpe = bytes_per_element(out) if out else a.bpe(0)
    return _estimate(
        a, 1, m, n, k, bias=a.present(4), out_elems=m * n, out_bpe=out_bpe or a.bpe(0), prec=a.precision(0)
    )


def grouped_mm(a: OpArgs) -> Estimate:
    """``aten::_grouped_mm(A, B, offs, bias, out_dtype)`` (and ``_scaled_grouped_mm``): G products.

    By the operands' ranks: 2-d A (M_total×K) and 3-d B (G×K×N), the rows of A split into groups
    (mixture-of-experts forward); 3-d and 3-d, a batch; 2-d and 2-d, K split into groups (the
    output G×M×N, a weight gradient); 3-d A and 2-d B, the columns of B split. FLOPs are
    ``2·M·N·K`` over all groups, however the rows are split.
    """
    plain = a.name == "aten::_grouped_mm"
    offs_at, out_at = (2, 4) if plain else (4, 7)
    sa, sb = a.shape(0), a.shape(1)
    if len(sa) == 2 and len(sb) == 3:
        (m, k), (g, _, n) = sa, sb
        batch, out = 1, m * n
    elif len(sa) == 3 and len(sb) == 3:
        (g, m, k), n = sa, sb[2]
        batch, out = g, g * m * n
    elif len(sa) == 2 and len(sb) == 2:
        (m, k), n = sa, sb[1]
        g = a.numel(offs_at) if a.present(offs_at) else 1
        batch, out = 1, g * m * n
    elif len(sa) == 3 and len(sb) == 2:
        (g, m, k), n = sa, sb[1]
        batch, out = 1, m * n
    else:
        raise NotModelled(f"{a.name}: operands of ranks {len(sa)} and {len(sb)}")
    out_type = a.scalar_type(out_at)
    out_bpe = (bytes_per_element(out_type) if out_type else None) or a.bpe(0)
    e = _estimate(a, batch, m, n, k, bias=False, out_elems=out, out_bpe=out_bpe, prec=a.precision(0))
    return Estimate(e.flops, e.bytes, e.unit, e.precision, e.params + f" groups={g}")


def matmul(a: OpArgs) -> Estimate:
    """``aten::matmul(A, B)`` with numpy's rules (1-d operands, broadcast batch dimensions)."""
    sa, sb = a.shape(0), a.shape(1)
    if not sa or not sb:
        raise NotModelled(f"{a.name} of a 0-d tensor")
    m, k = (1, sa[0]) if len(sa) == 1 else sa[-2:]
    n = 1 if len(sb) == 1 else sb[-1]
    batch = prod(broadcast(sa[:-2], sb[:-2] if len(sb) > 1 else ()))
    return _estimate(a, batch, m, n, k, bias=False, out_elems=batch * m * n, out_bpe=a.bpe(0), prec=a.precision(0))


def linear(a: OpArgs, otype_at: int = -1) -> Estimate:
    """``aten::linear(X, W, bias)``: ``X·Wᵀ (+ bias)`` with X of ``(..., K)`` and W of N×K; the
    output in the type a ``dtype`` argument at ``otype_at`` names, else X's."""
    sx = a.shape(0)
    n, k = _matrix(a, 1)
    if not sx or sx[-1] != k:
        raise NotModelled(f"{a.name}: input {list(sx)} does not match weight {[n, k]}")
    m = a.numel(0) // k
    otype = a.scalar_type(otype_at) if otype_at >= 0 else None
    out_bpe = (bytes_per_element(otype) if otype else None) or a.bpe(0)
    return _estimate(a, 1, m, n, k, bias=a.present(2), out_elems=m * n, out_bpe=out_bpe, prec=a.precision(0))


def aiter_gemm_a16w16(a: OpArgs) -> Estimate:
    """``aiter::gemm_a16w16(A, B, bias, otype, scale_a, scale_b, scale_c)``: ``A·Bᵀ`` (B of N×K).

    Examples
    --------
    >>> e = aiter_gemm_a16w16(OpArgs.parse("aiter::gemm_a16w16", "[[15360, 4096], [6144, 4096], [], [], [], [], []]",
    ...     '["c10::BFloat16", "c10::BFloat16", "", "Scalar", "", "", ""]', '["", "", "", "15", "", "", ""]'))
    >>> e.flops == 2 * 15360 * 6144 * 4096, e.bytes == (15360 * 4096 + 6144 * 4096 + 15360 * 6144) * 2
    (True, True)
    """
    return linear(a, otype_at=3)


def mv(a: OpArgs) -> Estimate:
    """``aten::mv(A, x)``: a matrix-vector product (2·M·N FLOPs)."""
    m, n = _matrix(a, 0)
    return _estimate(a, 1, m, 1, n, bias=False, out_elems=m, out_bpe=a.bpe(0), prec=a.precision(0))


def dot(a: OpArgs) -> Estimate:
    """``aten::dot(a, b)``: 2·N FLOPs, one element out."""
    n = a.numel(0)
    return _estimate(a, 1, 1, 1, n, bias=False, out_elems=1, out_bpe=a.bpe(0), prec=a.precision(0))


register("gemm", ["aten::mm"], mm)
register("gemm", ["aten::addmm", "aten::_addmm_activation"], addmm)
register("gemm", ["aten::bmm"], bmm)
register("gemm", ["aten::baddbmm"], baddbmm)
register("gemm", ["aten::_scaled_mm"], scaled_mm)
register("gemm", ["aten::_grouped_mm", "aten::_scaled_grouped_mm"], grouped_mm)
register("gemm", ["aten::mv"], mv)
register("gemm", ["aten::dot", "aten::vdot"], dot)
register("gemm", ["aten::matmul"], matmul, wrapper=True)
register("gemm", ["aten::linear"], linear, wrapper=True)
register("gemm", ["aiter::gemm_a16w16"], aiter_gemm_a16w16)
register("gemm", ["vllm::rocm_unquantized_gemm"], linear)
