"""Kernel classes: built-in classifier, substring maps, ordered-regex maps, classes/nccl tables."""

import json
import re

import numpy as np
import pandas as pd
import pytest
import rawtrace
from testpaths import shared

import dtrace
from dtrace.analyses import ANALYSES, conform
from dtrace.analyses.batch import prepare_part as prepare
from dtrace.api import make_options
from dtrace.cli.main import main
from dtrace.core.schema import COLLECTIVE_SCHEMA, MEMCPY_SCHEMA
from dtrace.errors import UsageError
from dtrace.knowledge.classify import BuiltinClassifier, RegexMap, SubstringMap, load_classmap
from dtrace.options import Options

MAPS = {"vllm": ("classmaps", "vllm_engine_model.json"), "sglang": ("classmaps", "sglang_engine_model.json")}
TRACES = [
    ("kineto", "single", "b200_vllm_eager_rank0.json.gz"),
    ("kineto", "single", "h100_owlv2.json.gz"),
    ("kineto", "single", "a100_nccl_collectives.json.gz"),
]
NSYS_COPY = {"HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "DtoD": "Device-to-Device"}


@pytest.fixture(scope="module")
def cache():
    """The session's shared ingest cache: each shared trace is parsed once."""
    return rawtrace.ingest_cache()


def tables(part, names=("kernels", "classes", "nccl")):
    return {a.table: conform(a.func(part), a.columns, a.table) for a in ANALYSES if a.table in names}


def make_part(rows, options):
    """A part on device 0 from (name, start, end[, kind]) tuples, one stream."""
    ev = pd.DataFrame(
        [
            dict(
                rank=0,
                device=0,
                stream=7,
                pid=0,
                tid=7,
                kind=r[3] if len(r) > 3 else "kernel",
                name=r[0],
                start_ns=r[1],
                end_ns=r[2],
                correlation=-1,
                external_id=-1,
            )
            for r in rows
        ]
    )
    ev["rank"] = ev["rank"].astype(np.int32)
    for c in ("kind", "name"):
        ev[c] = ev[c].astype("category")
    return prepare(
        ev,
        COLLECTIVE_SCHEMA.empty_table().to_pandas(),
        MEMCPY_SCHEMA.empty_table().to_pandas(),
        rank=0,
        device=0,
        fmt="kineto",
        options=options,
    )


# -- built-in --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,kind,category,cls",
    [
        (
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "kernel",
            "comm",
            "nccl_allreduce",
        ),
        ("ncclDevKernel_AllGather_RING_LL", "kernel", "comm", "nccl_allgather"),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "kernel", "comm", "nccl_reducescatter"),
        (
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            "kernel",
            "comm",
            "nccl_sendrecv",
        ),
        ("ncclDevKernel_Broadcast_RING_LL", "kernel", "comm", "nccl_broadcast"),
        (
            "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)",
            "kernel",
            "comm",
            "nccl_allreduce",
        ),
        ("cross_device_reduce_2stage<half, 8>", "kernel", "comm", "nccl_allreduce"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "kernel", "compute", "gemm"),
        (
            "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8>(Params)",
            "kernel",
            "compute",
            "gemm",
        ),
        ("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", "kernel", "compute", "gemm"),
        (
            "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64> >(Flash_fwd_params)",
            "kernel",
            "compute",
            "attention",
        ),
        ("triton_poi_fused_add_mul_0", "kernel", "compute", "triton"),
        ("triton_red_fused_sum_1", "kernel", "compute", "triton"),
        (
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int)",
            "kernel",
            "compute",
            "normalization",
        ),
        (
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*)",
            "kernel",
            "compute",
            "normalization",
        ),
        (
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::NormOps<float> > >(R)",
            "kernel",
            "compute",
            "reduction",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, at::detail::Array<char*, 1> >",
            "kernel",
            "compute",
            "elementwise",
        ),
        (
            "void split_embedding_backward_codegen_rowwise_adagrad_kernel<float, fbgemm_gpu::Vec4T<float> >()",
            "kernel",
            "compute",
            "other",
        ),
        ("Memcpy DtoD (Device -> Device)", "memcpy", "memcpy", "memcpy"),
        ("Memset (Device)", "memset", "memset", "memset"),
        ("Memset (Device)", "memset", "compute", "memset"),  # TraceLens mode: memset counts as compute, class stays
        ("__amd_rocclr_copyBuffer", "kernel", "memcpy", "memcpy"),
        ("__amd_rocclr_fillBufferAligned", "kernel", "memcpy", "memset"),
        ("some_custom_kernel", "kernel", "compute", "other"),
        # names from the shared ROCm/JAX/cuDNN traces that used to fall through to "other"
        (
            "Cijk_Ailk_Bljk_BBS_BH_MT256x128x64_MI16x16x16x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_AF1EM1_AMAS3_ASE_ASGT",
            "kernel",
            "compute",
            "gemm",
        ),  # Tensile (JAX/XLA on MI300)
        (
            "Cijk_Ailk_Bjlk_BBS_BH_Bias_HAS_SAV_UserArgs_MT128x64x32_MI32x32x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1",
            "kernel",
            "compute",
            "gemm",
        ),  # hipBLASLt
        (
            "Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0",
            "kernel",
            "compute",
            "gemm",
        ),
        ("cudnn_infer_volta_scudnn_128x64_stridedB_interior_nn_v1", "kernel", "compute", "gemm"),
        ("cudnn_train_volta_scudnn_128x128_stridedB_splitK_medium_nn_v1", "kernel", "compute", "gemm"),
        ("Im3d2Col.kd", "kernel", "compute", "elementwise"),
        ("SubTensorOpWithScalar1d", "kernel", "compute", "elementwise"),
        (
            "void at::native::(anonymous namespace)::max_pool_backward_nchw<c10::BFloat16, float>(c10::BFloat16 const*)",
            "kernel",
            "compute",
            "reduction",
        ),
        (
            "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*, long)",
            "kernel",
            "compute",
            "reduction",
        ),
        (
            "void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, int, int>::Policy800, false, long>()",
            "kernel",
            "compute",
            "reduction",
        ),
        (
            "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>(long, long, float const*)",
            "kernel",
            "compute",
            "normalization",
        ),
        (
            "void permute_pooled_embs_kernel<float>(float const*, long const*, long const*, long const*, float*, long)",
            "kernel",
            "compute",
            "elementwise",
        ),
        (
            "void fbgemm_gpu::permute_2D_data_kernel<false, int, int, decltype(nullptr)>(int, int, int, int const*)",
            "kernel",
            "compute",
            "elementwise",
        ),
        (
            "_ZN2ck16tensor_operation6device37kernel_batched_gemm_xdlops_bwd_weightINS_47GridwiseGemm_bk0mk1",
            "kernel",
            "compute",
            "gemm",
        ),  # composable kernel
        ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2", "kernel", "compute", "gemm"),  # MIOpen
    ],
)
def test_builtin_classes(name, kind, category, cls):
    assert BuiltinClassifier().classify([name], [kind], [category]) == [cls]


