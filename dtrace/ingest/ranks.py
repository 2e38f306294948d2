"""Rank resolution on the client: every (file, device) an input holds gets its global rank.

Cheap and worker-free: it works on the small :class:`~dtrace.ingest.cache.FileRecord` objects that
ingest returns. The rank of a part is, in order: the one given explicitly (``ranks=``), the one
the trace states, ``rank<N>`` in its file name, else sorted order with ``rank_by="order"``;
:func:`resolve_ranks` gives a :class:`PartSpec` per part and one-line errors for the inputs
that cannot be ranked.
"""

from __future__ import annotations

import numbers
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import RankError, UsageError
from .remote import norm

if TYPE_CHECKING:
    from .cache import FileRecord, PartRecord

_RANK_RE = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
RANK_MAX = 2**31 - 1  # ranks are int32 in the event table


def rank_from_filename(path: str) -> int | None:
    """The rank a file name states (``trace_rank-3.json``, ``rank7.pt.trace.json.gz``), else None."""
    found = _RANK_RE.findall(os.path.basename(path))
    return int(found[-1]) if found else None


def _n_devices(r: FileRecord) -> int:
    """GPU planes of a rank-per-device file (a plane without GPU work still holds its rank)."""
    n = (r.meta or {}).get("n_devices")
    return int(n) if n else max((p.local_index for p in r.parts), default=-1) + 1


@dataclass(frozen=True)
class PartSpec:
    """One (rank, device) partition to analyse: where its cached tables are."""

    rank: int
    device: int
    path: str
    format: str
    events: str
    collectives: str
    memcpy: str
    base_ns: int = 0  # the trace's time origin (Kineto baseTimeNanoseconds), for float-µs emulation
    fingerprint: str = ""  # content hash of the input (with the part's index: what its cached tables hold)
    n_events: int = 0
    local_index: int = 0
    checksums: tuple[tuple[str, str], ...] = ()  # (cached file name, its fingerprint)
    side: tuple[tuple[str, str], ...] = ()  # (further side table, its cached file), tables with rows only
    session_ns: tuple[int, int] = (-1, -1)  # the profiling session's start and end (rocprofv3), -1 unknown
    groups: tuple[tuple[str, int], ...] = ()  # in a pack: (table, its row group for this part)


def part_spec(record: FileRecord, part: PartRecord, rank: int) -> PartSpec:
    """The :class:`PartSpec` of one part of an ingested input, given its rank."""
    return PartSpec(
        rank=rank,
        device=int(part.device),
        path=record.path,
        format=record.format,
        events=part.events,
        collectives=part.collectives,
        memcpy=part.memcpy,
        base_ns=int((record.meta or {}).get("base_time_ns") or 0),
        fingerprint=record.fingerprint,
        n_events=part.n_events,
        local_index=part.local_index,
        checksums=tuple(sorted(part.checksums.items())),
        side=tuple(sorted(part.side.items())),
        groups=tuple(sorted(part.groups.items())),
        session_ns=session_window(record.meta),
    )


def session_window(meta: dict[str, Any] | None) -> tuple[int, int]:
    """The profiling session ``(start_ns, end_ns)`` a reader recorded (``meta["session_ns"]``), else ``(-1, -1)``.

    Examples
    --------
    >>> session_window({"session_ns": [5, 9]}), session_window({})
    ((5, 9), (-1, -1))
    """
    s = (meta or {}).get("session_ns")
    if isinstance(s, (list, tuple)) and len(s) == 2 and all(isinstance(v, int) for v in s) and 0 <= s[0] <= s[1]:
        return int(s[0]), int(s[1])
    return -1, -1


def explicit_ranks(ranks: dict[str, int] | None) -> dict[str, int]:
    """Explicit ``{path: rank}`` keyed by absolute path; a rank that is not an integer from 0 to
    2**31-1 is a :class:`UsageError` (checked before any work)."""
    out: dict[str, int] = {}
    for path, rank in (ranks or {}).items():
        if isinstance(rank, bool) or not isinstance(rank, numbers.Integral) or not 0 <= rank <= RANK_MAX:
            raise UsageError(f"invalid rank {rank!r} for {path}: a rank is an integer from 0 to {RANK_MAX}")
        out[norm(path)] = int(rank)
    return out


@dataclass
class Ranking:
    """What rank resolution gives: the parts to analyse, and the inputs that cannot be ranked.

    ``errors`` maps an input's path to its one-line :class:`~dtrace.errors.RankError` message;
    the records given to :func:`resolve_ranks` are never changed.
    """

    specs: list[PartSpec]
    errors: dict[str, str] = field(default_factory=dict)


