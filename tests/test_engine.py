"""The Dask layer: a real LocalCluster gives the synchronous result; tasks carry paths, not data."""
import os
import pickle

import pandas as pd

import dtrace
from dtrace.engine import ClusterSpec, Engine
from dtrace.options import Options
from dtrace.partition import analyze_partition, ingest_file
from conftest import ROOT

EXAMPLES = os.path.join(ROOT, "examples", "traces")


def _sorted(df):
    return df.sort_values(list(df.columns[:3])).reset_index(drop=True)


def test_local_cluster_matches_synchronous(tmp_path):
    sync = dtrace.analyze(EXAMPLES, scheduler="sync")
    dist = dtrace.analyze(EXAMPLES, str(tmp_path / "o"), workers=2)
    assert dist.manifest["workers"] == 2
    for t in ("breakdown", "streams", "steps", "kernels"):
        pd.testing.assert_frame_equal(_sorted(sync.table(t)), _sorted(dist.table(t)), check_dtype=False)


def test_task_payloads_are_small(tmp_path):
    """What travels to a worker is a path and options; what comes back is small frames."""
    from dtrace.plan import resolve_ranks

    recs = [ingest_file(os.path.join(EXAMPLES, f), str(tmp_path)) for f in sorted(os.listdir(EXAMPLES))
            if f.endswith(".json.gz")]
    specs = resolve_ranks(recs)
    assert len(pickle.dumps((specs[0], Options()))) < 2_000
    assert all(len(pickle.dumps(r)) < 4_000 for r in recs)
    out = analyze_partition(specs[0], Options())
    n_events = recs[0].parts[0].n_events
    returned_rows = sum(len(df) for df in out["tables"].values())
    assert returned_rows < n_events / 2  # aggregates, not events


def test_engine_map_sync_keeps_order():
    with Engine(ClusterSpec(scheduler="sync")) as eng:
        assert eng.map(pow, [1, 2, 3], 2) == [1, 4, 9]
