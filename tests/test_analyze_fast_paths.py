"""The analyse phase's shortcuts give what a plain reading of their definition gives: the class
time of segment nodes (a binary search on the per-class unions' sorted key, and the general path
where that key would not fit in int64), and the parts' tables made one frame (one chunk per
column, dictionaries unified in order of first appearance, as ``unify_dictionaries`` does)."""

import numpy as np
import pyarrow as pa
import pytest

from dtrace.analyses.segments import _ranked_coverage, _unions
from dtrace.core.schema import SIDE_SCHEMAS, empty_side
from dtrace.execution.tasks import concat_parts
from dtrace.readers.base import PartTables

RNG = np.random.default_rng(25)


def _plain_coverage(start, end, lo, hi):
    """Covered length of the union of ``[start, end)`` intervals inside ``(lo, hi]``: merge, then sum."""
    merged = []
    for s, e in sorted(zip(start.tolist(), end.tolist())):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return sum(max(0, min(e, hi) - s) - max(0, min(e, lo) - s) for s, e in merged)


@pytest.mark.parametrize("scale", [1, 2**55])  # the second: (group, time) no longer fits one int64 key
def test_ranked_coverage_is_the_plain_union_length(scale):
    for _ in range(20):
        n = int(RNG.integers(1, 60))
        group = RNG.integers(0, 5, n) * 7  # sparse group values: the queries name them by rank
        start = RNG.integers(0, 50, n) * scale
        end = start + RNG.integers(0, 20, n) * scale
        u = _unions(group, start, end)
        groups = np.unique(group)
        q = int(RNG.integers(0, 40))
        rank = RNG.integers(0, groups.size, q)
        t_prev = RNG.integers(-10, 80, q) * scale
        t = t_prev + RNG.integers(0, 40, q) * scale
        want = [
            _plain_coverage(start[group == groups[r]], end[group == groups[r]], a, b)
            for r, a, b in zip(rank.tolist(), t_prev.tolist(), t.tolist())
        ]
        assert _ranked_coverage(u, rank, t, t_prev).tolist() == want


def _part(names: list[str], kinds: list[str]) -> PartTables:
    events = pa.table(
        {
            "name": pa.array(names, pa.string()).dictionary_encode(),
            "kind": pa.array(kinds, pa.string()).dictionary_encode(),
            "start_ns": pa.array(np.arange(len(names), dtype=np.int64)),
        }
    )
    return PartTables(events, {k: empty_side(k) for k in SIDE_SCHEMAS})


def test_parts_frame_unifies_dictionaries_in_order_of_first_appearance():
    parts = [_part(["b", "a", "b"], ["kernel"] * 3), _part(["c", "a"], ["cpu_op", "kernel"]), _part([], [])]
    ev, side = concat_parts(parts)
    assert list(ev["name"].cat.categories) == ["b", "a", "c"]  # first part's dictionary, then the new ones
    assert list(ev["kind"].cat.categories) == ["kernel", "cpu_op"]
    assert ev["name"].astype(str).tolist() == ["b", "a", "b", "c", "a"]
    assert ev["part"].tolist() == [0, 0, 0, 1, 1] and ev["row"].tolist() == [0, 1, 2, 0, 1]
    assert all(len(side[k]) == 0 for k in SIDE_SCHEMAS)
