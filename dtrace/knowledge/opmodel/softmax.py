"""Softmax and log-softmax, forward and backward (docs/semantics.md, "Op performance model").

    forward   FLOPs = 3·|x|  (exp, sum, divide: TraceLens's softmax convention)
              bytes = |x|·size(x) + |x|·size(y)
    backward  FLOPs = 4·|x|  (dx = y·(dy − Σ dy·y), or dy − exp(y)·Σ dy for log-softmax)
              bytes = |dy| and |y| read, |dx| written

A softmax with ``half_to_float`` (or a ``dtype=``) writes its output in that type. Assumption:
each row fits on chip, so x is read once (a single-pass online softmax).
"""

from __future__ import annotations

from ._args import NotModelled, OpArgs, bytes_per_element
from .base import VECTOR, Estimate, register


def softmax(a: OpArgs) -> Estimate:
    """``aten::_softmax(x, dim, half_to_float)`` / ``aten::softmax(x, dim, dtype)`` (and log-softmax)."""
    n = a.numel(0)
    if a.name in ("aten::_softmax", "aten::_log_softmax"):
        out_bpe = 4 if a.flag(2) else a.bpe(0)
    else:
        named = a.scalar_type(2)
        out_bpe = (bytes_per_element(named) if named else None) or a.bpe(0)
    return Estimate(3.0 * n, float(a.tensor_bytes(0) + n * out_bpe), VECTOR, a.precision(0), f"{n} elements")


def softmax_backward(a: OpArgs) -> Estimate:
    """``aten::_softmax_backward_data(dy, y, dim, input_dtype)`` (and log-softmax): dy and y read,
    dx written (in dy's type)."""
    n = a.numel(0)
    if a.numel(1) != n:
        raise NotModelled(f"{a.name}: dy and y differ in size")
    return Estimate(4.0 * n, float(a.tensor_bytes(0) + a.tensor_bytes(1) + n * a.bpe(0)), VECTOR, a.precision(0), "")


register("softmax", ["aten::_softmax", "aten::_log_softmax", "aten::_safe_softmax"], softmax)
register("softmax", ["aten::softmax", "aten::log_softmax"], softmax, wrapper=True)  # they call the _ ops
register("softmax", ["aten::_softmax_backward_data", "aten::_log_softmax_backward_data"], softmax_backward)
