"""Every failure the CLI can meet in the file system or a hand-edited results folder is one line on
stderr with exit code 2, never a traceback (issue 13). Inputs are built here; disk full and
read-only folders are simulated by making the writer raise the OSError the kernel would."""

import errno
import json
import os
import shutil

import pytest
from test_bad_input import GOOD, write

import dtrace
import dtrace.cli.report
import dtrace.results
from dtrace.cli.main import main
from dtrace.results import MANIFEST


def one_line_error(capsys, *needles):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dtrace ") and ": error: " in err, err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, (n, err)
    return err


@pytest.fixture
def trace(tmp_path):
    return write(tmp_path / "rank-0.json", GOOD)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("res")
    out = d / "out"
    dtrace.analyze(write(d / "rank-0.json", GOOD), str(out), scheduler="sync")
    return str(out)


def copy_results(results, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(results, out)
    return str(out)


def test_out_is_a_file(tmp_path, trace, capsys):
    out = tmp_path / "out"
    out.write_text("x")
    assert main(["analyze", trace, "-o", str(out), "--sync"]) == 2
    one_line_error(capsys, str(out), "not a directory")


def test_out_cache_is_a_file(tmp_path, trace, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "cache").write_text("x")
    assert main(["analyze", trace, "-o", str(out), "--sync"]) == 2
    one_line_error(capsys, os.path.join(str(out), "cache"), "not a directory")


def test_out_manifest_is_a_folder(tmp_path, trace, capsys):
    out = tmp_path / "out"
    (out / MANIFEST).mkdir(parents=True)
    assert main(["analyze", trace, "-o", str(out), "--sync"]) == 2
    one_line_error(capsys, MANIFEST, "is a directory")
    for argv in (
        ["show", str(out)],
        ["report", str(out), "-o", str(tmp_path / "r.html")],
        ["diff", str(out), str(out)],
        ["compare", str(out), "-o", str(tmp_path / "c.html")],
    ):
        assert main(argv) == 2, argv
        one_line_error(capsys, MANIFEST, "is a directory")


def test_read_only_out(tmp_path, trace, capsys, monkeypatch):
    def refuse(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "out"))

    monkeypatch.setattr(dtrace.results.tempfile, "mkdtemp", refuse)
    assert main(["analyze", trace, "-o", str(tmp_path / "out"), "--sync"]) == 2
    one_line_error(capsys, "cannot write results", "Permission denied")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_out_for_real(tmp_path, trace, capsys):
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o555)
    try:
        assert main(["analyze", trace, "-o", str(out), "--sync"]) == 2
        one_line_error(capsys, str(out), "not writable")
    finally:
        out.chmod(0o755)


def test_disk_full_while_writing_results_keeps_the_old_ones(tmp_path, trace, capsys, monkeypatch):
    out = tmp_path / "out"
    assert main(["analyze", trace, "-o", str(out), "--sync"]) == 0
    before = json.loads((out / MANIFEST).read_text())["run_id"]
    capsys.readouterr()

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(dtrace.results.pq, "write_table", full)
    assert main(["analyze", trace, "-o", str(out), "--sync", "--recompute"]) == 2
    one_line_error(capsys, str(out), "No space left on device")
    assert not [n for n in os.listdir(out) if n.startswith(".staging-")]
    assert dtrace.load(str(out)).manifest["run_id"] == before  # the previous results are intact


def test_disk_full_while_writing_the_report(tmp_path, results, capsys, monkeypatch):
    def full(path, text):
        with open(path, "w") as f:
            f.write(text[:10])
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(dtrace.cli.common, "_write_file", full)
    target = tmp_path / "report.html"
    assert main(["report", results, "-o", str(target)]) == 2
    one_line_error(capsys, str(target), "No space left on device")
    assert os.listdir(tmp_path) == []  # neither the report nor its temporary file


def test_tree_and_ops_on_invalid_utf8_and_deep_json(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_bytes(
        b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "\xff\xfe", "pid": 0, "tid": 7, '
        b'"ts": 1, "dur": 1, "args": {"device": 0, "stream": 7}}]}'
    )
    deep = tmp_path / "deep.json"
    deep.write_text(
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, '
        '"dur": 1, "args": ' + '{"a": ' * 50_000 + "1" + "}" * 50_000 + "}]}"
    )
    for path in (bad, deep):
        assert main(["ops", str(path)]) == 2
        one_line_error(capsys, str(path))
        assert main(["tree", str(path), "--op", "k"]) == 2
        one_line_error(capsys, str(path))


HAND_EDITS = {
    "tables is a string": {"tables": "breakdown"},
    "tables missing": {"tables": None},
    "inputs not a list": {"inputs": {"a": 1}},
    "an input not an object": {"inputs": [3]},
    "status a number": {"inputs": [{"path": "x", "status": 3}]},
    "error a list": {"inputs": [{"path": "x", "status": "error", "error": ["x"]}]},
    "seconds a string": {"seconds": "fast"},
    "options a list": {"options": [1]},
    "absent tables wrong": {"absent_tables": {"steps": 1}},
    "not an object": [1, 2],
}


@pytest.mark.parametrize("case", sorted(HAND_EDITS))
def test_hand_edited_manifest(tmp_path, results, capsys, case):
    out = copy_results(results, tmp_path)
    path = os.path.join(out, MANIFEST)
    with open(path) as f:
        m = json.load(f)
    edit = HAND_EDITS[case]
    if isinstance(edit, dict):
        for k, v in edit.items():
            if v is None:
                m.pop(k)
            else:
                m[k] = v
    else:
        m = edit
    with open(path, "w") as f:
        json.dump(m, f)
    for argv in (
        ["show", out],
        ["show", out, "breakdown"],
        ["report", out, "-o", str(tmp_path / "r.html")],
        ["compare", out, out, "-o", str(tmp_path / "c.html")],
        ["diff", out, out],
        ["kernels", out],
        ["gaps", out],
        ["ops", out],
    ):
        assert main(argv) == 2, argv
        one_line_error(capsys, MANIFEST, "edited or damaged")


def test_tables_listed_but_absent(tmp_path, results, capsys):
    out = copy_results(results, tmp_path)
    os.unlink(os.path.join(out, "breakdown.parquet"))
    os.unlink(os.path.join(out, "kernels.parquet"))
    for argv in (
        ["show", out, "breakdown"],
        ["report", out, "-o", str(tmp_path / "r.html")],
        ["compare", out, out, "-o", str(tmp_path / "c.html")],
        ["diff", out, out],
        ["kernels", out],
    ):
        assert main(argv) == 2, argv
        one_line_error(capsys, "parquet", "cannot read results table")


def test_show_a_trace_file(trace, capsys):
    assert main(["show", trace]) == 2
    one_line_error(capsys, trace, "is a file, not a results directory")
    assert main(["report", trace, "-o", trace + ".html"]) == 2
    one_line_error(capsys, trace, "is a file, not a results directory")


def test_unknown_format_fails_even_when_the_results_are_up_to_date(tmp_path, trace, capsys):
    """Issue 31: ``analyze T -o O`` then ``--format nope`` exited 0 (the cached path never looked
    at the format)."""
    out = str(tmp_path / "out")
    assert main(["analyze", trace, "-o", out]) == 0
    capsys.readouterr()
    assert main(["analyze", trace, "-o", out, "--format", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown format 'nope'" in err and "kineto" in err and len(err.strip().splitlines()) == 1
