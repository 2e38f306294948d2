"""The client's memory does not follow the job: per-rank tables stay where the workers wrote them.

A run with a results folder leaves every partition's tables in the spill folder
(``dtrace.core.spill``): the tables no reducer reads are streamed from there into their results
files a row group per partition, and a table a reducer reads is read when that reducer runs and
let go when the next one does not read it. Shown here on a local cluster of two worker processes:
nothing per-rank comes back with the partitions' results, the reducers see only the tables they
declare, the results are those of a run that holds every table in memory (no results folder), and
the streamed files are split by rank range.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import dtrace
import dtrace.api as api
import dtrace.reduce as reduce
from dtrace.analyses import ANALYSES
from dtrace.generate.synth import generate

PER_RANK = {a.table for a in ANALYSES}


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("bounded")
    generate(d / "traces", ranks=24, steps=2, seed=5, faults=[{"kind": "compute", "rank": 7, "slow": 0.4}])
    return str(d / "traces")


def own_table(batch, options):
    """A user's analysis: one row per part, its rank and device."""
    return pd.DataFrame(
        {"rank": batch.parts["rank"].to_numpy(np.int32), "device": batch.parts["device"].to_numpy(np.int32)}
    )


OWN = dtrace.Analysis("per_part_rows", own_table, {"rank": "int32", "device": "int32"})


def test_the_spilled_run_equals_the_run_held_in_memory(job, tmp_path):
    """Every table, the user's own included, read back from a folder written through the spill
    folder (several partitions, streamed into the files) equals the tables of a run without a
    results folder, whose client concatenates every partition's frames."""
    kw = dict(scheduler="sync", partition_events=2_000, analyses=[OWN])
    held = dtrace.analyze(job, **kw)
    written = dtrace.analyze(job, tmp_path / "out", **kw)
    assert len(written.manifest["partitions"]) >= 4
    assert sorted(written.table_names) == sorted(held.table_names)
    back = dtrace.load(written.path)
    for name in held.table_names:
        pd.testing.assert_frame_equal(back.table(name), held.table(name), check_exact=True, obj=name)
    assert not os.path.exists(tmp_path / "out" / "cache" / "spill")  # the run's spill folder is gone


def test_the_client_holds_what_one_reducer_reads_and_nothing_per_rank_comes_back(job, tmp_path, monkeypatch):
    seen: dict[str, set[str]] = {}
    gathered: list[dict[str, pd.DataFrame]] = []
    read: list[str] = []

    def watch(r):
        def func(tables, options):
            seen[r.name] = {t for t in tables if t in PER_RANK and t not in reduce.REDUCED}
            return r.func(tables, options)

        return dataclasses.replace(r, func=func)

    monkeypatch.setattr(reduce, "ORDER", [watch(r) for r in reduce.ORDER])
    combine, read_spilled = api.combine, api._read_spilled

    def spy_combine(per_partition, analyses, **kw):
        gathered.extend(dict(t) for t in per_partition)
        return combine(per_partition, analyses, **kw)

    def spy_read(name, parts):
        read.append(name)
        return read_spilled(name, parts)

    monkeypatch.setattr(api, "combine", spy_combine)
    monkeypatch.setattr(api, "_read_spilled", spy_read)
    res = dtrace.analyze(job, tmp_path / "out", scheduler="local", workers=2, partition_events=2_000)
    assert res.ok and res.manifest["execution"] != "sync" and res.manifest["workers"] == 2

    # the partitions' results carry file names, never a frame with rows
    assert gathered and all(not len(df) for t in gathered for df in t.values())
    # each reducer saw only the per-rank tables it declares
    for r in reduce.ORDER:
        assert seen[r.name] <= set(r.requires), (r.name, seen[r.name] - set(r.requires))
    # the tables read into the client are those the reducers read; queue_timeline, launches, ... never
    assert set(read) <= reduce.READ and {"kernels", "segments", "collectives"} <= set(read)
    assert not set(read) & {"queue_timeline", "launches", "transitions", "gap_histogram"}


