"""A job's "fixing the top N findings" figure: every rank with its own fixes replayed jointly from the rank summaries
(perfdoctor/crossrank/joint.py: JointInputs, solve, job_fix_all). By hand on TraceBuilder ranks (µs), and on the 8-rank
DLRM job against the joint replay of the full graphs (JointReplay, iterated to a fixed point over every rank's
whole dependency graph: another algorithm, checked by hand in test_replay_joint.py)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import msgspec
import numpy as np
import pytest
from conftest import SHARED_TRACES
from test_replay_joint import _rank
from test_replay_peers import _ranks

from perfdoctor import pipeline
from perfdoctor.checks import config
from perfdoctor.crossrank.joint import JointInputs, joint_inputs, match, solve
from perfdoctor.jobs.summary import decode, encode
from perfdoctor.replay.simulate import Scenario

SHARED = SHARED_TRACES
DLRM = SHARED / "param__dlrm_8ranks"


def test_a_faster_late_rank_moves_the_early_rank_from_the_summaries(tmp_path: Path) -> None:
    # test_replay_joint's two ranks: rank 1 arrives last (300) at the all-to-all; both steps end at 370
    (r0, t0), (r1, t1) = _rank(tmp_path, 0), _rank(tmp_path, 1)
    dur = r1.graph.act_dur_us.copy()
    dur[dur == 280.0] = 140.0  # rank 1's A' takes 140 instead of 280
    i0 = joint_inputs(r0, t0)
    i1 = joint_inputs(r1, t1, Scenario("faster A'", act_dur_us=dur), ["X"])
    assert i0 is not None and i1 is not None
    # through the bytes a worker sends
    i0, i1 = (msgspec.msgpack.decode(msgspec.msgpack.encode(i), type=JointInputs) for i in (i0, i1))
    rec, _ = solve([i0, i1], [False, False])
    assert rec is not None and [s.tolist() for s in rec] == [[370.0], [370.0]]
    # A' ends at 150, the all-to-all starts at 160 and, rank 0 having arrived at 130, ends at 160 + 20 = 180 on
    # both ranks; B and B' run 180-230
    fixed, _ = solve([i0, i1], [False, True])
    assert fixed is not None and [s.tolist() for s in fixed] == [[230.0], [230.0]]


def test_a_faster_early_rank_moves_nothing(tmp_path: Path) -> None:
    (r0, t0), (r1, t1) = _rank(tmp_path, 0), _rank(tmp_path, 1)
    dur = r0.graph.act_dur_us.copy()
    dur[dur == 100.0] = 10.0  # rank 0's A 10 instead of 100: its all-to-all still ends at 300 + 20
    i0, i1 = joint_inputs(r0, t0, Scenario("faster A", act_dur_us=dur), ["X"]), joint_inputs(r1, t1)
    assert i0 is not None and i1 is not None
    fixed, _ = solve([i0, i1], [True, False])
    assert fixed is not None and [s.tolist() for s in fixed] == [[370.0], [370.0]]


def _note_ms(note: str) -> tuple[float, float]:
    m = re.search(r"the job's mean step, set by its longest rank step, from ([\d.,]+) ms to ([\d.,]+) ms", note)
    assert m is not None, note
    return float(m.group(1).replace(",", "")), float(m.group(2).replace(",", ""))


def test_the_job_figure_is_the_joint_replay(tmp_path: Path) -> None:
    """test_replay_peers' job: rank 0 (fetch 0-300) waits in its send/recv 320-800 for rank 1 (fetch 0-200, GEMM
    210-770, send/recv 770-800: the last to arrive, transfer 30 µs)."""
    built = pipeline.build([str(_ranks(tmp_path))], rule_options=config.resolve(select="PD101"))
    note = built.checks.fix_all_note
    # PD101 fires on rank 1 only (rank 0's fetch saves nothing: rank 1 arrives later). Rank 1 prefetched: its GEMM
    # runs 10-570, its send/recv arrives at 570 and ends at max(320, 570) + 30 = 600 on both ranks; rank 0's step
    # (host 0-500) then ends at 600 too. Each rank fixed alone with its peers unchanged, rank 0 kept 800.
    assert _note_ms(note) == (0.80, 0.60)
    assert "replayed jointly" in note and "rank 0 0.80 → 0.60 ms; rank 1 0.80 → 0.60 ms" in note
    # the summaries carry what the reducer needed: per collective and per step, not events
    s = built.job.summaries[1]
    assert s.joint is not None and s.joint.codes == ["PD101"] and len(s.joint.coll_start_us) == 1
    assert decode(encode([s]))[0].joint == s.joint


@pytest.mark.skipif(not DLRM.is_dir(), reason="needs ../shared/traces/param__dlrm_8ranks (see its README)")
def test_dlrm_job_figure_matches_the_joint_replay_of_the_full_graphs() -> None:
    from analysed import rank_analyses

    from perfdoctor.checks import config, engine
    from perfdoctor.checks.context import RankContext

    files = [str(f) for f in sorted(DLRM.glob("worker*.json.gz"))]
    built = pipeline.build(files)
    before, after = _note_ms(built.checks.fix_all_note)
    # the reference: every rank's whole graph, replayed jointly to a fixed point, each with the fixes its summary
    # names (the rules' what-ifs together), against the figure the reducer made from the summaries
    analyses = rank_analyses(files)
    cat, codes = engine.prepare(config.resolve())
    order = engine.check_order(cat, codes)
    for one in analyses:  # each rank's fix plan, as its worker makes it (RankReplay.fired)
        engine.rank_outcomes(one, RankContext(one, one.ranks[0]), cat, order)
    ranks = sorted((one.ranks[0] for one in analyses), key=lambda r: int(r.rank or 0))
    a = SimpleNamespace(ranks=ranks)
    rrs = [r.replay for r in a.ranks]
    jr, why = match(rrs, [r.tables for r in a.ranks])
    assert jr is not None, why
    codes = {int(s.rank or 0): s.joint.codes for s in built.job.summaries if s.joint is not None}
    assert all(codes[int(r.rank or 0)] == r.replay.fired for r in a.ranks)
    full = jr.step_times([rr.fix_all_scenario(rr.fired) for rr in rrs])
    ref = max(float(x.mean()) for x in full)
    assert after * 1000 == pytest.approx(ref, abs=10.0)  # shown to 0.01 ms
    assert before == pytest.approx(max(float(rr.recorded_step_us.mean()) for rr in rrs) / 1000, abs=0.005)
    # each rank fixed alone keeps its peers' recorded arrivals: the joint replay is no slower on any rank, and here
    # the job gains 1.15 ms where the slowest rank alone gained 0.52 ms (19.90 -> 19.38)
    alone = [rr.fix_all(rr.fired) for rr in rrs]
    assert all(a_ is not None and float(f.mean()) <= a_[1] + 2.0 for f, a_ in zip(full, alone))
    assert ref < max(a_[1] for a_ in alone if a_ is not None) - 500.0
    # the reproduction the joint replay is trusted on: the recording replayed jointly, every rank within 2 µs
    for rr, rec in zip(rrs, jr.step_times()):
        assert np.abs(rec - rr.recorded_step_us).max() <= 2.0


def test_joint_inputs_are_made_for_a_job_of_several_files_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-file report never replays ranks jointly, so its summary carries no JointInputs (four replays of the
    rank saved); two files of one job do, one per rank."""
    if not DLRM.is_dir():
        pytest.skip(f"needs {DLRM} (../shared/traces)")
    from perfdoctor.jobs import summary as js

    made: list[int] = []
    real = js.rank_inputs

    def counted(rr, tables):  # type: ignore[no-untyped-def]
        made.append(1)
        return real(rr, tables)

    monkeypatch.setattr(js, "rank_inputs", counted)
    files = sorted(str(p) for p in DLRM.glob("*.json*"))[:2]
    pipeline.build(files[:1], rule_options=config.resolve())
    assert made == []
    pipeline.build(files, rule_options=config.resolve())
    assert made == [1, 1]
