"""Host-side views: ``dtrace launches X`` and ``dtrace memory X``.

``X`` is a single trace file (analysed in-process, nothing written) or a results directory
written by ``dtrace analyze``. The views (:mod:`dtrace.render.host`) show the launch statistics
and launch queues per stream and the worst launches, or the device memory peaks and one rank's
memory over time. This module parses the command line and loads the input; only
:func:`run_launches` and :func:`run_memory` print.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import UsageError
from ..render.escape import printable
from .common import analysis_kwargs, id_list, is_machine, print_json, rows_to_show
from .quick import _common, _require, load_input


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "launches",
        help="launch statistics, launch queues and the worst launches of a trace or results",
        description="Per stream of one trace file (analysed in-process) or of a results directory: "
        "the launch call's time, the GPU time and the launch delay of every GPU event linked to its "
        "launch call, outliers and launch-bound (short) kernels; the launch queue (length, time "
        "blocked at --queue-limit, time starved); and the worst launches.",
    )
    _common(p)
    p.add_argument("--stream", type=int, default=None, help="only this stream")
    p.set_defaults(func=run_launches)
    m = sub.add_parser(
        "memory",
        help="device memory peaks and memory over time of a trace or results",
        description="From the profiler's memory events (profile_memory=True): the allocated-memory "
        "peak of every GPU, when and during which op it happened, and the allocated and reserved "
        "bytes over time of one rank (--rank, else the one with the largest peak).",
    )
    _common(m)
    m.set_defaults(func=run_memory)


def run_launches(args: argparse.Namespace) -> int:
    from ..render.host import launch_view, launches_document, launches_text
    from ..render.text import render

    res = load_input(args.input, analysis_kwargs(args), args.input_format)
    _require(res, args.input, ("launch_stats", "queues", "launches"))
    for e in res.errors:
        print(f"error: {printable(e)}", file=sys.stderr)
    stats = res.table("launch_stats")
    if not len(stats) and res.errors:
        return 2
    _check(stats, args)
    if is_machine(args.fmt):
        view = launch_view(res, rank=args.rank, stream=args.stream)
        if args.fmt == "json":
            print_json(launches_document(view, rows_to_show(args)))
        else:
            print(render(view.stats, "csv", max_rows=rows_to_show(args)), end="")
    else:
        text = launches_text(res, top=rows_to_show(args), rank=args.rank, stream=args.stream, fmt=args.fmt)
        print(text, end="")
    return 1 if res.errors else 0


def run_memory(args: argparse.Namespace) -> int:
    from ..render.host import memory_document, memory_text, memory_view
    from ..render.text import render

    res = load_input(args.input, analysis_kwargs(args), args.input_format)
    _require(res, args.input, ("memory", "memory_timeline"))
    for e in res.errors:
        print(f"error: {printable(e)}", file=sys.stderr)
    if not len(res.table("memory")) and res.errors:
        return 2
    _check(res.table("memory"), args)
    if is_machine(args.fmt):
        view = memory_view(res, rank=args.rank)
        if args.fmt == "json":
            print_json(memory_document(view, rows_to_show(args)))
        else:
            print(render(view.peaks, "csv", max_rows=rows_to_show(args)), end="")
    else:
        print(memory_text(res, top=rows_to_show(args), rank=args.rank, fmt=args.fmt), end="")
    return 1 if res.errors else 0


def _check(df, args: argparse.Namespace) -> None:  # noqa: ANN001 - a results table
    """``--rank`` / ``--stream`` must name one the table has (when it has rows)."""
    if not len(df):
        return
    if args.rank is not None and not (df["rank"].to_numpy() == args.rank).any():
        raise UsageError(f"no rank {args.rank} in {args.input}; ranks: {id_list(set(df['rank'].tolist()))}")
    stream = getattr(args, "stream", None)
    if stream is not None:
        rows = df if args.rank is None else df.loc[df["rank"].to_numpy() == args.rank]
        if not (rows["stream"].to_numpy() == stream).any():
            raise UsageError(
                f"no stream {stream} with launches in {args.input}; streams: {id_list(set(rows['stream'].tolist()))}"
            )
