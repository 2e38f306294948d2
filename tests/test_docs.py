"""The docs in docs/ stay true to the code.

- Every column an analysis declares (``dtrace.analyses.ANALYSES``) and every column of every
  table ``dtrace analyze`` writes is listed, with its dtype, in docs/semantics.md, "Results
  tables"; and that section lists no column the code does not produce.
- Every ```python block of docs/*.md runs (```py blocks are fragments shown, not run).
- The docs the README links to exist, and the docs cite nothing a maintainer does not have.
"""

from __future__ import annotations

import os
import re

import pytest

import dtrace
from dtrace.analyses import ANALYSES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
SEMANTICS = os.path.join(DOCS, "semantics.md")
# the dtype words of the docs for the declared dtypes and the dtypes read back from OUT
DOC_DTYPE = {"object": "text", "str": "text", "string": "text"}
CONDITIONAL = "only when"  # a documented column that exists only for some inputs says so


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def documented_tables() -> dict[str, dict[str, str]]:
    """``{heading: {column: dtype}}`` of the "Results tables" section; the heading is the table
    name, with its qualifier (```collectives` before matching``) when it has one."""
    section = _read(SEMANTICS).split("\n## Results tables\n", 1)[1].split("\n## ", 1)[0]
    out: dict[str, dict[str, str]] = {}
    current = None
    for line in section.splitlines():
        m = re.match(r"^### `(\w+)`(.*)$", line)
        if m:
            current = m.group(1) + m.group(2).rstrip()
            out[current] = {}
            continue
        row = re.match(r"^\| `([^`]+)` \| (\w+) \|.*\|(.*)\|$", line)
        if row and current is not None:
            out[current][row.group(1)] = row.group(2) + ("?" if CONDITIONAL in row.group(3) else "")
    return out


def doc_dtype(dtype: object) -> str:
    return DOC_DTYPE.get(str(dtype), str(dtype))


def _matches(column: str, documented: dict[str, str]) -> str | None:
    """The documented dtype of ``column``: by name, or by a pattern row (``class_<name>_ns``)."""
    if column in documented:
        return documented[column].rstrip("?")
    for name, dtype in documented.items():
        pattern = ".+".join(re.escape(piece) for piece in re.split(r"<[^>]+>", name))
        if "<" in name and re.fullmatch(pattern, column):
            return dtype.rstrip("?")
    return None


def test_results_section_parsed():
    tables = documented_tables()
    assert len(tables) >= 25 and all(tables.values())
    assert tables["breakdown"]["computation_ns"] == "int64"
    assert tables["kernels"]["gpus"] == "int64?"


def test_every_declared_column_is_documented():
    tables = documented_tables()
    for a in ANALYSES:
        docs = {h: cols for h, cols in tables.items() if h.split(" ")[0] == a.table}
        assert docs, f"table {a.table} is not in docs/semantics.md, 'Results tables'"
        for col, dtype in a.columns.items():
            found = {cols.get(col, "").rstrip("?") for cols in docs.values()}
            assert doc_dtype(dtype) in found, (a.table, col, doc_dtype(dtype), found)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("docs") / "out")
    dtrace.analyze(os.path.join(ROOT, "examples", "traces"), out, scheduler="sync")
    res = dtrace.load(out)
    return {name: res.table(name) for name in res.table_names}


def test_every_written_column_is_documented(written):
    tables = documented_tables()
    assert set(written) <= set(tables), set(written) - set(tables)
    for name, df in written.items():
        for col in df.columns:
            want = _matches(col, tables[name])
            assert want is not None, f"{name}.{col} is not in docs/semantics.md"
            assert doc_dtype(df[col].dtype) == want, (name, col, df[col].dtype, want)


def test_no_documented_column_is_stale(written):
    """A documented column exists in the table written (or says when it does)."""
    for name, cols in documented_tables().items():
        if name not in written:
            continue
        df = written[name]
        for col, dtype in cols.items():
            if "<" in col or dtype.endswith("?"):
                continue
            assert col in df.columns, f"docs/semantics.md lists {name}.{col}, which the table does not have"


