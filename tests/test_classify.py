"""Kernel classification on real names taken from ../shared/traces."""

import pytest

from perfdoctor.analysis.timing.classify import classify_kernel
from perfdoctor.analysis.timing.cpu_breakdown import classify_cpu_op

CASES = [
    ("volta_sgemm_128x64_nn", "matmul"),
    ("ampere_sgemm_128x128_tn", "matmul"),
    (
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_128x1",
        "matmul",
    ),
    (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_",
        "matmul",
    ),
    ("Cijk_Ailk_Bjlk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x64_MI16x16x1_SN_LDSB0_AFC1", "matmul"),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 2, 2, false, false>", "matmul"),
    ("nvjet_tst_128x64_64x8_1x2_h_bz_coopA_NNT", "matmul"),
    ("volta_scudnn_128x64_relu_interior_nn_v1", "conv"),
    ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x128x32_stage5", "conv"),
    ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2", "conv"),
    (
        "void cudnn::winograd_nonfused::winogradForwardOutput4x4<float, float>(cudnn::winograd_nonfused::WinogradOutput",
        "conv",
    ),
    (
        "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cut",
        "attention",
    ),
    ("attn_fwd", "attention"),
    ("fmha_cutlassF_f16_aligned_64x64_rf_sm80", "attention"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "communication"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "communication"),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int,",
        "elementwise",
    ),
    ("triton_poi_fused__unsafe_view_add_3", "elementwise"),
    ("triton_red_fused_add_mean_mul_pow_rsqrt_0", "reduction_norm"),
    (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*, f",
        "reduction_norm",
    ),
    (
        "void at::native::batch_norm_backward_kernel<c10::BFloat16, c10::BFloat16, float, int>(torch::headeronly::detai",
        "reduction_norm",
    ),
    (
        "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 32, true, 1>(float, float, float, float, cudnnTensorStruct",
        "reduction_norm",
    ),
    (
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>(cudnnTensorStruct, float const*)",
        "reduction_norm",
    ),
    ("void cudnn::ops::scalePackedTensor_kernel<float, float>(cudnnTensor4dStruct, float*, float)", "elementwise"),
    (
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorLis",
        "optimizer",
    ),
    ("Memcpy HtoD (Pageable -> Device)", "memcpy"),
    ("Memset (Device)", "memset"),
]


@pytest.mark.parametrize("name,category", CASES)
def test_kernel_categories(name, category):
    assert classify_kernel(name).category == category


def test_collectives_and_memcpy_details():
    assert classify_kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)").collective == "all_reduce"
    assert classify_kernel("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*)").collective == "broadcast"
    assert classify_kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)").collective == "send_recv"
    assert classify_kernel("ncclDevKernel_AllGather_RING_LL(ncclDevComm*)").collective == "all_gather"
    h2d = classify_kernel("Memcpy HtoD (Pageable -> Device)")
    assert (h2d.direction, h2d.pageable) == ("h2d", True)
    d2h = classify_kernel("Memcpy DtoH (Device -> Pinned)")
    assert (d2h.direction, d2h.pageable) == ("d2h", False)
    assert classify_kernel("Memcpy DtoD (Device -> Device)").direction == "d2d"
    assert classify_kernel("triton_per_fused_layer_norm_tanh_0_0d1d2d3d4d").triton


def test_cpu_ops():
    assert classify_cpu_op("aten::addmm") == "matmul"
    assert classify_cpu_op("aten::linear") == "matmul"
    assert classify_cpu_op("aten::convolution") == "conv"
    assert classify_cpu_op("aten::scaled_dot_product_attention") == "attention"
    assert classify_cpu_op("aten::layer_norm") == "reduction_norm"
    assert classify_cpu_op("aten::add_") == "elementwise"
    assert classify_cpu_op("aten::empty") == "other_ops"
