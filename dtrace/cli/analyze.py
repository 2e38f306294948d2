"""``dtrace analyze INPUT... -o OUT``: the main job."""
from __future__ import annotations

import argparse
import sys

from .. import api
from ..render.summary import summary
from .common import add_analysis_options, add_output_format, analysis_kwargs


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("analyze", help="analyse the traces of every rank and write results",
                       description="Analyse trace files (files, directories, globs) of all ranks; write "
                                   "Parquet tables and manifest.json to OUT and print a summary.")
    p.add_argument("inputs", nargs="+", metavar="INPUT")
    p.add_argument("-o", "--out", required=True, help="results directory")
    p.add_argument("--cache", default=None, help="ingest cache directory (default: OUT/cache)")
    p.add_argument("--no-cache", action="store_true", help="re-parse every input even if cached")
    e = p.add_argument_group("execution")
    e.add_argument("--workers", type=int, default=None, help="local worker processes (default: one per core)")
    e.add_argument("--scheduler", default=None, help="address of a running Dask scheduler, or 'sync'")
    e.add_argument("--scheduler-file", default=None, help="Dask scheduler file of a running cluster")
    e.add_argument("--sync", action="store_true", help="run in-process without a cluster (small inputs, debugging)")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_analysis_options(p)
    add_output_format(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    scheduler = "sync" if args.sync else args.scheduler
    res = api.analyze(args.inputs, args.out, cache=args.cache, scheduler=scheduler,
                      scheduler_file=args.scheduler_file, workers=args.workers,
                      progress=not args.no_progress and sys.stderr.isatty(), format=args.input_format,
                      reuse_cache=not args.no_cache, **analysis_kwargs(args))
    print(summary(res, args.fmt))
    print(f"results: {args.out}")
    n_ok = res.manifest.get("n_parts", 0)
    if n_ok == 0:
        return 2
    return 1 if res.errors else 0
