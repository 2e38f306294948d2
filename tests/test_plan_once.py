"""A run searches its inputs once and plans once (issue: a run planned once).

The CLI's up-to-date check, the early start of the workers and the run itself share one search
of the inputs (:func:`dtrace.ingest.inputs.find_inputs`); ranks are resolved and partitions
planned once per run (:func:`dtrace.execution.plan.make_plan`): before the start when every input
looks cached (the estimate of the work) and kept after ingest when the ingest found those inputs.
Counted on the functions that do the work, on a cold run, a run from the cache and an up-to-date run.
"""

from __future__ import annotations

import ast
import os
from collections import Counter

import pytest

import dtrace.execution.plan as plan
import dtrace.ingest.inputs as inputs
from dtrace.cli.main import main
from dtrace.generate.synth import generate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def counted(monkeypatch):
    counts: Counter[str] = Counter()

    def count(module, name):
        real = getattr(module, name)

        def wrapper(*a, **kw):
            counts[name] += 1
            return real(*a, **kw)

        monkeypatch.setattr(module, name, wrapper)

    count(inputs, "expand_inputs")
    count(plan, "resolve_ranks")
    count(plan, "plan_partitions")
    return counts


@pytest.mark.parametrize("scheduler", ["sync", "local"])
def test_a_run_finds_its_inputs_once_and_plans_once(tmp_path, counted, scheduler):
    generate(tmp_path / "t", ranks=6, steps=2, seed=1)
    out = str(tmp_path / "out")
    args = ["analyze", str(tmp_path / "t"), "-o", out, "--no-progress", "--scheduler", scheduler, "--workers", "2"]

    assert main(args) == 0  # cold: nothing cached, planned after ingest
    assert counted == {"expand_inputs": 1, "resolve_ranks": 1, "plan_partitions": 1}

    counted.clear()
    assert main([*args, "--recompute"]) == 0  # every input cached: planned before the start, kept
    assert counted == {"expand_inputs": 1, "resolve_ranks": 1, "plan_partitions": 1}

    counted.clear()
    assert main(args) == 0  # up to date: the stored summary, nothing planned
    assert counted == {"expand_inputs": 1}


def test_only_the_planners_search_and_plan():
    """The analyze command's modules call no search or planning function of their own: they take
    the input set and the plan (a second expansion or planning would go unnoticed by the counts
    of a run that happens not to reach it)."""
    for rel in ("dtrace/api.py", "dtrace/cli/analyze.py", "dtrace/cli/uptodate.py"):
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        called = {
            n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
            for n in ast.walk(tree)
            if isinstance(n, ast.Call)
        }
        assert not called & {"expand_inputs", "refuse_irregular", "resolve_ranks", "plan_partitions"}, rel
