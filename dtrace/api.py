"""The Python API: :func:`analyze` runs the pipeline; :func:`dtrace.load` opens results."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TypeVar

import numpy as np
import pandas as pd

from ._version import __version__
from .analyses import ANALYSES, Analysis
from .core import spill as spillfiles
from .core.dtypes import empty_frame
from .core.spill import Spilled
from .errors import DtraceError, OutputError, OwnOutput, RankError, UsageError
from .execution.engine import ClusterSpec, Engine, TaskFailure, estimated_work, local_workers
from .execution.plan import Plan, make_plan
from .execution.summaries import SummaryGroup, add_summaries, note_summaries, split_summaries
from .execution.tasks import SHARED_TEXT, PartitionResult, analyze_partition, ingest_files
from .ingest.cache import FileRecord, check_cache_dir, lookup
from .ingest.inputs import DEFAULT_MAX_INPUT_SIZE, InputSet, find_inputs, parse_size
from .ingest.ranks import PartSpec, explicit_ranks
from .ingest.remote import ObjectInfo, is_url, norm
from .ingest.unchanged import unchanged_inputs
from .knowledge.classify import load_classmap
from .knowledge.hardware import load_specs
from .options import Options
from .partitions import store as resultstore
from .partitions.layout import TARGET_EVENTS, PartitionSpec, content_size, ingest_batches
from .readers import get_reader
from .reduce import READ, REDUCED, run_reducers
from .reduce.stragglers import check_method
from .results import Results, StagedResults, check_results_dir

HASH_BYTES_PER_S = 2e9
ANALYSIS_EVENTS_PER_S = 1e6

T = TypeVar("T")


def make_options(**options: Any) -> Options:
    """The :class:`Options` of keyword settings, checked before any work.

    Besides what :class:`Options` checks itself, the straggler detector must be registered
    (:data:`dtrace.reduce.stragglers.METHODS`) and a class map must load (a readable file in a
    known format, the engine and model it names), and a GPU spec (``gpu_spec``) must load.

    Raises
    ------
    UsageError
        An unknown setting or an invalid value, in one line that lists the valid choices.
    """
    opts = Options.from_kwargs(**options)
    check_method(opts.straggler_method)
    if opts.classmap is not None:
        load_classmap(opts.classmap, opts.classmap_engine, opts.classmap_model)
    if opts.gpu_spec is not None:
        load_specs(opts.gpu_spec)  # a bad spec file fails here, before any work
    return opts


def analyze(
    inputs: Any,
    out: str | os.PathLike[str] | None = None,
    *,
    cache: str | None = None,
    scheduler: str | None = None,
    scheduler_file: str | None = None,
    workers: int | None = None,
    cluster: str | None = None,
    jobs: int | None = None,
    cluster_options: dict[str, Any] | None = None,
    progress: Any = False,
    format: str | None = None,
    ranks: dict[str, int] | None = None,
    reuse_cache: bool = True,
    reuse_results: bool | None = None,
    analyses: Sequence[Analysis] = (),
    partition_events: int = TARGET_EVENTS,
    max_input_size: int | str | None = DEFAULT_MAX_INPUT_SIZE,
    **options: Any,
) -> Results:
    """Analyse the traces of every rank and return (and, with ``out``, write) the results.

    Parameters
    ----------
    inputs
        Trace files, directories (searched recursively) or globs; or the
        :class:`~dtrace.ingest.inputs.InputSet` that :func:`~dtrace.ingest.inputs.find_inputs`
        found for this ``out`` (they are not searched again).
    out
        Results directory (tables as Parquet + ``manifest.json``, written atomically). The
        ingest cache lives in ``out/cache`` unless ``cache`` is given, so a second analysis of
        unchanged inputs reads Parquet only. A URL (``s3://bucket/run42/results/``) writes the
        results to an object store (see :func:`_analyze_to_url`).
    scheduler
        ``None`` (default): in-process for a small job, else a ``LocalCluster`` of processes
        (one per core); ``"sync"`` (always in-process), ``"local"`` (always a ``LocalCluster``)
        or the address of a running Dask scheduler. ``scheduler_file`` connects through a file.
    workers
        Worker processes of the local cluster (default: one per core).
    cluster, jobs, cluster_options
        From a login node: submit ``jobs`` batch jobs of Dask workers to ``cluster``
        (``"slurm"`` or ``"pbs"``, through dask-jobqueue: ``pip install 'dtrace[jobqueue]'``);
        ``cluster_options`` are its job settings (``cores``, ``memory``, ``queue``,
        ``account``, ``walltime``, ``interface``, ...). The jobs are cancelled at the end.
    progress
        ``True``: a progress bar on a terminal, a log line every 10 s otherwise (to stderr).
    format
        Force a reader (``kineto``, ...) instead of detecting the format from the content.
    ranks
        Explicit ``{path: rank}`` for inputs whose rank the file does not state.
    reuse_cache
        Reuse the Parquet of unchanged inputs (``False``: parse every input again).
    reuse_results
        Reuse each partition's stored result tables when its events and the settings are
        unchanged (default: as ``reuse_cache``; ``False`` recomputes the analyses).
    analyses
        Your own per-partition analyses (:class:`dtrace.Analysis`): each is run on every
        partition like a built-in one, cached with the results and written as its table.
    partition_events
        Target number of events per partition (whole ranks are batched up to it).
    max_input_size
        Largest decompressed content of one input (bytes, or ``"500MB"``, ``"64GiB"``,
        ``"unlimited"``); a larger input fails alone.
    **options
        Analysis settings, see :class:`dtrace.options.Options` (``compat="tracelens"``, ``step=3``, ...).

    Returns
    -------
    Results
        ``results.breakdown``, ``results.streams``, ... as pandas DataFrames; failed inputs
        are listed in ``results.manifest["inputs"]`` with their one-line error. With ``out``, the
        per-rank tables are read from ``out`` when first used (the run never held them all: a
        later run into the same ``out`` replaces them; :func:`dtrace.results.in_memory` reads
        every table at once). When no input could be analysed, nothing is written:
        ``results.path`` is ``None``, a folder ``out`` that this run made is removed again and
        the previous results there are kept.

    Raises
    ------
    UsageError
        Invalid settings.
    dtrace.errors.OutputError
        ``out`` cannot hold results (a file, ``out/manifest.json`` a folder, read-only, no
        space), said in one line before any work.
    dtrace.ingest.cache.CacheError
        The cache folder is a file, a symbolic link, or cannot be written.

    Examples
    --------
    >>> r = dtrace.analyze("traces/", "results/")                     # doctest: +SKIP
    >>> r.breakdown[["rank", "computation_ns", "idle_ns"]]            # doctest: +SKIP
    """
    if out is not None and is_url(os.fspath(out)):
        params = dict(locals())
        return _analyze_to_url(os.fspath(out), {k: v for k, v in params.items() if k != "options"}, options)
    t0 = time.perf_counter()
    opts = make_options(**options)
    if format is not None:
        get_reader(format)  # an unknown format is a usage error before any work, cached inputs or not
    user = _check_analyses(analyses)
    limit, ranks = parse_size(max_input_size), explicit_ranks(ranks)
    spec = ClusterSpec(
        scheduler=scheduler,
        scheduler_file=scheduler_file,
        workers=workers,
        cluster=cluster,
        jobs=jobs,
        cluster_options=cluster_options,
        progress=progress,
    )
    out = os.fspath(out) if out is not None else None
    made_out = out is not None and not os.path.lexists(out)
    if out is not None:
        check_results_dir(out)  # before any work: a one-line error naming the path
    found = _find_inputs(inputs, out)
    reuse_results = reuse_cache if reuse_results is None else reuse_results
    cache, tmp_cache = _cache_dir(cache, out)
    settings = {"ranks": ranks, "format": format, "max_input_size": limit}
    done = _previous_results(out, found, reuse_cache and reuse_results, opts, list(ANALYSES) + user, settings)
    if done is not None:
        return done
    run = _Run(
        files=found.files,
        cache=cache,
        options=opts,
        analyses=user,
        ranks=ranks,
        reuse_cache=reuse_cache,
        reuse_results=reuse_results,
        fmt=format,
        partition_events=partition_events,
        reader_options={"max_input_size": limit},
        refused=found.refused,
        store=resultstore.open_store(cache) if reuse_cache or reuse_results else None,
        infos=found.infos,
        skipped_notes=found.skipped,
        spill=_spill_folder(cache, out, found),
    )

    def finish(n_workers: int, mode: str) -> Results:  # while the workers stop
        if out is None:
            tables, manifest, _ = _reduce_and_record(run, found.summaries, opts, settings, t0, n_workers, mode)
            return Results(tables, manifest, None)
        with StagedResults(out) as staged:  # the tables no reducer changes are written while they run
            tables, manifest, written = _reduce_and_record(
                run, found.summaries, opts, settings, t0, n_workers, mode, staged
            )
            if not manifest["n_parts"]:  # nothing analysable: nothing written, the previous results kept
                return Results(tables, manifest, None)
            return staged.commit(tables, manifest, written)

    return _unmade_if_empty(_run_on_engine(run, spec, tmp_cache, finish), out if made_out else None)


def _spill_folder(cache: str, out: str | None, found: _Inputs) -> str | None:
    """The run's spill folder (:mod:`dtrace.core.spill`) when it writes results (without, every
    table is returned in memory anyway), but for ``nsys stats`` summaries (their rows join tables
    on the client)."""
    return spillfiles.make(cache) if out is not None and not found.summaries else None


def _unmade_if_empty(res: Results, made: str | None) -> Results:
    """``res``; the folder ``made`` by this run removed when nothing was written there (it holds
    only the cache of inputs that failed)."""
    if made is not None and res.path is None:
        shutil.rmtree(made, ignore_errors=True)
    return res


@dataclass
class _Inputs:
    """The inputs of a run, once expanded: what is read, what was refused before opening it."""

    files: list[str]
    refused: list[FileRecord]
    summaries: list[SummaryGroup]  # nsys stats summaries: no events, their own path
    infos: dict[str, ObjectInfo]  # what the listing said of remote inputs
    skipped: list[str]  # results folders of dtrace among the inputs


def _find_inputs(inputs: Any, out: str | None) -> _Inputs:
    """The inputs found by :func:`~dtrace.ingest.inputs.find_inputs` (``out`` left out; FIFOs,
    devices, unlistable folders: failed inputs, never opened; URLs listed on their store), or
    those the caller found already for this ``out`` (an :class:`InputSet`: not expanded again)."""
    found = inputs if isinstance(inputs, InputSet) and inputs.out == out else None
    if found is None:
        given = inputs.given if isinstance(inputs, InputSet) else inputs
        found = find_inputs(given, out)
    files, summaries = split_summaries(list(found.files))  # nsys stats summaries carry no events: own path
    return _Inputs(files, list(found.refused), summaries, dict(found.infos), list(found.skipped))


def _previous_results(
    out: str | None,
    found: _Inputs,
    reuse: bool,
    opts: Options,
    analyses: Sequence[Analysis],
    settings: dict[str, Any],
) -> Results | None:
    """The results in ``out`` when reuse is on and they are :func:`up_to_date` (never with nsys
    stats summaries among the inputs); else None."""
    if out is None or not reuse or found.summaries:
        return None
    return up_to_date(out, found.files, found.refused, opts, analyses, settings, found.infos)


def _cache_dir(cache: str | None, out: str | None) -> tuple[str, str | None]:
    """The ingest cache folder (checked), and the temporary one to remove at the end (if any)."""
    tmp_cache = None
    if cache is None:
        if out is not None:
            cache = os.path.join(out, "cache")
        else:
            cache = tmp_cache = tempfile.mkdtemp(prefix="dtrace-cache-")
    check_cache_dir(cache)
    return cache, tmp_cache


def _run_on_engine(run: _Run, spec: ClusterSpec, tmp_cache: str | None, finish: Callable[[int, str], T]) -> T:
    """Plan, start the engine, ingest and analyse, then ``finish(workers, mode)`` (the reduce and
    the writing of the results) while the workers stop. The temporary cache (if any) is removed however it ends."""
    try:
        with Engine(spec) as engine:
            work, tasks = run.estimate(local_workers(spec))
            run.phase("plan")
            engine.start(work, tasks)
            run.phase("start")
            run.execute(engine)
            n_workers, mode = engine.n_workers, engine.mode
            engine.stop_in_background()
            done = finish(n_workers, mode)
    finally:
        spillfiles.remove(run.spill)
        if tmp_cache is not None:
            shutil.rmtree(tmp_cache, ignore_errors=True)
    return done


def _reduce_and_record(
    run: _Run,
    summaries: list[SummaryGroup],
    opts: Options,
    settings: dict[str, Any],
    t0: float,
    n_workers: int,
    mode: str,
    staged: StagedResults | None = None,
) -> tuple[dict[str, pd.DataFrame], dict[str, Any], list[str]]:
    """The run's tables, reduced across ranks, its manifest (with the run key of a complete run,
    which a later :func:`up_to_date` compares), and the tables written already and let go (with
    ``staged``: the per-rank tables are handed to it before the reducers run, streamed from the
    spill folder or from memory, the tables of each reducer as it ends)."""
    analyses = list(ANALYSES) + run.analyses
    gathered = _gather(run, analyses, summaries, opts, staged)
    tables = run_reducers(
        gathered.frames,
        opts,
        on_reduced=staged.stage if staged is not None else None,
        drop=gathered.written,
        load=gathered.loaders,
    )
    run.phase("reduce")
    manifest = run.manifest(time.perf_counter() - t0, n_workers, mode)
    note_summaries(manifest, gathered.summary_inputs, gathered.summary_parts)
    if run.reuse_results and run.store is not None and manifest["n_parts"]:  # else the previous run's are kept
        resultstore.prune(run.store, run.keys_used)
    if not summaries and not manifest["n_failed"] and not run.failed_tables:
        manifest["run_key"] = resultstore.run_key(
            [(i["path"], i["size"], i["mtime_ns"], i["fingerprint"]) for i in manifest["inputs"]],
            opts,
            analyses,
            settings,
        )
    return tables, manifest, [n for n in gathered.written if n not in tables and n in gathered.frames]


@dataclass
class _Gathered:
    """The per-rank tables on their way to the reducers: frames in memory, tables the reducers read
    from the spill folder when they need them, and the names written already (let go after use)."""

    frames: dict[str, pd.DataFrame]
    loaders: dict[str, Callable[[], pd.DataFrame]]
    written: list[str]
    summary_inputs: list[dict[str, Any]]
    summary_parts: int


def _gather(
    run: _Run, analyses: Sequence[Analysis], summaries: list[SummaryGroup], opts: Options, staged: StagedResults | None
) -> _Gathered:
    """The per-rank tables of the run. A table the workers wrote to the spill folder is streamed
    into its results file (but those the reducers replace) and read from there when a reducer
    needs it; the other tables (none has rows, or no spill folder) are concatenated here."""
    spilled = _spilled_tables(run, analyses)
    frames = combine([r.tables for r in run.results], [a for a in analyses if a.table not in spilled], take=True)
    for name in run.failed_tables:  # a user's analysis that failed: its table only, never partly
        frames.pop(name, None)
    frames, summary_inputs, summary_parts = add_summaries(frames, summaries, opts)
    loaders: dict[str, Callable[[], pd.DataFrame]] = {
        name: functools.partial(_read_spilled, name, parts) for name, parts in spilled.items() if name in READ
    }
    written: list[str] = []
    if staged is not None:
        for name, parts in spilled.items():
            if name not in REDUCED:
                staged.stage_parts(name, parts)
        staged.stage({n: df for n, df in frames.items() if n not in REDUCED})
        written = [n for n in [*frames, *loaders] if n not in REDUCED]
    return _Gathered(frames, loaders, written, summary_inputs, summary_parts)


def _read_spilled(name: str, parts: list[Spilled]) -> pd.DataFrame:
    """Table ``name`` that the workers left in the spill folder, as the frame a reducer reads: the
    texts that travelled as categories (:data:`~dtrace.execution.tasks.SHARED_TEXT`) as objects,
    one Python string per distinct value shared by its rows."""
    t = spillfiles.read_all(parts)
    assert t is not None  # a table with parts
    return _objects(t.to_pandas(), SHARED_TEXT.get(name, ()))


def _spilled_tables(run: _Run, analyses: Sequence[Analysis]) -> dict[str, list[Spilled]]:
    """The tables the workers left in the spill folder (none without one): each one's files in
    partition (rank) order; a table no partition has rows of is not among them (the client makes
    its empty frame), nor is a user's table that failed."""
    out: dict[str, list[Spilled]] = {}
    for a in analyses:
        if a.table in run.failed_tables:
            continue
        parts = [r.spilled[a.table] for r in run.results if a.table in r.spilled]
        if parts:
            out[a.table] = parts
    return out


