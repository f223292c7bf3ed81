"""Multi-rank replay bounds (perfdoctor/crossrank/bounds.py): worked out by hand from two ranks' collectives (µs)."""

from __future__ import annotations

from perfdoctor.crossrank import bounds
from perfdoctor.crossrank.collectives import CollectiveTimeline


def _tl(rank: int, starts: list[float], ends: list[float], windows: list[int]) -> CollectiveTimeline:
    return CollectiveTimeline(
        rank=rank,
        world_size=2,
        window_steps=[1, 2],
        analysed_steps=[1, 2],
        kind=["all_reduce"] * len(starts),
        bytes=[-1] * len(starts),
        launch_us=list(starts),
        start_us=list(starts),
        end_us=list(ends),
        dur_us=[e - s for s, e in zip(starts, ends)],
        window=windows,
    )


def test_a_collective_ends_no_earlier_than_the_last_peer_arrives() -> None:
    # step 1 (0-400 on both clocks): rank 0 arrives at 100 and waits until 300 (dur 200); rank 1, whose clock runs
    # 1,000 µs ahead, arrives at 250 (1,250) and its copy takes the transfer alone, 50. Step 2 (400-800): rank 0
    # arrives at 700, rank 1 at 500; both end at 760 (rank 1's copy 260, rank 0's 60: the transfer).
    r0 = _tl(0, [100.0, 700.0], [300.0, 760.0], [0, 1])
    r1 = _tl(1, [1250.0, 1500.0], [1300.0, 1760.0], [0, 1])
    ends = bounds.earliest_ends([r0, r1])
    # rank 0 fixed alone: collective 1 ends >= 250 + 50 = 300; collective 2 >= 500 + 60 = 560
    assert ends[0].tolist() == [300.0, 560.0]
    # rank 1 fixed alone: >= 100 + 50 = 150 and >= 700 + 60 = 760, on its own clock +1000
    assert ends[1].tolist() == [1150.0, 1760.0]
    # the bounds below the recorded ends (the rank arrived last there): rank 0's collective 2 (760 -> 560, started
    # at 700), rank 1's collective 1 (1,300 -> 1,150, started at 1,250); margins 200 and 150 > 0.2% of 400
    peer = bounds.peer_bounds([r0, r1], {0: 400.0, 1: 400.0})
    assert peer == {0: ([700.0], [560.0]), 1: ([1250.0], [1150.0])}
    # a margin within 0.2% of the step leaves the rank to its recorded ends (150 <= 0.002 * 100,000)
    assert bounds.peer_bounds([r0, r1], {0: 400.0, 1: 100_000.0}) == {0: ([700.0], [560.0])}


def test_unmatched_timelines_give_no_bound() -> None:
    r0 = _tl(0, [100.0], [300.0], [0])
    r1 = _tl(1, [100.0, 200.0], [300.0, 400.0], [0, 0])
    assert bounds.earliest_ends([r0, r1]) == {}
    assert bounds.earliest_ends([r0]) == {}


def test_the_job_figure_is_the_slowest_rank() -> None:
    sections = {
        0: {
            "recorded_mean_step_us": 1000.0,
            "replayed_mean_step_us": 1000.0,
            "fix_all": {"codes": ["PD103"], "recorded_mean_step_us": 1000.0, "replayed_mean_step_us": 300.0},
        },
        1: {
            "recorded_mean_step_us": 1200.0,
            "replayed_mean_step_us": 1200.0,
            "fix_all": {"codes": ["PD101"], "recorded_mean_step_us": 1200.0, "replayed_mean_step_us": 500.0},
        },
        # a rank without a replayed fix keeps its step: it is the slowest after the fixes
        2: {"recorded_mean_step_us": 900.0, "replayed_mean_step_us": 900.0, "fix_all": None},
    }
    assert bounds.job_fix_all(sections) == (["PD101", "PD103"], 1200.0, 900.0, 2)
    assert bounds.job_fix_all({0: {"recorded_mean_step_us": 1.0, "fix_all": None}}) is None


def test_earliest_ends_take_the_latest_peer_with_a_tie() -> None:
    # three ranks on one clock (every copy ends at 500), two collectives. Collective 1: arrivals 100, 300, 300
    # (ranks 1 and 2 tie for the latest), copies 400, 200, 200 → transfer 200. Collective 2 (ends at 900):
    # arrivals 700, 600, 650, copies 200, 300, 250 → transfer 200; rank 0 alone arrived latest.
    r0 = _tl(0, [100.0, 700.0], [500.0, 900.0], [0, 1])
    r1 = _tl(1, [300.0, 600.0], [500.0, 900.0], [0, 1])
    r2 = _tl(2, [300.0, 650.0], [500.0, 900.0], [0, 1])
    ends = bounds.earliest_ends([r0, r1, r2])
    # rank 0's peers: latest 300 then 650 → 500, 850; rank 1's: 300 (rank 2) then 700 → 500, 900;
    # rank 2's: 300 (rank 1) then 700 → 500, 900
    assert ends[0].tolist() == [500.0, 850.0]
    assert ends[1].tolist() == [500.0, 900.0] and ends[2].tolist() == [500.0, 900.0]
