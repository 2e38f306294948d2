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
