"""``dtrace show OUT [TABLE]``: print a results table (or list the tables)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from ..errors import UsageError
from .common import RANK, add_output_format, add_rows, is_machine, print_json, rows_to_show, say, select_rank

if TYPE_CHECKING:
    import pandas as pd

    from ..results import Results


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "show",
        help="print a results table",
        description="Print one table of a results "
        "directory, or the list of tables and the inputs when no table is named.",
    )
    p.add_argument("out", metavar="OUT")
    p.add_argument("table", nargs="?", default=None)
    add_rows(p)
    p.add_argument("--sort", default=None, help="sort by this column (descending)")
    p.add_argument("--rank", type=RANK, default=None, help="only this rank")
    p.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="COLUMN=VALUE",
        help="only the rows whose COLUMN has this value, compared as text (repeatable; e.g. "
        "--where cause=host_loader, --where flagged=True)",
    )
    p.add_argument("--raw", action="store_true", help="keep *_ns columns in ns")
    add_output_format(p)
    p.set_defaults(func=run)


INPUT_COLUMNS = ["path", "format", "status", "error"]


def run(args: argparse.Namespace) -> int:
    from ..results import load

    res = load(args.out)
    if args.table is None:
        _show_overview(args, res)
    else:
        _show_table(args, res)
    return 0


def _show_overview(args: argparse.Namespace, res: Results) -> None:
    """The results' summary, its empty tables and its inputs."""
    import pandas as pd

    from ..render.text import render

    inputs = in_rank_order(res.inputs)
    cols = [c for c in INPUT_COLUMNS if c in inputs.columns]
    if args.fmt == "json":
        print_json(
            {
                "path": res.path,
                "tables": res.table_names,
                "absent_tables": res.record.absent_tables,
                "inputs": json.loads(inputs.to_json(orient="records", force_ascii=False)),
            }
        )
        return
    say(repr(res), args.fmt)
    for name, reason in res.record.absent_tables.items():
        say(f"table {name} is empty: {reason}", args.fmt)
    if len(inputs) or is_machine(args.fmt):
        print(
            render(
                inputs[cols] if len(inputs) else pd.DataFrame({c: [] for c in INPUT_COLUMNS}),
                args.fmt,
                title="inputs",
                human=False,
                max_rows=rows_to_show(args),
                wide=args.wide,
            ),
            end="",
        )


def in_rank_order(inputs: pd.DataFrame) -> pd.DataFrame:
    """The inputs by their first rank, then by path with its numbers compared as numbers
    (``rank-2`` before ``rank-10``), not in string order.

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"path": ["r/rank-10.json", "r/rank-2.json", "x.json"], "ranks": [[[10, 0]], [[2, 0]], []]})
    >>> in_rank_order(df)["path"].tolist()
    ['r/rank-2.json', 'r/rank-10.json', 'x.json']
    """
    import re

    import pandas as pd

    if not len(inputs) or "path" not in inputs.columns:
        return inputs

    def first_rank(v: object) -> float:  # ranks: [[rank, device], ...]
        head = v[0] if isinstance(v, (list, tuple)) and v else None
        rank = head[0] if isinstance(head, (list, tuple)) and head else head
        return float(rank) if isinstance(rank, int) and not isinstance(rank, bool) else float("inf")

    def natural(path: object) -> tuple[tuple[int, int | str], ...]:
        return tuple((0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", str(path)) if t)

    ranks = inputs["ranks"].map(first_rank) if "ranks" in inputs.columns else pd.Series(float("inf"), inputs.index)
    order = sorted(range(len(inputs)), key=lambda i: (ranks.iloc[i], natural(inputs["path"].iloc[i])))
    return inputs.iloc[order].reset_index(drop=True)


def _show_table(args: argparse.Namespace, res: Results) -> None:
    """One table of the results (a rank's rows, sorted by a column on request)."""
    from ..render.stragglers import signals_legend
    from ..render.text import render

    if args.table not in res.table_names:
        raise UsageError(f"no table {args.table!r} in {args.out}; tables: {', '.join(res.table_names)}")
    df = res.table(args.table) if args.rank is None else res.table(args.table, ranks=[args.rank])
    if args.rank is not None and ("rank" not in df.columns or not len(df)):
        # read the whole table only to say which ranks it has
        df = select_rank(res.table(args.table), args.rank, f"table {args.table} of {args.out}")
    for cond in args.where:
        df = _where(df, cond, args.table)
    if args.sort:
        if args.sort not in df.columns:
            raise UsageError(f"no column {args.sort!r} in {args.table}; columns: {', '.join(df.columns)}")
        df = df.sort_values(args.sort, ascending=False, kind="stable")
    if not len(df):
        why = res.record.absent_tables.get(args.table)
        say(
            f"table {args.table} is empty" + (f": {why}" if why else " (the analysis found nothing to put in it)"),
            args.fmt,
        )
    print(
        render(
            df,
            args.fmt,
            title=args.table,
            human=not args.raw,
            max_rows=rows_to_show(args),
            wide=args.wide,
            table=args.table,
        ),
        end="",
    )
    if args.table == "stragglers" and not is_machine(args.fmt) and "signals" in df.columns:
        say(signals_legend(), args.fmt)


def _where(df: pd.DataFrame, cond: str, table: str) -> pd.DataFrame:
    """The rows of ``df`` where ``COLUMN=VALUE`` holds (the column's values compared as text)."""
    col, sep, value = cond.partition("=")
    col = col.strip()
    if not sep or not col:
        raise UsageError(f"--where {cond!r}: expected COLUMN=VALUE")
    if col not in df.columns:
        raise UsageError(f"--where {cond!r}: no column {col!r} in {table}; columns: {', '.join(df.columns)}")
    return df.loc[df[col].astype(str).to_numpy() == value.strip()]
