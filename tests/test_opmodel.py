"""The op performance model, family by family: FLOPs and bytes computed by hand for known shapes.

Every expected number below is worked out in the test from the shapes (a product of the
dimensions), never taken from the code under test. Shapes are those the PyTorch profiler
records (``Input Dims``, ``Input type``, ``Concrete Inputs``), several of them copied from the
real H200 trace in ``tests/data/h200``.
"""

from __future__ import annotations

import json

import pytest

from dtrace.knowledge.opmodel import estimate, family, is_backward, priority
from dtrace.knowledge.opmodel.attention import causal_pairs

BF, F32, HALF, LONG = "c10::BFloat16", "float", "c10::Half", "long int"
FP8 = "c10::Float8_e4m3fn"


def est(name, dims, types, concrete=None):
    concrete = concrete if concrete is not None else [""] * len(dims)
    e = estimate(name, json.dumps(dims), json.dumps(types), json.dumps(concrete))
    assert not isinstance(e, str), e
    return e


# -- GEMM ------------------------------------------------------------------------------------
def test_mm_bf16_without_bias():
    e = est("aten::mm", [[4096, 4096], [4096, 4096]], [BF, BF])
    assert e.flops == 2 * 4096**3
    assert e.bytes == (4096 * 4096 * 3) * 2  # A, B read, C written, 2 bytes each
    assert (e.unit, e.precision) == ("matrix", "bf16")


def test_addmm_with_bias_counts_the_bias_add_and_read():
    # F.linear(X[8192, 4096], W[4096, 4096], bias[4096]) -> aten::addmm(bias, X, W^T)
    e = est(
        "aten::addmm",
        [[4096], [8192, 4096], [4096, 4096], [], []],
        [BF, BF, BF, "Scalar", "Scalar"],
        ["", "", "", "1", "1"],
    )
    m, n, k = 8192, 4096, 4096
    assert e.flops == 2 * m * n * k + m * n
    assert e.bytes == (m * k + k * n + m * n + n) * 2


def test_addmm_adding_a_full_matrix_reads_all_of_it():
    e = est("aten::addmm", [[64, 32], [64, 16], [16, 32], [], []], [F32, F32, F32, "Scalar", "Scalar"])
    assert e.bytes == (64 * 32 + 64 * 16 + 16 * 32 + 64 * 32) * 4  # C read (all of it), A, B, output


def test_fp16_and_fp32_gemms_run_at_their_precision():
    assert est("aten::mm", [[8, 8], [8, 8]], [HALF, HALF]).precision == "fp16"
    e = est("aten::mm", [[2048, 2048], [2048, 2048]], [F32, F32])
    assert e.precision == "fp32" and e.bytes == 3 * 2048 * 2048 * 4


def test_bmm_and_baddbmm():
    e = est("aten::bmm", [[32, 1024, 128], [32, 128, 1024]], [BF, BF])
    assert e.flops == 32 * 2 * 1024 * 1024 * 128
    assert e.bytes == 32 * (1024 * 128 + 128 * 1024 + 1024 * 1024) * 2
    e = est(
        "aten::baddbmm", [[32, 1024, 1024], [32, 1024, 128], [32, 128, 1024], [], []], [BF, BF, BF, "Scalar", "Scalar"]
    )
    assert e.flops == 32 * (2 * 1024 * 1024 * 128 + 1024 * 1024)
    assert e.bytes == 32 * (1024 * 1024 + 1024 * 128 + 128 * 1024 + 1024 * 1024) * 2  # C read in full


def test_scaled_mm_fp8_to_bf16():
    # torch._scaled_mm(a8, b8, scale_a, scale_b, out_dtype=bf16): out_dtype 15 = BFloat16
    e = est(
        "aten::_scaled_mm",
        [[4096, 4096], [4096, 4096], [], [], [], [], [], []],
        [FP8, FP8, F32, F32, "", "", "Scalar", "Scalar"],
        ["", "", "", "", "", "", "15", "False"],
    )
    assert e.flops == 2 * 4096**3 and e.precision == "fp8"
    assert e.bytes == 4096 * 4096 * 1 * 2 + 4 + 4 + 4096 * 4096 * 2  # fp8 operands, two fp32 scales, bf16 out