def test_builtin_on_real_trace_covers_all_gpu_time(cache):
    path = shared(*TRACES[2])
    raw = rawtrace.load(path)["gpu"]
    res = dtrace.analyze(path, cache=cache, scheduler="sync")
    c = res.classes.set_index("class")
    assert int(c["total_ns"].sum()) == int(raw["dur_ns"].sum())
    assert int(c["count"].sum()) == len(raw)
    nccl = raw.loc[raw["name"].str.contains("nccl", case=False)]
    comm = c.loc[[i for i in c.index if i.startswith("nccl_")]]
    assert int(comm["total_ns"].sum()) == int(nccl["dur_ns"].sum()) > 0
    assert c.loc["memcpy", "total_ns"] == raw.loc[raw["kind"] == "memcpy", "dur_ns"].sum()
    assert c.loc["memset", "count"] == (raw["kind"] == "memset").sum()
    assert (res.classes["classifier"] == "builtin").all()


# -- substring maps --------------------------------------------------------------------------


def test_substring_map_by_hand():
    rows = [
        ("volta_sgemm_128x64_nn", 0, 10),
        ("volta_sgemm_128x64_nn", 20, 40),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 50, 55),
        ("ncclDevKernel_AllGather_RING_LL", 60, 63),
        ("loop_Fusion_3", 70, 77),
        ("transpose_kernel<float>", 80, 84),
        ("xyz", 90, 92),
        ("Memcpy HtoD (Pinned -> Device)", 100, 106, "memcpy"),
    ]
    cmap = {"GEMM": "Gemm", "fusion": "fusion", "transpose_kernel": "cast_transpose"}
    for spec in (cmap, {"inputs": [], "kernel_to_class_map": cmap}):
        t = tables(make_part(rows, Options(classmap=spec)))
        c = t["classes"].set_index("class")
        # by hand: gemm 10+20, nccl 5+3, fusion 7, cast_transpose 4, others 2, memcpy 6 (not a kernel there)
        assert c["total_ns"].to_dict() == {
            "gemm": 30,
            "nccl": 8,
            "fusion": 7,
            "cast_transpose": 4,
            "others": 2,
            "memcpy": 6,
        }
        assert c["count"].to_dict() == {
            "gemm": 2,
            "nccl": 2,
            "fusion": 1,
            "cast_transpose": 1,
            "others": 1,
            "memcpy": 1,
        }
        assert (c["classifier"] == "substring").all()
        n = t["nccl"].set_index("collective")
        assert n["total_ns"].to_dict() == {"AllReduce": 5, "AllGather": 3}
        assert n["count"].to_dict() == {"AllReduce": 1, "AllGather": 1}


