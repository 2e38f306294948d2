"""``dtrace timeline OUT -o slow-step.json.gz`` and ``dtrace whatif OUT``.

``timeline`` exports the slowest step (or a chosen step or window) of a few ranks as one
Chrome / Perfetto trace with the host clock offsets removed (:mod:`dtrace.explore.timeline`);
``whatif`` prints the estimated step time if the stragglers ran at the median rank's speed, a
kernel class were faster, or communication were hidden (:mod:`dtrace.reduce.whatif`).
"""

from __future__ import annotations

import argparse
import sys

from ..core.constants import DEFAULT_SPEEDUP, SPEEDUP_RANGE
from ..errors import UsageError
from .common import ID, INT32_MAX, add_output_format, number, real, write_bytes


def add_parser(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser(
        "timeline",
        help="export one step of a few ranks, clocks aligned, for Perfetto / chrome://tracing",
        description="Write one Chrome trace-event file (open it in Perfetto UI or chrome://tracing) "
        "with the chosen ranks' GPU streams during one step, host clock offsets removed "
        "(the clock_offsets table): each rank a process named by rank, host and role, "
        "matched collectives joined by flow arrows in arrival order, the wait at each "
        "collective as a counter track, the straggler evidence as a label and each rank's "
        "critical path (what bounds the step) as its first track. Only the "
        "chosen ranks' cached events are read, so the file and the time stay small for "
        "any number of ranks.",
    )
    t.add_argument("out", metavar="OUT", help="results directory of dtrace analyze (with its cache)")
    t.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE.json.gz",
        help="the trace to write (.json.gz compressed, or .json)",
    )
    t.add_argument(
        "--ranks",
        default=None,
        metavar="R,R,...",
        help="ranks to show (default: the flagged stragglers, the fastest and the median rank)",
    )
    which = t.add_mutually_exclusive_group()
    which.add_argument("--step", type=ID, default=None, help="step to show (default: the slowest step)")
    which.add_argument(
        "--window",
        default=None,
        metavar="START:END",
        help="a time window instead of a step, since the job's first GPU event (ms; or with units: 12500us:14ms)",
    )
    t.add_argument("--host", action="store_true", help="also export the host threads (ops, launches)")
    t.add_argument(
        "--no-critical-path",
        dest="critical_path",
        action="store_false",
        help="leave out each rank's 'critical path' track (the path step_bounds splits, one slice per "
        "interval named by what it waited on, with flow arrows to the GPU events at its hops)",
    )
    t.add_argument("--cache", default=None, metavar="DIR", help="the ingest cache of the analysis (default: OUT/cache)")
    t.set_defaults(func=run_timeline)

    w = sub.add_parser(
        "whatif",
        help="estimated step time if stragglers, a kernel class or communication were faster",
        description="Replay each step's cross-rank dependencies (a collective ends when its last "
        "member arrives plus its transfer time; a rank's work between collectives moves "
        "with it) and print the step time if (a) every flagged straggler computed at the "
        "median rank's speed, (b) a kernel class were faster on every rank, (c) "
        "collective transfers took no time. Model and limits: README, 'What-if "
        "estimates'.",
    )
    w.add_argument("out", metavar="OUT", help="results directory of dtrace analyze")
    w.add_argument(
        "--class",
        dest="classes",
        action="append",
        default=None,
        metavar="CLASS[=X]",
        help="kernel class to speed up (repeatable; CLASS=X gives its own factor); default: the three "
        "compute classes with the most time",
    )
    w.add_argument(
        "--speedup",
        type=real(*SPEEDUP_RANGE),
        default=DEFAULT_SPEEDUP,
        metavar="X",
        help=f"how many times as fast --class kernels run (default {DEFAULT_SPEEDUP})",
    )
    w.add_argument("--step", type=ID, default=None, help="only this step")
    w.add_argument("--per-step", action="store_true", help="one row per step and scenario (default: step means)")
    add_output_format(w)
    w.set_defaults(func=run_whatif)


MAX_TIMELINE_RANKS = 4096
"""The most ranks one timeline exports (``--ranks``)."""


