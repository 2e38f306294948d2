"""Stored results do not depend on the size of the cluster (issue 19, item 7).

Partitions are cut into more pieces for more workers, but results are stored per *store group*
(whole ranks, a fixed number of events, :func:`dtrace.partitions.layout.store_groups`), so a run on any
number of workers finds what another stored. The job is the issue's (8 ranks of 200k events,
partitions of at most 600k), scaled down a hundredfold: 8 ranks of 1,920 events, groups and the
least events worth a partition of its own 1,000, partitions of at most 6,000.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dtrace
import dtrace.partitions.layout as layout
from dtrace.generate import synth


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
    from dtrace.ingest.ranks import PartSpec

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


def test_a_changed_rank_recomputes_its_group_only(tmp_path, scaled):
    """One input changed: its store group is analysed again, the others come from the store, and
    every table (a user's analysis that is never stored included) is a fresh run's, row for row."""
    import shutil
    import threading

    synth.generate(tmp_path / "job", ranks=8, steps=10, seed=1)
    synth.generate(tmp_path / "other", ranks=8, steps=10, seed=2)
    lock = threading.Lock()  # not hashable: this analysis is computed on every run

    def gpu_events(batch, lock=lock):
        n = np.bincount(batch.gpu["part"].to_numpy(), minlength=batch.n_parts)
        return pd.DataFrame({**batch.keys(np.arange(batch.n_parts)), "n": n})

    cols = {"rank": "int32", "device": "int32", "n": "int64"}
    own = [dtrace.Analysis("gpu_events", gpu_events, cols)]
    run = dict(scheduler="sync", workers=2, partition_events=6_000, analyses=own)
    cache = str(tmp_path / "cache")
    dtrace.analyze(str(tmp_path / "job"), tmp_path / "a", cache=cache, **run)
    shutil.copy(tmp_path / "other" / "rank-5.json.gz", tmp_path / "job" / "rank-5.json.gz")
    again = dtrace.analyze(str(tmp_path / "job"), tmp_path / "b", cache=cache, **run)
    fresh = dtrace.analyze(str(tmp_path / "job"), tmp_path / "c", cache=str(tmp_path / "fresh"), **run)
    reused = {int(i["path"].split("-")[-1].split(".")[0]): i["results_reused"] for i in again.manifest["inputs"]}
    assert again.ok and not again.failed_tables
    assert reused == {r: r != 5 for r in range(8)}  # each rank of 1,920 events is a group of its own
    for table in ("breakdown", "kernels", "steps", "gaps", "transitions", "stragglers", "gpu_events"):
        pd.testing.assert_frame_equal(again[table], fresh[table], obj=table)
    assert (again.gpu_events["n"].to_numpy() == again.breakdown["gpu_events"].to_numpy()).all()
