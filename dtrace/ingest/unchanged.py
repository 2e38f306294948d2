"""Whether a previous run's results still stand, decided without pandas: the one check of its
inputs and tables that :func:`dtrace.api.up_to_date` and the CLI's up-to-date answer
(:mod:`dtrace.cli.uptodate`) both make."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import xxhash

from ..core.constants import TABLE_MAX_BYTES, UP_TO_DATE_MAX_BYTES
from ..core.fileio import read_regular
from ..errors import DtraceError
from ..readers._io import file_fingerprint
from .remote import ObjectInfo, is_url


def unchanged_inputs(
    recorded: Sequence[Any], files: list[str], infos: dict[str, ObjectInfo]
) -> list[tuple[str, int, int, str | None]] | None:
    """``(path, size, mtime_ns, fingerprint)`` of every input, sorted, when they are the inputs
    ``recorded`` (by a previous run) with the same content; else None. Sizes and mtimes are
    compared first, fingerprints only then."""
    remote = {f: infos.get(f) for f in files if is_url(f)}
    stats = _listed_stats(files, remote)
    if stats is None:
        return None
    before = {(i.path, i.size, i.mtime_ns): (i.fingerprint, i.identity) for i in recorded}
    now = {(f, size, mtime) for f, (size, mtime) in stats.items()}
    if set(before) != now or sum(size for size, _ in stats.values()) > UP_TO_DATE_MAX_BYTES:
        return None
    inputs = []
    for path, size, mtime in sorted(now):
        fp = _same_content(path, *before[(path, size, mtime)], remote)
        if fp is _CHANGED:
            return None
        inputs.append((path, size, mtime, fp))
    return inputs


def _listed_stats(files: list[str], remote: dict[str, ObjectInfo | None]) -> dict[str, tuple[int, int]] | None:
    """``path -> (size, mtime_ns)`` of every input (a remote object's as its listing states it,
    mtime 0: its identity, not time, decides); None when a local input cannot be stat'ed or a
    remote one has no stated identity."""
    if any(i is None or not i.identity for i in remote.values()):
        return None
    try:
        stats = {f: (os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in files if f not in remote}
    except OSError:
        return None
    stats.update({f: (i.size, 0) for f, i in remote.items() if i is not None})
    return stats


_CHANGED = object()
"""What :func:`_same_content` returns for an input whose content changed."""


def _same_content(path: str, recorded: Any, identity: Any, remote: dict[str, ObjectInfo | None]) -> Any:
    """The fingerprint to key ``path`` with when its content is the ``recorded`` one (a remote
    object: the same ``identity`` on its store; a local file: the same fingerprint); else
    :data:`_CHANGED`."""
    if path in remote:
        info = remote[path]
        return recorded if info is not None and identity == info.identity else _CHANGED
    try:
        fp = file_fingerprint(path)
    except (OSError, DtraceError):
        return _CHANGED
    return fp if fp == recorded else _CHANGED


def tables_intact(out: str, names: Iterable[str], fingerprints: Mapping[str, Any] | None) -> bool:
    """Whether every table named is in ``out`` (a regular file, never through a link) with the
    bytes it was written with (``fingerprints``: xxh3-128 of each file). The names are checked
    identifiers (the manifest's records): ``OUT/<name>.parquet`` is a file of ``out``."""
    names = list(names)
    if fingerprints is None or set(names) != set(fingerprints):
        return False
    for name in names:
        try:
            data = read_regular(os.path.join(out, f"{name}.parquet"), follow_links=False, limit=TABLE_MAX_BYTES)
        except (OSError, DtraceError):
            return False
        if xxhash.xxh3_128_hexdigest(data) != fingerprints[name]:
            return False
    return True
