"""The results contract (SPEC §5): ``OUT/<table>.parquet`` + ``OUT/manifest.json``.

Writing is atomic per run: every table is first written to ``OUT/.staging-<run>/`` with the
run id in its Parquet metadata; the old manifest is removed, the tables are renamed into
place, and the new manifest is renamed in last. A crash leaves either the previous complete
results or no manifest at all (``load`` then says the results are incomplete) — never a
manifest describing half-written tables.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from typing import Any, Iterator

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import ResultsError

FORMAT_VERSION = 1
MANIFEST = "manifest.json"


class Results:
    """The tables of one analysis, as pandas DataFrames (``results.breakdown``, ...).

    Tables load lazily from disk for :func:`load`; :attr:`manifest` describes the run:
    version, options, and every input with its rank(s), format, status and error message.
    """

    def __init__(self, tables: dict[str, pd.DataFrame] | None = None, manifest: dict[str, Any] | None = None,
                 path: str | None = None) -> None:
        self._tables = dict(tables or {})
        self.manifest = manifest or {}
        self.path = path

    # -- access -------------------------------------------------------------------------
    @property
    def table_names(self) -> list[str]:
        return list(self.manifest.get("tables", self._tables))

    def table(self, name: str) -> pd.DataFrame:
        if name not in self._tables:
            if self.path is None or name not in self.table_names:
                raise KeyError(f"no table {name!r}; tables: {', '.join(self.table_names)}")
            self._tables[name] = _read_table(os.path.join(self.path, f"{name}.parquet"),
                                             self.manifest.get("run_id"))
        return self._tables[name]

    def __getattr__(self, name: str) -> pd.DataFrame:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self.table(name)
        except KeyError as exc:
            raise AttributeError(str(exc)) from None

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self.table(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.table_names)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.table_names))

    @property
    def inputs(self) -> pd.DataFrame:
        """One row per input: path, format, ranks, status, error."""
        return pd.DataFrame(self.manifest.get("inputs", []))

    @property
    def errors(self) -> list[str]:
        return [i["error"] for i in self.manifest.get("inputs", []) if i.get("status") == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def __repr__(self) -> str:
        n_ok = sum(1 for i in self.manifest.get("inputs", []) if i.get("status") == "ok")
        return (f"<dtrace.Results {self.path or '(in memory)'}: {n_ok} inputs ok, {len(self.errors)} failed; "
                f"tables: {', '.join(self.table_names)}>")


def _read_table(path: str, run_id: str | None) -> pd.DataFrame:
    try:
        t = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise ResultsError(f"{path}: cannot read results table: {exc}") from None
    md = t.schema.metadata or {}
    got = md.get(b"dtrace.run_id", b"").decode()
    if run_id and got != run_id:
        raise ResultsError(f"{path}: table is from another run ({got}) than the manifest ({run_id}); "
                           "the results directory is inconsistent, re-run dtrace analyze")
    return t.to_pandas()


def write_results(out: str, tables: dict[str, pd.DataFrame], manifest: dict[str, Any]) -> Results:
    """Write ``tables`` and ``manifest`` to ``out`` atomically (see module docstring)."""
    os.makedirs(out, exist_ok=True)
    run_id = manifest.setdefault("run_id", uuid.uuid4().hex)
    manifest["format_version"] = FORMAT_VERSION
    manifest["tables"] = sorted(tables)
    staging = tempfile.mkdtemp(prefix=".staging-", dir=out)
    try:
        for name, df in tables.items():
            t = pa.Table.from_pandas(df, preserve_index=False)
            t = t.replace_schema_metadata({**(t.schema.metadata or {}), b"dtrace.run_id": run_id.encode()})
            pq.write_table(t, os.path.join(staging, f"{name}.parquet"), compression="zstd")
        with open(os.path.join(staging, MANIFEST), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1, default=str)
        old_manifest = os.path.join(out, MANIFEST)
        if os.path.exists(old_manifest):
            old = _read_manifest(out, missing_ok=True) or {}
            os.unlink(old_manifest)
            for name in old.get("tables", []):  # tables this run no longer writes
                if name not in tables:
                    p = os.path.join(out, f"{name}.parquet")
                    if os.path.exists(p):
                        os.unlink(p)
        for name in tables:
            os.replace(os.path.join(staging, f"{name}.parquet"), os.path.join(out, f"{name}.parquet"))
        os.replace(os.path.join(staging, MANIFEST), old_manifest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Results(tables, manifest, out)


def _read_manifest(path: str, missing_ok: bool = False) -> dict[str, Any] | None:
    mf = os.path.join(path, MANIFEST)
    try:
        with open(mf, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        if missing_ok:
            return None
        if os.path.isdir(path) and any(n.endswith(".parquet") for n in os.listdir(path)):
            raise ResultsError(f"{path}: results are incomplete (no {MANIFEST}: the run did not finish)") from None
        raise ResultsError(f"{path}: not a dtrace results directory (no {MANIFEST})") from None
    except ValueError as exc:
        raise ResultsError(f"{mf}: invalid manifest: {exc}") from None


def load(path: str | os.PathLike[str]) -> Results:
    """Open a results directory written by ``dtrace analyze``.

    Examples
    --------
    >>> r = dtrace.load("run42/results")          # doctest: +SKIP
    >>> r.breakdown.head()                        # doctest: +SKIP
    """
    path = os.fspath(path)
    manifest = _read_manifest(path)
    assert manifest is not None
    if manifest.get("format_version", 0) > FORMAT_VERSION:
        raise ResultsError(f"{path}: written by a newer dtrace (format {manifest['format_version']}); upgrade")
    return Results(None, manifest, path)