def test_grouped_mm_splits_rows_into_groups():
    # torch._grouped_mm(A[2048, 2048], B[4, 2048, 2048], offs[4]): 4 experts of 512 rows each
    e = est("aten::_grouped_mm", [[2048, 2048], [4, 2048, 2048], [4], [], []], [BF, BF, "int", "", ""])
    assert e.flops == 2 * 2048 * 2048 * 2048  # 4 groups x 2*512*2048*2048
    assert e.bytes == (2048 * 2048 + 4 * 2048 * 2048 + 2048 * 2048) * 2 + 4 * 4


def test_linear_and_matmul_are_wrappers_with_the_same_formula():
    assert priority("aten::linear") == priority("aten::matmul") == 1 < priority("aten::mm") == 2
    e = est("aten::linear", [[8192, 4096], [4096, 4096], [4096]], [BF, BF, BF])
    assert e.flops == 2 * 8192 * 4096 * 4096 + 8192 * 4096
    e = est("aten::matmul", [[4, 2048, 4096], [4096, 4096]], [BF, BF])
    assert e.flops == 2 * (4 * 2048) * 4096 * 4096


# -- convolution -----------------------------------------------------------------------------
CONV_TYPES = [BF, BF, BF, "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]


def test_conv2d_with_bias():
    # F.conv2d(img[32, 64, 56, 56], w[128, 64, 3, 3], b[128], padding=1) -> output 32x128x56x56
    e = est(
        "aten::convolution",
        [[32, 64, 56, 56], [128, 64, 3, 3], [128], [], [], [], [], [], []],
        CONV_TYPES,
        ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"],
    )
    out = 32 * 128 * 56 * 56
    assert e.flops == 2 * out * (64 * 3 * 3) + out
    assert e.bytes == (32 * 64 * 56 * 56 + 128 * 64 * 9 + out + 128) * 2


def test_grouped_conv_counts_one_group_of_input_channels_per_output():
    # groups=4: the weight holds 64/4 = 16 input channels per output channel
    e = est(
        "aten::convolution",
        [[32, 64, 56, 56], [128, 16, 3, 3], [], [], [], [], [], [], []],
        [BF, BF, ""] + CONV_TYPES[3:],
        ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "4"],
    )
    out = 32 * 128 * 56 * 56
    assert e.flops == 2 * out * 16 * 9  # a quarter of the ungrouped convolution, no bias
    assert e.bytes == (32 * 64 * 56 * 56 + 128 * 16 * 9 + out) * 2


def test_strided_conv_output_size():
    # owlv2 patch embedding: 1008x1008 image, 14x14 patches, stride 14 -> 72x72
    e = est(
        "aten::convolution",
        [[1, 3, 1008, 1008], [1024, 3, 14, 14], [], [], [], [], [], [], []],
        [BF, BF, ""] + CONV_TYPES[3:],
        ["", "", "", "[14, 14]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1"],
    )
    out = 1024 * 72 * 72
    assert e.flops == 2 * out * 3 * 14 * 14


def test_conv_backward_follows_the_output_mask():
    dims = [[32, 128, 56, 56], [32, 64, 56, 56], [128, 64, 3, 3], [], [], [], [], [], [], [], []]
    types = [
        BF,
        BF,
        BF,
        "ScalarList",
        "ScalarList",
        "ScalarList",
        "ScalarList",
        "Scalar",
        "ScalarList",
        "Scalar",
        "ScalarList",
    ]
    out, x, w = 32 * 128 * 56 * 56, 32 * 64 * 56 * 56, 128 * 64 * 9
    fwd = 2 * out * 64 * 9
    full = est(
        "aten::convolution_backward",
        dims,
        types,
        ["", "", "", "[128]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[True, True, True]"],
    )
    assert full.flops == 2 * fwd + out  # dx, dw, db (a sum over dy)
    assert full.bytes == ((out + w + x) + (out + x + w) + (out + 128)) * 2
    no_dx = est(
        "aten::convolution_backward",
        dims,
        types,
        ["", "", "", "[128]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[False, True, False]"],
    )
    assert no_dx.flops == fwd and no_dx.bytes == (out + x + w) * 2
    assert is_backward("aten::convolution_backward") and not is_backward("aten::convolution")