def parse_ranks(text: str | None) -> list[int] | None:
    """``"0,5,37"`` or ``"0-3,9"`` → ``[0, 5, 37]`` / ``[0, 1, 2, 3, 9]``; at most
    :data:`MAX_TIMELINE_RANKS` ranks, each from 0 to 2³¹ − 1.

    Examples
    --------
    >>> parse_ranks("0-3,9")
    [0, 1, 2, 3, 9]
    >>> parse_ranks("0-999999999")
    Traceback (most recent call last):
    dtrace.errors.UsageError: --ranks '0-999999999': 1,000,000,000 ranks; a timeline shows at most 4,096
    """
    if text is None:
        return None
    spans: list[tuple[int, int]] = []
    for item in str(text).split(","):
        item = item.strip()
        lo, sep, hi = item.partition("-")
        try:
            a = int(number(lo, 0, INT32_MAX, whole=True))
            b = int(number(hi, 0, INT32_MAX, whole=True)) if sep else a
        except UsageError as exc:
            raise UsageError(f"--ranks {text!r}: {item!r} is not a rank or a range R-R ({exc})") from None
        if b < a:
            raise UsageError(f"--ranks {text!r}: the range {item!r} ends before it starts")
        spans.append((a, b))
    n = sum(b - a + 1 for a, b in spans)
    if n > MAX_TIMELINE_RANKS:
        raise UsageError(f"--ranks {text!r}: {n:,} ranks; a timeline shows at most {MAX_TIMELINE_RANKS:,}")
    return [r for a, b in spans for r in range(a, b + 1)]


def parse_classes(items: list[str] | None, speedup: float) -> dict[str, float] | None:
    """``["gemm", "attention=1.5"]`` with ``--speedup 1.2`` → ``{"gemm": 1.2, "attention": 1.5}``.

    Examples
    --------
    >>> parse_classes(["gemm", "attention=1.5"], 1.2)
    {'gemm': 1.2, 'attention': 1.5}
    """
    if not items:
        return None
    out = {}
    for item in items:
        name, sep, x = item.partition("=")
        try:
            factor = number(x, *SPEEDUP_RANGE) if sep else float(speedup)
        except UsageError as exc:
            raise UsageError(f"--class {item!r}: {exc}") from None
        out[name.strip()] = factor
    return out


def run_timeline(args: argparse.Namespace) -> int:
    from ..explore.timeline import encode, timeline
    from ..results import load

    res = load(args.out)
    trace = timeline(
        res,
        ranks=parse_ranks(args.ranks),
        step=args.step,
        window=args.window,
        host=args.host,
        cache=args.cache,
        critical_path=args.critical_path,
    )
    data = encode(trace, args.output)

    write_bytes(args.output, data)
    od = trace["otherData"]
    where = f"step {od['step']}" if od["step"] is not None else "window"
    tracks = ", ".join(f"rank {t['rank']}" + (f" ({t['role']})" if t["role"] else "") for t in od["tracks"])
    n = sum(t["gpu_events"] + t["host_events"] for t in od["tracks"])
    print(
        f"timeline: {args.output} ({len(data) / 1e6:.2f} MB): {where}, {tracks}; {n:,} events; open it in "
        "https://ui.perfetto.dev or chrome://tracing"
    )
    return 0


def run_whatif(args: argparse.Namespace) -> int:
    from ..reduce.whatif import summary, whatif
    from ..render.text import render
    from ..results import load

    res = load(args.out)
    classes = parse_classes(args.classes, args.speedup)
    if classes is None and "whatif" in res.table_names:
        table = res.whatif
        if args.step is not None:
            table = table.loc[table["step"].to_numpy() == args.step].reset_index(drop=True)
    else:
        table = whatif(res, speedup=classes, step=args.step)
    if args.step is not None and not len(table):
        raise UsageError(f"no step {args.step} in the what-if estimates of {args.out}")
    shown = table if args.per_step else summary(table)
    title = "what if (per step)" if args.per_step else "what if (mean over steps; --per-step for each step)"
    sys.stdout.write(render(shown, args.fmt, title=title))
    return 0
