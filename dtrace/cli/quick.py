"""Quick terminal views: ``dtrace kernels X`` and ``dtrace gaps X``.

``X`` is a single trace file (analysed in-process, nothing written) or a results directory
written by ``dtrace analyze``. The views themselves (:mod:`dtrace.render.views`) are the GPU
Kernel Analyzer's and the GPU Performance Analyser's reports for every rank at once.
``--output FILE`` writes the detail with full names (``.csv``/``.json``: the full table; any
other name: a text report).

This module parses the command line, loads the input and checks the selection; only
:func:`run_kernels` and :func:`run_gaps` print or write.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..options import Options
from ..render.escape import printable, to_csv
from .common import (
    ID,
    RANK,
    add_analysis_options,
    add_output_format,
    add_rows,
    analysis_kwargs,
    id_list,
    is_machine,
    print_json,
    rows_to_show,
    say,
)

KERNEL_SORT_ALIASES = {"duration": "mean", "percentage": "count", "duration-percentage": "share"}
GAP_SORT_ALIASES = {"avg": "mean", "avggap": "mean", "maxgap": "max", "stdev": "std"}

if TYPE_CHECKING:
    import pandas as pd

    from ..results import Results


def _choice(value: str, valid: dict[str, str], aliases: dict[str, str], flag: str) -> str:
    key = aliases.get(value, value)
    if key not in valid:
        raise UsageError(f"{flag} {value!r} is not valid; choose from {', '.join([*valid, *aliases])}")
    return key


def add_parser(sub: argparse._SubParsersAction) -> None:
    k = sub.add_parser(
        "kernels",
        help="top kernels, classes, NCCL and memory operations of a trace or results",
        description="Kernel statistics of one trace file (analysed in-process) or of a results "
        "directory: top kernels, kernel classes with per-iteration figures, "
        "per-collective NCCL time and memory operations.",
    )
    _common(k)
    k.add_argument(
        "--sort",
        "-s",
        default="total",
        help="count, mean, total or share (aliases: duration=mean, percentage=count, "
        "duration-percentage=share); default total",
    )
    k.set_defaults(func=run_kernels)
    g = sub.add_parser(
        "gaps",
        help="idle gaps between GPU events of a trace or results",
        description="Idle gaps per stream of one trace file or a results directory: counts, idle "
        "time and causes, a histogram (--hist-min/--hist-max in µs) and the kernel "
        "pairs around the gaps.",
    )
    _common(g, top_alias="--gap-top", output_alias="--gap-output")
    g.add_argument(
        "--gap-sort",
        default="mean",
        help="sort kernel pairs by count, mean, max or std (aliases avg, avggap, maxgap, stdev); default mean",
    )
    g.add_argument("--stream", type=ID, default=None, help="only this stream")
    g.set_defaults(func=run_gaps)


def _common(p: argparse.ArgumentParser, top_alias: str | None = None, output_alias: str | None = None) -> None:
    p.add_argument("input", metavar="X", help="a trace file, or a results directory of dtrace analyze")
    add_rows(p, *(["-t"] + ([top_alias] if top_alias else [])))
    p.add_argument(
        *(["--output", "-o"] + ([output_alias] if output_alias else [])),
        dest="output",
        default=None,
        metavar="FILE",
        help="write the detail with full names (.csv, .json or text)",
    )
    p.add_argument("--rank", type=RANK, default=None, help="only this rank (default: all ranks)")
    p.add_argument("--pstep", dest="step", type=ID, default=None, help=argparse.SUPPRESS)
    add_analysis_options(p)
    add_output_format(p)


# -- loading ---------------------------------------------------------------------------------


def load_input(path: str, kwargs: dict[str, Any], input_format: str | None = None) -> Results:
    """Results of a results directory, or of one trace analysed in-process (nothing written).

    For a results directory, analysis options that differ from their defaults must match the
    ones it was analysed with (its tables cannot be recomputed here).
    """
    from ..results import MANIFEST, load

    if os.path.isdir(path) and os.path.lexists(os.path.join(path, MANIFEST)):
        res = load(path)
        used = res.record.options
        default = Options()
        for key, val in kwargs.items():
            if val == getattr(default, key, None) or key not in used:
                continue
            if used[key] != val:
                raise UsageError(
                    f"{path} was analysed with {key}={used[key]!r}, not {val!r}; re-run dtrace analyze "
                    f"with that option, or give the trace file"
                )
        return res
    from .. import api

    return api.analyze([path], None, scheduler="sync", format=input_format, **kwargs)


def _require(res: Results, where: str, tables: tuple[str, ...]) -> None:
    missing = [t for t in tables if t not in res.table_names]
    if missing:
        raise UsageError(f"{where} has no {', '.join(missing)} table(s); re-run dtrace analyze with this version")


def check_selection(res: Results, table: str, args: argparse.Namespace, kwargs: dict[str, Any]) -> None:
    """An empty selection is an error that says what there is: a step, rank or stream the input lacks.

    Raises
    ------
    UsageError
        ``--step N`` selects no GPU event (the message lists the trace's steps), or ``--rank``
        / ``--stream`` names one the input does not have.
    """
    from ..render.views import of_rank

    df = res.table(table)
    step = kwargs.get("step")
    if step is not None and not len(df):
        raise UsageError(_no_step(args.input, step, args.input_format, kwargs))
    if args.rank is not None:
        ranks = set(df["rank"].tolist())
        if "breakdown" in res.table_names:
            ranks |= set(res.table("breakdown")["rank"].tolist())
        if args.rank not in ranks:
            raise UsageError(f"no rank {args.rank} in {args.input}; ranks: {id_list(ranks)}")
    stream = getattr(args, "stream", None)
    if stream is not None:
        streams = of_rank(df, args.rank)["stream"]
        if not (streams.to_numpy() == stream).any():
            where = f"rank {args.rank} of {args.input}" if args.rank is not None else args.input
            raise UsageError(f"no stream {stream} with gaps in {where}; streams: {id_list(streams)}")


def _no_step(path: str, step: int, input_format: str | None, kwargs: dict[str, Any]) -> str:
    """Why ``--step`` selected nothing, naming the steps the input has (for a trace file)."""
    if os.path.isdir(path):
        return f"no GPU events in step {step} in {path} (it was analysed with --step {step})"
    import numpy as np
    import pandas as pd

    from .. import api

    whole = api.analyze(
        [path], None, scheduler="sync", format=input_format, **{k: v for k, v in kwargs.items() if k != "step"}
    )
    steps = whole.table("steps")["step"] if "steps" in whole.table_names else pd.Series([], dtype=np.int64)
    if not len(steps):
        return (
            f"--step {step}: {path} has no steps (no ProfilerStep#N, GPU step annotation, NVTX or JAX step "
            "marker); leave out --step"
        )
    return f"--step {step}: no such step in {path}; its steps: {id_list(steps)}"


def _write(path: str, df: pd.DataFrame, text: str) -> None:
    from .common import write_text

    low = path.lower()
    if low.endswith(".csv"):
        write_text(path, to_csv(df))
    elif low.endswith(".json"):
        write_text(path, df.to_json(orient="records", indent=1, force_ascii=False))
    else:  # a text report, read with cat or less: the terminal's escaping
        write_text(path, text, terminal=True)


def run_kernels(args: argparse.Namespace) -> int:
    from ..render.text import render
    from ..render.views import (
        KERNEL_SORTS,
        kernel_report,
        kernel_view,
        kernels_detail,
        kernels_document,
        kernels_text,
        of_rank,
        options_note,
    )

    sort = _choice(args.sort, KERNEL_SORTS, KERNEL_SORT_ALIASES, "--sort")
    kwargs = analysis_kwargs(args)
    res = load_input(args.input, kwargs, args.input_format)
    _require(res, args.input, ("kernels", "classes"))
    for e in res.errors:
        print(f"error: {printable(e)}", file=sys.stderr)
    if not len(res.table("kernels")) and res.errors:
        return 2
    check_selection(res, "kernels", args, kwargs)
    if is_machine(args.fmt):  # exactly one document on stdout
        note = options_note(res)
        if note:
            say(note, args.fmt)
        rep = kernel_report(res, sort=sort, rank=args.rank)
        if args.fmt == "json":
            print_json(kernels_document(rep, rows_to_show(args)))
        else:
            print(render(rep.kernels.drop(columns="#"), "csv", max_rows=rows_to_show(args)), end="")
    else:
        print(
            kernels_text(res, sort=sort, top=rows_to_show(args), rank=args.rank, fmt=args.fmt, wide=args.wide), end=""
        )
    if args.output:
        view = kernel_view(of_rank(res.table("kernels"), args.rank), sort)
        _write(args.output, view.drop(columns="#"), kernels_detail(view, of_rank(res.table("kernels"), args.rank)))
        say(f"full kernel names written to {args.output}", args.fmt)
    return 1 if res.errors else 0


def run_gaps(args: argparse.Namespace) -> int:
    from ..render.text import render
    from ..render.views import GAP_SORTS, gap_report, gaps_detail, gaps_document, gaps_text, of_rank, options_note

    sort = _choice(args.gap_sort, GAP_SORTS, GAP_SORT_ALIASES, "--gap-sort")
    kwargs = analysis_kwargs(args)
    res = load_input(args.input, kwargs, args.input_format)
    _require(res, args.input, ("gaps", "gap_histogram", "transitions"))
    for e in res.errors:
        print(f"error: {printable(e)}", file=sys.stderr)
    if not len(res.table("gaps")) and res.errors:
        return 2
    check_selection(res, "gaps", args, kwargs)
    rep = gap_report(res, sort=sort, rank=args.rank, stream=args.stream)
    if is_machine(args.fmt):  # exactly one document on stdout
        note = options_note(res)
        if note:
            say(note, args.fmt)
        if args.fmt == "json":
            print_json(gaps_document(rep, rows_to_show(args)))
        else:
            tv = rep.transitions.drop(columns=["#", "transition"])
            print(render(tv, "csv", max_rows=rows_to_show(args)), end="")
    else:
        print(
            gaps_text(
                res,
                sort=sort,
                top=rows_to_show(args),
                rank=args.rank,
                stream=args.stream,
                fmt=args.fmt,
                wide=args.wide,
            ),
            end="",
        )
    if args.output:
        tv = rep.transitions
        trans = of_rank(res.table("transitions"), args.rank)
        if args.stream is not None:
            trans = trans.loc[trans["stream"].to_numpy() == args.stream]
        _write(args.output, tv.drop(columns=["#", "transition"]), gaps_detail(rep.streams, tv, trans))
        say(f"full kernel names written to {args.output}", args.fmt)
    return 1 if res.errors else 0
