"""Terminal and text renderers for results tables (units chosen here, never in tables).

:func:`render` turns any results DataFrame into a rich terminal table, Markdown, CSV or JSON.
The human formats (``table``, ``markdown``) convert ``*_ns`` columns to a readable unit per
column (``computation (ms)``), fractions named ``*_share`` to percentages, long kernel names
to their readable core (:func:`shorten`), and say how many rows were left out. The machine
formats (``csv``, ``json``) keep the raw values and full names.
"""

from __future__ import annotations

import io
import json
import re
import shutil
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pandas as pd

from ..core.constants import OUTPUT_FORMATS as FORMATS
from ..core.units import TIME_UNITS, pick_bytes_unit, pick_rate_unit, pick_unit
from .escape import markdown_cell, printable, to_csv

if TYPE_CHECKING:
    from rich.table import Table

#: Columns holding names that :func:`shorten` makes readable in the human formats.
NAME_COLUMNS = ("name", "prev_name", "next_name", "op", "key", "kernel")
#: The narrowest a name column is made to fit a terminal of 144 columns or more (a quarter of
#: one of 120 to 143; 16, like any text, in a narrower one): a table still too wide is printed in
#: blocks of columns rather than cutting names to a stub (``ncclKernel_SendRec…``).
NAME_FLOOR = 36
#: ``x_ns`` or a statistic of it (``x_ns_mean``; not ``x_ns_z``, a z-score).
_TIME_COLUMN = re.compile(r"_ns(_(?:mean|median|min|max|sum|std|total|p\d+))?$")
#: Columns holding absolute times (shown relative to the earliest of them).
ABSOLUTE_TIMES = ("start_ns", "end_ns", "first_ns", "last_ns")
#: Further absolute-time columns of particular tables (elsewhere ``lo_ns`` is a duration bin).
TABLE_ABSOLUTE_TIMES = {
    "launches": ("launch_ns",),
    "kernel_counters": ("launch_ns",),
    "queue_timeline": ("lo_ns", "hi_ns"),
    "memory": ("peak_ns",),
    "memory_timeline": ("lo_ns", "hi_ns"),
    "memcpy_timeline": ("lo_ns", "hi_ns"),
    "segments": ("time_ns", "comm_start_ns", "comm_launch_ns"),
}
_STAT = r"(?:mean|median|min|max|sum|std|total|p\d+)"
#: Fractions of 1, shown as percentages: ``share``, ``time_share``, ``share_median``, ``top_share_max``.
_SHARE_COLUMN = re.compile(rf"^(?:share|.+_share|share_{_STAT}|.+_share_{_STAT})$")
#: Byte counts (``allocated_bytes``, ``peak_median_bytes``, ``bytes``), shown in one binary unit per column.
_BYTES_COLUMN = re.compile(rf"^(?:(.+)_)?bytes(?:_({_STAT}))?$")
#: Byte rates, shown in decimal units per second (``bandwidth_bytes_per_s`` → ``bandwidth (GB/s)``).
_RATE_COLUMN = re.compile(r"^(.+)_bytes_per_s$")


def is_time_column(name: str) -> bool:
    """A column of durations or times in ns: ``*_ns`` or a statistic of one (``total_ns_mean``).

    Examples
    --------
    >>> [is_time_column(c) for c in ("idle_ns", "total_ns_mean", "step_ns_z", "count")]
    [True, True, False, False]
    """
    return bool(_TIME_COLUMN.search(str(name)))


