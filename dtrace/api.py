"""The Python API: :func:`analyze` runs the pipeline; :func:`dtrace.load` opens results."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any

import pandas as pd

from . import __version__
from .analyses import ANALYSES
from .engine import ClusterSpec, Engine
from .nsysstats.summary import add_summaries, note_summaries, split_summaries
from .options import Options
from .partition import analyze_partition, ingest_file
from .plan import DEFAULT_MAX_INPUT_SIZE, expand_inputs, explicit_ranks, parse_size, refuse_irregular, resolve_ranks
from .reduce import run_reducers
from .results import Results, write_results


def analyze(inputs: Any, out: str | os.PathLike[str] | None = None, *, cache: str | None = None,
            scheduler: str | None = None, scheduler_file: str | None = None, workers: int | None = None,
            cluster: str | None = None, jobs: int | None = None, cluster_options: dict[str, Any] | None = None,
            progress: bool = False, format: str | None = None, ranks: dict[str, int] | None = None,
            reuse_cache: bool = True, reuse_results: bool | None = None,
            max_input_size: int | str | None = DEFAULT_MAX_INPUT_SIZE, **options: Any) -> Results:
    """Analyse the traces of every rank and return (and, with ``out``, write) the results.

    Parameters
    ----------
    inputs
        Trace files, directories (searched recursively) or globs.
    out
        Results directory (tables as Parquet + ``manifest.json``, written atomically). The
        ingest cache lives in ``out/cache`` unless ``cache`` is given, so a second analysis of
        unchanged inputs reads Parquet only.
    scheduler
        ``"sync"`` (in-process), ``"local"`` (a ``LocalCluster`` of processes; the default) or
        the address of a running Dask scheduler. ``scheduler_file`` connects through a file.
    workers
        Worker processes of the local cluster (default: one per core).
    cluster, jobs, cluster_options
        From a login node: submit ``jobs`` batch jobs of Dask workers to ``cluster``
        (``"slurm"`` or ``"pbs"``, through dask-jobqueue: ``pip install 'dtrace[jobqueue]'``);
        ``cluster_options`` are its job settings (``cores``, ``memory``, ``queue``,
        ``account``, ``walltime``, ``interface``, ...). The jobs are cancelled at the end.
    format
        Force a reader (``kineto``, ...) instead of detecting the format from the content.
    ranks
        Explicit ``{path: rank}`` for inputs whose rank the file does not state.
    reuse_cache
        Reuse the Parquet of unchanged inputs (``False``: parse every input again).
    reuse_results
        Reuse each part's result frames when its events and the options are unchanged
        (default: as ``reuse_cache``; ``False`` recomputes the analyses from the Parquet events).
    max_input_size
        Largest content (decompressed) of one input, in bytes or as ``"64GiB"``; ``None`` or
        ``"unlimited"``: no limit. A larger input fails alone when it is parsed.
    **options
        Analysis settings, see :class:`dtrace.options.Options` (``compat="tracelens"``, ``step=3``, ...).

    Returns
    -------
    Results
        ``results.breakdown``, ``results.streams``, ... as pandas DataFrames; failed inputs
        are listed in ``results.manifest["inputs"]`` with their one-line error.

    Examples
    --------
    >>> r = dtrace.analyze("traces/", "results/", scheduler="sync")   # doctest: +SKIP
    >>> r.breakdown[["rank", "computation_ns", "idle_ns"]]            # doctest: +SKIP
    """
    t0 = time.perf_counter()
    opts = Options.from_kwargs(**options)
    limit, ranks = parse_size(max_input_size), explicit_ranks(ranks)
    out = os.fspath(out) if out is not None else None
    # FIFOs, devices, unlistable folders: failed inputs, never opened
    files, refused = refuse_irregular(expand_inputs(inputs, exclude=[out] if out else None))
    files, summaries = split_summaries(files)  # nsys stats summaries carry no events: own path
    scheduler = "sync" if not files else scheduler
    tmp_cache = None
    if cache is None:
        if out is not None:
            cache = os.path.join(out, "cache")
        else:
            cache = tmp_cache = tempfile.mkdtemp(prefix="dtrace-cache-")
    os.makedirs(cache, exist_ok=True)
    try:
        with Engine(ClusterSpec(scheduler=scheduler, scheduler_file=scheduler_file, workers=workers,
                                cluster=cluster, jobs=jobs, cluster_options=cluster_options,
                                progress=progress)) as engine:
            records = engine.map(ingest_file, files, cache, format, reuse_cache, {"max_input_size": limit},
                                 label="reading traces")
            records = sorted(records + refused, key=lambda r: r.path)
            specs = resolve_ranks(records, rank_by=opts.rank_by, ranks=ranks)
            reuse_results = reuse_cache if reuse_results is None else reuse_results
            parts = engine.map(analyze_partition, specs, opts, reuse_results, label="analysing ranks")
            n_workers = engine.n_workers
    finally:
        if tmp_cache is not None:
            shutil.rmtree(tmp_cache, ignore_errors=True)
    by_path = {r.path: r for r in records}
    for p in parts:
        if p["error"] and by_path[p["spec"].path].error is None:
            r = by_path[p["spec"].path]
            r.error, r.error_type = p["error"], "AnalysisError"
    good = [p for p in parts if not p["error"] and by_path[p["spec"].path].error is None]
    tables = combine([p["tables"] for p in good])
    tables, summary_inputs, summary_parts = add_summaries(tables, summaries, opts)
    tables = run_reducers(tables, opts)
    manifest = _manifest(records, specs, opts, [*files, *(r.path for r in refused)], cache,
                         time.perf_counter() - t0, n_workers)
    note_summaries(manifest, summary_inputs, summary_parts)
    reused = {p["spec"].path for p in parts if p.get("reused")}
    for item in manifest["inputs"]:
        item["results_reused"] = item["path"] in reused
    if out is not None:
        return write_results(out, tables, manifest)
    return Results(tables, manifest, None)


def combine(per_part: list[dict[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """Concatenate each table over parts (once per table), empty tables keep their columns."""
    out = {}
    for a in ANALYSES:
        frames = [t[a.table] for t in per_part if a.table in t and len(t[a.table])]
        if frames:
            out[a.table] = pd.concat(frames, ignore_index=True)
        else:
            out[a.table] = pd.DataFrame({c: pd.Series([], dtype=d) for c, d in a.columns.items()})
    return out


def _manifest(records, specs, opts: Options, files, cache, seconds: float, n_workers: int) -> dict[str, Any]:
    failed = {r.path for r in records if r.error}
    ranks: dict[str, list[list[int]]] = {}
    for s in specs:
        ranks.setdefault(s.path, []).append([s.rank, s.device])
    inputs = []
    for r in records:
        inputs.append({
            "path": r.path, "format": r.format, "status": "error" if r.error else "ok", "error": r.error,
            "error_type": r.error_type, "ranks": ranks.get(r.path, []) if not r.error else [],
            "size": r.size, "mtime_ns": r.mtime_ns, "sha256": r.sha256, "cached": r.cached,
            "events": int(r.meta.get("events", 0)) if r.meta else 0,
            "dropped_events": dict((r.meta or {}).get("dropped_events") or {}),
        })
    return {
        "dtrace_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "options": opts.to_json(),
        "cache": os.path.abspath(cache),
        "seconds": round(seconds, 3),
        "workers": n_workers,
        "inputs": inputs,
        "n_inputs": len(files),
        "n_failed": sum(1 for i in inputs if i["status"] == "error"),
        "n_parts": len({(s.rank, s.device) for s in specs if s.path not in failed}),
    }


__all__ = ["analyze", "combine"]
