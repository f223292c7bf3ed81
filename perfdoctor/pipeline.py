"""trace files -> tables -> analyses -> report dict. No printing, no exiting.

:func:`analyze_paths` loads every trace (one per rank) and runs the analyses;
:func:`report_dict` turns the result into the versioned, JSON-able report
(schema documented in ``docs/report-schema.md``) that every renderer reads.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfdoctor import __version__
from perfdoctor.analysis import summary
from perfdoctor.analysis.breakdown import DeviceBreakdown, device_ids, gpu_breakdown, sum_steps
from perfdoctor.analysis.cpu_breakdown import cpu_breakdown
from perfdoctor.analysis.memory import memory_summary
from perfdoctor.analysis.steps import Steps, find_steps
from perfdoctor.analysis.trace_info import profiler_settings
from perfdoctor.replay.rank import replay_rank
from perfdoctor.trace import load_trace, trace_files_in
from perfdoctor.trace.tables import TraceTables

SCHEMA = "perfdoctor.report"
SCHEMA_VERSION = 1


@dataclass
class RankAnalysis:
    """Everything computed for one trace file (one rank).

    ``primary`` is the device breakdown the summary uses: the GPU with the most
    busy time, or the host breakdown for a CPU-only trace.
    """

    tables: TraceTables
    steps: Steps
    devices: list[DeviceBreakdown]
    warnings: list[str] = field(default_factory=list)
    roofline: Any = None  # perfdoctor.analysis.roofline.RooflineResult, see add_efficiency
    mfu: Any = None  # perfdoctor.analysis.mfu.MfuResult
    gemm_dtype: dict[str, Any] = field(default_factory=dict)  # {"dominant": str | None, "time_us": {dtype: µs}}
    replay: Any = None  # perfdoctor.replay.rank.RankReplay: the step's dependency graph, replayed

    @property
    def rank(self) -> int | None:
        return self.tables.rank

    @property
    def primary(self) -> DeviceBreakdown:
        return max(self.devices, key=lambda d: sum(s.busy_us for s in d.steps))


@dataclass
class Analysis:
    """All ranks of one report, plus run data from ``perfdoctor profile`` if given."""

    ranks: list[RankAnalysis]
    inputs: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    run: Any = None  # perfdoctor.capture.run_data.RunData when a run directory was given
    extras: dict[str, Any] = field(default_factory=dict)
    # perfdoctor.analysis.collective_wait.CollectiveWait of a multi-rank GPU job, and why it is None
    collective_wait: Any = None
    collective_wait_note: str = ""


def analyze_tables(tables: TraceTables, step_marker: str | None = None) -> RankAnalysis:
    """Steps and per-device breakdowns of one loaded trace."""
    steps = find_steps(tables, step_marker)
    devs = [gpu_breakdown(tables, steps, d) for d in device_ids(tables)]
    if not devs:
        devs = [cpu_breakdown(tables, steps)]
    warnings = list(tables.warnings) + list(steps.warnings)
    if devs and devs[0].kind == "gpu" and not tables.device_properties:
        from perfdoctor.analysis.arch import infer_from_tables

        guess = infer_from_tables(tables)
        if guess is not None:
            warnings.append(f"{tables.path}: no deviceProperties; GPU architecture inferred from kernel names: "
                            f"{guess.family} (compute capability {guess.compute_capability[0]}."
                            f"{guess.compute_capability[1]}, from {guess.evidence!r}); {guess.assumption}")
    replayed = replay_rank(tables, steps)
    if replayed.fallback:
        warnings.append(f"{tables.path}: replay: {replayed.fallback}; savings are upper bounds from interval rules")
    if tables.truncated and steps.source == "whole-trace" and tables.has_device_activity:
        # no step windows to drop: device activity the cut lost cannot be told from idle time
        warnings.append(f"{tables.path}: truncated and without step markers: GPU activity written after the cut "
                        "is missing and counts as idle, so idle is an upper bound and busy a lower bound")
    return RankAnalysis(tables=tables, steps=steps, devices=devs, warnings=warnings, replay=replayed)


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def analyze_paths(
    paths: list[str],
    step_marker: str | None = None,
    on_progress: Callable[[int], None] | None = None,
    hash_inputs: bool = True,
    model_flops_per_step: float | None = None,
    flops_source: str = "flop_counter",
    measured_roofs: Any = None,
    step_time_s_by_rank: dict[int, float] | None = None,
) -> Analysis:
    """Load and analyse trace files and directories (one trace per rank).

    Runs steps, breakdowns and :func:`add_efficiency` (roofline, MFU); see
    there for ``model_flops_per_step`` / ``measured_roofs``.

    Raises:
        TraceFormatError: a path is missing or not a trace.
        PerfDoctorError: two traces of the same rank (two runs mixed in one report).
    """
    files: list[str] = []
    for p in paths:
        files.extend(trace_files_in(p))
    ranks: list[RankAnalysis] = []
    inputs: list[dict[str, Any]] = []
    seen: dict[int, str] = {}
    for i, f in enumerate(files):
        tables = load_trace(f, on_progress)
        if tables.rank is None:
            tables.rank = i
        if tables.rank in seen:
            from perfdoctor.errors import PerfDoctorError

            raise PerfDoctorError(
                f"{f}: rank {tables.rank} is also the rank of {seen[tables.rank]}: one report covers one job, one "
                "trace per rank; to compare two runs, report each file separately")
        seen[tables.rank] = f
        ranks.append(analyze_tables(tables, step_marker))
        inputs.append({
            "path": f, "bytes": os.path.getsize(f), "sha256": _sha256(f) if hash_inputs else None,
            "events": tables.n_events, "uncompressed_bytes": tables.uncompressed_bytes,
        })
    ranks.sort(key=lambda r: (r.rank if r.rank is not None else 0))
    analysis = Analysis(ranks=ranks, inputs=inputs)
    add_efficiency(analysis, model_flops_per_step, flops_source, measured_roofs,
                   step_time_s_by_rank=step_time_s_by_rank)
    analysis.warnings = [w for r in ranks for w in r.warnings]
    gpu = [r for r in ranks if r.primary.kind == "gpu" and r.primary.steps]
    if len(gpu) > 1:
        from perfdoctor.analysis import collective_wait

        analysis.collective_wait, analysis.collective_wait_note = collective_wait.compute(
            [collective_wait.timeline(r) for r in gpu])
    return analysis


# Op-level FLOPs stand in for model FLOPs only when they cover the device time:
# above this share of uncosted time the sum would understate the work (a wrong MFU).
MAX_UNCOSTED_SHARE = 0.05
# communication ops move data, they do no model FLOPs: not counted as uncosted compute
_COMM_OP = re.compile(r"record_param_comms|^nccl:|^c10d::|gloo|all_?reduce|all_?gather|reduce_?scatter|broadcast")


def add_efficiency(analysis: Analysis, model_flops_per_step: float | None = None, flops_source: str = "flop_counter",
                   measured_roofs: Any = None, prefer: str = "spec",
                   step_time_s_by_rank: dict[int, float] | None = None) -> None:
    """Per-rank roofline and MFU (issue: roofline/MFU).

    Roofs are the matched GPU's datasheet figures (``prefer="spec"``) or
    ``measured_roofs`` (``perfdoctor calibrate``); a CPU-only trace only ever
    gets measured roofs, and only when they were measured on the machine that
    recorded it (the caller decides). MFU = model FLOP per step ÷ median step
    time of the rank's primary device ÷ the peak at the GEMMs' dtype. Model
    FLOPs are ``model_flops_per_step`` (FlopCounterMode from ``perfdoctor
    profile``, or the transformer estimate) when given; otherwise the op-level
    FLOP sum of the trace ÷ steps, but only when ops that could not be costed
    take at most :data:`MAX_UNCOSTED_SHARE` of the op time — else MFU is left
    out with the reason, never understated. ``step_time_s_by_rank`` (from a run
    directory: the median of each rank's steady-state steps outside the profiled
    window, so without profiler overhead) replaces the trace's median step time.
    """
    from perfdoctor.analysis.mfu import compute_mfu, gemm_dtype, roofs_for_trace
    from perfdoctor.analysis.roofline import roofline_table

    for r in analysis.ranks:
        roofs = roofs_for_trace(r.tables, measured_roofs, prefer)
        ops = r.tables.cpu_ops
        has_shapes = bool(len(ops)) and bool((ops["input_dims"] != None).any())  # noqa: E711 - object array
        r.roofline = roofline_table(r.tables, roofs) if has_shapes else None
        dtype, by_dtype = gemm_dtype(r.tables)
        r.gemm_dtype = {"dominant": dtype, "time_us": by_dtype}
        if r.steps.source == "whole-trace" or not r.primary.steps:
            r.warnings.append(f"{r.tables.path}: MFU not computed: no training steps in the trace")
            continue
        step_s = float(np.median([s.dur_us for s in r.primary.steps])) / 1e6
        run_step_s = (step_time_s_by_rank or {}).get(r.rank)
        if run_step_s:
            step_s = run_step_s
        on_gpu = bool(r.tables.has_device_activity)
        op_sum = r.roofline.total_flops / len(r.steps) if r.roofline is not None else None
        # the device's mean busy time per step ÷ the step time used: the most of a step it could compute in
        busy = min(float(np.mean([s.busy_us for s in r.primary.steps])) / 1e6 / step_s, 1.0)
        if model_flops_per_step is not None:
            r.mfu = compute_mfu(model_flops_per_step, step_s, roofs, dtype, flops_source, on_gpu, op_sum,
                                busy_fraction=busy,
                                hardware_flops_complete=r.roofline is not None and not _op_sum_unusable(r.roofline))
            if run_step_s:
                r.mfu.note = ("step time = median of the run's steady-state steps outside the profiled window "
                              "(no profiler overhead); " + r.mfu.note).rstrip("; ")
            continue
        reason = _op_sum_unusable(r.roofline)
        if reason:
            r.warnings.append(f"{r.tables.path}: MFU not computed: {reason}")
            continue
        r.mfu = compute_mfu(op_sum, step_s, roofs, dtype, "op_sum", on_gpu, op_sum)


def _op_sum_unusable(roofline: Any) -> str:
    """Why the op-level FLOP sum can't stand in for model FLOPs ("" when it can)."""
    if roofline is None:
        return ("no input shapes recorded (profile with record_shapes=True), and no model FLOPs given "
                "(perfdoctor profile measures them; or pass --params/--layers/--heads/--d-model/--seq-len)")
    uncosted = sum(u["time_us"] for u in roofline.uncosted if not _COMM_OP.search(u["name"]))
    total = roofline.costed_time_us + uncosted
    if total <= 0 or roofline.total_flops <= 0:
        return "no op could be costed from the recorded shapes"
    share = uncosted / total
    if share > MAX_UNCOSTED_SHARE:
        return (f"ops that could not be costed take {share:.0%} of op time, so the op-level FLOP sum would "
                "understate the work; give model FLOPs (perfdoctor profile, or --params/--layers/--heads/--d-model/--seq-len)")
    return ""


