"""The events of every rank as one Dask DataFrame, for your own analyses.

:func:`events` opens the cached events of a finished analysis (or ingests inputs) and returns
a lazy Dask DataFrame with the same partitions the built-in analyses use: whole (rank, device)
parts, batched by rank (:mod:`dtrace.partitions.layout`), indexed by ``rank`` with known divisions. Run
``map_partitions``, ``groupby`` or ``.compute()`` on it with any Dask scheduler or cluster.

Columns (:data:`EVENT_COLUMNS`):

======================  ==========  ===========================================================
``rank`` (index)        int32       global rank
``device``              int32       the GPU of the (rank, device) part the event belongs to
                                    (host events of a file with several GPUs appear once per GPU)
``stream``              int64       GPU stream (-1 for host events)
``pid``, ``tid``        int64       host process and thread (GPU events: as the trace gives them)
``kind``                category    kernel, memcpy, memset, cpu_op, runtime, annotation,
                                    gpu_annotation, python, other
``name``                category    event name, unshortened
``start_ns``, ``end_ns`` int64      absolute time in ns
``correlation``         int64       launch ↔ GPU activity link (-1 if none)
``external_id``         int64       cpu_op ↔ launch link (-1 if none)
``seq``                 int64       forward/backward sequence number of cpu ops (-1 if none)
``is_gpu``              bool        a kernel, memcpy or memset on the part's GPU
======================  ==========  ===========================================================
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..core.constants import GPU_KINDS, KINDS
from ..core.records import Manifest, PartitionRecord
from ..errors import UsageError
from ..ingest.ranks import PartSpec, part_spec
from ..partitions.layout import TARGET_EVENTS, PartitionSpec, plan_partitions

EVENT_COLUMNS: dict[str, str] = {
    "device": "int32",
    "stream": "int64",
    "pid": "int64",
    "tid": "int64",
    "kind": "category",
    "name": "category",
    "start_ns": "int64",
    "end_ns": "int64",
    "correlation": "int64",
    "external_id": "int64",
    "seq": "int64",
    "is_gpu": "bool",
}
"""Columns of the event frame (the index is ``rank``, int32)."""


def event_frame(ev: pd.DataFrame, parts: pd.DataFrame, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """The public event frame of a partition's concatenated event table (see the module docstring)."""
    part = ev["part"].to_numpy(np.int64)
    p_rank = parts["rank"].to_numpy(np.int32)
    p_dev = parts["device"].to_numpy(np.int32)
    kind = pd.Categorical(np.asarray(ev["kind"].astype(str), dtype=object), categories=list(KINDS))
    dev = ev["device"].to_numpy(np.int64)
    out = pd.DataFrame(
        {
            "device": p_dev[part],
            "stream": ev["stream"].to_numpy(np.int64),
            "pid": ev["pid"].to_numpy(np.int64),
            "tid": ev["tid"].to_numpy(np.int64),
            "kind": kind,
            # the Categorical itself, not a Series: a Series would be aligned on the rank index below
            "name": _categorical(ev["name"]),
            "start_ns": ev["start_ns"].to_numpy(np.int64),
            "end_ns": ev["end_ns"].to_numpy(np.int64),
            "correlation": ev["correlation"].to_numpy(np.int64),
            "external_id": ev["external_id"].to_numpy(np.int64),
            "seq": ev["seq"].to_numpy(np.int64) if "seq" in ev.columns else np.full(len(ev), -1, np.int64),
            "is_gpu": np.isin(np.asarray(kind.codes), [KINDS.index(k) for k in GPU_KINDS]) & (dev == p_dev[part]),
        },
        index=pd.Index(p_rank[part], name="rank"),
    )
    return out[list(columns)] if columns is not None else out


def _categorical(col: pd.Series) -> pd.Categorical:
    """A column's values as a Categorical (its own when it has one), free of the Series' index."""
    values = col.array if isinstance(col.dtype, pd.CategoricalDtype) else col.astype("category").array
    return pd.Categorical(values)


def meta_frame(columns: Sequence[str] | None = None) -> pd.DataFrame:
    """An empty event frame with the declared dtypes (Dask's ``meta``)."""
    from dask.dataframe.utils import UNKNOWN_CATEGORIES

    cols: dict[str, Any] = {}
    for c, t in EVENT_COLUMNS.items():
        if c == "kind":
            cols[c] = pd.Categorical([], categories=list(KINDS))
        elif c == "name":
            cols[c] = pd.Categorical([], categories=[UNKNOWN_CATEGORIES])
        else:
            cols[c] = np.array([], t)
    df = pd.DataFrame(cols, index=pd.Index(np.array([], np.int32), name="rank"))
    return df[list(columns)] if columns is not None else df


