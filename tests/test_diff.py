"""``dtrace diff``: per class, kernel and op deltas between two runs, checked by hand."""

import json

import numpy as np
import pandas as pd
import pytest

from dtrace.cli.main import main
from dtrace.errors import UsageError
from dtrace.explore.diff import COLUMNS, diff, diff_totals, level_totals, missing_levels, n_parts
from dtrace.results import Results, load, write_results


def run_a() -> Results:
    """Two GPUs. Per GPU: gemm 2 × 100 ns + 3 × 110 ns ... (totals below are the hand sums)."""
    kernels = pd.DataFrame(
        {
            "rank": [0, 0, 0, 1, 1],
            "device": [0, 0, 0, 1, 1],
            "name": ["gemm_a", "nccl_ar", "relu", "gemm_a", "nccl_ar"],
            "class": ["gemm", "nccl_allreduce", "elementwise", "gemm", "nccl_allreduce"],
            "category": ["compute", "comm", "compute", "compute", "comm"],
            "count": [2, 1, 4, 2, 1],
            "total_ns": [200, 50, 40, 220, 70],
        }
    )
    classes = kernels.groupby(["rank", "device", "class"], as_index=False)[["count", "total_ns"]].sum()
    ops = pd.DataFrame(
        {
            "rank": [0, 1],
            "device": [0, 1],
            "op": ["aten::mm", "aten::mm"],
            "count": [2, 2],
            "gpu_direct_ns": [200, 220],
            "gpu_subtree_ns": [200, 220],
        }
    )
    bd = pd.DataFrame(
        {
            "rank": [0, 1],
            "device": [0, 1],
            "computation_ns": [240, 220],
            "exposed_comm_ns": [30, 50],
            "exposed_memcpy_ns": [0, 0],
            "busy_ns": [270, 270],
            "idle_ns": [30, 30],
            "total_ns": [300, 300],
            "comm_ns": [50, 70],
            "memcpy_ns": [0, 0],
        }
    )
    return Results({"kernels": kernels, "classes": classes, "ops": ops, "breakdown": bd}, {})


def run_b() -> Results:
    """One GPU: gemm slower, relu gone, a new softmax kernel, nccl unchanged per GPU."""
    kernels = pd.DataFrame(
        {
            "rank": [0, 0, 0],
            "device": [0, 0, 0],
            "name": ["gemm_a", "nccl_ar", "softmax"],
            "class": ["gemm", "nccl_allreduce", "normalization"],
            "category": ["compute", "comm", "compute"],
            "count": [2, 1, 3],
            "total_ns": [300, 60, 9],
        }
    )
    classes = kernels.groupby(["rank", "device", "class"], as_index=False)[["count", "total_ns"]].sum()
    bd = pd.DataFrame(
        {
            "rank": [0],
            "device": [0],
            "computation_ns": [309],
            "exposed_comm_ns": [40],
            "exposed_memcpy_ns": [0],
            "busy_ns": [349],
            "idle_ns": [11],
            "total_ns": [360],
            "comm_ns": [60],
            "memcpy_ns": [0],
        }
    )
    return Results({"kernels": kernels, "classes": classes, "breakdown": bd}, {})


def rows(d: pd.DataFrame, level: str) -> list[dict]:
    part = d.loc[
        d["level"] == level, ["key", "presence", "count_a", "count_b", "time_a_ns", "time_b_ns", "time_delta_ns"]
    ]
    return part.to_dict("records")


def test_kernel_level_per_gpu_by_hand():
    d = diff(run_a(), run_b())
    assert list(d.columns) == list(COLUMNS)
    # per GPU: A has 2 GPUs, B has 1.
    # gemm_a: A (200 + 220) / 2 = 210 ns, count 4 / 2 = 2; B 300 ns, count 2 → +90 ns
    # nccl_ar: A (50 + 70) / 2 = 60, B 60 → 0; relu: A 40 / 2 = 20, count 2 → −20, only in A
    # softmax: B 9, count 3 → +9, only in B.  Sorted by |Δt|: gemm_a, relu, softmax, nccl_ar
    assert rows(d, "kernel") == [
        {
            "key": "gemm_a",
            "presence": "both",
            "count_a": 2.0,
            "count_b": 2.0,
            "time_a_ns": 210,
            "time_b_ns": 300,
            "time_delta_ns": 90,
        },
        {
            "key": "relu",
            "presence": "only_a",
            "count_a": 2.0,
            "count_b": 0.0,
            "time_a_ns": 20,
            "time_b_ns": 0,
            "time_delta_ns": -20,
        },
        {
            "key": "softmax",
            "presence": "only_b",
            "count_a": 0.0,
            "count_b": 3.0,
            "time_a_ns": 0,
            "time_b_ns": 9,
            "time_delta_ns": 9,
        },
        {
            "key": "nccl_ar",
            "presence": "both",
            "count_a": 1.0,
            "count_b": 1.0,
            "time_a_ns": 60,
            "time_b_ns": 60,
            "time_delta_ns": 0,
        },
    ]
    k = d.loc[d["level"] == "kernel"].set_index("key")
    assert k.loc["gemm_a", "time_ratio"] == pytest.approx(300 / 210)
    assert np.isnan(k.loc["softmax", "time_ratio"]) and k.loc["relu", "time_ratio"] == 0
    assert k["count_delta"].tolist() == [0.0, -2.0, 3.0, 0.0]
    assert d["time_a_ns"].dtype == np.int64 and d["count_a"].dtype == np.float64