def substring_class(name: str, kind: str, cmap: dict) -> str:
    """The GPU Performance Analyser rule, written out for the test."""
    if kind in ("memcpy", "memset"):
        return kind
    low = name.lower()
    if "nccl" in low:
        return "nccl"
    for key, cls in cmap.items():
        if key.lower() in low:
            return cls.lower()
    return "others"


def test_substring_map_file_on_real_trace(tmp_path, cache):
    path = shared(*TRACES[2])
    cmap = {
        "gemm": "gemm",
        "NchwToNhwc": "layout",
        "nhwcToNchw": "layout",
        "bn_": "batchnorm",
        "elementwise": "elementwise",
    }
    f = tmp_path / "config.json"
    f.write_text(json.dumps({"inputs": [{"format": "csv"}], "kernel_to_class_map": cmap}))
    raw = rawtrace.load(path)["gpu"].copy()
    raw["cls"] = [substring_class(n, k, cmap) for n, k in zip(raw["name"], raw["kind"])]
    exp = raw.groupby("cls")["dur_ns"].agg(["size", "sum"])
    res = dtrace.analyze(path, cache=cache, scheduler="sync", classmap=str(f))
    c = res.classes.set_index("class").loc[exp.index]
    np.testing.assert_array_equal(c["count"], exp["size"])
    np.testing.assert_array_equal(c["total_ns"], exp["sum"])
    assert {"layout", "batchnorm", "nccl", "others"} <= set(exp.index)
    it = rawtrace.load(path)["steps"]["step"].nunique()
    np.testing.assert_array_equal(c["total_per_iter_ns"], rawtrace.whole_ns(exp["sum"] / it))
    # per-collective NCCL table: name.split("_")[1] of every kernel containing "nccl"
    nc = raw.loc[raw["cls"] == "nccl"]
    exp_n = nc.groupby(nc["name"].str.split("_").str[1])["dur_ns"].agg(["size", "sum"])
    n = res.nccl.set_index("collective").loc[exp_n.index]
    np.testing.assert_array_equal(n["count"], exp_n["size"])
    np.testing.assert_array_equal(n["total_ns"], exp_n["sum"])
    k = res.kernels.set_index("name")
    first = raw.groupby("name")["cls"].first()
    assert (k["class"] == first.loc[k.index]).all()


# -- ordered regex maps ----------------------------------------------------------------------


def regex_category(text: str, rules: dict) -> str:
    for pattern, cat in rules.items():
        if re.search(pattern, text):
            return cat
    return "misc"


def nsys_text(name: str, kind: str) -> str:
    if kind == "memset":
        return "[CUDA memset]"
    if kind == "memcpy":
        return f"[CUDA memcpy {NSYS_COPY[name.split()[1]]}]"
    return name


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_regex_maps_load_unchanged_and_classify_shared_traces(engine):
    path = shared(*MAPS[engine])
    with open(path) as f:
        doc = json.load(f)
    names = pd.concat([rawtrace.load(shared(*t))["gpu"][["name", "kind"]] for t in TRACES]).drop_duplicates()
    assert len(names) > 100
    checked = 0
    for model, rules in doc[engine].items():
        clf = load_classmap(path, engine, model)
        assert isinstance(clf, RegexMap) and clf.label == f"regex:{engine}/{model}"
        got = clf.classify(names["name"], names["kind"])
        exp = [regex_category(nsys_text(n, k), rules) for n, k in zip(names["name"], names["kind"])]
        assert got == exp, model
        mem = (names["kind"] != "kernel").to_numpy()
        mem_rule = [cat for pattern, cat in rules.items() if pattern.startswith("CUDA mem")]
        assert set(np.asarray(got)[mem]) == set(mem_rule)  # their rule for nsys memory operations
        assert len(set(got)) > 5
        checked += 1
    assert checked == len(doc[engine])