def _device_info(tables: TraceTables) -> list[dict[str, Any]]:
    out = []
    for p in tables.device_properties:
        if not isinstance(p, dict):
            continue
        cc = f"{p.get('computeMajor')}.{p.get('computeMinor')}" if "computeMajor" in p else None
        out.append({"id": p.get("id"), "name": p.get("name"), "memory_bytes": p.get("totalGlobalMem"),
                    "compute_capability": cc, "sm_count": p.get("numSms")})
    return out


def _device_dict(dev: DeviceBreakdown) -> dict[str, Any]:
    totals = sum_steps(dev.steps)
    step_us = np.array([s.dur_us for s in dev.steps])
    dur = totals.get("dur_us", 0.0)
    return {
        "device": dev.device,
        "kind": dev.kind,
        "utilization": (totals.get("busy_us", 0.0) / dur) if dur else None,
        "step_time_us": summary.distribution(step_us),
        "totals": totals,
        "steps": [s.to_dict() for s in dev.steps],
        "notes": dev.notes,
    }


def rank_dict(r: RankAnalysis) -> dict[str, Any]:
    """The report section of one rank (see docs/report-schema.md)."""
    window = (float(r.steps.start_us[0]), float(r.steps.end_us[-1])) if len(r.steps) else (-np.inf, np.inf)
    return {
        "rank": r.rank,
        "path": r.tables.path,
        "device_properties": _device_info(r.tables),
        "steps_source": r.steps.source,
        "step_marker": r.steps.marker,
        "primary_device": r.primary.device,
        "devices": [_device_dict(d) for d in r.devices],
        "top_kernels": summary.top_kernels(r.tables, window),
        "top_cpu_ops": summary.top_cpu_ops(r.tables, window, r.steps.pid),
        "memory": memory_summary(r.tables),
        "profiler": profiler_settings(r.tables.metadata),
        "roofline": r.roofline.to_dict() if r.roofline is not None else None,
        "mfu": r.mfu.to_dict() if r.mfu is not None else None,
        "gemm_dtype": r.gemm_dtype,
        "replay": r.replay.to_dict() if r.replay is not None else None,
        "warnings": r.warnings,
    }