def _analyze_to_url(out: str, params: dict[str, Any], options: dict[str, Any]) -> Results:
    """:func:`analyze` with its results on an object store.

    The previous results at ``out`` (if any) are copied into a local staging folder, the analysis
    runs against that folder as usual (so an up-to-date run returns them without any work), and
    new results are uploaded: the old manifest removed first, the tables, then the new manifest
    (:func:`dtrace.ingest.remote.upload_results`). The ingest cache is local, ``cache`` or
    :func:`dtrace.ingest.remote.default_cache` (a cluster run passes a shared ``cache``). The returned
    tables are in memory; the staging folder is removed.
    """
    from .ingest.remote import RemoteError, check_writable, default_cache, download_results, upload_results
    from .results import in_memory

    staging = tempfile.mkdtemp(prefix="dtrace-out-")
    try:
        try:
            check_writable(out)
            download_results(out, staging)
        except RemoteError as exc:
            raise OutputError(str(exc)) from None
        cache = params["cache"] or default_cache(out)
        res = analyze(**{**params, "out": staging, "cache": cache}, **options)
        if res.path is not None and not res.manifest.get("up_to_date"):
            try:
                upload_results(staging, out)
            except RemoteError as exc:
                raise OutputError(f"{exc} (the results are not complete there; run again)") from None
        return in_memory(res)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def whatif(results: Any, *, speedup: dict[str, float] | None = None, step: int | None = None) -> pd.DataFrame:
    """What-if estimates of a results directory (or ``dtrace.load(OUT)``) with your scenarios.

    ``speedup``: ``{class: x}``, each kernel class ``x`` times as fast on every rank (default:
    the three compute classes with the most time, 1.2× each); ``step``: only this step. See
    :func:`dtrace.reduce.whatif.whatif` and docs/semantics.md, "What-if".

    Examples
    --------
    >>> dtrace.whatif("run42/results", speedup={"gemm": 1.5})        # doctest: +SKIP
    """
    from .reduce.whatif import whatif as estimate
    from .results import load

    res = results if isinstance(results, Results) else load(results)
    return estimate(res, speedup=speedup, step=step)


