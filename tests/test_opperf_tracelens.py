"""op_perf against TraceLens's unified perf summary of four shared traces (../shared/traces/reference).

Per (op, shapes, dtypes) row of TraceLens's figures: the instance count, the GFLOPS and the data
moved are equal within 0.1 % wherever TraceLens's formula is right; the kernel time is equal
where both tools attribute the same GPU events to the op. Every place dtrace differs on purpose is
listed below with dtrace's figure worked out by hand and the reason (docs/semantics.md, "Op
performance model"). On mi300_resnet_rccl_rank0 the roofline is compared too, with TraceLens's
bundled MI300X spec (its "max achievable" figures) given as a dtrace GPU spec.
"""

from __future__ import annotations

import ast
import json
import math
import os

import pandas as pd
import pytest
from testpaths import shared

import dtrace
from dtrace.knowledge import opmodel

MIB = 2**20
CONV_BWD_TYPES = json.dumps(
    ["c10::BFloat16"] * 3 + ["ScalarList"] * 4 + ["Scalar", "ScalarList", "Scalar", "ScalarList"], separators=(",", ":")
)
REDUCE_TYPES = '["c10::BFloat16","ScalarList","Scalar",""]'
# TraceLens's bundled MI300X spec (peer_numbers.md, "Added later")
TRACELENS_MI300X = {
    "name": "MI300X",
    "mem_bw_gbps": 5300,
    "max_achievable_tflops": {
        "matrix_bf16": 708,
        "matrix_fp16": 654,
        "matrix_fp8": 1273,
        "matrix_fp32": 163,
        "vector_bf16": 163,
        "vector_fp32": 81,
    },
}


def _canon_dims(text: str) -> str:
    if not text:
        return ""

    def conv(x):
        return [conv(i) for i in x] if isinstance(x, (tuple, list)) else x

    return json.dumps(conv(ast.literal_eval(text)), separators=(",", ":"))


def _canon_types(text: str) -> str:
    return json.dumps(list(ast.literal_eval(text)), separators=(",", ":")) if text else ""


def _num(v) -> float:
    return float(v) if v not in ("", None) else math.nan


def compare(trace: str, ref_csv: str, tmp_path, folder: str = "single", **options) -> pd.DataFrame:
    """TraceLens's rows (summed over its strides/arguments) beside dtrace's (summed likewise;
    over the serving phases too)."""
    res = dtrace.analyze(shared("kineto", folder, trace), str(tmp_path / "out"), scheduler="sync", **options)
    assert res.ok, res.errors
    ref = pd.read_csv(shared("reference", ref_csv), keep_default_na=False)
    name = "name" if "name" in ref.columns else "Name"
    # a "Synthetic Op" is TraceLens's name for kernels an op launched itself beside its children
    ref["op"] = ref[name].str.split("->").str[0].str.replace(r" \(Synthetic Op\)$", "", regex=True)
    ref["shapes"] = ref["Input Dims"].map(_canon_dims)
    ref["dtypes"] = ref["Input type"].map(_canon_types)
    # dtrace keeps the arguments of the ops it has a formula for only: the others are one row per op
    no_args = ~ref["op"].map(lambda o: opmodel.priority(o) == opmodel.MODEL).astype(bool)
    ref.loc[no_args, ["shapes", "dtypes"]] = ""
    agg = {
        "tl_count": ("operation_count", "sum"),
        "tl_us": ("Kernel Time (µs)_sum", "sum"),
        "tl_gflops": ("GFLOPS", "first"),
        "tl_mb": ("Data Moved (MB)", "first"),
    }
    if "Roofline Time (µs)_first" in ref.columns:
        agg.update(tl_roof=("Roofline Time (µs)_first", "first"), tl_bound=("Roofline Bound", "first"))
    tl = ref.groupby(["op", "shapes", "dtypes"], sort=False).agg(**agg).reset_index()
    op = res.op_perf.assign(_roof=res.op_perf["roofline_ns"].astype("Float64").astype(float))
    ours = (
        op.groupby(["op", "shapes", "dtypes"])
        .agg(
            count=("count", "sum"),
            gpu_ns=("gpu_ns", "sum"),
            flops=("flops", "first"),
            bytes=("bytes", "first"),
            roof=("_roof", "sum"),
            bound=("bound", "first"),
            rows=("count", "size"),
        )  # fmt: skip
        .reset_index()
    )
    return tl.merge(ours, on=["op", "shapes", "dtypes"], how="outer", indicator=True)


