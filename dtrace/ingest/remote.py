"""Inputs on object stores: URLs (``s3://``, ``gs://``, ``abfs://``, ``https://``, any fsspec protocol).

A URL input is listed on the client (folders and globs as for local paths) and read by the
worker that ingests it: :func:`local_copy` streams the object into a private temporary file on
the worker (``TMPDIR``), the regular reader parses that file and the copy is removed, so every
reader — JSON streamed in blocks, SQLite opened at random — reads a local file as usual and no
object ever passes through the client. Credentials come from each store's usual environment
and configuration (``AWS_*`` variables and profiles for S3, ``GOOGLE_APPLICATION_CREDENTIALS``
for GCS, ``AZURE_STORAGE_*`` for Azure, fsspec's ``FSSPEC_<PROTOCOL>_<OPTION>`` variables and
config files for anything else).

**Identity.** :func:`stat` returns an object's size and its identity as the store states it —
the version id, generation or ETag — which keys the ingest cache: an object whose identity and
size are unchanged is never downloaded again. A store that states none (a plain web server)
leaves the identity empty; the content's fingerprint decides then, which takes a download.

**Errors.** A permanent error (no such object or bucket, access denied, no credentials, a
malformed URL) fails its input with one line; anything else (a throttled or failed request, a dropped connection) is
transient and retried with exponential back-off (:data:`RETRIES` attempts, :func:`retry`).

This module imports fsspec only when a URL is used: a local run never loads it.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, TypeVar

from ..core.records import Manifest, convert
from ..errors import InputError, UsageError

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.\-]*)://")
_GLOB = re.compile(r"[*?\[]")
_CREDENTIALS = re.compile(r"credential|authenticat", re.IGNORECASE)
"""Exception class names of the stores' SDKs that say no credentials were found or accepted
(botocore's ``NoCredentialsError``, google-auth's ``DefaultCredentialsError``, azure-core's
``ClientAuthenticationError``): permanent, never retried."""
RETRIES = int(os.environ.get("DTRACE_REMOTE_RETRIES", "5"))
"""Attempts of one request before a transient error fails its input (``DTRACE_REMOTE_RETRIES``)."""
BACKOFF_S = float(os.environ.get("DTRACE_REMOTE_BACKOFF", "0.2"))
"""First back-off delay in seconds; it doubles at each retry (``DTRACE_REMOTE_BACKOFF``)."""
RETRY_TOTAL_S = float(os.environ.get("DTRACE_REMOTE_RETRY_SECONDS", "120"))
"""The longest one request is retried, attempts and back-off together: a store answering 503
SlowDown for ever fails the input then (``DTRACE_REMOTE_RETRY_SECONDS``)."""
_IDENTITY_KEYS = (
    ("VersionId", "version"),
    ("version_id", "version"),
    ("generation", "generation"),
    ("ETag", "etag"),
    ("etag", "etag"),
    ("md5Hash", "md5"),
    ("content_md5", "md5"),
)
T = TypeVar("T")


def is_url(path: Any) -> bool:
    """True for ``scheme://...`` other than ``file://`` (a string test, no import).

    Examples
    --------
    >>> is_url("s3://bucket/job/"), is_url("/data/run1"), is_url("file:///data"), is_url("C:/x")
    (True, False, False, False)
    """
    if not isinstance(path, str):
        return False
    m = _SCHEME.match(path)
    return m is not None and m.group(1).lower() != "file"


def norm(path: str | os.PathLike[str]) -> str:
    """An input's canonical name: a URL as given, a local path made absolute."""
    p = os.fspath(path)
    if is_url(p):
        return p
    if isinstance(p, str) and p.lower().startswith("file://"):
        p = p[len("file://") :]
    return os.path.abspath(p)


@dataclass(frozen=True)
class ObjectInfo:
    """What the store says of one object: its URL, size, identity (``etag:...``, ``version:...``,
    ``generation:...``; empty if the store states none) and modification time (ns, 0 if unknown)."""

    url: str
    size: int
    identity: str = ""
    mtime_ns: int = 0


class RemoteError(InputError):
    """A permanent error reading an object (missing, denied, malformed URL): fails that input alone."""


