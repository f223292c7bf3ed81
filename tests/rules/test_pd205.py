"""PD205 unfused-optimizer: a firing and a silent case (and skips), answers worked out by hand (µs).

Moved from tests/test_rules_synthetic.py (issue 9: one test file per rule).
"""

import pytest
from rules_helpers import ADD, SGEMM, run_tb
from tracebuilder import TraceBuilder


def _optimizer_trace(kernels, cls="SGD"):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=5, start=10, dur=200)  # [10, 210)
    tb.annotation(f"Optimizer.step#{cls}.step", 300, 600)  # [300, 900)
    for i, name in enumerate(kernels):
        t = 305 + 9 * i
        tb.launch(name, launch_ts=t, start=t + 2, dur=1, launch_dur=5)
    return tb


def test_pd205_fires_on_per_parameter_kernels(tmp_path):
    r = run_tb(_optimizer_trace([ADD] * 60), tmp_path, ["PD205"])
    f = r.findings["PD205"]
    # replayed with a fused step: Optimizer.step [300, 900) keeps 10 launches × 5 µs, [350, 900) goes; its
    # kernels (1 µs each) end before the annotation, which now ends at 450: 1000 -> 450
    assert f["saving_us_per_step"] == 550
    assert f["evidence"]["optimizer_kernels_per_step"] == 60


def test_pd205_advice_names_the_optimizer_in_the_trace(tmp_path):
    f = run_tb(_optimizer_trace([ADD] * 60), tmp_path, ["PD205"]).findings["PD205"]
    assert f["message"].startswith("SGD.step launches 60 small kernels")
    assert f["message"].endswith("use torch.optim.SGD(..., foreach=True) or fused=True")
    assert f["evidence"]["optimizer"] == "SGD"
    assert "torch.optim.SGD(params, ..., foreach=True)" in f["fix"] and "AdamW" not in f["fix"]
    assert f["example_after"] == "opt = torch.optim.SGD(model.parameters(), lr=1e-3, fused=True)\n"


@pytest.mark.parametrize("cls, after", [("RMSprop", "foreach=True"), ("AdamW", "fused=True")])
def test_pd205_offers_fused_only_where_the_class_has_it(tmp_path, cls, after):
    import inspect

    torch = pytest.importorskip("torch")
    f = run_tb(_optimizer_trace([ADD] * 60, cls), tmp_path, ["PD205"]).findings["PD205"]
    assert f["example_after"].endswith(f"lr=1e-3, {after})\n") and f"torch.optim.{cls}(" in f["fix"]
    has_fused = "fused" in inspect.signature(getattr(torch.optim, cls)).parameters
    assert ("fused=True" in f["message"]) is has_fused


def test_pd205_silent_with_foreach_kernel(tmp_path):
    name = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<4> >(int)"
    r = run_tb(_optimizer_trace([name]), tmp_path, ["PD205"])
    assert "PD205" in r.passed and r.metrics("PD205")["multi_tensor_share"] == 1.0
