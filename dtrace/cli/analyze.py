"""``dtrace analyze INPUT... -o OUT``: the main job."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, Callable

from ..core.constants import DEFAULT_MAX_INPUT_SIZE
from ..errors import DtraceError, UsageError
from ..render.escape import printable
from . import uptodate
from .common import (
    add_analysis_options,
    add_output_format,
    analysis_kwargs,
    check_out_dir,
    id_list,
    is_machine,
    json_text,
    say,
    whole,
)

if TYPE_CHECKING:
    from ..ingest.inputs import InputSet
    from ..results import Results

# (flag, dask-jobqueue keyword, type, help) of the batch-job settings
_JOB_FLAGS: list[tuple[str, str, Callable[[str], Any], str]] = [
    ("--job-cores", "cores", whole(1, 4096), "cores per job, one single-threaded worker each (default: 1)"),
    ("--job-memory", "memory", str, "memory per job, e.g. 16GiB (default: 4GiB)"),
    ("--queue", "queue", str, "queue / partition of the jobs"),
    ("--account", "account", str, "account to charge the jobs to"),
    ("--walltime", "walltime", str, "time limit of each job, e.g. 01:00:00"),
    ("--interface", "interface", str, "network interface of the scheduler and workers, e.g. ib0"),
]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "analyze",
        help="analyse the traces of every rank and write results",
        description="Analyse trace files (files, directories, globs) of all ranks; write "
        "Parquet tables and manifest.json to OUT and print a summary.",
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT")
    p.add_argument("-o", "--output", "--out", dest="out", required=True, metavar="OUT", help="results directory")
    p.add_argument("--cache", default=None, help="ingest cache directory (default: OUT/cache)")
    p.add_argument("--no-cache", action="store_true", help="re-parse every input even if cached")
    p.add_argument(
        "--recompute",
        action="store_true",
        help="recompute the analyses from the cached Parquet events (no reuse of result frames)",
    )
    p.add_argument(
        "--max-input-size",
        default=DEFAULT_MAX_INPUT_SIZE,
        metavar="SIZE",
        help=f"largest content (decompressed) of one input, e.g. 500MB or unlimited (default: "
        f"{DEFAULT_MAX_INPUT_SIZE}); a larger input fails alone",
    )
    e = p.add_argument_group("execution")
    e.add_argument(
        "--workers", type=whole(1, 4096), default=None, help="local worker processes (default: one per core)"
    )
    e.add_argument(
        "--scheduler",
        default=None,
        help="where to run: 'auto' (default: in-process for a small job, else a local cluster of "
        "processes), 'sync' (in-process), 'local' (always a local cluster), or the address of a "
        "running Dask scheduler",
    )
    e.add_argument("--scheduler-file", default=None, help="Dask scheduler file of a running cluster")
    e.add_argument("--sync", action="store_true", help="run in-process without a cluster (same as --scheduler sync)")
    e.add_argument(
        "--partition-size",
        type=whole(1, 10**12),
        default=None,
        metavar="EVENTS",
        help="target events per partition: whole ranks are batched up to it (default 600,000)",
    )
    e.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress (default: a bar on a terminal, a line every 10 s otherwise, on stderr)",
    )
    j = p.add_argument_group("batch jobs from a login node (pip install 'dtrace[jobqueue]')")
    j.add_argument(
        "--cluster",
        choices=["slurm", "pbs"],
        default=None,
        help="submit Dask workers as batch jobs to this scheduler (dask-jobqueue)",
    )
    j.add_argument("--jobs", type=whole(1, 100_000), default=None, help="batch jobs to submit (default: 1)")
    for flag, key, kind, what in _JOB_FLAGS:
        j.add_argument(flag, dest=f"job_{key}", type=kind, default=None, metavar=key.upper(), help=what)
    add_analysis_options(p)
    add_output_format(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_out_dir(args.out, args.cache)
    found = _find_inputs(args)  # the one search of the inputs: the checks below and the run share it
    quick = uptodate.answer(args, found)  # results up to date: the stored summary, without pandas
    if quick is not None:
        body, manifest = quick
        uptodate.print_answer(args, body, manifest)
        say(f"results: {args.out}", args.fmt)
        return 0 if manifest.n_parts else 2
    _prestart_workers(args, found)
    res = _analyze(args, found)
    empty = _empty_step(res, args.step)
    if empty == "all":
        raise UsageError(
            f"--step {args.step} selects no GPU event in any input (steps are the traces' "
            f"ProfilerStep#N, GPU step annotation, NVTX or JAX step numbers; run without --step and "
            f"see dtrace show OUT steps); results written to {args.out}"
        )
    body = _print_summary(args, res)
    if not res.errors and res.path is not None:
        uptodate.remember(args, res.record, body)
    if empty:
        say(f"note: --step {args.step} selects no GPU event on rank(s) {empty}", args.fmt)
    if res.path is None:  # nothing analysable: nothing was written
        say(f"no results written to {args.out}: no input could be analysed", args.fmt)
        return 2
    say(f"results: {args.out}", args.fmt)
    return 1 if res.errors else 0


def _find_inputs(args: argparse.Namespace) -> InputSet | None:
    """The inputs, found once for the whole command; None for results on an object store (the
    run finds them for its staging folder) or when the search fails (the run reports that, after
    checking the settings, as :func:`dtrace.analyze` orders its errors)."""
    from ..ingest.inputs import find_inputs
    from ..ingest.remote import is_url

    if is_url(args.out):
        return None
    try:
        return find_inputs(args.inputs, args.out)
    except (DtraceError, OSError):
        return None


def _prestart_workers(args: argparse.Namespace, found: InputSet | None) -> None:
    """Launch the process server of a local cluster's workers before importing pandas, when the
    inputs (local files, their content sizes guessed from their file sizes) call for a local
    cluster: the workers' imports then overlap this process's
    (:func:`dtrace.execution.engine.prestart_workers`). Anything unexpected here is left to the
    run itself to report."""
    from ..execution.engine import ClusterSpec, estimated_work, local_workers, prestart_workers
    from ..ingest.remote import is_url
    from ..partitions.layout import guessed_size, ingest_batches

    if found is None:
        return
    try:
        spec = ClusterSpec(
            scheduler="sync" if args.sync else args.scheduler,
            scheduler_file=args.scheduler_file,
            workers=args.workers,
            cluster=args.cluster,
        )
        inputs = [args.inputs] if isinstance(args.inputs, str) else list(args.inputs)
        if any(is_url(i) for i in inputs) or spec.scheduler_file or spec.cluster or spec.scheduler == "sync":
            return
        files = list(found.files)
        sizes = [guessed_size(f) for f in files]
        prestart_workers(spec, estimated_work(sizes), len(ingest_batches(files, sizes, local_workers(spec))))
    except (DtraceError, OSError):
        return


def _analyze(args: argparse.Namespace, found: InputSet | None) -> Any:
    """Run the analysis the flags ask for (:func:`dtrace.analyze`) on the inputs found."""
    from .. import api

    scheduler = "sync" if args.sync else args.scheduler
    job_options = {
        key: getattr(args, f"job_{key}") for _, key, _, _ in _JOB_FLAGS if getattr(args, f"job_{key}") is not None
    }
    return api.analyze(
        found if found is not None else args.inputs,
        args.out,
        cache=args.cache,
        scheduler=scheduler,
        scheduler_file=args.scheduler_file,
        workers=args.workers,
        cluster=args.cluster,
        jobs=args.jobs,
        cluster_options=job_options or None,
        progress=not args.no_progress,
        format=args.input_format,
        reuse_cache=not args.no_cache,
        reuse_results=not (args.no_cache or args.recompute),
        max_input_size=args.max_input_size,
        **({"partition_events": args.partition_size} if args.partition_size else {}),
        **analysis_kwargs(args),
    )


def _print_summary(args: argparse.Namespace, res: Any) -> str:
    """Print the run's summary in the chosen format; return what follows its first line (what an
    up-to-date run prints again)."""
    from ..render.summary import header, summary, summary_csv, summary_document

    if is_machine(args.fmt):  # one document on stdout; the prose on stderr
        print(printable(header(res), keep_newlines=True), end="", file=sys.stderr)
        for e in res.errors:
            print(f"error: {printable(e)}", file=sys.stderr)
        body = json_text(summary_document(res)) + "\n" if args.fmt == "json" else summary_csv(res)
        print(body, end="")
        return body
    text = summary(res, args.fmt)
    print(text)
    return text[len(header(res)) :]


def _empty_step(res: Results, step: int | None) -> str:
    """With ``--step``: ``"all"`` when no part has a GPU event in it, else the ranks without any
    (as ranges), else ``""``."""
    if step is None or "breakdown" not in res.table_names:
        return ""
    bd = res.table("breakdown")
    if not len(bd):
        return ""
    col = "gpu_events" if "gpu_events" in bd.columns else "total_ns"
    none = bd.loc[bd[col].fillna(0).to_numpy() == 0, "rank"]
    if len(none) == len(bd):
        return "all"
    return id_list(none) if len(none) else ""
