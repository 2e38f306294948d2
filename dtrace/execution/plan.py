"""A run's plan after ingest, made once: which parts there are, their ranks, the partitions that
analyse them and the result-store keys of their groups.

:func:`make_plan` is the one place a run resolves ranks and plans partitions. The run makes it
before starting the engine when every input looks cached (to estimate the work to do), and keeps it
when the ingest then finds those very inputs (:meth:`Plan.fits`); otherwise it is made once, after
ingest. The inputs themselves are found once too (:func:`dtrace.ingest.inputs.find_inputs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..analyses import Analysis
from ..ingest.cache import FileRecord
from ..ingest.ranks import PartSpec, resolve_ranks
from ..options import Options
from ..partitions import store as resultstore
from ..partitions.layout import PartitionSpec, plan_partitions


@dataclass(frozen=True)
class Plan:
    """What a run analyses and how: the parts of its inputs with their ranks, the inputs that
    cannot be ranked, the partitions (for ``workers`` workers) and each store group's key."""

    inputs: tuple[Any, ...]  # what the plan was made from (see :func:`records_key`)
    specs: tuple[PartSpec, ...]
    rank_errors: Mapping[str, str]
    partitions: tuple[PartitionSpec, ...]
    keys: tuple[str | None, ...]  # per store group, in partition order; None: not stored
    workers: int

    def fits(self, records: Sequence[FileRecord], workers: int) -> bool:
        """Whether this plan is the one :func:`make_plan` would make of ``records`` for ``workers``."""
        return self.workers == workers and self.inputs == records_key(records)

    @property
    def groups(self) -> list[Sequence[PartSpec]]:
        """Every store group, in partition order."""
        return [g for p in self.partitions for g in p.store_groups()]


def records_key(records: Sequence[FileRecord]) -> tuple[Any, ...]:
    """What of the ingest records decides a plan: each input's content, parts and rank hints."""
    return tuple((r.path, r.fingerprint, r.error, r.rank_hint, r.rank_per_device, tuple(r.parts)) for r in records)


def make_plan(
    records: Sequence[FileRecord],
    *,
    options: Options,
    ranks: dict[str, int] | None,
    partition_events: int,
    workers: int,
    analyses: Sequence[Analysis],
    keyed: bool,
) -> Plan:
    """Rank the parts of ``records``, plan their partitions for ``workers`` and key their store
    groups (``keyed``: results are stored or reused; the analyses that can be stored decide)."""
    ranking = resolve_ranks(list(records), rank_by=options.rank_by, ranks=ranks)
    partitions = plan_partitions(ranking.specs, partition_events, workers)
    groups = [g for p in partitions for g in p.store_groups()]
    keys = resultstore.keys(groups, options, resultstore.reusable(analyses)) if keyed else [None] * len(groups)
    return Plan(
        inputs=records_key(records),
        specs=tuple(ranking.specs),
        rank_errors=dict(ranking.errors),
        partitions=tuple(partitions),
        keys=tuple(keys),
        workers=workers,
    )
