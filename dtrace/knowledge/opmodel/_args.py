"""The recorded arguments of one host op, parsed once per distinct (op, shapes, dtypes, args).

The PyTorch profiler with ``record_shapes=True`` records, per ``cpu_op``, four parallel lists:
``Input Dims`` (a shape per argument: ``[]`` for a scalar or an absent optional, a list of
shapes for a ``TensorList``), ``Input type`` (the element type of a tensor, ``Scalar``,
``ScalarList``, ``TensorList`` or ``""``), ``Input Strides`` and ``Concrete Inputs`` (the value
of a scalar argument as text, ``""`` otherwise). :class:`OpArgs` reads them with the helpers
every family model needs: shapes, element sizes, precisions, flags and integer lists.

Element types are PyTorch's C++ names (``c10::BFloat16``, ``float``, ``long int``, ...); each
has a size in bytes and a *precision*, the name of the hardware peak it runs at (``bf16``,
``fp32``, ``fp8``, ...; integers and booleans have none that a roofline uses).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any, Sequence

import msgspec

from .serving import Step

# element type (lower case) -> (bytes per element, precision)
DTYPES: dict[str, tuple[float, str]] = {
    "double": (8, "fp64"),
    "float": (4, "fp32"),
    "c10::half": (2, "fp16"),
    "c10::bfloat16": (2, "bf16"),
    "c10::float8_e4m3fn": (1, "fp8"),
    "c10::float8_e5m2": (1, "fp8"),
    "c10::float8_e4m3fnuz": (1, "fp8"),
    "c10::float8_e5m2fnuz": (1, "fp8"),
    "c10::float8_e8m0fnu": (1, "fp8"),
    "c10::float4_e2m1fn_x2": (1, "fp4"),  # two 4-bit values per byte
    "long int": (8, "int64"),
    "long unsigned int": (8, "int64"),
    "int": (4, "int32"),
    "unsigned int": (4, "int32"),
    "short int": (2, "int16"),
    "short unsigned int": (2, "int16"),
    "signed char": (1, "int8"),
    "unsigned char": (1, "uint8"),
    "bool": (1, "bool"),
    "c10::complex<c10::half>": (4, "fp16"),
    "c10::complex<float>": (8, "fp32"),
    "c10::complex<double>": (16, "fp64"),
}

# c10::ScalarType codes as ``Concrete Inputs`` show a ``dtype=`` argument
SCALAR_TYPES = {
    0: "unsigned char",
    1: "signed char",
    2: "short int",
    3: "int",
    4: "long int",
    5: "c10::Half",
    6: "float",
    7: "double",
    9: "c10::complex<float>",
    10: "c10::complex<double>",
    11: "bool",
    15: "c10::BFloat16",
    23: "c10::Float8_e5m2",
    24: "c10::Float8_e4m3fn",
    25: "c10::Float8_e5m2fnuz",
    26: "c10::Float8_e4m3fnuz",
}

_DIMS = msgspec.json.Decoder(list[Any])
_STRS = msgspec.json.Decoder(list[str])


class NotModelled(Exception):
    """The op's recorded arguments are not what its model reads (the reason, in words)."""


def bytes_per_element(dtype: str) -> float | None:
    """Size of one element of a recorded element type, None if unknown (``Scalar``, ``""``).

    Examples
    --------
    >>> bytes_per_element("c10::BFloat16"), bytes_per_element("long int"), bytes_per_element("Scalar")
    (2, 8, None)
    """
    hit = DTYPES.get(dtype.lower())
    return hit[0] if hit else None


def precision(dtype: str) -> str:
    """The precision a recorded element type computes in (``""`` if unknown).

    Examples
    --------
    >>> precision("c10::Float8_e4m3fn"), precision("float"), precision("TensorList")
    ('fp8', 'fp32', '')
    """
    hit = DTYPES.get(dtype.lower())
    return hit[1] if hit else ""


def is_floating(dtype: str) -> bool:
    """Whether a recorded element type is a floating-point type.

    Examples
    --------
    >>> is_floating("c10::BFloat16"), is_floating("long int"), is_floating("Scalar")
    (True, False, False)
    """
    p = precision(dtype)
    return p.startswith("fp") or p == "bf16"


def parse_list(text: str) -> list[Any]:
    """A recorded list (``Input Dims`` JSON or a ``Concrete Inputs`` value such as ``[0, 2, 3]``)."""
    try:
        out = _DIMS.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise NotModelled(f"not a list: {text[:60]!r}") from None
    return out