# -- attention -------------------------------------------------------------------------------
def _sdpa(causal: bool):
    q = [8, 16, 2048, 128]
    return est(
        "aten::_scaled_dot_product_flash_attention",
        [q, q, q, [], [], [], []],
        [BF, BF, BF, "Scalar", "Scalar", "Scalar", "Scalar"],
        ["", "", "", "0.", "True" if causal else "False", "False", "0.088"],
    )


def test_attention_forward_and_the_causal_half():
    b, h, n, d = 8, 16, 2048, 128
    full = _sdpa(False)
    assert full.flops == b * h * (2 * n * n * d + 2 * n * n * d)
    assert full.bytes == 4 * b * h * n * d * 2  # Q, K, V read and O written, bf16
    causal = _sdpa(True)
    kept = n * (n + 1) // 2  # the pairs a top-left causal mask keeps: row i sees i + 1 keys
    assert causal.flops == b * h * 4 * kept * d
    assert causal_pairs(3, 3) == 1 + 2 + 3 and causal_pairs(2, 5, bottom_right=True) == 4 + 5


def test_attention_backward_recomputes_the_scores():
    b, h, n, d = 8, 16, 2048, 128
    q = [b, h, n, d]
    e = est(
        "aten::_scaled_dot_product_flash_attention_backward",
        [q, q, q, q, q, [8, 16, 2048], [], [], [], [], [], [], [2], [], []],
        [
            BF,
            BF,
            BF,
            BF,
            BF,
            F32,
            "",
            "",
            "Scalar",
            "Scalar",
            "Scalar",
            "Scalar",
            "long unsigned int",
            "long unsigned int",
            "Scalar",
        ],
        ["", "", "", "", "", "", "", "", "2048", "2048", "0.", "False", "", "", "0.088"],
    )
    assert e.flops == b * h * 5 * (2 * n * n * d)  # S again, dV, dP, dQ, dK
    assert e.bytes == 8 * b * h * n * d * 2  # Q, K, V, O, dO read; dQ, dK, dV written


def test_attention_layouts_and_grouped_query_heads():
    # aten::_flash_attention_forward holds (batch, seq, heads, dim); 32 query heads share 8 key heads
    q, kv = [2, 512, 32, 64], [2, 512, 8, 64]
    e = est(
        "aten::_flash_attention_forward",
        [q, kv, kv] + [[]] * 12,
        [BF, BF, BF] + [""] * 12,
        [""] * 8 + ["False"] + [""] * 6,
    )
    assert e.flops == 2 * 32 * 4 * 512 * 512 * 64
    assert e.bytes == (2 * 512 * 32 * 64 * 2 + 2 * (2 * 512 * 8 * 64)) * 2


def test_attention_in_fp32_counts_four_bytes_per_element():
    q = [1, 2, 16, 8]
    e = est(
        "aten::_scaled_dot_product_efficient_attention",
        [q, q, q, [], [], [], [], []],
        [F32, F32, F32, "", "Scalar", "Scalar", "Scalar", ""],
        ["", "", "", "", "True", "0.", "False", ""],
    )
    assert e.bytes == 4 * (2 * 16 * 8) * 4 and e.precision == "fp32"


# -- elementwise, copies ---------------------------------------------------------------------
def test_binary_elementwise_same_shape_and_broadcast():
    e = est("aten::add", [[8192, 4096], [8192, 4096], []], [BF, BF, "Scalar"], ["", "", "1"])
    assert e.flops == 8192 * 4096 and e.bytes == 3 * 8192 * 4096 * 2
    b = est("aten::add", [[8192, 4096], [4096], []], [BF, BF, "Scalar"], ["", "", "1"])
    assert b.flops == 8192 * 4096 and b.bytes == (8192 * 4096 + 4096 + 8192 * 4096) * 2  # the bias row read once