def test_streamed_tables_are_row_groups_in_rank_order(job, tmp_path):
    """A table streamed from the partitions: a row group per partition with rows, ranks ascending
    from one row group to the next (a reader of some ranks skips the others by their statistics)."""
    res = dtrace.analyze(job, tmp_path / "out", scheduler="sync", partition_events=2_000)
    partitions = res.manifest["partitions"]
    for name in ("launches", "queue_timeline", "kernels"):
        meta = pq.ParquetFile(os.path.join(res.path, f"{name}.parquet")).metadata
        rank = meta.schema.to_arrow_schema().get_field_index("rank")
        stats = [meta.row_group(i).column(rank).statistics for i in range(meta.num_row_groups)]
        assert meta.num_row_groups == len(partitions), name
        spans = [(s.min, s.max) for s in stats]
        assert spans == [(min(p["ranks"]), max(p["ranks"])) for p in partitions], name


def test_load_of_some_ranks_reads_only_their_row_groups(job, tmp_path, monkeypatch):
    res = dtrace.analyze(job, tmp_path / "out", scheduler="sync", partition_events=2_000)
    whole = dtrace.load(res.path)
    read: list[list[int]] = []
    real = pq.ParquetFile.read_row_groups

    def spy(self, groups, *a, **kw):
        read.append(list(groups))
        return real(self, groups, *a, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", spy)
    some = dtrace.load(res.path, ranks=[3, 17])
    for name in ("launches", "kernels", "ranks", "stragglers"):
        want = whole.table(name)
        want = want.loc[want["rank"].isin([3, 17])].reset_index(drop=True)
        pd.testing.assert_frame_equal(some.table(name), want, check_exact=True, obj=name)
    groups = pq.ParquetFile(os.path.join(res.path, "launches.parquet")).metadata.num_row_groups
    assert read and len(read[0]) == 2 < groups  # ranks 3 and 17 lie in two of the partitions
    # one slice asked of the whole results, and a table across ranks whole
    pd.testing.assert_frame_equal(
        whole.table("launches", ranks=[5]),
        whole.launches.loc[whole.launches["rank"] == 5].reset_index(drop=True),
        check_exact=True,
    )
    assert len(some.table("kernels_xrank")) == len(whole.kernels_xrank)


def test_the_spill_folders_of_crashed_runs_are_removed_and_live_ones_kept(job, tmp_path):
    """A run that died left its spill folder (its lock free): the next run on the cache removes it.
    One whose lock a live run holds stays, and a run's own folder goes with it."""
    from dtrace.core import spill

    cache = tmp_path / "out" / "cache"
    crashed = spill.make(str(cache))
    with open(os.path.join(crashed, "kernels-000000-x.arrow"), "wb") as f:
        f.write(b"rows of a run that died")
    os.close(spill._locks.pop(crashed))  # the run dies: its lock goes with its process
    live = spill.make(str(cache))  # a run still going (this process holds its lock)
    res = dtrace.analyze(job, tmp_path / "out", scheduler="sync")
    assert res.ok
    assert not os.path.exists(crashed) and os.path.isdir(live)
    assert os.listdir(cache / "spill") == [os.path.basename(live)]
    spill.remove(live)
    assert not os.path.exists(cache / "spill")


def test_spilled_tables_are_compressed_from_64_kb_and_read_back_whole(tmp_path):
    """A partition's small table is written as it is (its file no larger; read back in half the
    time), a large one lz4-compressed; both read back equal to the frame written."""
    import pyarrow as pa

    from dtrace.core import spill

    small = pd.DataFrame({"rank": np.arange(3, dtype=np.int32), "name": ["a", "b", "a"], "n": [1, 2, 3]})
    rows = 20_000
    large = pd.DataFrame(
        {
            "rank": np.zeros(rows, np.int32),
            "name": ["kernel_%d" % (i % 7) for i in range(rows)],
            "n": np.arange(rows) % 5,
        }
    )
    got = spill.write(str(tmp_path), 0, {"small": small, "large": large})
    for name, df in (("small", small), ("large", large)):
        table = pa.Table.from_pandas(df, preserve_index=False)
        compressed = table.nbytes >= spill.COMPRESS_FROM_BYTES
        assert compressed == (name == "large")
        assert spill.ipc_options(table).compression == ("lz4" if compressed else None)
        assert (got[name].bytes < table.nbytes) == compressed
        pd.testing.assert_frame_equal(spill.read_all([got[name]]).to_pandas(), df, check_exact=True)
