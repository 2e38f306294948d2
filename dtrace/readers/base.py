"""What a reader returns (:class:`TraceFile`, one :class:`Part` per device) and the
:class:`Reader` interface every format module implements (see :mod:`dtrace.readers`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import pyarrow as pa

from ..core.schema import SIDE_SCHEMAS, empty_side


class PartTables(NamedTuple):
    """The tables of one part: its events and every side table by name (absent ones empty)."""

    events: pa.Table
    side: dict[str, pa.Table]


@dataclass
class Part:
    """The events of one device of one trace file (host events included), with its side tables.

    ``collectives`` and ``memcpy`` are the side tables every reader fills; ``side`` holds any
    further ones of :data:`dtrace.core.schema.SIDE_SCHEMAS` the format has (absent ones are empty).
    """

    device: int
    events: pa.Table
    collectives: pa.Table
    memcpy: pa.Table
    local_index: int = 0  # position of this device among the file's devices
    side: dict[str, pa.Table] = field(default_factory=dict)

    def side_tables(self) -> dict[str, pa.Table]:
        """Every registered side table of this part by name, the absent ones empty."""
        given = {"collectives": self.collectives, "memcpy": self.memcpy, **self.side}
        unknown = sorted(set(given) - set(SIDE_SCHEMAS))
        if unknown:
            raise KeyError(f"side tables {unknown} are not registered in dtrace.core.schema.SIDE_SCHEMAS")
        return {k: given[k] if k in given else empty_side(k) for k in SIDE_SCHEMAS}

    def tables(self) -> PartTables:
        """The events and every side table, as the cache stores and the partition loads them."""
        return PartTables(self.events, self.side_tables())


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
