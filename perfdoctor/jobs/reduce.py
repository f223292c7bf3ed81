"""Rank summaries → the job's analysis and rule results (the reducing side; no raw events here).

:func:`reduce` checks the summaries belong to one job (one trace per rank), matches the ranks' collectives
(:func:`perfdoctor.crossrank.collectives.compute` on their timelines), and merges the rank-scope rule
outcomes with the job-scope rules (:func:`perfdoctor.checks.engine.combine`).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from perfdoctor.analysis.rank import Analysis, InputFile
from perfdoctor.errors import PerfDoctorError
from perfdoctor.jobs import fingerprint
from perfdoctor.jobs.summary import Outcomes, RankSummary, SummarisedRank
from perfdoctor.model.sections import RankSections

if TYPE_CHECKING:
    from perfdoctor.capture.run_data import RunData
    from perfdoctor.checks.catalogue import Catalogue
    from perfdoctor.checks.engine import CheckResults


@dataclass
class JobAnalysis:
    """What :func:`reduce` returns: the job's analysis (its ranks read back from their summaries), the rule
    results, the summaries analysed (by rank) and those that failed (by input order)."""

    analysis: Analysis[SummarisedRank]
    checks: CheckResults
    summaries: list[RankSummary]
    failed: list[RankSummary] = field(default_factory=list)

    def sections(self) -> RankSections:
        """The analysed ranks' report sections, still encoded (decoded when read)."""
        return RankSections([s.section for s in self.summaries if s.section is not None])


def reduce(
    summaries: list[RankSummary],
    cat: Catalogue,
    codes: list[str],
    run: RunData | None = None,
    extra_warnings: list[str] | None = None,
    no_trace: str | None = None,
) -> JobAnalysis:
    """The job's analysis and rule results from its rank summaries.

    ``run``: the ``perfdoctor profile`` RunData (job rules PD104, PD60x read it); ``extra_warnings`` are added
    after the ranks' warnings (before the rules run, as the rules may read them); ``no_trace``: why a run
    directory has no trace.

    Raises:
        PerfDoctorError: every input failed (the first one's error), the traces look like separate runs
            (:func:`_separate_runs`), the ranks were analysed by different perfdoctor code
            (:func:`perfdoctor.jobs.fingerprint.mixed_code`), or two traces claim the same rank.
    """
    from perfdoctor.checks import context as cx
    from perfdoctor.checks import engine

    failed = [s for s in summaries if s.error]
    ok = [s for s in summaries if not s.error]
    _refuse(ok, failed)
    inputs = [InputFile(**s.input) for s in sorted(ok, key=lambda s: s.index)]
    ok.sort(key=lambda s: s.rank if s.rank is not None else 0)
    analysis = Analysis(ranks=[SummarisedRank.of(s) for s in ok], inputs=inputs, run=run, no_trace=no_trace)
    analysis.warnings = _job_warnings(ok, failed, len(summaries)) + list(extra_warnings or [])
    _match_collectives(analysis, ok)
    # no step-level cap: each rank's replayed savings (and fix-all) already hold its collectives to its peers'
    # arrivals (crossrank/bounds.py, jobs/rounds.py)
    rank_ctx = [cx.RankContext(analysis, r) for r in analysis.ranks]
    results = engine.combine(analysis, rank_ctx, [Outcomes(s.outcomes) for s in ok], cat, codes)
    return JobAnalysis(analysis=analysis, checks=results, summaries=ok, failed=failed)


def _refuse(ok: list[RankSummary], failed: list[RankSummary]) -> None:
    """Raise the one-line refusal of summaries that make no job: every input failed (the first one's error),
    separate runs (:func:`_separate_runs`), mixed perfdoctor code, or two traces claiming one rank."""
    if failed and not ok:
        raise PerfDoctorError(str(failed[0].error))
    refusal = _separate_runs(ok) or fingerprint.mixed_code(ok)
    if refusal:
        raise PerfDoctorError(refusal)
    seen: dict[int, str] = {}
    for s in sorted(ok, key=lambda s: s.index):
        assert s.rank is not None
        if s.rank in seen:
            raise PerfDoctorError(
                f"{s.path}: rank {s.rank} is also the rank of {seen[s.rank]}: one report covers one job, one "
                f"trace per rank; to compare two runs, `perfdoctor diff {seen[s.rank]} {s.path}`, or report each "
                "file separately"
            )
        seen[s.rank] = s.path


