"""Copies and fills: ``copy_`` (``to``, ``clone``, ``contiguous`` and dtype casts run it),
``fill_``, ``zero_``, ``cat`` (docs/semantics.md, "Op performance model").

    copy_(dst, src):  FLOPs = |dst|           bytes = |src|·size(src) + |dst|·size(dst)
    fill_ / zero_:    FLOPs = 0               bytes = |dst|·size(dst)  (written, never read)

``copy_`` counts one FLOP per element, as TraceLens does for its elementwise copies (a cast is
arithmetic); a broadcast source is read once. A device-to-device ``cudaMemcpy`` a copy issues is
part of its GPU time. ``cat`` is not modelled: the profiler records ``TensorList`` without the
element type of its tensors.
"""

from __future__ import annotations

from ._args import NotModelled, OpArgs
from .base import VECTOR, Estimate, register


def copy_(a: OpArgs) -> Estimate:
    """``aten::copy_(dst, src, non_blocking)``.

    Examples
    --------
    >>> e = copy_(OpArgs.parse("aten::copy_", "[[4, 8], [4, 8], []]", '["float", "c10::BFloat16", "Scalar"]', ""))
    >>> e.flops, e.bytes
    (32.0, 192.0)
    """
    n = a.numel(0)
    return Estimate(float(n), float(a.tensor_bytes(1) + a.tensor_bytes(0)), VECTOR, a.precision(0), f"{n} elements")


def fill_(a: OpArgs) -> Estimate:
    """``aten::fill_(dst, value)``, ``aten::zero_(dst)``: the destination written once."""
    n = a.numel(0)
    return Estimate(0.0, float(a.tensor_bytes(0)), VECTOR, a.precision(0), f"{n} elements")


def cat(a: OpArgs) -> Estimate:
    raise NotModelled("the profiler records no element type for the tensors of a TensorList")


register("copy", ["aten::copy_"], copy_)
register("copy", ["aten::fill_"], fill_)
register("copy", ["aten::zero_"], fill_, wrapper=True)  # it calls fill_ (the op TraceLens lists)
register("copy", ["aten::cat"], cat)
