"""``dtrace report``, ``dtrace compare`` and ``dtrace diff``: reports of one run or several.

The renderers return strings or DataFrames; this module is the only place that writes them
(atomically: a temporary file in the target directory, then a rename).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from ..core.constants import DIFF_LEVELS, DIFF_PER
from ..errors import UsageError
from ..render.escape import printable, to_csv
from .common import (
    MICROS,
    add_hist_spacing,
    add_output_format,
    add_rows,
    is_machine,
    number,
    option_number,
    rows_to_show,
    say,
    whole,
    write_parquet,
    write_text,
)

if TYPE_CHECKING:
    from ..results import Results


def add_parser(sub: argparse._SubParsersAction) -> None:
    _add_report(sub)
    _add_compare(sub)
    _add_diff(sub)


def _add_report(sub: argparse._SubParsersAction) -> None:
    """``dtrace report``: the HTML report of one results directory."""
    p = sub.add_parser(
        "report",
        help="write the HTML report of a results directory",
        description="Write one self-contained HTML file (no network needed to view it) with "
        "the job summary, per-GPU breakdown, classes, rank × step heatmaps, "
        "stragglers, top kernels, gaps, collective skew and per-op GPU time.",
    )
    p.add_argument("out", metavar="OUT", help="results directory of dtrace analyze")
    p.add_argument("-o", "--output", required=True, metavar="FILE.html", help="the HTML file to write")
    p.add_argument("--title", default=None, help="page title")
    p.add_argument(
        "--max-bars",
        type=whole(1, 100_000),
        default=64,
        metavar="N",
        help="most GPUs drawn in one bar chart before switching to extremes + distribution (default 64)",
    )
    p.add_argument(
        "--timeline",
        default=None,
        metavar="FILE.json.gz",
        help="link this slow-step timeline in the what-if section (exported first, as by "
        "dtrace timeline, when the file does not exist)",
    )
    h = p.add_argument_group(
        "gap histograms (given: the report's histograms are computed again from OUT's cached events)"
    )
    h.add_argument("--hist-min", dest="hist_min_ns", type=MICROS, default=None, metavar="US", help="lower bound in µs")
    h.add_argument("--hist-max", dest="hist_max_ns", type=MICROS, default=None, metavar="US", help="upper bound in µs")
    h.add_argument("--hist-bins", type=option_number("hist_bins"), default=None, help="number of bins")
    add_hist_spacing(h)
    p.add_argument("--cache", default=None, metavar="DIR", help="the ingest cache of the analysis (default: OUT/cache)")
    p.set_defaults(func=run_report)


def _add_compare(sub: argparse._SubParsersAction) -> None:
    """``dtrace compare``: several runs side by side (HTML)."""
    c = sub.add_parser(
        "compare",
        help="compare several runs side by side (HTML)",
        description="Runs side by side with the same kernel categories, GPU vs non-GPU time "
        "when each run's unprofiled wall time is given, and the kernel → category "
        "map as CSV.",
    )
    c.add_argument("runs", nargs="+", metavar="OUT", help="results directories (the first is the baseline)")
    c.add_argument("-o", "--output", required=True, metavar="FILE.html", help="the HTML file to write")
    c.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="LABEL",
        help="label of each run, in order (default: the directory names)",
    )
    c.add_argument(
        "--wall-time",
        action="append",
        default=[],
        metavar="RUN=SECONDS",
        help="elapsed time of a run measured without the profiler (RUN: its label, path or "
        "1-based position); repeat per run",
    )
    c.add_argument(
        "--category-csv",
        default=None,
        metavar="FILE",
        help="also write the kernel → category map (run, category, name, count, time) as CSV",
    )
    c.add_argument(
        "--classmap",
        default=None,
        metavar="FILE",
        help="classify every run's kernels with this class map (substring or "
        "{engine: {model: {regex: category}}} JSON) instead of each run's own classes",
    )
    c.add_argument("--engine", default=None, help="engine of an ordered-regex class map")
    c.add_argument("--model", default=None, help="model of an ordered-regex class map")
    c.add_argument("--title", default=None, help="page title")
    c.set_defaults(func=run_compare)


def _add_diff(sub: argparse._SubParsersAction) -> None:
    """``dtrace diff``: two runs' differences per class, kernel and op."""
    d = sub.add_parser(
        "diff",
        help="differences between two runs per class, kernel and op",
        description="Count and time of run A and run B and their deltas (B − A) per breakdown "
        "component, kernel class, kernel and host op, sorted by impact.",
    )
    d.add_argument("a", metavar="OUT_A", help="results directory of the baseline run")
    d.add_argument("b", metavar="OUT_B", help="results directory of the run compared with it")
    d.add_argument(
        "--level",
        action="append",
        choices=DIFF_LEVELS,
        default=None,
        help="compare only this level (repeatable; default: all)",
    )
    d.add_argument(
        "--per",
        choices=DIFF_PER,
        default="gpu",
        help="gpu: values per (rank, device) of each run (default); job: job totals",
    )
    add_rows(d)
    d.add_argument(
        "-o", "--output", default=None, metavar="FILE", help="also write every row to FILE.parquet or FILE.csv"
    )
    add_output_format(d)
    d.set_defaults(func=run_diff)


