"""Normalisation forward and backward: layer, RMS, batch, group and instance norm (docs/semantics.md,
"Op performance model").

TraceLens's conventions, with ``E`` the elements of the input and ``C`` the normalised size
(layer and RMS norm: the product of ``normalized_shape``; batch, group and instance norm: the
channels, dimension 1; group norm backward: channels per group):

    forward   FLOPs = 6·C + 2·E (+ 3·E computing the statistics when training)
              bytes = E·size(x) + E·size(y) + k·C·size(x),
                      k = 2 (mean, variance) + 1 (weight) + 1 (bias) + 2 (updated statistics, training)
    backward  FLOPs = 4·E (+ 5·E for dx when training, 2·E in eval; + 3·C in eval)
              bytes = E·size(dy) + E·size(x) (+ E·size(x) for dx when training)
                      + C (saved inverse std, training) + C (weight) + C or 2·C (dw, db)
    RMS norm  FLOPs = (E/C)·(2·C + 2) + E·(2 with a weight, else 1)
              bytes = E·size(x) + E·size(y) (+ C·size(x) for the weight)
    RMS backward FLOPs = E (x̂) + E (with a weight) + 6·E (dx) + E or 2·E (dw)
              bytes = E·size(dy) + 2·E·size(x) (+ 2·C·size(x) for the weight and dw)

The serving libraries' RMS norms over the last dimension have the same formula: aiter's
``rmsnorm(out, input, weight, eps)``, vLLM's ``_C::rms_norm(out, input, weight, eps)`` and
SGLang's ``sgl_kernel::rmsnorm(out, input, weight, eps, pdl)``; the fused residual adds
(aiter's ``add_rmsnorm(out, input, residual_in, residual_out, weight, eps)``, vLLM's in-place
``_C::fused_add_rms_norm(input, residual, weight, eps)``, SGLang's
``sgl_kernel::fused_add_rmsnorm(input, residual, weight, eps, pdl)``) add ``E`` FLOPs (the sum)
and move ``4·E`` elements (input and residual read, the sum and the normalised output written)
plus the weight. aiter's ``_groupnorm_run(x, num_groups, weight, bias, eps)`` is group norm.

Where TraceLens assumes, dtrace reads the trace: a weight and a bias count only when given
(TraceLens counts both always), batch norm trains only when its ``training`` argument says so,
the backward ops' ``output_mask`` says which gradients are computed, and a cuDNN/MIOpen batch
norm backward (only used in training) uses the training formulas. Layer and group norm always
compute their statistics (training). Assumptions: activations cross HBM once; the statistics
stay on chip.
"""

from __future__ import annotations

from math import prod

from ._args import NotModelled, OpArgs
from .base import VECTOR, Estimate, register


def norm_forward(
    e: int, c: float, bpe_in: float, bpe_out: float, affine: bool, bias: bool, training: bool
) -> tuple[float, float]:
    """(FLOPs, bytes) of a normalisation forward (TraceLens's formula, the module docs).

    Examples
    --------
    >>> norm_forward(5185 * 1024, 1024, 2, 2, True, True, True)  # h100 owlv2 layer norm (TraceLens 0.026553344 GFLOPS)
    (26553344, 21250048)
    """
    flops = 3 * c + (3 * e if training else 0) + 3 * c + 2 * e
    k = 2 + (1 if affine else 0) + (1 if affine and bias else 0) + (2 if training else 0)
    return flops, e * bpe_in + e * bpe_out + k * c * bpe_in


def norm_backward(
    e: int, c: float, bpe_in: float, bpe_out: float, affine: bool, bias: bool, training: bool, grad_input: bool
) -> tuple[float, float]:
    """(FLOPs, bytes) of a normalisation backward (the module docs).

    Examples
    --------
    >>> norm_backward(10 * 64 * 112 * 112, 64, 2, 2, True, True, True, True)  # TraceLens: 0.07225344 GFLOPS
    (72253440.0, 48169472)
    """
    per_channel = e / c
    flops = c * ((0 if training else 3) + 4 * per_channel + ((5 if training else 2) * per_channel if grad_input else 0))
    nbytes = e * bpe_out + e * bpe_in * (2 if grad_input and training else 1)
    if training:
        nbytes += c * bpe_in
    if affine:
        nbytes += c * bpe_in + (c * bpe_in * (2 if bias else 1) if training else 0)
    return flops, nbytes


def _normalized(a: OpArgs, at: int) -> int:
    v = a.ints(at)
    if not v:
        raise NotModelled(f"{a.name}: normalized_shape not recorded")
    return prod(v)


def _est(a: OpArgs, x_at: int, fb: tuple[float, float], params: str) -> Estimate:
    return Estimate(float(fb[0]), float(fb[1]), VECTOR, a.precision(x_at), params)


