"""op_perf, op_family_perf, op_perf_xrank and devices on the real H200 trace (tests/data/h200).

FLOPs and bytes are computed by hand from the shapes record.py ran; GPU times and instance counts
come from an independent plain reading of the raw JSON (an op's GPU events are those launched by
runtime calls inside it on its thread; their union in float µs); peaks are the datasheet's and
the H200's own measured ceilings (tests/data/h200/hw.json).
"""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pandas as pd
import pytest
from testpaths import ROOT, shared

import dtrace

H200 = os.path.join(ROOT, "tests", "data", "h200", "ops_rank0.pt.trace.json.gz")
BF = "c10::BFloat16"


@pytest.fixture(scope="module")
def raw():
    with gzip.open(H200) as f:
        return json.load(f)["traceEvents"]


@pytest.fixture(scope="module")
def res(tmp_path_factory):
    return dtrace.analyze(H200, str(tmp_path_factory.mktemp("h200") / "out"), scheduler="sync")


def _union_us(intervals) -> float:
    total, cur = 0.0, None
    for s, e in sorted(intervals):
        if cur is None or s > cur[1]:
            total += 0 if cur is None else cur[1] - cur[0]
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
    return total + (0 if cur is None else cur[1] - cur[0])


def _instances(raw, name: str, dims: list, dtype: str) -> list[float]:
    """Per outermost instance of op ``name`` with ``Input Dims == dims`` and first ``Input type``
    ``dtype``: the union (µs) of the GPU events launched by runtime calls inside it (a plain
    reading of the raw events)."""
    ops = [
        e for e in raw
        if e.get("cat") == "cpu_op" and e["name"] == name and e["args"].get("Input Dims") == dims
        and e["args"]["Input type"][0] == dtype
    ]  # fmt: skip
    runtime = [e for e in raw if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})]
    gpu = {}
    for e in raw:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            gpu.setdefault(e["args"]["correlation"], []).append(e)
    out = []
    for o in ops:
        if any(
            p is not o and p["tid"] == o["tid"] and p["ts"] <= o["ts"] and o["ts"] + o["dur"] <= p["ts"] + p["dur"]
            for p in ops
        ):
            continue  # nested in another instance of the same op: the outer one owns its work
        inside = [r for r in runtime if r["tid"] == o["tid"] and o["ts"] <= r["ts"] <= o["ts"] + o["dur"]]
        ks = [k for r in inside for k in gpu.get(r["args"]["correlation"], [])]
        out.append(_union_us([(k["ts"], k["ts"] + k["dur"]) for k in ks]))
    return out


def _row(op_perf: pd.DataFrame, op: str, dims: list, dtype: str = BF) -> pd.Series:
    shapes = json.dumps(dims, separators=(",", ":"))
    first = op_perf["dtypes"].map(lambda t: json.loads(t)[0] if t else "")
    hit = op_perf.loc[(op_perf["op"] == op) & (op_perf["shapes"] == shapes) & (first == dtype)]
    assert len(hit) == 1, (op, shapes, len(hit))
    return hit.iloc[0]


