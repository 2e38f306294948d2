"""Elementwise ops, unary, binary and ternary, broadcasting included (docs/semantics.md, "Op
performance model").

With ``y`` the broadcast shape of the tensor arguments:

    FLOPs = |y|                       (one per output element, whatever the function)
    bytes = Σ |xᵢ|·size(xᵢ)  + |y|·size(y)

Every tensor input is read once at its own shape (a broadcast operand is read once, not once
per output element; a 0-dim tensor counts one element), Python scalars (``Scalar``) are kernel
arguments and cost nothing; a tensor after the op's inputs (unary 1, binary 2, ternary 3) is an
``out=`` tensor, written, not read. The output's element type: an ``out=`` tensor's, the first
argument's for in-place ops
(``add_``: ``self`` is written), ``bool`` for comparisons, else the widest type among the
arguments with at least one dimension (type promotion; 0-dim tensors do not promote), else the
first argument's. Assumptions: no reuse between ops (each op's operands come from HBM); the
arithmetic per element is negligible next to the memory traffic, so one FLOP per element is a
convention that only places the op on the roofline chart.

The serving libraries' fused elementwise kernels:

    act_and_mul(out[.., d], x[.., 2d])   FLOPs = 2·|out| (the activation by the convention above,
                                          and the product with the gate)
                                          bytes = |x|·size(x) + |out|·size(out)
    rotary_embedding(positions[T], q[T, Hq·h], k[T, Hk·h], h, cos_sin_cache[P, r], is_neox)
                                          FLOPs = 3·T·(Hq + Hk)·r (each rotated element x·cos ∓ y·sin)
                                          bytes = 2·T·(Hq + Hk)·r·size(q) (rotated in place: read, written)
                                                  + T·size(positions) + T·r·size(cache) (each token's row)

``act_and_mul`` is ``silu_and_mul``, ``gelu_and_mul`` and ``gelu_tanh_and_mul`` of SGLang
(``sgl_kernel::``) and vLLM (``_C::``); ``rotary_embedding`` likewise (``h``: the head size, ``r``
the rotary dimension, the cache's last dimension, of which the first half are cosines; a head's
elements past ``r`` are not touched).
"""

from __future__ import annotations

from math import prod

from ._args import NotModelled, OpArgs, broadcast, bytes_per_element, is_floating
from .base import VECTOR, Estimate, register

UNARY = [
    "abs", "neg", "relu", "gelu", "silu", "sigmoid", "tanh", "exp", "exp2", "log", "log1p", "log2", "expm1",
    "sqrt", "rsqrt", "reciprocal", "sin", "cos", "erf", "erfinv", "hardtanh", "hardsigmoid", "hardswish",
    "leaky_relu", "elu", "selu", "celu", "softplus", "mish", "square", "sign", "floor", "ceil", "round", "trunc",
    "nan_to_num", "threshold", "logical_not", "bitwise_not", "isnan", "isinf",
]  # fmt: skip
BINARY = [
    "add", "sub", "rsub", "mul", "div", "pow", "clamp_min", "clamp_max", "remainder", "fmod", "maximum", "minimum",
    "atan2", "hypot", "xlogy", "bitwise_and", "bitwise_or", "bitwise_xor", "threshold_backward", "sigmoid_backward",
    "tanh_backward", "gelu_backward", "silu_backward", "hardtanh_backward", "leaky_relu_backward", "elu_backward",
    "hardsigmoid_backward", "hardswish_backward", "softplus_backward", "mish_backward",
]  # fmt: skip
TERNARY = ["clamp", "where", "addcmul", "addcdiv", "lerp", "masked_fill"]
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "isclose"]
ARITY = {**{n: 1 for n in UNARY}, **{n: 2 for n in BINARY + COMPARE}, **{n: 3 for n in TERNARY}}
"""Positional inputs of each op: a tensor argument after them is an ``out=`` tensor (written, not read)."""


def _in_place(name: str) -> bool:
    return name.endswith("_") and not name.endswith("__")


def elementwise(a: OpArgs) -> Estimate:
    """An elementwise op over its tensor arguments (see the module docs).

    Examples
    --------
    >>> e = elementwise(OpArgs.parse("aten::add", "[[8, 4], [4], []]", '["c10::BFloat16", "c10::BFloat16", "Scalar"]', ""))
    >>> e.flops, e.bytes  # reads 32 + 4 elements, writes 32, 2 bytes each
    (32.0, 136.0)
    """
    short = a.name.split("::")[-1]
    arity = ARITY.get(short.rstrip("_"), len(a))
    tensors = [i for i in range(min(arity, len(a))) if a.has(i)]
    outs = [i for i in range(arity, len(a)) if a.has(i)]
    if not tensors:
        raise NotModelled(f"{a.name} has no tensor argument with a known element type")
    y = broadcast(*(a.shape(i) for i in tensors))
    n_out = prod(y)
    out_bpe = bytes_per_element(_output_type(a, short, tensors, outs)) or a.bpe(tensors[0])
    reads = sum(a.tensor_bytes(i) for i in tensors)
    floating = [i for i in tensors if is_floating(a.dtype(i))]
    prec = a.precision(floating[0] if floating else tensors[0])
    return Estimate(float(n_out), float(reads + n_out * out_bpe), VECTOR, prec, "x".join(map(str, y)) or "scalar")