def _close(a: float, b: float, rel: float = 1e-3) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= rel * abs(b)


def check_figures(m: pd.DataFrame, pinned: dict, unmodelled: tuple = ()) -> int:
    """FLOPs and bytes equal within 0.1 % where TraceLens has them, except the pinned rows, whose
    dtrace figures must be the hand-computed ones, and the ops dtrace does not model on purpose.
    Returns the number of rows compared."""
    both = m.loc[m["_merge"] == "both"]
    n = 0
    for _, r in both.iterrows():
        key = (r["op"], r["shapes"], r["dtypes"])
        if key in pinned:
            flops, nbytes = pinned[key]
            assert r["flops"] == flops and r["bytes"] == nbytes, (key, r["flops"], r["bytes"])
            continue
        if r["op"].startswith(unmodelled):
            assert math.isnan(r["flops"]), key
            continue
        tl_f, tl_b = _num(r["tl_gflops"]), _num(r["tl_mb"])
        if not math.isnan(tl_f):
            assert _close(r["flops"] / 1e9, tl_f), (key, r["flops"] / 1e9, tl_f)
            n += 1
        if not math.isnan(tl_b):
            assert _close(r["bytes"] / MIB, tl_b), (key, r["bytes"] / MIB, tl_b)
    for key in pinned:
        assert ((both["op"] == key[0]) & (both["shapes"] == key[1]) & (both["dtypes"] == key[2])).any(), key
    assert (both["count"] == both["tl_count"]).all(), both.loc[both["count"] != both["tl_count"], ["op", "shapes"]]
    return n


def test_h100_owlv2(tmp_path):
    m = compare("h100_owlv2.json.gz", "h100_owlv2.tracelens_unified_perf_summary.csv", tmp_path)
    pinned = {
        # linalg_norm over the last dimension of 1x5184x768 writes 1x5184 (TraceLens: one element)
        ("aten::linalg_norm", "[[1,5184,768],[],[],[],[]]", '["c10::BFloat16","","ScalarList","Scalar",""]'): (
            5184 * 768,
            (5184 * 768 + 5184) * 2,
        ),
        # in place: the bf16 self is written (TraceLens: the fp32 operand's 4 bytes)
        ("aten::add_", "[[1,5184,4],[5184,4],[]]", '["c10::BFloat16","float","Scalar"]'): (
            5184 * 4,
            5184 * 4 * (2 + 4 + 2),
        ),
    }
    assert check_figures(m, pinned) >= 50
    both = m.loc[m["_merge"] == "both"]
    # TraceLens has no size for bool: a bf16 tensor copied into a bool mask reads 2 bytes, writes 1
    cast = both.loc[(both["op"] == "aten::copy_") & (both["dtypes"] == '["bool","c10::BFloat16","Scalar"]')]
    assert len(cast) == 1 and cast["bytes"].iloc[0] == 25 * (1 + 2) and cast["tl_mb"].iloc[0] == ""
    # the same GPU events: the kernel time is TraceLens's to the ns rounding of each event
    assert ((both["gpu_ns"] / 1000 - both["tl_us"]).abs() <= 0.002 * both["count"] + 1e-6 * both["tl_us"]).all()
    # where(cond, scalar, x) fills a 0-dim tensor, then runs the inner where: dtrace gives both
    # kernels to the op called (outermost), TraceLens lists the inner where and the fill_
    only_tl = m.loc[m["_merge"] == "left_only"]
    assert sorted(zip(only_tl["op"], only_tl["shapes"])) == [
        ("aten::fill_", "[[],[]]"),
        ("aten::where", "[[1,1,1],[],[1,5184,1]]"),
    ]
    where = m.loc[(m["op"] == "aten::where") & (m["_merge"] == "right_only")]
    assert where["gpu_ns"].iloc[0] / 1000 == pytest.approx(only_tl["tl_us"].sum(), abs=0.01)


