"""Reductions: ``sum``, ``mean``, ``amax``, ``max``, norms, ``std``/``var``, ``logsumexp`` and scans
(docs/semantics.md, "Op performance model").

    reduction  FLOPs = |x|                     bytes = |x|·size(x) + |y|·size(y)
    scan       as a reduction with |y| = |x|   (``cumsum``, ``cumprod``)

``y`` is the reduced shape the op's ``dim`` and ``keepdim`` arguments give (all dimensions
when ``dim`` is not given or empty); ``max``/``min`` over a dimension also write int64 indices,
``argmax``/``argmin`` only those. The output element type: a ``dtype=`` argument's, else
``int64`` for sums of integers and booleans, ``bool`` for ``any``/``all``, else the input's.
TraceLens assumes every reduction writes one element; dtrace computes the reduced shape.
``max``/``min`` of two tensors are elementwise (:mod:`.elementwise`).
"""

from __future__ import annotations

from math import prod

from ._args import OpArgs, bytes_per_element, is_floating
from .base import VECTOR, Estimate, register
from .elementwise import elementwise

# op -> (position of dim, position of keepdim, position of dtype or -1, dim may be a single int)
_DIM_ARGS: dict[str, tuple[int, int, int, bool]] = {
    "sum": (1, 2, 3, False),
    "nansum": (1, 2, 3, False),
    "mean": (1, 2, 3, False),
    "nanmean": (1, 2, 3, False),
    "prod": (1, 2, 3, True),
    "amax": (1, 2, -1, False),
    "amin": (1, 2, -1, False),
    "max": (1, 2, -1, True),
    "min": (1, 2, -1, True),
    "argmax": (1, 2, -1, True),
    "argmin": (1, 2, -1, True),
    "any": (1, 2, -1, True),
    "all": (1, 2, -1, True),
    "logsumexp": (1, 2, -1, False),
    "std": (1, 3, -1, False),
    "var": (1, 3, -1, False),
    "norm": (2, 3, -1, False),
    "linalg_vector_norm": (2, 3, 4, False),
    "linalg_norm": (2, 3, 4, False),
}
_SCANS = {"cumsum": 2, "cumprod": 2}  # op -> position of dtype


def reduced_shape(shape: tuple[int, ...], dims: list[int] | None, keepdim: bool) -> tuple[int, ...]:
    """The output shape of reducing ``dims`` (None or empty: all) of ``shape``.

    Examples
    --------
    >>> reduced_shape((32, 128, 56, 56), [0, 2, 3], False), reduced_shape((8, 4), [-1], True), reduced_shape((8, 4), None, False)
    ((128,), (8, 1), ())
    """
    nd = len(shape)
    picked = set(range(nd)) if not dims else {d % nd if nd else 0 for d in dims}
    return tuple(1 if i in picked else s for i, s in enumerate(shape) if keepdim or i not in picked)


def reduction(a: OpArgs) -> Estimate:
    """A reduction over ``dim`` (see the module docs).

    Examples
    --------
    >>> e = reduction(OpArgs.parse("aten::sum", "[[32, 128, 56, 56], [], [], []]",
    ...     '["c10::BFloat16", "ScalarList", "Scalar", ""]', '["", "[0, 2, 3]", "False", ""]'))
    >>> e.flops, e.bytes, e.params
    (12845056.0, 25690368.0, 'reduce 32x128x56x56 -> 128')
    """
    short = a.name.split("::")[-1]
    if short in ("max", "min") and a.has(1):
        return elementwise(a)
    dim_at, keep_at, dtype_at, single = _DIM_ARGS[short]
    x = a.shape(0)
    dims = None
    if dim_at < len(a) and (a.dtype(dim_at) == "ScalarList" or (single and a.dtype(dim_at) == "Scalar")):
        dims = a.ints(dim_at)
    y = reduced_shape(x, dims, a.flag(keep_at))
    n_out = prod(y)
    out_bpe = _output_bytes_per_element(a, short, dtype_at)
    extra = n_out * 8 if short in ("max", "min") and dims else 0  # the indices of max.dim / min.dim
    nbytes = a.tensor_bytes(0) + n_out * out_bpe + extra
    shape_text = "x".join(map(str, x)) + " -> " + ("x".join(map(str, y)) or "1")
    return Estimate(float(a.numel(0)), float(nbytes), VECTOR, a.precision(0), "reduce " + shape_text)


def _output_bytes_per_element(a: OpArgs, short: str, dtype_at: int) -> float:
    """Bytes per output element: the named ``dtype``'s, 8 for indices (``argmax``) and for an
    integer ``sum``/``prod``, 1 for ``any``/``all``, else the input's."""
    named = a.scalar_type(dtype_at) if 0 <= dtype_at < len(a) and a.dtype(dtype_at) == "Scalar" else None
    if named:
        return bytes_per_element(named) or a.bpe(0)
    if short in ("argmax", "argmin"):
        return 8
    if short in ("any", "all"):
        return 1
    if short in ("sum", "prod") and not is_floating(a.dtype(0)):
        return 8
    return a.bpe(0)


def scan(a: OpArgs) -> Estimate:
    """``cumsum``/``cumprod(x, dim, dtype)``: one output per input element."""
    n = a.numel(0)
    named = a.scalar_type(_SCANS[a.name.split("::")[-1]])
    out_bpe = (bytes_per_element(named) if named else None) or a.bpe(0)
    return Estimate(float(n), float(a.tensor_bytes(0) + n * out_bpe), VECTOR, a.precision(0), f"{n} elements")


register("reduce", [f"aten::{n}" for n in _DIM_ARGS], reduction)
register("reduce", [f"aten::{n}" for n in _SCANS] + [f"aten::{n}_" for n in _SCANS], scan)