def test_regex_map_end_to_end_class_totals(cache):
    path = shared(*TRACES[1])
    cmap = shared(*MAPS["sglang"])
    with open(cmap) as f:
        rules = json.load(f)["sglang"]["llama"]
    res = dtrace.analyze(path, cache=cache, scheduler="sync", classmap=cmap, classmap_model="llama")
    assert int(res.breakdown["clipped_events"].iloc[0]) == 0
    raw = rawtrace.load(path)["gpu"].copy()
    raw["cat"] = [regex_category(nsys_text(n, k), rules) for n, k in zip(raw["name"], raw["kind"])]
    exp = raw.groupby("cat")["dur_ns"].agg(["size", "sum"])
    c = res.classes.set_index("class")
    assert set(c.index) == set(exp.index)
    np.testing.assert_array_equal(c.loc[exp.index, "total_ns"], exp["sum"])
    np.testing.assert_array_equal(c.loc[exp.index, "count"], exp["size"])
    assert (c["classifier"] == "regex:sglang/llama").all()


def test_regex_map_first_match_wins_and_leftover():
    rules = {"H|I": "gemm", "J|K": "attn", "CUDA mem": "non-gpu-H_D_memops", ".*": "misc"}
    clf = load_classmap({"DEF": {"ABC": rules}})
    assert clf.classify(["xHJx", "xJx", "h_lower", "Memset (Device)"], ["kernel", "kernel", "kernel", "memset"]) == [
        "gemm",
        "attn",
        "misc",
        "non-gpu-H_D_memops",
    ]
    # matched as nsys names them, "[CUDA memcpy Host-to-Device]": "H|I" comes first, as in the tool
    assert clf.classify(["Memcpy HtoD (Pinned -> Device)"], ["memcpy"]) == ["gemm"]
    no_catch_all = load_classmap({"DEF": {"ABC": {"H": "gemm"}}})
    assert no_catch_all.classify(["zzz"]) == ["misc"]


# -- errors and the once-per-name rule --------------------------------------------------------


def test_classmap_errors(tmp_path):
    vllm = shared(*MAPS["vllm"])
    with pytest.raises(UsageError, match="several models of engine 'vllm': llama, ds, gpt-oss"):
        make_options(classmap=vllm)
    with pytest.raises(UsageError, match="no model 'mixtral'.*valid: llama, ds, gpt-oss"):
        make_options(classmap=vllm, classmap_model="mixtral")
    with pytest.raises(UsageError, match="no engine 'sglang'"):
        make_options(classmap=vllm, classmap_engine="sglang", classmap_model="llama")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UsageError, match="invalid JSON"):
        make_options(classmap=str(bad))
    with pytest.raises(UsageError, match="invalid regex"):
        make_options(classmap={"e": {"m": {"(": "x"}}})
    with pytest.raises(UsageError, match="cannot read"):
        make_options(classmap=str(tmp_path / "missing.json"))
    with pytest.raises(UsageError, match="not a recognised format"):
        make_options(classmap={"gemm": 3})
    assert main(["kernels", str(bad), "--classmap", str(bad)]) == 2


def test_classification_runs_once_per_distinct_name(monkeypatch):
    calls = []
    orig = SubstringMap._one

    def counting(self, name, kind, category):
        calls.append(name)
        return orig(self, name, kind, category)

    monkeypatch.setattr(SubstringMap, "_one", counting)
    rows = [(n, i * 10, i * 10 + 5) for i, n in enumerate(["gemm_a", "gemm_a", "ncclKernel_AllReduce", "x"] * 50)]
    part = make_part(rows, Options(classmap={"gemm": "gemm", "unique-key-for-this-test": "u"}))
    t = tables(part)
    assert sorted(calls) == ["gemm_a", "ncclKernel_AllReduce", "x"]
    assert t["classes"].set_index("class")["count"].to_dict() == {"gemm": 100, "nccl": 50, "others": 50}
