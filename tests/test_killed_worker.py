"""A worker process killed on every attempt at one input (the OOM killer, a segfault) fails
that input alone, in one line in the manifest; the run completes for every other rank with
the tables of a synchronous run without that input (issue 13). On a real ``LocalCluster`` of
two worker processes; the kills come from a worker preload (``tests/_crash.py``)."""

from __future__ import annotations

import glob
import os

import dask
import distributed  # noqa: F401 - loads its config defaults before dask.config.set in the test
import pandas as pd
import pytest
from _crash import PRELOAD, crash_analysing, crash_reading

import dtrace
from dtrace.cli.main import main
from dtrace.generate.synth import generate
from dtrace.partitions.layout import content_size, ingest_batches

pytestmark = pytest.mark.slow


def rank_of(path: str) -> int:
    return int(os.path.basename(path).split("-")[1].split(".")[0])


def canonical(df: pd.DataFrame) -> pd.DataFrame:
    """Rows in a fixed order: partitions laid out differently concatenate in another order."""
    return df.sort_values(list(df.columns), kind="stable").reset_index(drop=True)


@pytest.mark.timeout(600)
def test_inputs_that_kill_their_worker_fail_alone(tmp_path, capsys):
    # 16 small ranks: read two per task (so a task that dies is split into its files), analysed
    # two ranks per partition (so the input that kills its worker shares its task with a healthy
    # rank, and the other partitions run beside it on the same workers). Each worker death costs
    # a restart of the worker process (seconds on a loaded machine): the layout keeps them few.
    generate(tmp_path / "traces", ranks=16, steps=1, seed=11)
    files = sorted(glob.glob(str(tmp_path / "traces" / "rank-*.json.gz")))
    # the input that kills its reader shares its ingest task with another one
    batch = next(b for b in ingest_batches(files, [content_size(f) for f in files], 2) if len(b) > 1)
    killed_reading = batch[-1]
    killed_analysing = next(f for f in files if f not in batch)
    events = max(i["events"] for i in dtrace.analyze(files, scheduler="sync").manifest["inputs"])
    crash_reading(killed_reading)
    crash_analysing(killed_analysing)
    out = tmp_path / "out"
    # a worker that dies once at a task is enough to give it up (the engine still retries it
    # and then splits it): the test stays short. (Leaving the block restores dask's config as it
    # was: distributed's defaults must have been loaded before, or they would be dropped.)
    with dask.config.set({"distributed.worker.preload": [PRELOAD], "distributed.scheduler.allowed-failures": 0}):
        code = main(
            ["analyze", *files, "-o", str(out), "--scheduler", "local", "--workers", "2", "--no-progress"]
            + ["--partition-size", str(2 * events)]
        )
    assert code == 1, capsys.readouterr().err
    res = dtrace.load(out)
    assert res.manifest["execution"] == "local cluster"
    # the rank whose analysis kills its worker shared its partition with a healthy rank
    shared_task = [p for p in res.manifest["partitions"] if p["ranks"][0] <= rank_of(killed_analysing) <= p["ranks"][1]]
    assert len(res.manifest["partitions"]) == 8 and shared_task[0]["parts"] == 2
    errors = {i["path"]: i["error"] for i in res.manifest["inputs"] if i["status"] == "error"}
    assert sorted(errors) == sorted([killed_reading, killed_analysing])
    for path, err in errors.items():
        assert err.startswith(f"{path}: ") and "\n" not in err and err.count(path) == 1
        assert "worker process died each time" in err
    good = [f for f in files if f not in errors]
    ref = dtrace.analyze(good, cache=str(tmp_path / "ref-cache"), scheduler="sync")
    assert ref.ok and sorted(res.breakdown["rank"]) == sorted(ref.breakdown["rank"]) == sorted(map(rank_of, good))
    assert sorted(res.table_names) == sorted(ref.table_names)
    for name in ref.table_names:
        pd.testing.assert_frame_equal(
            canonical(res.table(name)), canonical(ref.table(name)), check_exact=True, obj=name
        )
