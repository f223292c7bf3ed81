"""trace files -> tables -> analyses -> findings -> the typed report. No printing, no exiting.

This module only sequences the stages: :mod:`perfdoctor.jobs.task` loads and analyses each rank's trace (its
per-rank stage, :func:`perfdoctor.jobs.rank_stage.analyse_rank`), :mod:`perfdoctor.capture.run_data` reads a
``perfdoctor profile`` run directory, :mod:`perfdoctor.checks.engine` runs the rules and
:mod:`perfdoctor.model.build` writes the :class:`~perfdoctor.model.report.Report` (schema in
``docs/report-schema.md``) every renderer reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfdoctor.analysis.rank import Analysis, RankAnalysis, RankResult
from perfdoctor.analysis.work.mfu import ModelFlops
from perfdoctor.capture.rundir import is_run_dir
from perfdoctor.jobs.rank_stage import analyze_tables
from perfdoctor.model import Report, to_builtins
from perfdoctor.model.report import SCHEMA, SCHEMA_VERSION

if TYPE_CHECKING:
    from perfdoctor.capture.run_data import RunData
    from perfdoctor.checks.catalogue import Catalogue
    from perfdoctor.checks.config import RuleOptions
    from perfdoctor.checks.engine import CheckResults
    from perfdoctor.jobs.executors import Executor
    from perfdoctor.jobs.reduce import JobAnalysis
    from perfdoctor.jobs.summary import RankSummary, SummaryOptions
    from perfdoctor.timeline.tracks import RankTimeline

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "Analysis",
    "BuiltReport",
    "RankAnalysis",
    "analyze_tables",
    "build",
    "build_report",
    "is_run_dir",
]


@dataclass
class BuiltReport:
    """What :func:`build` returns: the typed report, the analysis behind it and the check results."""

    model: Report
    analysis: Analysis[RankResult]
    checks: CheckResults
    job: JobAnalysis | None = None  # the rank summaries behind the report

    def timelines(self) -> list[RankTimeline]:
        """The ranks' annotated timelines (made when :func:`build` was given ``timeline_steps``), by rank."""
        summaries = self.job.summaries if self.job is not None else []
        return [s.timeline for s in summaries if s.timeline is not None]

    @property
    def report(self) -> dict[str, Any]:
        """The report as the JSON document's plain dicts and lists (``to_builtins(model)``)."""
        return to_builtins(self.model)


def _read_run_dir(
    path: str, without_traces: str | None, loaded: RunData | None
) -> tuple[RunData, list[str], str | None, str | None]:
    """A run directory's data (``loaded``: already loaded by the caller, else loaded here), the traces to analyse
    (the last window per rank), the note on windows left out, and why there is no trace to analyse (None when
    there is)."""
    from perfdoctor.capture.no_trace import no_trace_reason
    from perfdoctor.capture.run_data import load_run_dir
    from perfdoctor.capture.rundir import last_window_per_rank

    run = loaded if loaded is not None and loaded.path == Path(path) else load_run_dir(path)
    if without_traces:
        return (
            run,
            [],
            None,
            (
                f"{path}: the run's traces were not analysed ({without_traces}); this report "
                "covers the run's step series and throughput only"
            ),
        )
    if not run.traces:
        return run, [], None, no_trace_reason(path, run)
    chosen, note = last_window_per_rank(path, run.traces)
    return run, chosen, note, None


def build(
    paths: list[str],
    step_marker: str | None = None,
    on_progress: Callable[[int], None] | None = None,
    rule_options: RuleOptions | None = None,
    model_flops: ModelFlops | None = None,
    without_traces: str | None = None,
    executor: Executor | None = None,
    cache: bool = False,
    timeline_steps: list[int] | None = None,
    loaded_run: RunData | None = None,
) -> BuiltReport:
    """The whole chain: paths → per-rank summaries → job analysis and findings → typed report.

    ``paths`` may name trace files, directories of per-rank traces, or one ``perfdoctor profile`` run
    directory, whose run data (step series, model FLOPs from FlopCounterMode, tokens, environment) then
    feeds MFU, the checks and the report's ``run`` section. ``rule_options``: default ``[tool.perfdoctor]``
    of the working directory's pyproject.toml. A run directory without a trace (the run stopped before its
    profiled window), or with ``without_traces`` set (why its traces are not read, e.g. they failed to
    load), gives a run-only report: no ranks, the trace checks skipped, the run's series and checks kept.
    ``executor`` (:mod:`perfdoctor.jobs.executors`; default: this process) makes each rank's summary,
    ``cache`` reuses summaries stored under :func:`perfdoctor.jobs.summary.cache_dir`. ``timeline_steps``: make each
    rank's annotated timeline of these steps (``[]``: its median and slowest; None: none), kept in the job's
    summaries for :func:`perfdoctor.render.timeline.write_timeline`. ``loaded_run``: the run directory among ``paths``
    as the caller already loaded it (:func:`perfdoctor.capture.run_data.load_run_dir`), so it is read once.

    Raises:
        PerfDoctorError: bad input file, run directory or rule selection.
    """
    from perfdoctor.checks import config, engine
    from perfdoctor.jobs.executors import InProcess
    from perfdoctor.jobs.reduce import gc_paused, reduce
    from perfdoctor.trace import trace_files_in

    opts = rule_options if rule_options is not None else config.resolve()
    catalogue, codes = engine.prepare(opts)
    inputs = _inputs(paths, without_traces, loaded_run)
    run = inputs.run
    if run is not None and model_flops is None and run.facts.flops_per_step:
        model_flops = ModelFlops(float(run.facts.flops_per_step), "flop_counter")
    files = [f for p in inputs.trace_paths for f in trace_files_in(p)]
    summary_opts = _summary_options(run, len(files), opts, list(codes), step_marker, model_flops, timeline_steps)
    runner = executor if executor is not None else InProcess(on_progress=on_progress)
    summaries = _summarise(files, summary_opts, catalogue, run, runner, cache)
    with gc_paused():  # the reducer: thousands of summaries held, little cyclic garbage made
        job = reduce(summaries, catalogue, codes, run, extra_warnings=inputs.notes, no_trace=inputs.no_trace)
        # --select shows a subset of the findings every rule gave (same numbers, same firing decisions)
        job.checks = job.checks.shown(engine.shown_codes(catalogue, opts), engine.ignored_note(catalogue, opts))
        job.analysis.checks = job.checks
        model = _model(job, run)
    return BuiltReport(model, job.analysis, job.checks, job)


