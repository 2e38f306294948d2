"""The layer contract (pyproject.toml, ``[tool.importlinter]``): every import points down, no cycles.

The contract is checked by import-linter on the package as it is, and on a copy with one
deliberate upward import, which it must refuse.
"""

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINT = "from importlinter.cli import lint_imports; raise SystemExit(lint_imports(no_cache=True))"


def _lint(root):
    env = {**os.environ, "PYTHONPATH": root}
    return subprocess.run([sys.executable, "-c", LINT], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_imports_follow_the_layers():
    pytest.importorskip("importlinter")
    run = _lint(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 kept, 0 broken" in run.stdout


@pytest.mark.parametrize(
    "module, line, broken",
    [
        ("dtrace/schema.py", "from .readers import detect", "dtrace.schema is not allowed to import dtrace.readers"),
        (
            "dtrace/reduce/ranks.py",
            "from ..results import load",
            "dtrace.reduce is not allowed to import dtrace.results",
        ),
        ("dtrace/readers/_io.py", "from . import kineto", "No cycles are allowed in dtrace.readers"),
    ],
)
def test_an_upward_import_or_a_cycle_breaks_the_contract(tmp_path, module, line, broken):
    pytest.importorskip("importlinter")
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path)
    shutil.copytree(os.path.join(ROOT, "dtrace"), tmp_path / "dtrace", ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n\ndef _scratch():\n    {line}\n")
    run = _lint(str(tmp_path))
    assert run.returncode != 0
    assert broken in run.stdout