def up_to_date(
    out: str,
    files: list[str],
    refused: list[FileRecord],
    options: Options,
    analyses: Sequence[Analysis],
    settings: dict[str, Any],
    infos: dict[str, ObjectInfo] | None = None,
) -> Results | None:
    """The results in ``out`` if they come from these very inputs (same fingerprints), settings,
    analyses and dtrace version, and every table file is intact; else None.

    Cheap checks first: the previous run listed the same inputs with the same sizes and mtimes;
    only then is each input fingerprinted (the content decides, never the mtime alone). A remote
    input is the same object when its store states the recorded size and identity (``infos``,
    from the listing): it is not downloaded; one whose store states no identity is not up to date.
    """
    from .results import intact, load

    try:
        prev = load(out).record
    except DtraceError:
        return None
    if prev.run_key is None or refused or prev.n_failed:
        return None
    inputs = unchanged_inputs(prev.inputs, files, infos or {})
    if inputs is None:
        return None
    if resultstore.run_key(inputs, options, analyses, settings) != prev.run_key or not intact(out, prev):
        return None
    res = load(out)
    # in memory only, for this call: nothing was parsed or analysed again (the manifest on disk
    # still describes the run that made the results, at prev.created)
    res.manifest["up_to_date"] = True
    for item in res.manifest["inputs"]:
        item["cached"] = item["results_reused"] = True
    return res


