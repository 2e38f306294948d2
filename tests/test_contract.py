"""Every per-rank analysis runs on an empty partition and returns its declared columns."""

import pandas as pd
import pyarrow as pa

from dtrace.analyses import ANALYSES, run_analyses
from dtrace.analyses.batch import prepare_part as prepare
from dtrace.core.schema import COLLECTIVE_SCHEMA, EVENT_SCHEMA, MEMCPY_SCHEMA
from dtrace.options import Options


def empty_part():
    ev = EVENT_SCHEMA.empty_table().to_pandas()
    coll = COLLECTIVE_SCHEMA.empty_table().to_pandas()
    mem = MEMCPY_SCHEMA.empty_table().to_pandas()
    return prepare(ev, coll, mem, rank=0, device=0, fmt="kineto", options=Options())


def test_every_analysis_on_empty_partition():
    part = empty_part()
    out = run_analyses(part)
    assert set(out) == {a.table for a in ANALYSES}
    for a in ANALYSES:
        df = out[a.table]
        assert isinstance(df, pd.DataFrame)
        for col in a.columns:
            assert col in df.columns, (a.table, col)


def test_analyses_do_not_mutate_input():
    part = empty_part()
    before = part.gpu.copy()
    run_analyses(part)
    pd.testing.assert_frame_equal(before, part.gpu)


def test_schema_is_the_spec():
    assert EVENT_SCHEMA.names[:11] == [
        "rank",
        "device",
        "stream",
        "pid",
        "tid",
        "kind",
        "name",
        "start_ns",
        "end_ns",
        "correlation",
        "external_id",
    ]
    assert EVENT_SCHEMA.field("name").type == pa.dictionary(pa.int32(), pa.string())


def test_every_analysis_on_gpu_only_partition():
    """A part with GPU events but no host events (GPU-only traces, nsys cuda_gpu_trace CSVs)."""
    t = pa.table(
        {
            "rank": [0, 0],
            "device": [0, 0],
            "stream": [7, 7],
            "pid": [0, 0],
            "tid": [7, 7],
            "kind": pa.array(["kernel", "memcpy"]).dictionary_encode(),
            "name": pa.array(["sgemm", "Memcpy HtoD"]).dictionary_encode(),
            "start_ns": [0, 20],
            "end_ns": [10, 25],
            "correlation": [1, 2],
            "external_id": [-1, -1],
        }
    )
    from dtrace.core.schema import validate_events

    ev = validate_events(t).to_pandas()
    part = prepare(
        ev,
        COLLECTIVE_SCHEMA.empty_table().to_pandas(),
        MEMCPY_SCHEMA.empty_table().to_pandas(),
        rank=0,
        device=0,
        fmt="kineto",
        options=Options(),
    )
    out = run_analyses(part)
    assert int(out["breakdown"]["busy_ns"].iloc[0]) == 15
    assert int(out["breakdown"]["idle_ns"].iloc[0]) == 10
    assert len(out["ops"]) == 0
