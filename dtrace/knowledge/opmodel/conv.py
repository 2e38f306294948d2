"""Convolutions forward and backward: ``aten::convolution``, ``aten::convolution_backward``
(docs/semantics.md, "Op performance model").

With input ``x`` of ``(N, C_in, *spatial)``, weight ``w`` of ``(C_out, C_in/groups, *kernel)``
(transposed: ``(C_in, C_out/groups, *kernel)``) and output ``y``:

    FLOPs = 2 · |y| · |w[1:]|     (transposed: 2 · |x| · |w[1:]|; ``|w[1:]|`` already divides by
                                   the groups)  + |y| for the bias
    bytes = |x| + |w| + |y| (+ C_out for the bias), each in its element type

``y``'s spatial size per dimension is ``⌊(in + 2·pad − dil·(k − 1) − 1) / stride⌋ + 1``
(transposed: ``(in − 1)·stride − 2·pad + dil·(k − 1) + out_pad + 1``). The backward op computes
the gradients its ``output_mask`` asks for: the input gradient (a convolution of the output
gradient: the forward FLOPs; reads ``dy`` and ``w``, writes ``dx``), the weight gradient (the
forward FLOPs; reads ``dy`` and ``x``, writes ``dw``) and the bias gradient (a sum over ``dy``:
``|y|`` FLOPs, reads ``dy``, writes ``C_out``). Assumptions: every tensor crosses HBM once per
gradient computed (no fusion between them); implicit-GEMM padding and layout transforms cost
nothing.
"""

from __future__ import annotations

from math import prod
from typing import TypedDict

from ._args import NotModelled, OpArgs
from .base import MATRIX, Estimate, register


def _per_dim(v: list[int] | None, nd: int, default: int) -> list[int]:
    if not v:
        return [default] * nd
    if len(v) == 1:
        return v * nd
    if len(v) != nd:
        raise NotModelled(f"a convolution parameter {v} for {nd} spatial dimensions")
    return v


def output_shape(
    x: tuple[int, ...],
    w: tuple[int, ...],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    transposed: bool,
    output_padding: list[int],
    groups: int,
) -> tuple[int, ...]:
    """The output shape of a convolution.

    Examples
    --------
    >>> output_shape((1, 3, 1008, 1008), (1024, 3, 14, 14), [14, 14], [0, 0], [1, 1], False, [0, 0], 1)
    (1, 1024, 72, 72)
    >>> output_shape((1, 8, 5, 5), (8, 4, 3, 3), [2, 2], [1, 1], [1, 1], True, [1, 1], 1)
    (1, 4, 10, 10)
    """
    sp = []
    for i, size in enumerate(x[2:]):
        k, s, p, d = w[2 + i], stride[i], padding[i], dilation[i]
        if transposed:
            sp.append((size - 1) * s - 2 * p + d * (k - 1) + output_padding[i] + 1)
        else:
            sp.append((size + 2 * p - d * (k - 1) - 1) // s + 1)
    c_out = w[1] * groups if transposed else w[0]
    return (x[0], c_out, *sp)


class _Geometry(TypedDict):
    """A convolution's parameters besides its shapes (:func:`output_shape`'s keyword arguments)."""

    stride: list[int]
    padding: list[int]
    dilation: list[int]
    transposed: bool
    output_padding: list[int]
    groups: int


def _geometry(a: OpArgs, x_at: int, w_at: int, first: int) -> tuple[tuple[int, ...], tuple[int, ...], _Geometry]:
    """Shapes of x and w and the parameters stride, padding, dilation, transposed, output
    padding, groups recorded from position ``first`` on."""
    x, w = a.shape(x_at), a.shape(w_at)
    nd = len(x) - 2
    if nd < 1 or len(w) != len(x):
        raise NotModelled(f"{a.name}: input {list(x)} and weight {list(w)}")
    geo: _Geometry = {
        "stride": _per_dim(a.ints(first), nd, 1),
        "padding": _per_dim(a.ints(first + 1), nd, 0),
        "dilation": _per_dim(a.ints(first + 2), nd, 1),
        "transposed": a.flag(first + 3),
        "output_padding": _per_dim(a.ints(first + 4), nd, 0),
        "groups": a.integer(first + 5, 1),
    }
    return x, w, geo


def _params(x: tuple[int, ...], w: tuple[int, ...], y: tuple[int, ...], geo: _Geometry) -> str:
    sp = "x".join(map(str, x[2:]))
    k = "x".join(map(str, w[2:]))
    text = f"N={x[0]} C={x[1]}->{y[1]} {sp} kernel {k}"
    if any(s != 1 for s in geo["stride"]):
        text += " stride " + "x".join(map(str, geo["stride"]))
    if geo["groups"] != 1:
        text += f" groups={geo['groups']}"
    return text + (" transposed" if geo["transposed"] else "")


def _conv_flops(x: tuple[int, ...], w: tuple[int, ...], y: tuple[int, ...], transposed: bool) -> float:
    return 2.0 * (prod(x) if transposed else prod(y)) * prod(w[1:])


def convolution(a: OpArgs) -> Estimate:
    """``aten::convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups)``.

    Examples
    --------
    >>> e = convolution(OpArgs.parse("aten::convolution", "[[1, 3, 8, 8], [4, 3, 3, 3], [4], [], [], [], [], [], []]",
    ...     '["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]',
    ...     '["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1"]'))
    >>> e.flops == 2 * (4 * 6 * 6) * (3 * 3 * 3) + 4 * 6 * 6, e.bytes == 4 * (3 * 64 + 4 * 27 + 4 * 36 + 4)
    (True, True)
    """
    x, w, geo = _geometry(a, 0, 1, 3)
    y = output_shape(x, w, **geo)
    bias = a.present(2)
    flops = _conv_flops(x, w, y, geo["transposed"]) + (prod(y) if bias else 0)
    nbytes = a.tensor_bytes(0) + a.tensor_bytes(1) + prod(y) * a.bpe(0) + (a.tensor_bytes(2) if bias else 0)
    return Estimate(flops, nbytes, MATRIX, a.precision(0), _params(x, w, y, geo) + (" +bias" if bias else ""))


def convolution_backward(a: OpArgs) -> Estimate:
    """``aten::convolution_backward(dy, x, w, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask)``: the gradients the mask asks for."""
    x, w, geo = _geometry(a, 1, 2, 4)
    y = a.shape(0)
    mask = a.flags(10) or [True, True, False]
    mask = (mask + [False] * 3)[:3]
    bias = mask[2] and bool(a.ints(3))
    f = _conv_flops(x, w, y, geo["transposed"])
    dy, bx, bw = a.tensor_bytes(0), a.tensor_bytes(1), a.tensor_bytes(2)
    flops = nbytes = 0.0
    done = []
    if mask[0]:
        flops, nbytes = flops + f, nbytes + dy + bw + bx
        done.append("dx")
    if mask[1]:
        flops, nbytes = flops + f, nbytes + dy + bx + bw
        done.append("dw")
    if bias:
        flops, nbytes = flops + prod(y), nbytes + dy + y[1] * a.bpe(0)
        done.append("db")
    return Estimate(flops, nbytes, MATRIX, a.precision(1), _params(x, w, y, geo) + " grads " + ",".join(done))


register("conv", ["aten::convolution", "aten::_convolution"], convolution)
register("conv", ["aten::convolution_backward"], convolution_backward)
