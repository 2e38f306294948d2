"""Flags shared by several commands, mapped one to one onto keyword arguments."""
from __future__ import annotations

import argparse
from typing import Any

from ..render.text import FORMATS


def add_analysis_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("analysis")
    g.add_argument("--compat", choices=["default", "tracelens"], default="default",
                   help="reproduce a peer tool's numbers exactly (tracelens: GPUEventAnalyser rules)")
    g.add_argument("--linked-only", action="store_true", help="keep only GPU events linked to a host launch")
    g.add_argument("--step", type=int, default=None, help="keep only this step (iteration) in every table")
    g.add_argument("--step-pattern", default=None, help="regex on annotation names marking a step (group 1 = number)")
    g.add_argument("--rank-by", choices=["auto", "order"], default="auto",
                   help="auto: distributedInfo, then rank<N> in the file name; order: sorted input order")
    g.add_argument("--format", dest="input_format", default=None, help="force an input format (default: detect)")


def analysis_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kw: dict[str, Any] = {"compat": args.compat, "linked_only": args.linked_only, "step": args.step,
                          "rank_by": args.rank_by}
    if args.step_pattern:
        kw["step_pattern"] = args.step_pattern
    for name in OPTION_FLAGS:
        val = getattr(args, name, None)
        if val is not None:
            kw[name] = val
    return kw


# option names that further commands' flags add (dest == Options field)
OPTION_FLAGS: list[str] = []


def add_output_format(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output-format", "--fmt", dest="fmt", choices=FORMATS, default="table",
                   help="table (terminal), csv, json or markdown")
