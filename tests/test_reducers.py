"""The reducer registry: the run order follows what each reducer declares it reads and makes, a
reducer reading a table nothing makes or reducers needing each other are refused, and on a real
run each reducer reads only the tables it declares and makes tables of exactly its declared
columns."""

from __future__ import annotations

import os
import shutil

import pytest
from _synthjobs import per_rank_tables

from dtrace.analyses import ANALYSES
from dtrace.errors import UsageError
from dtrace.generate import synth
from dtrace.options import Options
from dtrace.reduce import DECLARED, ORDER, REDUCERS, Reducer, reducer_order

PER_RANK = {a.table for a in ANALYSES}
EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "traces")


def _noop(tables, options):
    return {}


def _respects(order: list[Reducer]) -> None:
    """Each reducer comes after every other reducer that makes a table it reads."""
    position = {r.name: i for i, r in enumerate(order)}
    for r in order:
        for other in order:
            if other is not r and set(other.produces) & set(r.requires):
                assert position[other.name] < position[r.name], (other.name, r.name)


def test_order_respects_every_declared_dependency():
    assert sorted(r.name for r in ORDER) == sorted(r.name for r in REDUCERS)
    _respects(ORDER)
    # the hand-checked dependencies the module comments used to state
    position = {r.name: i for i, r in enumerate(ORDER)}
    assert position["collectives"] < position["ranks"] < position["stragglers"] < position["whatif"]
    assert position["ops_xrank"] < position["stragglers"] and position["op_perf"] < position["stragglers"]


def test_order_is_derived_not_listed():
    """The registry in reverse gives an order that still respects every dependency."""
    _respects(reducer_order(list(reversed(REDUCERS)), PER_RANK))


def test_a_reducer_reading_an_unknown_table_is_refused():
    bad = Reducer("mine", _noop, ("kernels", "kernal_stats"), {"mine": None})
    with pytest.raises(UsageError, match="reducer 'mine' requires table 'kernal_stats', which no analysis or reducer"):
        reducer_order([*REDUCERS, bad], PER_RANK)


def test_reducers_needing_each_other_are_refused_naming_the_cycle():
    a = Reducer("a", _noop, ("t_b",), {"t_a": None})
    b = Reducer("b", _noop, ("t_c",), {"t_b": None})
    c = Reducer("c", _noop, ("t_a",), {"t_c": None})
    free = Reducer("free", _noop, ("kernels",), {"t_free": None})
    with pytest.raises(
        UsageError, match=r"reducers need each other \(each reads a table of the next\): a -> b -> c -> a"
    ):
        reducer_order([free, a, b, c], PER_RANK)


def test_a_table_made_by_two_reducers_is_refused():
    twice = Reducer("again", _noop, ("kernels",), {"whatif": None})
    with pytest.raises(UsageError, match="table 'whatif' is made by two reducers: 'whatif' and 'again'"):
        reducer_order([*REDUCERS, twice], PER_RANK)


class _Reads(dict):
    """The tables, noting every name a reducer looks up."""

    def __init__(self, tables):
        super().__init__(tables)
        self.read: set[str] = set()

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)


def _reduce_declared(tables: dict) -> set[str]:
    """Each reducer in order on the tables of those before it, checking the tables it reads and
    the columns of those it makes; returns the tables made with rows."""
    made: set[str] = set()
    for r in ORDER:
        seen = _Reads(tables)
        out = r.func(seen, Options())
        assert seen.read == set(r.requires), r.name
        assert set(out) == set(r.produces), r.name
        for name, frame in out.items():
            if r.produces[name] is not None:
                assert sorted(frame.columns) == sorted(r.produces[name]), name
                assert DECLARED[name] is r.produces[name]
        made |= {name for name, frame in out.items() if len(frame)}
        tables.update(out)
    return made


def test_on_a_generated_job_reducers_read_what_they_declare_and_make_their_declared_columns(tmp_path):
    """A generated 4-rank job (collectives, recorded shapes, one slow GPU) through the reader and
    every analysis, then the reducers."""
    synth.generate(
        str(tmp_path), ranks=4, seed=3, faults=["gpu:rank=1:slow=0.2"], record_shapes=True, steps=3, kernels_per_step=30
    )
    # the generated ops launch one kernel each: kernel sequences of one kernel give kernel_sequences rows
    made = _reduce_declared(per_rank_tables(str(tmp_path), Options(sequence_min_len=1), need=None))
    # the run exercised the tables: every reduced table but the one of memory events has rows
    assert made == set().union(*(r.produces for r in REDUCERS)) - {"memory_xrank"}


def test_on_real_traces_reducers_read_what_they_declare_and_make_their_declared_columns(tmp_path):
    """The two sampled ranks of a real PyTorch job (``examples/traces``) through the reader and
    every analysis, then the reducers."""
    for k in range(2):
        shutil.copy(os.path.join(EXAMPLES, f"sampled_rank-{k}.json.gz"), tmp_path / f"rank-{k}.json.gz")
    made = _reduce_declared(per_rank_tables(str(tmp_path), Options(), need=None))
    assert {"kernels_xrank", "ops_xrank", "collectives", "collective_instances", "rank_stats", "stragglers"} <= made
