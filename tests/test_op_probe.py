"""PD204's measurement (issue 23 item 2): the dominant bf16 GEMMs of a trace, grouped by name and shapes, timed
again in bf16 and fp32 on this machine."""

from __future__ import annotations

from pathlib import Path

import pytest
from tracebuilder import TraceBuilder

from perfdoctor.capture.op_probe import bf16_gemm_groups, probe_bf16, time_dtypes

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


@pytest.mark.slow
def test_thread_probe_times_both_counts_in_child_processes(tmp_path: Path) -> None:
    from perfdoctor.capture.op_probe import probe_threads

    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 2000)
    tb.cpu_op("aten::mm", 0, 900, input_dims=[[64, 128], [128, 64]], input_type=["float", "float"])
    tb.cpu_op("aten::mm", 1000, 300, input_dims=[[64, 128], [128, 64]], input_type=BF16[:2])  # bf16: not timed
    probe = probe_threads(tb.write(tmp_path / "t.json"), 2, 1)
    assert probe is not None and probe["recorded_threads"] == 2 and probe["suggested_threads"] == 1
    (op,) = probe["ops"]
    assert op["name"] == "aten::mm" and op["recorded_us"] == 900.0
    assert op["at_recorded_us"] > 0 and op["at_suggested_us"] > 0
    assert probe["suggested_over_recorded"] == pytest.approx(op["at_suggested_us"] / op["at_recorded_us"])


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
