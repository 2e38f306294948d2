"""How the parts of a job are laid out for analysis: store groups, partitions, ingest batches.

Every unit holds whole ranks (all the devices of a rank together), in rank order:

- a *store group* (:func:`store_groups`) is whole ranks batched to at most :data:`GROUP_EVENTS`
  events (a larger rank stands alone). The groups depend on the parts alone, never on the number
  of workers, and results are stored per group (:mod:`dtrace.partitions.store`), so a run on
  another cluster size finds the results a previous run stored;
- a *partition* (:func:`plan_partitions`, :class:`PartitionSpec`) is whole store groups batched
  to the partition's share of the job's events: enough partitions to keep each under
  ``target_events`` (:data:`TARGET_EVENTS` by default) and, when there is work enough
  (:data:`MIN_EVENTS` each), at least one per worker, in whole rounds of the workers. Hundreds of
  small ranks share a partition; a store group larger than a share stands alone. The analysis
  runs one task per partition (:func:`dtrace.execution.tasks.analyze_partition`), and
  :func:`dtrace.events` on a results folder gives the partitions that analysis used as one Dask
  DataFrame whose divisions are ranks;
- an *ingest batch* (:func:`ingest_batches`) is consecutive input files, in input order, of
  about :data:`TARGET_INGEST_BYTES` of content (:func:`content_size`), fewer bytes when that
  keeps about four tasks per worker; a large file stands alone.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Sequence

from ..ingest.ranks import PartSpec
from ..ingest.remote import ObjectInfo, is_url

TARGET_EVENTS = 600_000
"""Default largest events per partition: the analyses hold ~1 KB per event at their peak, so a
worker stays under 1 GB (measured: 590k events, 560 MB above the worker's own ~250 MB)."""
MIN_EVENTS = 100_000
"""Partitions are not split for parallelism below this many events (fixed costs would dominate)."""
GROUP_EVENTS = 100_000
"""Events per store group (:func:`store_groups`): the unit partitions are cut into and results are
stored by. Small enough to balance partitions over the workers, large enough that storing and
loading a group's tables costs little next to analysing its events."""
TARGET_INGEST_BYTES = 32 << 20
"""Default estimated JSON bytes per ingest task."""
GZIP_RATIO = 8
"""Assumed inflation of a gzip input when estimating its content size."""


@dataclass(frozen=True)
class PartitionSpec:
    """One partition: its position and the parts it holds, in (rank, device) order; ``groups``:
    how many parts each of its store groups holds, in order (empty: the partition is one
    group)."""

    index: int
    parts: tuple[PartSpec, ...]
    groups: tuple[int, ...] = ()

    def store_groups(self) -> list[tuple[PartSpec, ...]]:
        """The parts of each store group of the partition (results are stored per group)."""
        out, at = [], 0
        for n in self.groups or (len(self.parts),):
            out.append(self.parts[at : at + n])
            at += n
        return out

    def halves(self) -> list[PartitionSpec] | None:
        """Two halves of a partition (for a failed task): whole store groups when it has several,
        else its parts cut in two; None for a single part."""
        groups = self.store_groups()
        if len(groups) > 1:
            mid = len(groups) // 2
            cut = sum(len(g) for g in groups[:mid])
            return [
                PartitionSpec(self.index, self.parts[:cut], tuple(len(g) for g in groups[:mid])),
                PartitionSpec(self.index, self.parts[cut:], tuple(len(g) for g in groups[mid:])),
            ]
        if len(self.parts) < 2:
            return None
        mid = len(self.parts) // 2
        return [PartitionSpec(self.index, self.parts[:mid]), PartitionSpec(self.index, self.parts[mid:])]

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


def _whole_ranks(specs: Sequence[PartSpec]) -> list[list[PartSpec]]:
    """The parts grouped by rank, in (rank, device) order."""
    ranks: list[list[PartSpec]] = []
    for s in sorted(specs, key=lambda s: (s.rank, s.device)):
        if ranks and ranks[-1][0].rank == s.rank:
            ranks[-1].append(s)
        else:
            ranks.append([s])
    return ranks


def store_groups(specs: Sequence[PartSpec], group_events: int = GROUP_EVENTS) -> list[list[PartSpec]]:
    """Whole ranks in rank order, batched to at most ``group_events`` events (a larger rank
    stands alone): the units of the partitions and of the result store. They depend on the
    parts alone, so results stored by one run are found by the next on any cluster.

    Examples
    --------
    >>> spec = lambda r, n: PartSpec(rank=r, device=0, path=f"r{r}", format="kineto", events="", collectives="",
    ...                              memcpy="", n_events=n)
    >>> [[p.rank for p in g] for g in store_groups([spec(0, 4), spec(1, 4), spec(2, 9), spec(3, 1)], 8)]
    [[0, 1], [2], [3]]
    """
    out: list[list[PartSpec]] = []
    size = 0
    for rank in _whole_ranks(specs):
        n = sum(max(p.n_events, 1) for p in rank)
        if not out or (size and size + n > group_events):
            out.append([])
            size = 0
        out[-1].extend(rank)
        size += n
    return out


def plan_partitions(
    specs: Sequence[PartSpec], target_events: int = TARGET_EVENTS, parallelism: int = 1
) -> list[PartitionSpec]:
    """Batch parts (sorted by rank, device) into balanced partitions of whole store groups.

    The store groups (:func:`store_groups`, of at most ``min(GROUP_EVENTS, target_events)``
    events) do not depend on ``parallelism``; the number of partitions is enough to keep each
    under ``target_events`` and, when there is enough work (:data:`MIN_EVENTS` per partition at
    least), one per unit of ``parallelism`` (the machine's cores or the cluster's workers, never
    the momentary load), rounded up to a whole number of rounds of ``parallelism``; groups are
    then cut where the running event count is nearest to equal shares. A group larger than a
    share stands alone.

    Examples
    --------
    >>> spec = lambda r, n: PartSpec(rank=r, device=0, path=f"r{r}", format="kineto", events="", collectives="",
    ...                              memcpy="", n_events=n)
    >>> [p.ranks for p in plan_partitions([spec(0, 4), spec(1, 4), spec(2, 9), spec(3, 1)], target_events=8)]
    [(0, 1), (2, 2), (3, 3)]
    """
    if target_events < 1:
        raise ValueError("target_events must be >= 1")
    groups = store_groups(specs, min(GROUP_EVENTS, target_events))
    sizes = [sum(max(p.n_events, 1) for p in group) for group in groups]
    total = sum(sizes)
    workers = max(parallelism, 1)
    k = max(-(-total // target_events), min(workers, total // MIN_EVENTS, len(groups)), 1)
    if k > workers:  # a whole number of rounds: no worker left idle in the last one
        k = min(-(-k // workers) * workers, len(groups))
    share = total / k
    out: list[list[list[PartSpec]]] = []
    done = 0  # events in closed partitions
    size = 0
    for group, n in zip(groups, sizes):
        # close the current partition if adding this group takes it past its share of the total
        # (by more than leaving it out would fall short), or past the hard target
        if out and size and (size + n > target_events or done + size + n / 2 > share * len(out)):
            done += size
            out.append([])
            size = 0
        if not out:
            out.append([])
        out[-1].append(group)
        size += n
    return [PartitionSpec(i, tuple(p for g in gs for p in g), tuple(len(g) for g in gs)) for i, gs in enumerate(out)]


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


def guessed_size(path: str) -> int:
    """:func:`content_size` without opening the file: its size, times :data:`GZIP_RATIO` if its
    name says gzip (0 if it cannot be stat'ed)."""
    try:
        size = os.stat(path).st_size
    except OSError:
        return 0
    return size * GZIP_RATIO if path.lower().endswith(".gz") else size


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
