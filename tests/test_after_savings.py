"""The fix plan (perfdoctor/checks/after.py): each fix's saving on top of the fixes above it, chosen greedily; host
time hiding device work, worked out by hand on a TraceBuilder graph (µs), and the ResNet50 FP32 V100 trace where
PD203 saves little alone and much once the host-side fixes are in."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_trace
from tracebuilder import TraceBuilder

from perfdoctor.analysis.steps.steps import find_steps
from perfdoctor.checks.after import gate, plan
from perfdoctor.checks.context import Outcome
from perfdoctor.findings import Basis, Estimate, Evidence, Hit
from perfdoctor.replay.rank import replay_rank
from perfdoctor.replay.simulate import Scenario
from perfdoctor.replay.transforms import WhatIf
from perfdoctor.replay.transforms.host import prefetch_dataloader
from perfdoctor.text import Where
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
    assert plan(rr, hits, 1000.0) == ["A", "B"]
    a, b = hits["A"].estimate, hits["B"].estimate
    assert a is not None and (a.plan_position, a.after_us, a.after_codes, a.step_after_us) == (1, 290.0, (), 710.0)
    assert b is not None and (b.plan_position, b.after_us, b.after_codes) == (2, 590.0, ("A",))
    assert b.basis.after_from_us == 710.0 and b.step_after_us == 120.0
    assert rr.fix_all(["A", "B"]) == (1000.0, 120.0)  # the joint replay: 1000 -> 120, the last entry's step


def test_the_plan_is_greedy_on_marginal_savings_and_drops_a_fix_that_saves_nothing_after_the_others(
    tmp_path: Path,
) -> None:
    # A and C both remove __next__'s 880 µs (C the same prefetch, a second finding): alone each saves 290 µs, the
    # most; after A, C saves 0 and B (K 700 -> 100 µs) saves 590. Ordered by saving alone the list read A, C, B,
    # with C saving nothing once A is in; the plan is A (290), B (590 on top of A) and C off the plan (0 on top of
    # A and B, 290 alone), its fix-all the plan's last step (120 µs)
    rr, tables = _hidden_kernel(tmp_path)
    g = rr.graph
    dur = g.act_dur_us.copy()
    dur[np.flatnonzero(g.act_table == 0)] = 100.0
    rr.whatifs["A"] = prefetch_dataloader(rr, tables)
    rr.whatifs["C"] = prefetch_dataloader(rr, tables)
    rr.whatifs["B"] = WhatIf("shorter", Scenario("shorter", act_dur_us=dur), "K takes 100 µs", "test")
    hits = {"A": _hit(290.0), "B": _hit(0.0), "C": _hit(290.0)}
    assert plan(rr, hits, 1000.0) == ["A", "B"]
    c = hits["C"].estimate
    assert c is not None and c.plan_position is None and c.after_us == 0.0 and c.after_codes == ("A", "B")
    assert gate(Outcome(hit=hits["C"]), 1000.0).hit is not None  # 29% alone: a finding, off the plan
    # a fix measured on top of another's (builds_on) waits for it: B first when it builds on C, which A outranks
    hits = {"A": _hit(290.0), "B": Hit(Evidence(), Estimate(590.0, "replay"), min_saving_pct=3.0, builds_on=("A",))}
    assert plan(rr, hits, 1000.0) == ["A", "B"]


def test_a_hit_under_its_threshold_alone_and_after_is_a_pass() -> None:
    # 20 µs of a 1,000 µs step is 2%, under 3%, with no saving after others: demoted to a pass (metrics kept);
    # 40 µs after others is 4%: it fires; a check that judged its threshold itself (None) is left alone
    low = Outcome(metrics={"x": 1}, hit=_hit(20.0))
    assert gate(low, 1000.0).hit is None and gate(low, 1000.0).metrics == {"x": 1}
    after = Outcome(hit=Hit(evidence=Evidence(), estimate=Estimate(20.0, "r", 40.0, ("A",)), min_saving_pct=3.0))
    assert gate(after, 1000.0).hit is not None
    assert gate(Outcome(hit=_hit(20.0, None)), 1000.0).hit is not None


def test_the_plan_on_resnet50_fp32_nw0() -> None:
    """ResNet50 FP32 on a V100 (nw0): PD101 (the most alone), then the largest marginal saving each time: PD103 (on
    PD101's prefetch), PD203 (under its 3% threshold alone, over 10% once the host-side fixes are in); PD205 (8.9%
    alone) saves nothing once those are in and is listed off the plan. Each entry's step after is the step before
    less its saving; the last equals the fix-all replay of the findings note."""
    from perfdoctor import pipeline

    report = pipeline.build([str(shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz"))]).report
    found = {f["code"]: f for f in report["findings"]}
    denom_us = report["denominator"]["value_us"]
    assert [e["code"] for e in report["plan"]] == ["PD101", "PD103", "PD203"]
    assert [f["code"] for f in report["findings"]][:4] == ["PD101", "PD103", "PD203", "PD205"]
    step = denom_us
    for i, e in enumerate(report["plan"], 1):
        f = found[e["code"]]
        assert f["plan_position"] == f["position"] == i
        assert f["saving_us_per_step"] == e["saving_us_per_step"] == f["saving_after_us_per_step"]
        assert f["step_after_us"] == e["step_after_us"] == pytest.approx(step - f["saving_us_per_step"], abs=0.01)
        assert f["saving_pct_of_step"] == pytest.approx(100 * f["saving_us_per_step"] / denom_us, abs=1e-3)
        step = f["step_after_us"]
    m = re.search(r"from ([\d.]+) ms to ([\d.]+) ms \(replayed\)", report["findings_note"])
    assert m is not None and float(m[1]) * 1000 == pytest.approx(denom_us, abs=5)
    assert step == pytest.approx(float(m[2]) * 1000, abs=5.0)  # the note's 2 decimals (85.56 ms)
    assert step / 1000 == pytest.approx(85.56, abs=0.01)
    pd203 = found["PD203"]
    assert 100 * pd203["saving_alone_us_per_step"] / denom_us < 3.0 <= pd203["saving_pct_of_step"]
    assert pd203["severity"] == "high" and pd203["saving_after_codes"] == ["PD101", "PD103"]
    pd205 = found["PD205"]
    assert pd205["plan_position"] is None and pd205["severity"] == "low"
    assert pd205["plan_note"] == "no further saving once PD101, PD103, PD203 are fixed"
    assert pd205["saving_us_per_step"] < 5.0 and pd205["saving_alone_us_per_step"] > 0.05 * denom_us


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
    est = Estimate(
        160.0,
        "replay",
        after_us=990.0,
        after_codes=("PD103",),
        basis=Basis(from_us=17980.0, after_from_us=15330.0),
        step_after_us=14340.0,
        plan_position=2,
    )
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
    where = Where(rank=4, fired=[4], n_ranks=8)
    f = _finding(cat.rules["PD401"], hit, cat, StepDenominator(19900.0, "the longest rank's mean step"), where)
    assert "takes it from 17.98 ms to 17.82 ms (saves 0.16 ms: 0.10 ms sync idle + 0.06 ms launch idle)" in f.message
    assert "saves 0.16 ms alone; 0.99 ms (5.0%) once PD103 is fixed" in f.message
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


def test_a_fix_built_on_another_states_its_saving_alone_as_the_report_without_that_fix() -> None:
    """ResNet50 FP32 V100 nw0: PD103's CUDA graphs are replayed on top of PD101's prefetched batches. Its message said
    "saves 16.25 ms alone; 16.25 ms (9.2%) once PD101 is fixed": the saving on top of PD101 twice, the first one
    labelled "alone". Its saving alone is what the report gives it when PD101 is not in the report at all
    (``--ignore PD101``: the plan's first row), here 63.8 ms, and the message now says that."""
    import json

    from reporting import cli

    trace = str(shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz"))
    rc, out, err = cli("report", trace, "--format", "json")
    assert rc == 0, err
    (pd103,) = [f for f in json.loads(out)["findings"] if f["code"] == "PD103"]
    rc, out, err = cli("report", trace, "--format", "json", "--ignore", "PD101")
    assert rc == 0, err
    without = json.loads(out)
    assert without["plan"][0]["code"] == "PD103"
    alone_ms = without["plan"][0]["saving_us_per_step"] / 1000
    on_top_ms = pd103["saving_us_per_step"] / 1000
    assert alone_ms > 3 * on_top_ms  # graphs alone also hide the DataLoader fetch behind device work
    m = re.search(r"saves ([\d.,]+) ms alone; ([\d.,]+) ms \(([\d.]+)%\) once PD101 is fixed", pd103["message"])
    assert m is not None, pd103["message"]
    assert float(m.group(1)) == pytest.approx(alone_ms, abs=0.006)
    assert float(m.group(2)) == pytest.approx(on_top_ms, abs=0.006)
