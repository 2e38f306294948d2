"""Typed records of the JSON files dtrace writes and reads back, and their one validation.

- :class:`Manifest` (with :class:`InputRecord`, :class:`InputPart`, :class:`PartitionRecord`):
  a results folder's ``manifest.json`` (:mod:`dtrace.results`);
- :class:`StoreEntry` (with :class:`StoredTable`): a result store entry's ``entry.json``
  (:mod:`dtrace.partitions.store`);
- :class:`SourceFile` (with :class:`CachedInput`, :class:`CachedPart`, :class:`InputMeta`): an
  ingest cache entry's ``source.json`` (:mod:`dtrace.ingest.cache`, which adds the checks that need its
  registry of side tables: a part's file names, checksums and row groups), and :class:`PackIndex`:
  the ``index.json`` of a pack of small inputs, the same records for each of them;
- :class:`StoredSummary`: a results folder's ``summary.json`` (:mod:`dtrace.cli.uptodate`).

Every field a manifest may lack has a default, so a record reads older or hand-written files
the way the code always did; fields dtrace does not declare here are ignored (the manifest
stays a plain JSON object for its users, ``Results.manifest``). :func:`convert` is the one
place a JSON value becomes a record: a wrong field raises :class:`RecordError` with one line
that names the field, its value's type and the type expected.

Examples
--------
>>> convert({"tables": ["breakdown"], "seconds": 2}, Manifest).seconds
2.0
>>> convert({"tables": []}, Manifest).workers is None   # not recorded
True
>>> convert({"tables": ["breakdown"], "inputs": [{"path": "a", "size": "big"}]}, Manifest)
Traceback (most recent call last):
dtrace.core.records.RecordError: inputs[0].size is a str, expected an int
"""

from __future__ import annotations

import re
from typing import Annotated, Any, TypeVar

import msgspec

T = TypeVar("T")

#: A JSON integer that fits a signed 64-bit integer (what Parquet and Arrow columns hold).
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
#: A results table name: an identifier (it is also a ``Results`` attribute and a file name).
TableName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z][A-Za-z0-9_]*$")]


class RecordError(ValueError):
    """A JSON value that is not the record it should be; ``path`` and ``value`` say where and what.

    ``path`` is the field's place, written the way the message writes it (``inputs[0].size``;
    ``""`` for the whole document), ``value`` what is there (``None`` where the field is missing).
    """

    def __init__(self, message: str, path: str, value: object) -> None:
        super().__init__(message)
        self.path = path
        self.value = value


class InputPart(msgspec.Struct, kw_only=True):
    """One (rank, device) part of an input: ``inputs[].parts[]``."""

    rank: Int64
    device: Int64
    local_index: Int64


class InputRecord(msgspec.Struct, kw_only=True):
    """One input of a run: ``inputs[]`` (status ``ok``, ``error`` or ``skipped``)."""

    path: str = ""
    format: str | None = None
    status: str = ""
    error: str | None = None
    error_type: str | None = None
    events: Int64 | None = None
    ranks: list[tuple[Int64, Int64]] = []  # [rank, device] pairs
    parts: list[InputPart] = []
    size: Int64 = 0
    mtime_ns: Int64 = 0
    fingerprint: str | None = None
    identity: str | None = None  # of an object on an object store (version, generation or ETag)
    notes: list[str] = []
    dropped_events: dict[str, Int64] = {}
    summary: bool = False  # a file of ``nsys stats`` summaries (``dtrace nsys-stats``): no events cached


class PartitionRecord(msgspec.Struct, kw_only=True):
    """One partition of a run: ``partitions[]``, its first and last rank."""

    ranks: tuple[Int64, Int64]
    parts: Int64 = 0
    events: Int64 = 0


class Manifest(msgspec.Struct, kw_only=True):
    """A results folder's ``manifest.json`` (docs/semantics.md, "Results tables").

    ``options`` are checked against :class:`~dtrace.options.Options` by
    :func:`dtrace.results.check_manifest` (a layer above this one).
    """

    tables: list[TableName] = []
    inputs: list[InputRecord] = []
    options: dict[str, Any] = {}
    absent_tables: dict[str, str] = {}
    failed_tables: dict[str, Any] = {}
    # None: not recorded (``dtrace nsys-stats`` records no run time, workers or parts)
    seconds: float | None = None
    workers: int | None = None
    n_inputs: int | None = None
    n_failed: int | None = None
    n_parts: int | None = None
    created: str | None = None
    dtrace_version: str | None = None
    run_id: str | None = None
    run_key: str | None = None
    format_version: int = 0
    cache: str | None = None
    notes: list[str] = []
    phases: dict[str, Any] = {}
    execution: str | None = None
    analyses: list[str] = []
    partitions: list[PartitionRecord] = []
    table_fingerprints: dict[str, Any] | None = None  # None: not recorded
    spilled_bytes: int | None = None  # what the workers left for the client (None: not recorded)
    up_to_date: bool = False  # set in memory only, never written (dtrace.api.up_to_date)


