"""``dtrace bounds OUT``: what bounds each step — host, GPU compute, communication, memory copies,
synchronisation — from its critical path (the ``step_bounds`` tables)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import UsageError
from .common import add_output_format, add_rows, is_machine, rows_to_show, say


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bounds",
        help="what bounds each step (host, GPU compute, communication, synchronisation)",
        description="Follow each step's critical path from its end back to its start (host threads, "
        "kernel launches, the GPU, collectives, synchronisations) and print what the step waited on: "
        "per step, the bound most ranks share and the ranks bound by something else, with the host op or "
        "synchronisation they spent the time in. --rank R prints every step of one rank. Model and limits: "
        "docs/semantics.md, 'What bounds each step'.",
    )
    p.add_argument("out", metavar="OUT", help="results directory of dtrace analyze")
    p.add_argument("--rank", type=int, default=None, help="every step of this rank, one line each")
    p.add_argument("--step", type=int, default=None, help="only this step")
    add_rows(p)
    add_output_format(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..render.bounds import job_lines, lines, rank_lines, with_steps
    from ..render.text import render
    from ..results import load

    res = load(args.out)
    if "step_bounds" not in res.table_names:
        raise UsageError(f"{args.out}: no step_bounds table (analysed by an older dtrace): run dtrace analyze again")
    sb = with_steps(res.step_bounds, rank=args.rank, step=args.step)
    if not len(sb):
        raise UsageError(_none_selected(args, res.step_bounds))
    limit = rows_to_show(args)
    if is_machine(args.fmt) or args.fmt == "markdown":
        sys.stdout.write(render(sb, args.fmt, title="step bounds", max_rows=limit))
        return 0
    xrank = res.table("step_bounds_xrank") if "step_bounds_xrank" in res.table_names else None
    if args.step is not None and xrank is not None:
        xrank = xrank.loc[xrank["step"].eq(args.step).fillna(False).to_numpy(bool)]
    steps = res.table("steps") if "steps" in res.table_names else None
    if args.rank is not None or xrank is None or not len(xrank):
        text = rank_lines(sb, steps)
    else:
        text = job_lines(xrank, steps)
        say("what bounds each step (its critical path, end to start; --rank R: one rank's steps)", args.fmt)
    sys.stdout.write(lines(text[:limit] if limit else text))
    return 0


def _none_selected(args: argparse.Namespace, step_bounds: Any) -> str:
    """The error for a ``--rank``/``--step`` that selects nothing, with the steps there are."""
    from ..render.bounds import with_steps

    which = [f"rank {args.rank}"] * (args.rank is not None) + [f"step {args.step}"] * (args.step is not None)
    there = with_steps(step_bounds, rank=args.rank)
    known = sorted({int(x) for x in there["step"].dropna()}) if len(there) else []
    have = f"; the steps there are: {_ranges(known)}" if known else ""
    return f"no step bounds for {' and '.join(which) or 'any step'} in {args.out}{have}"


def _ranges(steps: list[int]) -> str:
    """``1-4, 7, 9-10``: sorted whole numbers as ranges (at most 20 of them, then ``…``).

    Examples
    --------
    >>> _ranges([1, 2, 3, 4, 7, 9, 10])
    '1-4, 7, 9-10'
    """
    out: list[str] = []
    lo = prev = steps[0]
    for x in [*steps[1:], None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(f"{lo}-{prev}" if prev > lo else str(lo))
        if x is not None:
            lo = prev = x
    return ", ".join(out[:20]) + (" …" if len(out) > 20 else "")
