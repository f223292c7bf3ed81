"""RankReplay.step_times replays each distinct scenario once: the same edits give the same steps without a second
replay, and any edit a replay reads gives a new one (the answer then equals a fresh replay of that scenario)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import shared_trace

from perfdoctor.analysis.steps.steps import find_steps
from perfdoctor.replay import rank as replay_rank_mod
from perfdoctor.replay.rank import replay_rank
from perfdoctor.replay.simulate import Scenario, replay
from perfdoctor.replay.windows import replayed_windows
from perfdoctor.trace import load_trace


@pytest.fixture(scope="module")
def rr():
    t = load_trace(str(shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz")))
    return replay_rank(t, find_steps(t))


@pytest.fixture
def calls(monkeypatch):
    """The names of the scenarios RankReplay replays during the test, in order (None: the recording)."""
    seen: list[str | None] = []

    def counted(g, sc=None):
        seen.append(sc.name if sc else None)
        return replay(g, sc)

    monkeypatch.setattr(replay_rank_mod, "replay", counted)
    return seen


def test_same_edits_replay_once_and_new_edits_replay_again(rr, calls):
    g = rr.graph
    slower = Scenario("a", act_dur_us=g.act_dur_us * 2)
    first = rr.step_times(slower)
    again = rr.step_times(Scenario("another name", act_dur_us=g.act_dur_us * 2))  # equal content, new arrays
    assert calls == ["a"] and np.array_equal(first, again)
    again[:] = 0  # the caller's copy: the remembered steps stay
    assert np.array_equal(rr.step_times(slower), first)
    dur = g.act_dur_us * 2
    dur[0] += 1.0  # one activity differs: replayed anew
    changed = rr.step_times(Scenario("b", act_dur_us=dur))
    removed = rr.step_times(Scenario("c", act_dur_us=g.act_dur_us * 2, blk_removed=np.ones(g.n_blk, bool)))
    assert calls == ["a", "b", "c"]
    # each answer is the replay of its own scenario (the windows cut from a fresh replay)
    for sc, got in (
        (Scenario("b", act_dur_us=dur), changed),
        (Scenario("c", act_dur_us=g.act_dur_us * 2, blk_removed=np.ones(g.n_blk, bool)), removed),
    ):
        start, end = replayed_windows(replay(g, sc), rr.windows)
        assert np.array_equal(got, end - start)
    # twice the device time makes the steps longer than recorded (a check that the scenario was applied)
    assert first.mean() > rr.recorded_step_us.mean()


def test_a_scenario_that_edits_nothing_is_the_recordings_replay(rr, calls):
    """No edit (or durations equal to the recorded ones) and no peer bound to add: no replay, the recording's own
    result; one edit anywhere replays, and the full result is kept for the next read of the same scenario."""
    g = rr.graph
    assert rr.peers is None  # one rank, no collectives: nothing bounds a what-if
    for sc in (
        Scenario("nothing"),
        Scenario("same durations", act_dur_us=g.act_dur_us.copy()),
        Scenario("no call removed", blk_removed=np.zeros(g.n_blk, bool)),
        Scenario("no bound", act_end_min_us=np.full(g.n_act, -np.inf)),
        Scenario("no launch moved", act_launch_ts_us=np.full(g.n_act, np.nan)),
    ):
        assert not sc.edits_graph or sc.act_dur_us is not None
        assert rr.replayed(sc) is rr.baseline
    assert calls == []
    one = g.act_dur_us.copy()
    one[0] += 1.0
    edited = Scenario("one longer", act_dur_us=one)
    assert edited.edits_graph
    res = rr.replayed(edited)
    assert calls == ["one longer"] and res is not rr.baseline
    assert rr.replayed(Scenario("same edit", act_dur_us=one.copy())) is res and calls == ["one longer"]
    fresh = replay(g, edited)
    assert np.array_equal(res.act_end_us, fresh.act_end_us) and np.array_equal(res.blk_end_us, fresh.blk_end_us)
