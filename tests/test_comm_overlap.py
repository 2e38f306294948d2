"""Communication hidden by computation (``comm_overlap_share`` of ``breakdown`` and ``steps``):
HTA's comm/comp overlap, as a column (issue 32, item 4)."""

import os

import numpy as np
import pandas as pd
import pytest
import rawtrace
from testpaths import shared

import dtrace
from dtrace.render.summary import summary_csv

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def two_rank():
    return dtrace.analyze(shared("kineto", "hta-2rank"), scheduler="sync", cache=rawtrace.ingest_cache())


def _share(gpu: pd.DataFrame) -> float:
    """|∪comm ∩ ∪compute| / |∪comm| by plain sweeps; comm: the NCCL kernels, compute: the other kernels."""
    k = gpu.loc[gpu["kind"] == "kernel"]
    comm = k["name"].str.contains("nccl", case=False).to_numpy()
    s, e = k["start_ns"].to_numpy(), k["end_ns"].to_numpy()
    u_comm = rawtrace.union_len(s[comm], e[comm])
    both = u_comm + rawtrace.union_len(s[~comm], e[~comm]) - rawtrace.union_len(s, e)
    return both / u_comm


def test_overlap_share_equals_an_independent_sweep_of_the_raw_json(two_rank):
    bd = two_rank.breakdown.set_index("rank")
    for rank in (0, 1):
        raw = rawtrace.load(shared("kineto", "hta-2rank", f"sampled_rank-{rank}.json.gz"))
        assert bd.loc[rank, "comm_overlap_share"] == pytest.approx(_share(raw["gpu"]), abs=1e-12)
        st = two_rank.steps.loc[two_rank.steps["rank"] == rank].set_index("step")
        raw["gpu"]["step"] = rawtrace.step_of(raw["gpu"], raw["steps"])
        for step, g in raw["gpu"].groupby("step"):
            if step >= 0:
                assert st.loc[step, "comm_overlap_share"] == pytest.approx(_share(g), abs=1e-12)


def test_overlap_share_equals_hta(two_rank):
    """HTA 0.5.0's get_comm_comp_overlap on the same traces (recorded by
    tests/data/hta_overlap/record_overlap.py, every step: HTA's default leaves the last ProfilerStep out and
    reads 11.81 % on rank 0). HTA merges each kind's intervals as dtrace does; the two agree to
    HTA's rounding (two decimals of a percentage)."""
    hta = pd.read_csv(os.path.join(HERE, "data", "hta_overlap", "hta_2rank.csv")).set_index("rank")
    bd = two_rank.breakdown.set_index("rank")
    for rank in (0, 1):
        assert 100 * bd.loc[rank, "comm_overlap_share"] == pytest.approx(
            hta.loc[rank, "comp_comm_overlap_pctg"], abs=0.006
        )


def test_no_communication_is_nan_not_zero_and_the_summary_shows_it(two_rank):
    from dtrace.analyses.breakdown import overlap_share

    assert np.isnan(overlap_share(np.array([0]), np.array([0]))[0])
    head = summary_csv(two_rank).splitlines()[0].split(",")
    assert head[-1] == "comm_overlap_share"