def layer_norm(a: OpArgs) -> Estimate:
    """``aten::layer_norm(x, normalized_shape, weight, bias, eps, cudnn_enable)``, ``native_layer_norm``."""
    c, bpe = _normalized(a, 1), a.bpe(0)
    fb = norm_forward(a.numel(0), c, bpe, bpe, a.present(2), a.present(3), True)
    return _est(a, 0, fb, f"rows={a.numel(0) // max(c, 1)} C={c}" + ("" if a.present(2) else " no affine"))


def layer_norm_backward(a: OpArgs) -> Estimate:
    """``aten::native_layer_norm_backward(dy, x, normalized_shape, mean, rstd, weight, bias, output_mask)``."""
    c = _normalized(a, 2)
    mask = (a.flags(7) or [True, True, True]) + [False] * 3
    fb = norm_backward(a.numel(1), c, a.bpe(1), a.bpe(0), mask[1], mask[2], True, mask[0])
    return _est(a, 1, fb, f"rows={a.numel(1) // max(c, 1)} C={c}")


def _channels(a: OpArgs, x_at: int) -> int:
    s = a.shape(x_at)
    if len(s) < 2:
        raise NotModelled(f"{a.name}: input {list(s)} has no channel dimension")
    return s[1]


def batch_norm(a: OpArgs) -> Estimate:
    """``aten::batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, cudnn)``
    (and ``native_batch_norm``, ``cudnn_batch_norm``, ``miopen_batch_norm``, ``instance_norm``:
    the same first six arguments)."""
    c, bpe = _channels(a, 0), a.bpe(0)
    training = a.flag(5)
    fb = norm_forward(a.numel(0), c, bpe, bpe, a.present(1), a.present(2), training)
    return _est(a, 0, fb, f"C={c} {'training' if training else 'eval'}")


def batch_norm_backward(a: OpArgs) -> Estimate:
    """``aten::native_batch_norm_backward(dy, x, weight, running_mean, running_var, save_mean,
    save_invstd, train, eps, output_mask)``."""
    c = _channels(a, 1)
    training = a.flag(7, True)
    mask = (a.flags(9) or [True, True, True]) + [False] * 3
    fb = norm_backward(a.numel(1), c, a.bpe(1), a.bpe(0), a.present(2), a.present(2), training, mask[0])
    return _est(a, 1, fb, f"C={c} {'training' if training else 'eval'}")


def vendor_batch_norm_backward(a: OpArgs) -> Estimate:
    """``aten::cudnn_batch_norm_backward(x, dy, weight, ...)`` / ``miopen_batch_norm_backward``:
    training only (they need the batch statistics)."""
    c = _channels(a, 0)
    fb = norm_backward(a.numel(0), c, a.bpe(0), a.bpe(1), a.present(2), a.present(2), True, True)
    return _est(a, 0, fb, f"C={c} training")


def group_norm(a: OpArgs) -> Estimate:
    """``aten::group_norm(x, num_groups, weight, bias, eps, cudnn)``: C = channels (TraceLens)."""
    c, bpe = _channels(a, 0), a.bpe(0)
    fb = norm_forward(a.numel(0), c, bpe, bpe, a.present(2), a.present(3), True)
    return _est(a, 0, fb, f"C={c} groups={a.text(1)}")


def native_group_norm(a: OpArgs) -> Estimate:
    """``aten::native_group_norm(x, weight, bias, N, C, HxW, group, eps)``."""
    c, bpe = _channels(a, 0), a.bpe(0)
    fb = norm_forward(a.numel(0), c, bpe, bpe, a.present(1), a.present(2), True)
    return _est(a, 0, fb, f"C={c} groups={a.text(6)}")


def group_norm_backward(a: OpArgs) -> Estimate:
    """``aten::native_group_norm_backward(dy, x, mean, rstd, weight, N, C, HxW, group, output_mask)``:
    C = channels per group (TraceLens)."""
    groups = a.integer(8, 1)
    c = _channels(a, 1) / max(groups, 1)
    mask = (a.flags(9) or [True, True, True]) + [False] * 3
    fb = norm_backward(a.numel(1), c, a.bpe(1), a.bpe(0), a.present(4), a.present(4), True, mask[0])
    return _est(a, 1, fb, f"C/groups={c:g} groups={groups}")


def rms_norm(a: OpArgs) -> Estimate:
    """``aten::rms_norm(x, normalized_shape, weight, eps)``, ``aten::_fused_rms_norm``."""
    c, e, bpe = _normalized(a, 1), a.numel(0), a.bpe(0)
    affine = a.present(2)
    flops = (e / c) * (2 * c + 2) + e * (2 if affine else 1)
    nbytes = e * bpe + e * bpe + (c * bpe if affine else 0)
    return Estimate(float(flops), float(nbytes), VECTOR, a.precision(0), f"rows={e // c} C={c}")


