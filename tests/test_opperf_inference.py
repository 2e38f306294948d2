"""op_perf on the three shared inference traces (../shared/traces/kineto/inference) against
TraceLens's unified perf summary of them (../shared/traces/reference), and the serving phase
(prefill, decode, mixed) against a plain reading of the raw JSON.

Per (op, shapes, dtypes) key both tools list: the instance count, the GFLOPS and the data moved
are equal within 0.1 % wherever TraceLens's formula is right; the kernel time is equal where
both attribute the same GPU events to the op. Every key where dtrace differs on purpose is
pinned below with dtrace's figure worked out by hand and the reason (docs/semantics.md, "Op
performance model", "Where dtrace differs from TraceLens on purpose"). The serving models are
those of ``tests/test_opmodel_serving.py``; here they meet TraceLens's figures.
"""

from __future__ import annotations

import gzip
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from test_opperf_tracelens import MIB, TRACELENS_MI300X, _num, check_figures, compare
from testpaths import shared

import dtrace

INF = "inference"
SGLANG, VLLM, XDIT = "sglang_qwen3_8b_prefilldecode", "vllm_piecewise_graph_execution", "xdit_sd35_rank0"
BF = "c10::BFloat16"


def _types(*t: str) -> str:
    return json.dumps(list(t), separators=(",", ":"))


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    path = tmp_path_factory.mktemp("spec") / "mi300x.json"
    path.write_text(json.dumps(TRACELENS_MI300X))
    return str(path)


def _compare(trace: str, csv: str, tmp_path_factory, **options) -> pd.DataFrame:
    return compare(f"{trace}.json.gz", csv, tmp_path_factory.mktemp(trace), folder=INF, **options)


@pytest.fixture(scope="module")
def sglang(tmp_path_factory, spec):
    return _compare(SGLANG, f"{SGLANG}.tracelens_unified_perf_summary_mi300x.csv", tmp_path_factory, gpu_spec=spec)


@pytest.fixture(scope="module")
def xdit(tmp_path_factory, spec):
    return _compare(XDIT, f"{XDIT}.tracelens_unified_perf_summary_mi300x.csv", tmp_path_factory, gpu_spec=spec)


def _row(m: pd.DataFrame, op: str, shapes: str) -> pd.Series:
    rows = m.loc[(m["op"] == op) & (m["shapes"] == shapes)]
    assert len(rows) == 1, (op, shapes, len(rows))
    return rows.iloc[0]


def _same_time(both: pd.DataFrame) -> pd.Series:
    """Kernel time equal to the ns rounding of each event."""
    return (both["gpu_ns"] / 1000 - both["tl_us"]).abs() <= 0.002 * both["count"] + 1e-6 * both["tl_us"]


