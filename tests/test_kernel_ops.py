"""Communication and attention recognised beyond kernel names (issue 11 items 1 and 7), worked by hand (µs)."""

import pytest
from conftest import SHARED_TRACES
from tracebuilder import TraceBuilder

from perfdoctor import pipeline
from perfdoctor.analysis.timing.classify import classify_kernel
from perfdoctor.trace import load_trace

SGEMM = "ampere_sgemm_128x64_nn"
DIV = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, DivFunctor>>"
SOFTMAX = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>(float*, float const*)"
COPY = "void at::native::vectorized_elementwise_kernel<4, at::native::direct_copy_kernel_cuda>(int)"


def analyse(tb, tmp_path):
    return pipeline.analyze_tables(load_trace(str(tb.write(tmp_path / "t.json"))))


@pytest.mark.parametrize(
    "name,collective",
    [
        ("void dpsk::ep::internode::combine<8, 1, 4096>(void*, float*, int const*)", "all_to_all"),
        ("void dpsk::ep::internode::dispatch<false, 8, 4, 2048>(int4*, float*)", "all_to_all"),
        ("void dpsk::ep::internode::notify_dispatch<8>(int const*, int*)", "all_to_all"),
        ("void deep_ep::intranode::combine<bf16, 8>(void*)", "all_to_all"),
        ("nvshmemi_transfer_rma_nbi_kernel", "other"),
        ("mscclKernel_Sum_float_Simple_false(ncclDevComm*, mscclAlgo*, mscclWork*)", "other"),
        ("void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 8>(float**, float*)", "all_reduce"),
        ("void moe::fused_all_to_all_kernel<bf16>(bf16*)", "all_to_all"),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "send_recv"),
    ],
)
def test_communication_beyond_nccl(name, collective):
    c = classify_kernel(name)
    assert (c.category, c.collective) == ("communication", collective)


@pytest.mark.parametrize(
    "name",
    [
        "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>, true>(Flash_fwd_params)",
        "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<CollectiveMainloopFwd>>>()",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0",
        "fmha_cutlassB_f16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel)",
        "_ZN7ck_tile6kentryILi64ENS_13FmhaFwdKernelINS_21BlockFmhaPipelineQRKSVSIN",
        "_attn_fwd",
        "triton_tem_fused_flex_attention_0",
    ],
)
def test_fused_attention_kernels(name):
    assert classify_kernel(name).category == "attention"


def _attention_block(tb):
    """q@kᵀ → scale → softmax → @v, then a projection and a classifier softmax with no GEMM after it."""
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::matmul", 100, 100)
    tb.cpu_op("aten::bmm", 110, 80)
    tb.launch(SGEMM, launch_ts=150, start=300, dur=100)  # [300, 400) attention
    tb.cpu_op("aten::div", 200, 20)
    tb.launch(DIV, launch_ts=210, start=400, dur=20)  # [400, 420) attention
    tb.cpu_op("aten::softmax", 220, 40)
    tb.cpu_op("aten::_softmax", 225, 30)
    tb.launch(SOFTMAX, launch_ts=230, start=420, dur=50)  # [420, 470) attention
    tb.cpu_op("aten::matmul", 270, 80)
    tb.launch(SGEMM, launch_ts=300, start=470, dur=100)  # [470, 570) attention
    tb.cpu_op("aten::linear", 360, 40)
    tb.launch(SGEMM, launch_ts=370, start=570, dur=50)  # [570, 620) matmul
    tb.cpu_op("aten::softmax", 420, 20)
    tb.launch(SOFTMAX, launch_ts=425, start=620, dur=30)  # [620, 650) reduction: no GEMM after it


def test_unfused_attention_counts_as_attention(tmp_path):
    tb = TraceBuilder()
    _attention_block(tb)
    s = analyse(tb, tmp_path).primary.steps[0]
    assert s.categories_us["attention"] == 100 + 20 + 50 + 100
    assert s.categories_us["matmul"] == 50
    assert s.categories_us["reduction_norm"] == 30


