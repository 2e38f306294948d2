"""Stored results do not depend on the size of the cluster (issue 19, item 7).

Partitions are cut into more pieces for more workers, but results are stored per *store group*
(whole ranks, a fixed number of events, :func:`dtrace.layout.store_groups`), so a run on any
number of workers finds what another stored. The job is the issue's (8 ranks of 200k events,
partitions of at most 600k), scaled down a hundredfold: 8 ranks of 1,920 events, groups and the
least events worth a partition of its own 1,000, partitions of at most 6,000.
"""

from __future__ import annotations

import pandas as pd
import pytest

import dtrace
import dtrace.layout as layout
from dtrace import synth


@pytest.fixture
def scaled(monkeypatch):
    monkeypatch.setattr(layout, "MIN_EVENTS", 1_000)
    monkeypatch.setattr(layout, "GROUP_EVENTS", 1_000, raising=False)


def test_results_stored_on_one_worker_are_reused_on_any_number(tmp_path, scaled):
    synth.generate(tmp_path / "job", ranks=8, steps=10, seed=1)
    cache = str(tmp_path / "cache")
    first = dtrace.analyze(
        str(tmp_path / "job"), tmp_path / "w1", cache=cache, scheduler="sync", workers=1, partition_events=6_000
    )
    assert first.ok and {i["events"] for i in first.manifest["inputs"]} == {1_920}
    layouts = {1: len(first.manifest["partitions"])}
    for workers in (2, 4, 8):
        res = dtrace.analyze(
            str(tmp_path / "job"),
            tmp_path / f"w{workers}",
            cache=cache,
            scheduler="sync",
            workers=workers,
            partition_events=6_000,
        )
        layouts[workers] = len(res.manifest["partitions"])
        assert all(i["results_reused"] for i in res.manifest["inputs"]), workers  # nothing analysed again
        for table in ("breakdown", "kernels", "steps", "gaps", "stragglers"):
            pd.testing.assert_frame_equal(res[table], first[table])
    assert layouts == {1: 3, 2: 4, 4: 4, 8: 8}  # the partitions differ; the stored groups do not


def test_store_groups_do_not_depend_on_the_workers(scaled):
    from dtrace.plan import PartSpec

    specs = [
        PartSpec(rank=r, device=0, path=f"r{r}", format="kineto", events="", collectives="", memcpy="", n_events=2_000)
        for r in range(8)
    ]
    groups = {
        w: [tuple(p.rank for p in g) for part in layout.plan_partitions(specs, 6_000, w) for g in part.store_groups()]
        for w in (1, 2, 4, 8)
    }
    assert all(g == [(r,) for r in range(8)] for g in groups.values())  # each 2,000-event rank is a group
    small = [
        PartSpec(rank=r, device=d, path=f"r{r}", format="jax", events="", collectives="", memcpy="", n_events=300)
        for r in range(6)
        for d in range(2)
    ]
    # whole ranks (both devices) of 600 events: one per group of at most 1,000
    want = [[(r, 0), (r, 1)] for r in range(6)]
    for w in (1, 3, 8):
        got = [
            [(p.rank, p.device) for p in g]
            for part in layout.plan_partitions(small, 6_000, w)
            for g in part.store_groups()
        ]
        assert got == want