def humanize(df: pd.DataFrame, time_unit: str | None = None, table: str | None = None) -> pd.DataFrame:
    """Readable values: ``*_ns`` columns in a unit per column (``exposed_comm_ns`` → ``exposed comm (ms)``),
    ``*_share`` fractions as percentages (``name (%)``), ``*_bytes`` in a binary unit per column
    (``allocated (GiB)``; a negative count, unknown, is missing), other floats rounded.

    ``time_unit`` fixes the unit of every time column (``"s"``, ``"ms"``, ``"µs"``, ``"ns"``),
    or ``"auto"`` picks one unit for all of them together (so columns compare at a glance).
    Each unit is chosen from the whole column, never from the rows shown. Absolute times
    (:data:`ABSOLUTE_TIMES`, and :data:`TABLE_ABSOLUTE_TIMES` of results table ``table``) are
    shown relative to the earliest of them (see :func:`humanize_table`). Missing values (NaN,
    ``pd.NA``) stay missing.

    Examples
    --------
    >>> import pandas as pd
    >>> humanize(pd.DataFrame({"rank": [0], "idle_ns": [2_500_000], "time_share": [0.25]}))
       rank  idle (ms)  time share (%)
    0     0        2.5            25.0
    """
    return humanize_table(df, time_unit, table)[0]


def humanize_table(
    df: pd.DataFrame, time_unit: str | None = None, table: str | None = None
) -> tuple[pd.DataFrame, str | None]:
    """:func:`humanize`, and the origin ``t0`` of the absolute-time columns as text (or ``None``).

    Absolute times (``start_ns``, ``end_ns``, ``first_ns``, ``last_ns``) become durations after
    ``t0``, the earliest of them in the table; ``t0`` is a UTC date when the times are epoch
    ns, else a time on the trace's own clock.

    Examples
    --------
    >>> import pandas as pd
    >>> v, t0 = humanize_table(pd.DataFrame({"start_ns": [1_700_000_000_000_000_000, 1_700_000_000_002_000_000]}))
    >>> list(v.columns), v.iloc[:, 0].tolist(), t0
    (['start (t0+ms)'], [0.0, 2.0], '2023-11-14 22:13:20.000000 UTC')
    """
    times = [c for c in df.columns if is_time_column(c) and _is_number(df[c])]
    own = set(ABSOLUTE_TIMES) | set(TABLE_ABSOLUTE_TIMES.get(table or "", ()))
    absolute = [c for c in times if c in own]
    t0 = _earliest(df, absolute)
    shifted = {c: _floats(df[c]) - (t0 if c in absolute and t0 is not None else 0.0) for c in times}
    fixed = _fixed_unit(time_unit, shifted)
    out = {}
    for c in df.columns:
        if c in times:
            unit, scale = fixed or pick_unit(shifted[c])
            out[_time_heading(str(c), unit, c in absolute and t0 is not None)] = (shifted[c] / scale).round(3)
        else:
            out.update(_other_column(str(c), df[c]))
    return pd.DataFrame(out, index=df.index), (_t0_text(t0) if t0 is not None else None)


def _other_column(name: str, col: pd.Series) -> dict:
    """A column that is not a time: a share in %, bytes and byte rates in a unit for the column,
    a float rounded, anything else as it is."""
    if not _is_number(col):
        return {name: col}
    if _SHARE_COLUMN.match(name) and pd.api.types.is_float_dtype(col):
        return {f"{name.replace('_', ' ')} (%)": (_floats(col) * 100).round(2)}
    rate = _RATE_COLUMN.match(name)
    if rate:
        unit, scale = pick_rate_unit(_floats(col))
        return {f"{rate.group(1).replace('_', ' ')} ({unit})": (_floats(col) / scale).round(3)}
    size = _BYTES_COLUMN.match(name)
    if size:
        v = _floats(col)
        v[v < 0] = np.nan  # a negative count: unknown
        unit, scale = pick_bytes_unit(v)
        base = " ".join(x for x in (size.group(1), size.group(2)) if x).replace("_", " ") or "size"
        return {f"{base} ({unit})": v if scale == 1 else (v / scale).round(3)}
    if pd.api.types.is_float_dtype(col):
        return {name: col.round(4)}
    return {name: col}


