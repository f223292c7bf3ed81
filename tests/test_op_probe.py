"""PD204's measurement (issue 23 item 2): the dominant bf16 GEMMs of a trace, grouped by name and shapes, timed
again in bf16 and fp32 on this machine."""

from __future__ import annotations

from pathlib import Path

import pytest
from tracebuilder import TraceBuilder

from perfdoctor.capture.op_probe import bf16_gemm_groups, op_args, other_op_groups, probe_bf16, time_dtypes, time_ops

BF16 = ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"]


def _trace(tmp_path: Path) -> Path:
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 2000)
    # aten::linear [32, 64] x [128, 64] calls aten::addmm inside it: counted once, under linear (300 + 200 µs)
    tb.cpu_op("aten::linear", 0, 300, input_dims=[[32, 64], [128, 64], [128]], input_type=BF16)
    tb.cpu_op("aten::addmm", 10, 280, input_dims=[[128], [32, 64], [64, 128]], input_type=BF16)
    tb.cpu_op("aten::linear", 400, 200, input_dims=[[32, 64], [128, 64], [128]], input_type=BF16)
    tb.cpu_op("aten::mm", 700, 250, input_dims=[[32, 128], [128, 16]], input_type=BF16[:2])
    tb.cpu_op("aten::mm", 1000, 900, input_dims=[[32, 128], [128, 16]], input_type=["float", "float"])  # fp32
    return tb.write(tmp_path / "t.json")


def test_bf16_groups_by_name_and_shapes(tmp_path: Path) -> None:
    groups = bf16_gemm_groups(_trace(tmp_path))
    assert groups == [
        ("aten::linear", [[32, 64], [128, 64], [128]], 500.0),
        ("aten::mm", [[32, 128], [128, 16]], 250.0),
    ]


def test_probe_times_both_dtypes(tmp_path: Path) -> None:
    got = time_dtypes("aten::mm", [[32, 128], [128, 16]])
    assert got is not None and got[0] > 0 and got[1] > 0
    assert time_dtypes("aten::mm", [[32, 128], []]) is None  # one tensor: not a GEMM call to time
    probe = probe_bf16(_trace(tmp_path))
    assert probe is not None and [o["name"] for o in probe["ops"]] == ["aten::linear", "aten::mm"]
    # the ratio: each op's bf16 ÷ fp32, weighted by its recorded time (500 and 250 µs)
    r = [o["bf16_us"] / o["fp32_us"] for o in probe["ops"]]
    assert probe["bf16_over_fp32"] == pytest.approx((500 * r[0] + 250 * r[1]) / 750)


def test_op_args_rebuild_tensors_and_scalars() -> None:
    # as torch 2.13's profiler records Adam's ops (Input Dims, Input type, Concrete Inputs)
    assert op_args(b"[[512, 512], []]", b'["float", "double"]', b'["", ""]') == [
        {"tensor": [512, 512]},
        {"scalar": 0.9},  # a double the trace does not give: a neutral value
    ]
    assert op_args(b"[[4], [4], []]", b'["float", "float", "Scalar"]', b'["", "", "-0.001"]') == [
        {"tensor": [4]},
        {"tensor": [4]},
        {"scalar": -0.001},
    ]
    assert op_args(b"[[], []]", b'["float", "long int"]', b'["", ""]') == [{"tensor": []}, {"scalar": 1}]
    assert op_args(b"[[8]]", b'["long int"]', None) is None  # an integer tensor: not rebuilt
    assert op_args(b"[[], []]", b'["TensorList", "Scalar"]', None) is None  # a list: not rebuilt
    assert op_args(b"[[]]", b'["double"]', None) is None  # no tensor: nothing to time
    assert op_args(None, None, None) is None


def test_other_op_groups_are_top_level_non_gemm_ops(tmp_path: Path) -> None:
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 2000)
    tb.cpu_op("aten::mm", 0, 300, input_dims=[[8, 8], [8, 8]], input_type=["float", "float"])  # a GEMM
    # aten::sqrt calls aten::empty inside it: counted once, under sqrt (100 + 60 µs)
    tb.cpu_op("aten::sqrt", 400, 100, input_dims=[[64, 64]], input_type=["float"])
    tb.cpu_op("aten::empty", 410, 5, input_dims=[[]], input_type=[""])
    tb.cpu_op("aten::sqrt", 600, 60, input_dims=[[64, 64]], input_type=["float"])
    tb.cpu_op("aten::mul_", 700, 250, input_dims=[[64, 64], []], input_type=["float", "double"])
    tb.cpu_op("aten::index", 1000, 500, input_dims=[[64], [8]], input_type=["float", "TensorList"])  # not rebuilt
    assert other_op_groups(tb.write(tmp_path / "t.json")) == [
        ("aten::mul_", [{"tensor": [64, 64]}, {"scalar": 0.9}], 250.0),
        ("aten::sqrt", [{"tensor": [64, 64]}], 160.0),
    ]


