"""What a family model returns (:class:`Estimate`) and the registry every family adds its ops to.

A model is a function ``OpArgs -> Estimate`` registered for op names with
:func:`register`; it raises :class:`~dtrace.knowledge.opmodel._args.NotModelled` with the reason when the
recorded arguments are not what it reads. Each op name has a *priority* that decides which op
of a nested stack is the modelled one (docs/semantics.md, "Op performance model"):

``MODEL`` (2)
    the outermost op of this priority above a GPU event owns it (``aten::layer_norm`` over
    ``aten::native_layer_norm``, ``aten::_scaled_dot_product_flash_attention`` over
    ``aten::_flash_attention_forward``): TraceLens's choice, so its figures compare row by row.
``WRAPPER`` (1)
    a user-facing composite (``aten::linear``, ``aten::matmul``,
    ``aten::scaled_dot_product_attention``) owns only GPU events no ``MODEL`` op below it owns:
    its inner ``aten::addmm`` / ``aten::mm`` / ``aten::bmm`` are modelled instead.

Most ops register their exact names; generated kernels whose names vary (Inductor's
``triton_poi_fused_add_mul_3``) register a name prefix (:func:`register_prefix`). A model that
reads the serving step's sequences (attention over a KV cache, :mod:`.serving`) registers with
``step=True``: it is given the step statistics of the instance's step (``OpArgs.step``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ._args import OpArgs

MODEL, WRAPPER = 2, 1
MATRIX, VECTOR = "matrix", "vector"


@dataclass(frozen=True)
class Estimate:
    """FLOPs and bytes moved by one op instance, and where its arithmetic runs.

    ``unit`` is ``matrix`` (tensor cores / matrix cores) or ``vector``; ``precision`` names
    the peak (``bf16``, ``fp32``, ``fp8``, ...; ``""`` when the element type has none);
    ``params`` shows the model's dimensions in words (``M=4096 N=4096 K=4096``).
    """

    flops: float
    bytes: float
    unit: str
    precision: str
    params: str = ""


Model = Callable[[OpArgs], Estimate]


@dataclass(frozen=True)
class Entry:
    family: str
    model: Model
    priority: int
    backward: bool
    step: bool = False  # the model reads the serving step's sequences (OpArgs.step)


REGISTRY: dict[str, Entry] = {}
PREFIXES: dict[str, Entry] = {}
"""Name prefixes of generated kernels (``triton_poi_``) and their entry."""


def register(
    family: str, names: list[str] | tuple[str, ...], model: Model, *, wrapper: bool = False, step: bool = False
) -> None:
    """Model the ops ``names`` (``aten::mm``, ...) of ``family`` with ``model``.

    An op whose name mentions ``backward`` is marked as a backward op; ``step``: the model reads
    the serving step's sequences.
    """
    for n in names:
        REGISTRY[n] = Entry(family, model, WRAPPER if wrapper else MODEL, "backward" in n.lower(), step)


def register_prefix(family: str, prefixes: list[str] | tuple[str, ...], model: Model) -> None:
    """Model every op whose name starts with one of ``prefixes`` (generated kernels)."""
    for p in prefixes:
        PREFIXES[p] = Entry(family, model, MODEL, False)


def lookup(name: str) -> Entry | None:
    """The entry of an op name: its own, else its prefix's (None: no model).

    Examples
    --------
    >>> from dtrace.knowledge import opmodel
    >>> lookup("aten::mm").family, lookup("triton_poi_fused_add_0").family, lookup("aten::nonzero")
    ('gemm', 'elementwise', None)
    """
    e = REGISTRY.get(name)
    if e is not None:
        return e
    return next((v for p, v in PREFIXES.items() if name.startswith(p)), None)
