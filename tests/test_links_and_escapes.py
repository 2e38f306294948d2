"""Links are relative file paths, Markdown prose is escaped, text files get the terminal's
escaping (issue 19, item 17).

``dtrace report --timeline 'javascript:alert(1)'`` made that URL a link; ``--fmt markdown``
printed a results folder's name (``<img src=x onerror=...>``) as raw HTML; ``kernels -o k.txt``
wrote ESC, CR and DEL bytes of kernel names into the file, so ``cat k.txt`` ran them.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
from test_bad_input import GOOD

import dtrace
from dtrace.cli.main import main
from dtrace.generate.synth import generate

HOSTILE = "<img src=x onerror=alert(1)>"
#: A DCS query (ESC P ... ESC \), a carriage return that hides what came before, a DEL.
NASTY = "gemm\x1bP$q m\x1b\\\r\x7fhidden"


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    d = tmp_path_factory.mktemp("esc")
    generate(str(d / "job"), ranks=2, steps=2, seed=3, kernels_per_step=8)
    dtrace.analyze(str(d / "job"), str(d / "out"), scheduler="sync")
    return d


def test_timeline_link_is_a_relative_file_path(analysed, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = str(analysed / "out")
    assert main(["report", out, "-o", "r.html", "--timeline", "javascript:alert(1)"]) == 0
    html = (tmp_path / "r.html").read_text()
    hrefs = re.findall(r'href="([^"]*)"', html)
    assert hrefs, "the report links nothing"
    for h in hrefs:  # an anchor, or a relative path: never a URL with a scheme
        assert h.startswith(("#", "./", "../")) and not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", h), h
    assert 'href="./javascript%3Aalert%281%29"' in html
    capsys.readouterr()


def test_markdown_escapes_the_results_folder_name(analysed, tmp_path, capsys):
    out = tmp_path / HOSTILE
    shutil.copytree(analysed / "out", out)
    for argv in (
        ["show", str(out), "--fmt", "markdown"],
        ["analyze", str(analysed / "job"), "-o", str(out), "--fmt", "markdown"],
        ["kernels", str(out), "--fmt", "markdown", "--classmap", str(tmp_path / f"{HOSTILE}.json")],
    ):
        if "--classmap" in argv:  # an option value shown in the options note
            (tmp_path / f"{HOSTILE}.json").write_text(json.dumps({"gemm": "gemm"}))
            assert main(["analyze", str(analysed / "job"), "-o", str(out), "--classmap", argv[-1]]) == 0
            capsys.readouterr()
        assert main(argv) == 0
        printed = capsys.readouterr().out
        assert "<img" not in printed and "&lt;img" in printed, printed[:400]


def test_text_files_get_the_terminals_escaping(tmp_path, capsys):
    doc = json.loads(json.dumps(GOOD))
    doc["traceEvents"][0]["name"] = NASTY
    second = dict(doc["traceEvents"][0], ts=130.0, args=dict(doc["traceEvents"][0]["args"], correlation=2))
    doc["traceEvents"].append(second)
    trace = tmp_path / "rank-0.json"
    trace.write_text(json.dumps(doc))
    for cmd, name in (("kernels", "k.txt"), ("gaps", "g.txt")):
        assert main([cmd, str(trace), "-o", str(tmp_path / name)]) == 0
        data = (tmp_path / name).read_bytes()
        assert not set(data) & {0x1B, 0x0D, 0x7F}, data
        assert b"gemm\\x1bP$q m\\x1b\\\\r\\x7fhidden" in data  # ESC, then the backslash, then CR
    # the machine formats keep the name whole (CSV/JSON readers are not terminals)
    assert main(["kernels", str(trace), "-o", str(tmp_path / "k.json")]) == 0
    assert json.loads((tmp_path / "k.json").read_text())[0]["name"] == NASTY
    capsys.readouterr()


EVIL_DEVICE = "<img src=x onerror=alert(1)> \x1b[31mRED\x07\u202e\u061c\u2028end"


@pytest.fixture(scope="module")
def evil_device(tmp_path_factory):
    """A real H200 trace whose device name holds HTML, ESC, BEL and invisible characters."""
    import gzip
    import os

    d = tmp_path_factory.mktemp("evil")
    src = os.path.join(os.path.dirname(__file__), "data", "h200", "ops_rank0.pt.trace.json.gz")
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    doc["deviceProperties"][0]["name"] = EVIL_DEVICE
    path = d / "rank-0.json"
    path.write_text(json.dumps(doc))
    return str(path), str(d / "out")


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if c in "\x1b\x07\u202e\u061c\u2028"]


def test_csv_and_markdown_escape_names_from_traces(evil_device, capsys):
    """Issue 31: ``show --fmt csv`` kept ESC, BEL and U+202E raw on stdout, ``analyze --fmt markdown``
    printed a trace's device name as raw HTML, and U+061C and U+2028 reached the terminal."""
    path, out = evil_device
    assert main(["analyze", path, "-o", out, "--fmt", "markdown"]) == 0
    md = capsys.readouterr().out
    assert HOSTILE not in md and "&lt;img src=x" in md and not _raw_controls(md)
    assert main(["show", out, "devices", "--fmt", "csv"]) == 0
    csv_out = capsys.readouterr().out
    assert not _raw_controls(csv_out) and "\\x1b[31mRED\\x07\\u202e\\u061c\\u2028end" in csv_out
    assert main(["show", out, "devices"]) == 0
    assert not _raw_controls(capsys.readouterr().out)
    assert main(["diff", out, out, "--fmt", "csv"]) in (0, 1)
    assert not _raw_controls(capsys.readouterr().out)
