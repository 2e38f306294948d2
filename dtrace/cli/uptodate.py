"""An up-to-date ``dtrace analyze``, decided and answered from small JSON files: no pandas, no pyarrow.

After each run whose results could be up to date later (no failed input, a ``run_key`` in the
manifest), the CLI keeps what it printed in ``OUT/summary.json``: the summary below its first
line, per output format, with the fingerprint of the manifest it describes and what else the
output depends on (the dtrace version and code, the analysis settings, the run's settings). The
next ``dtrace analyze`` of the same inputs into the same OUT checks, in this order, and answers
from that file only when every check passes:

- the stored summary describes this ``manifest.json`` (its bytes' fingerprint), was made by
  this dtrace (version, and the size and mtime of every file of the package: the built-in
  analyses' code) with these settings, and holds this output format;
- what :func:`dtrace.api.up_to_date` checks: the same input paths with their recorded sizes and
  mtimes, then their fingerprints, no failed input, every table file with the bytes it was
  written with.

Anything else — a missing or damaged file, a URL, a class map, a GPU spec file, ``--step``,
a straggler method, summary CSVs — goes the ordinary way (:func:`dtrace.api.analyze`), which
decides again and prints from the tables; the fast path never answers where the ordinary one
would analyse. Only the CLI writes this file; the API ignores it.

The stored text is printed only when it carries a valid HMAC (SHA-256) of the manifest's
fingerprint, the settings, the format and the text under the user's own key
(``$XDG_CACHE_HOME/dtrace/summary.key``, else ``~/.cache/dtrace/summary.key``: 32 random bytes,
readable by the user alone): someone who can write the results folder but not that file cannot
make ``dtrace analyze`` print numbers or names of their choosing; and it is printed through the
terminal's escaping, so no byte of it can drive the terminal.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import stat

import msgspec
import xxhash

from .._version import __version__
from ..core.constants import MANIFEST_MAX_BYTES
from ..core.fileio import atomic_write_bytes, read_regular
from ..core.records import Manifest, StoredSummary, convert
from ..errors import DtraceError
from ..ingest.inputs import InputSet, parse_size
from ..ingest.remote import is_url
from ..ingest.unchanged import tables_intact, unchanged_inputs
from ..options import Options
from ..render.headline import headline
from .common import analysis_kwargs

SUMMARY = "summary.json"
"""The stored summary of a results folder (``OUT/summary.json``)."""
SUMMARY_VERSION = 1
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def code_stamp(root: str = _PACKAGE) -> str:
    """A fingerprint of the installed dtrace package: every file's path, size and mtime (the
    built-in analyses are part of a run's key through their code; a changed file changes it)."""
    h = xxhash.xxh3_128()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".json")):
                st = os.stat(os.path.join(folder, name))
                h.update(
                    f"{os.path.relpath(os.path.join(folder, name), root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode()
                )
    return h.hexdigest()


def _material(args: argparse.Namespace) -> str | None:
    """What the printed summary depends on besides the manifest and the inputs, as one string;
    None where only the ordinary path can tell (settings that need pandas to check or to print)."""
    if (
        args.no_cache
        or args.recompute
        or args.step is not None
        or getattr(args, "classmap", None) is not None
        or getattr(args, "gpu_spec", None) is not None
        or getattr(args, "straggler_method", None) is not None
        or "://" in args.out
        or any(is_url(str(i)) for i in args.inputs)
    ):
        return None
    try:
        opts = Options.from_kwargs(**analysis_kwargs(args)).to_json()
        settings = {"ranks": {}, "format": args.input_format, "max_input_size": parse_size(args.max_input_size)}
    except DtraceError:
        return None  # the ordinary path says why, in one line
    doc = {"version": [__version__, SUMMARY_VERSION], "code": code_stamp(), "options": opts, "settings": settings}
    return json.dumps(doc, sort_keys=True, default=str)


def _stored(out: str) -> tuple[StoredSummary, bytes] | None:
    """The stored summary of ``out`` and the manifest's bytes, or None."""
    try:
        summary = convert(
            json.loads(read_regular(os.path.join(out, SUMMARY), follow_links=False, limit=MANIFEST_MAX_BYTES)),
            StoredSummary,
        )
        raw = read_regular(os.path.join(out, "manifest.json"), follow_links=False, limit=MANIFEST_MAX_BYTES)
    except (OSError, ValueError, RecursionError, DtraceError):
        return None
    if summary.manifest != xxhash.xxh3_128_hexdigest(raw):
        return None
    return summary, raw