class StoredTable(msgspec.Struct, kw_only=True):
    """One table of a result store entry: its rows and the fingerprint of its Arrow file."""

    rows: Int64
    fingerprint: str


class StoreEntry(msgspec.Struct, kw_only=True):
    """A result store entry's ``entry.json``, written last (:func:`dtrace.partitions.store.save`).

    The fields are written in this order: readers tell dtrace's own outputs among the inputs by
    their first bytes (``dtrace.readers._io.own_output``).
    """

    version: int = 0
    key: str = ""
    tables: dict[str, StoredTable]
    created: float = 0.0


Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
Count32 = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
Count64 = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
#: A pack folder of the ingest cache (``pack-<12 hex digits: its folder>-<24 hex digits>``), or "" for
#: an entry's own files.
PackName = Annotated[str, msgspec.Meta(pattern=r"^(pack-[0-9a-f]{12}-[0-9a-f]{24})?$")]


class CachedPart(msgspec.Struct, kw_only=True):
    """One part (device) of a cached input: its table files (names inside the entry's folder)
    and their fingerprints."""

    device: Int32
    local_index: Count32
    n_events: Count64
    events: str
    collectives: str
    memcpy: str
    checksums: dict[str, str]  # file name -> xxh3 of its bytes
    side: dict[str, str]  # further side table -> its file (tables with rows only)
    pack: PackName = ""  # the pack folder holding the files (beside the entries), "" for the entry's own
    groups: dict[str, Count32] = {}  # in a pack: table -> its row group for this part


class CachedInput(msgspec.Struct, kw_only=True):
    """``source.json``'s ``record``: what ingest knew about the input (``FileRecord.to_json``)."""

    path: str
    format: str
    size: Int64
    mtime_ns: Int64
    fingerprint: str
    parts: list[CachedPart]
    rank_per_device: bool
    meta: dict[str, Any]
    rank_hint: Int64 | None = None
    identity: str | None = None
    side_tables: list[str] = []


class InputMeta(msgspec.Struct, kw_only=True):
    """The values of a cached input's ``meta`` that dtrace reads back (the planner and the
    manifest: time origin, event and device counts, dropped events by reason). ``meta`` itself
    stays the reader's JSON object (its other keys are the reader's own); this record checks it:
    ``convert(record.meta, InputMeta, at="record.meta")``.

    Examples
    --------
    >>> convert({"n_devices": 0, "hostname": "a"}, InputMeta, at="meta")
    Traceback (most recent call last):
    dtrace.core.records.RecordError: meta.n_devices is 0: expected `int` >= 1
    """

    base_time_ns: Int64 | None = None
    events: Count64 | None = None
    n_devices: Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)] | None = None
    dropped_events: dict[str, Count64] | None = None


class SourceVersion(msgspec.Struct, kw_only=True):
    """What every ``source.json`` starts with, whatever dtrace wrote it: the cache's version
    (an entry of another version is another dtrace's, parsed again without a word)."""

    cache_version: int


class SourceFile(SourceVersion, kw_only=True):
    """An ingest cache entry's ``source.json``. ``record`` stays the JSON object: its fingerprint
    is that of the object as written (``cache._record_fingerprint``); once it matches, the
    record is converted: ``convert(source.record, CachedInput, at="record")``.

    Examples
    --------
    >>> convert({"cache_version": "1", "record": {}, "record_fingerprint": ""}, SourceFile)
    Traceback (most recent call last):
    dtrace.core.records.RecordError: cache_version is a str, expected an int
    """

    record: dict[str, Any]
    record_fingerprint: str


class PackIndex(SourceVersion, kw_only=True):
    """A pack's ``index.json``: the record of every input whose tables the pack holds (each as
    ``source.json`` would keep it, see :class:`SourceFile`), and the fingerprint of that list."""

    records: list[dict[str, Any]]
    records_fingerprint: str


