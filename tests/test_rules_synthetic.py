"""Rule behaviour across rules: a GPU trace without its device side is not CPU-only training (µs, by hand)."""

from rules_helpers import run_rules
from tracebuilder import TraceBuilder


def test_gpu_trace_without_its_device_side_is_not_cpu_training(tmp_path):
    tb = TraceBuilder()  # lists an A100
    tb.step(1, 0, 1000)
    for i in range(40):  # many small host ops, each launching a kernel the trace never recorded
        tb.cpu_op("aten::add", 10 + 20 * i, 15)
        tb.runtime("cudaLaunchKernel", 12 + 20 * i, 5)
    path = tb.write(tmp_path / "nodev.json")
    r = run_rules([path], ["PD105", "PD202", "PD204"])
    assert not r.findings
    assert r.skipped["PD202"].startswith("the trace lists GPUs or holds CUDA/HIP launch calls but no GPU activity")
    assert "not CPU-only training" in r.skipped["PD105"] and "not CPU-only training" in r.skipped["PD204"]
    from perfdoctor import pipeline
    from perfdoctor.render import view

    report = pipeline.build([str(path)]).model
    facts = {label: value for label, value, _ in view.summary_facts(report)}
    assert facts["devices"].startswith("no GPU activity recorded, although the trace lists NVIDIA A100-SXM4-80GB")
    assert "host ops only" in view.device_name(report.ranks[0], -1)
