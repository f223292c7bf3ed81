"""The one-line verdict (issue 11 "also seen"), from the top finding or the breakdown."""

from rules_helpers import DL, SGEMM
from tracebuilder import TraceBuilder

from perfdoctor import pipeline


def _report(tb, tmp_path):
    return pipeline.build_report([str(tb.write(tmp_path / "t.json"))])


def test_verdict_names_the_top_finding(tmp_path):
    tb = TraceBuilder()
    for n in range(3):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        tb.annotation(DL, s, 500)  # half of each step fetching the batch
        tb.launch(SGEMM, launch_ts=s + 510, start=s + 520, dur=470)
    rep = _report(tb, tmp_path)
    top = next(f for f in rep.findings if f.position == 1)
    assert top.code == "PD101"
    assert top.replayed  # a replayed point estimate: "about", not "up to" (F16)
    assert rep.verdict == (
        f"input-bound: about {top.saving_pct_of_step:.0f}% of each step goes to waiting for the "
        "DataLoader (PD101 dataloader-starvation)"
    )


def test_verdict_from_the_breakdown_when_no_finding_matters(tmp_path):
    tb = TraceBuilder()
    for n in range(3):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        tb.launch("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32", launch_ts=s + 1, start=s + 2, dur=995)
    rep = _report(tb, tmp_path)
    assert rep.verdict.startswith("busy: the device works 100% of each step (largest: matmul")


def test_no_verdict_on_a_gpu_trace_without_device_activity(tmp_path):
    tb = TraceBuilder()  # deviceProperties name an A100
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::mm", 10, 500)
    rep = _report(tb, tmp_path)
    assert rep.verdict.startswith("no verdict: the trace names GPUs but holds no GPU activity")
