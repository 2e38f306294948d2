"""A worker process killed on every attempt at one input (the OOM killer, a segfault) fails
that input alone, in one line in the manifest; the run completes for every other rank with
the tables of a synchronous run without that input (issue 13). On a real ``LocalCluster`` of
two worker processes; the kills come from a worker preload (``tests/_crash.py``)."""
from __future__ import annotations

import glob

import dask
import pandas as pd
import pytest

import dtrace
from dtrace.cli.main import main
from dtrace.synth import generate

from _crash import PRELOAD, crash_analysing, crash_reading

pytestmark = pytest.mark.slow


def canonical(df: pd.DataFrame) -> pd.DataFrame:
    """Rows in a fixed order: partitions laid out differently concatenate in another order."""
    return df.sort_values(list(df.columns), kind="stable").reset_index(drop=True)


@pytest.mark.timeout(300)
def test_inputs_that_kill_their_worker_fail_alone(tmp_path, capsys):
    generate(tmp_path / "traces", ranks=6, steps=1, seed=11)
    files = sorted(glob.glob(str(tmp_path / "traces" / "rank-*.json.gz")))
    killed_reading, killed_analysing = files[1], files[4]
    crash_reading(killed_reading)
    crash_analysing(killed_analysing)
    out = tmp_path / "out"
    # a worker that dies once at a task is enough to give it up (the engine still retries it
    # and then splits it): the test stays short
    with dask.config.set({"distributed.worker.preload": [PRELOAD], "distributed.scheduler.allowed-failures": 0}):
        code = main(["analyze", *files, "-o", str(out), "--scheduler", "local", "--workers", "2", "--no-progress"])
    assert code == 1, capsys.readouterr().err
    res = dtrace.load(out)
    assert res.manifest["execution"] == "local cluster"
    errors = {i["path"]: i["error"] for i in res.manifest["inputs"] if i["status"] == "error"}
    assert sorted(errors) == [killed_reading, killed_analysing]
    for path, err in errors.items():
        assert err.startswith(f"{path}: ") and "\n" not in err and err.count(path) == 1
        assert "worker process died each time" in err
    good = [f for f in files if f not in errors]
    ref = dtrace.analyze(good, cache=str(tmp_path / "ref-cache"), scheduler="sync")
    assert ref.ok and sorted(res.breakdown["rank"]) == sorted(ref.breakdown["rank"]) == [0, 2, 3, 5]
    assert sorted(res.table_names) == sorted(ref.table_names)
    for name in ref.table_names:
        pd.testing.assert_frame_equal(canonical(res.table(name)), canonical(ref.table(name)), check_exact=True,
                                      obj=name)
