"""Hardware table: datasheet figures and matching from deviceProperties (real traces included)."""

from __future__ import annotations

import pytest
from conftest import shared_trace

from perfdoctor.analysis.work.hardware import SPECS, match_device, spec_by_name
from perfdoctor.errors import PerfDoctorError


def props(name, cc, sms, mem, **extra):
    return {"name": name, "computeMajor": cc[0], "computeMinor": cc[1], "numSms": sms, "totalGlobalMem": mem, **extra}


def test_h100_sxm_dense_figures_and_ridge():
    h = spec_by_name("H100")
    assert h.key == "h100-sxm"
    assert h.peak("bf16") == 989.5e12 and h.peak("fp8") == 1979e12 and h.hbm_bytes_per_s == 3.35e12
    assert h.ridge_point("bf16") == pytest.approx(989.5e12 / 3.35e12)
    assert h.has_tf32 and {"fp8", "bf16"} <= set(h.peak_flops)
    assert "sparse figure ÷ 2" in h.source_of("bf16")


def test_every_spec_states_sources_and_dense_only():
    required = {
        "v100-sxm2",
        "a100-40gb",
        "a100-80gb-sxm",
        "a100-80gb-pcie",
        "h100-sxm",
        "h100-pcie",
        "h200-sxm",
        "h800-sxm",
        "gh200-96gb",
        "b200",
        "l4",
        "l40s",
        "a10",
        "rtx-3090",
        "rtx-4090",
        "mi250x-gcd",
        "mi300x",
    }
    assert required <= {s.key for s in SPECS}
    for s in SPECS:
        assert s.source_of("bandwidth") and all(s.source_of(d) for d in s.peak_flops)
        assert "fp32" in s.peak_flops and s.hbm_bytes_per_s > 0
        # tensor-core rates are never below the SIMT fp32 rate; sparse (2x) figures would break bf16 <= 2*fp16
        if "bf16" in s.peak_flops and "fp16" in s.peak_flops:
            assert s.peak_flops["bf16"] == s.peak_flops["fp16"]
    assert "bf16" not in spec_by_name("V100").peak_flops and not spec_by_name("V100").has_tf32


@pytest.mark.parametrize(
    "p,key",
    [
        (props("NVIDIA H100 80GB HBM3", (9, 0), 132, 85018279936), "h100-sxm"),
        (props("NVIDIA H100 PCIe", (9, 0), 114, 85e9), "h100-pcie"),
        (props("NVIDIA A100-SXM4-40GB", (8, 0), 108, 42.5e9), "a100-40gb"),
        (props("NVIDIA A100-PG509-200", (8, 0), 108, 42505273344), "a100-40gb"),
        (props("NVIDIA PG509-210", (8, 0), 108, 85198045184), "a100-80gb-sxm"),
        (props("NVIDIA A100 80GB PCIe", (8, 0), 108, 84987740160), "a100-80gb-pcie"),
        (props("Tesla V100-DGXS-32GB", (7, 0), 80, 34084028416), "v100-sxm2"),
        (props("AMD Instinct MI300X", (9, 4), 304, 206141652992), "mi300x"),
        (props("AMD Radeon Graphics", (9, 0), 104, 68702699520, warpSize=64), "mi250-gcd"),
        (props("AMD Radeon Graphics", (9, 0), 110, 68702699520, gcnArchName="gfx90a:sramecc+:xnack-"), "mi250x-gcd"),
        (props("NVIDIA GH200 480GB", (9, 0), 132, 102e9), "gh200-96gb"),
        (props("Tesla T4", (7, 5), 40, 15843721216), "t4"),  # as torch.cuda reports a T4 (16 GB board, 15.8e9 usable)
    ],
)
def test_match(p, key):
    assert match_device(p).key == key


@pytest.mark.parametrize(
    "p",
    [
        props("Quadro GP100", (6, 0), 56, 17069309952),  # not in the table
        props("NVIDIA A100 80GB", (8, 0), 108, 85e9),  # form factor not named: SXM and PCIe bandwidth differ
        props("NVIDIA H100 NVL", (9, 0), 132, 94e9),
        props("NVIDIA H100 80GB HBM3", (8, 0), 132, 85e9),  # name and architecture disagree
        props("NVIDIA H100 80GB HBM3", (9, 0), 120, 85e9),  # unknown SM count
        {},
        None,
    ],
)
def test_unknown_is_none(p):
    assert match_device(p) is None


def test_spec_by_name_unknown():
    with pytest.raises(PerfDoctorError, match="unknown GPU 'X9'"):
        spec_by_name("X9")


EXPECTED = {
    "kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz": "v100-sxm2",
    "hta__ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": "v100-sxm2",
    "hta__nccl_parser_config__nccl_data.json.gz": "a100-40gb",
    "gpupuzzlers__non_blocking_streams.json.gz": "a100-80gb-sxm",
    "switchtransformers__a100_moe_profile_memory.json.gz": "a100-80gb-pcie",
    "tracelens__h100__bert-small-uncased.json.gz": "h100-sxm",
    "hta__amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz": "mi250-gcd",
    "tracelens__mi300__ddp_resnet18.json.gz": "mi300x",
    "param__linear_kineto.json.gz": "rtx-2080-ti",
    "hta__with_gpu_user_annotation__step_based_trace.json.gz": None,  # Quadro GP100: not in the table
    "hta__cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz": None,  # no deviceProperties
}