def reserved_tables() -> set[str]:
    """Table names a user's analysis may not take: the built-in and cross-rank tables, and the
    attributes of :class:`Results` (``results.inputs`` must stay the inputs)."""
    from .reduce import DECLARED

    return (
        {a.table for a in ANALYSES}
        | set(DECLARED)
        | {"ranks"}
        | {n for n in dir(Results) if not n.startswith("_")}
        | {"manifest", "path"}
    )


def _check_analyses(analyses: Sequence[Analysis]) -> list[Analysis]:
    """The user's analyses, checked before any work (one-line usage errors)."""
    if isinstance(analyses, (Analysis, str, bytes)) or not isinstance(analyses, (list, tuple)):
        raise UsageError(f"analyses must be a list of dtrace.Analysis objects, not {type(analyses).__name__}")
    reserved = reserved_tables()
    out = []
    for a in analyses:
        if not isinstance(a, Analysis):
            raise UsageError(f"analyses must be dtrace.Analysis objects, not {type(a).__name__}")
        Analysis(a.table, a.func, a.columns)  # its own checks again: dataclasses can be changed after creation
        if a.table in reserved:
            raise UsageError(f"analysis table name {a.table!r} is taken by a built-in table; choose another")
        if "rank" not in a.columns or "device" not in a.columns:
            raise UsageError(f"analysis {a.table!r} must declare the key columns 'rank' and 'device'")
        out.append(a)
    if len({a.table for a in out}) != len(out):
        raise UsageError("two analyses write the same table")
    return out


