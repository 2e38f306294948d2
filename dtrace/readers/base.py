"""What a reader returns (:class:`TraceFile`, one :class:`Part` per device) and the
:class:`Reader` interface every format module implements (see :mod:`dtrace.readers`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa


@dataclass
class Part:
    """The events of one device of one trace file (host events included)."""

    device: int
    events: pa.Table
    collectives: pa.Table
    memcpy: pa.Table
    local_index: int = 0  # position of this device among the file's devices


@dataclass
class TraceFile:
    """What a reader returns for one input file."""

    path: str
    format: str
    parts: list[Part]
    rank_hint: int | None = None  # rank the file states (e.g. Kineto distributedInfo)
    rank_per_device: bool = False  # several GPUs in one file, each its own rank (JAX)
    meta: dict[str, Any] = field(default_factory=dict)


class Reader(Protocol):
    name: str

    def guess_can_open(self, path: str, head: bytes) -> bool: ...

    def read(self, path: str, **options: Any) -> TraceFile: ...
