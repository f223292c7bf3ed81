"""CPU-only (host-only) what-ifs on TraceBuilder graphs (issue 10 item 7), savings worked out by hand (µs).

Each trace lists no GPU; a step is its ``ProfilerStep`` annotation on the main thread, so a saving is the host time
the transformation cuts inside the analysed steps.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from tracebuilder import TraceBuilder

from perfdoctor.analysis.steps.steps import find_steps
from perfdoctor.replay.rank import RankReplay, replay_rank
from perfdoctor.replay.transforms import WhatIf
from perfdoctor.replay.transforms.cpu import cpu_syncs, fit_threads_to_cores, trim_python_outside_ops
from perfdoctor.replay.transforms.cpu_fusion import Bandwidth, fuse_elementwise_chains
from perfdoctor.replay.transforms.host import prefetch_dataloader
from perfdoctor.trace import intervals as iv
from perfdoctor.trace import load_trace
from perfdoctor.trace.tables import TraceTables

DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _replay(tb: TraceBuilder, tmp_path: Path) -> tuple[RankReplay, TraceTables]:
    tables = load_trace(str(tb.write(tmp_path / "t.json")))
    rr = replay_rank(tables, find_steps(tables))
    assert rr.fallback is None  # a host-only graph replays its recording exactly
    return rr, tables


def _saving(rr: RankReplay, w: WhatIf) -> np.ndarray:
    return np.asarray(rr.recorded_step_us - rr.step_times(w.scenario))


def _two_steps() -> TraceBuilder:
    """Two 1000 µs steps. Step 1: a DataLoader fetch [0, 200) (a collate op inside), ops [200, 400), [410, 600),
    [610, 700), then 300 µs of bookkeeping [700, 1000). Step 2 (from 1000): ops [1000, 1400), [1410, 1990),
    gap [1990, 2000)."""
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
    return tb


def test_trim_python_keeps_the_median_gap(tmp_path: Path) -> None:
    rr, t = _replay(_two_steps(), tmp_path)
    w = trim_python_outside_ops(rr, t)
    # gaps outside any op or fetch: [400, 410), [600, 610), [700, 1000), [1400, 1410), [1990, 2000) =
    # 10, 10, 300, 10, 10 µs; median 10 µs: the 300 µs gap shrinks to 10 → step 1 saves 290, step 2 nothing
    assert _saving(rr, w) == pytest.approx([290.0, 0.0])
    assert "median gap (10 µs" in w.assumption


def test_fit_threads_scales_op_time_outside_fetches(tmp_path: Path) -> None:
    rr, t = _replay(_two_steps(), tmp_path)
    # 4 busy threads on 2 cores: r = 2, every op stretch keeps half. Op stretches outside the fetch: step 1
    # [200, 400), [410, 600), [610, 700) = 200 + 190 + 90 = 480 µs → saves 240 (the collate op inside the fetch
    # [0, 200) is the fetch's and stays); step 2 [1000, 1400), [1410, 1990) = 980 µs → saves 490
    assert _saving(rr, fit_threads_to_cores(rr, t, 4, 2)) == pytest.approx([240.0, 490.0])
    # 3 threads on 2 cores: r = 1.5, each op keeps 2/3: saves 480/3 = 160 and 980/3 ≈ 326.67
    assert _saving(rr, fit_threads_to_cores(rr, t, 3, 2)) == pytest.approx([160.0, 980.0 / 3])
    # one thread per core or fewer: nothing to fit
    w = fit_threads_to_cores(rr, t, 2, 2)
    assert not w.changes_anything and _saving(rr, w) == pytest.approx([0.0, 0.0])


def test_prefetch_on_cpu_cuts_the_fetch(tmp_path: Path) -> None:
    rr, t = _replay(_two_steps(), tmp_path)
    # the fetch [0, 200) becomes a queue hand-off (0 µs): step 1 saves 200, step 2 has no fetch
    assert _saving(rr, prefetch_dataloader(rr, t)) == pytest.approx([200.0, 0.0])


def test_sync_removal_on_cpu_changes_nothing(tmp_path: Path) -> None:
    tb = _two_steps()
    tb.cpu_op("aten::item", 700, 5)
    tb.cpu_op("aten::_local_scalar_dense", 701, 3)
    rr, _ = _replay(tb, tmp_path)
    w = cpu_syncs(rr)
    # no device work to wait for: nothing changes and the assumption says why
    assert not w.changes_anything and _saving(rr, w) == pytest.approx([0.0, 0.0])
    assert "saves 0 µs" in w.assumption and "0 device activities" in w.assumption


def test_pd104_replays_the_oversubscription_on_a_cpu_trace(tmp_path: Path) -> None:
    from analysed import rank_analysis

    from perfdoctor.analysis.rank import Analysis
    from perfdoctor.checks import pd104_cpu_thread_oversubscription as pd104
    from perfdoctor.checks.context import JobContext, RankContext

    analysis = rank_analysis(_two_steps().write(tmp_path / "t.json"))
    run = {"world_size": 1, "cpu": {"logical_cpus": 2}, "ranks": [{"rank": 0, "torch_threads": 4}]}
    spec = SimpleNamespace(code="PD104", thresholds={"max_threads_per_core": 1.0})
    job = JobContext(Analysis(ranks=[], inputs=[], run_facts=run), [RankContext(analysis, analysis.ranks[0])], spec)  # type: ignore[arg-type]
    out = pd104.check(job)
    # 4 threads on 2 cores: r = 2; savings 240 and 490 µs (above): mean 365 µs of a 1000 µs step
    assert out.hit is not None and out.hit.estimate is not None
    assert out.hit.estimate.saving_us == pytest.approx(365.0)
    assert "4 busy threads on 2 cores" in out.hit.estimate.method
    # without a trace the job-level finding carries no estimate
    assert pd104.check(JobContext(Analysis(ranks=[], inputs=[], run_facts=run), [], spec)).hit.estimate is None  # type: ignore[union-attr, arg-type]


MIB = [1024, 256]  # 1024 × 256 fp32 = 1 048 576 B


def _ew(tb: TraceBuilder, name: str, ts: float, dur: float) -> None:
    tb.cpu_op(name, ts, dur, input_dims=[MIB, []], input_type=["float", "Scalar"])


def test_fused_chains_cost_their_bytes_at_the_bandwidth(tmp_path: Path) -> None:
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 1000)
    _ew(tb, "aten::mul", 0, 100)  # chain 1: mul, add [0, 210)
    _ew(tb, "aten::add", 110, 100)
    tb.cpu_op("aten::mm", 220, 100)  # breaks the chain
    _ew(tb, "aten::relu", 330, 100)  # a lone op: nothing to fuse
    tb.cpu_op("aten::mm", 440, 100)
    # chain 2, in backward: each aten op inside its autograd node, which does not break it: [550, 760)
    tb.cpu_op("MulBackward0", 550, 100)
    _ew(tb, "aten::mul", 560, 80)
    tb.cpu_op("autograd::engine::evaluate_function: AddBackward0", 652, 5)  # a pass-through node: no break
    tb.cpu_op("AddBackward0", 660, 100)
    _ew(tb, "aten::add", 670, 80)
    tb.cpu_op("aten::view", 900, 4)  # the shortest op: one dispatch, 4 µs
    rr, t = _replay(tb, tmp_path)
    fusion = fuse_elementwise_chains(rr, t, Bandwidth(20e9, "measured here", True), iv.EMPTY)
    # each chain moves 1 MiB in + 1 MiB out = 2 097 152 B at 20 GB/s = 104.8576 µs, + 4 µs = 108.8576 µs;
    # chain 1's span 210 µs and chain 2's (its outermost elementwise ops [560, 750)) 190 µs shrink to it:
    # (210 − 108.8576) + (190 − 108.8576) = 182.2848 µs
    assert fusion.fused == 2 and fusion.uncosted == 0
    assert _saving(rr, fusion.whatif) == pytest.approx([182.2848])
    assert "20.0 GB/s (measured here)" in fusion.whatif.assumption
    # the optimizer's time kept out: chain 2 stays, chain 1 alone saves 210 − 108.8576 = 101.1424 µs
    kept = fuse_elementwise_chains(rr, t, Bandwidth(20e9, "", True), iv.union(np.array([500.0]), np.array([800.0])))
    assert _saving(rr, kept.whatif) == pytest.approx([101.1424])


def test_a_chain_does_not_run_from_the_forward_into_the_backward(tmp_path: Path) -> None:
    # mul [0, 100) and div [110, 210) in forward, then an autograd node [250, 450) holding a div [260, 350) and a mul
    # [355, 445): two chains, [0, 210) and [260, 445) (one graph each under a compiler; the engine's start between
    # them is no op's), each 1 MiB in + 1 MiB out at 20 GB/s + one 4 µs dispatch = 108.8576 µs:
    # (210 − 108.8576) + (185 − 108.8576) = 177.2848 µs, not one chain's 445 − 108.8576 = 336.1424
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 1000)
    _ew(tb, "aten::mul", 0, 100)
    _ew(tb, "aten::div", 110, 100)
    tb.cpu_op("autograd::engine::evaluate_function: DivBackward0", 250, 200)
    _ew(tb, "aten::div", 260, 90)
    _ew(tb, "aten::mul", 355, 90)
    tb.cpu_op("aten::view", 900, 4)
    rr, t = _replay(tb, tmp_path)
    fusion = fuse_elementwise_chains(rr, t, Bandwidth(20e9, "measured here", True), iv.EMPTY)
    assert fusion.fused == 2
    assert _saving(rr, fusion.whatif) == pytest.approx([177.2848])


def test_a_fused_chain_keeps_its_math_bound_ops_arithmetic(tmp_path: Path) -> None:
    # one chain [0, 900): mul [0, 100) then tanh [110, 900), both on 1 MiB fp32 tensors, and a 4 µs view (the
    # dispatch floor). At 20 GB/s: the chain moves 1 MiB in + 1 MiB out = 104.8576 µs; the tanh alone moves 1 MiB in
    # + 1 MiB out, 104.8576 µs of its 790 µs, and one 4 µs dispatch, so 790 − 104.8576 − 4 = 681.1424 µs of it is
    # arithmetic, which the fused loop keeps (the mul's is not: one instruction per element). The fused op costs
    # 104.8576 + 681.1424 + 4 = 790 µs: the 900 µs chain saves 110 µs (the mul and the gap), not 900 − 108.8576
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 1000)
    _ew(tb, "aten::mul", 0, 100)
    tb.cpu_op("aten::tanh", 110, 790, input_dims=[MIB], input_type=["float"])
    tb.cpu_op("aten::view", 950, 4)
    rr, t = _replay(tb, tmp_path)
    fusion = fuse_elementwise_chains(rr, t, Bandwidth(20e9, "measured here", True), iv.EMPTY)
    assert fusion.fused == 1
    assert _saving(rr, fusion.whatif) == pytest.approx([110.0])
    assert "the arithmetic of their math-bound ops (tanh, pow, div...: 0.68 ms" in fusion.whatif.assumption


def test_a_fused_op_keeps_its_cost_past_the_profilers_cuts() -> None:
    # cuts [10, 15) and [20, 30): from 0, 12 µs of the unprofiled step pass at 17 (10 before the first cut, 2 after
    # it); with no cut, at 12; a chain ending at 12 stops the walk once past it (17, not cut)
    from perfdoctor.replay.transforms.cpu_fusion import _kept_until

    cuts = (np.array([10.0, 20.0]), np.array([15.0, 30.0]))
    assert _kept_until(0.0, 12.0, cuts, 100.0) == 17.0
    assert _kept_until(0.0, 12.0, (np.empty(0), np.empty(0)), 100.0) == 12.0
    assert _kept_until(0.0, 12.0, cuts, 12.0) == 17.0
    # 8 µs from 12, inside the cut [10, 15): the time passes from 15, 5 µs before 20, the other 3 after 30 → 33
    assert _kept_until(12.0, 8.0, cuts, 100.0) == 33.0