def _job_warnings(ok: list[RankSummary], failed: list[RankSummary], n_inputs: int) -> list[str]:
    """The report's warnings from the ranks (``ok`` sorted by rank): each line the ranks give once, the ranks
    taken by their position (of ``n_inputs`` > 1), the ranks not analysed, and perfdoctor code differing between
    the workers and this process."""
    out = list(dict.fromkeys(w for s in ok for w in s.warnings))  # a line every rank shares: once
    if n_inputs > 1:
        out += [
            f"{s.path}: the trace names no rank (no distributedInfo.rank, none in the file name); "
            f"taken as rank {s.rank}, its position among the inputs"
            for s in sorted(ok, key=lambda s: s.index)
            if not s.rank_named
        ]
    out += [
        f"{s.path}: rank not analysed: {s.error}"
        if not str(s.error).startswith(s.path)
        else f"rank not analysed: {s.error}"
        for s in failed
    ]
    return out + [w for w in (fingerprint.reducer_differs(ok),) if w]


def _match_collectives(analysis: Analysis[SummarisedRank], ok: list[RankSummary]) -> None:
    """Set ``analysis.collective_wait`` (and its note) from the collective timelines of the GPU ranks with steps
    (:func:`perfdoctor.crossrank.collectives.compute`, cold steps of any rank left out), when there are two."""
    from perfdoctor.analysis.steps.warmup import job_cold_steps
    from perfdoctor.crossrank import collectives as collective_wait

    gpu = [s for s in ok if s.primary_kind == "gpu" and s.step_rows and s.collectives is not None]
    if len(gpu) < 2:
        return
    steps = {int(s.rank or 0): [int(r.step) for r in s.step_rows] for s in gpu}
    cold = job_cold_steps(steps, {int(s.rank or 0): s.cold_steps for s in gpu})[0]
    analysis.collective_wait, analysis.collective_wait_note = collective_wait.compute(
        [s.collectives for s in gpu if s.collectives is not None], cold_steps=cold
    )


def _separate_runs(ok: list[RankSummary]) -> str | None:
    """The one-line refusal when the traces look like separate runs rather than ranks of one job, else None.

    Separate runs: at least two traces whose ranks do not tell them apart (two claim the same rank, or a trace
    names no rank and says no ``world_size`` > 1) AND the traces name different GPU models
    (``deviceProperties``) AND none holds a collective kernel in its steps.
    """
    if len(ok) < 2:
        return None
    ranks = [s.rank for s in ok]
    ambiguous = len(set(ranks)) < len(ranks) or any(not s.rank_named and s.world_size <= 1 for s in ok)
    colls = any(s.collectives is not None and len(s.collectives.kind) > 0 for s in ok)
    by_devices: dict[str, RankSummary] = {}
    for s in sorted(ok, key=lambda s: s.index):
        if s.devices:
            by_devices.setdefault(s.devices, s)
    if not ambiguous or colls or len(by_devices) < 2:
        return None
    a, b = list(by_devices.values())[:2]
    return (
        f"{a.path}, {b.path}: these look like separate runs, not ranks of one job (different GPUs: "
        f"{a.devices} vs {b.devices}; no rank tells them apart; no collective kernels); to compare two runs, "
        f"`perfdoctor diff {a.path} {b.path}`, or report each file separately"
    )


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off inside (reference counting still frees what is dropped), back on
    after, as it was.

    The reducer holds every rank's summary (~1 M tracked objects at 4,096 ranks) while it makes and drops
    hundreds of thousands of small ones (each rule's outcome of each rank, decoded in turn); each full collection
    walks all of them: at 4,096 ranks (16 real summaries replicated, benchmarks/many_ranks.py) ``reduce`` took
    2.7-3.0 s of CPU with the collector on and 1.2-1.3 s with it off. The reducer makes no reference cycles of
    note; any it makes are collected once the collector is back on.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
