"""One rank as the rule engine reads it (:class:`perfdoctor.analysis.rank.RankResult`): the worker's whole analysis
and the same rank read back from its summary where the job's ranks meet give the engine the same facts."""

from __future__ import annotations

from pathlib import Path

import pytest
from analysed import rank_analysis
from tracebuilder import TraceBuilder

from perfdoctor.analysis.rank import Analysis
from perfdoctor.checks import config, engine, requirements
from perfdoctor.checks.context import JobContext, RankContext
from perfdoctor.jobs.summary import SummarisedRank, decode, encode, rank_summary

GEMM = "ampere_sgemm_128x64_nn"


def _three_steps(path: Path) -> Path:
    """Three 1,000 µs ProfilerSteps (#4, #5, #6), each launching one 400 µs GEMM; no shapes, no memory events."""
    tb = TraceBuilder(rank=3, world_size=4)
    for i, n in enumerate((4, 5, 6)):
        t0 = 1000.0 * i
        tb.step(n, t0, 1000.0)
        tb.cpu_op("aten::mm", t0 + 50.0, 100.0)
        tb.launch(GEMM, t0 + 60.0, t0 + 200.0, 400.0)
    return tb.write(path)


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[Analysis, SummarisedRank]:
    """The worker's analysis of the trace, and its rank read back from its summary (msgpack round trip)."""
    analysis = rank_analysis(_three_steps(tmp_path_factory.mktemp("t") / "t.json"))
    cat, codes = engine.prepare(config.resolve())
    summary = rank_summary(analysis, analysis.ranks[0], 0, {}, cat, engine.check_order(cat, codes))
    return analysis, SummarisedRank.of(decode(encode([summary]))[0])


def test_a_rank_read_back_from_its_summary_gives_the_engine_what_its_worker_had(
    both: tuple[Analysis, SummarisedRank],
) -> None:
    analysis, read_back = both
    worker = analysis.ranks[0]
    # the trace names rank 3 (distributedInfo); its steps are #4-#6, found from ProfilerStep annotations
    assert worker.rank == read_back.rank == 3
    assert read_back.steps.numbers == [4, 5, 6] and len(read_back.steps) == len(worker.steps) == 3
    assert read_back.steps.source == worker.steps.source == "ProfilerStep"
    assert read_back.steps.cold_steps() == worker.steps.cold_steps()
    assert read_back.primary.kind == worker.primary.kind == "gpu"
    # each step: its 1,000 µs ProfilerStep window, the device busy 400 µs in its GEMM
    assert [s.dur_us for s in read_back.primary.steps] == [s.dur_us for s in worker.primary.steps] == [1000.0] * 3
    assert [s.busy_us for s in read_back.primary.steps] == [s.busy_us for s in worker.primary.steps] == [400.0] * 3
    # where the tables are, and where the summary is: each side holds one of them
    assert worker.trace is worker and worker.summary is None
    assert read_back.trace is None and read_back.summary is not None
    # a bare trace: no profile run, so no unprofiled step on either side
    assert worker.unprofiled is None and read_back.unprofiled is None


def test_requirements_judged_on_the_tables_and_read_back_agree(both: tuple[Analysis, SummarisedRank]) -> None:
    analysis, read_back = both
    job = Analysis(ranks=[read_back], inputs=[])
    for req in requirements.RANK_REQUIREMENTS:
        assert requirements.missing(req, analysis, analysis.ranks[0]) == requirements.missing(req, job, read_back)
    # what the trace lacks, as recorded: no Input Dims, no [memory] events; it has steps and GPU activity
    assert requirements.missing("shapes", job, read_back) == "shapes not recorded (torch.profiler record_shapes=True)"
    assert requirements.missing("memory", job, read_back) == "no memory events (torch.profiler profile_memory=True)"
    assert requirements.missing("steps", job, read_back) is None
    assert requirements.missing("device", job, read_back) is None
    # the job's requirements are the job's: one rank, no run directory
    assert (
        requirements.missing("multi_rank", job, read_back)
        == "single rank: needs the traces of several ranks of one job"
    )
    assert (
        requirements.missing("run", job, read_back) == "no run data (record with `perfdoctor profile` to get run.json)"
    )


def test_a_context_on_either_side_states_the_same_step(both: tuple[Analysis, SummarisedRank]) -> None:
    analysis, read_back = both
    here = RankContext(analysis, analysis.ranks[0])
    there = RankContext(Analysis(ranks=[read_back], inputs=[]), read_back)
    assert here.has_trace and not there.has_trace
    assert here.step_numbers == there.step_numbers == [4, 5, 6]
    # the mean of three 1,000 µs steps; a bare trace's savings are taken from that same step
    assert here.step_us == there.step_us == 1000.0 and here.base_step_us == there.base_step_us == 1000.0
    # no step is a cold start: the job's cross-rank statistics keep all three
    assert JobContext(there.analysis, [there]).cold[0] == set()
    assert there.built_replay() is None and here.built_replay() is analysis.ranks[0].replay