def answer(args: argparse.Namespace, found: InputSet | None) -> tuple[str, Manifest] | None:
    """The summary ``dtrace analyze`` prints below its first line, and the manifest (marked
    ``up_to_date``), when the results in ``args.out`` are up to date for the inputs ``found``;
    else None."""
    material = _material(args)
    if material is None or found is None:
        return None
    stored = _stored(args.out)
    if stored is None:
        return None
    summary, raw = stored
    body = summary.output.get(args.fmt)
    if summary.material != material or body is None:
        return None
    key = _summary_key()
    mac = summary.mac.get(args.fmt, "")
    if key is None or not hmac.compare_digest(mac, _mac(key, summary.manifest, material, args.fmt, body)):
        return None  # written by someone else, or edited: the ordinary path prints from the tables
    manifest = _unchanged(args, found, raw)
    if manifest is None:
        return None
    manifest.up_to_date = True
    return body, manifest


def _unchanged(args: argparse.Namespace, found: InputSet, raw: bytes) -> Manifest | None:
    """The manifest (``raw``) when its results still stand: the cache usable, OUT writable, the
    same inputs with the same content, every table intact; else None."""
    try:
        manifest = convert(json.loads(raw), Manifest)
        if not _cache_usable(args.cache or os.path.join(args.out, "cache")) or not os.access(args.out, os.W_OK):
            return None
        if manifest.run_key is None or manifest.n_failed or found.refused or found.skipped:
            return None
        if unchanged_inputs(manifest.inputs, list(found.files), dict(found.infos)) is None:
            return None
        return manifest if tables_intact(args.out, manifest.tables, manifest.table_fingerprints) else None
    except (OSError, ValueError, RecursionError, DtraceError):
        return None


def _cache_usable(cache: str) -> bool:
    """The ingest cache folder exists as a folder (not a link) that can be written (what
    :func:`dtrace.ingest.cache.check_cache_dir` would otherwise create or refuse)."""
    try:
        st = os.lstat(cache)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and os.access(cache, os.W_OK | os.X_OK)


def remember(args: argparse.Namespace, manifest: Manifest, body: str) -> None:
    """Keep ``body`` (the summary below its first line, as printed in ``args.fmt``) for the next
    up-to-date run, when these results can be up to date then. Best effort: a folder that cannot
    take the file only loses the fast path."""
    if manifest.run_key is None or manifest.n_failed or manifest.failed_tables:
        return
    material = _material(args)
    if material is None:
        return
    try:
        raw = read_regular(os.path.join(args.out, "manifest.json"), follow_links=False, limit=MANIFEST_MAX_BYTES)
    except (OSError, DtraceError):
        return
    key = _summary_key()
    if key is None:
        return
    found = _stored(args.out)
    same = found is not None and found[0].material == material
    output = dict(found[0].output) if same and found is not None else {}
    macs = dict(found[0].mac) if same and found is not None else {}
    digest = xxhash.xxh3_128_hexdigest(raw)
    output[args.fmt] = body
    macs[args.fmt] = _mac(key, digest, material, args.fmt, body)
    summary = StoredSummary(version=SUMMARY_VERSION, manifest=digest, material=material, output=output, mac=macs)
    try:
        data = json.dumps(msgspec.to_builtins(summary), ensure_ascii=False).encode()
        atomic_write_bytes(os.path.join(args.out, SUMMARY), data)
    except OSError:
        pass


KEY_BYTES = 32


def _key_path() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dtrace", "summary.key")


def _summary_key() -> bytes | None:
    """The user's key for the stored summaries (created on first use, mode 0600); None when it
    cannot be read or made (then there is no fast path)."""
    path = _key_path()
    try:
        key = read_regular(path, follow_links=False, limit=KEY_BYTES)
        if len(key) == KEY_BYTES and not os.stat(path).st_mode & 0o077:
            return key
        if len(key) == KEY_BYTES:
            return None  # readable by others: not a secret
    except FileNotFoundError:
        pass
    except (OSError, DtraceError):
        return None
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, os.urandom(KEY_BYTES))
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # never replaces a key another process made meanwhile: theirs is read
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
        key = read_regular(path, follow_links=False, limit=KEY_BYTES)
    except (OSError, DtraceError):
        return None
    return key if len(key) == KEY_BYTES else None


def _mac(key: bytes, manifest: str, material: str, fmt: str, body: str) -> str:
    msg = "\0".join((manifest, material, fmt, body)).encode("utf-8", "surrogatepass")
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def print_answer(args: argparse.Namespace, body: str, manifest: Manifest) -> None:
    """Print an up-to-date run's summary exactly as :func:`dtrace.cli.analyze.run` does."""
    import sys  # noqa: PLC0415

    from ..render.escape import printable  # noqa: PLC0415

    head = headline(manifest)
    body = printable(body, keep_newlines=True)  # nothing stored reaches the terminal raw
    if args.fmt in ("csv", "json"):
        print(printable(head, keep_newlines=True), end="", file=sys.stderr)
        print(body, end="")
    else:
        print(printable(head, keep_newlines=True) + body)
