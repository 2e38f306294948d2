"""The layer contract (pyproject.toml, ``[tool.importlinter]``): every import points down, no cycles.

The contract is checked by import-linter on the package as it is, and on a copy with one
deliberate upward import, which it must refuse. docs/architecture.md describes the same layers:
its layer table must equal the contract's layers, and its module table must name every module
and subpackage of ``dtrace/``; both are checked here, and a change to one side alone fails.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINT = "from importlinter.cli import lint_imports; raise SystemExit(lint_imports(no_cache=True))"

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    tomllib = None


def _lint(root):
    env = {**os.environ, "PYTHONPATH": root}
    return subprocess.run([sys.executable, "-c", LINT], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def _contracts(pyproject_text):
    if tomllib is None:  # pragma: no cover - Python 3.10
        pytest.skip("reading pyproject.toml takes tomllib (Python 3.11)")
    return tomllib.loads(pyproject_text)["tool"]["importlinter"]["contracts"]


def test_imports_follow_the_layers():
    pytest.importorskip("importlinter")
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        n = len(_contracts(f.read()))
    run = _lint(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{n} kept, 0 broken" in run.stdout


@pytest.mark.parametrize(
    "module, line, broken",
    [
        # a lower layer imports a higher one
        (
            "dtrace/core/schema.py",
            "from ..readers import detect",
            "dtrace.core is not allowed to import dtrace.readers",
        ),
        # two members of one layer are independent
        (
            "dtrace/reduce/ranks.py",
            "from ..results import load",
            "dtrace.reduce is not allowed to import dtrace.results",
        ),
        # the order inside a subpackage
        (
            "dtrace/ingest/remote.py",
            "from .cache import ingest",
            "dtrace.ingest.remote is not allowed to import dtrace.ingest.cache",
        ),
        (
            "dtrace/analyses/batch.py",
            "from .kernels import kernel_stats",
            "dtrace.analyses.batch is not allowed to import dtrace.analyses.kernels",
        ),
        (
            "dtrace/knowledge/hardware.py",
            "from .classify import load_classmap",
            "dtrace.knowledge.hardware is not allowed to import dtrace.knowledge.classify",
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


# --- docs/architecture.md against the contract and the package ------------------------------------


def _section(doc, title):
    start = doc.index(f"\n## {title}\n")
    end = doc.find("\n## ", start + 1)
    return doc[start : end if end >= 0 else len(doc)]


def _rows(section):
    """The cells of every row of the markdown tables in ``section`` (header and rule rows included)."""
    return [
        [c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines() if line.startswith("|")
    ]


def documented_layers(doc):
    """The layer table of docs/architecture.md, top first: one set of members per layer."""
    rows = [r for r in _rows(_section(doc, "Layers")) if r[0].isdigit()]
    numbers = [int(r[0]) for r in rows]
    assert numbers == sorted(numbers, reverse=True), f"the layer table is not numbered top to bottom: {numbers}"
    return [set(re.findall(r"`([\w.]+)`", r[1])) for r in rows]


def contract_layers(pyproject_text):
    """The layers of the main contract (id ``layers``), top first: one set of members per layer."""
    (main,) = [c for c in _contracts(pyproject_text) if c["id"] == "layers"]
    return [{m.strip() for m in re.split(r"[|:]", layer)} for layer in main["layers"]]


def package_members(package_dir, pyproject_text):
    """What the module table must name: every module and subpackage of ``dtrace/`` (``__init__`` and
    ``__main__`` aside), and every module of each subpackage that has a contract of its own."""

    def children(folder):
        out = []
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if name.endswith(".py") and name not in ("__init__.py", "__main__.py"):
                out.append(name[:-3])
            elif os.path.isfile(os.path.join(path, "__init__.py")):
                out.append(name)
        return out

    members = [("", m) for m in children(package_dir)]
    inner = set()
    for c in _contracts(pyproject_text):
        inner.update(x.split(".")[1] for x in c.get("containers", []) + c.get("modules", []) if x.count(".") >= 1)
    for pkg in sorted(inner):
        members += [(pkg, m) for m in children(os.path.join(package_dir, pkg))]
    return members


def undocumented(doc, members):
    """The members the module table of docs/architecture.md does not name: a module is named by its
    path (``dtrace/ingest/cache.py``), a subpackage by its path or one of its modules' paths
    (``dtrace/readers/``, ``dtrace/core/units.py``), and a module of a subpackage also by its name
    in backticks in the row of its package (```breakdown``` in the row of ``dtrace/analyses/``)."""
    rows = [r for r in _rows(_section(doc, "Modules")) if len(r) == 3]
    table = "\n".join(" | ".join(r) for r in rows)
    missing = []
    for pkg, m in members:
        base = f"dtrace/{pkg}/" if pkg else "dtrace/"
        if f"`{base}{m}.py`" in table or f"`{base}{m}/" in table:  # a subpackage, or one of its modules
            continue
        in_row = any(f"`{base}" in r[1] and (f"`{m}`" in " ".join(r) or f"`{m}.py`" in " ".join(r)) for r in rows)
        if not (pkg and in_row):
            missing.append(base + m)
    return missing


def architecture_problems(root):
    """Every way docs/architecture.md disagrees with pyproject.toml's contract and the package."""
    with open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8") as f:
        doc = f.read()
    with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as f:
        pyproject = f.read()
    problems = []
    documented, contract = documented_layers(doc), contract_layers(pyproject)
    if documented != contract:
        problems.append(f"layer table {documented} != contract {contract}")
    (main,) = [c for c in _contracts(pyproject) if c["id"] == "layers"]
    shared = [layer for layer in main["layers"] if ":" in layer]
    if shared:  # the page says the members of a layer are independent
        problems.append(f"layers whose members may import each other: {shared}")
    missing = undocumented(doc, package_members(os.path.join(root, "dtrace"), pyproject))
    if missing:
        problems.append(f"not in the module table: {missing}")
    return problems


def test_architecture_page_matches_the_contract_and_the_package():
    assert architecture_problems(ROOT) == []


def _edit(path, old, new):
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(
    "change",
    ["contract: two layers swap", "contract: a member moves", "doc: a member left out", "package: a new module"],
)
def test_a_change_on_one_side_alone_is_caught(tmp_path, change):
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path)
    shutil.copytree(os.path.join(ROOT, "docs"), tmp_path / "docs")
    shutil.copytree(os.path.join(ROOT, "dtrace"), tmp_path / "dtrace", ignore=shutil.ignore_patterns("__pycache__"))
    assert architecture_problems(str(tmp_path)) == []
    if change == "contract: two layers swap":
        _edit(tmp_path / "pyproject.toml", '    "ingest",\n    "readers",\n', '    "readers",\n    "ingest",\n')
    elif change == "contract: a member moves":
        _edit(tmp_path / "pyproject.toml", '"partitions | reduce | results"', '"partitions | reduce"')
        _edit(tmp_path / "pyproject.toml", '"knowledge | options"', '"knowledge | options | results"')
    elif change == "doc: a member left out":
        _edit(tmp_path / "docs" / "architecture.md", "| `explore` |", "| |")
    else:
        (tmp_path / "dtrace" / "ingest" / "fetch.py").write_text('"""A module the page does not name."""\n')
    problems = architecture_problems(str(tmp_path))
    assert len(problems) == 1, problems
    assert ("fetch" in problems[0]) == (change == "package: a new module")
