"""Every ``*_ns`` column of every table is an integer; missing values are NA, never -1 (issue 14).

A job mixing generated Kineto ranks, a real ROCm trace (RCCL kernels, memsets without sizes), an
Nsight Systems file and ``nsys stats`` summaries is analysed; every table is checked for its
dtypes, the nullable columns for NA where the inputs state nothing, and the declared dtypes
survive a reload. Rounding is checked by hand.
"""

import shutil

import numpy as np
import pandas as pd
import pytest
from test_nsys_csv import KERN_NEW, MEM_NEW, NVTX, write
from testpaths import shared

import dtrace
from dtrace.analyses import ANALYSES, as_declared, conform
from dtrace.generate.synth import generate

NULLABLE = {  # table: columns that hold NA where the inputs state nothing
    "collectives": ("seq", "bytes", "step"),
    "collective_instances": ("seq", "bytes"),
    "memops": ("bytes",),
    "segments": ("step", "comm_stream", "comm_start_ns"),
    "stragglers": ("explained_by",),
}


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("mixed")
    generate(str(d / "gen"), ranks=4, steps=2, seed=5, faults=["compute:rank=1:slow=0.3"])
    shutil.copy(shared("kineto", "single", "mi300_resnet_rccl_rank0.json.gz"), d / "gen" / "rank-4.json.gz")
    shutil.copy(shared("nsys", "rtx4060ti_4streams.sqlite"), d / "gen" / "rank-5.sqlite")
    res = dtrace.analyze(str(d / "gen"), str(d / "out"), scheduler="sync", rank_by="order")
    assert not res.errors
    return res, dtrace.load(str(d / "out"))


def _check_types(res):
    for name in res.table_names:
        df = res.table(name)
        for c in df.columns:
            if c.endswith("_ns"):
                assert str(df[c].dtype) in ("int64", "Int64"), (name, c, df[c].dtype)


def test_every_ns_column_is_integer_and_missing_is_na(job):
    res, again = job
    _check_types(res)
    _check_types(again)
    for name, cols in NULLABLE.items():
        df = res.table(name)
        assert len(df), name
        for c in cols:
            assert str(df[c].dtype) == "Int64", (name, c)
            assert not (df[c].dropna() < 0).any(), (name, c)  # no -1 left
            assert str(again.table(name)[c].dtype) == "Int64", (name, c)  # survives the Parquet round trip
    # the generated ranks state sizes; the MI300 trace's (rank 4) memsets state none
    mem = res.memops
    memset = mem.loc[mem["op"] == "memset"].set_index("rank")["bytes"]
    assert pd.isna(memset[4]) and memset.drop(4).notna().all()
    assert res.collectives["bytes"].notna().any()
    seg = res.segments
    no_comm = seg["kind"].isin(["start", "end"])
    assert seg.loc[no_comm, "comm_stream"].isna().all() and seg.loc[~no_comm, "comm_stream"].notna().any()


def test_summary_rows_are_whole_ns_too(tmp_path):
    d = tmp_path / "csvs"
    d.mkdir()
    write(d, "run_rank3_cuda_gpu_kern_sum.csv", KERN_NEW.replace("707.1", "707.5"))
    write(d, "run_rank3_cuda_gpu_mem_time_sum.csv", MEM_NEW)
    write(d, "run_rank3_nvtx_gpu_proj_trace.csv", NVTX)
    r = dtrace.analyze(str(d), str(tmp_path / "out"), scheduler="sync", iters=3)
    _check_types(r)
    k = r.kernels.set_index("name")
    nccl = k.loc["ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096>)"]
    assert nccl["std_ns"] == 708 and nccl["total_per_iter_ns"] == 1000  # 707.5 -> 708 (half to even), 3000 / 3
    assert k.loc["void gemm_kernel<float, 128>(int, float*)", "total_per_iter_ns"] == 2000
    assert r.memops["bytes"].isna().all()  # summaries state no sizes


def test_rounding_is_half_to_even_and_nan_is_na():
    assert as_declared(pd.Series([0.5, 1.5, 2.5, -0.5, 2.4999]), "int64").tolist() == [0, 2, 2, 0, 2]
    assert as_declared(pd.Series([1.0, np.nan]), "Int64").tolist() == [1, pd.NA]
    with pytest.raises(TypeError, match="missing values"):
        as_declared(pd.Series([1.0, np.nan]), "int64", "t.c")
    kernels = next(a for a in ANALYSES if a.table == "kernels").columns
    df = pd.DataFrame({c: pd.Series([1], dtype="object" if t == "object" else t) for c, t in kernels.items()})
    df["mean_ns"] = 2.5
    df["median_ns"] = 3.5
    out = conform(df, kernels, "kernels")
    assert (out["mean_ns"].iloc[0], out["median_ns"].iloc[0]) == (2, 4) and out["mean_ns"].dtype == np.int64