@dataclass(frozen=True)
class OpArgs:
    """One op's name and recorded arguments (``dims``, ``types``, ``concrete`` of equal length),
    and the serving step it ran in (``step``: its sequences, for the models that read them)."""

    name: str
    dims: Sequence[Any]
    types: Sequence[str]
    concrete: Sequence[str]
    step: Step | None = None

    @classmethod
    def parse(cls, name: str, dims: str, types: str, concrete: str, step: str = "") -> "OpArgs":
        """From the recorded texts (JSON lists); raises :class:`NotModelled` for anything else.

        Examples
        --------
        >>> a = OpArgs.parse("aten::mm", "[[8, 4], [4, 2]]", '["float", "float"]', '["", ""]')
        >>> a.shape(1), a.bpe(0), a.numel(0)
        ((4, 2), 4, 32)
        """
        if not dims or not types:
            raise NotModelled("no shapes recorded (profile with record_shapes=True)")
        try:
            d = _DIMS.decode(dims)
            t = _STRS.decode(types)
            c = _STRS.decode(concrete) if concrete else [""] * len(d)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise NotModelled("recorded arguments are not lists") from None
        if len(t) != len(d):
            raise NotModelled("Input Dims and Input type differ in length")
        if len(c) != len(d):
            c = (list(c) + [""] * len(d))[: len(d)]
        return cls(name, d, t, c, Step.parse(step) if step else None)

    # -- arguments ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.dims)

    def has(self, i: int) -> bool:
        """Whether argument ``i`` exists and is a tensor (a known element type)."""
        return 0 <= i < len(self.types) and bytes_per_element(self.types[i]) is not None

    def shape(self, i: int) -> tuple[int, ...]:
        """The shape of tensor argument ``i`` (``()`` for a 0-dim tensor)."""
        if not 0 <= i < len(self.dims):
            raise NotModelled(f"{self.name} has no argument {i}")
        s = self.dims[i]
        if not isinstance(s, list) or not all(isinstance(x, int) for x in s):
            raise NotModelled(f"argument {i} of {self.name} is not a tensor shape")
        return tuple(s)

    def numel(self, i: int) -> int:
        """Elements of tensor argument ``i`` (1 for a 0-dim tensor)."""
        return prod(self.shape(i))

    def present(self, i: int) -> bool:
        """Whether optional tensor argument ``i`` was given (a non-empty shape)."""
        return 0 <= i < len(self.dims) and isinstance(self.dims[i], list) and len(self.dims[i]) > 0

    def dtype(self, i: int) -> str:
        if not 0 <= i < len(self.types):
            raise NotModelled(f"{self.name} has no argument {i}")
        return self.types[i]

    def bpe(self, i: int) -> float:
        """Bytes per element of tensor argument ``i``."""
        b = bytes_per_element(self.dtype(i))
        if b is None:
            raise NotModelled(f"argument {i} of {self.name} has no known element type ({self.types[i]!r})")
        return b

    def precision(self, i: int) -> str:
        return precision(self.dtype(i))

    def tensor_bytes(self, i: int) -> float:
        """``numel × bytes per element`` of tensor argument ``i``."""
        return self.numel(i) * self.bpe(i)

    # -- scalar arguments --------------------------------------------------------------------
    def text(self, i: int) -> str:
        return self.concrete[i] if 0 <= i < len(self.concrete) else ""

    def flag(self, i: int, default: bool = False) -> bool:
        """A recorded bool (``True``/``False``; ``1``/``0``); ``default`` if not recorded."""
        t = self.text(i).strip()
        if t in ("True", "true", "1"):
            return True
        if t in ("False", "false", "0"):
            return False
        return default

    def ints(self, i: int) -> list[int] | None:
        """A recorded int list (``[1, 1]``) or single int (``3``) as a list; None if not recorded."""
        t = self.text(i).strip()
        if not t:
            return None
        if t.startswith("["):
            vals = parse_list(t)
            if not all(isinstance(v, (int, bool)) for v in vals):
                raise NotModelled(f"argument {i} of {self.name} is not an int list: {t!r}")
            return [int(v) for v in vals]
        try:
            return [int(t)]
        except ValueError:
            raise NotModelled(f"argument {i} of {self.name} is not an int: {t!r}") from None

    def integer(self, i: int, default: int) -> int:
        v = self.ints(i)
        return v[0] if v else default

    def floats(self, i: int) -> list[float] | None:
        """A recorded float list (``[2., 2.]``) or single number as a list; None if not recorded."""
        t = self.text(i).strip().strip("[]")
        if not t:
            return None
        try:
            return [float(v) for v in t.split(",") if v.strip()]
        except ValueError:
            raise NotModelled(f"argument {i} of {self.name} is not a number list: {self.text(i)!r}") from None

    def flags(self, i: int) -> list[bool] | None:
        """A recorded bool list (``[True, True, False]``), None if not recorded."""
        t = self.text(i).strip()
        if not t.startswith("["):
            return None
        return [s.strip() == "True" for s in t.strip("[]").split(",") if s.strip()]

    def scalar_type(self, i: int) -> str | None:
        """The element type a ``dtype=`` argument names (a ScalarType code), None if not given."""
        t = self.text(i).strip()
        if not t:
            return None
        try:
            return SCALAR_TYPES.get(int(t))
        except ValueError:
            return None


def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast shape of several shapes (numpy rules).

    Examples
    --------
    >>> broadcast((8192, 4096), (4096,)), broadcast((1, 12, 5, 5), (1, 1, 5, 5)), broadcast((3,), ())
    ((8192, 4096), (1, 12, 5, 5), (3,))
    """
    n = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(n):
        sizes = {s[len(s) - n + axis] for s in shapes if len(s) - n + axis >= 0}
        big = {x for x in sizes if x != 1}
        if len(big) > 1:
            raise NotModelled(f"shapes {list(shapes)} do not broadcast")
        out.append(big.pop() if big else min(sizes, default=1))
    return tuple(out)