def resolve_ranks(records: list[FileRecord], *, rank_by: str = "auto", ranks: dict[str, int] | None = None) -> Ranking:
    """Assign a global rank to every part of the inputs that were read without error.

    ``auto``: the rank the file states (Kineto ``distributedInfo``), else ``rank<N>`` in the
    file name, else — for a single input only — rank 0. Several inputs without a rank fail
    with an error naming them and ``--rank-by order``. ``order``: inputs are numbered in
    sorted path order. ``ranks`` (explicit ``{path: rank}``) wins over both.

    Files with several GPUs that are each a rank (JAX, Nsight Systems, ``nsys stats`` CSVs)
    state a process index N in their name: with D GPUs in every such file, their GPUs take
    ranks N·D … N·D + D − 1 (a one-GPU ``rank-4_cuda_gpu_trace.csv`` is rank 4, whichever other
    files are given); files with different GPU counts are numbered consecutively in
    process-index order instead.

    A rank belongs to one input: inputs claiming the same rank (on any devices) all fail; a
    file holding several devices of one rank (Kineto) is one claim. A rank outside 0 to
    2**31-1 (``distributedInfo.rank = -1``) fails its input. See docs/semantics.md, "Ranks and
    stragglers".
    """
    errors: dict[str, str] = {}
    explicit = explicit_ranks(ranks)
    ok = [r for r in records if r.error is None]
    base = _stated_ranks(ok, explicit, rank_by, errors)
    ok = [r for r in ok if r.path not in errors]
    _number_unranked(ok, base, rank_by, errors)
    if rank_by != "order":
        _rank_per_device(ok, base, explicit, errors)
    specs = _part_specs(ok, base, errors)
    _refuse_shared_ranks(specs, errors)
    kept = sorted((s for s in specs if s.path not in errors), key=lambda s: (s.rank, s.device))
    return Ranking(kept, errors)


def _fail(errors: dict[str, str], path: str, problem: str) -> None:
    """Record a one-line rank error for ``path`` (the first error of an input wins)."""
    errors.setdefault(path, str(RankError(path, problem)))


def _stated_ranks(
    ok: list[FileRecord], explicit: dict[str, int], rank_by: str, errors: dict[str, str]
) -> dict[str, int | None]:
    """The rank each input states: given explicitly, in the trace, or in its file name (None: none)."""
    base: dict[str, int | None] = {}
    for r in ok:
        if r.path in explicit:
            base[r.path] = explicit[r.path]
        elif rank_by == "order":
            base[r.path] = None
        elif r.rank_hint is not None:
            base[r.path] = r.rank_hint
            if not 0 <= r.rank_hint <= RANK_MAX:
                _fail(errors, r.path, f"the trace states rank {r.rank_hint}, which is not a rank (0 to {RANK_MAX})")
        else:
            named = base[r.path] = rank_from_filename(r.path)
            if named is not None and named > RANK_MAX:
                _fail(errors, r.path, f"the file name states rank {named}, which is not a rank (0 to {RANK_MAX})")
    return base


def _number_unranked(ok: list[FileRecord], base: dict[str, int | None], rank_by: str, errors: dict[str, str]) -> None:
    """Number inputs by sorted path (``order``, or a single input without a rank); with several
    inputs and ``auto``, an input without a rank fails."""
    unknown = [r for r in ok if base[r.path] is None]
    if rank_by == "order" or (len(ok) == 1 and unknown):
        nxt = 0
        for r in sorted(ok, key=lambda r: r.path):
            rank = base[r.path]
            if rank is None:
                rank = base[r.path] = nxt
            nxt = max(nxt, rank + (_n_devices(r) if r.rank_per_device else 1))
    else:
        for r in unknown:
            _fail(
                errors,
                r.path,
                f"cannot tell this trace's rank: no rank in {_rank_source(r.format)} or in the file name "
                f"(rank<N>), and {len(ok)} inputs are given; pass --rank-by order "
                "(rank_by='order') to number inputs by sorted path",
            )


def _rank_source(fmt: str) -> str:
    """Where a trace of ``fmt`` states its rank, for an error message (Kineto's
    ``distributedInfo``; a JAX profile's process index in its file name; ...).

    Examples
    --------
    >>> _rank_source("kineto"), _rank_source("jax")
    ('distributedInfo', 'the trace')
    """
    return "distributedInfo" if fmt in ("kineto", "") else "the trace"


def _rank_per_device(
    ok: list[FileRecord], base: dict[str, int | None], explicit: dict[str, int], errors: dict[str, str]
) -> None:
    """Files holding several GPUs that are each a rank state a process index, not a global rank:
    their first rank is index × GPUs per file (consecutive numbers if the GPU counts differ)."""
    multi = sorted(
        (r for r in ok if r.path not in errors and r.rank_per_device and r.path not in explicit),
        key=lambda r: (base[r.path], r.path),
    )
    uniform = len({_n_devices(r) for r in multi}) == 1
    nxt = 0
    for r in multi:
        index = base[r.path]
        assert index is not None
        base[r.path] = index * _n_devices(r) if uniform else nxt
        nxt += _n_devices(r)


def _part_specs(ok: list[FileRecord], base: dict[str, int | None], errors: dict[str, str]) -> list[PartSpec]:
    """One :class:`PartSpec` per part of every ranked input (its device's rank for rank-per-device files)."""
    specs: list[PartSpec] = []
    for r in ok:
        first = base[r.path]
        if r.path in errors or first is None:
            continue
        if first + (_n_devices(r) - 1 if r.rank_per_device else 0) > RANK_MAX:
            _fail(errors, r.path, f"its ranks would start at {first}, past the largest rank {RANK_MAX}")
            continue
        specs += [part_spec(r, p, int(first + p.local_index if r.rank_per_device else first)) for p in r.parts]
    return specs


def _refuse_shared_ranks(specs: list[PartSpec], errors: dict[str, str]) -> None:
    """Every input claiming a rank another input claims too fails (a rank belongs to one input)."""
    claims: dict[int, set[str]] = {}
    for s in specs:
        claims.setdefault(s.rank, set()).add(s.path)
    for rank, paths in sorted(claims.items()):
        if len(paths) > 1:
            for path in sorted(paths):
                others = ", ".join(os.path.basename(p) for p in sorted(paths) if p != path)
                _fail(
                    errors,
                    path,
                    f"rank {rank} is also claimed by {others}; pass --rank-by order to number inputs by sorted path",
                )