class StoredSummary(msgspec.Struct, kw_only=True):
    """A results folder's ``summary.json``: what ``dtrace analyze`` printed for these results,
    by output format, kept for a later run whose results are up to date (:mod:`dtrace.cli.uptodate`).
    """

    version: int
    manifest: str  # the xxh3 fingerprint of the manifest.json the summary is of
    material: str  # what the summary depends on besides the manifest and the inputs
    output: dict[str, str] = {}  # output format -> the summary below its first line
    mac: dict[str, str] = {}  # output format -> HMAC of that summary under the user's key


_EXPECTED = re.compile(r"Expected `([^`]+)`(?:, got `([^`]+)`)?(.*)")
_MISSING = re.compile(r"Object missing required field `([^`]+)`")
_JSON_TYPES = {"array": "list", "object": "dict", "null": "None", "number": "float", "StoredTable": "dict"}


def convert(obj: object, record: type[T], *, at: str = "") -> T:
    """``obj`` (a value from ``json.loads``) as a ``record``; raises :class:`RecordError`.

    ``at``: where ``obj`` sits in its document (``record.meta``), the start of every path named.

    Examples
    --------
    >>> convert({"tables": {"rows": 1, "fingerprint": "x"}}, StoreEntry)
    Traceback (most recent call last):
    dtrace.core.records.RecordError: tables[...] is a int, expected a dict
    >>> convert([1], StoreEntry)
    Traceback (most recent call last):
    dtrace.core.records.RecordError: the document is a JSON list, not an object
    >>> convert({"parts": [{"device": "0"}]}, CachedInput, at="record")
    Traceback (most recent call last):
    dtrace.core.records.RecordError: record.parts[0].device is a str, expected an int
    >>> convert([], CachedInput, at="record")
    Traceback (most recent call last):
    dtrace.core.records.RecordError: record is a list, expected a dict
    """
    try:
        return msgspec.convert(obj, record, strict=True)
    except msgspec.ValidationError as exc:
        raise _explain(str(exc), obj, at) from None


def _explain(message: str, obj: object, at: str) -> RecordError:
    """msgspec's message (``Expected `int`, got `str` - at `$.inputs[0].size```) in dtrace's words."""
    text, _, where = message.partition(" - at `")
    path, value = _located(where, obj)
    path = f"{at}.{path}" if at and path and not path.startswith("[") else at + path
    missing = _MISSING.fullmatch(text)
    if missing:
        field = f"{path}.{missing[1]}" if path else missing[1]
        return RecordError(f"{field} is missing", field, None)
    return _wrong_value(text, path, value)


def _located(at: str, obj: object) -> tuple[str, Any]:
    """The dotted path of msgspec's location (``$.inputs[0].size``) and the value found there
    (a dict's key is not named by msgspec: ``[...]``, the value then unknown)."""
    steps = re.findall(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]", at.rstrip("`").removeprefix("$"))
    path = "".join(f".{k}" if k else f"[{i}]" for k, i in steps).removeprefix(".")
    value: Any = obj
    for k, i in steps:
        value = _UNKNOWN if value is _UNKNOWN or i == "..." else value[k] if k else value[int(i)]
    return path, value


def _wrong_value(text: str, path: str, value: Any) -> RecordError:
    """The error for a value of the wrong type or range at ``path``."""
    expected = _EXPECTED.fullmatch(text)
    if not path and expected and expected[1] == "object":
        return RecordError(f"the document is a JSON {_kind(value)}, not an object", path, value)
    if expected and expected[2]:
        got = _JSON_TYPES.get(expected[2], expected[2])
        want = " or ".join(_JSON_TYPES.get(t, t) for t in expected[1].split(" | "))
        article = "an" if want[0] in "aeiou" else "a"
        return RecordError(f"{path} is a {got}, expected {article} {want}", path, value)
    shown = "a value" if value is _UNKNOWN else repr(value)
    if expected and expected[1] == "int" and isinstance(value, int) and not -(2**63) <= value < 2**63:
        return RecordError(f"{path} is {shown}, beyond a 64-bit integer", path, value)
    return RecordError(f"{path} is {shown}: {text[0].lower()}{text[1:]}", path, value)


_UNKNOWN = object()


def _kind(v: object) -> str:
    return "None" if v is None else type(v).__name__


__all__ = [
    "CachedInput",
    "CachedPart",
    "InputMeta",
    "InputPart",
    "InputRecord",
    "Int64",
    "Manifest",
    "PackIndex",
    "PartitionRecord",
    "RecordError",
    "SourceFile",
    "SourceVersion",
    "StoreEntry",
    "StoredSummary",
    "StoredTable",
    "TableName",
    "convert",
]