@dataclass
class _Run:
    """One analysis run: plan, ingest, rank, partition, analyse; what the manifest reports."""

    files: list[str]
    cache: str
    options: Options
    analyses: list[Analysis]
    ranks: dict[str, int] | None
    reuse_cache: bool
    reuse_results: bool
    fmt: str | None
    partition_events: int
    reader_options: dict[str, Any] = field(default_factory=dict)
    refused: list[FileRecord] = field(default_factory=list)
    store: str | None = None
    infos: dict[str, ObjectInfo] = field(default_factory=dict)  # what the listing said of remote inputs
    spill: str | None = None  # the spill folder: the tables no reducer reads stay there
    records: list[FileRecord] = field(default_factory=list)
    errors: dict[str, tuple[str, str]] = field(default_factory=dict)  # path -> (one-line error, its type)
    failed_tables: dict[str, str] = field(default_factory=dict)  # a user's table -> one-line error
    skipped: dict[str, str] = field(default_factory=dict)  # path -> why (dtrace's own outputs)
    skipped_notes: list[str] = field(default_factory=list)  # folders of dtrace's results left out
    results: list[PartitionResult] = field(default_factory=list)
    plan: Plan | None = None  # made once: before the start when every input looks cached, else after ingest
    phases: dict[str, float] = field(default_factory=dict)
    t_last: float = field(default_factory=time.perf_counter)
    _sizes: list[int] = field(default_factory=list)

    @property
    def specs(self) -> tuple[PartSpec, ...]:
        """Every part to analyse, with its rank (none before the plan)."""
        return self.plan.specs if self.plan is not None else ()

    @property
    def partitions(self) -> tuple[PartitionSpec, ...]:
        return self.plan.partitions if self.plan is not None else ()

    @property
    def keys_used(self) -> set[str]:
        """The store keys of this run's groups (what pruning keeps)."""
        return {k for k in self.plan.keys if k} if self.plan is not None else set()

    def phase(self, name: str) -> None:
        """Record the seconds since the previous phase ended (reported in the manifest)."""
        now = time.perf_counter()
        self.phases[name] = round(now - self.t_last, 3)
        self.t_last = now

    def estimate(self, workers: int) -> tuple[float, int]:
        """Seconds of single-core work this run will take (roughly), and its ingest tasks.

        Inputs whose cache entry looks fresh (size and mtime) cost a fingerprint; the others a
        parse. When every input looks cached, the partitions are planned here already and
        those whose results are stored cost nothing to analyse.
        """
        self._sizes = [content_size(f, self.infos.get(f)) for f in self.files]
        hits = [
            lookup(self.cache, f, verify=False, info=self.infos.get(f))[0]
            if self.reuse_cache and self._known(f)
            else None
            for f in self.files
        ]
        parse = estimated_work([s for s, h in zip(self._sizes, hits) if h is None])
        hashing = sum(h.size for h in hits if h is not None) / HASH_BYTES_PER_S
        tasks = len(ingest_batches(self.files, self._sizes, workers))
        if parse:
            return parse + hashing, tasks
        events = self._events_to_analyse([h for h in hits if h is not None], workers)
        return hashing + events / ANALYSIS_EVENTS_PER_S, tasks

    def _events_to_analyse(self, records: list[FileRecord], workers: int) -> int:
        """Events of the partitions planned from these (cached) records whose results are not
        stored (all of them when an analysis is never reused); the plan is kept for the run."""
        self.plan = self._make_plan(records, workers)
        analyses = list(ANALYSES) + self.analyses
        always = len(resultstore.reusable(analyses)) < len(analyses)  # some are never reused
        events = 0
        for group, key in zip(self.plan.groups, self.plan.keys):
            if always or key is None or not os.path.exists(os.path.join(self.store or "", key, resultstore.ENTRY)):
                events += sum(s.n_events for s in group)
        return events

    def _make_plan(self, records: list[FileRecord], workers: int) -> Plan:
        return make_plan(
            records,
            options=self.options,
            ranks=self.ranks,
            partition_events=self.partition_events,
            workers=workers,
            analyses=list(ANALYSES) + self.analyses,
            keyed=self.reuse_results and self.store is not None,
        )

    def _known(self, path: str) -> bool:
        """Whether the client can check ``path``'s cache entry without a request (a local file, or an
        object the listing described)."""
        return not is_url(path) or path in self.infos

    def fail(self, path: str, error: str, kind: str) -> None:
        """Record an input's error; the first one found (ingest, ranks, analysis) is the one reported."""
        self.errors.setdefault(path, (error, kind))

    def execute(self, engine: Engine) -> None:
        """Ingest every input, rank the parts, plan the partitions and analyse them; each stage's
        errors are collected in :attr:`errors`, its results are never changed afterwards."""
        self.records = self.ingest(engine)
        self._note_ingest_errors()
        if self.plan is None or not self.plan.fits(self.records, engine.parallelism):
            self.plan = self._make_plan(self.records, engine.parallelism)  # else: planned already, from the cache
        for path, err in self.plan.rank_errors.items():
            self.fail(path, err, RankError.__name__)
        self.phase("ingest")
        outcome = engine.map(
            analyze_partition,
            list(self.partitions),
            self.options,
            self.analyses,
            self.reuse_results,
            self.store,
            self.spill,
            label="analysing ranks",
            split=PartitionSpec.halves,
        )
        self.phase("analyse")
        self.results = [
            PartitionResult(o.item.index, errors={p: f"{p}: {o.reason}" for p in o.item.paths})
            if isinstance(o, TaskFailure)
            else o
            for o in outcome
        ]
        self._note_analysis_errors()

    def _note_ingest_errors(self) -> None:
        """Each failed input's error; dtrace's own outputs among the inputs are skipped, not failed."""
        for r in self.records:
            if r.error is not None and r.error_type == OwnOutput.__name__:
                self.skipped[r.path] = r.error  # one of dtrace's own outputs: not a trace, not a failure
            elif r.error is not None:
                self.fail(r.path, r.error, r.error_type or "InputError")

    def _note_analysis_errors(self) -> None:
        """Each partition's failed inputs, and the user's tables that failed."""
        for res in self.results:
            for path, err in res.errors.items():
                self.fail(path, err, "AnalysisError")
            for table, err in res.failed_tables.items():
                self.failed_tables.setdefault(table, err)

    def ingest(self, engine: Engine) -> list[FileRecord]:
        """The ingest records of every input (the refused ones included), sorted by path."""
        sizes = self._sizes or [content_size(f, self.infos.get(f)) for f in self.files]
        batches = ingest_batches(self.files, sizes, engine.n_workers)
        done = engine.map(
            ingest_files,
            batches,
            self.cache,
            self.fmt,
            self.reuse_cache,
            self.reader_options,
            label="reading traces",
            split=lambda b: [[p] for p in b] if len(b) > 1 else None,
        )
        records: list[FileRecord] = []
        for d in done:
            if isinstance(d, TaskFailure):
                records += [
                    FileRecord(path=norm(p), error=f"{norm(p)}: {d.reason}", error_type="WorkerError") for p in d.item
                ]
            else:
                records += d
        by_path = {r.path: r for r in records + self.refused}
        return sorted(by_path.values(), key=lambda r: r.path)

    def manifest(self, seconds: float, n_workers: int, mode: str) -> dict[str, Any]:
        """The run's manifest (``manifest.json``): settings, timings, partitions and every input."""
        failed = set(self.errors)
        notes = list(self.skipped_notes) + [n for res in self.results for n in res.notes]
        inputs = self._input_entries()
        return {
            "dtrace_version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "options": self.options.to_json(),
            "analyses": [a.table for a in self.analyses],
            "failed_tables": dict(self.failed_tables),
            "cache": os.path.abspath(self.cache),
            "seconds": round(seconds, 3),
            "phases": dict(self.phases),
            "execution": mode,
            "workers": n_workers,
            "partitions": [
                {"ranks": list(p.ranks), "parts": len(p.parts), "events": p.n_events} for p in self.partitions
            ],
            "notes": notes,
            "inputs": inputs,
            "n_inputs": len(self.files) + len(self.refused),
            "n_failed": sum(1 for i in inputs if i["status"] == "error"),
            "n_parts": len({(s.rank, s.device) for s in self.specs if s.path not in failed}),
            "spilled_bytes": sum(p.bytes for r in self.results for p in r.spilled.values()) if self.spill else None,
        }

    def _input_entries(self) -> list[dict[str, Any]]:
        """The manifest's entry of every input: its status, error, ranks and parts, cache use."""
        ranks: dict[str, list[list[int]]] = {}
        parts: dict[str, list[dict[str, int]]] = {}
        for s in self.specs:
            ranks.setdefault(s.path, []).append([s.rank, s.device])
            parts.setdefault(s.path, []).append({"rank": s.rank, "device": s.device, "local_index": s.local_index})
        reused = {p for res in self.results for p in res.reused_paths}
        inputs = []
        for r in self.records:
            error, error_type = self.errors.get(r.path, (None, None))
            if r.path in self.skipped:
                error, error_type = self.skipped[r.path], OwnOutput.__name__
            inputs.append(
                {
                    "path": r.path,
                    "format": r.format,
                    "status": "skipped" if r.path in self.skipped else "error" if error else "ok",
                    "error": error,
                    "error_type": error_type,
                    "ranks": ranks.get(r.path, []) if not error else [],
                    "parts": parts.get(r.path, []) if not error else [],
                    "size": r.size,
                    "mtime_ns": r.mtime_ns,
                    "fingerprint": r.fingerprint,
                    "identity": r.identity,
                    "cached": r.cached,
                    "results_reused": r.path in reused and not error,
                    "events": int(r.meta.get("events") or 0) if r.meta else 0,
                    "notes": list(r.notes),
                    "dropped_events": dict((r.meta or {}).get("dropped_events") or {}),
                }
            )
        return inputs