def _rms(a: OpArgs, x_at: int, w_at: int, out_at: int, residual: bool) -> Estimate:
    """An RMS norm over the last dimension of ``x`` with the weight at ``w_at`` (the module docs);
    ``residual``: the fused residual add before it."""
    sx = a.shape(x_at)
    c, e = (sx[-1] if sx else 0), a.numel(x_at)
    if c <= 0 or not a.present(w_at) or a.numel(w_at) != c:
        raise NotModelled(f"{a.name}: input {list(sx)} and weight do not fit together")
    bpe_x, bpe_out = a.bpe(x_at), a.bpe(out_at)
    flops = (e / c) * (2 * c + 2) + 2 * e + (e if residual else 0)
    nbytes = e * bpe_x + e * bpe_out + c * a.bpe(w_at) + (2 * e * bpe_x if residual else 0)
    params = f"rows={e // c} C={c}" + (" +residual" if residual else "")
    return Estimate(float(flops), float(nbytes), VECTOR, a.precision(x_at), params)


def out_rms_norm(a: OpArgs) -> Estimate:
    """``aiter::rmsnorm(out, input, weight, eps)``, ``_C::rms_norm``, ``sgl_kernel::rmsnorm``.

    Examples
    --------
    >>> e = out_rms_norm(OpArgs.parse("aiter::rmsnorm", "[[8, 128], [8, 128], [128], []]",
    ...     '["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar"]', ""))
    >>> e.flops == 8 * (2 * 128 + 2) + 2 * 8 * 128, e.bytes == (2 * 8 * 128 + 128) * 2
    (True, True)
    """
    return _rms(a, 1, 2, 0, residual=False)


def aiter_add_rms_norm(a: OpArgs) -> Estimate:
    """``aiter::add_rmsnorm(out, input, residual_in, residual_out, weight, eps)``."""
    return _rms(a, 1, 4, 0, residual=True)


def in_place_add_rms_norm(a: OpArgs) -> Estimate:
    """``_C::fused_add_rms_norm(input, residual, weight, eps)`` (and SGLang's): both written in place."""
    return _rms(a, 0, 2, 0, residual=True)


def rms_norm_backward(a: OpArgs) -> Estimate:
    """``aten::_fused_rms_norm_backward(dy, x, normalized_shape, rstd, weight, output_mask)``."""
    c, e, bpe_in, bpe_out = _normalized(a, 2), a.numel(1), a.bpe(1), a.bpe(0)
    affine = a.present(4)
    mask = (a.flags(5) or [True, True]) + [False] * 2
    flops = (e if affine else 0) + e + (6 * e if mask[0] else 0)
    if mask[1] and affine:
        flops += e + (e if e > c else 0)
    nbytes = e * bpe_out + 2 * e * bpe_in + (2 * c * bpe_in if affine else 0)
    return Estimate(float(flops), float(nbytes), VECTOR, a.precision(1), f"rows={e // c} C={c}")


register("norm", ["aten::layer_norm", "aten::native_layer_norm"], layer_norm)
register("norm", ["aten::native_layer_norm_backward"], layer_norm_backward)
register(
    "norm",
    [
        "aten::batch_norm",
        "aten::_batch_norm_impl_index",
        "aten::native_batch_norm",
        "aten::cudnn_batch_norm",
        "aten::miopen_batch_norm",
        "aten::_native_batch_norm_legit",
        "aten::_native_batch_norm_legit_no_training",
        "aten::instance_norm",
    ],
    batch_norm,
)
register("norm", ["aten::native_batch_norm_backward", "aten::batch_norm_backward"], batch_norm_backward)
register("norm", ["aten::cudnn_batch_norm_backward", "aten::miopen_batch_norm_backward"], vendor_batch_norm_backward)
register("norm", ["aten::group_norm"], group_norm)
register("norm", ["aten::native_group_norm"], native_group_norm)
register("norm", ["aten::native_group_norm_backward"], group_norm_backward)
register("norm", ["aten::_fused_rms_norm"], rms_norm)
register(
    "norm", ["aten::rms_norm"], rms_norm, wrapper=True
)  # it calls the fused kernel's op (TraceLens models that one)
register("norm", ["aten::_fused_rms_norm_backward", "aten::rms_norm_backward"], rms_norm_backward)
register("norm", ["aiter::rmsnorm", "_C::rms_norm", "sgl_kernel::rmsnorm"], out_rms_norm)
register("norm", ["aiter::add_rmsnorm"], aiter_add_rms_norm)
register("norm", ["_C::fused_add_rms_norm", "sgl_kernel::fused_add_rmsnorm"], in_place_add_rms_norm)
register("norm", ["aiter::_groupnorm_run"], group_norm)
