"""Performance models of host ops: FLOPs and bytes moved from the recorded shapes and dtypes.

One module per family, each with its formula written once and documented (docs/semantics.md,
"Op performance model"): :mod:`.gemm` (matrix products), :mod:`.conv` (convolutions forward and
backward), :mod:`.attention` (scaled dot-product / flash attention, forward, backward, varlen),
:mod:`.elementwise`, :mod:`.norm` (layer, RMS, batch, group norm), :mod:`.reduction`,
:mod:`.softmax`, :mod:`.gather` (embedding, index_select, gather, KV-cache writes),
:mod:`.copy` (copies, fills, nearest upsampling) and :mod:`.inductor` (Inductor's generated
``triton_*`` kernels). Each registers its op names in :data:`~.base.REGISTRY` (Inductor's
name prefixes in :data:`~.base.PREFIXES`). The serving libraries' ops (aiter, vLLM, SGLang) are
in their family's module; :mod:`.serving` reads the prefill/decode step annotations.

:func:`estimate` models one op from the texts the profiler recorded; the analysis calls it once
per *distinct* (op, shapes, dtypes, scalar arguments) of a partition, never per event (and,
for the models that read them, the sequences of the serving step: :func:`reads_step`).

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
>>> family("triton_red_fused_add_mean_4"), reads_step("vllm::unified_attention_with_output")
('reduce', True)
"""

from __future__ import annotations

from . import attention, conv, copy, elementwise, gather, gemm, inductor, norm, reduction, softmax  # noqa: F401
from ._args import NotModelled, OpArgs
from .base import MATRIX, MODEL, PREFIXES, REGISTRY, VECTOR, WRAPPER, Estimate, lookup
from .serving import PHASES, read_marker

__all__ = [
    "Estimate",
    "NotModelled",
    "OpArgs",
    "REGISTRY",
    "PREFIXES",
    "MATRIX",
    "VECTOR",
    "MODEL",
    "WRAPPER",
    "PHASES",
    "read_marker",
    "lookup",
]

FAMILIES = ("gemm", "conv", "attention", "elementwise", "norm", "reduce", "softmax", "gather", "copy")
"""The families, in the order reports list them; ops without a model are family ``unmodelled``."""


def family(name: str) -> str:
    """The family of an op name (``""`` if it has no model)."""
    e = lookup(name)
    return e.family if e else ""


def priority(name: str) -> int:
    """:data:`MODEL` (2), :data:`WRAPPER` (1) or 0 (no model): which op of a nested stack is modelled."""
    e = lookup(name)
    return e.priority if e else 0


def is_backward(name: str) -> bool:
    e = lookup(name)
    return bool(e and e.backward)


def reads_step(name: str) -> bool:
    """Whether the op's model reads the sequences of its serving step (attention over a KV cache)."""
    e = lookup(name)
    return bool(e and e.step)


def estimate(name: str, dims: str, types: str, concrete: str, step: str = "") -> Estimate | str:
    """The :class:`Estimate` of one op from its recorded texts, or why there is none (a string).

    ``step``: the sums of the serving step the instance ran in (:meth:`.serving.Step.text`;
    ``""``: none), read only by the models registered with ``step=True``.
    """
    entry = lookup(name)
    if entry is None:
        return "no model for this op"
    try:
        return entry.model(OpArgs.parse(name, dims, types, concrete, step if entry.step else ""))
    except NotModelled as exc:
        return str(exc)
    except (ValueError, TypeError, IndexError, ZeroDivisionError, KeyError) as exc:
        return f"arguments not understood ({type(exc).__name__}: {exc})"