def _fs(url: str) -> tuple[Any, str]:
    """The fsspec file system of ``url`` and the path inside it (credentials from the environment)."""
    try:
        import fsspec  # noqa: PLC0415 - only runs that read URLs load fsspec
    except ImportError:
        raise UsageError(
            f"{url}: reading object stores needs fsspec and the store's package: pip install 'dtrace[remote]' "
            "(s3fs for s3://, gcsfs for gs://, adlfs for abfs://)"
        ) from None
    try:
        fs, path = fsspec.core.url_to_fs(url)
        return fs, path
    except ImportError as exc:
        raise UsageError(f"{url}: this protocol needs a package that is not installed ({exc})") from None
    except ValueError as exc:
        raise UsageError(f"{url}: {exc}") from None


def _permanent(exc: BaseException) -> str | None:
    """Why ``exc`` is a permanent error (one phrase), or None for a transient one."""
    if isinstance(exc, PermissionError):
        return f"access denied ({_text(exc)}); check the credentials of this store"
    if any(_CREDENTIALS.search(t.__name__) for t in type(exc).__mro__):
        return f"no usable credentials ({type(exc).__name__}: {_text(exc)}); see the store's credential settings"
    if isinstance(exc, FileNotFoundError):
        return f"not found ({_text(exc)})"
    if isinstance(exc, (IsADirectoryError, NotADirectoryError)):
        return _text(exc)
    if isinstance(exc, (ValueError, TypeError, UsageError)):
        return f"invalid request ({_text(exc)})"
    return None


def _text(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def retry(fn: Callable[[], T], url: str, what: str, *, attempts: int | None = None) -> T:
    """``fn()``, retried on transient errors with exponential back-off (``BACKOFF_S``, doubled each
    time) for at most :data:`RETRY_TOTAL_S`; a permanent error, or a transient one that outlasts
    the attempts or the time, raises
    :class:`RemoteError` naming ``url`` and ``what`` failed, in one line."""
    n = RETRIES if attempts is None else attempts
    delay = BACKOFF_S
    deadline = time.monotonic() + RETRY_TOTAL_S
    for i in range(max(n, 1)):
        try:
            return fn()
        except RemoteError:
            raise
        except Exception as exc:  # noqa: BLE001 - sorted into permanent and transient below
            why = _permanent(exc)
            if why is not None:
                raise RemoteError(url, f"cannot {what}: {why}") from None
            if i + 1 >= n or time.monotonic() + delay > deadline:
                raise RemoteError(
                    url,
                    f"cannot {what} after {i + 1} attempts in {RETRY_TOTAL_S - (deadline - time.monotonic()):.0f} s: "
                    f"{type(exc).__name__}: {_text(exc)}",
                ) from None
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def _identity(info: dict[str, Any]) -> str:
    for key, label in _IDENTITY_KEYS:
        v = info.get(key)
        if v not in (None, ""):
            return f"{label}:{str(v).strip(chr(34))}"
    return ""


def _mtime_ns(info: dict[str, Any]) -> int:
    for key in ("LastModified", "last_modified", "mtime", "updated", "created"):
        v = info.get(key)
        if v is None:
            continue
        if hasattr(v, "timestamp"):
            return int(v.timestamp() * 1e9)
        if isinstance(v, (int, float)):
            return int(v * 1e9)
        try:
            from datetime import datetime  # noqa: PLC0415

            return int(datetime.fromisoformat(str(v).replace("Z", "+00:00")).timestamp() * 1e9)
        except ValueError:
            continue
    return 0


def _object_info(url: str, info: dict[str, Any]) -> ObjectInfo:
    return ObjectInfo(url=url, size=int(info.get("size") or 0), identity=_identity(info), mtime_ns=_mtime_ns(info))


def _url(fs: Any, path: str) -> str:
    url: str = fs.unstrip_protocol(path)  # fsspec is untyped
    return url


def stat(url: str) -> ObjectInfo:
    """The size and identity of the object at ``url``, asked of the store now (never a cached listing)."""
    fs, path = _fs(url)

    def info() -> dict[str, Any]:
        fs.invalidate_cache(path)
        got: dict[str, Any] = fs.info(path)  # fsspec is untyped
        if got.get("type") == "directory":
            raise IsADirectoryError(f"{url} is a folder, not an object")
        return got

    return _object_info(url, retry(info, url, "read the object's metadata"))


def expand(url: str, suffixes: tuple[str, ...], skip: frozenset[str]) -> list[ObjectInfo]:
    """The objects a URL names: itself, the trace files under it (recursively, by suffix, without
    hidden names or those in ``skip``) if it is a folder, or its glob matches (``**`` recurses).

    A URL that cannot be listed raises :class:`RemoteError` (one line); a folder or glob without
    trace files raises :class:`~dtrace.errors.UsageError`, as a local one does.
    """
    fs, path = _fs(url)

    def trace_name(p: str) -> bool:
        name = p.rstrip("/").rsplit("/", 1)[-1]
        return name.lower().endswith(suffixes) and not name.startswith(".") and name not in skip

    def listing() -> dict[str, dict[str, Any]]:
        fs.invalidate_cache()
        if _GLOB.search(path):
            return {p: i for p, i in fs.glob(path, detail=True).items() if i.get("type") != "directory"}
        info = fs.info(path)
        if info.get("type") != "directory":
            return {path: info}
        return {p: i for p, i in fs.find(path, detail=True).items() if trace_name(p)}

    found = retry(listing, url, "list")
    if not found:
        raise UsageError(f"no trace files found at {url} (looked for {', '.join(suffixes)})")
    return [_object_info(_url(fs, p), i) for p, i in sorted(found.items())]


@contextmanager
def local_copy(url: str) -> Iterator[str]:
    """A private local copy of the object at ``url`` for the duration of the block.

    The object is streamed to a new folder under the worker's temporary directory (keeping its
    file name, so suffixes still tell formats apart); a failed transfer is retried from the start
    with back-off. The copy is removed when the block ends, whatever happens.
    """
    fs, path = _fs(url)
    folder = tempfile.mkdtemp(prefix="dtrace-remote-")
    local = os.path.join(folder, path.rstrip("/").rsplit("/", 1)[-1] or "object")
    try:
        retry(lambda: fs.get_file(path, local), url, "download the object")
        yield local
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- results on an object store (OUT as a URL) -------------------------------------------------
MANIFEST = "manifest.json"


def join(url: str, name: str) -> str:
    """``url/name`` (one slash between).

    Examples
    --------
    >>> join("s3://b/results/", "manifest.json"), join("s3://b/results", "breakdown.parquet")
    ('s3://b/results/manifest.json', 's3://b/results/breakdown.parquet')
    """
    return url.rstrip("/") + "/" + name


def default_cache(url: str) -> str:
    """The local ingest cache of a run whose results go to ``url`` (``$XDG_CACHE_HOME/dtrace/<key>``,
    else ``~/.cache/dtrace/<key>``), so that re-runs reuse it; a cluster run passes ``cache=`` on a
    shared file system instead."""
    import hashlib  # noqa: PLC0415

    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "dtrace", hashlib.sha1(url.rstrip("/").encode()).hexdigest()[:16])