def test_class_op_and_breakdown_levels_by_hand():
    d = diff(run_a(), run_b())
    cls = {r["key"]: r["time_delta_ns"] for r in rows(d, "class")}
    assert cls == {"gemm": 90, "elementwise": -20, "normalization": 9, "nccl_allreduce": 0}
    assert [r["key"] for r in rows(d, "class")] == ["gemm", "elementwise", "normalization", "nccl_allreduce"]
    bd = {r["key"]: (r["time_a_ns"], r["time_b_ns"]) for r in rows(d, "breakdown")}
    assert bd["computation"] == (230, 309) and bd["idle"] == (30, 11) and bd["total"] == (300, 360)
    assert d.loc[d["level"] == "breakdown", "count_a"].isna().all()
    # ops: absent in B, so the level is left out and said why
    assert "op" not in set(d["level"])
    assert missing_levels(run_a(), run_b()) == {"op": "table ops absent in run B"}
    assert list(d["level"].drop_duplicates()) == ["breakdown", "class", "kernel"]


def test_job_totals_and_single_levels():
    d = diff(run_a(), run_b(), levels=["kernel"], per="job")
    assert {r["key"]: (r["time_a_ns"], r["time_b_ns"]) for r in rows(d, "kernel")} == {
        "gemm_a": (420, 300),
        "nccl_ar": (120, 60),
        "relu": (40, 0),
        "softmax": (0, 9),
    }
    assert rows(d, "kernel")[0]["key"] == "gemm_a"  # |−120| is the largest change
    ops = diff(run_a(), run_a(), levels=["op"])
    assert rows(ops, "op") == [
        {
            "key": "aten::mm",
            "presence": "both",
            "count_a": 2.0,
            "count_b": 2.0,
            "time_a_ns": 210,
            "time_b_ns": 210,
            "time_delta_ns": 0,
        }
    ]


def test_same_run_has_no_change():
    d = diff(run_a(), run_a())
    assert (d["time_delta_ns"] == 0).all() and (d["count_delta"].fillna(0) == 0).all()
    assert (d["presence"] == "both").all()


def test_helpers_and_errors():
    assert n_parts(run_a()) == 2 and n_parts(run_b()) == 1 and n_parts(Results({}, {})) == 0
    assert level_totals(Results({}, {}), "kernel") is None
    lt = level_totals(run_a(), "class").set_index("key")
    assert lt.loc["gemm", "time_ns"] == 420 and lt.loc["gemm", "count"] == 4
    # class falls back to kernels.class when there is no classes table
    no_cls = Results({"kernels": run_a().kernels}, {})
    assert level_totals(no_cls, "class").set_index("key")["time_ns"].to_dict() == {
        "elementwise": 40,
        "gemm": 420,
        "nccl_allreduce": 120,
    }
    with pytest.raises(UsageError, match="valid: breakdown, class, kernel, op"):
        diff(run_a(), run_b(), levels=["kernels"])
    with pytest.raises(UsageError, match="valid: gpu, job"):
        diff(run_a(), run_b(), per="rank")
    empty = diff(Results({}, {}), Results({}, {}))
    assert list(empty.columns) == list(COLUMNS) and not len(empty)
    # rounding happens after the division: (1 + 2) / 2 = 1.5 → 2 (half to even), delta from rounded values
    a = pd.DataFrame({"key": ["k"], "count": [1.0], "time_ns": [3]})
    b = pd.DataFrame({"key": ["k"], "count": [1.0], "time_ns": [1]})
    one = diff_totals(a, b, level="kernel", n_a=2, n_b=1).iloc[0]
    assert (one["time_a_ns"], one["time_b_ns"], one["time_delta_ns"]) == (2, 1, -1)


@pytest.fixture
def two_dirs(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    for path, res in ((a, run_a()), (b, run_b())):
        write_results(path, {n: res.table(n) for n in res.table_names}, {"inputs": []})
    return a, b


def test_cli_diff_outputs(two_dirs, tmp_path, capsys):
    a, b = two_dirs
    pq_path, csv_path = tmp_path / "d.parquet", tmp_path / "d.csv"
    assert main(["diff", a, b, "-o", str(pq_path)]) == 0
    out = capsys.readouterr().out
    assert "kernel: B − A (per GPU" in out and "gemm_a" in out and "time delta (ns)" in out
    assert "op: not available (table ops absent in run B)" in out
    back = pd.read_parquet(pq_path)
    pd.testing.assert_frame_equal(back, diff(load(a), load(b)))
    assert main(["diff", a, b, "--level", "kernel", "--per", "job", "-o", str(csv_path), "--fmt", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert records[0]["key"] == "gemm_a" and records[0]["time_delta_ns"] == -120
    csv = pd.read_csv(csv_path)
    assert csv["time_delta_ns"].tolist() == [-120, -60, -40, 9]
    assert main(["diff", a, b, "--fmt", "markdown", "--top", "1", "--level", "class"]) == 0
    md = capsys.readouterr().out
    assert "| gemm | both |" in md and "3 more rows not shown" in md


def test_cli_diff_errors(two_dirs, tmp_path, capsys):
    a, b = two_dirs
    assert main(["diff", a, b, "-o", str(tmp_path / "d.xlsx")]) == 2
    assert "valid: .parquet, .csv" in capsys.readouterr().err
    assert main(["diff", a, str(tmp_path / "missing")]) == 2
    assert "not a dtrace results directory" in capsys.readouterr().err