CASES = [
    # op, Input Dims (as recorded), FLOPs by hand, bytes by hand
    ("aten::mm", [[4096, 4096], [4096, 4096]], 2 * 4096**3, 3 * 4096 * 4096 * 2),
    ("aten::mm", [[2048, 2048], [2048, 2048]], 2 * 2048**3, 3 * 2048 * 2048 * 4, "float"),
    ("aten::mm", [[4096, 4096], [4096, 4096]], 2 * 4096**3, 3 * 4096 * 4096 * 2, "c10::Half"),
    # F.linear(X, W, bias) runs aten::addmm(bias, X, W^T): the linear is a wrapper
    ("aten::addmm", [[4096], [8192, 4096], [4096, 4096], [], []], 2 * 8192 * 4096 * 4096 + 8192 * 4096,
     (8192 * 4096 + 4096 * 4096 + 8192 * 4096 + 4096) * 2),
    ("aten::bmm", [[32, 1024, 128], [32, 128, 1024]], 32 * 2 * 1024 * 1024 * 128, 32 * (2 * 1024 * 128 + 1024 * 1024) * 2),
    ("aten::_scaled_mm", [[4096, 4096], [4096, 4096], [], [], [], [], [], []], 2 * 4096**3,
     2 * 4096 * 4096 * 1 + 2 * 4 + 4096 * 4096 * 2, "c10::Float8_e4m3fn"),  # fp8 in, fp32 scales, bf16 out
    ("aten::_grouped_mm", [[2048, 2048], [4, 2048, 2048], [4], [], []], 2 * 2048**3,
     (2048 * 2048 + 4 * 2048 * 2048 + 2048 * 2048) * 2 + 4 * 4),
    # conv2d(32x64x56x56, 128x64x3x3, bias, padding 1) and the grouped one (groups=4, no bias)
    ("aten::convolution", [[32, 64, 56, 56], [128, 64, 3, 3], [128], [], [], [], [], [], []],
     2 * 32 * 128 * 56 * 56 * 64 * 9 + 32 * 128 * 56 * 56, (32 * 64 * 56 * 56 + 128 * 64 * 9 + 32 * 128 * 56 * 56 + 128) * 2),
    ("aten::convolution", [[32, 64, 56, 56], [128, 16, 3, 3], [], [], [], [], [], [], []],
     2 * 32 * 128 * 56 * 56 * 16 * 9, (32 * 64 * 56 * 56 + 128 * 16 * 9 + 32 * 128 * 56 * 56) * 2),
    ("aten::layer_norm", [[8192, 4096], [], [4096], [4096], [], []], 6 * 4096 + 5 * 8192 * 4096,
     2 * 8192 * 4096 * 2 + 6 * 4096 * 2),
    ("aten::add", [[8192, 4096], [4096], []], 8192 * 4096, (2 * 8192 * 4096 + 4096) * 2),  # broadcast bias
    ("aten::amax", [[8192, 4096], [], []], 8192 * 4096, (8192 * 4096 + 4096) * 2),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_flops_bytes_and_time_per_op(res, raw, case):
    op, dims, flops, nbytes, dtype = (*case, BF) if len(case) == 4 else case
    row = _row(res.op_perf, op, dims, dtype)
    assert row["modelled"] and row["flops"] == flops and row["bytes"] == nbytes
    inst = _instances(raw, op, dims, dtype)
    assert row["count"] == len(inst) >= 2  # two profiled steps
    assert abs(row["gpu_ns"] - 1000 * sum(inst)) <= 2 * row["kernels"]  # ns rounding of each event's ends
    assert row["tflops"] == pytest.approx(flops * row["count"] / row["gpu_ns"] / 1e3)


def test_causal_attention_and_its_backward(res):
    b, h, n, d = 8, 16, 2048, 128
    q = [b, h, n, d]
    fwd = res.op_perf.loc[res.op_perf["op"] == "aten::_scaled_dot_product_flash_attention"]
    causal = fwd.loc[fwd["args"].str.contains('"True"')]  # is_causal=True
    plain = fwd.loc[~fwd["args"].str.contains('"True"')]
    assert len(causal) == len(plain) == 1
    assert plain["flops"].iloc[0] == b * h * 4 * n * n * d
    assert causal["flops"].iloc[0] == b * h * 4 * (n * (n + 1) // 2) * d  # the pairs a causal mask keeps
    assert causal["bytes"].iloc[0] == 4 * b * h * n * d * 2
    bwd = res.op_perf.loc[res.op_perf["op"] == "aten::_scaled_dot_product_flash_attention_backward"]
    assert sorted(bwd["flops"]) == [b * h * 10 * (n * (n + 1) // 2) * d, b * h * 10 * n * n * d]
    assert (bwd["backward"]).all() and not fwd["backward"].any()
    # every SDPA backend of record.py: flash, memory-efficient and cuDNN, forward and backward, causal and not
    attn = res.op_perf.loc[res.op_perf["family"] == "attention"]
    assert len(attn) == 12 and attn["modelled"].all() and (attn["count"] == 2).all()
    assert json.loads(causal["shapes"].iloc[0])[:3] == [q, q, q]


def test_wrappers_leave_their_work_to_the_inner_op(res):
    ops = set(res.op_perf["op"])
    for wrapper in ("aten::linear", "aten::matmul", "aten::scaled_dot_product_attention", "aten::softmax",
                    "aten::embedding", "aten::rms_norm", "aten::relu"):  # fmt: skip
        assert wrapper not in ops, wrapper
    for inner in ("aten::addmm", "aten::_softmax", "aten::index_select", "aten::_fused_rms_norm", "aten::clamp_min"):
        assert inner in ops, inner
    # nested modelled ops are owned by the outermost: batch_norm over native_batch_norm
    assert "aten::batch_norm" in ops and "aten::native_batch_norm" not in ops


def test_every_gpu_event_counted_once_and_collectives_left_out(res, raw):
    corr = {
        e["args"]["correlation"]
        for e in raw
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    linked = [
        e for e in raw
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["args"].get("correlation") in corr
        and "nccl" not in e["name"].lower()
    ]  # fmt: skip
    assert res.op_perf["kernels"].sum() == len(linked)
    assert not res.op_perf["op"].str.contains("allreduce|record_param_comms").any()
    fam = res.op_family_perf
    assert fam["gpu_ns"].sum() == res.op_perf["gpu_ns"].sum()
    assert fam["share"].sum() == pytest.approx(1.0)
    graph = res.op_perf.loc[res.op_perf["op"] == "cudaGraphLaunch"]  # a CUDA graph replay: no shapes
    assert len(graph) == 1 and graph["family"].iloc[0] == "unmodelled" and not graph["modelled"].iloc[0]
    un = fam.loc[fam["family"] == "unmodelled"]
    assert un["gpu_ns"].iloc[0] == graph["gpu_ns"].iloc[0] and np.isnan(un["tflops"].iloc[0])


def test_roofline_against_the_datasheet(res):
    dev = res.devices.iloc[0]
    assert (dev["name"], dev["gpu"], dev["gpu_note"]) == ("NVIDIA H200", "NVIDIA H200 SXM", "")
    row = _row(res.op_perf, "aten::mm", [[4096, 4096], [4096, 4096]])
    if row["precision"] != "bf16":
        row = res.op_perf.loc[
            (res.op_perf["shapes"] == "[[4096,4096],[4096,4096]]") & (res.op_perf["precision"] == "bf16")
        ].iloc[0]
    # H200 SXM datasheet: BF16 1,979 TFLOPS with sparsity (989.5 dense), 4.8 TB/s
    per = max(2 * 4096**3 / 989.5e12, 3 * 4096 * 4096 * 2 / 4.8e12) * 1e9
    assert row["bound"] == "compute" and row["peak_tflops"] == 989.5 and row["peak_tbps"] == 4.8
    assert abs(row["roofline_ns"] - per * row["count"]) <= 1
    assert row["lost_ns"] == row["gpu_ns"] - row["roofline_ns"]
    assert row["roofline_share"] == pytest.approx(row["roofline_ns"] / row["gpu_ns"])
    add = _row(res.op_perf, "aten::add", [[8192, 4096], [4096], []])
    assert add["bound"] == "memory" and add["intensity"] == pytest.approx(8192 * 4096 / ((2 * 8192 * 4096 + 4096) * 2))
    peaks = res.gpu_peaks.set_index("metric")
    assert (
        peaks.loc["matrix_fp8", "value"] == 1979
        and peaks.loc["hbm", "unit"] == "TB/s"
        and peaks["source"].str.len().min() > 20
    )


def test_measured_ceilings_as_a_spec_file(tmp_path):
    """hw.json's measured 'max achievable' figures, given with --gpu-spec: the big bf16 GEMM runs at
    about 100 % of them (it is the same GEMM family on the same GPU)."""
    with open(os.path.join(ROOT, "tests", "data", "h200", "hw.json")) as f:
        hw = json.load(f)
    spec = {
        "gpus": [
            {
                "gpu": "H200 max achievable",
                "match": {"name": "H200"},
                "hbm_tbps": hw["copy_d2d_bytes_per_s"] / 1e12,
                "matrix_tflops": {p: hw[f"matmul_{p}_tflops"] for p in ("bf16", "fp16", "fp32", "fp8")},
                "vector_tflops": {"fp32": 67},
                "source": "measured: tests/data/h200/hw.json",
            }
        ]
    }
    path = tmp_path / "h200.json"
    path.write_text(json.dumps(spec))
    r = dtrace.analyze(H200, str(tmp_path / "out"), scheduler="sync", gpu_spec=str(path))
    assert r.devices["gpu"].iloc[0] == "H200 max achievable"
    big = r.op_perf.loc[(r.op_perf["shapes"] == "[[4096,4096],[4096,4096]]") & (r.op_perf["precision"] == "bf16")]
    assert 0.9 < big["roofline_share"].iloc[0] < 1.1
    assert (r.gpu_peaks["origin"] == str(path)).all()
    # a changed spec file is a changed setting: the results are not "up to date"
    spec["gpus"][0]["matrix_tflops"]["bf16"] = 700
    path.write_text(json.dumps(spec))
    again = dtrace.analyze(H200, str(tmp_path / "out"), scheduler="sync", gpu_spec=str(path))
    assert not again.manifest.get("up_to_date")
    assert again.op_perf.loc[big.index, "peak_tflops"].iloc[0] == 700


def test_without_a_known_device_the_figures_stay(tmp_path):
    r = dtrace.analyze(shared("kineto", "hta-2rank", "sampled_rank-0.json.gz"), str(tmp_path / "o"), scheduler="sync")
    dev = r.devices.iloc[0]
    assert dev["gpu"] == "" and "names no device (Kineto's deviceProperties" in dev["gpu_note"]
    mod = r.op_perf.loc[r.op_perf["modelled"]]
    assert len(mod) and mod["tflops"].notna().all() and mod["roofline_ns"].isna().all()
    assert (mod["bound"] == "").all() and r.gpu_peaks.empty


def test_xrank_over_two_ranks():
    r = dtrace.analyze(
        [
            shared("kineto", "hta-2rank", "sampled_rank-0.json.gz"),
            shared("kineto", "hta-2rank", "sampled_rank-1.json.gz"),
        ],
        scheduler="sync",
    )
    x = r.op_perf_xrank
    per = r.op_perf.groupby(["op", "shapes", "dtypes", "strides", "args"])
    both = x.loc[x["parts"] == 2].iloc[0]
    rows = r.op_perf.loc[
        (r.op_perf["op"] == both["op"]) & (r.op_perf["shapes"] == both["shapes"]) & (r.op_perf["dtypes"] == both["dtypes"])
        & (r.op_perf["strides"] == both["strides"]) & (r.op_perf["args"] == both["args"])
    ]  # fmt: skip
    assert len(rows) == 2 and both["count"] == rows["count"].sum() and both["gpu_ns"] == rows["gpu_ns"].sum()
    assert both["max_ns"] == rows["median_ns"].max() and both["min_ns"] == rows["median_ns"].min()
    assert both["max_rank"] == rows.loc[rows["median_ns"].idxmax(), "rank"]
    assert len(x) == per.ngroups


def test_xrank_gpu_is_mixed_where_the_parts_ran_on_different_gpus():
    """``op_perf_xrank.gpu``: the one GPU of a key's rows, "mixed" where they name more than one
    (no GPU named counts as one of them), checked against a pandas group-by of the rows."""
    from dtrace.reduce.opperf import IDENT, _xrank, row_codes

    r = dtrace.analyze(
        [
            shared("kineto", "hta-2rank", "sampled_rank-0.json.gz"),
            shared("kineto", "hta-2rank", "sampled_rank-1.json.gz"),
        ],
        scheduler="sync",
    )
    op = r.op_perf.reset_index(drop=True)
    n = len(op)
    gpu = np.where(op["rank"].to_numpy() == 1, "H100", "H200").astype(object)
    gpu[np.arange(n) % 3 == 0] = None  # some rows name no GPU
    op = op.assign(gpu=gpu)
    x = _xrank(op, row_codes(op, IDENT)[0])
    want = op.groupby(IDENT, dropna=False, sort=False)["gpu"].nunique(dropna=False).gt(1)
    assert want.any() and not want.all()  # both cases are there
    got = x.set_index(IDENT)["gpu"].eq("mixed")
    assert len(got) == len(want) and got.reindex(want.index).tolist() == want.tolist()


def test_throughput_above_the_peak_is_flagged_and_loses_no_time(tmp_path):
    """A spec whose HBM figure is below what the H200 reaches (1 TB/s, the recorded fp32 mul ran at
    4.16): the memory-bound rows then run "above the roofline". They are flagged (the peak table or
    the timing is suspect) and lose no time, never a negative one (issue 30: an aten::add at
    3.368 TB/s against 3.35 gave lost_ns -12,461)."""
    spec = {"gpus": [{"gpu": "low HBM", "match": {"name": "H200"}, "hbm_tbps": 1.0, "matrix_tflops": {"bf16": 989.5}}]}
    path = tmp_path / "low.json"
    path.write_text(json.dumps(spec))
    r = dtrace.analyze(H200, str(tmp_path / "out"), scheduler="sync", gpu_spec=str(path))
    op = r.op_perf
    known = op["roofline_ns"].notna()
    # above the peak, computed here: achieved bytes per second over the spec's figure
    achieved = op["count"] * op["bytes"] / op["gpu_ns"] * 1e9
    above = known & (op["bound"] == "memory") & (achieved > 1.0e12 * 1.0001)
    assert above.sum() >= 3
    assert op.loc[above, "above_peak"].all() and (op.loc[above, "roofline_share"] > 1).all()
    assert (op.loc[above, "lost_ns"] == 0).all()
    assert (op.loc[known, "lost_ns"] >= 0).all() and (r.op_family_perf["lost_ns"].dropna() >= 0).all()
    x = r.op_perf_xrank
    assert (x["lost_ns"].dropna() >= 0).all() and x["above_peak"].sum() >= 3
    # a row below the peak keeps its time lost exactly
    below = op.loc[known & ~op["above_peak"]].iloc[0]
    assert below["lost_ns"] == below["gpu_ns"] - below["roofline_ns"]