@pytest.mark.parametrize("name,key", sorted(EXPECTED.items()))
def test_shared_traces_matched(name, key):
    from perfdoctor.analysis.work.hardware import device_for_trace
    from perfdoctor.trace import load_trace

    spec = device_for_trace(load_trace(str(shared_trace(name))).device_properties)
    assert (spec.key if spec else None) == key


def test_dlrm_ranks_are_v100():
    from perfdoctor.analysis.work.hardware import device_for_trace
    from perfdoctor.trace import load_trace

    files = sorted(shared_trace("param__dlrm_8ranks").glob("*.json.gz"))
    assert len(files) == 8
    assert {device_for_trace(load_trace(str(f)).device_properties).key for f in files} == {"v100-sxm2"}


def test_t4_datasheet_figures_and_16bit_dtype():
    t4 = spec_by_name("T4")
    # NVIDIA T4 datasheet: 65 TFLOPS FP16/FP32 mixed-precision tensor, 8.1 TFLOPS FP32, 320 GB/s, 16 GB
    assert t4.peak("fp16") == 65e12 and t4.peak("fp32") == 8.1e12 and t4.peak("bf16") is None
    assert t4.hbm_bytes_per_s == 320e9 and t4.memory_bytes == 16e9 and "T4" in t4.source_of("fp16")
    assert t4.best_16bit_dtype() == "fp16" and spec_by_name("V100").best_16bit_dtype() == "fp16"
    assert spec_by_name("H100").best_16bit_dtype() == "bf16"


def test_v100_dgxs_gets_sxm2_figures_as_a_stated_assumption():
    # the DGX Station's V100 (ResNet50 nw0/nw4 traces) is given the SXM2 datasheet column, 15.7 FP32 / 125 FP16
    # tensor TFLOPS; its system datasheet gives whole-system totals only, so the spec says the figures are assumed
    s = match_device(props("Tesla V100-DGXS-32GB", (7, 0), 80, 34084028416))
    assert s.key == "v100-sxm2" and "assumed for DGX Station (V100-DGXS)" in s.notes


def test_generic_amd_name_shows_the_identified_product_on_the_real_mi250_trace():
    """The shared MI250 trace (ROCm 6.2) names its GPUs 'AMD Radeon Graphics'. Its deviceProperties (read raw from
    the JSON here) say compute capability 9.0 and 104 compute units: gfx90a (CDNA2) with 104 CUs per device is an
    MI250 GCD or an MI210 (AMD's datasheets: 208 CUs per MI250 package of two GCDs, 104 per MI210; an MI250X GCD
    has 110). The report shows that product with the basis, not the generic name."""
    import gzip
    import json

    from perfdoctor import pipeline
    from perfdoctor.render.view import device_name

    path = shared_trace("hta__amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    raw = json.loads(gzip.decompress(path.read_bytes()))["deviceProperties"]
    assert {(p["name"], p["computeMajor"], p["computeMinor"], p["numSms"]) for p in raw} == {
        ("AMD Radeon Graphics", 9, 0, 104)
    }
    report = pipeline.build([str(path)]).model
    rank = report.ranks[0]
    want = (
        "AMD Instinct MI250 / MI210 (one GCD), gfx90a (identified from compute capability 9.0 and 104 CUs; "
        "the trace names it 'AMD Radeon Graphics')"
    )
    assert [p.identified for p in rank.device_properties] == [want] * len(raw)
    assert [p.name for p in rank.device_properties] == ["AMD Radeon Graphics"] * len(raw)  # the trace's, kept
    assert device_name(rank, rank.primary_device) == f"GPU {rank.primary_device}: {want}"


@pytest.mark.parametrize(
    "p,shown",
    [
        # 110 CUs, gfx90a from gcnArchName: an MI250X GCD
        (
            props("AMD Radeon Graphics", (9, 0), 110, 68702699520, gcnArchName="gfx90a:sramecc+:xnack-"),
            "AMD Instinct MI250X (one GCD), gfx90a (identified from compute capability 9.0 and 110 CUs; "
            "the trace names it 'AMD Radeon Graphics')",
        ),
        # no name at all, gfx942 with 304 CUs and 192 GiB (206,141,652,992 bytes ÷ 2**30 = 191.98): an MI300X
        (
            props("", (9, 4), 304, 206141652992, warpSize=64),  # a warp of 64: AMD
            "AMD Instinct MI300X, gfx942 (identified from compute capability 9.4 and 304 CUs and 192 GiB of memory; "
            "the trace names none)",
        ),
        (props("AMD Instinct MI300X", (9, 4), 304, 206141652992), None),  # a specific name stays
        (props("AMD Radeon Graphics", (9, 0), 60, 17e9), None),  # gfx90a with 60 CUs: no product known
        (props("", (8, 0), 108, 42.5e9), None),  # NVIDIA without a name: not guessed
    ],
)
def test_identified_name_by_hand(p, shown):
    from perfdoctor.analysis.work.hardware import identified_name

    assert identified_name(p) == shown
