"""``dtrace nsys-stats CONFIG.json | CSV... | REPORT``: the GPU Performance Analyser report.

Three ways in, one report each (see :mod:`dtrace.nsysstats`):

- a JSON config in that tool's format (``inputs``, ``analysis_args``, ``kernel_to_class_map``);
- ``nsys stats`` CSVs (``*_cuda_gpu_kern_sum.csv``, optionally ``*_cuda_gpu_mem_time_sum.csv``
  and ``*_nvtx_gpu_proj_trace.csv``), grouped into reports by their common prefix;
- Nsight Systems reports (``.sqlite``; ``.nsys-rep`` through ``nsys export``).

The report is printed; with ``-o OUT`` its figures are also saved as results tables
(``stats_summary``, ``stats_classes``, ``stats_nccl``, ``stats_memops``; ``dtrace show OUT``)
with the text in ``OUT/report.txt``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from ..errors import DtraceError, UsageError
from ..render.escape import printable
from .common import INT32_MAX, whole

if TYPE_CHECKING:
    import pandas as pd

    from ..nsysstats.config import StatsConfig


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "nsys-stats",
        help="GPU Performance Analyser report from nsys stats CSVs or a report",
        description="Per-iteration kernel, class, NCCL, memory-operation and NVTX figures from "
        "a GPU Performance Analyser JSON config, nsys stats CSVs "
        "(*_cuda_gpu_kern_sum.csv, *_cuda_gpu_mem_time_sum.csv, "
        "*_nvtx_gpu_proj_trace.csv) or Nsight Systems reports (.sqlite, .nsys-rep).",
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="CONFIG.json, CSV files, or .sqlite/.nsys-rep reports")
    p.add_argument(
        "--iters", type=whole(1, INT32_MAX), default=None, help="iterations the inputs hold (num_of_iters; default 1)"
    )
    p.add_argument(
        "--gpus",
        type=whole(1, INT32_MAX),
        default=None,
        help="GPUs the inputs hold (num_of_gpus; default 1 for CSVs, the report's devices otherwise)",
    )
    p.add_argument("--nvtx-tag", default=None, help="NVTX range name of one iteration (nvtx_tag_of_iter)")
    p.add_argument(
        "--classmap",
        default=None,
        metavar="FILE",
        help="class map (kernel_to_class_map or a config holding one, or a regex map {engine: {model: ...}}); "
        "overrides the config's",
    )
    p.add_argument("--engine", dest="classmap_engine", default=None, help="engine of a regex class map")
    p.add_argument("--model", dest="classmap_model", default=None, help="model of a regex class map")
    p.add_argument("--title", default=None, help="title of a report given by files (default: the file prefix)")
    p.add_argument(
        "-o",
        "--output",
        "--out",
        dest="out",
        default=None,
        metavar="OUT",
        help="also save the figures as results tables and report.txt here",
    )
    p.set_defaults(func=run)


def _inputs_from_files(paths: list[str], args: argparse.Namespace) -> StatsConfig:
    from ..execution.summaries import summary_report
    from ..ingest.inputs import expand_inputs
    from ..nsysstats.config import StatsConfig, StatsInput
    from ..readers._stats_csv import KERN_SUM, MEM_SUM, NVTX_PROJ, report_prefix

    files = expand_inputs(paths)
    groups: dict[str, dict[str, str]] = {}
    inputs = []
    common = dict(iters=args.iters or 1, gpus=args.gpus, nvtx_tag=args.nvtx_tag)
    for f in files:
        report = summary_report(f)
        if report is not None:
            groups.setdefault(report_prefix(f), {})[report] = f
        elif f.lower().endswith((".sqlite", ".nsys-rep", ".qdrep")):
            inputs.append(StatsInput(title=args.title or os.path.basename(f), format="nsys-rep", report=f, **common))
        else:
            raise UsageError(
                f"{f}: not an nsys stats summary CSV, .sqlite or .nsys-rep report "
                "(or pass a GPU Performance Analyser JSON config alone)"
            )
    for prefix, g in sorted(groups.items()):
        if KERN_SUM not in g:
            raise UsageError(
                f"report {prefix}: a cuda_gpu_kern_sum CSV is required (given: "
                f"{', '.join(os.path.basename(v) for v in g.values())})"
            )
        inputs.append(
            StatsInput(
                title=args.title or os.path.basename(prefix),
                format="csv",
                kernel_sum=g[KERN_SUM],
                mem_time_sum=g.get(MEM_SUM),
                nvtx_proj_trace=g.get(NVTX_PROJ),
                **common,
            )
        )
    return StatsConfig(inputs=inputs, source="<command line>")


def run(args: argparse.Namespace) -> int:
    from ..nsysstats.inputs import classifier_of
    from ..nsysstats.report import render_report

    config = _config(args)
    classifier = classifier_of(
        config, os.path.abspath(args.classmap) if args.classmap else None, args.classmap_engine, args.classmap_model
    )
    texts, tables = [], []
    entries: list[dict[str, Any]] = []  # one per input, for the saved results' manifest
    for inp in config.inputs:
        entry, rep = _report_of(inp, classifier)
        entries.append(entry)
        if rep is None:
            continue
        text = render_report(rep)
        print(printable(text, keep_newlines=True))
        texts.append(text)
        tables.append(rep.tables())
    if args.out and tables:
        _save(args.out, tables, entries, config, "\n".join(texts))
        print(f"results: {printable(args.out)}")
    if not tables:
        return 2
    return 1 if any(e["status"] == "error" for e in entries) else 0


def _config(args: argparse.Namespace) -> StatsConfig:
    """The inputs to report on: a config file's (command-line values override its own), or the
    files given."""
    from ..nsysstats.config import StatsConfig, is_config, load_config

    for name in ("iters", "gpus"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise UsageError(f"--{name} must be >= 1")
    if not (len(args.inputs) == 1 and is_config(args.inputs[0])):
        return _inputs_from_files(args.inputs, args)
    config = load_config(args.inputs[0])
    if args.iters or args.gpus or args.nvtx_tag:  # command-line values override the config's
        from dataclasses import replace

        config = StatsConfig(
            inputs=[
                replace(i, iters=args.iters or i.iters, gpus=args.gpus or i.gpus, nvtx_tag=args.nvtx_tag or i.nvtx_tag)
                for i in config.inputs
            ],
            kernel_to_class_map=config.kernel_to_class_map,
            source=config.source,
        )
    return config


def _report_of(inp: Any, classifier: Any) -> tuple[dict[str, Any], Any]:
    """The manifest entry of one input and its report (None, its error printed, when it failed)."""
    from ..nsysstats.inputs import stats_of
    from ..nsysstats.report import build_report

    paths = [p for p in (inp.kernel_sum, inp.mem_time_sum, inp.nvtx_proj_trace, inp.report) if p]
    try:
        st = stats_of(inp)
        rep = build_report(
            st.kernels,
            st.memops,
            st.nvtx,
            title=inp.title,
            iters=inp.iters,
            gpus=inp.gpus if inp.gpus is not None else st.parts,
            nvtx_tag=inp.nvtx_tag,
            classifier=classifier,
        )
    except DtraceError as exc:
        print(f"dtrace nsys-stats: error: {printable(exc)}", file=sys.stderr)
        return {"title": inp.title, "paths": paths, "status": "error", "error": str(exc)}, None
    return {"title": inp.title, "paths": paths, "status": "ok", "error": None}, rep


def _save(out: str, tables: list[dict[str, pd.DataFrame]], entries: list[dict], config: object, text: str) -> None:
    import pandas as pd

    from .._version import __version__
    from ..results import write_results
    from .common import write_text

    merged = {name: pd.concat([t[name] for t in tables], ignore_index=True) for name in tables[0]}
    manifest = {
        "dtrace_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": "nsys-stats",
        "config": getattr(config, "source", ""),
        "inputs": entries,
        "n_inputs": len(entries),
        "n_failed": sum(1 for e in entries if e["status"] == "error"),
    }
    write_results(out, merged, manifest)
    write_text(os.path.join(out, "report.txt"), text)
