"""A saving alone and on top of the higher-ranked fixes (perfdoctor/checks/after.py): host time hiding device work,
worked out by hand on a TraceBuilder graph (µs), and the ResNet50 FP32 V100 trace where PD203 saves little alone."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_trace
from tracebuilder import TraceBuilder

from perfdoctor.analysis.steps import find_steps
from perfdoctor.checks.after import after_savings, gate
from perfdoctor.checks.context import Outcome
from perfdoctor.findings import Estimate, Evidence, Hit
from perfdoctor.replay.rank import replay_rank
from perfdoctor.replay.simulate import Scenario
from perfdoctor.replay.transforms import WhatIf
from perfdoctor.replay.transforms.host import prefetch_dataloader
from perfdoctor.trace import load_trace

NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _hidden_kernel(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Step [0, 1000): the host launches K at 5 (call [5, 10)), K runs [10, 710) on the device; the host then
    fetches a batch, __next__ [20, 900), and runs aten::add_ [900, 990)."""
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch("volta_sgemm_128x64_nn", launch_ts=5, start=10, dur=700)
    tb.annotation(NEXT, 20, 880)
    tb.cpu_op("aten::add_", 900, 90)
    tables = load_trace(str(tb.write(tmp_path / "t.json")))
    return replay_rank(tables, find_steps(tables)), tables


def _hit(saving_us: float, min_pct: float | None = 3.0) -> Hit:
    return Hit(evidence=Evidence(), estimate=Estimate(saving_us, "replay"), min_saving_pct=min_pct)


def test_a_kernel_fix_hidden_by_host_time_saves_after_the_host_fix(tmp_path: Path) -> None:
    # A (prefetch): __next__'s 880 µs go, the host ends at 1000 - 880 = 120; K still ends at 710: 1000 -> 710
    # (saves 290). B (K 700 -> 100 µs): the host still ends at 1000: saves 0 alone. B after A: 710 -> max(120,
    # K [10, 110)) = 120: saves 590, 59% of the 1,000 µs step, over B's 3% threshold although 0% alone
    rr, tables = _hidden_kernel(tmp_path)
    assert rr.replayed_step_us.tolist() == [1000.0]
    g = rr.graph
    dur = g.act_dur_us.copy()
    dur[np.flatnonzero(g.act_table == 0)] = 100.0
    rr.whatifs["A"] = prefetch_dataloader(rr, tables)
    rr.whatifs["B"] = WhatIf("shorter", Scenario("shorter", act_dur_us=dur), "K takes 100 µs", "test")
    alone = {c: float((rr.recorded_step_us - rr.step_times(w.scenario)).mean()) for c, w in rr.whatifs.items()}
    assert alone == {"A": 290.0, "B": 0.0}
    hits = {"A": _hit(alone["A"]), "B": _hit(alone["B"])}
    assert after_savings(rr, hits, 1000.0) == ["A", "B"]
    b = hits["B"].estimate
    assert b is not None and b.after_us == 590.0 and b.after_codes == ("A",)
    assert hits["A"].estimate is not None and hits["A"].estimate.after_us is None  # ranked first: nothing above
    assert rr.fix_all(["A", "B"]) == (1000.0, 120.0)  # the joint replay: 1000 -> 120


def test_a_hit_under_its_threshold_alone_and_after_is_a_pass() -> None:
    # 20 µs of a 1,000 µs step is 2%, under 3%, with no saving after others: demoted to a pass (metrics kept);
    # 40 µs after others is 4%: it fires; a check that judged its threshold itself (None) is left alone
    low = Outcome(metrics={"x": 1}, hit=_hit(20.0))
    assert gate(low, 1000.0).hit is None and gate(low, 1000.0).metrics == {"x": 1}
    after = Outcome(hit=Hit(evidence=Evidence(), estimate=Estimate(20.0, "r", 40.0, ("A",)), min_saving_pct=3.0))
    assert gate(after, 1000.0).hit is not None
    assert gate(Outcome(hit=_hit(20.0, None)), 1000.0).hit is not None


