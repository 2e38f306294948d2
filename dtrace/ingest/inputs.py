"""Input expansion on the client: files, folders, globs and URLs become a sorted list of trace files.

Cheap and worker-free: :func:`expand_inputs` lists paths (a folder dtrace wrote results into is
left out whole) and :func:`refuse_irregular` fails FIFOs, devices and unlistable folders as
inputs of their own, checked with ``stat`` only, so nothing is opened that could block. The
ranks of the files are given after ingest, by :mod:`dtrace.ingest.ranks`.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.constants import DEFAULT_MAX_INPUT_SIZE as DEFAULT_MAX_INPUT_SIZE  # re-exported
from ..core.fileio import refusal
from ..errors import DtraceError, NotRegularFile, UsageError
from ..readers._io import RESULTS_MANIFEST, own_output, read_head
from .remote import ObjectInfo, is_url, norm

if TYPE_CHECKING:  # the records are only built here for refused inputs: the cache (pyarrow) is imported then
    from .cache import FileRecord

TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".nsys-rep", ".csv", ".xplane.pb", "_results.db")
# JSON files that sit beside traces but are not traces (dtrace's own outputs, synth ground truth);
# skipped when a directory is searched, still read when named explicitly
NOT_TRACES = frozenset({"manifest.json", "ground_truth.json", "source.json"})
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
    (:func:`dtrace.ingest.remote.expand`); ``infos``, when given, receives what the listing says of each
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


@dataclass(frozen=True)
class InputSet:
    """The inputs of a run, found once (:func:`find_inputs`) and handed to whatever needs them
    (the CLI's up-to-date check, the start of its workers, :func:`dtrace.analyze`)."""

    given: tuple[str, ...]  # what was asked for
    out: str | None  # the results folder they were found for (left out of them)
    files: tuple[str, ...]  # regular files and URLs, sorted
    refused: tuple[FileRecord, ...]  # what is there but cannot be read (a FIFO, ...): failed inputs
    infos: Mapping[str, ObjectInfo]  # what the listing said of remote inputs
    skipped: tuple[str, ...]  # results folders of dtrace among the inputs, left out


def find_inputs(inputs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str], out: str | None = None) -> InputSet:
    """Expand the inputs (:func:`expand_inputs`, ``out`` left out) and refuse the irregular ones
    (:func:`refuse_irregular`): the one expansion of a run."""
    given = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    infos: dict[str, ObjectInfo] = {}
    skipped: list[str] = []
    files, refused = refuse_irregular(
        expand_inputs([os.fspath(i) for i in given], exclude=[out] if out else None, infos=infos, skipped=skipped)
    )
    return InputSet(tuple(os.fspath(i) for i in given), out, tuple(files), tuple(refused), infos, tuple(skipped))


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
