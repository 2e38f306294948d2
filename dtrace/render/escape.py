"""Text that is safe to show: terminals, one-line messages, CSV for spreadsheets, Markdown.

Names and file names come from other people's traces and file systems, so every renderer
passes them through one of these functions before they reach the user:

- :func:`printable` for the terminal and for error messages: control characters (ESC, NUL,
  BEL, newline, ...) and the Unicode bidirectional overrides become visible escapes
  (``\\x1b``, ``\\n``, ``\\u202e``), so a name cannot move the cursor, recolour the terminal or
  split a one-line error;
- :func:`csv_frame` / :func:`to_csv` for CSV: control and invisible characters escaped as for
  the terminal (tabs and line breaks stay, quoted), and a text cell that a spreadsheet would run
  as a formula (it starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return) gets a
  leading ``'``; numbers are never touched;
- :func:`markdown_cell` for Markdown: HTML and Markdown syntax escaped, pipes escaped, one line;
  :func:`markdown_text` for the prose around Markdown tables (lines kept);
- :func:`file_href` for a link to a file: a relative path, percent-encoded, so it can never be
  read as a URL with a scheme (``javascript:``).

Text files written with ``-o`` get the terminal's escaping (:func:`printable` with newlines
kept): ``cat`` on them runs no escape sequence.
"""

from __future__ import annotations

import csv
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas is imported where a frame is escaped: printable() serves `dtrace --help`
    import numpy as np
    import pandas as pd

# C0 controls, DEL, C1 controls, the invisible bidirectional marks/overrides/isolates (U+061C
# Arabic letter mark too), the line and paragraph separators (a terminal or editor breaks the
# line there) and the zero-width characters and byte order mark (invisible text)
_INVISIBLE = "\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff"
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{_INVISIBLE}]")
_CONTROL_NO_NL = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f{_INVISIBLE}]")
# in a CSV cell tabs, newlines and carriage returns are data the writer quotes; the rest is escaped
_CONTROL_CSV = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_INVISIBLE}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: First characters that make a spreadsheet treat a cell as a formula (OWASP CSV injection).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_MD = re.compile(r"([\\`*_\[\]|])")