def test_pd203_on_resnet50_fp32_is_reported_with_its_saving_after_the_host_fixes() -> None:
    """ResNet50 FP32 on a V100 (nw0): the FP32 GEMMs' fix replayed alone saves under PD203's 3% threshold (host
    time hides the device work), on top of the higher-ranked replayed fixes it saves more than 3%: reported, last
    by its saving alone, with both numbers; the findings note's joint replay includes it."""
    from perfdoctor import pipeline

    report = pipeline.build([str(shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz"))]).report
    found = {f["code"]: f for f in report["findings"]}
    f = found["PD203"]
    above = [g["code"] for g in report["findings"] if g["position"] is not None and g["position"] < f["position"]]
    denom_us = report["denominator"]["value_us"]
    m = re.search(r"saves ([\d.]+) ms now; ([\d.]+) ms \(([\d.]+)%\) once", f["message"])
    assert m is not None
    alone_ms, after_ms, after_pct = float(m[1]), float(m[2]), float(m[3])
    assert 100 * alone_ms * 1000 / denom_us < 3.0 <= after_pct  # fires on its saving after the others only
    # so that is its one number: headline, share and severity (high: ≥ 10% of the step, rules/engine.toml)
    assert f["saving_us_per_step"] == f["saving_after_us_per_step"] == pytest.approx(after_ms * 1000, abs=5.0)
    assert f["saving_pct_of_step"] == pytest.approx(100 * f["saving_us_per_step"] / denom_us, abs=1e-3)
    assert f["saving_pct_of_step"] == pytest.approx(after_pct, abs=0.05) and after_pct >= 10.0
    assert f["severity"] == "high"
    assert f["saving_after_codes"] == above  # every finding above it replays its fix on this trace
    # still ordered by its saving alone, after the fixes its number builds on
    assert f["position"] == max(g["position"] for g in report["findings"] if g["position"] is not None)
    assert "once " + ", ".join(above) + " are fixed" in f["message"]
    assert "(" + ", ".join(above + ["PD203"]) + ")" in report["findings_note"]
    # its number is taken from the step replayed with the fixes above it: the recorded step less each of their
    # savings as stated (each on top of those above it; PD205 saves nothing once PD101 and PD103 are fixed)
    base = report["denominator"]["value_us"] - sum(
        g["saving_after_us_per_step"] if g["saving_after_us_per_step"] is not None else g["saving_us_per_step"]
        for g in report["findings"]
        if g["code"] in above
    )
    assert f["saving_from_us_per_step"] == pytest.approx(base, abs=1.0)


def test_a_finding_stated_after_the_others_keeps_its_message_about_its_saving_alone() -> None:
    """A hit that fires on its saving after the higher-ranked fixes only (PD401: 0.16 ms alone, 0.99 ms once PD103
    is fixed, of a 19.9 ms step; 3% threshold): the message's "takes it from A ms to B ms (saves C ms: parts)" is
    the replay alone, A − B = C; its headline is the after-saving, taken from the step replayed with PD103's fix
    (on the DLRM job it read "from 17.98 ms to 16.98 ms (saves 0.16 ms ...)", the after-saving's B
    with the alone saving's A)."""
    from perfdoctor.checks.catalogue import load_catalogue
    from perfdoctor.checks.denominator import StepDenominator
    from perfdoctor.checks.engine import _finding

    cat = load_catalogue()
    est = Estimate(160.0, "replay", after_us=990.0, after_codes=("PD103",), from_us=17980.0, after_from_us=15330.0)
    fields = {
        "syncs": "5",
        "source": "most from aten::index",
        "host_wait_ms": 4.82,
        "sync_idle_ms": 0.06,
        "replayed_fix": "its syncs not blocking",
        "recorded_ms": 17.98,
        "saving_parts": "0.10 ms sync idle + 0.06 ms launch idle",
    }
    hit = Hit(evidence=Evidence(), estimate=est, fields=fields, min_saving_pct=3.0)
    f = _finding(cat.rules["PD401"], hit, [4], cat, StepDenominator(19900.0, "the longest rank's mean step"), 4, 8)
    assert "takes it from 17.98 ms to 17.82 ms (saves 0.16 ms: 0.10 ms sync idle + 0.06 ms launch idle)" in f.message
    assert "saves 0.16 ms now; 0.99 ms (5.0%) once PD103 is fixed" in f.message
    assert f.saving_us == 990.0 and f.rank_us == 160.0 and f.saving_pct == pytest.approx(100 * 990 / 19900)
    assert f.to_dict()["saving_from_us_per_step"] == 15330.0  # the HTML's now/fixed bars: 15.33 -> 14.34 ms


def test_thresholds_use_the_reports_denominator_on_a_job(tmp_path: Path) -> None:
    """One denominator for the % shown and the threshold (issue 10): rank 0's sync saves 300 µs of its own 1,000 µs
    step (30%), but the job steps at its longest rank's 20,000 µs: 300 / 20,000 = 1.5%, under PD401's 2%, so
    PD401 does not fire (it did when the threshold was judged on rank 0's own step)."""
    from rules_helpers import SGEMM, run_rules

    def rank(r: int, step_us: float, sync: bool) -> Path:
        tb = TraceBuilder(rank=r, world_size=2)
        tb.step(1, 0, step_us)
        tb.launch(SGEMM, launch_ts=5, start=10, dur=490)  # [10, 500)
        tb.cpu_op("aten::item", 15, 500)
        if sync:  # without it 490 µs of host go: the second kernel (200 µs) queues behind the first, [500, 700)
            tb.runtime("cudaStreamSynchronize", 20, 490)
        tb.launch(SGEMM, launch_ts=700, start=710, dur=step_us - 800)  # ends 90 µs before the step
        return tb.write(tmp_path / f"rank{r}.json")

    alone = run_rules([rank(0, 1000, True)], ["PD401"])
    assert alone.findings["PD401"]["saving_us_per_step"] == 300  # 30% of its own step: fires
    job = run_rules([rank(0, 1000, True), rank(1, 20_000, False)], ["PD401"])
    assert job.report["denominator"]["value_us"] == 20_000
    assert "PD401" not in job.findings and "PD401" in job.passed
