"""Planning on the client: expand inputs into files, then give every (file, device) its rank.

Both steps are cheap and need no worker: expansion lists paths, and rank resolution works
on the small :class:`~dtrace.cache.FileRecord` objects that ingest returns.
"""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass

from .cache import FileRecord
from .errors import UsageError

TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".nsys-rep", ".csv", ".xplane.pb")
# JSON files that sit beside traces but are not traces (dtrace's own outputs, synth ground truth);
# skipped when a directory is searched, still read when named explicitly
NOT_TRACES = frozenset({"manifest.json", "ground_truth.json", "source.json"})
_RANK_RE = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def expand_inputs(inputs: list[str] | str, *, exclude: list[str] | None = None) -> list[str]:
    """Files, directories (searched recursively for trace files) and globs → sorted unique paths."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    excl = [os.path.abspath(e) + os.sep for e in (exclude or [])]
    found: list[str] = []
    for item in inputs:
        item = os.fspath(item)
        if os.path.isdir(item):
            for root, dirs, files in os.walk(item):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for f in sorted(files):
                    if f.lower().endswith(TRACE_SUFFIXES) and not f.startswith(".") and f not in NOT_TRACES:
                        found.append(os.path.join(root, f))
        elif os.path.exists(item):
            found.append(item)
        else:
            matches = sorted(glob.glob(item, recursive=True))
            if not matches:
                raise UsageError(f"no such file, directory or glob match: {item}")
            found.extend(m for m in matches if os.path.isfile(m))
    out = []
    seen = set()
    for f in found:
        a = os.path.abspath(f)
        if a in seen or any(a.startswith(e) for e in excl):
            continue
        seen.add(a)
        out.append(a)
    if not out:
        raise UsageError(f"no trace files found in {list(inputs)} (looked for {', '.join(TRACE_SUFFIXES)})")
    return sorted(out)


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


def resolve_ranks(records: list[FileRecord], *, rank_by: str = "auto",
                  ranks: dict[str, int] | None = None) -> list[PartSpec]:
    """Assign a global rank to every part; records that cannot be ranked get an error.

    ``auto``: the rank the file states (Kineto ``distributedInfo``), else ``rank<N>`` in the
    file name, else — for a single input only — rank 0. Several inputs without a rank fail
    with an error naming them and ``--rank-by order``. ``order``: inputs are numbered in
    sorted path order. Files with several GPUs, each its own rank (JAX), take consecutive
    ranks from their file's base rank. Two inputs claiming the same (rank, device) both fail.
    """
    ok = [r for r in records if r.error is None]
    explicit = {os.path.abspath(k): v for k, v in (ranks or {}).items()}
    base: dict[str, int | None] = {}
    for r in ok:
        if r.path in explicit:
            base[r.path] = explicit[r.path]
        elif rank_by == "order":
            base[r.path] = None
        else:
            base[r.path] = r.rank_hint if r.rank_hint is not None else rank_from_filename(r.path)
    unknown = [r for r in ok if base[r.path] is None]
    if rank_by == "order" or (len(ok) == 1 and unknown):
        nxt = 0
        for r in sorted(ok, key=lambda r: r.path):
            if base[r.path] is None:
                base[r.path] = nxt
            nxt = max(nxt, base[r.path] + (_n_devices(r) if r.rank_per_device else 1))
    elif unknown:
        for r in unknown:
            r.error = (f"{r.path}: cannot tell this trace's rank: no rank in distributedInfo or in the file "
                       f"name (rank<N>), and {len(ok)} inputs are given; pass --rank-by order "
                       f"(rank_by='order') to number inputs by sorted path")
            r.error_type = "RankError"
    # files holding several GPUs that are each a rank (JAX: one file per host) state a process
    # index, not a global rank: number their devices consecutively in process-index order
    multi = sorted((r for r in ok if r.error is None and r.rank_per_device and base[r.path] is not None),
                   key=lambda r: (base[r.path], r.path))
    if multi and rank_by != "order" and not all(r.path in explicit for r in multi):
        nxt = 0
        for r in multi:
            base[r.path] = nxt
            nxt += _n_devices(r)
    # rank-per-device files (several GPUs, one rank each) are numbered consecutively
    specs: list[tuple[FileRecord, PartSpec]] = []
    for r in ok:
        if r.error is not None:
            continue
        b = base[r.path]
        assert b is not None
        for p in r.parts:
            rank = b + p.local_index if r.rank_per_device else b
            specs.append((r, PartSpec(rank=int(rank), device=int(p.device), path=r.path, format=r.format,
                                      events=p.events, collectives=p.collectives, memcpy=p.memcpy,
                                      base_ns=int((r.meta or {}).get("base_time_ns") or 0),
                                      fingerprint=r.fingerprint, n_events=p.n_events,
                                      local_index=p.local_index, checksums=tuple(sorted(p.checksums.items())))))
    claims: dict[tuple[int, int], list[FileRecord]] = {}
    for r, s in specs:
        claims.setdefault((s.rank, s.device), []).append(r)
    bad: dict[str, str] = {}
    for (rank, dev), rs in claims.items():
        paths = sorted({r.path for r in rs})
        if len(paths) > 1:
            for r in rs:
                others = ", ".join(os.path.basename(p) for p in paths if p != r.path)
                bad[r.path] = (f"{r.path}: rank {rank} device {dev} is also claimed by {others}; "
                               f"pass --rank-by order to number inputs by sorted path")
    for r in ok:
        if r.path in bad and r.error is None:
            r.error, r.error_type = bad[r.path], "RankError"
    return sorted((s for r, s in specs if r.error is None), key=lambda s: (s.rank, s.device))