def events(
    source: Any,
    *,
    columns: Sequence[str] | None = None,
    cache: str | None = None,
    partition_events: int | None = None,
    **kwargs: Any,
) -> Any:
    """The events of every rank as a Dask DataFrame (lazy; see the module docstring).

    Parameters
    ----------
    source
        A results directory written by ``dtrace analyze`` (its cached events are read; no trace
        is parsed), or inputs as for :func:`dtrace.analyze` (they are ingested first: into
        ``cache``, else a temporary folder removed when the process ends).
    columns
        Only these columns (the index ``rank`` always comes).
    cache
        For a results directory: the ingest cache of its analysis (default ``OUT/cache``, never
        the folder its manifest names; give it for a run made with ``--cache DIR``). For inputs:
        where they are ingested.
    partition_events
        Target events per partition, as in :func:`dtrace.analyze`; by default a results
        directory keeps the partitions of its analysis.
    **kwargs
        For inputs: ``scheduler``, ``workers``, ``format``, ``ranks``, ``rank_by`` as in
        :func:`dtrace.analyze` (where the ingest runs; the DataFrame itself is lazy).

    Examples
    --------
    >>> ev = dtrace.events("results/")                                     # doctest: +SKIP
    >>> ev[ev.is_gpu].groupby("rank").end_ns.max().compute()               # doctest: +SKIP
    """
    import dask.dataframe as dd

    if columns is not None:
        unknown = sorted(set(columns) - set(EVENT_COLUMNS))
        if unknown:
            raise UsageError(f"unknown event columns {unknown}; columns: {', '.join(EVENT_COLUMNS)}")
    path = os.fspath(source) if isinstance(source, (str, os.PathLike)) else None
    if path is not None and os.path.isdir(path) and os.path.lexists(os.path.join(path, "manifest.json")):
        from ..results import cache_of, load

        manifest = load(path).record
        specs = part_specs(manifest, cache or cache_of(path))
        partitions = (
            plan_partitions(specs, partition_events)
            if partition_events
            else _analysis_layout(specs, manifest.partitions)
        )
    else:
        specs = _specs_of_inputs(source, cache, **kwargs)
        partitions = plan_partitions(specs, partition_events or TARGET_EVENTS)
    if not partitions:
        raise UsageError("no analysable input: no events to return")
    divisions = [p.ranks[0] for p in partitions] + [partitions[-1].ranks[1]]
    return dd.from_map(
        load_events,
        partitions,
        columns=columns,
        meta=meta_frame(columns),
        divisions=divisions,
        label="dtrace-events",
        enforce_metadata=False,
    )


