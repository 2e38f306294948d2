"""Copies and fills: ``copy_`` (``to``, ``clone``, ``contiguous`` and dtype casts run it),
``fill_``, ``zero_``, ``cat``, nearest-neighbour upsampling (docs/semantics.md, "Op performance
model").

    copy_(dst, src):  FLOPs = |dst|           bytes = |src|·size(src) + |dst|·size(dst)
    fill_ / zero_:    FLOPs = 0               bytes = |dst|·size(dst)  (written, never read)
    upsample_nearest{1,2,3}d(x, output_size, scales):
                      FLOPs = 0               bytes = |x|·size(x) + |y|·size(x)

An upsampled output element is a copy of the input element nearest to it: ``y`` is
``(N, C, *output_size)``, the output size given, else ``⌊in·scale⌋`` per dimension from the
scale factors (both overloads: ``upsample_nearest2d.vec(x, output_size?, scale_factors?)`` and
``upsample_nearest2d(x, output_size, scales_h?, scales_w?)``; ``_upsample_nearest_exact*`` too).
The input is read once (each element is the source of several outputs).

``copy_`` counts one FLOP per element, as TraceLens does for its elementwise copies (a cast is
arithmetic); a broadcast source is read once. A device-to-device ``cudaMemcpy`` a copy issues is
part of its GPU time. ``cat`` is not modelled: the profiler records ``TensorList`` without the
element type of its tensors.
"""

from __future__ import annotations

from math import prod

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


def upsample_nearest(a: OpArgs) -> Estimate:
    """``upsample_nearest{1,2,3}d`` (both overloads): the module docs.

    Examples
    --------
    >>> e = upsample_nearest(OpArgs.parse("aten::upsample_nearest2d", "[[1, 4, 8, 8], [], []]",
    ...     '["c10::BFloat16", "", "ScalarList"]', '["", "", "[2., 2.]"]'))
    >>> e.flops, e.bytes  # 256 elements read, 1024 written, 2 bytes each
    (0.0, 2560.0)
    """
    k = int(a.name.rstrip("d")[-1])
    sx = a.shape(0)
    if len(sx) != k + 2:
        raise NotModelled(f"{a.name}: input {list(sx)} is not (N, C, {k} dimensions)")
    size = a.ints(1) if a.dtype(1) == "ScalarList" else None
    scales = a.floats(2) if size is None and len(a) > 2 and a.dtype(2) == "ScalarList" else None
    if size is None and scales is not None and len(scales) == k:
        size = [int(n * f) for n, f in zip(sx[2:], scales)]
    if size is None or len(size) != k:
        raise NotModelled(f"{a.name}: neither the output size nor the scale factors recorded")
    n_out = sx[0] * sx[1] * prod(size)
    return Estimate(0.0, float(a.tensor_bytes(0) + n_out * a.bpe(0)), VECTOR, a.precision(0), "x".join(map(str, size)))


register("copy", ["aten::copy_"], copy_)
register("copy", ["aten::fill_"], fill_)
register("copy", ["aten::zero_"], fill_, wrapper=True)  # it calls fill_ (the op TraceLens lists)
register("copy", ["aten::cat"], cat)
register(
    "copy",
    [f"aten::{p}{k}d" for p in ("upsample_nearest", "_upsample_nearest_exact") for k in (1, 2, 3)],
    upsample_nearest,
)