def test_b200_vllm(tmp_path):
    m = compare("b200_vllm_eager_rank0.json.gz", "b200_vllm_eager_rank0.tracelens_unified_perf_summary.csv", tmp_path)
    scalars = '","'.join(["Scalar"] * 6)
    pinned = {
        ("aten::copy_", "[[1],[1],[]]", '["bool","bool","Scalar"]'): (1, 2),  # 1 byte each way (TraceLens: unknown)
        # Inductor's kernel (int, int64 and bool tensors of 888, constants, then xnumel 888): one FLOP
        # per point and each tensor once (TraceLens: 4 FLOPs per point, no bytes)
        (
            "triton_poi_fused_add_bitwise_and_bitwise_not_bitwise_or_ge_lt_mul_sub_0",
            "[[888],[888],[888],[],[],[],[],[],[]]",
            f'["int","long int","bool","{scalars}"]',
        ): (888, 888 * (4 + 8 + 1)),
    }
    assert check_figures(m, pinned) >= 15
    # the old step annotation execute_context_1(888_788544)_generation_0(0): one prefill of 888 tokens
    # (no prefix); fp8 queries, 8 heads over 1 KV head of 64; TraceLens has no figures for it
    attn = m.loc[m["op"] == "vllm::unified_attention_with_output"].iloc[0]
    assert attn["flops"] == 2 * 8 * (888 * 889 // 2) * (64 + 64)
    assert attn["bytes"] == 888 * 8 * (64 * 1 + 64 * 2) + 888 * 1 * (64 + 64) * 2  # Q fp8, O bf16; K, V bf16
    assert attn["tl_gflops"] == ""
    only_tl = m.loc[m["_merge"] == "left_only", "op"].tolist()
    # symmetric-memory all-reduce kernels are communication (category comm): not the op's arithmetic;
    # aten::gather and aten::index run inside ops dtrace models (index_select, the index wrapper's launcher)
    assert sorted(set(only_tl)) == ["aten::gather", "symm_mem::multimem_all_reduce_"]
    both = m.loc[(m["_merge"] == "both") & (m["op"] != "vllm::unified_attention_with_output")]
    assert ((both["gpu_ns"] / 1000 - both["tl_us"]).abs() <= 0.002 * both["count"] + 1e-6 * both["tl_us"]).all()


def test_mi300_resnet_with_tracelens_mi300x_spec(tmp_path):
    spec = tmp_path / "mi300x.json"
    spec.write_text(json.dumps(TRACELENS_MI300X))
    m = compare(
        "mi300_resnet_rccl_rank0.json.gz",
        "mi300_resnet_rccl_rank0.tracelens_unified_perf_summary_mi300x.csv",
        tmp_path,
        gpu_spec=str(spec),
    )
    first_conv_bwd = "[[10,64,112,112],[10,3,224,224],[64,3,7,7],[],[],[],[],[],[],[],[]]"
    w_grad = 2 * 10 * 64 * 112 * 112 * 3 * 49
    pinned = {
        # the first layer's input needs no gradient (output_mask [False, True, ...]): dw only
        ("aten::convolution_backward", first_conv_bwd, CONV_BWD_TYPES): (
            w_grad,
            (10 * 64 * 112 * 112 + 10 * 3 * 224 * 224 + 64 * 3 * 49) * 2,
        ),
        # reductions write their reduced shape: 10x1000 summed over dim 0, 10x512x7x7 averaged over 7x7
        ("aten::sum", "[[10,1000],[],[],[]]", REDUCE_TYPES): (10 * 1000, (10 * 1000 + 1000) * 2),
        ("aten::mean", "[[10,512,7,7],[],[],[]]", REDUCE_TYPES): (10 * 512 * 49, (10 * 512 * 49 + 10 * 512) * 2),
    }
    assert check_figures(m, pinned) >= 70
    both = m.loc[m["_merge"] == "both"]
    # the roofline with TraceLens's spec: the same time and bound per instance where the figures agree
    keys = list(zip(both["op"], both["shapes"], both["dtypes"]))
    roofed = both.loc[both["tl_roof"].map(_num).notna().to_numpy() & [k not in pinned for k in keys]]
    assert len(roofed) >= 70
    want_ns = roofed["tl_roof"].astype(float) * 1000 * roofed["count"]  # TraceLens: µs per instance
    # dtrace rounds each row's total to whole ns (a shape can be several rows: strides, arguments)
    assert ((roofed["roof"] - want_ns).abs() <= 0.5 * roofed["rows"] + 1e-3 * want_ns).all()
    assert (roofed["bound"].str.upper() + "_BOUND" == roofed["tl_bound"]).all()
    # dtrace counts an op's memsets (MIOpen workspace clears) in its time; TraceLens's tree leaves them
    # out, so dtrace's kernel time is never below TraceLens's ...
    assert (
        (both["gpu_ns"] / 1000 >= both["tl_us"] - 0.002 * both["count"])
        .loc[both["op"] != "aten::max_pool2d_with_indices_backward"]
        .all()
    )
    # ... and for one conv shape, a plain reading of the raw trace gives both figures
    conv = both.loc[(both["op"] == "aten::convolution") & (both["shapes"].str.startswith("[[10,64,56,56],[64,64,3,3]"))]
    with_memsets, without = _conv_times_from_raw()
    assert conv["gpu_ns"].iloc[0] / 1000 == pytest.approx(with_memsets, abs=0.05)
    assert conv["tl_us"].iloc[0] == pytest.approx(without, abs=0.05)
    # max_pool2d backward zeroes its gradient with a fill_ that dtrace models (TraceLens does not):
    # that kernel moves from the pooling op's row to fill_'s, nothing is lost
    pool = both.loc[both["op"] == "aten::max_pool2d_with_indices_backward"]
    fill = m.loc[(m["op"] == "aten::fill_") & (m["shapes"] == "[[10,64,112,112],[]]")]
    assert fill["_merge"].iloc[0] == "right_only"
    moved = pool["tl_us"].iloc[0] - pool["gpu_ns"].iloc[0] / 1000
    assert moved == pytest.approx(fill["gpu_ns"].iloc[0] / 1000, abs=0.05)


def _conv_times_from_raw() -> tuple[float, float]:
    """The union (µs) of the GPU events launched inside aten::convolution of 10x64x56x56 by
    64x64x3x3 on mi300_resnet, with and without its memsets (a plain reading of the JSON)."""
    import gzip

    with gzip.open(shared("kineto", "single", "mi300_resnet_rccl_rank0.json.gz")) as f:
        ev = json.load(f)["traceEvents"]
    ops = [
        e for e in ev
        if e.get("cat") == "cpu_op" and e["name"] == "aten::convolution"
        and e["args"].get("Input Dims", [None, None])[:2] == [[10, 64, 56, 56], [64, 64, 3, 3]]
    ]  # fmt: skip
    runtime = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})]
    gpu = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}

    def union(iv):
        total, cur = 0.0, None
        for s, e in sorted(iv):
            if cur is None or s > cur[1]:
                total += 0 if cur is None else cur[1] - cur[0]
                cur = [s, e]
            else:
                cur[1] = max(cur[1], e)
        return total + (0 if cur is None else cur[1] - cur[0])

    a = b = 0.0
    for o in ops:
        ks = [
            gpu[r["args"]["correlation"]]
            for r in runtime
            if r["tid"] == o["tid"] and o["ts"] <= r["ts"] <= o["ts"] + o["dur"] and r["args"]["correlation"] in gpu
        ]
        a += union([(k["ts"], k["ts"] + k["dur"]) for k in ks])
        b += union([(k["ts"], k["ts"] + k["dur"]) for k in ks if k["cat"] != "gpu_memset"])
    return a, b