def test_time_ops_runs_rebuilt_calls() -> None:
    sqrt, mul, mm, bad = time_ops(
        [
            ("aten::sqrt", [{"tensor": [64, 64]}]),
            ("aten::mul_", [{"tensor": [64, 64]}, {"scalar": 0.9}]),
            ("aten::mm", [[8, 16], [16, 8]]),
            ("aten::mm", [{"tensor": [8, 16]}, {"tensor": [3, 8]}]),  # the shapes do not multiply
        ],
        seconds=0.01,
    )
    assert sqrt > 0 and mul > 0 and mm > 0 and bad != bad  # NaN


@pytest.mark.slow
def test_thread_probe_times_both_counts_in_child_processes(tmp_path: Path) -> None:
    from perfdoctor.capture.op_probe import probe_threads

    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 2000)
    tb.cpu_op("aten::mm", 0, 900, input_dims=[[64, 128], [128, 64]], input_type=["float", "float"])
    tb.cpu_op("aten::mm", 1000, 300, input_dims=[[64, 128], [128, 64]], input_type=BF16[:2])  # bf16: not timed
    tb.cpu_op("aten::add_", 1400, 300, input_dims=[[64, 128], [64, 128], []], input_type=["float", "float", "Scalar"])
    probe = probe_threads(tb.write(tmp_path / "t.json"), 2, 1)
    assert probe is not None and probe["recorded_threads"] == 2 and probe["suggested_threads"] == 1
    mm, add = probe["ops"]
    assert (mm["name"], mm["kind"], mm["recorded_us"]) == ("aten::mm", "gemm", 900.0)
    assert (add["name"], add["kind"], add["recorded_us"]) == ("aten::add_", "other", 300.0)
    assert all(o["at_recorded_us"] > 0 and o["at_suggested_us"] > 0 for o in (mm, add))
    r_mm, r_add = (o["at_suggested_us"] / o["at_recorded_us"] for o in (mm, add))
    assert probe["kinds"]["gemm"] == {"suggested_over_recorded": pytest.approx(r_mm), "recorded_us": 900.0}
    assert probe["kinds"]["other"] == {"suggested_over_recorded": pytest.approx(r_add), "recorded_us": 300.0}
    assert probe["suggested_over_recorded"] == pytest.approx((900 * r_mm + 300 * r_add) / 1200)


def test_grown_shapes_scale_the_batch_dimension_only() -> None:
    from perfdoctor.capture.op_probe import grown_shapes

    # a forward linear [8, 1024] x [1024, 1024]: the 8 rows grow; a weight-gradient mm [1024, 8] x [8, 1024]: the
    # inner 8 grows; a weight-only op has no batch dimension
    assert grown_shapes([[8, 1024], [1024, 1024], [1024]], 8, 4) == [[32, 1024], [1024, 1024], [1024]]
    assert grown_shapes([[1024, 8], [8, 1024]], 8, 2) == [[1024, 16], [16, 1024]]
    assert grown_shapes([[1024, 1024], [1024, 1024]], 8, 2) is None


def test_batch_probe_times_the_gemms_at_larger_batches(tmp_path: Path) -> None:
    from perfdoctor.capture.op_probe import BATCH_GROWTHS, probe_batch

    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 2000)
    tb.cpu_op("aten::mm", 0, 600, input_dims=[[8, 256], [256, 256]], input_type=["float", "float"])
    tb.cpu_op("aten::mm", 700, 300, input_dims=[[256, 8], [8, 256]], input_type=["float", "float"])
    tb.cpu_op("aten::mm", 1100, 500, input_dims=[[256, 256], [256, 256]], input_type=["float", "float"])  # no batch
    probe = probe_batch(tb.write(tmp_path / "t.json"), 8)
    assert probe is not None and probe["rows"] == 8
    ops = probe["ops"]
    assert [o["shapes"] for o in ops] == [[[8, 256], [256, 256]], [[256, 8], [8, 256]]]
    # per growth: Σ recorded × (time at g ÷ g ÷ time now) ÷ Σ recorded (600 and 300 µs)
    for g in BATCH_GROWTHS:
        r = [o["grown_us"][str(g)] / g / o["at_recorded_us"] for o in ops]
        assert probe["per_sample"][str(g)] == pytest.approx((600 * r[0] + 300 * r[1]) / 900)
    assert probe_batch(tb.write(tmp_path / "t.json"), 5) is None  # no shape holds a 5-row batch


def test_batch_probe_bound_is_pd201s_small_batch() -> None:
    import tomllib

    from perfdoctor.capture.op_probe import BATCH_PROBE_MAX_ROWS

    rules = Path(__file__).resolve().parents[1] / "rules" / "PD201.toml"
    assert tomllib.loads(rules.read_text())["thresholds"]["max_m"] == BATCH_PROBE_MAX_ROWS