def _escape_char(m: re.Match[str]) -> str:
    ch = m.group(0)
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` with control characters shown as escapes, for terminals and one-line messages.

    ``keep_newlines`` leaves ``\\n`` alone (multi-line blocks such as a printed tree).

    Examples
    --------
    >>> printable("gemm\\x1b[2J\\x07")
    'gemm\\\\x1b[2J\\\\x07'
    >>> printable("rank-0\\n.json: bad"), printable("a\\u202eb")
    ('rank-0\\\\n.json: bad', 'a\\\\u202eb')
    >>> printable("plain µs → ok"), printable("a\\u2028b\\u061c")
    ('plain µs → ok', 'a\\\\u2028b\\\\u061c')
    """
    s = str(text)
    return (_CONTROL_NO_NL if keep_newlines else _CONTROL).sub(_escape_char, s)


def csv_cell(value: object) -> object:
    """A text value with its control and invisible characters escaped (ESC, BEL, U+202E: as the
    terminal shows them), and a leading ``'`` where a spreadsheet would evaluate it; anything else
    is kept.

    Examples
    --------
    >>> csv_cell("=HYPERLINK(\\"http://x\\")"), csv_cell("-1"), csv_cell("gemm"), csv_cell(-1)
    ('\\'=HYPERLINK("http://x")', "'-1", 'gemm', -1)
    >>> csv_cell("k\\x1b[2J\\x07\\u202e")
    'k\\\\x1b[2J\\\\x07\\\\u202e'
    """
    if not isinstance(value, str):
        return value
    value = _CONTROL_CSV.sub(_escape_char, value)
    return "'" + value if value.startswith(FORMULA_START) else value


def csv_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every text cell passed through :func:`csv_cell` (numeric columns untouched).

    Only columns holding text (object, string or categorical of strings) are checked, and only
    their distinct values, so this costs little on large tables.
    """
    import pandas as pd

    out = df
    for c in df.columns:
        col = df[c]
        if pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col):
            continue
        fixed = _safe_categories(col) if isinstance(col.dtype, pd.CategoricalDtype) else _safe_values(col)
        if fixed is not None:
            out = out.copy() if out is df else out
            out[c] = fixed
    return out


def _safe_categories(col: pd.Series) -> pd.Series | None:
    """A categorical column of text with its categories neutralised (``None``: nothing to do)."""
    import pandas as pd

    cats = col.cat.categories
    if cats.dtype != object and not pd.api.types.is_string_dtype(cats):
        return None
    fixed = [csv_cell(v) for v in cats]
    if any(a is not b for a, b in zip(fixed, cats)):
        return col.cat.rename_categories(fixed)
    return None


def _safe_values(col: pd.Series) -> np.ndarray | None:
    """A text column's values with the formula cells neutralised (``None``: nothing to do)."""
    import pandas as pd

    values = col.to_numpy(dtype=object)
    uniq = pd.unique(values)
    fixed = {v: csv_cell(v) for v in uniq if isinstance(v, str)}
    risky = {v: f for v, f in fixed.items() if f != v}
    if not risky:
        return None
    bad = pd.Series(values).isin(list(risky)).to_numpy()
    values = values.copy()
    values[bad] = [risky[v] for v in values[bad]]
    return values


def to_csv(df: pd.DataFrame) -> str:
    """CSV text of ``df`` (no index) with formula cells neutralised (:func:`csv_frame`).

    Lines end in ``\\n``. Python's CSV writer does not quote a field holding a bare carriage
    return, which readers would take as a line break, so when a text cell holds one, every text
    cell is quoted (``csv.QUOTE_NONNUMERIC``); numbers stay unquoted either way.
    """
    from pandas.api.types import is_numeric_dtype

    safe = csv_frame(df)
    text_cols = [c for c in safe.columns if not is_numeric_dtype(safe[c])]
    has_cr = any(safe[c].astype(str).str.contains("\r", regex=False).any() for c in text_cols)
    return safe.to_csv(index=False, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC if has_cr else csv.QUOTE_MINIMAL)


def markdown_text(text: object) -> str:
    """Prose for a Markdown document: every line escaped as :func:`markdown_cell` does, lines kept.

    Examples
    --------
    >>> print(markdown_text("<dtrace.Results <img src=x>: 2 inputs>\\nresults: a_b"))
    &lt;dtrace.Results &lt;img src=x&gt;: 2 inputs&gt;
    results: a\\_b
    """
    return "\n".join(markdown_cell(line) for line in str(text).split("\n"))


def prose(text: object, fmt: str) -> str:
    """Text between tables (notes, error lists) in a human format: Markdown-escaped in a Markdown
    document (:func:`markdown_text`), terminal-escaped otherwise (:func:`printable`, lines kept)."""
    return markdown_text(text) if fmt == "markdown" else printable(text, keep_newlines=True)


def file_href(path: str) -> str:
    """A link to a file at ``path`` (relative to the page): percent-encoded, starting with ``./``
    or ``../``, so a browser reads it as a file path and never as a URL (``javascript:``, ``http:``).

    Examples
    --------
    >>> file_href("javascript:alert(1)"), file_href("../runs/slow step.json.gz")
    ('./javascript%3Aalert%281%29', '../runs/slow%20step.json.gz')
    """
    from urllib.parse import quote

    href = quote(str(path).replace("\\", "/"), safe="/")
    return href if href.startswith(("./", "../")) else "./" + href.lstrip("/")


def markdown_cell(text: object) -> str:
    """One Markdown table cell: HTML and Markdown syntax escaped, control characters shown.

    Examples
    --------
    >>> markdown_cell("<img src=x onerror=alert(1)> a|b *c* [l](u)")
    '&lt;img src=x onerror=alert(1)&gt; a\\\\|b \\\\*c\\\\* \\\\[l\\\\](u)'
    """
    s = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return printable(_MD.sub(r"\\\1", s))