def _output_type(a: OpArgs, short: str, tensors: list[int], outs: list[int]) -> str:
    """The element type of the output: an ``out=`` tensor's, ``bool`` for a comparison, the
    first tensor's in place, else the widest of the tensors with a rank (the first on a tie)."""
    if outs:  # an out= tensor: its type is the output's
        return a.dtype(outs[0])
    if short.rstrip("_") in COMPARE:
        return "bool"
    if _in_place(short):
        return a.dtype(tensors[0])
    ranked = [i for i in tensors if len(a.shape(i)) > 0] or tensors[:1]
    return a.dtype(max(ranked, key=lambda i: (a.bpe(i), -i)))


def _names(shorts: list[str]) -> list[str]:
    return [f"aten::{s}{suffix}" for s in shorts for suffix in ("", "_")]


COMPOSITES = ["aten::relu", "aten::relu_", "aten::rsub", "aten::masked_fill", "aten::square", "aten::square_"]
"""Ops that only call another elementwise op (``relu`` → ``clamp_min``, ``rsub`` → ``sub``,
``masked_fill`` → ``clone`` + ``masked_fill_``): wrappers, so the inner op is the modelled one
(as TraceLens names it) and they own only work no inner op owns."""

register("elementwise", [n for n in _names(UNARY + BINARY + TERNARY + COMPARE) if n not in COMPOSITES], elementwise)
register("elementwise", COMPOSITES, elementwise, wrapper=True)


def act_and_mul(a: OpArgs) -> Estimate:
    """``silu_and_mul(out, x)`` and the other gated activations: ``out = act(x[.., :d]) · x[.., d:]``.

    Examples
    --------
    >>> e = act_and_mul(OpArgs.parse("sgl_kernel::silu_and_mul", "[[4, 8], [4, 16]]", '["c10::BFloat16", "c10::BFloat16"]', ""))
    >>> e.flops, e.bytes  # 32 outputs; 64 elements read, 32 written, 2 bytes each
    (64.0, 192.0)
    """
    so, sx = a.shape(0), a.shape(1)
    if not so or not sx or sx[:-1] != so[:-1] or sx[-1] != 2 * so[-1]:
        raise NotModelled(f"{a.name}: input {list(sx)} is not twice the output {list(so)}")
    n = a.numel(0)
    return Estimate(2.0 * n, float(a.tensor_bytes(1) + a.tensor_bytes(0)), VECTOR, a.precision(1), f"{n} outputs")


def rotary_embedding(a: OpArgs) -> Estimate:
    """``rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)``: the module docs.

    Examples
    --------
    >>> e = rotary_embedding(OpArgs.parse("sgl_kernel::rotary_embedding", "[[4], [4, 256], [4, 128], [], [64, 128], []]",
    ...     '["long int", "c10::BFloat16", "c10::BFloat16", "Scalar", "c10::BFloat16", "Scalar"]', '["", "", "", "128", "", "True"]'))
    >>> e.flops == 3 * 4 * (2 + 1) * 128, e.bytes == 2 * 4 * 3 * 128 * 2 + 4 * 8 + 4 * 128 * 2
    (True, True)
    """
    t, h, cache = a.numel(0), a.integer(3, 0), a.shape(4)
    if t <= 0 or h <= 0 or len(cache) != 2 or not 0 < cache[1] <= h:
        raise NotModelled(f"{a.name}: positions, head size or cos/sin cache not understood")
    rot = cache[1]
    rotated_q = a.numel(1) // (t * h) * t * rot
    rotated_k = a.numel(2) // (t * h) * t * rot if a.present(2) else 0
    nbytes = 2 * (rotated_q * a.bpe(1) + (rotated_k * a.bpe(2) if rotated_k else 0))
    nbytes += a.tensor_bytes(0) + t * rot * a.bpe(4)
    params = f"T={t} heads={a.numel(1) // (t * h)}/{a.numel(2) // (t * h) if a.present(2) else 0} rot={rot}"
    return Estimate(3.0 * (rotated_q + rotated_k), float(nbytes), VECTOR, a.precision(1), params)


_SERVING = ("sgl_kernel", "_C")
register(
    "elementwise",
    [f"{ns}::{f}" for ns in _SERVING for f in ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul")],
    act_and_mul,
)
register("elementwise", [f"{ns}::rotary_embedding" for ns in _SERVING], rotary_embedding)