def load_events(partition: PartitionSpec, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """The events of one partition as the public event frame (the task :func:`events` maps)."""
    from ..execution.tasks import load_tables, parts_frame

    ev, _ = load_tables(partition.parts)
    return event_frame(ev, parts_frame(partition.parts), columns)


def _analysis_layout(specs: list[PartSpec], layout: list[PartitionRecord]) -> list[PartitionSpec]:
    """The partitions an analysis used (``manifest["partitions"]``: first and last rank of each),
    else (none recorded) a fresh plan."""
    if not layout:
        return plan_partitions(specs)
    bounds = np.sort(np.array([p.ranks[0] for p in layout], np.int64))
    ordered = sorted(specs, key=lambda s: (s.rank, s.device))
    # each part goes to the last partition starting at or before its rank
    which = np.maximum(np.searchsorted(bounds, [s.rank for s in ordered], side="right") - 1, 0)
    groups: dict[int, list[PartSpec]] = {}
    for s, i in zip(ordered, which.tolist()):
        groups.setdefault(i, []).append(s)
    return [PartitionSpec(k, tuple(g)) for k, (_, g) in enumerate(sorted(groups.items()))]


def part_specs(manifest: Manifest, cache_dir: str, wanted: set[tuple[int, int]] | None = None) -> list[PartSpec]:
    """The cached parts (rank, device) a finished analysis analysed, read from ``cache_dir``
    (``OUT/cache``, :func:`dtrace.results.cache_of`; never the manifest's ``cache`` field) —
    only the ``wanted`` ones if given (only their inputs' cache entries are opened). Raises
    :class:`UsageError` when an input's cached events are gone or no longer those analysed."""
    from ..ingest.cache import lookup

    specs: list[PartSpec] = []
    for item in manifest.inputs:
        if item.status != "ok" or item.summary:
            continue
        where = {p.local_index: p for p in item.parts if wanted is None or (p.rank, p.device) in wanted}
        if not where:
            continue
        rec, _ = lookup(cache_dir, item.path, verify=False)
        if rec is None or rec.fingerprint != item.fingerprint:
            raise UsageError(
                f"{item.path}: its cached events are gone from {cache_dir} or changed since the analysis; "
                f"run dtrace analyze again{_elsewhere(manifest, cache_dir)}"
            )
        for p in rec.parts:
            if p.local_index in where:
                specs.append(part_spec(rec, p, where[p.local_index].rank))
    return specs


#: Options that say how tables are computed from the events; ``recompute`` keeps the analysis's.
_KEPT_OPTIONS = ("compat", "linked_only", "step_pattern", "step", "kernel_wait_ns", "rank_by")


def recompute(
    out: str | os.PathLike[str], tables: Sequence[str], *, cache: str | None = None, **options: Any
) -> dict[str, pd.DataFrame]:
    """Per-partition ``tables`` of a finished analysis computed again from its cached events with
    other ``options`` (the analysis's own settings are kept unless given), in this process, one
    partition at a time (``dtrace report OUT --hist-log``: the gap histograms with other bins).

    Raises :class:`UsageError` for an unknown table and when the cached events are gone.

    Examples
    --------
    >>> h = recompute("run42/results", ["gap_histogram"], hist_log=True)   # doctest: +SKIP
    """
    from ..analyses import ANALYSES, run_analyses
    from ..api import make_options
    from ..execution.tasks import load_batch
    from ..results import cache_of, load

    known = {a.table for a in ANALYSES}
    unknown = sorted(set(tables) - known)
    if unknown:
        raise UsageError(f"cannot recompute {unknown}: not per-partition tables; tables: {', '.join(sorted(known))}")
    path = os.fspath(out)
    manifest = load(path).record
    used = manifest.options
    opts = make_options(**{**{k: used[k] for k in _KEPT_OPTIONS if k in used}, **options})
    specs = part_specs(manifest, cache or cache_of(path))
    parts: dict[str, list[pd.DataFrame]] = {t: [] for t in tables}
    for p in _analysis_layout(specs, manifest.partitions):
        got = run_analyses(load_batch(p.parts, opts), only=set(tables))
        for t in tables:
            parts[t].append(got[t])
    return {t: pd.concat(f, ignore_index=True) if f else pd.DataFrame() for t, f in parts.items()}


def _elsewhere(manifest: Manifest, cache_dir: str) -> str:
    """A hint when the analysis recorded another cache folder (``--cache DIR``): the field is
    shown, never followed."""
    used = manifest.cache
    if used is None or os.path.abspath(used) == os.path.abspath(cache_dir):
        return ""
    return f" (its manifest says it used the cache {used}: pass that folder as cache= / --cache to read it)"


def _specs_of_inputs(
    inputs: Any,
    cache: str | None,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    format: str | None = None,
    ranks: dict[str, int] | None = None,
    rank_by: str = "auto",
    progress: Any = False,
) -> list[PartSpec]:
    from ..execution.engine import ClusterSpec, Engine
    from ..execution.tasks import ingest_files
    from ..ingest.cache import check_cache_dir
    from ..ingest.inputs import expand_inputs
    from ..ingest.ranks import resolve_ranks
    from ..partitions.layout import content_size, ingest_batches

    if cache is None:
        cache = tempfile.mkdtemp(prefix="dtrace-events-")
        atexit.register(shutil.rmtree, cache, True)
    check_cache_dir(cache)
    files = expand_inputs(inputs)
    sizes = [content_size(f) for f in files]
    with Engine(ClusterSpec(scheduler=scheduler, workers=workers, progress=progress)) as engine:
        engine.start(sum(sizes) / 100e6, len(files))
        batches = ingest_batches(files, sizes, engine.n_workers)
        records = [
            r
            for batch in engine.map(ingest_files, batches, cache, format, True, label="reading traces")
            for r in (batch if isinstance(batch, list) else [])
        ]
    return resolve_ranks(records, rank_by=rank_by, ranks=ranks).specs


__all__ = ["events", "event_frame", "meta_frame", "EVENT_COLUMNS", "PartitionSpec"]
