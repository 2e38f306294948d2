"""Planning on the client: expand inputs into files, then give every (file, device) its rank.

Both steps are cheap and need no worker: expansion lists paths, and rank resolution works
on the small :class:`~dtrace.cache.FileRecord` objects that ingest returns.
"""

from __future__ import annotations

import fnmatch
import glob
import numbers
import os
import re
import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .constants import DEFAULT_MAX_INPUT_SIZE as DEFAULT_MAX_INPUT_SIZE  # re-exported
from .errors import DtraceError, NotRegularFile, RankError, UsageError
from .fileio import refusal
from .readers._io import RESULTS_MANIFEST, own_output, read_head
from .remote import ObjectInfo, is_url, norm

if TYPE_CHECKING:  # the records are only built here for refused inputs: the cache (pyarrow) is imported then
    from .cache import FileRecord, PartRecord

TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".nsys-rep", ".csv", ".xplane.pb", "_results.db")
# JSON files that sit beside traces but are not traces (dtrace's own outputs, synth ground truth);
# skipped when a directory is searched, still read when named explicitly
NOT_TRACES = frozenset({"manifest.json", "ground_truth.json", "source.json"})
_RANK_RE = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
RANK_MAX = 2**31 - 1  # ranks are int32 in the event table
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}
_SIZE_RE = re.compile(r"(\d+(?:\.\d*)?)\s*([a-zA-Z]*)")


