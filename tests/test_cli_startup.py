"""``dtrace --help`` starts without the data libraries: the CLI imports them inside the commands.

``python -X importtime`` lists every module a process imports (one line each, on stderr), so
the test reads the import list of a real ``python -m dtrace ... --help`` process.
"""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("pandas", "pyarrow", "numpy", "dask")
COMMANDS = ["analyze", "kernels", "gaps", "show", "report", "compare", "diff", "timeline", "whatif", "tree", "ops"]
COMMANDS += ["synth", "nsys-stats", "perf"]


def _imported(*argv: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": ROOT}
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "dtrace", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "usage: dtrace" in run.stdout
    # lines look like "import time:       412 |        412 |   pandas.core"
    return {m.group(1) for m in re.finditer(r"^import time:.*\|\s*(\S+)\s*$", run.stderr, re.MULTILINE)}


@pytest.mark.parametrize("argv", [["--help"], *([c, "--help"] for c in COMMANDS)], ids=lambda a: " ".join(a))
def test_help_imports_no_data_library(argv):
    imported = _imported(*argv)
    assert "dtrace.cli.main" in imported  # the import list was read
    heavy = sorted(m for m in imported if m.split(".")[0] in HEAVY)
    assert not heavy, f"dtrace {' '.join(argv)} imported {heavy[:5]}"


# -- an up-to-date ``dtrace analyze``: decided and printed without pandas -----------------------
EXAMPLE = os.path.join(ROOT, "examples", "traces")


def _analyze(out: str, *flags: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """``python -X importtime -m dtrace analyze examples/traces -o OUT``: the process and what it imported."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "dtrace", "analyze", EXAMPLE, "-o", out, "--sync", *flags],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    mods = {m.group(1) for m in re.finditer(r"^import time:.*\|\s*(\S+)\s*$", run.stderr, re.MULTILINE)}
    run.stderr = "".join(line for line in run.stderr.splitlines(True) if not line.startswith("import time:"))
    return run, mods


@pytest.mark.parametrize("fmt", ["table", "json", "csv", "markdown"])
def test_up_to_date_analyze_imports_no_data_library(tmp_path, fmt):
    """The second run of the same command finds the results up to date from small JSON files
    (``OUT/summary.json``, the manifest, the inputs' and tables' fingerprints) and prints
    exactly what the ordinary path prints for up-to-date results (made to run by removing the
    stored summary), importing none of pandas, pyarrow, NumPy, Dask."""
    out = str(tmp_path / "out")
    first, heavy_first = _analyze(out, "--fmt", fmt)
    assert "pandas" in heavy_first  # the first run analysed (the import list is read)
    fast, imported = _analyze(out, "--fmt", fmt)
    assert "dtrace.cli.uptodate" in imported
    heavy = sorted(m for m in imported if m.split(".")[0] in HEAVY)
    assert not heavy, f"an up-to-date dtrace analyze imported {heavy[:5]}"
    os.unlink(os.path.join(out, "summary.json"))
    slow, imported_slow = _analyze(out, "--fmt", fmt)
    assert "pandas" in imported_slow  # the ordinary path decided
    assert (fast.stdout, fast.stderr) == (slow.stdout, slow.stderr)
    text = slow.stderr if fmt in ("json", "csv") else slow.stdout
    assert "results up to date" in text.splitlines()[0]
    if fmt == "csv":  # the same per-GPU breakdown as the first run printed
        assert fast.stdout == first.stdout


def test_stored_summary_is_not_trusted_blindly(tmp_path):
    """The fast path answers only for its own manifest and unchanged inputs and settings: a stored
    summary edited by hand is not printed once the manifest changes; other settings, a touched
    input and a damaged table go the ordinary way (which analyses again where needed)."""
    import json
    import shutil

    traces = tmp_path / "traces"
    shutil.copytree(EXAMPLE, traces)
    out = str(tmp_path / "out")

    def run(*flags: str) -> tuple[str, set[str]]:
        r = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "dtrace", "analyze", str(traces), "-o", out, "--sync", *flags],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": ROOT},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout, {m.group(1) for m in re.finditer(r"\|\s*(\S+)\s*$", r.stderr, re.MULTILINE)}

    run()
    stored = os.path.join(out, "summary.json")
    with open(stored, encoding="utf-8") as f:
        doc = json.load(f)
    doc["output"]["table"] = "\nforged 1.23e9 \x1b[2J\x07\n"
    with open(stored, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    text, mods = run()
    # issue 31: the edited text has no valid MAC under the user's key: the tables are printed
    assert "forged" not in text and "pandas" in mods and "results up to date" in text
    text, mods = run()
    assert "pandas" not in mods and "results up to date" in text  # stored again, with its MAC
    # a stored text with a valid MAC still reaches the terminal escaped
    from dtrace.cli.uptodate import _mac, _summary_key

    with open(stored, encoding="utf-8") as f:
        doc = json.load(f)
    body = doc["output"]["table"] + "name \x1b[2J\x07\u202e\n"
    doc["output"]["table"] = body
    doc["mac"]["table"] = _mac(_summary_key(), doc["manifest"], doc["material"], "table", body)
    with open(stored, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    text, mods = run()
    assert "pandas" not in mods and "name \\x1b[2J\\x07\\u202e" in text and "\x1b" not in text
    manifest = os.path.join(out, "manifest.json")
    with open(manifest, "a", encoding="utf-8") as f:
        f.write(" ")  # another manifest (same content): the stored summary is not for it
    text, mods = run()
    assert "forged" not in text and "pandas" in mods and "results up to date" in text
    text, mods = run("--linked-only")  # other settings: analysed again
    assert "pandas" in mods and "results up to date" not in text
    text, mods = run("--linked-only")
    assert "pandas" not in mods and "results up to date" in text
    victim = traces / "sampled_rank-0.json.gz"
    os.utime(victim)  # same bytes, new mtime: the ordinary path fingerprints it
    text, mods = run("--linked-only")
    assert "pandas" in mods
    text, mods = run("--linked-only")
    assert "pandas" not in mods and "results up to date" in text
    with open(os.path.join(out, "breakdown.parquet"), "ab") as f:
        f.write(b"x")  # a damaged table: not up to date, analysed again
    text, mods = run("--linked-only")
    assert "pandas" in mods and "results up to date" not in text


def test_the_command_leaves_without_teardown_but_finishes_what_exit_would():
    """``dtrace`` ends with ``os._exit`` (no interpreter teardown), after what a normal exit does:
    the other threads that are not daemons end, the ``atexit`` handlers run (in the order
    Python runs them, last registered first) and buffered output is flushed."""
    code = (
        "import atexit, sys, threading, time\n"
        "from dtrace.cli.main import leave\n"
        "atexit.register(lambda: sys.stdout.write('first registered, run last\\n'))\n"
        "atexit.register(lambda: sys.stdout.write('last registered, run first\\n'))\n"
        "threading.Thread(target=lambda: (time.sleep(0.3), sys.stdout.write('thread done\\n'))).start()\n"
        "sys.stdout.write('buffered, no newline')\n"
        "leave(3)\n"
        "sys.stdout.write('never reached')\n"
    )
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": ""}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 3, run.stderr
    assert run.stdout == ("buffered, no newlinethread done\nlast registered, run first\nfirst registered, run last\n")


def test_the_command_leaves_quietly_when_its_reader_is_gone(tmp_path):
    """``dtrace ... | head -1``: the pipe closes early; the command ends without a traceback."""
    sh = f"{sys.executable} -m dtrace --help | head -1"
    run = subprocess.run(
        ["sh", "-c", sh], env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=60
    )
    assert run.stdout.startswith("usage: dtrace") and "Traceback" not in run.stderr, run.stderr
