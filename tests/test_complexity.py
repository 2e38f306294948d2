"""No function in ``dtrace/`` is more complex than :data:`MAX_COMPLEXITY` (cyclomatic
complexity, counted as ``radon cc`` counts it) or longer than :data:`MAX_LINES` lines of code
(:func:`length`: its docstring is documentation and not counted), except
those listed in :data:`ALLOWED` (empty): a new offender fails here, and so does an entry of
:data:`ALLOWED` that is no longer over the limits."""

from __future__ import annotations

import ast
import pathlib

import pytest

MAX_COMPLEXITY = 15
MAX_LINES = 80
PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "dtrace"

#: ``path:qualified name`` of the functions allowed over a limit: none (every one was split into
#: named phases); one that must stay over would be listed here with why.
ALLOWED: set[str] = set()

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def complexity(func: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Cyclomatic complexity as radon counts it: 1, plus one per ``if``, conditional expression,
    loop (and its ``else``), ``except`` (and a ``try``'s ``else``), ``and``/``or`` operand after
    the first, ``case`` but a catch-all, comprehension ``for`` and ``if``, and ``assert``.
    Nested functions and classes count on their own.

    >>> complexity(ast.parse("def f(x):\\n    return [y for y in x if y and x] if x else 0").body[0])
    5
    """
    return 1 + sum(_decisions(child) for child in func.body)


def _decisions(node: ast.AST) -> int:
    if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
        return 0
    if isinstance(node, ast.Assert):
        return 1
    if isinstance(node, ast.Try):
        own = len(node.handlers) + bool(node.orelse)
    elif isinstance(node, ast.BoolOp):
        own = len(node.values) - 1
    elif isinstance(node, (ast.If, ast.IfExp)):
        own = 1
    elif isinstance(node, ast.Match):
        catch_all = any(getattr(c.pattern, "pattern", False) is None for c in node.cases)
        own = max(0, len(node.cases) - catch_all)
    elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
        own = 1 + bool(node.orelse)
    elif isinstance(node, ast.comprehension):
        own = 1 + len(node.ifs)
    else:
        own = 0
    return own + sum(_decisions(child) for child in ast.iter_child_nodes(node))


def length(func: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function's code: from its first statement after the docstring to its end
    (blank and comment lines included; the signature and the docstring, documentation, are not).
    """
    body = func.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]
    return func.end_lineno - body[0].lineno + 1


def functions(tree: ast.AST, prefix: str = ""):
    """``(qualified name, node)`` of every function and method, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, _FUNCTIONS):
            yield prefix + node.name, node
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")
        else:
            yield from functions(node, prefix)


def offenders() -> dict[str, str]:
    """``path:name`` -> what is over the limit, for every function of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        for name, node in functions(ast.parse(path.read_text(encoding="utf-8"))):
            cc, lines = complexity(node), length(node)
            over = [f"complexity {cc}"] * (cc > MAX_COMPLEXITY) + [f"{lines} lines"] * (lines > MAX_LINES)
            if over:
                out[f"{rel}:{name}"] = ", ".join(over)
    return out


def test_no_function_is_too_complex_or_too_long():
    new = {k: v for k, v in offenders().items() if k not in ALLOWED}
    assert not new, (
        f"split these into named phases (at most complexity {MAX_COMPLEXITY}, {MAX_LINES} lines): "
        + "; ".join(f"{k} ({v})" for k, v in sorted(new.items()))
    )


def test_the_allow_list_holds_only_offenders():
    fixed = ALLOWED - set(offenders())
    assert not fixed, f"no longer over the limits: remove from ALLOWED in tests/test_complexity.py: {sorted(fixed)}"


@pytest.mark.parametrize(
    "source, want",
    [
        ("def f():\n    return 1", 1),
        ("def f(a, b):\n    if a and b or a:\n        pass\n    elif b:\n        pass\n    else:\n        pass", 5),
        ("def f(x):\n    for i in x:\n        pass\n    else:\n        pass\n    while x:\n        break", 4),
        (
            "def f():\n    try:\n        pass\n    except ValueError:\n        pass\n    except OSError:\n        pass\n"
            "    else:\n        pass\n    finally:\n        pass",
            4,
        ),
        (
            "def f(x):\n    assert x\n    def g(y):\n        if y:\n            pass\n    return lambda z: z if z else 0",
            3,
        ),
        (
            "def f(x):\n    match x:\n        case 1:\n            pass\n        case 2:\n            pass\n"
            "        case _:\n            pass",
            3,
        ),
    ],
)
def test_complexity_counts_decisions_by_hand(source, want):
    """Counted by hand from the rules in :func:`complexity` (radon's)."""
    assert complexity(ast.parse(source).body[0]) == want


def test_length_leaves_out_the_signature_and_the_docstring():
    source = 'def f(\n    x,\n):\n    """Doc.\n\n    More.\n    """\n    y = x\n\n    # a comment\n    return y\n'
    assert length(ast.parse(source).body[0]) == 4
    assert length(ast.parse("def g():\n    '''Only a docstring.'''").body[0]) == 1