def test_elementwise_output_types():
    # a 0-dim double (a Python number) is read once and does not widen the output
    e = est("aten::mul", [[8192, 4096], []], [BF, "double"])
    assert e.bytes == 8192 * 4096 * 2 + 8 + 8192 * 4096 * 2
    # bf16 + fp32 tensors promote to fp32; in place, the output keeps self's type
    assert est("aten::add", [[4, 8], [4, 8], []], [BF, F32, "Scalar"]).bytes == 32 * (2 + 4 + 4)
    assert est("aten::add_", [[4, 8], [4, 8], []], [BF, F32, "Scalar"]).bytes == 32 * (2 + 4 + 2)
    assert est("aten::lt", [[4, 8], [4, 8]], [F32, F32]).bytes == 32 * (4 + 4 + 1)  # bool out
    assert est("aten::gelu", [[8192, 4096], []], [BF, ""]).bytes == 2 * 8192 * 4096 * 2


def test_copies_and_casts():
    e = est("aten::copy_", [[8192, 4096], [8192, 4096], []], [F32, BF, "Scalar"], ["", "", "False"])
    assert e.flops == 8192 * 4096 and e.bytes == 8192 * 4096 * (4 + 2)
    z = est("aten::fill_", [[50000, 4096], []], [BF, "Scalar"], ["", "0"])
    assert z.flops == 0 and z.bytes == 50000 * 4096 * 2
    assert family("aten::copy_") == "copy"
    assert "TensorList" in estimate("aten::cat", "[[[2, 2], [2, 2]], []]", '["TensorList", "Scalar"]', '["", "0"]')


# -- normalisation ---------------------------------------------------------------------------
def test_layer_norm_affine_and_not():
    e_, c = 8192 * 4096, 4096
    affine = est(
        "aten::layer_norm",
        [[8192, 4096], [], [4096], [4096], [], []],
        [BF, "ScalarList", BF, BF, "Scalar", "Scalar"],
        ["", "[4096]", "", "", "1e-05", "True"],
    )
    assert affine.flops == 6 * c + 5 * e_  # statistics (3E), normalise and scale (2E), 6C per-channel terms
    assert affine.bytes == 2 * e_ * 2 + 6 * c * 2  # x, y; mean, var, weight, bias, 2 updated stats
    plain = est(
        "aten::layer_norm",
        [[8192, 4096], [], [], [], [], []],
        [BF, "ScalarList", "", "", "Scalar", "Scalar"],
        ["", "[4096]", "", "", "1e-05", "True"],
    )
    assert plain.bytes == 2 * e_ * 2 + 4 * c * 2  # no weight, no bias


def test_batch_norm_training_and_eval():
    e_, c = 32 * 64 * 56 * 56, 64
    dims = [[32, 64, 56, 56], [64], [64], [64], [64], [], [], [], []]
    types = [BF, BF, BF, F32, F32, "Scalar", "Scalar", "Scalar", "Scalar"]
    train = est("aten::batch_norm", dims, types, ["", "", "", "", "", "True", "0.1", "1e-05", "True"])
    assert train.flops == 6 * c + 5 * e_ and train.bytes == 2 * e_ * 2 + 6 * c * 2
    ev = est("aten::batch_norm", dims, types, ["", "", "", "", "", "False", "0.1", "1e-05", "True"])
    assert ev.flops == 6 * c + 2 * e_ and ev.bytes == 2 * e_ * 2 + 4 * c * 2