def _time_heading(name: str, unit: str, after_t0: bool) -> str:
    """``busy_ns`` -> ``busy (ms)``; ``start_ns`` after ``t0`` -> ``start (t0+ms)``."""
    base = _TIME_COLUMN.sub(lambda m: f"{m.group(1) or ''}".replace("_", " ", 1), name)
    return f"{base.replace('_', ' ')} ({f't0+{unit}' if after_t0 else unit})"


def _earliest(df: pd.DataFrame, absolute: list) -> float | None:
    """The earliest finite value of the absolute-time columns (``None``: none)."""
    if not absolute:
        return None
    vals = np.concatenate([_floats(df[c]) for c in absolute])
    vals = vals[np.isfinite(vals)]
    return float(vals.min()) if vals.size else None


def _fixed_unit(time_unit: str | None, shifted: dict) -> tuple[str, float] | None:
    """The one unit of every time column that ``time_unit`` asks for (``None``: one per column)."""
    if time_unit == "auto" and shifted:
        return pick_unit(np.concatenate(list(shifted.values())))
    if time_unit is not None and time_unit != "auto":
        units = dict(TIME_UNITS)
        if time_unit not in units:
            raise ValueError(f"unknown time unit {time_unit!r}; valid: auto, {', '.join(units)}")
        return (time_unit, units[time_unit])
    return None


def flags(col: pd.Series) -> np.ndarray:
    """A yes/no column as a bool array; missing values (NA, None, NaN) count as no.

    Examples
    --------
    >>> flags(pd.Series([True, pd.NA, False], dtype="boolean")).tolist()
    [True, False, False]
    """
    return col.astype(object).where(col.notna(), False).astype(bool).to_numpy()


def _floats(col: pd.Series) -> np.ndarray:
    """A numeric column as float64 with missing values (NaN or ``pd.NA``) as NaN."""
    return col.to_numpy(dtype=np.float64, na_value=np.nan)


def _t0_text(t0: float) -> str:
    if t0 >= 1e17:  # epoch ns (after 1973)
        stamp = pd.Timestamp(int(t0), unit="ns", tz="UTC")
        return stamp.strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    unit, scale = pick_unit(np.array([t0]))
    return f"{_cell(round(t0 / scale, 3))} {unit} on the trace clock"


def shorten(name: str, width: int = 60) -> str:
    """Readable kernel name: template/argument lists elided, then cut to ``width``.

    Examples
    --------
    >>> shorten("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    ...         "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")
    'at::native::vectorized_elementwise_kernel<…>(…)'
    >>> shorten("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", 30)
    'ncclKernel_AllReduce_RING_LL_…'
    """
    s = str(name)
    if len(s) <= width:
        return s
    depth = 0
    out = []
    for ch in s:
        if ch in "<(":
            if depth == 0:
                out.append("<…>" if ch == "<" else "(…)")
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    s2 = "".join(out).strip()
    if s2.startswith("void "):
        s2 = s2[5:]
    return s2 if len(s2) <= width else s2[: width - 1] + "…"


def outer_template(name: str) -> str:
    """The name without return type, argument list elided, template arguments below the first
    level elided: ``void K<a<int>, b>(int)`` → ``K<a<…>, b>(…)``.

    Examples
    --------
    >>> outer_template("void cutlass::Kernel2<gemm_a<int> >(gemm_a<int>::Params)")
    'cutlass::Kernel2<gemm_a<…> >(…)'
    """
    s = name[5:] if name.startswith("void ") else name
    out: list[str] = []
    stack: list[str] = []
    for ch in s:
        if ch in "<(":
            out.append(_opening(ch, stack))
            stack.append(ch)
        elif ch in ">)":
            if stack:
                stack.pop()
                if not stack and ch == ">":
                    out.append(">")
        elif not stack or stack == ["<"]:
            out.append(ch)
    return "".join(out).strip()


def _opening(ch: str, stack: list[str]) -> str:
    """What :func:`outer_template` shows of an opening bracket inside the brackets ``stack``."""
    if not stack:
        return "<" if ch == "<" else "(…)"
    if stack == ["<"]:
        return "<…>" if ch == "<" else "(…)"
    return ""