def test_a100_without_shapes(tmp_path):
    """No record_shapes: the same rows, counts and (but for the pooling op's fill_) kernel times."""
    m = compare("a100_nccl_collectives.json.gz", "a100_nccl_collectives.tracelens_unified_perf_summary.csv", tmp_path)
    both = m.loc[m["_merge"] == "both"]
    assert (m["_merge"] != "left_only").all() and len(both) == len(m.loc[m["_merge"] != "right_only"])
    assert both["flops"].isna().all()  # nothing to model without shapes
    same = both.loc[~both["op"].isin(["aten::max_pool2d_with_indices_backward", "aten::fill_"])]
    assert ((same["gpu_ns"] / 1000 - same["tl_us"]).abs() <= 0.002 * same["count"] + 1e-6 * same["tl_us"]).all()
    moved = both.set_index("op")
    # the pooling backward's zero-fill counts as fill_ in dtrace: the two rows together agree
    tl = moved.loc[["aten::max_pool2d_with_indices_backward", "aten::fill_"], "tl_us"].sum()
    ours = moved.loc[["aten::max_pool2d_with_indices_backward", "aten::fill_"], "gpu_ns"].sum() / 1000
    assert ours == pytest.approx(tl, abs=0.05)
    assert os.path.basename(shared("reference", "peer_numbers.md")) == "peer_numbers.md"
