"""``dtrace perf X``: how far each op is from the hardware (docs/semantics.md, "Op performance model").

``X`` is a trace file (analysed in-process, nothing written) or a results directory. The view:
the GPUs and the peaks matched to them, the share of op time with a model, the time-weighted
fraction of the roofline reached and the time lost against it, then the op shapes that lose the
most time (across ranks, or one rank's with ``--rank``), the op families and the GPUs slower than
the median at equal shapes. ``--gpu-spec FILE`` recomputes the roofline of a results directory
with other peaks (measured "max achievable" figures, an unknown device) without analysing again.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..render.escape import printable
from .common import (
    add_analysis_options,
    add_output_format,
    add_rows,
    analysis_kwargs,
    is_machine,
    print_json,
    rows_to_show,
    say,
    select_rank,
)

if TYPE_CHECKING:
    import pandas as pd

TABLES = ("op_perf", "op_perf_xrank", "op_family_perf")
#: --sort choices (dtrace.render.opperf.SORTS; named here so --help imports no data library)
SORT_CHOICES = ("lost", "time", "count", "efficiency")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "perf",
        help="FLOPs, bytes, achieved throughput and roofline per op; top ops by time lost",
        description="How far each op is from the hardware: achieved TFLOP/s and TB/s from the shapes the "
        "profiler recorded (record_shapes=True), the roofline of the GPU and the time lost against it, "
        "per op shape across ranks (or one rank's), per op family, and the GPUs slower than the median "
        "at equal shapes. X is a trace file or a results directory.",
    )
    p.add_argument("input", metavar="X", help="a trace file, or a results directory of dtrace analyze")
    add_rows(p)
    p.add_argument(
        "--sort",
        choices=SORT_CHOICES,
        default="lost",
        help="lost (time lost against the roofline, default), time, count, efficiency (lowest %% of roofline first)",
    )
    p.add_argument("--rank", type=int, default=None, help="one rank's op shapes (default: across ranks)")
    p.add_argument("--family", default=None, help="only this op family (gemm, attention, conv, elementwise, ...)")
    add_analysis_options(p)
    add_output_format(p)
    p.set_defaults(func=run_perf)


def _tables(args: argparse.Namespace) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """The op tables of the input, the roofline recomputed with ``--gpu-spec`` for a results directory."""
    from ..explore.tree import is_results_dir
    from .quick import load_input

    kwargs = analysis_kwargs(args)
    spec = kwargs.pop("gpu_spec", None) if is_results_dir(args.input) else None
    res = load_input(args.input, kwargs, args.input_format)
    missing = [t for t in TABLES if t not in res.table_names]
    if missing:
        raise UsageError(f"{args.input} has no {', '.join(missing)} table(s); re-run dtrace analyze with this version")
    names = (*TABLES, "devices", "gpu_peaks", "gpu_slowness", "stragglers")
    tables = {n: res.table(n) for n in names if n in res.table_names}
    if spec is not None:
        tables.update(_reroof(tables, spec))
    return tables, res.errors


def _reroof(tables: dict[str, pd.DataFrame], spec: str) -> dict[str, pd.DataFrame]:
    from ..api import make_options
    from ..reduce.opperf import DEVICE_EXTRA, ROOFLINE_COLUMNS, reduce_op_perf

    base = {
        "op_perf": tables["op_perf"].drop(columns=[c for c in ROOFLINE_COLUMNS if c in tables["op_perf"].columns]),
    }
    if "devices" in tables:
        base["devices"] = tables["devices"].drop(columns=[c for c in DEVICE_EXTRA if c in tables["devices"].columns])
    return reduce_op_perf(base, make_options(gpu_spec=spec))


def _n_parts(tables: dict[str, pd.DataFrame]) -> int:
    src = tables.get("devices")
    if src is None or not len(src):
        src = tables["op_perf"]
    return len(src[["rank", "device"]].drop_duplicates()) if len(src) else 0


def run_perf(args: argparse.Namespace) -> int:
    from ..render.opperf import family_totals, perf_lines, top_ops
    from ..render.text import render

    tables, errors = _tables(args)
    for e in errors:
        print(f"error: {printable(e)}", file=sys.stderr)
    if args.rank is not None:
        select_rank(tables["op_perf"], args.rank, args.input)
    families = sorted(set(tables["op_perf"]["family"].dropna().astype(str)))
    if args.family is not None and args.family not in families:
        raise UsageError(f"--family {args.family!r}: not in {args.input}; families: {', '.join(families) or 'none'}")
    lines = perf_lines(tables, _n_parts(tables))
    ops = top_ops(tables, rank=args.rank, family=args.family, sort=args.sort)
    fam = tables["op_family_perf"]
    if args.rank is not None:
        fam = fam.loc[fam["rank"].to_numpy() == args.rank]
    fam_all = family_totals(fam) if len(fam) else fam
    slow = tables.get("gpu_slowness")
    top = rows_to_show(args)
    if is_machine(args.fmt):
        for line in lines:
            say(line, args.fmt)
        if args.fmt == "csv":
            print(render(ops, "csv", max_rows=top), end="")
        else:
            print_json(_document(lines, ops, fam_all, slow, tables.get("gpu_peaks"), top))
        return 1 if errors else 0
    _print_views(args, lines, ops, fam_all, top)
    return 1 if errors else 0


def _print_views(
    args: argparse.Namespace, lines: list[str], ops: pd.DataFrame, fam_all: pd.DataFrame, top: int | None
) -> None:
    """The headline, the op shapes and the op families, as tables for a person."""
    from ..render.opperf import human_ops
    from ..render.text import render

    where = f"rank {args.rank}" if args.rank is not None else "across ranks"
    print(printable("\n".join(lines), keep_newlines=True))
    sort_name = {"lost": "time lost", "time": "GPU time", "count": "calls", "efficiency": "% of roofline"}[args.sort]
    title = f"op shapes {where}" + (f", family {args.family}" if args.family else "") + f", by {sort_name}"
    if len(ops):
        print(render(human_ops(ops, across=args.rank is None), args.fmt, title=title, max_rows=top))
    if len(fam_all):
        view = fam_all[
            [
                "family",
                "count",
                "gpu_ns",
                "share",
                "modelled_share",
                "tflops",
                "tbps",
                "roofline_ns",
                "roofline_share",
                "lost_ns",
            ]
        ]
        view = view.assign(roofline_share=(view["roofline_share"] * 100).round(1)).rename(
            columns={"roofline_share": "roofline (%)", "tflops": "TFLOP/s", "tbps": "TB/s", "share": "time_share"}
        )
        print(render(view, args.fmt, title=f"op families {where} (summed over GPUs)", max_rows=None))


def _records(df: pd.DataFrame | None, top: int | None) -> list[dict[str, Any]]:
    import json

    if df is None or not len(df):
        return []
    part = df.head(top) if top is not None else df
    return list(json.loads(part.to_json(orient="records", force_ascii=False)))


def _document(lines, ops, fam, slow, peaks, top) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return {
        "summary": lines,
        "ops": _records(ops, top),
        "families": _records(fam, None),
        "gpu_slowness": _records(slow, None),
        "gpu_peaks": _records(peaks, None),
    }