@dataclass
class _Inputs:
    """What :func:`build` reads from its paths: a ``perfdoctor profile`` run directory's data (None without
    one), the trace paths to analyse, warnings about them, and why there is no trace (None when there is)."""

    run: RunData | None
    trace_paths: list[str]
    notes: list[str]
    no_trace: str | None


def _inputs(paths: list[str], without_traces: str | None, loaded_run: RunData | None) -> _Inputs:
    """``paths`` sorted into trace paths and at most one run directory (:func:`_read_run_dir`; ``loaded_run``: that
    directory already loaded by the caller).

    Raises:
        PerfDoctorError: two run directories.
    """
    from perfdoctor.errors import PerfDoctorError

    out = _Inputs(None, [], [], None)
    for p in paths:
        if not is_run_dir(p):
            out.trace_paths.append(p)
            continue
        if out.run is not None:
            raise PerfDoctorError(f"{p}: only one run directory per report")
        out.run, chosen, window_note, out.no_trace = _read_run_dir(p, without_traces, loaded_run)
        out.trace_paths.extend(chosen)
        out.notes += out.run.warnings + [n for n in (window_note, out.no_trace) if n]
    return out


def _summary_options(
    run: RunData | None,
    n_files: int,
    opts: RuleOptions,
    codes: list[str],
    step_marker: str | None,
    model_flops: ModelFlops | None,
    timeline_steps: list[int] | None,
) -> SummaryOptions:
    """What every rank's task is given: :func:`build`'s options and the run directory's per-rank series."""
    from perfdoctor.capture import run_data
    from perfdoctor.jobs.summary import SummaryOptions

    rank_inputs = run_data.rank_inputs(run)
    return SummaryOptions(
        step_marker=step_marker,
        model_flops=model_flops,
        step_time_s_by_rank=rank_inputs.step_time_s,
        run_allocator_by_rank=rank_inputs.allocator,
        run_cpu_by_rank=rank_inputs.cpu,
        run_json=run.run if run is not None else None,
        codes=codes,
        rules_dirs=[str(d) for d in opts.rules_dirs or []],
        joint=n_files > 1,
        timeline_steps=timeline_steps,
        measured_roofs=run_data.measured_cpu_roofs(run.facts.environment, run.facts.cpu) if run is not None else None,
    )


def _summarise(
    files: list[str],
    opts: SummaryOptions,
    catalogue: Catalogue,
    run: RunData | None,
    runner: Executor,
    cache: bool,
) -> list[RankSummary]:
    """Every rank's summary made by ``runner``, then the ranks that arrived last made again with their peers'
    arrivals (:func:`perfdoctor.jobs.rounds.with_peer_arrivals`)."""
    from perfdoctor.jobs.rounds import with_peer_arrivals

    summaries = runner.summarise(files, opts, catalogue, cache=cache)
    return with_peer_arrivals(files, summaries, opts, catalogue, cache, runner)


def _model(job: JobAnalysis, run: RunData | None) -> Report:
    """The typed report of the reduced ``job``: its analysis, the run directory's section and, for several
    ranks, the cross-rank ``job`` section (:func:`perfdoctor.crossrank.job_section.job_section`)."""
    from perfdoctor.capture.run_section import run_section, section_warnings
    from perfdoctor.model.build import build_report as build_model

    analysis = job.analysis
    section = None
    if run is not None:
        section = run_section(run)
        analysis.warnings += section_warnings(run)
    job_sec = None
    if len(job.summaries) + len(job.failed) > 1:
        from perfdoctor.crossrank.job_section import job_section

        job_sec = job_section(job)
    return build_model(analysis, section, sections=job.sections(), job=job_sec)


def build_report(
    paths: list[str],
    run_dir: str | None = None,
    partial: bool = False,
    without_traces: str | None = None,
    loaded_run: RunData | None = None,
) -> Report:
    """Typed report for trace paths, or for a run directory (``perfdoctor profile`` calls this; ``without_traces``
    and ``loaded_run``: :func:`build`'s)."""
    built = build([run_dir] if run_dir else paths, without_traces=without_traces, loaded_run=loaded_run)
    if partial:
        built.model.partial = True
    return built.model