_SEPARATORS = "_:<>(), .-/"


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _keep_difference(form: str, differs_at: Sequence[int], width: int) -> str:
    """``form`` in at most ``width`` characters keeping its start and the part where it differs
    from the others (``differs_at``: the first position where it differs from each), the common
    middle elided: the head (up to a third of the width, cut after a separator), then the text
    from the word the first difference is in — or, when that does not fit, the last."""
    if len(form) <= width:
        return form
    if max(differs_at) < width - 1:
        return form[: width - 1] + "…"
    head = form[: max(width // 3, 1)]
    cut = max(head.rfind(c) for c in _SEPARATORS)
    if cut + 1 >= width // 6:
        head = head[: cut + 1]
    room = width - len(head) - 1
    tails = []
    for at in (min(differs_at), max(differs_at)):
        start = at
        while start > at - 12 and start > 0 and form[start - 1] not in _SEPARATORS:
            start -= 1
        tails.append(form[start:])
    tail = next((t for t in tails if len(t) <= room), None)
    if tail is None:
        tail = tails[-1][: max(room - 1, 1)] + "…"
    else:  # the head takes the room the difference leaves
        head = form[: width - 1 - len(tail)]
    return head + "…" + tail


def distinct_names(names: Sequence[object], width: int = 60) -> list[str]:
    """A column of names shortened to ``width`` so that different names stay different.

    Every name gets its readable form (:func:`shorten`). Names whose forms collide are shown
    with more of themselves — their first level of template arguments
    (:func:`outer_template`), else the whole name — keeping the part where each differs from
    the most similar one, with the common middle elided (``split_…cta_per_row_1``); names still
    equal get ``[k]``. Equal names stay equal; missing values stay as they are. This is the one
    shortening of a column of names: terminal tables, the quick views, the report's tables and
    charts.

    Examples
    --------
    >>> names = ["split_embedding_backward_codegen_adagrad_kernel_cta_per_row_1",
    ...          "split_embedding_backward_codegen_adagrad_kernel_warp_per_row_1",
    ...          "split_embedding_codegen_forward_unweighted_kernel"]
    >>> distinct_names(names, 22)
    ['split_em…cta_per_row_1', 'split_e…warp_per_row_1', 'split_embedding_codeg…']
    >>> distinct_names(["void cutlass::Kernel2<gemm_a<int> >(gemm_a<int>::Params)",
    ...                 "void cutlass::Kernel2<gemm_b>(gemm_b::Params)"], 32)
    ['cutlass::Kernel2<gemm_a<…> >(…)', 'cutlass::Kernel2<gemm_b>(…)']
    """
    full = ["" if _missing(n) else str(n) for n in names]
    out = [n if _missing(n) else shorten(s, width) for n, s in zip(names, full)]
    for _ in range(2):  # a second pass for names that now collide with another group's
        clashes = _clashes(names, full, out)
        if not clashes:
            break
        for ix in clashes:
            shown = _told_apart(list(dict.fromkeys(full[i] for i in ix)), width)
            for i in ix:
                out[i] = shown[full[i]]
    return _numbered(names, full, out)


def _clashes(names: Sequence[object], full: list[str], out: list) -> list[list[int]]:
    """The positions of each shortened form shared by different names."""
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(out):
        if not _missing(names[i]):
            groups.setdefault(str(s), []).append(i)
    return [ix for ix in groups.values() if len({full[i] for i in ix}) > 1]


def _told_apart(uniq: list[str], width: int) -> dict[str, str]:
    """Names whose short forms collide -> longer forms keeping where each differs from the others."""
    forms = next(
        (
            f
            for f in ([outer_template(u) for u in uniq], [u.removeprefix("void ") for u in uniq])
            if len(set(f)) == len(f)
        ),
        [u.removeprefix("void ") for u in uniq],
    )
    return {
        u: _keep_difference(f, [_common_prefix(f, g) for g in forms if g is not f] or [0], width)
        for u, f in zip(uniq, forms)
    }


def _numbered(names: Sequence[object], full: list[str], out: list) -> list[str]:
    """Different names still shown alike get `` [k]``; equal names keep one text."""
    taken: dict[str, str] = {}  # text shown -> the full name shown so
    label: dict[str, str] = {}  # full name -> its text
    for i, s in enumerate(out):
        if _missing(names[i]):
            continue
        if full[i] not in label:
            text, k = str(s), 1
            while taken.get(text, full[i]) != full[i]:
                k += 1
                text = f"{s} [{k}]"
            taken[text] = label[full[i]] = text
        out[i] = label[full[i]]
    return out


WIDE = 1_000_000
"""The width of a ``--wide`` table: never cut."""


def render(
    df: pd.DataFrame,
    fmt: str = "table",
    *,
    title: str | None = None,
    human: bool = True,
    max_rows: int | None = None,
    short_names: bool = True,
    width: int | None = None,
    time_unit: str | None = None,
    wide: bool = False,
    table: str | None = None,
) -> str:
    """Render a DataFrame as a terminal table, CSV, JSON (records) or Markdown.

    Parameters
    ----------
    df
        Any results table.
    fmt
        ``table`` (rich, for the terminal), ``markdown``, ``csv`` or ``json``. CSV and JSON
        keep raw values (ns, fractions) and full names; CSV text cells that a spreadsheet would
        run as formulas get a leading ``'`` (:func:`dtrace.render.escape.to_csv`). Names are
        escaped in the human formats (control characters, Markdown and HTML syntax).
    title
        Heading of the table (``table`` and ``markdown`` only).
    human
        Readable units in the human formats (``False`` keeps ``*_ns`` in ns).
    max_rows
        Show only the first rows; the human formats say how many were left out. Units are
        chosen from the whole column, so a value prints the same whatever ``max_rows``.
    short_names
        Shorten kernel/op names in the human formats.
    width
        Terminal width (default: the current terminal, see :func:`terminal_width`). Text
        columns are shortened to fit; numbers never are: a table whose numbers cannot fit is
        printed in blocks of columns, each repeating the key columns (rank, device, name, ...).
    time_unit
        One unit for every time column (``"ms"``, ...; ``"auto"`` picks it), instead of one
        per column.
    wide
        ``--wide``: full names and every column in one block, however wide the table.
    table
        The results table ``df`` is (or was cut from): its own absolute-time columns
        (:data:`TABLE_ABSOLUTE_TIMES`) are shown after ``t0`` like ``start_ns``.

    Examples
    --------
    >>> import pandas as pd
    >>> print(render(pd.DataFrame({"rank": [0, 1], "idle_ns": [1_500_000, 2_000_000]}), "markdown"), end="")
    | rank | idle (ms) |
    |---:|---:|
    | 0 | 1.5 |
    | 1 | 2 |
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    if wide:
        short_names, width = False, WIDE
    if fmt in ("csv", "json"):
        return _machine_format(df, fmt, max_rows)
    # units from the whole columns, then the rows shown: a value prints the same whatever max_rows
    view, t0 = humanize_table(df, time_unit, table) if human else (df.copy(), None)
    if max_rows is not None:
        view = view.head(max_rows)
    full = _shorten_names(view) if short_names else {}
    more = _rows_left_out(len(view), len(df), t0)
    numeric = [_is_number(view[c]) for c in view.columns]
    if fmt == "markdown":
        return _markdown(view, numeric, title, more)
    return _terminal(view, numeric, terminal_width() if width is None else max(int(width), 20), title, more, full)


def _is_number(col: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)


def _terminal(
    view: pd.DataFrame, numeric: list[bool], width: int, title: str | None, more: str, full: dict[int, list[str]]
) -> str:
    """The rows of ``view`` as a terminal table of ``width`` columns."""
    heads = [printable(c) for c in view.columns]
    cells = [[printable(_cell(v)) for v in row] for row in view.itertuples(index=False)]
    return _terminal_table(
        heads,
        cells,
        numeric,
        [str(c) for c in view.columns],
        width,
        printable(title) if title else None,
        [more] if more else [],
        full,
    )


def _machine_format(df: pd.DataFrame, fmt: str, max_rows: int | None) -> str:
    """CSV or JSON records of the raw values."""
    part = df.head(max_rows) if max_rows is not None else df
    if fmt == "csv":
        return to_csv(part)
    return (
        json.dumps(json.loads(part.to_json(orient="records", force_ascii=False)), indent=1, ensure_ascii=False) + "\n"
    )


def _shorten_names(view: pd.DataFrame) -> dict[int, list[str]]:
    """Shorten the name columns of ``view`` in place; returns them as they were (by position),
    to be shortened further to fit a terminal."""
    full: dict[int, list[str]] = {}
    for k, c in enumerate(view.columns):
        if c in NAME_COLUMNS and not pd.api.types.is_numeric_dtype(view[c]):
            full[k] = [printable(_cell(v)) for v in view[c]]
            view[c] = pd.Series(distinct_names(view[c].tolist(), 60), index=view.index, dtype=object)
    return full


def _rows_left_out(shown: int, n_all: int, t0: str | None) -> str:
    """The note under a table: rows not shown, and the t0 that times are relative to."""
    more = (
        f"{n_all - shown:,} more rows not shown (showing {shown:,} of {n_all:,}; --top N or --all for more)"
        if shown < n_all
        else ""
    )
    if t0 is not None:
        more = "; ".join(x for x in (more, f"times after t0 = {t0}") if x)
    return more


def _markdown(view: pd.DataFrame, numeric: list[bool], title: str | None, more: str) -> str:
    cols = [markdown_cell(c) for c in view.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    for row in view.itertuples(index=False):
        lines.append("| " + " | ".join(markdown_cell(_cell(v)) for v in row) + " |")
    if more:
        lines.append(f"\n_{more}_")
    return (f"### {markdown_cell(title)}\n\n" if title else "") + "\n".join(lines) + "\n"


def terminal_width() -> int:
    """Columns of the terminal on stdout; ``$COLUMNS``, else 160 when stdout is not a terminal."""
    return max(shutil.get_terminal_size((160, 24)).columns, 20)


#: Columns repeated in every block of a table too wide for the terminal (when they lead it).
KEY_COLUMNS = (
    "#",
    "rank",
    "device",
    "stream",
    "step",
    "level",
    "metric",
    "class",
    "collective",
    "op",
    "name",
    "key",
    "transition",
    "label",
    "group",
    "path",
    "category",
)


def _terminal_table(
    heads: list[str],
    cells: list[list[str]],
    numeric: list[bool],
    names: list[str],
    width: int,
    title: str | None,
    notes: list[str],
    full: dict[int, list[str]] | None = None,
) -> str:
    """The rich table of :func:`render`; ``full``: the unshortened values of name columns, from
    which a name column narrower than 60 characters is shortened (:func:`distinct_names`)."""
    from rich.console import Console
    from rich.text import Text

    blocks = layout(heads, cells, numeric, names, width)
    _fit_blocks(blocks, cells, numeric, names, full or {})
    buf = io.StringIO()
    total = max(sum(w + 3 for w in widths) for _, widths, _ in blocks) + 2
    console = Console(
        file=buf,
        width=max(width, total),
        force_terminal=False,
        color_system=None,
        highlight=False,
        markup=False,
        emoji=False,
    )
    if title:
        console.print(Text(title, style="bold"), overflow="fold", soft_wrap=True)
    for bi, (cols, widths, first) in enumerate(blocks):
        if len(blocks) > 1:
            heading = ", ".join(names[k] for k in cols if k >= first)
            console.print(
                Text(f"[block {bi + 1} of {len(blocks)} (the table is wider than the terminal): columns {heading}]"),
                overflow="fold",
            )
        console.print(_rich_block(heads, cells, numeric, cols, widths))
    for note in notes:
        console.print(Text(note), overflow="fold", soft_wrap=True)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


def _fit_blocks(
    blocks: list[tuple[list[int], list[int], int]],
    cells: list[list[str]],
    numeric: list[bool],
    names: list[str],
    full: dict[int, list[str]],
) -> None:
    """Text shortened to its column's width in each block, in place; numbers never."""
    for cols, widths, _ in blocks:
        for k, w in zip(cols, widths):
            if not numeric[k] and any(len(r[k]) > w for r in cells):
                _fit_column(cells, k, w, names[k] in NAME_COLUMNS, full.get(k))


def _fit_column(cells: list[list[str]], k: int, w: int, is_name: bool, full: list[str] | None) -> None:
    """Shorten text column ``k`` of ``cells`` to ``w`` characters in place; names stay distinct,
    shortened from their full text when given (:func:`distinct_names`)."""
    if is_name:
        for r, s in zip(cells, distinct_names(full or [r[k] for r in cells], w)):
            r[k] = s
        return
    for r in cells:
        if len(r[k]) > w:
            r[k] = r[k][: max(w - 1, 1)] + "…"


def _rich_block(
    heads: list[str], cells: list[list[str]], numeric: list[bool], cols: list[int], widths: list[int]
) -> Table:
    """One block of columns of the table as a rich ``Table``."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    t = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False)
    for k, w in zip(cols, widths):
        t.add_column(
            Text(heads[k]),
            justify="right" if numeric[k] else "left",
            width=w,
            overflow="fold" if numeric[k] else "ellipsis",
            no_wrap=not numeric[k],
        )
    for r in cells:
        t.add_row(*(Text(r[k]) for k in cols))
    return t


def layout(
    heads: list[str], cells: list[list[str]], numeric: list[bool], names: list[str], width: int
) -> list[tuple[list[int], list[int], int]]:
    """How a table is printed in ``width`` columns: ``[(column indices, their widths, first value column)]``.

    One block when the table fits once its text columns are shortened (:func:`column_widths`).
    Otherwise (numbers are never cut) the columns are split into blocks that each fit, and the
    leading key columns (:data:`KEY_COLUMNS`: rank, device, name, ...) are repeated in every block.

    Examples
    --------
    >>> heads = ["rank", "a (ms)", "b (ms)", "c (ms)"]
    >>> row = ["0", "1,234.5", "2,345.5", "3,456.5"]
    >>> [(c, w) for c, w, _ in layout(heads, [row], [True] * 4, ["rank", "a", "b", "c"], 30)]
    [([0, 1, 2], [4, 7, 7]), ([0, 3], [4, 7])]
    """
    n = len(heads)
    widths = column_widths(heads, cells, numeric, width, names)
    if sum(widths) + 3 * n <= width or n <= 1:
        return [(list(range(n)), widths, 0)]
    keys, key_w = _repeated_keys(heads, cells, numeric, names, width)
    used_keys = sum(w + 3 for w in key_w)
    first = len(keys)
    rest = list(range(first, n))
    room = max(width - used_keys - 3, 16)  # a text column may fill a block of its own
    own = [max(len(heads[k]), max((len(r[k]) for r in cells), default=0), 1) for k in rest]
    own = [w if numeric[k] else min(w, room) for k, w in zip(rest, own)]
    blocks: list[tuple[list[int], list[int], int]] = []
    cur: list[int] = []
    cur_w: list[int] = []
    used = used_keys
    for k, w in zip(rest, own):
        if cur and used + w + 3 > width:
            blocks.append((keys + cur, key_w + cur_w, first))
            cur, cur_w, used = [], [], used_keys
        cur.append(k)
        cur_w.append(w)
        used += w + 3
    if cur:
        blocks.append((keys + cur, key_w + cur_w, first))
    return blocks


def _repeated_keys(
    heads: list[str], cells: list[list[str]], numeric: list[bool], names: list[str], width: int
) -> tuple[list[int], list[int]]:
    """The leading key columns repeated in every block and their widths (none when they alone
    would take more than about half the width)."""
    keys: list[int] = []
    for k in range(len(heads) - 1):
        if names[k] not in KEY_COLUMNS:
            break
        keys.append(k)
    if not keys:
        return [], []
    key_w = column_widths(
        [heads[k] for k in keys],
        [[r[k] for k in keys] for r in cells],
        [numeric[k] for k in keys],
        width // 2,
        [names[k] for k in keys],
    )
    if sum(w + 3 for w in key_w) > width // 2 + 8:  # keys alone too wide to repeat: no keys
        return [], []
    return keys, key_w


def column_widths(
    heads: list[str], cells: list[list[str]], numeric: list[bool], width: int, names: Sequence[str] = ()
) -> list[int]:
    """Column widths for a terminal table of ``width`` columns.

    Each column starts at its natural width (header or widest value). While the table is too
    wide, the widest text column gives up space, down to 16 characters (its values are then
    shortened; a name column, :data:`NAME_COLUMNS` by ``names``, down to :data:`NAME_FLOOR`);
    then headers wrap at their spaces. Numbers never shrink below their widest value: a table
    still too wide is printed in blocks of columns by :func:`render`, names kept readable.

    Examples
    --------
    >>> column_widths(["rank", "name", "total (ms)"], [["0", "x" * 90, "12.5"]], [True, False, True], 60)
    [4, 37, 10]
    >>> column_widths(["computation (ms)"], [["1.5"]], [True], 10)
    [11]
    >>> column_widths(["name", "a (ms)"], [["x" * 90, "1" * 120]], [False, True], 160, ["name", "a_ns"])
    [36, 120]
    """
    n = len(heads)
    natural, shrunk, wrapped = _floors(heads, cells, numeric, width, list(names) or [""] * n)
    w = list(natural)
    budget = width - 3 * n  # per column: one space of padding on each side and one separator
    for floors in (shrunk, wrapped):
        excess = sum(w) - budget
        while excess > 0:
            k = max(range(n), key=lambda i: (w[i] - floors[i], -i))
            if w[k] <= floors[k]:
                break
            step = min(excess, w[k] - floors[k])
            w[k] -= step
            excess -= step
    return w


def _floors(
    heads: list[str], cells: list[list[str]], numeric: list[bool], width: int, names: list[str]
) -> tuple[list[int], list[int], list[int]]:
    """:func:`column_widths`' widths: natural, the floors of text shortened (numbers and headers
    whole), and the floors once headers wrap (numbers still whole)."""
    n = len(heads)
    widest = [max((len(r[k]) for r in cells), default=0) for k in range(n)]
    natural = [max(len(h), w, 1) for h, w in zip(heads, widest)]
    word = [max((len(x) for x in h.split()), default=1) for h in heads]
    name_floor = min(NAME_FLOOR, width // 4) if width >= 120 else 16  # narrower: names shrink like any text
    text = [max(min(natural[k], name_floor if names[k] in NAME_COLUMNS else 16), word[k]) for k in range(n)]
    shrunk = [natural[k] if numeric[k] else text[k] for k in range(n)]
    wrapped = [max(widest[k], word[k], 1) if numeric[k] else text[k] for k in range(n)]
    return natural, shrunk, wrapped


def _missing(v: object) -> bool:
    return v is None or v is pd.NA or v is pd.NaT or (isinstance(v, (float, np.floating)) and np.isnan(v))


def _cell(v: object) -> str:
    if _missing(v):
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (float, np.floating)):
        if np.isnan(v):
            return ""
        if abs(v) >= 1e15:
            return f"{v:.3e}"
        s = f"{v:,.3f}".rstrip("0").rstrip(".")
        return "0" if s in ("-0", "") else s
    if isinstance(v, (int, np.integer)):
        return f"{v:,}"
    return str(v)
