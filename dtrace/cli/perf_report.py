"""``dtrace perf-report OUT``: TraceLens's perf report (its Excel sheets, or CSV files) from a results directory.

The sheets (:mod:`dtrace.render.perf_report`, docs/perf_report.md) are written as one ``.xlsx``
workbook (``-o FILE.xlsx``; by default ``<OUT>_perf_report.xlsx`` beside the results directory,
TraceLens's ``<trace>_perf_report.xlsx``) and/or as one CSV file per sheet (``--csv-dir DIR``,
TraceLens's ``--output_csvs_dir``; with ``--csv-dir`` alone no workbook is written). The
workbook needs openpyxl (``pip install 'dtrace[xlsx]'``); the CSV files need nothing more.
``--rank R`` (or ``R:D``) writes one GPU's report in TraceLens's layout; without it every rank's
rows are in each sheet, ``rank`` and ``device`` first.
"""

from __future__ import annotations

import argparse
import os

from ..errors import OutputError, UsageError
from ..options import INT32_MAX, INT64_MAX
from ..render.escape import printable
from .common import INT32_MIN, number, whole, write_bytes, write_text


def rank_device(text: str) -> tuple[int, int | None]:
    """``--rank``: ``R`` (every device of rank R) or ``R:D`` (device D of rank R).

    Examples
    --------
    >>> rank_device("3"), rank_device("3:1")
    ((3, None), (3, 1))
    >>> rank_device("-1")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: '-1': give a rank R or R:D (rank and device): -1 is out of range: give a whole number from 0 to 2,147,483,647
    """
    rank, sep, device = text.partition(":")
    try:
        r = int(number(rank, 0, INT32_MAX, whole=True))
        d = int(number(device, INT32_MIN, INT32_MAX, whole=True)) if sep else None
    except UsageError as exc:
        shown = text if len(text) <= 40 else f"{text[:20]}…"
        raise argparse.ArgumentTypeError(f"{shown!r}: give a rank R or R:D (rank and device): {exc}") from None
    return r, d


rank_device.__name__ = "rank[:device]"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "perf-report",
        help="TraceLens's perf report (.xlsx sheets or CSV files) from a results directory",
        description="Write TraceLens's perf-report sheets (gpu_timeline, ops_summary_by_category, ops_summary, "
        "ops_unique_args, unified_perf_summary, a roofline sheet per op category, coll_analysis) from a results "
        "directory of dtrace analyze, as one .xlsx workbook and/or a folder of CSV files: one GPU's report "
        "(--rank), or every rank's rows with rank and device columns first. docs/perf_report.md lists the "
        "columns and where a figure is defined differently from TraceLens's.",
    )
    p.add_argument("out", metavar="OUT", help="a results directory of dtrace analyze")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE.xlsx",
        default=None,
        help="the workbook to write (needs openpyxl: pip install 'dtrace[xlsx]'); default OUT_perf_report.xlsx "
        "beside OUT (…_rankR[_deviceD] with --rank), none when only --csv-dir is given",
    )
    p.add_argument(
        "--csv-dir", metavar="DIR", default=None, help="write one CSV file per sheet into DIR (made if missing)"
    )
    p.add_argument(
        "--rank",
        type=rank_device,
        default=None,
        metavar="R[:D]",
        help="one rank's report (R:D: its device D) in TraceLens's layout (default: every rank, rank and device columns first)",
    )
    p.add_argument(
        "--top",
        type=whole(1, INT64_MAX),
        default=None,
        metavar="N",
        help="keep the N rows with the most kernel time of each op sheet, per GPU (default: every row)",
    )
    p.set_defaults(func=run)


def default_output(out: str, rank: int | None, device: int | None) -> str:
    """``<OUT>_perf_report.xlsx`` beside the results directory (TraceLens's ``<trace>_perf_report.xlsx``);
    ``_rankR`` (``_rankR_deviceD``) for one rank's report; a remote ``OUT`` gives a file in the current
    directory.

    Examples
    --------
    >>> default_output("s3://bucket/run42/", 3, None), default_output("s3://b/run42", 3, 1)
    ('run42_perf_report_rank3.xlsx', 'run42_perf_report_rank3_device1.xlsx')
    """
    base = os.path.basename(out.rstrip("/")) if "://" in out else os.path.abspath(out)
    suffix = "" if rank is None else f"_rank{rank}" + ("" if device is None else f"_device{device}")
    return f"{base}_perf_report{suffix}.xlsx"


def run(args: argparse.Namespace) -> int:
    from ..render.perf_report import check_sheets, csv_files, perf_report_sheets, require_openpyxl, workbook_bytes
    from ..results import load

    rank, device = args.rank if args.rank is not None else (None, None)
    xlsx = args.output if args.output is not None or args.csv_dir else default_output(args.out, rank, device)
    if args.output is not None and not args.output.lower().endswith(".xlsx"):
        raise UsageError(f"-o {args.output}: the workbook's name ends in .xlsx (CSV files: --csv-dir DIR)")
    if xlsx is not None:
        require_openpyxl()  # before any work: the one line that says how to install it
    if args.csv_dir is not None and os.path.exists(args.csv_dir) and not os.path.isdir(args.csv_dir):
        raise UsageError(f"--csv-dir {args.csv_dir}: exists and is not a directory")
    sheets = perf_report_sheets(load(args.out), rank=rank, device=device, top=args.top)
    if xlsx is not None:
        check_sheets(sheets)  # a sheet too long for Excel is refused before the CSV files are written
    if args.csv_dir is not None:
        _write_csvs(args.csv_dir, csv_files(sheets))
    if xlsx is not None:
        write_bytes(xlsx, workbook_bytes(sheets))
        print(f"perf report: {printable(xlsx)} ({len(sheets)} sheets: {', '.join(sheets)})")
    return 0


def _write_csvs(folder: str, files: dict[str, str]) -> None:
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create {folder}: {exc.strerror or exc}") from None
    for name, text in files.items():
        write_text(os.path.join(folder, name), text)
    print(f"perf report CSV files: {printable(folder)} ({len(files)} files: {', '.join(files)})")