def python_blocks() -> list[tuple[str, int, str]]:
    out = []
    for fname in sorted(os.listdir(DOCS)):
        if fname.endswith(".md"):
            text = _read(os.path.join(DOCS, fname))
            for m in re.finditer(r"^```python\n(.*?)^```$", text, re.DOTALL | re.MULTILINE):
                out.append((fname, text[: m.start()].count("\n") + 1, m.group(1)))
    return out


@pytest.mark.parametrize("fname,line,code", python_blocks(), ids=lambda v: str(v)[:40])
def test_python_blocks_run(fname, line, code, monkeypatch):
    monkeypatch.chdir(ROOT)  # examples refer to examples/traces
    namespace = {"__name__": f"docs_{fname[:-3]}_{line}"}
    exec(compile(code, f"docs/{fname}:{line}", "exec"), namespace)  # noqa: S102 - our own docs


def test_docs_exist_and_stand_alone():
    readme = _read(os.path.join(ROOT, "README.md"))
    for name in ("semantics.md", "architecture.md", "extending.md"):
        assert f"docs/{name}" in readme, name
        text = _read(os.path.join(DOCS, name))
        assert "SPEC" not in text and "the seed" not in text.lower(), name
    for name in ("LICENSE", "CHANGELOG.md", "CONTRIBUTING.md"):
        assert os.path.isfile(os.path.join(ROOT, name)), name


def test_semantics_section_titles():
    """Docstrings point to these titles (``see docs/semantics.md, "Gaps"``)."""
    titles = re.findall(r"^## (.+)$", _read(SEMANTICS), re.MULTILINE)
    assert titles == [
        "Event table",
        "GPU categories",
        "Breakdown",
        "Steps",
        "Gaps",
        "Kernels and classes",
        "Memory operations",
        "Launches",
        "Launch queues",
        "Memory",
        "Time series",
        "NVTX ranges",
        "Host op tree and ops",
        "Op performance model",
        "Hardware peaks",
        "Hardware counters",
        "Collectives across ranks",
        "Clock offsets",
        "Ranks and stragglers",
        "What-if",
        "What bounds each step",
        "Compatibility modes",
        "Results tables",
    ]
    cited = set()
    for dirpath, _dirs, files in os.walk(os.path.join(ROOT, "dtrace")):
        for f in files:
            if f.endswith(".py"):
                found = re.findall(r'docs/semantics\.md, "([^"]+)"', _read(os.path.join(dirpath, f)))
                cited |= {" ".join(t.split()) for t in found}  # a title may wrap in a docstring
    assert cited <= set(titles), cited - set(titles)


def documented_units() -> list[tuple[str, str, str]]:
    """``(table, column, unit)`` of every row of the "Results tables" section."""
    section = _read(SEMANTICS).split("\n## Results tables\n", 1)[1].split("\n## ", 1)[0]
    out, current = [], None
    for line in section.splitlines():
        m = re.match(r"^### `(\w+)`", line)
        current = m.group(1) if m else current
        row = re.match(r"^\| `([^`]+)` \| \w+ \| ([^|]*) \|", line)
        if row and current is not None:
            out.append((current, row.group(1), row.group(2).strip()))
    return out


def test_one_unit_convention_in_column_names():
    """Issue 31: ``roofline_pct`` held a fraction next to shares in %. A column's name says its
    unit, and the human formats convert by the name: every fraction is a ``share`` column (shown
    as %), every byte count a ``bytes`` column (shown in KiB/MiB/GiB), every byte rate a
    ``bytes_per_s`` column; no column with another unit has those names."""
    from dtrace.render.text import _BYTES_COLUMN, _RATE_COLUMN, _SHARE_COLUMN

    rows = documented_units()
    assert len(rows) > 500
    for pattern, unit in ((_SHARE_COLUMN, "fraction"), (_BYTES_COLUMN, "bytes"), (_RATE_COLUMN, "bytes/s")):
        wrong = [(t, c, u) for t, c, u in rows if bool(pattern.match(c)) != (u == unit)]
        assert not wrong, (unit, wrong)
