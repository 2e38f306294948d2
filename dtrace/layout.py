"""How parts are laid out in partitions: whole ranks, batched to a target number of events.

The events of all inputs form one Dask DataFrame whose partitions each hold whole (rank, device)
parts: consecutive ranks (in rank order) are batched until the partition reaches
``target_events``, so hundreds of small ranks share a partition and a large rank stands alone.
Every device of a rank lands in the same partition, so the ranks are the divisions of the
DataFrame. The layout depends only on the parts and the target, never on the number of workers,
so stored per-partition results stay valid from one run to the next.

Ingest is batched the same way, by file size: :func:`ingest_batches` groups small files into one
task (large files stand alone) while keeping enough tasks to feed every worker.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Sequence

from .plan import PartSpec
from .remote import ObjectInfo, is_url

TARGET_EVENTS = 600_000
"""Default largest events per partition: the analyses hold ~1 KB per event at their peak, so a
worker stays under 1 GB (measured: 590k events, 560 MB above the worker's own ~250 MB)."""
MIN_EVENTS = 100_000
"""Partitions are not split for parallelism below this many events (fixed costs would dominate)."""
TARGET_INGEST_BYTES = 32 << 20
"""Default estimated JSON bytes per ingest task."""
GZIP_RATIO = 8
"""Assumed inflation of a gzip input when estimating its content size."""


@dataclass(frozen=True)
class PartitionSpec:
    """One partition: its position and the parts it holds, in (rank, device) order."""

    index: int
    parts: tuple[PartSpec, ...]

    @property
    def n_events(self) -> int:
        return sum(p.n_events for p in self.parts)

    @property
    def ranks(self) -> tuple[int, int]:
        """First and last rank of the partition."""
        return self.parts[0].rank, self.parts[-1].rank

    @property
    def paths(self) -> list[str]:
        return sorted({p.path for p in self.parts})


def plan_partitions(
    specs: Sequence[PartSpec], target_events: int = TARGET_EVENTS, parallelism: int = 1
) -> list[PartitionSpec]:
    """Batch parts (sorted by rank, device) into balanced partitions of whole ranks.

    The number of partitions is enough to keep each under ``target_events`` and, when there is
    enough work (:data:`MIN_EVENTS` per partition at least), one per unit of ``parallelism``
    (the machine's cores or the cluster's workers, never the momentary load), rounded up to a
    whole number of rounds of ``parallelism``; ranks are then cut where the running event count
    is nearest to equal shares. A rank larger than a share stands alone.

    Examples
    --------
    >>> spec = lambda r, n: PartSpec(rank=r, device=0, path=f"r{r}", format="kineto", events="", collectives="",
    ...                              memcpy="", n_events=n)
    >>> [p.ranks for p in plan_partitions([spec(0, 4), spec(1, 4), spec(2, 9), spec(3, 1)], target_events=8)]
    [(0, 1), (2, 2), (3, 3)]
    """
    if target_events < 1:
        raise ValueError("target_events must be >= 1")
    ordered = sorted(specs, key=lambda s: (s.rank, s.device))
    ranks: list[list[PartSpec]] = []
    for s in ordered:
        if ranks and ranks[-1][0].rank == s.rank:
            ranks[-1].append(s)
        else:
            ranks.append([s])
    sizes = [sum(max(p.n_events, 1) for p in group) for group in ranks]
    total = sum(sizes)
    workers = max(parallelism, 1)
    k = max(-(-total // target_events), min(workers, total // MIN_EVENTS, len(ranks)), 1)
    if k > workers:  # a whole number of rounds: no worker left idle in the last one
        k = min(-(-k // workers) * workers, len(ranks))
    share = total / k
    out: list[list[PartSpec]] = []
    done = 0  # events in closed partitions
    size = 0
    for group, n in zip(ranks, sizes):
        # close the current partition if adding this rank takes it past its share of the total
        # (by more than leaving it out would fall short), or past the hard target
        if out and size and (size + n > target_events or done + size + n / 2 > share * len(out)):
            done += size
            out.append([])
            size = 0
        if not out:
            out.append([])
        out[-1].extend(group)
        size += n
    return [PartitionSpec(i, tuple(parts)) for i, parts in enumerate(out)]


def content_size(path: str, info: ObjectInfo | None = None) -> int:
    """Estimated bytes of content of an input: its size, or for gzip the size its trailer states
    (ISIZE, exact below 4 GiB), else :data:`GZIP_RATIO` times the compressed size. A remote input
    is never read here: its listed size (``info``), times :data:`GZIP_RATIO` if its name says gzip."""
    if is_url(path):
        size = info.size if info is not None else 0
        return size * GZIP_RATIO if path.lower().endswith(".gz") else size
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # never open a FIFO or a device here: it could block
            return 0
        with open(path, "rb") as f:
            if f.read(2) != b"\x1f\x8b":
                return st.st_size
            f.seek(-4, os.SEEK_END)
            isize = int.from_bytes(f.read(4), "little")
    except OSError:
        return 0
    # ISIZE is the content size modulo 2**32: trust it unless the file is big enough to wrap it
    return isize if st.st_size < (1 << 31) and isize >= st.st_size else st.st_size * GZIP_RATIO


def ingest_batches(
    paths: Sequence[str], sizes: Sequence[int], workers: int, target_bytes: int = TARGET_INGEST_BYTES
) -> list[list[str]]:
    """Group inputs into ingest tasks of about ``target_bytes`` (never fewer than about four
    tasks per worker while there are enough files), keeping the input order.

    Examples
    --------
    >>> ingest_batches(["a", "b", "c", "d"], [10, 10, 50, 10], workers=1, target_bytes=25)
    [['a', 'b'], ['c'], ['d']]
    """
    total = sum(sizes)
    target = max(1, min(target_bytes, total // max(4 * workers, 1)))
    out: list[list[str]] = []
    size = 0
    for p, n in zip(paths, sizes):
        if not out or size + n > target:
            out.append([])
            size = 0
        out[-1].append(p)
        size += n
    return out
