"""Collective-wait ties on rank summaries built by hand (µs): when several ranks wait equally long, or arrive
last equally often, or nobody waits, neither PD304 nor the terminal's job view names rank 0 (the first of the
tie) alone."""

from __future__ import annotations

import io

from rich.console import Console

from perfdoctor.analysis.timing.breakdown import Communication, StepBreakdown
from perfdoctor.checks import config, engine
from perfdoctor.crossrank.collectives import CollectiveTimeline
from perfdoctor.crossrank.job_section import job_section
from perfdoctor.jobs.reduce import reduce
from perfdoctor.jobs.summary import RankSummary
from perfdoctor.model.report import JobSection
from perfdoctor.render.job_terminal import render_job

STEP_US = 10_000.0
END_US = 6_000.0  # every copy of a collective ends here (one clock for all ranks)


def _rank(rank: int, colls: list[float], n_ranks: int) -> RankSummary:
    """One rank of one 10,000 µs step: compute, then collectives of the given durations, each ending at
    END_US + 1,000 k, none overlapped by compute (exposed = total)."""
    comm = sum(colls)
    row = StepBreakdown(
        step=1,
        name="ProfilerStep#1",
        host_start_us=0.0,
        host_dur_us=STEP_US,
        start_us=0.0,
        dur_us=STEP_US,
        busy_us=4_000.0 + comm,
        idle_us=STEP_US - 4_000.0 - comm,
        categories_us={"matmul": 4_000.0, "communication": comm},
        category_union_us={"matmul": 4_000.0, "communication": comm},
        idle_causes_us={},
        communication=Communication(total_us=comm, exposed_us=comm, overlapped_us=0.0),
        communication_by_collective_us={"all_reduce": comm},
        memcpy_by_direction_us={},
        phases_host_us={},
        phases_device_us={},
        n_kernels=1 + len(colls),
        kernel_sum_us=4_000.0 + comm,
    )
    ends = [END_US + 1_000.0 * k for k in range(len(colls))]
    timeline = CollectiveTimeline(
        rank=rank,
        world_size=n_ranks,
        window_steps=[1],
        analysed_steps=[1],
        kind=["all_reduce"] * len(colls),
        bytes=[-1] * len(colls),
        launch_us=[e - d - 5.0 for e, d in zip(ends, colls)],
        start_us=[e - d for e, d in zip(ends, colls)],
        end_us=ends,
        dur_us=list(colls),
        window=[0] * len(colls),
    )
    path = f"rank{rank}.json"
    return RankSummary(
        index=rank,
        path=path,
        rank=rank,
        input={"path": path, "bytes": 1, "sha256": None, "events": 1, "uncompressed_bytes": 1},
        steps_source="ProfilerStep",
        primary_kind="gpu",
        primary_device=0,
        step_rows=[row],
        collectives=timeline,
        world_size=n_ranks,
    )


def _job(durations: list[list[float]]) -> tuple[object, JobSection, str]:
    """PD304's finding (None when it passes), the job section and the terminal's job view."""
    cat, codes = engine.prepare(config.resolve(select="PD304"))
    job = reduce([_rank(r, d, len(durations)) for r, d in enumerate(durations)], cat, codes)
    [finding] = [f for f in job.checks.findings if f.code == "PD304"] or [None]
    section = job_section(job)
    out = io.StringIO()
    render_job(section, Console(file=out, width=400, color_system=None))
    return finding, section, out.getvalue()


def test_ranks_that_wait_equally_long_are_named_together() -> None:
    # ranks 0-6 copy 1,400 µs, rank 7 (arrived last) 400: each of 0-6 waits 1,400 − 400 = 1,000 µs per step,
    # 10% of the 10,000 µs step, all of it exposed
    finding, section, view = _job([[1_400.0]] * 7 + [[400.0]])
    assert finding is not None
    assert finding.message.startswith(
        "Ranks 0–6 tie: each waits 1.00 ms per step inside collectives for other ranks to arrive, 1.00 ms (10.0%)"
    )
    assert "rank 7 arrives last to 1 of the 1 matched collectives" in finding.message
    assert finding.evidence.values["rank"] is None and finding.evidence.values["tied_ranks"] == [0, 1, 2, 3, 4, 5, 6]
    assert finding.saving_us == 1_000.0 and finding.ranks == [] and "Rank 0 " not in finding.message
    assert section.collective_wait.last_arrivals == [0, 0, 0, 0, 0, 0, 0, 1]
    assert "longest wait inside collectives: ranks 0–6 (a tie) 1.00 ms per step" in view
    assert "arrived last most often: rank 7 (1 of 1)" in view


def test_a_lone_waiter_and_a_tie_for_last_arrival() -> None:
    # two collectives on 4 ranks. First: rank 3's copy is the shortest (300): it arrived last; ranks 0-2 copy
    # 300, 900, 1,300 → waits 0, 600, 1,000 — rank 0's copy is as short as rank 3's: a tie, nobody is last.
    # Second: rank 1 is the only shortest (200); the others 700 → waits 500.
    # Per-rank wait per step: rank 0: 0 + 500 = 500; rank 1: 600 + 0 = 600; rank 2: 1,000 + 500 = 1,500;
    # rank 3: 0 + 500 = 500. Rank 2 waits longest, alone (15% of the step).
    finding, section, view = _job([[300.0, 700.0], [900.0, 200.0], [1_300.0, 700.0], [300.0, 700.0]])
    assert finding is not None
    assert finding.message.startswith(
        "Rank 2 waits 1.50 ms per step inside collectives for other ranks to arrive, 1.50 ms (15.0%)"
    )
    assert finding.evidence.values["rank"] == 2 and finding.ranks == [2]
    # last arrivals: collective 1 tied (ranks 0 and 3), collective 2 rank 1 alone
    assert section.collective_wait.last_arrivals == [0, 1, 0, 0]
    assert "rank 1 arrives last to 1 of the 2 matched collectives" in finding.message
    assert "arrived last most often: rank 1 (1 of 2)" in view


def test_last_arrivals_tied_between_two_ranks() -> None:
    # first collective: rank 3 alone shortest (300; the others 1,300 → wait 1,000 each);
    # second: rank 1 alone shortest (200; the others 700 → wait 500). Waits per step: ranks 0, 2: 1,500 (tie);
    # rank 1: 1,000; rank 3: 500. Ranks 1 and 3 each arrived last once: a tie.
    finding, section, view = _job([[1_300.0, 700.0], [1_300.0, 200.0], [1_300.0, 700.0], [300.0, 700.0]])
    assert finding is not None
    assert finding.message.startswith(
        "Ranks 0, 2 tie: each waits 1.50 ms per step inside collectives for other ranks to arrive, 1.50 ms (15.0%)"
    )
    assert "ranks 1, 3 tie, each arriving last to 1 of the 2 matched collectives" in finding.message
    assert finding.evidence.values["last_rank"] is None
    assert "arrived last most often: ranks 1, 3 (a tie) (1 of 2)" in view


def test_nobody_waits_nobody_named() -> None:
    # every rank's copy takes 400 µs: no wait, no last arrival; PD304 passes and the view names no rank
    finding, section, view = _job([[400.0]] * 8)
    assert finding is None
    assert section.collective_wait.last_arrivals == [0] * 8
    assert "no rank waits inside collectives; no rank arrived last alone to any collective" in view
    # every rank's step and shares are equal too: the view says so instead of naming rank 0
    assert "every rank 10.00 ms" in view and "every rank (40.0%)" in view
    assert "rank 0" not in view
