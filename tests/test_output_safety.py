"""Hostile names and file names in every output: CSV formula injection, Markdown/HTML, terminal
escapes, one-line errors (issue 13). The inputs are built here; what "safe" means is spelled out
in each assertion (a leading ``'``, an escape sequence shown as text, one line)."""

import csv
import io
import json

import pandas as pd
import pytest
from test_bad_input import GOOD, write

from dtrace.cli.main import main
from dtrace.render.escape import csv_frame, markdown_cell, printable
from dtrace.render.text import render
from dtrace.results import write_results

#: names a spreadsheet would run, and names that drive a terminal
FORMULAS = ['=HYPERLINK("http://evil","x")', "+1+2", "-2+3", "@SUM(A1)", "\tcmd", "\rcmd"]
TERMINAL = ["gemm\x1b[2J\x1b]0;owned\x07", "nul\x00kernel", "two\nlines", "[/x] :thumbs_up: [bold]b"]


def kernels_frame(names):
    n = len(names)
    return pd.DataFrame(
        {
            "rank": [0] * n,
            "device": [0] * n,
            "name": names,
            "class": ["gemm"] * n,
            "category": ["compute"] * n,
            "kind": ["kernel"] * n,
            "count": list(range(1, n + 1)),
            "total_ns": [-5] + [1000 * (i + 1) for i in range(1, n)],
        }
    )


def results_dir(tmp_path, names, sub="r"):
    out = tmp_path / sub
    k = kernels_frame(names)
    classes = k.groupby(["rank", "device", "class"], as_index=False)[["count", "total_ns"]].sum()
    write_results(str(out), {"kernels": k, "classes": classes}, {"inputs": []})
    return str(out)


def neutralised(cell: str, original: str) -> bool:
    return cell == "'" + original


def test_csv_cells_neutralised_numbers_kept():
    df = pd.DataFrame(
        {
            "name": FORMULAS + ["plain", None],
            "n": [-1, 2, -3, 4, 5, 6, -7, 8],
            "cat": pd.Categorical(FORMULAS + ["plain", "plain"]),
        }
    )
    rows = list(csv.reader(io.StringIO(render(df, "csv"))))
    assert rows[0] == ["name", "n", "cat"]
    for row, name in zip(rows[1:], FORMULAS):
        assert neutralised(row[0], name) and neutralised(row[2], name), row
    assert [r[1] for r in rows[1:]] == ["-1", "2", "-3", "4", "5", "6", "-7", "8"]  # numbers untouched
    assert rows[7][0] == "plain" and rows[8][0] == ""
    assert csv_frame(df)["n"].tolist() == df["n"].tolist()


def test_cli_csv_writers_neutralise(tmp_path, capsys):
    a = results_dir(tmp_path, FORMULAS, "a")
    b = results_dir(tmp_path, ["x"] + FORMULAS[1:], "b")
    assert main(["show", a, "kernels", "--fmt", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["name"] for r in rows] == ["'" + n for n in FORMULAS]
    assert rows[0]["total_ns"] == "-5"
    assert main(["diff", a, b, "--level", "kernel", "-o", str(tmp_path / "d.csv")]) == 0
    with open(tmp_path / "d.csv", newline="") as f:
        keys = [r["key"] for r in csv.DictReader(f)]
    assert sorted(keys) == sorted(["'" + n for n in FORMULAS] + ["x"])
    assert main(["compare", a, b, "-o", str(tmp_path / "c.html"), "--category-csv", str(tmp_path / "c.csv")]) == 0
    with open(tmp_path / "c.csv", newline="") as f:
        names = {r["name"] for r in csv.DictReader(f)}
    assert names == {"'" + n for n in FORMULAS} | {"x"}
    capsys.readouterr()


def test_cli_kernels_csv_from_a_trace(tmp_path, capsys):
    doc = json.loads(json.dumps(GOOD))
    doc["traceEvents"][0]["name"] = "=cmd|' /C calc'!A0"
    p = write(tmp_path / "rank-0.json", doc)
    assert main(["kernels", p, "--fmt", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows[0]["name"] == "'=cmd|' /C calc'!A0"
    out = tmp_path / "k.csv"
    assert main(["kernels", p, "-o", str(out)]) == 0
    with open(out, newline="") as f:
        assert next(csv.DictReader(f))["name"] == "'=cmd|' /C calc'!A0"
    capsys.readouterr()


def test_markdown_escapes_html_and_pipes():
    df = pd.DataFrame(
        {"name": ["<script>alert(1)</script>", "a|b", "![x](http://evil/t.png)", "l1\nl2"], "total_ns": [1, 2, 3, 4]}
    )
    md = render(df, "markdown", title="<b>t</b>")
    assert "<script>" not in md and "&lt;script&gt;" in md and "<b>" not in md
    assert "a\\|b" in md and "![x](" not in md and "\\!" not in md
    body = md.split("\n")
    assert all(line.count("|") - line.count("\\|") in (0, 3) for line in body)  # 2 columns: 3 pipes per row
    assert markdown_cell("l1\nl2") == "l1\\nl2"


def test_terminal_table_shows_control_characters_escaped(capsys, tmp_path):
    text = render(
        pd.DataFrame({"name": TERMINAL, "total_ns": [1, 2, 3, 4]}), "table", title="t\x1b[31m", short_names=False
    )
    assert "\x1b" not in text and "\x00" not in text and "\x07" not in text
    assert "gemm\\x1b[2J\\x1b]0;owned\\x07" in text and "nul\\x00kernel" in text and "two\\nlines" in text
    assert "[/x] :thumbs_up: [bold]b" in text  # names are not read as rich markup or emoji codes
    a = results_dir(tmp_path, TERMINAL)
    assert main(["show", a, "kernels"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b" in out


def test_errors_and_summary_stay_one_line(tmp_path, capsys):
    d = tmp_path / "job"
    d.mkdir()
    write(d / "rank-0.json", GOOD)
    bad = d / "rank-1\n\x1b[2Jevil.json"
    bad.write_text("{ not json")
    rc = main(["analyze", str(d), "-o", str(tmp_path / "out"), "--sync"])
    assert rc == 1
    cap = capsys.readouterr()
    assert "\x1b" not in cap.out + cap.err
    failed = [line for line in cap.out.splitlines() if "evil.json" in line]
    assert len(failed) == 1 and "rank-1\\n\\x1b[2Jevil.json" in failed[0]
    missing = tmp_path / "no\nsuch\x07dir"
    assert main(["show", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no\\nsuch\\x07dir" in err and "\x07" not in err


@pytest.mark.parametrize(
    "s,want",
    [
        ("a\x1bb", "a\\x1bb"),
        ("\x7f\x9b", "\\x7f\\x9b"),
        ("\u202eabc", "\\u202eabc"),
        ("tab\there", "tab\\there"),
        ("µs → ✓", "µs → ✓"),
    ],
)
def test_printable(s, want):
    assert printable(s) == want
