"""Build the typed :class:`~perfdoctor.model.report.Report` from an analysis and its check results.

Each ``*_section`` function turns one analysis result into its report section. The step breakdown, roofline,
MFU and a job's cross-rank section are the analyses' own Structs, embedded as they are (:func:`as_read_back` for
those whose ``float | None`` fields may hold NaN); other results (findings, summaries) are converted through their
JSON form, so the Report in memory equals the one read back from its JSON (NaN is ``None`` in both).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict, TypeVar

import msgspec
import numpy as np
import orjson
from msgspec import UNSET

from perfdoctor import __version__
from perfdoctor.analysis import summary
from perfdoctor.analysis.memory.memory_steps import memory_over_steps
from perfdoctor.analysis.memory.peaks import memory_summary
from perfdoctor.analysis.timing.breakdown import DeviceBreakdown, sum_steps
from perfdoctor.analysis.trace_info import profiler_settings
from perfdoctor.analysis.work.hardware import identified_name
from perfdoctor.errors import PerfDoctorError
from perfdoctor.model import report as m
from perfdoctor.model.sections import RankSections

if TYPE_CHECKING:
    from perfdoctor.analysis.rank import Analysis, RankAnalysis, RankResult
    from perfdoctor.checks.engine import CheckResults
    from perfdoctor.trace.tables import TraceTables

T = TypeVar("T")
_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def plain(obj: object, typ: type[T], what: str = "report section") -> T:
    """``obj`` (dicts, lists, numbers, numpy values, dataclasses) as ``typ`` through its JSON form.

    Raises:
        PerfDoctorError: ``obj`` does not have the shape of ``typ`` (an analysis wrote an unexpected field
            type: a bug, named with the field's path).
    """
    try:
        return msgspec.json.decode(orjson.dumps(obj, option=_OPTS), type=typ)
    except (msgspec.ValidationError, TypeError, orjson.JSONEncodeError) as exc:
        raise PerfDoctorError(f"{what}: cannot be written to the report ({exc})") from None


S = TypeVar("S", bound=msgspec.Struct)


def as_read_back(section: S) -> S:
    """``section`` as its JSON reads back: a non-finite float of a ``float | None`` field becomes None, so the
    report in memory equals the one read from its file (msgspec writes NaN and infinities as ``null``)."""
    return msgspec.json.decode(msgspec.json.encode(section), type=type(section))


def _int_or_none(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def device_properties(tables: TraceTables) -> list[m.DeviceProperties]:
    """The trace's ``deviceProperties``; values of the wrong type (hostile traces) are left out as None."""
    out = []
    props: list[object] = list(tables.device_properties)
    for p in props:
        if not isinstance(p, dict):
            continue
        cc = f"{p.get('computeMajor')}.{p.get('computeMinor')}" if "computeMajor" in p else None
        name = p.get("name")
        out.append(
            m.DeviceProperties(
                id=_int_or_none(p.get("id")),
                name=None if name is None else str(name),
                memory_bytes=_int_or_none(p.get("totalGlobalMem")),
                compute_capability=cc,
                sm_count=_int_or_none(p.get("numSms")),
                identified=identified_name(p) or UNSET,
            )
        )
    return out


def device_section(dev: DeviceBreakdown) -> m.DeviceSection:
    """One device's breakdown: utilization = Σ busy ÷ Σ step time; step time distribution (µs)."""
    totals = sum_steps(dev.steps)
    return m.DeviceSection(
        device=dev.device,
        kind=dev.kind,
        utilization=(totals.busy_us / totals.dur_us) if totals.dur_us else None,
        step_time_us=plain(
            summary.distribution(np.array([s.dur_us for s in dev.steps])), m.Distribution, "step_time_us"
        ),
        totals=totals,
        steps=list(dev.steps),
        notes=list(dev.notes),
    )


def memory_section(r: RankAnalysis) -> m.MemorySection:
    """Peaks per device and allocator calls (:func:`memory_summary`), and memory over the steps
    (:func:`memory_over_steps`) when the ``[memory]`` events carry allocator totals."""
    section = memory_summary(r.tables)
    over = memory_over_steps(r.tables, r.steps)
    if over:
        section["over_step"] = over
    return plain(section, m.MemorySection, "memory")


def rank_section(r: RankAnalysis) -> m.RankSection:
    """The report section of one rank (see docs/report-schema.md "ranks")."""
    window = (float(r.steps.start_us[0]), float(r.steps.end_us[-1])) if len(r.steps) else (-np.inf, np.inf)
    return m.RankSection(
        rank=r.rank,
        path=r.tables.path,
        device_properties=device_properties(r.tables),
        steps_source=r.steps.source,
        step_marker=r.steps.marker,
        primary_device=r.primary.device,
        devices=[device_section(d) for d in r.devices],
        top_kernels=plain(summary.top_kernels(r.tables, window), list[m.TopKernel], "top_kernels"),
        top_cpu_ops=plain(summary.top_cpu_ops(r.tables, window, r.steps.pid), list[m.TopCpuOp], "top_cpu_ops"),
        memory=memory_section(r),
        profiler=profiler_settings(r.tables.metadata),
        roofline=None if r.roofline is None else as_read_back(r.roofline),
        mfu=None if r.mfu is None else as_read_back(r.mfu),
        mfu_missing=r.mfu_missing if r.mfu_missing is not None else UNSET,
        gemm_dtype=m.GemmDtype(dominant=r.gemm_dtype.dominant, time_us=dict(r.gemm_dtype.time_us)),
        replay=None if r.replay is None else plain(r.replay.to_dict(), m.ReplaySection, "replay"),
        warnings=list(r.warnings),
    )


def summary_section(ranks: Sequence[m.RankSection]) -> m.Summary:
    """Spread of the median step time across the ranks (each rank's primary device; from a
    :class:`~perfdoctor.model.sections.RankSections` without decoding its sections)."""
    medians = (
        ranks.median_steps_us()
        if isinstance(ranks, RankSections)
        else {r.rank: r.primary.step_time_us.median for r in ranks if r.rank is not None}
    )
    s = summary.rank_summary(medians)
    if not medians:
        return m.Summary(n_ranks=0)
    return m.Summary(
        n_ranks=s["n_ranks"],
        slowest_rank=s["slowest_rank"],
        fastest_rank=s["fastest_rank"],
        median_step_us=dict(s["median_step_us"]),
        spread_pct=float(s["spread_pct"]),
    )


def plan_entries(findings: list[m.FindingSection]) -> list[m.PlanEntry]:
    """The fix plan's entries, in plan order, from the findings that hold a plan position."""
    return [
        m.PlanEntry(
            code=f.code,
            headline=f.headline,
            saving_us_per_step=f.saving_us_per_step,
            saving_pct_of_step=f.saving_pct_of_step,
            step_after_us=f.step_after_us,
            n_ranks=max(len(f.ranks), 1),
        )
        for f in sorted(findings, key=lambda f: f.plan_position or 0)
        if f.plan_position is not None and f.step_after_us is not None
    ]


class CheckSections(TypedDict, total=False):
    """The Report's fields that come from the check results (and the verdict line read from them)."""

    denominator: m.Denominator | None
    findings: list[m.FindingSection]
    plan: list[m.PlanEntry]
    skipped_checks: list[m.SkippedCheck]
    passed_checks: list[str]
    findings_note: str
    verdict: str


def check_sections(results: CheckResults) -> CheckSections:
    """``findings``, ``skipped_checks``, ``passed_checks``, ``findings_note`` and ``denominator`` of the Report."""
    rep = results.to_report()
    denom = rep["denominator"]
    findings = plain(rep["findings"], list[m.FindingSection], "findings")
    return CheckSections(
        denominator=None if denom is None else plain(denom, m.Denominator, "denominator"),
        findings=findings,
        plan=plan_entries(findings),
        skipped_checks=plain(rep["skipped_checks"], list[m.SkippedCheck], "skipped_checks"),
        passed_checks=list(rep["passed_checks"]),
        findings_note=str(rep["findings_note"]),
    )


def build_report(
    analysis: Analysis[RankResult],
    run: m.RunSection | None = None,
    sections: Sequence[m.RankSection | Mapping[str, object]] | None = None,
    job: m.JobSection | None = None,
) -> m.Report:
    """The whole typed report of ``analysis`` (its ranks, check results and warnings) and of the run
    directory's ``run`` section (:func:`perfdoctor.capture.run_section.run_section`), if any.

    ``sections``: the ranks' sections when already made (rank summaries made them, maybe in another process:
    :class:`~perfdoctor.model.sections.RankSections`, kept encoded, or plain dicts), else :func:`rank_section`
    of each rank; ``job``: the cross-rank section of a multi-rank job
    (:func:`perfdoctor.crossrank.job_section.job_section`)."""
    ranks: Sequence[m.RankSection]
    if sections is None:
        ranks = [rank_section(t) for r in analysis.ranks if (t := r.trace) is not None]
    elif isinstance(sections, RankSections):  # kept encoded: thousands of ranks
        ranks = sections
    else:
        ranks = [s if isinstance(s, m.RankSection) else plain(s, m.RankSection, "rank section") for s in sections]
    checks = check_sections(analysis.checks) if analysis.checks is not None else CheckSections()
    summ = summary_section(ranks)
    from perfdoctor.model.verdict import verdict

    line = verdict(ranks, checks.get("findings") or [], summ.slowest_rank if summ.slowest_rank is not UNSET else None)
    if line:
        checks["verdict"] = line
    return m.Report(
        tool=m.Tool(name="perfdoctor", version=__version__),
        inputs=plain(analysis.inputs, list[m.InputFile], "inputs"),
        warnings=list(analysis.warnings),
        ranks=ranks,
        summary=summ,
        run=run if run is not None else UNSET,
        no_trace=analysis.no_trace if analysis.no_trace else UNSET,
        partial=True if analysis.partial else UNSET,
        job=job if job is not None else UNSET,
        **checks,
    )
