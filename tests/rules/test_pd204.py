"""PD204 cpu-bf16-autocast: a firing and a silent case on real CPU training runs of examples/mlp.py.

Moved from tests/test_rules_examples.py (issue 9: one test file per rule); the runs are shared through
tests/examples_runs.py.
"""

import json

from examples_runs import NO_BF16_UNITS, SMALL, example, faster, profile, quiet_machine, runs_root  # noqa: F401


@example
def test_pd204_fires_on_bf16_autocast_without_bf16_units():
    slow = profile("bf16_capped", [*SMALL, "--bf16-autocast"], env=NO_BF16_UNITS)
    fixed = profile("fp32_capped", SMALL, env=NO_BF16_UNITS)
    assert "PD204" in slow[0] and "PD204" not in fixed[0]
    message = slow[0]["PD204"]["message"]
    # the op probe measured the bf16 GEMMs against fp32 on this machine (capped below its bf16 units), or, without a
    # measurement, the CPU's flags say it has none
    assert (
        "ONEDNN_MAX_CPU_ISA=AVX512_CORE" in message
        or "no bf16 matrix instructions" in message
        or "their fp32 time on the recorded shapes" in message
    )
    # emulated bf16 GEMMs: how much slower depends on the CPU: 2.2-2.4x the fp32 step on the AMX Xeon of the
    # development machines capped at AVX512_CORE (12.6 vs 5.9 ms), only 1.09x on a CI runner (8.43 vs 7.70 ms);
    # the step-to-step noise of these medians is ~2%, so 5% still tells a slower bf16 step from noise
    faster(slow, fixed, "PD204 bf16 autocast, no bf16 units", min_gain=0.05)


@example
def test_pd204_silent_where_bf16_runs_natively():
    native = profile("bf16", [*SMALL, "--bf16-autocast"])
    run = json.loads((runs_root() / "bf16" / "run.json").read_text())
    # on a CPU with AMX-BF16 / AVX512-BF16, bf16 autocast was 3% faster on one day and 3% slower on
    # another: no run-time evidence that it costs more, so no finding (a wrong finding is worse than none)
    assert ("PD204" in native[0]) == (not run["cpu"]["bf16_matrix_units"])


def _bf16_run(tmp_path, probe):
    """A run directory: one 1000 µs CPU step with a 400 µs bf16 addmm and a 100 µs cast, on a CPU without bf16
    units; ``probe``: run.json's op_probe of rank 0 (None: not measured)."""
    from rules_helpers import run_rules
    from tracebuilder import TraceBuilder

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 1000)
    bf16 = ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]
    tb.cpu_op("aten::addmm", 100, 400, input_dims=[[512], [64, 256], [256, 512], [], []], input_type=bf16)
    tb.cpu_op("aten::to", 600, 100)
    tb.write(run_dir / "trace.rank0.pt.trace.json")
    cpu = {"model": "Test CPU", "flags": ["avx2"], "logical_cpus": 2, "bf16_matrix_units": False}
    run = {"status": "complete", "cpu": cpu, "ranks": [{"rank": 0, "op_probe": probe}]}
    (run_dir / "run.json").write_text(json.dumps(run))
    return run_rules([run_dir], ["PD204"])


def _probe(ratio):
    op = {"name": "aten::addmm", "shapes": [[512], [64, 256], [256, 512]], "recorded_us": 400.0}
    return {"ops": [{**op, "bf16_us": 200.0 * ratio, "fp32_us": 200.0}], "bf16_over_fp32": ratio, "threads": 1}


def test_pd204_fires_with_the_measured_ratio(tmp_path):
    # bf16 GEMMs measured at 2× their fp32 time, replayed: the cast [600, 700) goes and the addmm [100, 500) keeps
    # half its time: 100 + 200 = 300 µs per step
    f = _bf16_run(tmp_path, _probe(2.0)).findings["PD204"]
    assert f["saving_us_per_step"] == 300
    assert f["saving_method"].startswith("replay of the step's dependency graph")
    assert "measured at 2.00× their fp32 time" in f["message"]
    assert "bf16 400 µs, fp32 200 µs" in f["saving_method"]


def test_pd204_silent_where_the_measurement_shows_bf16_faster(tmp_path):
    # measured at 0.5×: 100 + 400 × (1 − 2) = −300 µs: fp32 would be slower, no finding
    assert "PD204" not in _bf16_run(tmp_path, _probe(0.5)).findings


def test_pd204_without_a_measurement_says_it_is_from_the_spec(tmp_path):
    # emulated_slowdown 1.0 (rules/PD204.toml): the casts alone, 100 µs, and the method says what would confirm it
    f = _bf16_run(tmp_path, None).findings["PD204"]
    assert f["saving_us_per_step"] == 100
    assert "an estimate from the spec, not measured" in f["saving_method"]