HIST_OPTIONS = ("hist_min_ns", "hist_max_ns", "hist_bins", "hist_log")


def run_report(args: argparse.Namespace) -> int:
    from ..render.html import report
    from ..results import Results, load

    res = load(args.out)
    rebin = {k: getattr(args, k) for k in HIST_OPTIONS if getattr(args, k) is not None}
    if rebin:  # the histograms with other bins, from the cached events
        from ..explore.events import recompute

        names = [t for t in ("gap_histogram", "device_gap_histogram") if t in res.table_names]
        res = Results(recompute(args.out, names, cache=args.cache, **rebin), res.manifest, res.path)
    href = None
    if args.timeline:
        if not os.path.exists(args.timeline):
            from .timeline import run_timeline

            run_timeline(
                argparse.Namespace(
                    out=args.out,
                    output=args.timeline,
                    ranks=None,
                    step=None,
                    window=None,
                    host=False,
                    cache=None,
                    critical_path=True,
                )
            )
        href = os.path.relpath(os.path.abspath(args.timeline), os.path.dirname(os.path.abspath(args.output)))
    write_text(args.output, report(res, title=args.title, max_bars=args.max_bars, timeline=href))
    print(f"report: {printable(args.output)}")
    return 0


def parse_wall_times(specs: list[str], labels: list[str], paths: list[str]) -> dict[str, float]:
    """``RUN=SECONDS`` items to ``{label: seconds}``; RUN is a label, a path or a 1-based position.

    Examples
    --------
    >>> parse_wall_times(["base=306", "2=102.5"], ["base", "new"], ["r/base", "r/new"])
    {'base': 306.0, 'new': 102.5}
    """
    out: dict[str, float] = {}
    for spec in specs:
        key, sep, val = spec.rpartition("=")
        if not sep or not key:
            raise UsageError(f"--wall-time {spec!r}: expected RUN=SECONDS")
        try:
            seconds = number(val, 0, 1e9, above=True)
        except UsageError as exc:
            raise UsageError(f"--wall-time {spec!r}: {exc} seconds") from None
        if key in labels:
            label = key
        elif os.path.normpath(key) in [os.path.normpath(p) for p in paths]:
            label = labels[[os.path.normpath(p) for p in paths].index(os.path.normpath(key))]
        elif key.isdigit() and 1 <= int(key) <= len(labels):
            label = labels[int(key) - 1]
        else:
            raise UsageError(f"--wall-time {spec!r}: no run {key!r}; runs: {', '.join(labels)}")
        out[label] = seconds
    return out


def run_compare(args: argparse.Namespace) -> int:
    from ..knowledge.classify import load_classmap
    from ..render.compare import category_csv, compare, run_labels
    from ..results import load

    if args.label and len(args.label) != len(args.runs):
        raise UsageError(f"{len(args.label)} --label given for {len(args.runs)} runs; give one per run or none")
    labels = list(args.label) if args.label else run_labels(args.runs)
    if len(set(labels)) != len(labels):
        raise UsageError(f"run labels must be unique: {', '.join(labels)}")
    walls = parse_wall_times(args.wall_time, labels, args.runs)
    runs: list[tuple[str, Results]] = [(lab, load(path)) for lab, path in zip(labels, args.runs)]
    classifier = load_classmap(args.classmap, args.engine, args.model) if args.classmap else None
    write_text(args.output, compare(runs, wall_time_s=walls, classifier=classifier, title=args.title))
    print(f"comparison: {printable(args.output)}")
    if args.category_csv:
        write_text(args.category_csv, category_csv(runs, classifier))
        print(f"kernel → category map: {printable(args.category_csv)}")
    return 0


def run_diff(args: argparse.Namespace) -> int:
    from ..explore.diff import diff, missing_levels
    from ..render.text import render
    from ..results import load

    a, b = load(args.a), load(args.b)
    levels = args.level or list(DIFF_LEVELS)
    table = diff(a, b, levels=levels, per=args.per)
    if args.output:
        ext = os.path.splitext(args.output)[1].lower()
        if ext not in (".parquet", ".csv"):
            raise UsageError(f"-o {args.output}: unknown output type {ext or '(none)'}; valid: .parquet, .csv")
        if ext == ".csv":
            write_text(args.output, to_csv(table))
        else:
            write_parquet(table, args.output)
    if is_machine(args.fmt):  # exactly one document on stdout
        sys.stdout.write(render(table, args.fmt))
    else:
        per = "per GPU" if args.per == "gpu" else "job totals"
        for lv in levels:
            part = table.loc[table["level"] == lv].drop(columns="level").rename(columns={"key": lv})
            if not len(part):
                continue
            if lv == "breakdown":
                part = part.drop(columns=["count_a", "count_b", "count_delta"])
            sys.stdout.write(
                render(
                    part,
                    args.fmt,
                    title=f"{lv}: B − A ({per}; A = {args.a}, B = {args.b})",
                    max_rows=rows_to_show(args),
                    time_unit="auto",
                    wide=args.wide,
                )
            )
            sys.stdout.write("\n")
    for lv, why in missing_levels(a, b, levels).items():
        say(f"{lv}: not available ({why})", args.fmt)
    if args.output:
        print(f"diff: {printable(args.output)}", file=sys.stderr)
    return 0