def test_sglang_against_tracelens(sglang):
    m = sglang
    t = 15360
    rope = ("sgl_kernel::rotary_embedding", "[[15360],[15360,4096],[15360,1024],[],[41216,128],[]]",
            _types("long int", BF, BF, "Scalar", BF, "Scalar"))  # fmt: skip
    silu = ("sgl_kernel::silu_and_mul", "[[15360,12288],[15360,24576]]", _types(BF, BF))
    pinned = {
        # 32 + 8 heads of 128 rotated in place; dtrace also reads the positions and each token's
        # cos/sin row (TraceLens: q and k only, 300 MiB)
        rope: (3 * t * 40 * 128, 2 * t * 40 * 128 * 2 + t * 8 + t * 128 * 2),
        # the activation and the product: 2 FLOPs per output (TraceLens: 5)
        silu: (2 * t * 12288, (t * 24576 + t * 12288) * 2),
    }
    assert check_figures(m, pinned) >= 21
    r = _row(m, *rope[:2])
    assert _num(r["tl_mb"]) * MIB == 2 * t * 40 * 128 * 2 and _num(r["tl_gflops"]) * 1e9 == r["flops"]
    r = _row(m, *silu[:2])
    assert _num(r["tl_mb"]) * MIB == r["bytes"] and _num(r["tl_gflops"]) * 1e9 == 5 * t * 12288
    # the newly modelled serving ops TraceLens models: equal within 0.1 % (check_figures)
    both = m.loc[m["_merge"] == "both"]
    serving = both.loc[both["op"].str.startswith(("aiter::", "sglang::"))]
    assert sorted(serving["op"].value_counts().items()) == [
        ("aiter::add_rmsnorm", 1), ("aiter::gemm_a16w16", 4), ("aiter::mha_batch_prefill", 1),
        ("aiter::rmsnorm", 3), ("sglang::store_cache", 1),
    ]  # fmt: skip
    assert serving["flops"].notna().all()
    # the KV-cache write reads its 15360 int64 slot indices too (TraceLens: 120 MiB, k and v only)
    store = _row(m, "sglang::store_cache", "[[15360,1024],[15360,1024],[835874,1024],[835874,1024],[15360],[],[]]")
    assert store["bytes"] == 2 * (2 * t * 1024 * 2) + t * 8 and store["bytes"] - _num(store["tl_mb"]) * MIB == t * 8
    # TraceLens has no figures for the batch prefill: 15 causal sequences of 1024 tokens
    mha = m.loc[m["op"] == "aiter::mha_batch_prefill"].iloc[0]
    assert math.isnan(_num(mha["tl_gflops"]))
    assert mha["flops"] == 2 * 32 * 15 * (1024 * 1025 // 2) * (128 + 128)
    assert mha["bytes"] == t * 32 * 256 * 2 + t * 8 * 256 * 2
    # the same GPU events: every kernel time equal; the embedding is index_select here (modelled),
    # its inner gather there
    assert _same_time(both).all()
    only = m.loc[m["_merge"] != "both"]
    assert sorted(zip(only["op"], only["_merge"])) == [
        ("aten::gather", "left_only"),
        ("aten::index_select", "right_only"),
    ]
    assert only["gpu_ns"].sum() / 1000 == pytest.approx(only["tl_us"].sum(), abs=0.002)


def test_sglang_roofline_with_tracelens_mi300x_spec(sglang):
    """With TraceLens's MI300X figures as the GPU spec: the same roofline time and bound per
    instance wherever the FLOPs and bytes agree (the GEMMs, norms, KV-cache write, copies)."""
    both = sglang.loc[sglang["_merge"] == "both"]
    roofed = both.loc[both["tl_roof"].map(_num).notna().to_numpy() & ~both["op"].str.startswith("sgl_kernel::")]
    assert len(roofed) >= 12 and (roofed["op"] == "aiter::gemm_a16w16").sum() == 4
    assert {"aiter::rmsnorm", "aiter::add_rmsnorm"} <= set(roofed["op"])
    want_ns = roofed["tl_roof"].astype(float) * 1000 * roofed["count"]
    assert ((roofed["roof"] - want_ns).abs() <= 0.5 * roofed["rows"] + 1e-3 * want_ns).all()
    assert (roofed["bound"].str.upper() + "_BOUND" == roofed["tl_bound"]).all()


def test_vllm_against_tracelens(tmp_path_factory):
    m = _compare(VLLM, f"{VLLM}.tracelens_unified_perf_summary.csv", tmp_path_factory)
    # a HIP graph replay: dtrace one row per launch call (25), TraceLens one synthetic op per kernel
    # name of the graph (361): the same kernels, the same time
    graph = m.loc[m["op"] == "hipGraphLaunch"].iloc[0]
    assert (graph["count"], graph["tl_count"]) == (25, 361)
    assert graph["gpu_ns"] / 1000 == pytest.approx(graph["tl_us"], abs=0.002 * 361)
    m = m.loc[m["op"] != "hipGraphLaunch"]
    # the step: 9 prefill requests (8155 query tokens of 8430 keys) beside 37 decodes (34489 keys)
    exact = (7671310 - (7475785 - 8155) // 2) + 34489  # Σ sq·sk − sq(sq−1)/2
    attn = ("vllm::unified_attention_with_output", "[[8192,64,64],[8192,8,64],[8192,8,64],[8192,64,64],[],[],[],[0]]",
            _types(BF, BF, BF, BF, "", "", "", BF))  # fmt: skip
    pinned = {attn: (2 * 64 * exact * 128, 8192 * 64 * 128 * 2 + (8430 + 34489) * 8 * 128 * 2)}
    assert check_figures(m, pinned) >= 9
    r = _row(m, *attn[:2])
    # TraceLens counts Σ sq·sk − sq²/2 pairs: 0.1 % fewer FLOPs; the bytes are the same
    tl_flops = _num(r["tl_gflops"]) * 1e9
    assert tl_flops == 2 * 64 * 128 * (7671310 - 7475785 / 2 + 34489)
    assert _num(r["tl_mb"]) * MIB == r["bytes"] and r["flops"] / tl_flops - 1 == pytest.approx(0.00103, abs=1e-5)
    gemm = _row(m, "vllm::rocm_unquantized_gemm", "[[46,2880],[201088,2880],[]]")
    assert gemm["flops"] == 2 * 46 * 201088 * 2880 and _num(gemm["tl_mb"]) * MIB == gemm["bytes"]
    both = m.loc[m["_merge"] == "both"]
    assert (m["_merge"] == "both").all() and _same_time(both).all()


def _inductor_by_hand(event_args: dict) -> tuple[int, int]:
    """(FLOPs, bytes) of an Inductor kernel launch from its raw ``args``: the iteration space is
    the product of the trailing integer arguments (at most the largest tensor); every tensor
    argument once, no more than the iteration space."""
    sizes = {"c10::BFloat16": 2, "float": 4, "long int": 8, "int": 4, "bool": 1}
    tensors = [
        (math.prod(d), sizes[t]) for d, t in zip(event_args["Input Dims"], event_args["Input type"]) if t in sizes
    ]
    largest = max(n for n, _ in tensors)
    space = 1
    for v, t in reversed(list(zip(event_args["Concrete Inputs"], event_args["Input type"]))):
        if t != "Scalar" or not v.isdigit() or int(v) == 0 or space * int(v) > largest:
            break
        space *= int(v)
    return space, sum(min(n, space) * b for n, b in tensors)


def test_xdit_against_tracelens(xdit):
    m = xdit
    with gzip.open(shared("kineto", INF, f"{XDIT}.json.gz")) as f:
        raw = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "cpu_op" and e["name"].startswith("triton_")]
    launch = {(e["name"], json.dumps(e["args"]["Input Dims"], separators=(",", ":"))): e["args"] for e in raw}
    pinned = {(op, shapes, _types(*a["Input type"])): _inductor_by_hand(a) for (op, shapes), a in launch.items()}
    # text-encoder attention, causal: N(N+1)/2 pairs (TraceLens N²/2)
    for heads in (12, 20):
        shapes = f"[[1,{heads},77,64],[1,{heads},77,64],[1,{heads},77,64],[],[],[],[]]"
        key = (
            "aten::_scaled_dot_product_flash_attention",
            shapes,
            _types(BF, BF, BF, "Scalar", "Scalar", "Scalar", "Scalar"),
        )
        pinned[key] = (2 * heads * (77 * 78 // 2) * 128, _num(_row(m, key[0], shapes)["tl_mb"]) * MIB)
    conv_types = _types(BF, BF, BF, *["ScalarList"] * 3, "Scalar", "ScalarList", "Scalar")
    for shapes, out, c_out in (
        ("[[1,16,128,128],[512,16,3,3],[512],[],[],[],[],[],[]]", 512 * 128 * 128, 512),
        ("[[1,256,1024,1024],[128,256,1,1],[128],[],[],[],[],[],[]]", 128 * 1024 * 1024, 128),
    ):  # the bias: one add per output, C_out read (TraceLens: none)
        r = _row(m, "aten::convolution", shapes)
        tl_flops, tl_bytes = _num(r["tl_gflops"]) * 1e9, _num(r["tl_mb"]) * MIB
        pinned[("aten::convolution", shapes, conv_types)] = (tl_flops + out, tl_bytes + c_out * 2)
    # min of two tensors is elementwise (TraceLens: a reduction to one element); a 0-dim float
    # tensor does not promote the bf16 product (TraceLens: written as float)
    pinned[("aten::min", "[[256,256],[256,256]]", _types("long int", "long int"))] = (65536, 3 * 65536 * 8)
    pinned[("aten::mul", "[[],[1,16,128,128]]", _types("float", BF))] = (262144, 4 + 2 * 262144 * 2)
    assert check_figures(m, pinned) >= 100
    both = m.loc[m["_merge"] == "both"]
    # every Inductor kernel modelled; TraceLens agrees on the bytes of the reductions whose tensors
    # all fit the iteration space, and adds an output of xnumel elements to a pointwise kernel's
    # tensors (its output is one of them)
    tri = both.loc[both["op"].str.startswith("triton_")]
    assert len(tri) == 26 and tri["flops"].notna().all()
    assert (tri["bytes"] == tri["tl_mb"].map(_num) * MIB).sum() == 8
    poi = tri.loc[tri["op"].str.startswith("triton_poi_")]
    tl_rule = [
        _tracelens_pointwise_bytes(launch[(r["op"], r["shapes"])]) == _num(r["tl_mb"]) * MIB for _, r in poi.iterrows()
    ]
    assert (len(tl_rule), sum(tl_rule)) == (13, 10)
    # group norms equal (check_figures); nearest upsampling: TraceLens has no figures
    assert (both["op"] == "aiter::_groupnorm_run").sum() == 7
    up = _row(m, "aten::upsample_nearest2d", "[[1,256,512,512],[],[]]")
    assert up["flops"] == 0 and up["bytes"] == (256 * 512 * 512 + 256 * 1024 * 1024) * 2 and up["tl_gflops"] == ""
    # the same GPU events, but for nonzero's memset of 1.882 µs (an op's memsets are its time in
    # dtrace; TraceLens's tree leaves them out)
    same = _same_time(both)
    assert list(both.loc[~same, "op"]) == ["aten::nonzero"]
    nonzero = both.loc[~same].iloc[0]
    assert nonzero["gpu_ns"] / 1000 - nonzero["tl_us"] == pytest.approx(1.882, abs=0.002)
    # keys only one side lists: embeddings (index_select here, its gather there) and abs, whose
    # outer call dtrace lists (TraceLens its inner abs.out)
    only = m.loc[m["_merge"] != "both"]
    assert set(only["op"]) == {"aten::gather", "aten::index_select", "aten::abs"}


def _tracelens_pointwise_bytes(event_args: dict) -> int:
    """TraceLens's bytes for a pointwise kernel: every tensor argument whole, plus an output of
    xnumel (the last integer argument) elements of the first tensor's size."""
    sizes = {"c10::BFloat16": 2, "float": 4, "long int": 8, "int": 4, "bool": 1}
    tensors = [
        (math.prod(d), sizes[t]) for d, t in zip(event_args["Input Dims"], event_args["Input type"]) if t in sizes
    ]
    return sum(n * b for n, b in tensors) + int(event_args["Concrete Inputs"][-1]) * tensors[0][1]


# -- prefill and decode ----------------------------------------------------------------------
def _raw_phases(doc: dict, names: set[str]) -> dict[tuple[str, str], int]:
    """Instances of the cpu_ops ``names`` per (op, phase), read from the raw events: the phase of
    the innermost user annotation around the op on its thread that names one (its context and
    generation request counts, or SGLang's step mode), ``""`` if none."""
    ev = doc["traceEvents"]
    ann = [e for e in ev if e.get("cat") == "user_annotation"]

    def phase_of(name: str) -> str | None:
        c, g = re.search(r"context_(\d+)", name), re.search(r"generation_(\d+)", name)
        if name.startswith("execute_") and c and g:
            return {(True, False): "prefill", (False, True): "decode", (True, True): "mixed"}.get(
                (int(c.group(1)) > 0, int(g.group(1)) > 0), ""
            )
        mode = re.match(r"step\[(\w+)", name)
        return {"EXTEND": "prefill", "DECODE": "decode", "MIXED": "mixed"}.get(mode.group(1)) if mode else None

    out: dict[tuple[str, str], int] = {}
    for e in ev:
        if e.get("cat") != "cpu_op" or e["name"] not in names:
            continue
        around = [
            a for a in ann
            if (a["pid"], a["tid"]) == (e["pid"], e["tid"]) and a["ts"] <= e["ts"]
            and e["ts"] + e["dur"] <= a["ts"] + a["dur"] and phase_of(a["name"]) is not None
        ]  # fmt: skip
        phase = phase_of(max(around, key=lambda a: a["ts"])["name"]) if around else ""
        out[(e["name"], phase)] = out.get((e["name"], phase), 0) + 1
    return out


SERVING_OPS = {
    "aiter::gemm_a16w16", "aiter::mha_batch_prefill", "aiter::rmsnorm", "aiter::add_rmsnorm",
    "sgl_kernel::rotary_embedding", "sgl_kernel::silu_and_mul", "sglang::store_cache", "aten::argmax",
}  # fmt: skip
"""Ops of the SGLang trace no other modelled op encloses (one op_perf instance per raw event);
``aten::argmax`` runs outside SGLang's ``step[EXTEND ..]`` annotation, inside ``execute_..``."""


def _phases(op: pd.DataFrame) -> dict[tuple[str, str], int]:
    f = op.loc[op["op"].isin(SERVING_OPS)]
    return {k: int(v) for k, v in f.groupby(["op", "phase"])["count"].sum().items()}


def test_sglang_phase_is_prefill_from_the_raw_json(tmp_path):
    """The one step is a prefill of 15 requests (``execute_15360_context_15(..)_generation_0(..)``,
    ``step[EXTEND bs=15 toks=15360]`` inside it): every op instance is prefill, the raw JSON says."""
    with gzip.open(shared("kineto", INF, f"{SGLANG}.json.gz")) as f:
        doc = json.load(f)
    want = _raw_phases(doc, SERVING_OPS)
    assert {p for _, p in want} == {"prefill"} and sum(want.values()) == 144 + 36 + 73 + 72 + 36 + 36 + 36 + 1
    r = dtrace.analyze(shared("kineto", INF, f"{SGLANG}.json.gz"), str(tmp_path / "o"), scheduler="sync")
    assert _phases(r.op_perf) == want
    assert set(r.op_perf["phase"]) == {"prefill"} and set(r.op_family_perf["phase"]) == {"prefill"}
    assert set(r.op_perf_xrank["phase"]) == {"prefill"}
    # the step's sums go to the attention op only
    seqs = r.op_perf.loc[r.op_perf["seqs"] != ""]
    assert list(seqs["op"]) == ["aiter::mha_batch_prefill"]
    assert (
        seqs["seqs"].iloc[0]
        == "context=15 sq=15360 sk=15360 sqsq=15728640 sqsk=15728640; generation=0 sq=0 sk=0 sqsq=0 sqsk=0"
    )


def test_decode_and_mixed_steps_and_the_nearest_annotation(tmp_path):
    """The SGLang trace with its two annotations renamed: ``execute_..`` a mixed step (1 prefill of
    1024 tokens, 14 decodes of 2048 keys), ``step[DECODE ..]`` inside it. An op takes the phase of
    the nearest annotation (decode inside ``step[..]``, mixed outside it, as the raw JSON says) and
    the attention op the sums of the ``execute_..`` one."""
    with gzip.open(shared("kineto", INF, f"{SGLANG}.json.gz")) as f:
        doc = json.load(f)
    mixed = "execute_15360_context_1(sq1024sk1024sqsq1048576sqsk1048576)_generation_14(sq14sk28672sqsq14sqsk28672)"
    for e in doc["traceEvents"]:
        if e.get("cat") == "user_annotation":
            e["name"] = mixed if e["name"].startswith("execute_") else "step[DECODE bs=15 toks=15360]"
    path = tmp_path / "renamed.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    want = _raw_phases(doc, SERVING_OPS)
    assert {p for _, p in want} == {"decode", "mixed"} and want[("aten::argmax", "mixed")] == 1
    r = dtrace.analyze(str(path), str(tmp_path / "o"), scheduler="sync")
    op = r.op_perf
    assert _phases(op) == want
    mha = op.loc[op["op"] == "aiter::mha_batch_prefill"].iloc[0]
    pairs = (1048576 - (1048576 - 1024) // 2) + 28672  # the prefill's causal pairs, the decodes' keys
    assert mha["phase"] == "decode" and mha["flops"] == 2 * 32 * pairs * 256
    assert mha["bytes"] == (1024 + 14) * 32 * 256 * 2 + (1024 + 28672) * 8 * 256 * 2
    fam = r.op_family_perf
    assert set(fam["phase"]) == {"decode", "mixed"} and fam["share"].sum() == pytest.approx(1.0)
    assert set(fam.loc[fam["family"] == "reduce", "phase"]) == {"decode", "mixed"}  # argmax after the step[..]
    per_phase = op.groupby("phase")["gpu_ns"].sum()
    assert fam.groupby("phase")["gpu_ns"].sum().to_dict() == per_phase.to_dict()
    x = r.op_perf_xrank
    assert set(x["phase"]) == {"decode", "mixed"} and x["count"].sum() == op["count"].sum()


def test_vllm_phase_is_mixed_from_the_raw_json(tmp_path):
    with gzip.open(shared("kineto", INF, f"{VLLM}.json.gz")) as f:
        doc = json.load(f)
    names = {
        "vllm::unified_attention_with_output",
        "_C_cache_ops::reshape_and_cache_flash",
        "vllm::rocm_unquantized_gemm",
    }
    want = _raw_phases(doc, names)
    assert want == {(n, "mixed"): c for n, c in (("vllm::unified_attention_with_output", 24),
                    ("_C_cache_ops::reshape_and_cache_flash", 24), ("vllm::rocm_unquantized_gemm", 1))}  # fmt: skip
    r = dtrace.analyze(shared("kineto", INF, f"{VLLM}.json.gz"), str(tmp_path / "o"), scheduler="sync")
    got = r.op_perf.loc[r.op_perf["op"].isin(names)].groupby(["op", "phase"])["count"].sum().to_dict()
    assert got == want
    # every GPU event, the graph replays' included, ran in the one mixed step
    assert set(r.op_perf["phase"]) == {"mixed"}
    assert np.isfinite(r.op_perf.loc[r.op_perf["op"] == "vllm::unified_attention_with_output", "flops"]).all()


@pytest.mark.parametrize("block", [None, 1 << 16])  # the whole-document and the chunked decoding
def test_reader_keeps_the_arguments_of_inductor_and_serving_ops(block):
    """The Kineto reader keeps the recorded arguments of every op with a model, Inductor's kernels
    (matched by their name's prefix) and the serving libraries' ops included, as the raw JSON has them."""
    from dtrace.core.schema import ARGS_SEP
    from dtrace.knowledge import opmodel
    from dtrace.readers import kineto

    path = shared("kineto", INF, f"{XDIT}.json.gz")
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    want = sorted(
        (e["name"], json.dumps(e["args"]["Input Dims"]), json.dumps(e["args"]["Concrete Inputs"]))
        for e in events
        if e.get("cat") == "cpu_op" and "Input Dims" in e["args"] and opmodel.priority(e["name"]) == opmodel.MODEL
    )
    part = kineto.read_kineto(path, **({"block": block, "max_event_size": 1 << 20} if block else {})).parts[0]
    oa = part.side["op_args"].to_pydict()
    names = part.events.column("name").to_pylist()
    got = sorted(
        (names[r], json.dumps(json.loads(a.split(ARGS_SEP)[0])), json.dumps(json.loads(a.split(ARGS_SEP)[3])))
        for r, a in zip(oa["row"], oa["args"])
    )
    generated = [w for w in want if w[0].startswith("triton_")]
    assert len(generated) == 2076 and {w[0] for w in want} >= {"aiter::_groupnorm_run", "aten::upsample_nearest2d"}
    assert got == want