def test_projection_between_gemms_is_not_attention(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::matmul", 100, 100)
    tb.launch(SGEMM, launch_ts=150, start=300, dur=100)
    tb.cpu_op("aten::softmax", 220, 40)
    tb.launch(SOFTMAX, launch_ts=230, start=420, dur=50)
    tb.cpu_op("aten::linear", 265, 5)  # a projection between: the softmax ends a classifier, not attention
    tb.cpu_op("aten::matmul", 270, 80)
    tb.launch(SGEMM, launch_ts=300, start=470, dur=100)
    s = analyse(tb, tmp_path).primary.steps[0]
    assert s.categories_us.get("attention", 0) == 0
    assert s.categories_us["matmul"] == 200 and s.categories_us["reduction_norm"] == 50


def test_sdpa_math_fallback_is_attention(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::scaled_dot_product_attention", 100, 300)
    tb.cpu_op("aten::_scaled_dot_product_attention_math", 105, 290)
    tb.launch(SGEMM, launch_ts=150, start=200, dur=100)
    tb.launch(SOFTMAX, launch_ts=250, start=300, dur=40)
    s = analyse(tb, tmp_path).primary.steps[0]
    assert s.categories_us["attention"] == 140 and s.categories_us["matmul"] == 0


def test_kernel_named_only_by_its_c10d_op_is_communication(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.cpu_op("c10d::alltoall_base_", 100, 200)
    tb.cpu_op("record_param_comms", 110, 180)
    tb.launch("void moe::exchange_tokens_kernel<float>(float*, int const*)", launch_ts=150, start=300, dur=200)
    tb.launch(COPY, launch_ts=160, start=500, dur=50)  # a copy inside the op stays elementwise
    tb.launch("void moe::exchange_tokens_kernel<float>(float*, int const*)", launch_ts=600, start=700, dur=10)
    s = analyse(tb, tmp_path).primary.steps[0]
    assert s.categories_us["communication"] == 200
    assert s.communication_by_collective_us == {"all_to_all": 200}
    assert s.categories_us["elementwise"] == 50
    assert s.categories_us["other"] == 10  # launched outside any collective op: unknown


@pytest.mark.skipif(not SHARED_TRACES.exists(), reason="../shared/traces is absent")
def test_ykcai_all_to_all_is_communication():
    t = load_trace(str(SHARED_TRACES / "ykcai__a100x2_moe_1layer_before" / "rank0.pt.trace.json"))
    s = pipeline.analyze_tables(t).primary.steps
    by_coll = {k for st in s for k in st.communication_by_collective_us}
    assert by_coll == {"send_recv"}  # ncclDevKernel_SendRecv: NCCL's all_to_allv is grouped send/recv


def test_record_param_comms_names_collective_bytes_and_group(tmp_path):
    from perfdoctor.analysis.timing.kernel_ops import collective_messages

    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    for ts, coll, nel, dtype, grp in (
        (100, "all_to_allv", 2048, "Float", 2),
        (300, "all_to_allv", 2048, "Float", 2),
        (500, "wait", 0, "Byte", 1),
        (600, "allreduce", 1000, "BFloat16", 8),
    ):
        tb.events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "record_param_comms",
                "pid": tb.pid,
                "tid": tb.tid,
                "ts": ts,
                "dur": 50,
                "args": {
                    "External id": ts,
                    "Collective name": coll,
                    "In msg nelems": nel,
                    "dtype": dtype,
                    "Group size": grp,
                },
            }
        )
    t = load_trace(str(tb.write(tmp_path / "c.json")))
    assert collective_messages(t, 0, 1000) == [
        {"collective": "all_to_allv", "calls": 2, "bytes_per_call": 8192, "group_size": 2},
        {"collective": "allreduce", "calls": 1, "bytes_per_call": 2000, "group_size": 8},
    ]


@pytest.mark.skipif(not SHARED_TRACES.exists(), reason="../shared/traces is absent")
def test_pd301_names_the_messages_of_the_ykcai_all_to_all():
    from rules_helpers import run_rules

    paths = sorted((SHARED_TRACES / "ykcai__a100x2_moe_3layer_before").glob("*.json"))
    f = run_rules(paths, ["PD301"]).findings["PD301"]
    # 12 all_to_allv per step of 2048 floats (8,192 B) between the 2 ranks, as record_param_comms says
    assert "messages (record_param_comms): all_to_allv 12×/step of 0.008 MB in a group of 2" in f["message"]