def test_norm_backward_and_rms_norm():
    e_, c = 8192 * 4096, 4096
    bwd = est(
        "aten::native_layer_norm_backward",
        [[8192, 4096], [8192, 4096], [], [8192, 1], [8192, 1], [4096], [4096], []],
        [BF, BF, "ScalarList", F32, F32, BF, BF, "ScalarList"],
        ["", "", "[4096]", "", "", "", "", "[True, True, True]"],
    )
    assert bwd.flops == 9 * e_  # 4E + 5E (dx, training)
    assert bwd.bytes == e_ * 2 + 2 * e_ * 2 + c * 2 + c * 2 + 2 * c * 2
    rms = est("aten::rms_norm", [[8192, 4096], [], [4096], []], [BF, "ScalarList", BF, ""], ["", "[4096]", "", ""])
    assert rms.flops == 8192 * (2 * c + 2) + 2 * e_ and rms.bytes == 2 * e_ * 2 + c * 2
    gn = est(
        "aten::group_norm",
        [[32, 64, 56, 56], [], [64], [64], [], []],
        [BF, "Scalar", BF, BF, "Scalar", "Scalar"],
        ["", "8", "", "", "1e-05", "True"],
    )
    assert gn.flops == 6 * 64 + 5 * 32 * 64 * 56 * 56


# -- reductions, softmax, gathers ------------------------------------------------------------
def test_reductions_write_the_reduced_shape():
    s = est(
        "aten::sum", [[32, 128, 56, 56], [], [], []], [BF, "ScalarList", "Scalar", ""], ["", "[0, 2, 3]", "False", ""]
    )
    assert s.flops == 32 * 128 * 56 * 56 and s.bytes == (32 * 128 * 56 * 56 + 128) * 2
    m = est("aten::amax", [[8192, 4096], [], []], [BF, "ScalarList", "Scalar"], ["", "[0]", "False"])
    assert m.bytes == (8192 * 4096 + 4096) * 2
    full = est("aten::mean", [[8192, 4096], []], [BF, ""])
    assert full.bytes == 8192 * 4096 * 2 + 2
    keep = est("aten::sum", [[8, 6], [], [], []], [F32, "ScalarList", "Scalar", ""], ["", "[-1]", "True", ""])
    assert keep.bytes == (48 + 8) * 4


def test_softmax_and_gathers():
    sm = est("aten::_softmax", [[8192, 4096], [], []], [BF, "Scalar", "Scalar"], ["", "-1", "False"])
    assert sm.flops == 3 * 8192 * 4096 and sm.bytes == 2 * 8192 * 4096 * 2
    emb = est("aten::embedding", [[50000, 4096], [8192], [], [], []], [BF, LONG, "Scalar", "Scalar", "Scalar"])
    assert emb.flops == 0 and emb.bytes == 2 * 8192 * 4096 * 2 + 8192 * 8
    bwd = est(
        "aten::embedding_dense_backward",
        [[8192, 4096], [8192], [], [], []],
        [BF, LONG, "Scalar", "Scalar", "Scalar"],
        ["", "", "50000", "-1", "False"],
    )
    assert bwd.flops == 8192 * 4096 and bwd.bytes == 8192 * 4096 * 2 + 8192 * 8 + 50000 * 4096 * 2
    sel = est("aten::index_select", [[8192, 4096], [], [2048]], [BF, "Scalar", LONG], ["", "0", ""])
    assert sel.bytes == 2 * 2048 * 4096 * 2 + 2048 * 8


def test_unmodelled_reasons():
    assert estimate("aten::nonzero", "[[4]]", '["float"]', '[""]') == "no model for this op"
    assert "record_shapes" in estimate("aten::mm", "", "", "")
    assert "inner dimensions" in estimate("aten::mm", "[[4, 5], [6, 7]]", '["float", "float"]', '["", ""]')


@pytest.mark.parametrize("name", ["aten::mm", "aten::convolution", "aten::layer_norm", "aten::sum", "aten::add"])
def test_garbage_arguments_never_raise(name):
    for dims, types in [
        ("[1, 2]", '["float"]'),
        ("[[1], [2]]", '["x", "y"]'),
        ("{}", "[]"),
        ("[[[1]], []]", '["TensorList", ""]'),
    ]:
        assert isinstance(estimate(name, dims, types, ""), str)
