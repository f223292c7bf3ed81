"""FLOPs and bytes per aten op: every figure worked by hand from the shapes."""

from __future__ import annotations

import pytest

from perfdoctor.analysis.work.op_flops import OpCost, Uncosted, cost_op

BF16, F32 = "c10::BFloat16", "float"


def test_addmm_from_raw_kineto_bytes():
    c = cost_op(
        "aten::addmm", b"[[512],[141,512],[512,512],[],[]]", f'["{BF16}","{BF16}","{BF16}","Scalar","Scalar"]'.encode()
    )
    assert isinstance(c, OpCost)
    assert c.flops == 2 * 141 * 512 * 512 == 73_924_608
    assert c.bytes == (512 + 141 * 512 + 512 * 512 + 141 * 512) * 2  # bias, a, b read; out written
    assert c.dtype == "bf16" and c.kind == "matmul"


def test_mm_bmm_matmul_linear():
    assert cost_op("aten::mm", [[32, 1000], [1000, 2048]], [F32, F32]).flops == 2 * 32 * 2048 * 1000
    assert cost_op("aten::bmm", [[64, 1024, 128], [64, 128, 1024]], [F32, F32]).flops == 2 * 64 * 1024 * 1024 * 128
    # broadcast batch: [8,8,1024,128] @ [8,1,128,1024] -> batch 64
    assert (
        cost_op("aten::matmul", [[8, 8, 1024, 128], [8, 1, 128, 1024]], [F32, F32]).flops == 2 * 64 * 1024 * 1024 * 128
    )
    lin = cost_op("aten::linear", [[8, 1024, 1024], [4096, 1024], [4096]], [F32] * 3)
    assert lin.flops == 2 * 8192 * 4096 * 1024
    assert lin.bytes == (8192 * 1024 + 4096 * 1024 + 4096 + 8192 * 4096) * 4
    assert isinstance(cost_op("aten::mm", [[2, 3], [4, 5]], [F32, F32]), Uncosted)


def test_conv2d_with_concrete_inputs():
    c = cost_op(
        "aten::conv2d",
        [[512, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], []],
        [BF16, BF16, "", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
        ["", "", "", "[2, 2]", "[3, 3]", "[1, 1]", "1"],
    )
    # out = (224 + 6 - 6 - 1)//2 + 1 = 112
    assert c.flops == 2 * 512 * 64 * 3 * 7 * 7 * 112 * 112


def test_conv_forward_without_stride_is_uncosted():
    c = cost_op("aten::cudnn_convolution", [[32, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], [], [], []], None)
    assert isinstance(c, Uncosted) and "stride" in c.reason


def test_conv_backward_is_two_forwards_and_respects_output_mask():
    dims = [[32, 512, 7, 7], [32, 2048, 7, 7], [2048, 512, 1, 1]] + [[]] * 8
    c = cost_op("aten::cudnn_convolution_backward", dims, [F32] * 3 + ["GenericList"] * 8)
    fwd = 2 * 32 * 2048 * 512 * 1 * 1 * 7 * 7
    assert c.flops == 2 * fwd == 6_576_668_672
    types = [BF16] * 3 + ["ScalarList"] * 8
    concrete = ["", "", "", "[0]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[False, True, False]"]
    go, x, w = [512, 512, 7, 7], [512, 512, 7, 7], [512, 512, 3, 3]
    c = cost_op("aten::convolution_backward", [go, x, w] + [[]] * 8, types, concrete)
    assert c.flops == 2 * 512 * (512 * 512 * 9) * 49  # only grad_weight requested


def test_sdpa_forward_backward_and_causal():
    q = [1, 8, 141, 64]
    c = cost_op("aten::scaled_dot_product_attention", [q, q, q] + [[]] * 5, [BF16] * 3 + [""] * 5)
    assert c.flops == 4 * 1 * 8 * 141 * 141 * 64
    causal = cost_op(
        "aten::_scaled_dot_product_flash_attention",
        [q, q, q] + [[]] * 4,
        [BF16] * 3 + ["Scalar"] * 4,
        ["", "", "", "0.0", "True", "False", ""],
    )
    assert causal.flops == 2 * 1 * 8 * 141 * 141 * 64
    blhd = [1, 141, 8, 64]  # _flash_attention_forward takes (batch, seq, heads, dim)
    assert cost_op("aten::_flash_attention_forward", [blhd] * 3 + [[]] * 12, [BF16] * 3 + [""] * 12).flops == c.flops
    bwd = cost_op(
        "aten::_scaled_dot_product_flash_attention_backward",
        [q] * 5 + [[1, 8, 141]] + [[]] * 9,
        [BF16] * 5 + [F32] + [""] * 9,
    )
    assert bwd.flops == 2.5 * c.flops


def test_elementwise_broadcast_and_bytes():
    c = cost_op("aten::masked_fill", [[8, 8, 1024, 1024], [1, 1, 1024, 1024], []], [F32, "bool", "Scalar"])
    n = 8 * 8 * 1024 * 1024
    assert c.flops == n
    assert c.bytes == n * 4 + 1024 * 1024 * 1 + n * 4
    assert cost_op("aten::add_", [[10], [10], []], [BF16, BF16, "Scalar"]).bytes == 60
    assert cost_op("aten::eq", [[1, 141], []], ["long int", "Scalar"]).bytes == 141 * 8 + 141


def test_memory_and_norm_ops():
    assert (
        cost_op("aten::copy_", [[32, 3, 224, 224], [32, 3, 224, 224], []], [F32, F32, "Scalar"]).bytes
        == 2 * 32 * 3 * 224 * 224 * 4
    )
    emb = cost_op(
        "aten::embedding", [[30522, 512], [1, 141], [], [], []], [BF16, "long int", "Scalar", "Scalar", "Scalar"]
    )
    assert emb.flops == 0 and emb.bytes == 2 * 141 * 512 * 2 + 141 * 8
    ln = cost_op(
        "aten::layer_norm",
        [[1, 141, 512], [], [512], [512], [], []],
        [BF16, "ScalarList", BF16, BF16, "Scalar", "Scalar"],
    )
    assert ln.flops == 8 * 141 * 512


def test_einsum_needs_equation():
    assert isinstance(cost_op("aten::einsum", [[], [[2, 3, 4], [2, 4, 5]], []], ["", "TensorList", ""]), Uncosted)
    c = cost_op("aten::einsum", [[], [[2, 3, 4], [2, 4, 5]], []], ["", "TensorList", ""], ['"bij,bjk->bik"', "", ""])
    assert c.flops == 2 * 2 * 3 * 4 * 5


@pytest.mark.parametrize(
    "name,dims", [("fb::convex_sum", [[2]]), ("aten::topk", [[4]]), ("aten::mm", None), ("aten::mm", b"not json")]
)
def test_uncosted(name, dims):
    assert isinstance(cost_op(name, dims, None), Uncosted)
