"""Performance models of host ops: FLOPs and bytes moved from the recorded shapes and dtypes.

One module per family, each with its formula written once and documented (docs/semantics.md,
"Op performance model"): :mod:`.gemm` (matrix products), :mod:`.conv` (convolutions forward and
backward), :mod:`.attention` (scaled dot-product / flash attention, forward, backward, varlen),
:mod:`.elementwise`, :mod:`.norm` (layer, RMS, batch, group norm), :mod:`.reduction`,
:mod:`.softmax`, :mod:`.gather` (embedding, index_select, gather) and :mod:`.copy` (copies,
fills). Each registers its op names in :data:`~.base.REGISTRY`.

:func:`estimate` models one op from the texts the profiler recorded; the analysis calls it once
per *distinct* (op, shapes, dtypes, scalar arguments) of a partition, never per event.

Examples
--------
>>> e = estimate("aten::addmm", "[[1024], [5185, 1024], [1024, 1024], [], []]",
...     '["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]', '["", "", "", "1", "1"]')
>>> e.flops / 1e9, e.bytes / 2**20, e.unit, e.precision   # TraceLens: 10.87904256 GFLOPS, 22.255859375 MB
(10.87904256, 22.255859375, 'matrix', 'bf16')
>>> estimate("aten::mm", "", "", "")
'no shapes recorded (profile with record_shapes=True)'
>>> family("aten::linear"), priority("aten::linear"), priority("aten::mm"), family("aten::nonzero")
('gemm', 1, 2, '')
"""

from __future__ import annotations

from . import attention, conv, copy, elementwise, gather, gemm, norm, reduction, softmax  # noqa: F401 - registration
from ._args import NotModelled, OpArgs
from .base import MATRIX, MODEL, REGISTRY, VECTOR, WRAPPER, Estimate

__all__ = ["Estimate", "NotModelled", "OpArgs", "REGISTRY", "MATRIX", "VECTOR", "MODEL", "WRAPPER"]

FAMILIES = ("gemm", "conv", "attention", "elementwise", "norm", "reduce", "softmax", "gather", "copy")
"""The families, in the order reports list them; ops without a model are family ``unmodelled``."""


def family(name: str) -> str:
    """The family of an op name (``""`` if it has no model)."""
    e = REGISTRY.get(name)
    return e.family if e else ""


def priority(name: str) -> int:
    """:data:`MODEL` (2), :data:`WRAPPER` (1) or 0 (no model): which op of a nested stack is modelled."""
    e = REGISTRY.get(name)
    return e.priority if e else 0


def is_backward(name: str) -> bool:
    e = REGISTRY.get(name)
    return bool(e and e.backward)


def estimate(name: str, dims: str, types: str, concrete: str) -> Estimate | str:
    """The :class:`Estimate` of one op from its recorded texts, or why there is none (a string)."""
    entry = REGISTRY.get(name)
    if entry is None:
        return "no model for this op"
    try:
        return entry.model(OpArgs.parse(name, dims, types, concrete))
    except NotModelled as exc:
        return str(exc)
    except (ValueError, TypeError, IndexError, ZeroDivisionError, KeyError) as exc:
        return f"arguments not understood ({type(exc).__name__}: {exc})"