def combine(
    per_partition: list[dict[str, pd.DataFrame]], analyses: Sequence[Analysis] = ANALYSES, *, take: bool = False
) -> dict[str, pd.DataFrame]:
    """Concatenate each table over partitions (once per table); empty tables keep their columns.
    With ``take``, each partition's frames are taken out of ``per_partition`` as their table is
    made (never two copies of every table at once)."""
    out = {}
    for a in analyses:
        frames = [t[a.table] for t in per_partition if a.table in t and len(t[a.table])]
        if take:
            for t in per_partition:
                t.pop(a.table, None)
        if len(frames) == 1:
            out[a.table] = frames[0]
        elif frames:
            out[a.table] = pd.concat(frames, ignore_index=True)
        else:
            out[a.table] = empty_frame(a.columns)
    return out


def _objects(df: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """``df`` with its categorical ``columns`` as objects: one Python string per category, shared
    by the rows (a missing value stays NaN)."""
    cols = {}
    for c in columns:
        if c in df and isinstance(df[c].dtype, pd.CategoricalDtype):
            cat = df[c].array
            values = np.append(np.asarray(cat.categories, dtype=object), np.nan)  # code -1: the NaN at the end
            cols[c] = pd.Series(values[cat.codes], index=df.index, dtype=object)
    return df.assign(**cols) if cols else df


__all__ = ["analyze", "combine", "make_options", "whatif"]