def check_writable(url: str) -> None:
    """Write and remove a probe object under ``url``; :class:`RemoteError` in one line if the store refuses."""
    fs, path = _fs(join(url, ".dtrace-probe"))
    retry(lambda: fs.pipe_file(path, b""), url, "write results there")
    retry(lambda: fs.rm_file(path), url, "write results there")


def upload_results(local: str, url: str) -> None:
    """Copy a results folder's files to ``url``: the old manifest is removed first and the new one
    uploaded last, so a reader never finds a manifest describing tables not yet (or no longer)
    there. The ingest cache (``cache/``) is not uploaded."""
    fs, base = _fs(url)
    old = join(base, MANIFEST)
    retry(lambda: fs.rm_file(old) if fs.exists(old) else None, url, "replace the previous results")
    names = sorted(n for n in os.listdir(local) if os.path.isfile(os.path.join(local, n)) and n != MANIFEST)
    for name in [*names, MANIFEST]:
        src = os.path.join(local, name)
        if os.path.exists(src):
            retry(functools.partial(fs.put_file, src, join(base, name)), url, f"upload {name}")


def download_results(url: str, local: str) -> bool:
    """Copy the manifest and the tables it lists from ``url`` into the folder ``local``; False if
    there is no manifest there (no results yet)."""
    import json  # noqa: PLC0415

    fs, base = _fs(url)
    manifest = join(base, MANIFEST)
    try:
        retry(lambda: fs.get_file(manifest, os.path.join(local, MANIFEST)), url, "read the results' manifest")
    except RemoteError as exc:
        if "not found" in exc.problem:
            return False
        raise
    with open(os.path.join(local, MANIFEST), "rb") as f:
        try:
            tables = convert(json.load(f), Manifest).tables  # names checked: files of the folder
        except (ValueError, RecursionError):
            return True  # the loader says what is wrong with it
    for name in tables:
        file = f"{name}.parquet"
        retry(functools.partial(fs.get_file, join(base, file), os.path.join(local, file)), url, f"read {file}")
    return True
