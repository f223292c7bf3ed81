"""A profile run's savings for its unprofiled step (issue 10 item 5): the profiler's per-event overhead estimated
from the run and removed in the replay, or the scaled fallback; every number worked out by hand (µs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tracebuilder import TraceBuilder

from perfdoctor.analysis.steps.steps import find_steps
from perfdoctor.replay.rank import RankReplay, replay_rank
from perfdoctor.replay.transforms.cpu import trim_python_outside_ops
from perfdoctor.replay.unprofiled import PageFaults, op_excess, overhead_cut, page_faults, unprofiled
from perfdoctor.trace import load_trace
from perfdoctor.trace.tables import TraceTables

DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _two_steps(tmp_path: Path) -> tuple[RankReplay, TraceTables]:
    """Two recorded 1000 µs steps. Step 1: ProfilerStep#1 and a DataLoader fetch at 0, ops at 150 (inside the fetch),
    200, 410, 610, then 300 µs of Python [700, 1000): 6 recorded host events. Step 2: ProfilerStep#2 and an op at
    1000, an op at 1410: 3 events."""
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 1000)
    tb.annotation(DL, 0, 200)
    tb.cpu_op("aten::stack", 150, 40)
    tb.cpu_op("aten::addmm", 200, 200)
    tb.cpu_op("aten::relu", 410, 190)
    tb.cpu_op("aten::mm", 610, 90)
    tb.step(2, 1000, 1000)
    tb.cpu_op("aten::addmm", 1000, 400)
    tb.cpu_op("aten::add", 1410, 580)
    tables = load_trace(str(tb.write(tmp_path / "t.json")))
    return replay_rank(tables, find_steps(tables)), tables


def test_overhead_cut_packs_events_closer_than_the_overhead() -> None:
    # 2 µs per event at 0, 1 and 10: the second event's cut starts where the first's ends → [0, 4) and [10, 12)
    s, e = overhead_cut(np.array([0.0, 1.0, 10.0]), 2.0)
    assert s.tolist() == [0.0, 10.0] and e.tolist() == [4.0, 12.0]
    assert overhead_cut(np.array([5.0]), 0.0)[0].size == 0


def test_overhead_removed_gives_the_unprofiled_step(tmp_path: Path) -> None:
    rr, t = _two_steps(tmp_path)
    # W = 1000 µs; S = 910 µs; 9 events over 2 steps = 4.5 per step → o = (1000 − 910) / 4.5 = 20 µs per event
    u = unprofiled(rr, t, 910.0)
    assert u is not None and u.method == "overhead"
    assert u.window_step_us == pytest.approx(1000.0)
    assert u.events_per_step == pytest.approx(4.5)
    assert u.per_event_us == pytest.approx(20.0)
    rr.unprofiled = u
    # step 1 loses 6 × 20 = 120 µs → 880; step 2 loses 3 × 20 = 60 → 940; mean 910 = S
    assert rr.fixed_step_times([]) == pytest.approx([880.0, 940.0])
    assert rr.base_step_us == pytest.approx(910.0)
    assert "20.00 µs per recorded host event" in u.text(rr.base_step_us)


def test_the_inflation_is_stated_per_category(tmp_path: Path) -> None:
    rr, t = _two_steps(tmp_path)
    u = unprofiled(rr, t, 910.0)
    assert u is not None
    # host op time: step 1 40 + 200 + 190 + 90, step 2 400 + 580 → 1500 / 2 = 750 µs per step. The 20 µs cuts
    # (events at 0, 0, 150, 200, 410, 610, 1000, 1000, 1410): [0, 40) lies in no op; [150, 170), [200, 220),
    # [410, 430), [610, 630), [1410, 1430) 20 each and [1000, 1040) 40 lie in ops → 140 / 2 = 70 µs per step cut
    assert u.host_op_window_us == pytest.approx(750.0)
    assert u.host_op_unprofiled_us == pytest.approx(680.0)
    assert u.host_op_inflation == pytest.approx(750.0 / 680.0)
    assert u.step_inflation == pytest.approx(1000.0 / 910.0)
    text = u.text(910.0)
    assert "inflated the step 1.10× (1.00 ms profiled vs 0.91 ms unprofiled)" in text
    assert "host op time 1.10× (0.75 → 0.68 ms per step), device kernels 1.00× (not inflated)" in text
    rr.unprofiled = u
    d = rr.unprofiled_dict()
    assert d is not None and d["host_op_window_us"] == pytest.approx(750.0)
    scaled = unprofiled(rr, t, 1100.0)
    assert scaled is not None and scaled.host_op_inflation == 1.0 and "no inflation by the profiler" in scaled.text(1.0)


def test_a_saving_without_an_unprofiled_step_says_it_is_for_the_profiled_step() -> None:
    from perfdoctor.checks.context import profiled_step_text

    assert profiled_step_text(None).startswith("for the profiled step (a bare trace")
    assert "reach no steady level" in profiled_step_text({"cpu": {}})


def test_python_time_keeps_its_length_on_the_unprofiled_step(tmp_path: Path) -> None:
    rr, t = _two_steps(tmp_path)
    rr.unprofiled = unprofiled(rr, t, 910.0)
    w = trim_python_outside_ops(rr, t)
    # the 300 µs of Python [700, 1000) shrinks to the 10 µs median gap: the profiler does not inflate Python, so
    # the unprofiled step saves the same 290 µs (880 → 590); step 2 has no long gap. Scaling the window's saving by
    # S / W would have said 145 × 0.91 = 131.95 µs
    per = rr.fixed_step_times([]) - rr.fixed_step_times([w])
    assert per == pytest.approx([290.0, 0.0])
    assert rr.fix_all([]) is None
    rr.whatifs["PD105"] = w
    assert rr.fix_all(["PD105"]) == pytest.approx((910.0, 910.0 - 145.0))


def test_scaled_when_the_window_is_not_slower(tmp_path: Path) -> None:
    rr, t = _two_steps(tmp_path)
    # S = 1100 µs > W = 1000: no overhead to estimate; every replayed step × 1.1 (stated)
    u = unprofiled(rr, t, 1100.0)
    assert u is not None and u.method == "scaled" and u.per_event_us == 0.0 and u.whatif is None
    rr.unprofiled = u
    assert rr.base_step_us == pytest.approx(1100.0)
    w = trim_python_outside_ops(rr, t)
    assert rr.fixed_step_times([]) - rr.fixed_step_times([w]) == pytest.approx([319.0, 0.0])  # 290 × 1.1
    assert "could not be estimated" in u.text(rr.base_step_us)
    assert unprofiled(rr, t, 0.0) is None


def test_a_window_saving_is_restated_as_the_same_share_of_the_unprofiled_step() -> None:
    from perfdoctor.checks.restate import restated
    from perfdoctor.findings import Basis, Estimate

    # 8.86 ms of an 83.06 ms window (10.67%) is 10.67% of a 62.82 ms unprofiled step: 8.86 × 62.82 / 83.06 ms;
    # the steps it is taken from scale alike: the 83.06 ms window itself becomes the 62.82 ms step
    basis = Basis(from_us=83060.0, after_from_us=79060.0, step_us=83060.0, step_words="the profiled window")
    est = Estimate(8860.0, "heuristic", after_us=4000.0, basis=basis)
    out = restated(est, 62820.0, "the unprofiled step")
    assert out.saving_us == pytest.approx(8860.0 * 62820.0 / 83060.0)
    assert out.after_us == pytest.approx(4000.0 * 62820.0 / 83060.0)
    assert out.basis.from_us == pytest.approx(62820.0)
    assert out.basis.after_from_us == pytest.approx(79060.0 * 62820.0 / 83060.0)
    assert out.basis.step_us is None and "same share (10.7%) of the unprofiled step (62.82 ms)" in out.method
    assert restated(Estimate(5.0, "m"), 100.0, "x") == Estimate(5.0, "m")  # measured on the report's step: kept


def test_overhead_cut_with_a_cost_per_event() -> None:
    # 2 µs at 0, 30 µs at 1, 5 µs at 10: [0, 2), then from 2 (the first cut's end) to 32, then from 32 to 37 → one
    # merged interval [0, 37); an event with no cost (0 at 50) cuts nothing
    s, e = overhead_cut(np.array([0.0, 1.0, 10.0, 50.0]), np.array([2.0, 30.0, 5.0, 0.0]))
    assert s.tolist() == [0.0] and e.tolist() == [37.0]


def _series(faults: list[float | None], phases: list[str], start: int = 0) -> dict[str, object]:
    return {"minor_faults": faults, "profiler_phase": phases, "steady_start_step": start}


def _run_json(us_per_fault: float | None) -> dict[str, object]:
    probe = None if us_per_fault is None else {"us_per_fault": us_per_fault, "faults": 16384}
    return {"ranks": [{"rank": 0, "fault_probe": probe}]}


def test_page_faults_are_the_windows_extra_over_the_steps_before_it() -> None:
    # active steps 1000, 3000 → mean 2000; the five unprofiled steps before the window: 9000, 7, 0, 100, 50 (median
    # 50) → 1950 extra per profiled step
    series = _series([9000, 7, 0, 100, 50, 1000, 3000], ["none", "none", "none", "none", "none", "active", "active"], 2)
    f = page_faults(series, _run_json(2.5), 0)
    assert f is not None and f.extra_per_step == pytest.approx(1950.0) and f.us_per_fault == 2.5
    # each profiled step's own extra, by the row's index where steps.csv's step column is not handed over, else by
    # the step number (1000 − 50, 3000 − 50)
    assert dict(f.by_step) == {5: pytest.approx(950.0), 6: pytest.approx(2950.0)}
    numbered = {**series, "step": [10, 11, 12, 13, 14, 15, 16]}
    g = page_faults(numbered, _run_json(2.5), 0)
    assert g is not None and dict(g.by_step) == {15: pytest.approx(950.0), 16: pytest.approx(2950.0)}
    assert page_faults(series, _run_json(None), 0) is None  # no probe
    assert page_faults(series, _run_json(2.5), 1) is None  # no entry for rank 1
    assert page_faults(_series([None] * 7, series["profiler_phase"]), _run_json(2.5), 0) is None  # not counted
    fewer = _series([500, 500, 100, 100], ["none", "none", "active", "active"])
    assert page_faults(fewer, _run_json(2.5), 0) is None  # the window took no more
    # warm-up steps (the profiler on, not recording) are the baseline where there are three: 3,500 faults a step
    # there and in the window, none after it (the allocator's state changed after the window): no extra
    state = _series(
        [3500, 3500, 3500, 3500, 3500, 3500, 3500, 0, 0, 0, 0],
        ["none", "none", "warmup", "warmup", "warmup", "active", "active", "none", "none", "none", "none"],
        7,
    )
    assert page_faults(state, _run_json(2.5), 0) is None


def _same_ops_twice(tmp_path: Path) -> tuple[RankReplay, TraceTables, np.ndarray]:
    """Two 1000 µs steps of the same ops: step 1 aten::mul [100, 400) and aten::add [500, 700) on [1024, 256]
    inputs, step 2 the same ops in 100 and 150 µs (at 1100 and 1500), and a mul on other shapes in step 1 only
    (seen once: no excess). Excess over the fastest of the same op and shapes: step 1's mul 200, add 50; step 2
    none. 7 host events (the markers and the ops), 3.5 a step."""
    tb = TraceBuilder(device_name=None)
    big, other = [[1024, 256], [1024, 256]], [[8, 8], [8, 8]]
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::mul", 100, 300, input_dims=big)
    tb.cpu_op("aten::add", 500, 200, input_dims=big)
    tb.cpu_op("aten::mul", 800, 100, input_dims=other)
    tb.step(2, 1000, 1000)
    tb.cpu_op("aten::mul", 1100, 100, input_dims=big)
    tb.cpu_op("aten::add", 1500, 150, input_dims=big)
    tables = load_trace(str(tb.write(tmp_path / "t.json")))
    steps = find_steps(tables)
    return replay_rank(tables, steps), tables, steps.numbers


def test_op_excess_is_self_time_over_the_fastest_of_the_same_op_and_shapes(tmp_path: Path) -> None:
    rr, tables, _ = _same_ops_twice(tmp_path)
    start, end, excess = op_excess(tables, rr.windows.pid, (np.array([0.0]), np.array([2000.0])))
    got = {(float(s), float(e)): float(x) for s, e, x in zip(start, end, excess, strict=True)}
    assert got == {(100.0, 400.0): 200.0, (500.0, 700.0): 50.0, (800.0, 900.0): 0.0, (1100.0, 1200.0): 0.0,
                   (1500.0, 1650.0): 0.0}  # fmt: skip


def test_only_an_op_that_allocates_a_page_or_more_has_an_excess(tmp_path: Path) -> None:
    """The two steps of :func:`_same_ops_twice` with ``[memory]`` events: step 1's mul allocates 1 MiB (at 150), its
    add 1 KiB (at 550, less than a page): the mul keeps its 200 µs excess, the add's 50 is 0 (it wrote no fresh
    page; its time over its fastest was something else). An ``aten::empty`` [505, 515) inside the add allocating
    1 MiB (at 507) is the add's allocation (the factory looked through): the add's self time 200 − 10 = 190 over its
    fastest 150 → 40; the empty (seen once) 0."""
    tb = TraceBuilder(device_name=None)
    big, other = [[1024, 256], [1024, 256]], [[8, 8], [8, 8]]
    tb.step(1, 0, 1000)
    tb.cpu_op("aten::mul", 100, 300, input_dims=big)
    tb.memory(150, 1 << 20, 1 << 20, 0, device=-1, device_type=0)
    tb.cpu_op("aten::add", 500, 200, input_dims=big)
    tb.memory(550, 1024, (1 << 20) + 1024, 0, device=-1, device_type=0)
    tb.cpu_op("aten::mul", 800, 100, input_dims=other)
    tb.step(2, 1000, 1000)
    tb.cpu_op("aten::mul", 1100, 100, input_dims=big)
    tb.cpu_op("aten::add", 1500, 150, input_dims=big)
    span = (np.array([0.0]), np.array([2000.0]))

    def excess_of(b: TraceBuilder, name: str) -> dict[tuple[float, float], float]:
        tables = load_trace(str(b.write(tmp_path / f"{name}.json")))
        start, end, excess = op_excess(tables, replay_rank(tables, find_steps(tables)).windows.pid, span)
        return {(float(s), float(e)): float(x) for s, e, x in zip(start, end, excess, strict=True)}

    assert excess_of(tb, "small") == {(100.0, 400.0): 200.0, (500.0, 700.0): 0.0, (800.0, 900.0): 0.0,
                                      (1100.0, 1200.0): 0.0, (1500.0, 1650.0): 0.0}  # fmt: skip
    tb.cpu_op("aten::empty", 505, 10)
    tb.memory(507, 1 << 20, (2 << 20) + 1024, 0, device=-1, device_type=0)
    got = excess_of(tb, "factory")
    assert got[(500.0, 700.0)] == pytest.approx(40.0) and got[(505.0, 515.0)] == 0.0
    assert got[(100.0, 400.0)] == 200.0


def test_memory_events_are_host_events_the_profiler_pays_for(tmp_path: Path) -> None:
    """:func:`_two_steps` with two ``[memory]`` events in step 1 (an allocation at 220 inside the addmm, its free at
    620): 9 + 2 = 11 host events over 2 steps = 5.5 per step; W = 1000, S = 890 → o = 110 / 5.5 = 20 µs; step 1
    loses 8 × 20 = 160 → 840, step 2 3 × 20 = 60 → 940; mean 890 = S."""
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 1000)
    tb.annotation(DL, 0, 200)
    tb.cpu_op("aten::stack", 150, 40)
    tb.cpu_op("aten::addmm", 200, 200)
    tb.memory(220, 4096, 4096, 0, device=-1, device_type=0)
    tb.cpu_op("aten::relu", 410, 190)
    tb.cpu_op("aten::mm", 610, 90)
    tb.memory(620, -4096, 0, 0, device=-1, device_type=0)
    tb.step(2, 1000, 1000)
    tb.cpu_op("aten::addmm", 1000, 400)
    tb.cpu_op("aten::add", 1410, 580)
    tables = load_trace(str(tb.write(tmp_path / "t.json")))
    rr = replay_rank(tables, find_steps(tables))
    u = unprofiled(rr, tables, 890.0)
    assert u is not None and u.events_per_step == pytest.approx(5.5) and u.per_event_us == pytest.approx(20.0)
    rr.unprofiled = u
    assert rr.fixed_step_times([]) == pytest.approx([840.0, 940.0])


def test_page_faults_are_cut_from_each_steps_ops_that_ran_long(tmp_path: Path) -> None:
    """W = 1000 (both steps), S = 850: 150 µs over a step. 1 µs a fault; step 1 took 100 extra faults, step 2 took
    30 but no op of it ran long (its excess 0): F = (100 + 0) / 2 = 50 µs per step, step 1's 100 µs shared 4:1 by
    the mul (80, cut at its end: [320, 400)) and the add (20: [680, 700)); o = (150 − 50) / 3.5 = 28.57 µs."""
    rr, tables, numbers = _same_ops_twice(tmp_path)
    faults = PageFaults(65.0, 1.0, "a test", {1: 100.0, 2: 30.0})
    u = unprofiled(rr, tables, 850.0, faults, numbers)
    assert u is not None and u.fault_us == pytest.approx(50.0)
    o = 100.0 / 3.5
    assert u.per_event_us == pytest.approx(o)
    assert u.whatif is not None
    cut = list(zip(*(x.tolist() for x in u.whatif.scenario.host_cut[rr.windows.pid]), strict=True))
    assert [pytest.approx(x) for x in cut] == [
        (0.0, o), (100.0, 100.0 + o), (320.0, 400.0), (500.0, 500.0 + o), (680.0, 700.0), (800.0, 800.0 + o),
        (1000.0, 1000.0 + o), (1100.0, 1100.0 + o), (1500.0, 1500.0 + o),
    ]  # fmt: skip
    rr.unprofiled = u
    assert rr.base_step_us == pytest.approx(850.0)  # the unprofiled step is still S
    d = rr.unprofiled_dict()
    assert d is not None and (d["fault_us"], d["extra_faults_per_step"], d["us_per_fault"]) == (50.0, 65.0, 1.0)
    text = u.text(850.0)
    assert "0.05 ms per step of page faults (each step's at most its time over the unprofiled step and its" in text
    assert "ops' excess) (65 more minor faults per profiled step" in text
    assert "× 1.00 µs each" in text and "28.57 µs per recorded host event" in text
    assert "ran longer than the same op on the same shapes at its fastest" in text
    # without the steps' numbers each step takes the mean, 65: step 1's shared 52 / 13, step 2's none (no excess)
    mean = unprofiled(rr, tables, 850.0, faults)
    assert mean is not None and mean.whatif is not None and mean.fault_us == pytest.approx(32.5)
    cut = list(zip(*(x.tolist() for x in mean.whatif.scenario.host_cut[rr.windows.pid]), strict=True))
    assert (348.0, 400.0) in [pytest.approx(x) for x in cut] and (687.0, 700.0) in [pytest.approx(x) for x in cut]
    # more faults than a step's excess over S: step 1's capped at 150 µs, o = (150 − 75) / 3.5
    capped = unprofiled(rr, tables, 850.0, PageFaults(1000.0, 1.0, "a test", {1: 1000.0, 2: 1000.0}), numbers)
    assert capped is not None and capped.fault_us == pytest.approx(75.0)
    assert capped.per_event_us == pytest.approx(75.0 / 3.5)
    # and than the ops ran long: at most the 250 µs of step 1's excess
    long = unprofiled(rr, tables, 700.0, PageFaults(1000.0, 1.0, "a test", {1: 1000.0}), numbers)
    assert long is not None and long.fault_us == pytest.approx(125.0)


def test_a_faults_cost_is_the_runs_own_slope_where_its_steps_spread_faults() -> None:
    # unprofiled steps 2-11 alternate 0 and 4,000 faults, each step 20 ms + 1.5 µs a fault (26 ms with faults),
    # but step 7 runs 80 ms (a stall the Theil–Sen slope ignores); steps 12-14 warm-up with 500 faults each, 15-16
    # profiled with 3,000; steps 0-1 (left out of the fit) 0 faults at 900 ms. Extra per profiled step: 3,000 − the
    # warm-up's 500 = 2,500
    faults: list[float | None] = [0, 0] + [0 if i % 2 == 0 else 4000 for i in range(2, 12)] + [500] * 3 + [3000] * 2
    durations = [0.9, 0.9] + [0.020 + 1.5e-6 * f for f in faults[2:12]] + [0.03] * 3 + [0.05] * 2  # type: ignore[operator]
    durations[7] = 0.080
    series = _series(faults, ["none"] * 12 + ["warmup"] * 3 + ["active"] * 2, 4)
    series["duration_s"] = durations
    f = page_faults(series, _run_json(2.6), 0)
    assert f is not None and f.extra_per_step == pytest.approx(2500.0)
    assert f.us_per_fault == pytest.approx(1.5) and "slope of the run's 10 unprofiled steps" in f.source
    # too little spread (every step 4,000 faults): the probe's 2.6 µs
    flat = _series([4000.0] * 12 + [6000.0, 6000.0], ["none"] * 12 + ["active"] * 2)
    flat["duration_s"] = [0.02] * 14
    g = page_faults(flat, _run_json(2.6), 0)
    assert g is not None and g.us_per_fault == 2.6 and g.source == "the runner's fault probe"


def test_a_faults_cost_is_the_windows_own_slope_where_its_steps_spread_faults() -> None:
    # unprofiled steps 0-11: 0 faults; profiled steps 12-21 take 2,000 + 1,000·k faults (k = 0..9) at 40 ms + 1.8 µs a
    # fault (step 15 stalls at 90 ms: Theil–Sen ignores it): 1.8 µs a fault, where the probe reads 2.6. Extra per
    # profiled step: the mean 6,500 − the last five unprofiled steps' 0
    faults: list[float | None] = [0.0] * 12 + [2000.0 + 1000.0 * k for k in range(10)]
    durations = [0.03] * 12 + [0.040 + 1.8e-6 * f for f in faults[12:]]  # type: ignore[operator]
    durations[15] = 0.090
    series = _series(faults, ["none"] * 12 + ["active"] * 10, 2)
    series["duration_s"] = durations
    f = page_faults(series, _run_json(2.6), 0)
    assert f is not None and f.extra_per_step == pytest.approx(6500.0)
    assert f.us_per_fault == pytest.approx(1.8) and "slope of the profiled window's 10 steps" in f.source
    # a slope above the probe's (a fault in isolation): the probe's 1.5
    capped = page_faults(series, _run_json(1.5), 0)
    assert (
        capped is not None and capped.us_per_fault == 1.5 and "the window's own slope, 1.80, is more" in capped.source
    )
    # fewer than eight profiled steps: the window's fit is not read; the unprofiled steps spread none → the probe
    short = _series(faults[:19], ["none"] * 12 + ["active"] * 7, 2)
    short["duration_s"] = durations[:19]
    g = page_faults(short, _run_json(2.6), 0)
    assert g is not None and g.us_per_fault == 2.6


def test_op_excess_on_a_real_cpu_run_matches_the_raw_trace() -> None:
    """The tiny-GPT CPU run's trace (sample_traces/tiny_gpt_cpu_run): each cpu_op's self time (its dur less its
    direct children's on the same thread) less the shortest self time of the same name and Input Dims, worked out
    from the raw JSON events with a stack of open ops, against :func:`op_excess` over the same span."""
    import gzip
    import json
    from collections import defaultdict

    path = Path(__file__).resolve().parents[1] / "sample_traces" / "tiny_gpt_cpu_run" / "trace.rank0.pt.trace.json.gz"
    tables = load_trace(str(path))
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    marks = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    pid = marks[0]["pid"]
    lo, hi = min(e["ts"] for e in marks), max(e["ts"] + e["dur"] for e in marks)
    ops = [e for e in events if e.get("cat") == "cpu_op" and e["pid"] == pid and lo <= e["ts"] < hi]
    ops.sort(key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    self_us = [float(e["dur"]) for e in ops]
    stack: list[int] = []
    for i, e in enumerate(ops):
        while stack and (ops[stack[-1]]["tid"] != e["tid"] or ops[stack[-1]]["ts"] + ops[stack[-1]]["dur"] <= e["ts"]):
            stack.pop()
        if stack:
            self_us[stack[-1]] -= e["dur"]
        stack.append(i)
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, e in enumerate(ops):
        groups[(e["name"], json.dumps(e.get("args", {}).get("Input Dims")))].append(i)
    raw = {}
    for rows in groups.values():
        least = min(self_us[i] for i in rows)
        for i in rows:
            raw[(ops[i]["ts"], ops[i]["ts"] + ops[i]["dur"])] = self_us[i] - least if len(rows) > 1 else 0.0
    start, end, excess = op_excess(tables, pid, (np.array([float(lo)]), np.array([float(hi)])))
    assert len(excess) == len(raw) > 1000
    got = {(float(s), float(e)): float(x) for s, e, x in zip(start, end, excess, strict=True)}
    # the tables hold timestamps to the nanosecond (each op within 0.003 µs of the raw JSON's)
    a, b = np.sort(np.array(list(got.values()))), np.sort(np.array(list(raw.values())))
    assert b.sum() > 0 and a.sum() == pytest.approx(b.sum(), rel=1e-4)
    assert a == pytest.approx(b, abs=0.01)