def report_dict(analysis: Analysis, sections: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The versioned JSON-able report (schema ``perfdoctor.report`` v1); ``sections``: the ranks' sections
    when already made (from rank summaries), else :func:`rank_dict` of each rank."""
    ranks = sections if sections is not None else [rank_dict(r) for r in analysis.ranks]
    medians = {}
    for r, rd in zip(analysis.ranks, ranks):
        prim = next(d for d in rd["devices"] if d["device"] == r.primary.device)
        if prim["step_time_us"]:
            medians[r.rank] = prim["step_time_us"]["median"]
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "perfdoctor", "version": __version__},
        "inputs": analysis.inputs,
        "warnings": analysis.warnings,
        "ranks": ranks,
        "summary": summary.rank_summary(medians),
    }
    report.update(analysis.extras)
    return report


@dataclass
class BuiltReport:
    """What :func:`build` returns: the report dict, the analysis behind it and the check results."""

    report: dict[str, Any]
    analysis: Analysis
    checks: Any
    job: Any = None  # perfdoctor.jobs.reduce.JobAnalysis: the rank summaries behind the report


def is_run_dir(path: str) -> bool:
    """A directory written by ``perfdoctor profile`` (it holds a ``run.json``)."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "run.json"))


def _measured_cpu_roofs(run: Any) -> Any:
    """This machine's CPU calibration, if the run was recorded on this machine; else None.

    "This machine" = same hostname and CPU model in the run's ``run.json`` and in
    the calibration record: a CPU peak measured elsewhere says nothing about the
    machine in the trace.
    """
    from perfdoctor.analysis import calibration
    from perfdoctor.errors import PerfDoctorError

    if run is None:
        return None
    env, cpu = run.run.get("environment") or {}, run.run.get("cpu") or {}
    if env.get("cuda_available") or not env.get("hostname"):
        return None
    try:
        record = calibration.load_calibration()
    except PerfDoctorError:
        return None
    if record.get("hostname") != env.get("hostname") or record.get("cpu_model") != cpu.get("model"):
        return None
    try:
        return calibration.roofs_from_calibration(record, "cpu")
    except PerfDoctorError:
        return None


def _steady_step_times(run: Any) -> dict[int, float]:
    """Median steady-state step time (s) of each rank of a run directory, outside the profiled window."""
    from perfdoctor.capture.run_data import steady_state_of

    if run is None:
        return {}
    out = {}
    for rank, steps in run.rank_steps.items():
        ss = steady_state_of(steps)
        if ss is not None and ss.median_s > 0 and not ss.unstable:  # an unstable median is the noise's
            out[int(rank)] = float(ss.median_s)
    return out


def run_section(run: Any) -> dict[str, Any]:
    """The ``report["run"]`` section of a ``perfdoctor profile`` run directory.

    ``steps``: the whole run's series (``step``, ``duration_s`` in s); ``steady_state``:
    warm-up, phases and trend (:mod:`perfdoctor.analysis.steady_state`); ``throughput``:
    train-only and wall rates, each with its numerator and denominator.
    """
    from dataclasses import asdict

    ss = run.steady_state
    steps = {k: [None if (isinstance(x, float) and x != x) else x for x in v.tolist()]
             for k, v in run.steps.items()
             if k in ("step", "duration_s", "train_s", "eval_s", "checkpoint_s", "tokens", "samples", "profiler_phase")}
    throughput = {}
    for key, v in run.throughput().items():
        unit = "tokens" if "tokens" in key else "samples"
        if key.startswith("train"):
            num = f"{v[unit]:,.0f} {unit} in the {v['steps']} steady-state steps (warm-up and profiled steps excluded)"
            den = f"{v['seconds']:.3f} s, the sum of those steps' times"
            if v.get("excluded_s"):
                den = (f"{v['seconds']:.3f} s, the sum of those steps' train-only times (their "
                       f"{v['seconds'] + v['excluded_s']:.3f} s less {v['excluded_s']:.3f} s of evaluation and "
                       "checkpoint saving inside them)")
        else:
            num = f"{v[unit]:,.0f} {unit} in all {v['steps']} steps"
            den = f"{v['seconds']:.3f} s of wall time (script start to stop: includes set-up, evaluation, compilation)"
        throughput[key] = {"value": v["value"], "unit": f"{unit}/s", "numerator": num, "denominator": den}
    return {
        "path": str(run.path),
        "partial": run.partial,
        "stop_reason": run.run.get("stop_reason"),
        "steps_completed": run.run.get("steps_completed"),
        "wall_s": run.run.get("wall_s"),
        "flops_per_step": run.run.get("flops_per_step"),
        "parameter_count": run.run.get("parameter_count"),
        "tokens_per_step": run.run.get("tokens_per_step"),
        "samples_per_step": run.run.get("samples_per_step"),
        "steps": steps,
        "steady_state": None if ss is None else {**asdict(ss), "phase_change": ss.phase_change,
                                                 "steady_start_step": ss.steady_start_step},
        "throughput": throughput,
        "non_training": _non_training(run.steps),
    }


def _non_training(steps: dict[str, Any]) -> dict[str, Any]:
    """Evaluation and checkpoint time found inside training steps (s), and in how many steps."""
    import numpy as np

    out = {}
    for key in ("eval_s", "checkpoint_s"):
        v = np.nan_to_num(np.asarray(steps.get(key, []), dtype=float))
        out[key] = float(v.sum())
        out[key.replace("_s", "_steps")] = int((v > 0).sum())
    return out


def build(paths: list[str], step_marker: str | None = None, on_progress: Callable[[int], None] | None = None,
          rule_options: Any = None, model_flops_per_step: float | None = None,
          flops_source: str = "flop_counter", without_traces: str | None = None, executor: Any = None,
          cache: bool = False) -> BuiltReport:
    """The whole chain: paths → tables → analyses → findings → report dict.

    ``paths`` may name trace files, directories of per-rank traces, or a
    ``perfdoctor profile`` run directory, whose run data (step series, model
    FLOPs from FlopCounterMode, tokens, environment) then feeds MFU, the
    checks and the report's ``run`` section. ``rule_options`` is a
    :class:`perfdoctor.checks.config.RuleOptions` (default: ``[tool.perfdoctor]``
    of the working directory's pyproject.toml). A run directory without a
    trace (the run stopped before its profiled window), or with
    ``without_traces`` set (the reason its traces are not read, e.g. they
    failed to load), gives a run-only report: no ranks, the trace checks
    skipped, the run's step series, throughput and run checks kept.

    Raises:
        PerfDoctorError: bad input file, run directory or rule selection.
    """
    from perfdoctor.capture.run_data import load_run_dir
    from perfdoctor.checks import config, engine
    from perfdoctor.errors import PerfDoctorError

    opts = rule_options if rule_options is not None else config.resolve()
    catalogue, codes = engine.prepare(opts)
    run = None
    no_trace = None  # why a run directory has no trace (the run stopped before its profiled window)
    window_note = None  # which profiled window a run directory with several is reported on
    trace_paths: list[str] = []
    for p in paths:
        if is_run_dir(p):
            if run is not None:
                raise PerfDoctorError(f"{p}: only one run directory per report")
            run = load_run_dir(p)
            if without_traces:
                no_trace = (f"{p}: the run's traces were not analysed ({without_traces}); this report covers the "
                            "run's step series and throughput only")
            elif not run.traces:
                no_trace = _no_trace_reason(p, run)
            else:
                chosen, note = _last_window_per_rank(p, run.traces)
                trace_paths.extend(chosen)
                window_note = note
        else:
            trace_paths.append(p)
    if run is not None and model_flops_per_step is None and run.run.get("flops_per_step"):
        model_flops_per_step, flops_source = float(run.run["flops_per_step"]), "flop_counter"
    from perfdoctor.jobs.executors import InProcess
    from perfdoctor.jobs.reduce import reduce
    from perfdoctor.jobs.summary import SummaryOptions
    from perfdoctor.trace import trace_files_in

    files = [f for p in trace_paths for f in trace_files_in(p)]
    summary_opts = SummaryOptions(
        step_marker=step_marker, model_flops_per_step=model_flops_per_step, flops_source=flops_source,
        step_time_s_by_rank=_steady_step_times(run), run_json=run.run if run is not None else None,
        codes=list(codes), rules_dirs=[str(d) for d in getattr(opts, "rules_dirs", None) or []])
    runner = executor if executor is not None else InProcess(on_progress=on_progress)
    summaries = runner.summarise(files, summary_opts, catalogue, _measured_cpu_roofs(run), cache=cache)
    job = reduce(summaries, catalogue, codes, run, extra_warnings=[w for w in (window_note, no_trace) if w],
                 no_trace=no_trace)
    analysis, results = job.analysis, job.checks
    analysis.extras.update(results.to_report())
    if run is not None:
        analysis.extras["run"] = run_section(run)
        analysis.warnings.extend(_profiled_non_training(run))
    if len(job.summaries) + len(job.failed) > 1:
        from perfdoctor.jobs.cross_rank import job_section

        analysis.extras["job"] = job_section(job)
    return BuiltReport(report_dict(analysis, [s.section for s in job.summaries]), analysis, results, job)


def _profiled_non_training(run: Any) -> list[str]:
    """Warnings for profiled steps that held evaluation or checkpoint saving (their trace breakdown counts it)."""
    steps = run.steps
    if "eval_s" not in steps or not len(steps["eval_s"]):
        return []
    other = np.nan_to_num(steps["eval_s"]) + np.nan_to_num(steps["checkpoint_s"])
    hit = np.flatnonzero((steps["profiler_phase"] == "active") & (other > 0.05 * steps["duration_s"]))
    if not hit.size:
        return []
    which = ", ".join(f"#{int(steps['step'][i])} ({other[i] * 1e3:,.1f} of {steps['duration_s'][i] * 1e3:,.1f} ms)"
                      for i in hit[:5])
    return [f"{run.path}: profiled step(s) {which} held evaluation or checkpoint saving (model.eval() … "
            "model.train(), torch.save); the trace breakdown of those steps counts that work as step time"]


def _last_window_per_rank(path: str, traces: list[Any]) -> tuple[list[str], str | None]:
    """The last profiled window's trace of each rank of a run directory (``trace.rank<R>[.w<K>]...``), and a
    note naming the windows left out when a rank has several (``perfdoctor profile --repeat``)."""
    best: dict[int, tuple[int, str]] = {}
    per_rank: dict[int, int] = {}
    for t in traces:
        m = re.search(r"trace\.rank(\d+)(?:\.w(\d+))?\.pt\.trace", os.path.basename(str(t)))
        rank, window = (int(m.group(1)), int(m.group(2) or 0)) if m else (len(best), 0)
        per_rank[rank] = per_rank.get(rank, 0) + 1
        if rank not in best or window > best[rank][0]:
            best[rank] = (window, str(t))
    chosen = [best[r][1] for r in sorted(best)]
    several = max(per_rank.values(), default=1)
    note = None
    if several > 1:
        note = (f"{path}: {several} profiled windows per rank; this report analyses the last one "
                f"({', '.join(os.path.basename(c) for c in chosen[:2])}{', ...' if len(chosen) > 2 else ''}): the "
                "steady state a long run extrapolates to; `perfdoctor report` on another window's trace file "
                "analyses that one")
    return chosen, note


def _no_trace_reason(path: str, run: Any) -> str:
    """Why the run directory ``path`` has no trace, and what the report then covers."""
    done = run.run.get("steps_completed")
    if not done:
        return (f"{path}: no training step was seen, so there is no trace and no step series: perfdoctor counts "
                "optimizer.step() calls of torch.optim optimizers; a loop without one must call perfdoctor.step() "
                "once per step (import perfdoctor)")
    windows = [w for r in run.run.get("ranks") or [] for w in r.get("windows") or []]
    where = (f" (profiled window at steps {windows[0]['first_step']}–{windows[0]['last_step']})"
             if windows else "")
    return (f"{path}: the run stopped after {done} steps, before its profiled window completed{where}: there is no "
            "trace, so this report covers the run's step series and throughput only (profile again with fewer "
            "--steps or a smaller --wait to get a trace)")


def build_report(paths: list[str], run_dir: str | None = None, partial: bool = False, **kwargs: Any) -> dict[str, Any]:
    """Report dict for trace paths, or for a run directory (``perfdoctor profile`` calls this)."""
    built = build([run_dir] if run_dir else paths, **kwargs)
    if partial:
        built.report["partial"] = True
    return built.report
