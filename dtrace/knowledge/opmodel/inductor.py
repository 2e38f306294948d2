"""Inductor's generated Triton kernels: ``triton_poi_*`` (pointwise: family ``elementwise``),
``triton_red_*`` and ``triton_per_*`` (reductions: family ``reduce``) (docs/semantics.md, "Op
performance model").

``torch.compile`` names each kernel after the ATen ops it fused (``triton_poi_fused_addmm_gelu_15``)
and the profiler records, per launch, the kernel's arguments: a shape and an element type per
pointer (the tensors it loads or stores, in the order of its signature) and its integer
arguments, the sizes of its iteration space last (``xnumel``; ``ynumel, xnumel`` for a tiled
kernel; ``xnumel, r0_numel`` for a reduction). Which pointers are outputs and which buffers are
updated in place is not recorded, nor the arithmetic per element. So, with ``N`` the iteration
space:

    FLOPs = N                                   (one per point: the elementwise convention)
    bytes = Σ over the tensor arguments min(|tᵢ|, N)·size(tᵢ)

``N`` is the product of the trailing positive integer arguments, as many as keep it at most the
largest tensor argument (a constant argument before the sizes, such as a vocabulary offset, then
drops out), else the largest tensor's elements. Every tensor is loaded or stored once (a smaller
one is broadcast and read once; a larger view is read only where the kernel iterates: a slice);
a buffer updated in place (Inductor's ``in_out_ptr``) is both, but the trace does not say which
it is, so it counts once: the bytes are a lower bound. Assumption: a kernel's loads and stores
of one pointer touch each element once.
"""

from __future__ import annotations

from ._args import NotModelled, OpArgs, is_floating
from .base import VECTOR, Estimate, register_prefix


def iteration_space(a: OpArgs, largest: int) -> int:
    """``N``: the product of the trailing positive integer arguments that stays at most ``largest``.

    Examples
    --------
    >>> a = OpArgs.parse("triton_red_fused_4", "[[2, 2432, 4096], [2432], [], [], []]",
    ...     '["c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar", "Scalar"]', '["", "", "8192", "19", "128"]')
    >>> iteration_space(a, a.numel(0))
    19922944
    """
    n = 1
    for i in range(len(a) - 1, -1, -1):
        t = a.text(i).strip()
        if a.dtype(i) != "Scalar" or not t.isdigit() or int(t) <= 0 or n * int(t) > largest:
            break
        n *= int(t)
    return n if n > 1 else largest


def inductor_kernel(a: OpArgs) -> Estimate:
    """A ``triton_poi_*`` / ``triton_red_*`` / ``triton_per_*`` kernel: the module docs.

    Examples
    --------
    >>> e = inductor_kernel(OpArgs.parse("triton_poi_fused_addmm_gelu_15", "[[8, 16], [16], []]",
    ...     '["c10::BFloat16", "c10::BFloat16", "Scalar"]', '["", "", "128"]'))
    >>> e.flops, e.bytes  # 128 points; the 8x16 buffer and the bias of 16, 2 bytes each
    (128.0, 288.0)
    """
    tensors = [i for i in range(len(a)) if a.has(i) and isinstance(a.dims[i], list)]
    if not tensors:
        raise NotModelled(f"{a.name}: no tensor argument recorded")
    sizes = [a.numel(i) for i in tensors]
    n = iteration_space(a, max(sizes))
    nbytes = sum(min(s, n) * a.bpe(i) for s, i in zip(sizes, tensors))
    floating = [i for i in tensors if is_floating(a.dtype(i))]
    prec = a.precision(floating[0] if floating else tensors[0])
    return Estimate(float(n), float(nbytes), VECTOR, prec, f"N={n} tensors={len(tensors)}")


register_prefix("elementwise", ["triton_poi_"], inductor_kernel)
register_prefix("reduce", ["triton_red_", "triton_per_"], inductor_kernel)
