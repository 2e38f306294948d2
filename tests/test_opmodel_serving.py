"""The op models of the serving libraries (aiter, vLLM, SGLang), Inductor's generated kernels,
nearest upsampling and the serving step annotations: FLOPs and bytes computed by hand.

Every expected number is worked out here from the shapes the op's documented signature gives
(a product of the dimensions), never taken from the code under test. The argument lists are
those the PyTorch profiler recorded in the shared inference traces
(``../shared/traces/kineto/inference``).
"""

from __future__ import annotations

import json

import pytest

from dtrace.knowledge.opmodel import estimate, family, priority, reads_step
from dtrace.knowledge.opmodel.serving import Step, Sums, read_marker

BF, F32, LONG, INT = "c10::BFloat16", "float", "long int", "int"


def est(name, dims, types, concrete=None, step=""):
    concrete = concrete if concrete is not None else [""] * len(dims)
    e = estimate(name, json.dumps(dims), json.dumps(types), json.dumps(concrete), step)
    assert not isinstance(e, str), e
    return e


# -- GEMM ------------------------------------------------------------------------------------
def test_aiter_gemm_a16w16_is_x_times_w_transposed():
    # aiter tuned_gemm.gemm_a16w16(A[M,K], B[N,K], bias, otype=15 (bf16), scales): the QKV projection
    m, n, k = 15360, 6144, 4096
    e = est("aiter::gemm_a16w16", [[m, k], [n, k], [], [], [], [], []], [BF, BF, "", "Scalar", "", "", ""],
            ["", "", "", "15", "", "", ""])  # fmt: skip
    assert e.flops == 2 * m * n * k
    assert e.bytes == (m * k + n * k + m * n) * 2  # A and B read, Y written, bf16
    assert (e.unit, e.precision, family("aiter::gemm_a16w16")) == ("matrix", "bf16", "gemm")
    # otype = 6 (float): the output in fp32
    e = est("aiter::gemm_a16w16", [[m, k], [n, k], [], [], [], [], []], [BF, BF, "", "Scalar", "", "", ""],
            ["", "", "", "6", "", "", ""])  # fmt: skip
    assert e.bytes == (m * k + n * k) * 2 + m * n * 4
    # a bias of N: read, and one add per output
    e = est("aiter::gemm_a16w16", [[8, 16], [4, 16], [4], [], [], [], []], [BF, BF, BF, "", "", "", ""])
    assert e.flops == 2 * 8 * 4 * 16 + 8 * 4 and e.bytes == (8 * 16 + 4 * 16 + 4 + 8 * 4) * 2


def test_vllm_rocm_unquantized_gemm_and_3d_input():
    # the LM head of vllm_piecewise_graph_execution: x[46, 2880] by weight[201088, 2880]
    e = est("vllm::rocm_unquantized_gemm", [[46, 2880], [201088, 2880], []], [BF, BF, ""])
    assert e.flops == 2 * 46 * 201088 * 2880
    assert e.bytes == (46 * 2880 + 201088 * 2880 + 46 * 201088) * 2
    # x of (batch, tokens, K): M = batch·tokens
    e = est("vllm::rocm_unquantized_gemm", [[2, 3, 8], [5, 8], [5]], [BF, BF, BF])
    assert e.flops == 2 * 6 * 5 * 8 + 6 * 5 and e.bytes == (48 + 40 + 5 + 30) * 2
    assert "does not match" in estimate(
        "vllm::rocm_unquantized_gemm", "[[4, 8], [5, 7], []]", '["float", "float", ""]', ""
    )


def test_an_out_tensor_is_written_not_read():
    # Inductor's extern_kernels.mm(a, b, out=buf): aten::mm records (self, mat2, out)
    e = est("aten::mm", [[8192, 2432], [2432, 64], [8192, 64]], [BF, BF, BF])
    assert e.bytes == (8192 * 2432 + 2432 * 64 + 8192 * 64) * 2  # the out tensor once: the output
    e = est("aten::addmm", [[64], [16, 32], [32, 64], [], [], [16, 64]], [BF, BF, BF, "Scalar", "Scalar", F32])
    assert e.bytes == (64 + 16 * 32 + 32 * 64) * 2 + 16 * 64 * 4  # written in the out tensor's type