def expand_inputs(
    inputs: list[str] | str,
    *,
    exclude: list[str] | None = None,
    infos: dict[str, ObjectInfo] | None = None,
    skipped: list[str] | None = None,
) -> list[str]:
    """Files, directories (searched recursively for trace files) and globs → sorted unique paths.

    Nothing is opened here but the ``manifest.json`` of searched folders: a folder whose
    manifest dtrace wrote holds dtrace's results (tables, cache, stored results) and is left
    out with everything below it, each such folder noted in ``skipped`` (other outputs of
    dtrace are recognised by their content when read: :func:`dtrace.readers.detect`). Inputs
    that are not regular files (FIFOs, devices, sockets) and folders that cannot be listed stay
    in the list, so that :func:`refuse_irregular` reports each of them as a failed input instead
    of a silent gap; directories matched by a glob are not inputs and are left out.

    URLs (``s3://bucket/job/``, ``gs://.../*.json.gz``) are listed the same way on their store
    (:func:`dtrace.remote.expand`); ``infos``, when given, receives what the listing says of each
    object (size, identity), so that the client needs no further request to plan the run. A URL
    that cannot be listed (a missing bucket, no permission) stays in the list as an input of its
    own, which then fails with that one-line error while the other inputs are analysed.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    excl = [e.rstrip("/") + "/" if is_url(e) else os.path.abspath(e) + os.sep for e in (exclude or [])]
    found: list[str] = []
    pruned: list[str] = []
    for item in inputs:
        item = os.fspath(item)
        if is_url(item):
            found.extend(_expand_url(item, infos))
        elif os.path.isdir(item):
            _search_folder(item, found, pruned)
        elif os.path.exists(item):
            found.append(item)
        else:
            found.extend(_glob_item(item))
    out = _unique(found, excl)
    if skipped is not None:
        skipped.extend(f"{d}: skipped, a results folder of dtrace (its manifest.json)" for d in pruned)
    if not out:
        why = f"; skipped dtrace's own results in {', '.join(pruned)}" if pruned else ""
        raise UsageError(f"no trace files found in {list(inputs)} (looked for {', '.join(TRACE_SUFFIXES)}){why}")
    return sorted(out)


def _search_folder(item: str, found: list[str], pruned: list[str]) -> None:
    """Add the trace files below folder ``item`` to ``found`` (sorted, hidden ones left out) and
    the results folders of dtrace found there (left out with everything below) to ``pruned``."""
    # a folder that cannot be listed (permissions, I/O error) becomes an input of its own
    for root, dirs, files in os.walk(item, onerror=lambda err: found.append(err.filename)):
        if "manifest.json" in files and _is_results_folder(root):
            pruned.append(os.path.abspath(root))
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in sorted(files):
            if f.lower().endswith(TRACE_SUFFIXES) and not f.startswith(".") and f not in NOT_TRACES:
                found.append(os.path.join(root, f))


def _glob_item(item: str) -> list[str]:
    """What glob ``item`` matches, folders left out; a usage error when it matches nothing."""
    matches = sorted(glob_files(item))
    if not matches:
        raise UsageError(f"no such file, directory or glob match: {item}")
    return [m for m in matches if not os.path.isdir(m)]


def _unique(found: list[str], excl: list[str]) -> list[str]:
    """The normalised paths, each once (first seen first), those under an excluded folder left out."""
    out = []
    seen = set()
    for f in found:
        a = norm(f)
        if a in seen or any(a.startswith(e) for e in excl):
            continue
        seen.add(a)
        out.append(a)
    return out


def _expand_url(url: str, infos: dict[str, ObjectInfo] | None) -> list[str]:
    """The object URLs a URL input names (see :func:`expand_inputs`)."""
    from .remote import RemoteError, expand  # noqa: PLC0415 - only runs that read URLs

    try:
        objects = expand(url, TRACE_SUFFIXES, NOT_TRACES)
    except RemoteError:
        return [url]  # fails as an input of its own, with the store's one-line error
    if infos is not None:
        infos.update((o.url, o) for o in objects)
    return [o.url for o in objects]


def glob_files(pattern: str) -> list[str]:
    """What ``glob.glob(pattern, recursive=True)`` matches, visiting every folder once.

    ``glob``'s ``**`` follows links into folders without remembering where it has been, so a link
    back to a parent (``d/a -> ..``; two such links double the paths at every level) makes it run
    for ever. Here ``**`` walks each base folder with ``os.walk``, following links but entering
    each real folder once, and matches the rest of the pattern component by component (``**``:
    any number of folders, as in ``glob``; names starting with ``.`` only where the pattern
    spells the dot).

    Examples
    --------
    >>> import os, tempfile
    >>> d = tempfile.mkdtemp(); os.makedirs(f"{d}/a/b"); open(f"{d}/a/b/r.json", "w").close()
    >>> os.symlink("..", f"{d}/a/b/up"); os.symlink("..", f"{d}/a/b/up2")      # loops
    >>> [os.path.relpath(p, d) for p in glob_files(f"{d}/**/*.json")]
    ['a/b/r.json']
    """
    parts = pattern.split(os.sep)
    if "**" not in parts:
        return glob.glob(pattern)
    i = parts.index("**")
    head, rest = os.sep.join(parts[:i]), parts[i:]
    bases = (glob.glob(head) if glob.has_magic(head) else [head]) if head or i else [""]
    dotted = any(p.startswith(".") for p in rest)
    out: list[str] = []
    for base in bases:
        root = base or os.curdir
        if not os.path.isdir(root):
            continue
        seen: set[tuple[int, int]] = set()
        for folder, dirs, files in os.walk(root, followlinks=True):
            keep = _unvisited(folder, dirs, seen, dotted)
            dirs[:] = keep
            rel = os.path.relpath(folder, root)
            prefix = [] if rel == os.curdir else rel.split(os.sep)
            for name in files + keep:
                if _match(rest, [*prefix, name]):
                    out.append(os.path.join(base, *prefix, name) if base else os.path.join(*prefix, name))
    return out


def _unvisited(folder: str, dirs: list[str], seen: set[tuple[int, int]], dotted: bool) -> list[str]:
    """The sub-folders of ``folder`` to enter (sorted): each real folder once (``seen``, updated),
    hidden ones only when the pattern spells the dot (``dotted``)."""
    keep = []
    for d in sorted(dirs):
        try:
            st = os.stat(os.path.join(folder, d))
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in seen or (d.startswith(".") and not dotted):
            continue
        seen.add((st.st_dev, st.st_ino))
        keep.append(d)
    return keep


def _match(pattern: list[str], parts: list[str]) -> bool:
    """Whether path components ``parts`` match glob components ``pattern`` (``**``: any number)."""
    if not pattern:
        return not parts
    first = pattern[0]
    if first == "**":
        for k in range(len(parts) + 1):
            if k and parts[k - 1].startswith("."):
                return False
            if _match(pattern[1:], parts[k:]):
                return True
        return False
    if not parts:
        return False
    if glob.has_magic(first):
        ok = not (parts[0].startswith(".") and not first.startswith(".")) and fnmatch.fnmatch(parts[0], first)
    else:
        ok = parts[0] == first
    return ok and _match(pattern[1:], parts[1:])


def _is_results_folder(folder: str) -> bool:
    """Whether ``folder/manifest.json`` is a manifest dtrace wrote (by its first bytes; a FIFO or
    a link there is never opened)."""
    path = os.path.join(folder, "manifest.json")
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        return own_output(read_head(path)) == RESULTS_MANIFEST
    except (OSError, DtraceError):
        return False


def refuse_irregular(paths: list[str]) -> tuple[list[str], list[FileRecord]]:
    """Split ``paths`` into regular files and failed records of the others, checked with
    ``stat`` only: a FIFO, a device or a socket is never opened (opening a FIFO blocks until
    someone writes to it), so it can neither hang the run nor be read by a worker.

    A folder in ``paths`` is one :func:`expand_inputs` could not list: it fails as an input
    of its own (the traces in it are missing from the run, and the run says so), not as a
    usage error that would stop the analysis of every readable input.
    """
    ok: list[str] = []
    refused: list[FileRecord] = []
    for path in paths:
        why = None if is_url(path) else refusal(path)
        if why is None:
            ok.append(path)
            continue
        if os.path.isdir(path):
            try:
                with os.scandir(path):
                    pass
                why = "is a folder, not a trace file"
            except OSError as exc:
                why = f"is a folder that cannot be listed ({exc.strerror or exc}): the traces in it are not analysed"
        from .cache import FileRecord  # noqa: PLC0415

        refused.append(FileRecord(path=path, error=str(NotRegularFile(path, why)), error_type=NotRegularFile.__name__))
    return ok, refused


def parse_size(size: int | str | None) -> int | None:
    """A size limit in bytes: an int, a string such as ``"64GiB"``, ``"500MB"``, ``"1048576"``,
    or ``None`` / ``"unlimited"`` for no limit.

    Examples
    --------
    >>> parse_size("64GiB"), parse_size("1.5 kB"), parse_size(4096), parse_size("unlimited")
    (68719476736, 1500, 4096, None)
    """
    if size is None or (isinstance(size, str) and size.strip().lower() in ("unlimited", "none")):
        return None
    if isinstance(size, int) and not isinstance(size, bool):
        n: float = size
    else:
        m = _SIZE_RE.fullmatch(str(size).strip())
        if m is None or m.group(2).lower() not in _SIZE_UNITS:
            raise UsageError(
                f"invalid size {size!r}: give bytes or a number with a unit ({', '.join(_SIZE_UNITS)}), or 'unlimited'"
            )
        n = float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    if not 0 < n < 2**63:
        raise UsageError(f"invalid size {size!r}: a size limit must be positive")
    return int(n)


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
                f"cannot tell this trace's rank: no rank in distributedInfo or in the file name "
                f"(rank<N>), and {len(ok)} inputs are given; pass --rank-by order "
                "(rank_by='order') to number inputs by sorted path",
            )


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