# -- attention over a paged KV cache ---------------------------------------------------------
def test_step_sums_and_causal_pairs():
    # 2 prefill requests: 3 new tokens after a prefix of 5 (sk 8), and 4 tokens without prefix;
    # 3 decodes with contexts of 10, 20, 30 keys
    ctx = Sums(2, sq=3 + 4, sk=8 + 4, sqsq=9 + 16, sqsk=3 * 8 + 4 * 4)
    gen = Sums(3, sq=3, sk=60, sqsq=3, sqsk=60)
    step = Step(ctx, gen)
    # causal: request 1 keeps 6+7+8 keys, request 2 1+2+3+4; each decode all its keys
    assert ctx.pairs(True) == (6 + 7 + 8) + (1 + 2 + 3 + 4) and gen.pairs(True) == 60
    assert step.total(True) == (10, 72, 31 + 60) and step.total(False) == (10, 72, 40 + 60)
    assert step.phase == "mixed" and Step.parse(step.text()) == step


def test_vllm_unified_attention_from_the_step_annotation():
    # vllm_piecewise_graph_execution: 64 query heads, 8 KV heads, d 64; 8192 tokens
    name = "execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37sk34489sqsq37sqsk34489)"
    phase, text = read_marker(name)
    assert phase == "mixed"
    dims = [[8192, 64, 64], [8192, 8, 64], [8192, 8, 64], [8192, 64, 64], [], [], [], [0]]
    types = [BF, BF, BF, BF, "", "", "", BF]
    e = est("vllm::unified_attention_with_output", dims, types, step=text)
    pairs = (7671310 - (7475785 - 8155) // 2) + 34489  # prefill: sq·sk less the masked half; decode: sk
    assert e.flops == 2 * 64 * pairs * (64 + 64)
    # Q and O of the 8192 query tokens; K and V of the 8430 + 34489 keys of all the sequences
    assert e.bytes == 8192 * 64 * (64 + 64) * 2 + (8430 + 34489) * 8 * (64 + 64) * 2
    assert (e.unit, e.precision) == ("matrix", "bf16") and reads_step("vllm::unified_attention_with_output")
    # without the annotation the sequences are unknown
    assert "sequences are not recorded" in estimate(
        "vllm::unified_attention_with_output", json.dumps(dims), json.dumps(types), json.dumps([""] * 8)
    )


def test_aiter_mha_batch_prefill_from_the_annotation_or_its_arguments():
    # sglang_qwen3_8b_prefilldecode: 15 sequences of 1024 tokens, 32 query heads, 8 KV heads, d 128
    dims = [[15360, 32, 128], [835874, 8, 128], [835874, 8, 128], [16], [16], [15616]] + [[]] * 24
    types = [BF, BF, BF, INT, INT, INT] + ["Scalar"] * 12 + [""] * 12
    conc = ["", "", "", "", "", "", "1024", "1024", "0.", "0.088388347648318447", "0.", "False", "True", "-1", "-1",
            "0", "False", "False"] + [""] * 12  # fmt: skip
    pairs = 15 * (1024 * 1025 // 2)  # causal within each sequence
    want_flops = 2 * 32 * pairs * (128 + 128)
    want_bytes = 15360 * 32 * 256 * 2 + 15360 * 8 * 256 * 2  # Q, O; K, V of the 15360 keys (no prefix)
    e = est("aiter::mha_batch_prefill", dims, types, conc)  # from max_seqlen_q/k and cu_seqlens_q
    assert (e.flops, e.bytes) == (want_flops, want_bytes)
    _, text = read_marker(
        "execute_15360_context_15(sq15360sk15360sqsq15728640sqsk15728640)_generation_0(sq0sk0sqsq0sqsk0)"
    )
    assert (est("aiter::mha_batch_prefill", dims, types, conc, step=text).flops, e.bytes) == (want_flops, want_bytes)
    # a cached prefix: max_seqlen_k 1536 for max_seqlen_q 1024: every sequence 512 keys longer
    conc_prefix = conc[:7] + ["1536"] + conc[8:]
    e = est("aiter::mha_batch_prefill", dims, types, conc_prefix)
    assert e.flops == 2 * 32 * 15 * (1024 * 512 + 1024 * 1025 // 2) * 256
    assert e.bytes == 15360 * 32 * 256 * 2 + 15 * 1536 * 8 * 256 * 2
    # not causal: every query sees its sequence's keys
    e = est("aiter::mha_batch_prefill", dims, types, conc[:12] + ["False"] + conc[13:])
    assert e.flops == 2 * 32 * 15 * 1024 * 1024 * 256


# -- norms -----------------------------------------------------------------------------------
def test_serving_rms_norms():
    # aiter::rmsnorm(out, input, weight, eps): the per-head q norm of Qwen3 (491520 rows of 128)
    rows, c = 491520, 128
    e = est("aiter::rmsnorm", [[rows, c], [rows, c], [c], []], [BF, BF, BF, "Scalar"])
    assert e.flops == rows * (2 * c + 2) + 2 * rows * c  # squares and sum, rsqrt per row; scale and weight
    assert e.bytes == (2 * rows * c + c) * 2  # x read, out written, the weight
    assert family("_C::rms_norm") == family("sgl_kernel::rmsnorm") == "norm"
    # aiter::add_rmsnorm(out, input, residual_in, residual_out, weight, eps): + the sum
    rows, c = 15360, 4096
    e = est("aiter::add_rmsnorm", [[rows, c]] * 4 + [[c], []], [BF] * 5 + ["Scalar"])
    assert e.flops == rows * c + rows * (2 * c + 2) + 2 * rows * c
    assert e.bytes == (4 * rows * c + c) * 2  # input, residual read; sum, out written; the weight
    # vLLM's in place: _C::fused_add_rms_norm(input, residual, weight, eps), the same traffic
    e2 = est("_C::fused_add_rms_norm", [[rows, c], [rows, c], [c], []], [BF, BF, BF, "Scalar"])
    assert (e2.flops, e2.bytes) == (e.flops, e.bytes)
    assert "do not fit" in estimate(
        "aiter::rmsnorm", "[[4, 8], [4, 8], [7], []]", json.dumps([BF, BF, BF, "Scalar"]), ""
    )


def test_aiter_groupnorm_is_group_norm():
    # aiter::_groupnorm_run(x, num_groups, weight, bias, eps) of xdit_sd35: E elements, C channels
    e_, c = 128 * 1024 * 1024, 128
    e = est("aiter::_groupnorm_run", [[1, c, 1024, 1024], [], [c], [c], []], [BF, "Scalar", BF, BF, "Scalar"],
            ["", "32", "", "", "1e-06"])  # fmt: skip
    assert e.flops == 6 * c + 5 * e_  # TraceLens's norm convention, statistics computed (training)
    assert e.bytes == 2 * e_ * 2 + 6 * c * 2  # x read, y written; mean, var, weight, bias, 2 statistics


# -- elementwise -----------------------------------------------------------------------------
def test_silu_and_mul():
    t, d = 15360, 12288
    e = est("sgl_kernel::silu_and_mul", [[t, d], [t, 2 * d]], [BF, BF])
    assert e.flops == 2 * t * d  # the activation and the product per output
    assert e.bytes == (t * 2 * d + t * d) * 2
    assert family("_C::silu_and_mul") == "elementwise"
    assert "twice" in estimate("_C::silu_and_mul", "[[4, 8], [4, 8]]", json.dumps([BF, BF]), "")


def test_rotary_embedding():
    # sgl_kernel::rotary_embedding(positions, q, k, head_size, cos_sin_cache, is_neox): 32 q heads
    # and 8 k heads of 128, all rotated (the cache's width is the head size)
    t = 15360
    e = est("sgl_kernel::rotary_embedding", [[t], [t, 4096], [t, 1024], [], [41216, 128], []],
            [LONG, BF, BF, "Scalar", BF, "Scalar"], ["", "", "", "128", "", "True"])  # fmt: skip
    assert e.flops == 3 * t * (32 + 8) * 128  # x·cos − y·sin per rotated element
    assert e.bytes == 2 * t * (32 + 8) * 128 * 2 + t * 8 + t * 128 * 2  # q, k in place; positions; cos/sin rows
    # a partial rotary (GPT-J style rot 64 of head 128), no key: only the rotated half moves
    e = est("_C::rotary_embedding", [[4], [4, 256], [], [], [100, 64], []],
            [LONG, BF, "", "Scalar", BF, "Scalar"], ["", "", "", "128", "", "False"])  # fmt: skip
    assert e.flops == 3 * 4 * 2 * 64 and e.bytes == 2 * 4 * 2 * 64 * 2 + 4 * 8 + 4 * 64 * 2


# -- KV-cache writes and upsampling ----------------------------------------------------------
def test_kv_cache_writes():
    t, row = 15360, 1024
    e = est("sglang::store_cache", [[t, row], [t, row], [835874, row], [835874, row], [t], [], []],
            [BF, BF, BF, BF, LONG, "Scalar", "Scalar"])  # fmt: skip
    assert e.flops == 0 and e.bytes == 2 * (2 * t * row * 2) + t * 8  # k and v read and written; slots
    # vLLM: 8192 slot mappings into a (blocks, 32, heads, d) cache in fp8: written at 1 byte
    e = est("_C_cache_ops::reshape_and_cache_flash",
            [[8192, 8, 64], [8192, 8, 64], [100, 32, 8, 64], [100, 32, 8, 64], [8000], [], [], []],
            [BF, BF, "c10::Float8_e4m3fn", "c10::Float8_e4m3fn", LONG, "", F32, F32])  # fmt: skip
    assert e.bytes == 8000 * 512 * (2 + 1) * 2 + 8000 * 8  # padded tokens beyond the 8000 slots not written
    assert family("sglang::store_cache") == "gather"


def test_upsample_nearest_both_overloads():
    x = [1, 512, 128, 128]
    vec = est("aten::upsample_nearest2d", [x, [], []], [BF, "", "ScalarList"], ["", "", "[2., 2.]"])
    base = est("aten::upsample_nearest2d", [x, [], [], []], [BF, "ScalarList", "Scalar", "Scalar"],
               ["", "[256, 256]", "2.", "2."])  # fmt: skip
    n = 512 * 128 * 128
    assert vec.flops == 0 and vec.bytes == base.bytes == (n + 4 * n) * 2
    e = est("aten::upsample_nearest1d", [[2, 3, 10], [], []], [F32, "", "ScalarList"], ["", "", "[2.5]"])
    assert e.bytes == (60 + 2 * 3 * 25) * 4
    assert "neither" in estimate("aten::upsample_nearest2d", json.dumps([x, [], []]), json.dumps([BF, "", ""]), "")


# -- Inductor --------------------------------------------------------------------------------
def test_inductor_pointwise_and_reduction_kernels():
    # triton_poi_fused_addmm_gelu_view_15(in_out_ptr0, in_ptr0, xnumel) of xdit_sd35
    n = 2 * 4096 * 9728
    e = est("triton_poi_fused_addmm_gelu_view_15", [[2, 4096, 9728], [9728], []], [BF, BF, "Scalar"], ["", "", str(n)])
    assert e.flops == n and e.bytes == (n + 9728) * 2  # each tensor once (the in-place buffer too)
    assert family("triton_poi_fused_addmm_gelu_view_15") == "elementwise" and priority("triton_poi_x") == 2
    # a tiled reduction (ynumel 8192? xnumel 19, r0_numel 128): a (1, 36864, 2432) view read where it iterates
    dims = [
        [2, 2432, 64, 64],
        [2432],
        [1, 36864, 2432],
        [2, 4096, 1, 19],
        [2, 4096, 1, 19],
        [2, 4096, 1, 19],
        [],
        [],
        [],
    ]
    types = [BF, BF, BF, F32, F32, F32, "Scalar", "Scalar", "Scalar"]
    e = est("triton_red_fused_native_layer_norm_4", dims, types, [""] * 6 + ["8192", "19", "128"])
    space = 8192 * 19 * 128
    assert e.flops == space
    assert e.bytes == (space + 2432 + space) * 2 + 3 * 2 * 4096 * 19 * 4
    assert family("triton_per_fused_mean_8") == "reduce"
    # b200_vllm's kernel: constants before xnumel (a vocabulary offset, sizes, zeros) drop out
    e = est("triton_poi_fused_add_bitwise_0", [[888], [888], [888]] + [[]] * 6, [INT, LONG, "bool"] + ["Scalar"] * 6,
            ["", "", "", "0", "25136", "201088", "201088", "0", "888"])  # fmt: skip
    assert (e.flops, e.bytes) == (888, 888 * (4 + 8 + 1))
    assert "no tensor" in estimate("triton_poi_fused_x", "[[], []]", '["Scalar", "Scalar"]', '["1", "2"]')


# -- the step annotations --------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, phase",
    [
        ("execute_15360_context_15(sq15360sk15360sqsq15728640sqsk15728640)_generation_0(sq0sk0sqsq0sqsk0)", "prefill"),
        ("execute_64_context_0(sq0sk0sqsq0sqsk0)_generation_64(sq64sk9000sqsq64sqsk9000)", "decode"),
        ("execute_context_1(888_788544)_generation_0(0)", "prefill"),
        ("execute_context_1(888_788544)_generation_3(1200)", "mixed"),
        ("step[EXTEND bs=15 toks=15360]", "prefill"),
        ("step[DECODE bs=64 toks=64]", "decode"),
        ("step[MIXED bs=8 toks=900]", "mixed"),
        ("step[IDLE bs=0 toks=0]", ""),
        ("ProfilerStep#3", ""),
        ("execute_model", ""),
    ],
)
def test_step_annotations(name, phase):
    assert read_marker(name)[0] == phase


def test_step_sums_need_every_number():
    assert read_marker("execute_64_context_0(sq0sk0sqsq0sqsk0)_generation_64(sq64sk9000sqsq64sqsk9000)")[1] == (
        "context=0 sq=0 sk=0 sqsq=0 sqsk=0; generation=64 sq=64 sk=9000 sqsq=64 sqsk=9000"
    )
    # the old form's decodes have no key lengths: no sums (the phase stays)
    assert read_marker("execute_context_1(888_788544)_generation_3(1200)") == ("mixed", "")
    assert Step.parse("") is None and Step.parse("context=1; generation=2") is None
