"""Sequence the diff stages: two loaded sides (one or more runs each) → :class:`perfdoctor.diff.model.Diff`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import msgspec

from perfdoctor import __version__
from perfdoctor.diff import categories, efficiency, findings, movers, scaling, stats, steps, window, work
from perfdoctor.diff import runs as runs_mod
from perfdoctor.diff.model import (
    SCHEMA,
    SCHEMA_VERSION,
    CategoryRow,
    Diff,
    Pair,
    RunInfo,
    Scaling,
    SideInfo,
    Statistics,
    Throughput,
    WorkComparison,
)
from perfdoctor.diff.pool import mean_present
from perfdoctor.diff.sides import Side
from perfdoctor.errors import PerfDoctorError
from perfdoctor.model import Report

UNKNOWN_GPU = "GPU (no deviceProperties in the trace)"
VERDICT_WORDS = {
    "faster": "faster",
    "slower": "slower",
    "no-change": "no significant change",
    "inconclusive": "inconclusive",
}


def _run_facts(side: Side) -> tuple[int, str, int | None]:
    """(ranks, primary device name, parameter count) of one run."""
    ranks = side.model.ranks
    run = steps.run_of(side.model)
    device = (run.device if run is not None else None) or "–"  # a run without a trace: run.json's device
    if ranks:
        dev = steps.primary_device(ranks[0])
        props = ranks[0].device_properties
        if dev is not None and dev.kind == "cpu":
            device = "CPU"
        else:
            want = dev.device if dev is not None else None
            device = next(
                (str(p.name) for p in props if p.id == want and p.name),
                str(props[0].name) if props and props[0].name else UNKNOWN_GPU,
            )
    return len(ranks), device, run.parameter_count if run is not None else None


def side_info(runs: Sequence[Side], series: Sequence[steps.StepSeries]) -> SideInfo:
    """Path(s), kind, rank count, primary device name and parameter count of a side (its first run's), and one
    :class:`RunInfo` per run with the steps compared from it."""
    n_ranks, device, params = _run_facts(runs[0])
    kinds = {r.kind for r in runs}
    return SideInfo(
        path=", ".join(r.path for r in runs),
        kind=kinds.pop() if len(kinds) == 1 else "mixed",
        n_ranks=n_ranks,
        device=device,
        parameter_count=params,
        runs=[
            RunInfo(
                r.path,
                r.kind,
                int(x.values_us.size),
                float(x.values_us.mean()),
                x.steady_start_step,
                _partial(r),
                run.steps_completed if (run := steps.run_of(r.model)) is not None else None,
            )
            for r, x in zip(runs, series)
        ],
    )


def _within_side(side: str, runs: Sequence[Side], series: Sequence[steps.StepSeries]) -> list[str]:
    """What makes the runs of one side less alike: different rank counts, devices, models; equal means."""
    if len(runs) < 2:
        return []
    out = []
    facts = [_run_facts(r) for r in runs]
    for i, what in ((0, "rank counts"), (1, "devices"), (2, "parameter counts")):
        values = sorted({str(f[i]) for f in facts if f[i] is not None})
        if len(values) > 1:
            out.append(f"{side}'s runs differ in {what} ({', '.join(values)}): they may not be runs of one setup")
    means = [float(x.values_us.mean()) for x in series]
    if len(set(means)) < len(means):
        out.append(
            f"{side} has runs with the same mean step to the last digit: the same run given twice? Its run-to-run "
            "noise is then understated"
        )
    return out


def _partial(side: Side) -> str | None:
    """Why a run that did not complete stopped (run.json's ``stop_reason``), None for a complete run or a trace."""
    run = steps.run_of(side.model)
    if run is None or not run.partial:
        return None
    return run.stop_reason or "the run did not complete"


def _partial_notes(b: SideInfo, a: SideInfo) -> list[str]:
    """A warning per run that did not complete: its steps are those before it stopped."""
    out = []
    several = len(b.runs) > 1 or len(a.runs) > 1
    for side, info in (("BEFORE", b), ("AFTER", a)):
        for i, r in enumerate(info.runs):
            if r.partial is None:
                continue
            label = f"{side} run {i + 1}" if several else side
            done = f" (after {r.steps_completed} training steps)" if r.steps_completed is not None else ""
            out.append(
                f"{label} ({r.path}) is partial: {r.partial}{done}; it is compared on the steps it ran before it "
                f"stopped, which may not be the steady state of a complete run"
            )
    return out


def partial_gate(diff: Diff) -> str | None:
    """Why ``--fail-on-regression`` cannot pass this diff: a side holds a run that did not complete (a crashed or
    interrupted run is no evidence that the change is not a regression); None when every run completed."""
    for side, info in (("BEFORE", diff.before), ("AFTER", diff.after)):
        for r in info.runs:
            if r.partial is not None:
                return f"{side} ({r.path}) is a partial run ({r.partial}): the regression gate cannot pass on it"
    return None


def _window_notes(before: Sequence[Side], after: Sequence[Side]) -> list[str]:
    """Each run whose profiled window disagrees with its run (:func:`perfdoctor.diff.window.window_note`)."""
    several = len(before) > 1 or len(after) > 1
    out = []
    for side, runs in (("BEFORE", before), ("AFTER", after)):
        for i, run in enumerate(runs):
            note = window.window_note(run.model, f"{side} run {i + 1}" if several else side, run.path)
            if note is not None:
                out.append(note)
    return out


def _warnings(b: SideInfo, a: SideInfo, before: Sequence[Side], after: Sequence[Side]) -> list[str]:
    """What makes the two sides less comparable ("compare what can be compared"), on their first runs."""
    out = []
    if b.n_ranks != a.n_ranks and b.n_ranks and a.n_ranks:  # 0 ranks: a run without a trace, no rank count
        out.append(
            f"different rank counts: BEFORE has {b.n_ranks}, AFTER {a.n_ranks}; the step time is the job's "
            "(longest rank per step), per-rank rows cover the ranks both sides have"
        )
    if b.device != a.device and UNKNOWN_GPU not in (b.device, a.device):
        out.append(f"different devices: BEFORE ran on {b.device}, AFTER on {a.device}")
    if b.parameter_count and a.parameter_count and b.parameter_count != a.parameter_count:
        out.append(f"different models: BEFORE has {b.parameter_count:,} parameters, AFTER {a.parameter_count:,}")
    cold = [label for label, sides in (("BEFORE", before), ("AFTER", after)) if any(_cold(x.model) for x in sides)]
    if cold:
        out.append(
            f"the analysed steps of {' and '.join(cold)} are cold starts (PD902: first-call work such as lazy CUDA "
            "module loading or compilation fills them): the change measures that work as much as the fix; compare "
            "steady-state steps (profile after a few warm-up steps)"
        )
    ops_b = {k[0] for k in movers.per_step(before[:1], "cpu_ops")[0]}
    ops_a = {k[0] for k in movers.per_step(after[:1], "cpu_ops")[0]}
    if ops_b and ops_a:
        top = min(len(ops_b), len(ops_a), 20)
        common = len(ops_b & ops_a) / max(len(ops_b | ops_a), 1)
        if common < 0.3 and top >= 5:
            out.append(
                f"the two sides share only {common:.0%} of their CPU op names: they may be different models "
                "or programs; the step-time verdict still holds, the movers compare unlike work"
            )
    return out


def _cold(model: Report) -> bool:
    """Whether a side's report holds the cold-start finding (PD902)."""
    found = model.findings
    return isinstance(found, list) and any(f.code == "PD902" for f in found)


def _throughput(before: list[Report], after: list[Report]) -> list[Throughput]:
    """Each rate of the runs' ``run.throughput``, the mean over a side's runs that have it."""

    def rates(models: list[Report]) -> dict[str, tuple[str, float | None]]:
        per_run = [r.throughput for m in models if (r := steps.run_of(m)) is not None]
        keys = sorted({k for t in per_run for k in t})
        return {
            k: (next(t[k].unit for t in per_run if k in t), mean_present([t[k].value for t in per_run if k in t]))
            for k in keys
        }

    tb, ta = rates(before), rates(after)
    out = []
    for key in sorted(set(tb) | set(ta)):
        vb = tb[key][1] if key in tb else None
        va = ta[key][1] if key in ta else None
        unit = (tb.get(key) or ta[key])[0]
        change = 100.0 * (va / vb - 1.0) if vb and va is not None else None
        out.append(Throughput(key=key, unit=unit, before=vb, after=va, change_pct=change))
    return out


def headline(verdict: str, cmp: stats.Comparison, what: str = "mean step") -> str:
    """One line: verdict, means, change with its interval, runs and steps per side (and what would decide)."""
    pct = stats.signed_pct
    ci = f", 95% CI {pct(cmp.ci95_pct[0])} to {pct(cmp.ci95_pct[1])}" if cmp.ci95_pct is not None else ""
    several = max(cmp.runs) > 1
    runs = f"{cmp.runs[0]} vs {cmp.runs[1]} runs, " if several else ""
    text = (
        f"{VERDICT_WORDS[verdict]}: {what} {cmp.mean_before_us / 1e3:,.2f} → {cmp.mean_after_us / 1e3:,.2f} ms "
        f"({pct(cmp.change_pct)}{ci}; {runs}{cmp.n_before} vs {cmp.n_after} steps)"
    )
    if several:
        text += f"; run-to-run noise measured from {runs_mod.measured_runs(cmp.runs)} runs: "
        text += f"{cmp.measured_run_noise_pct or 0.0:.1f}%"
        if verdict == "inconclusive":
            text += (
                f"; {cmp.runs_needed} runs per side would decide"
                if cmp.runs_needed is not None
                else "; no practical number of runs decides"
            )
    elif verdict == "inconclusive" and cmp.ci95_pct is None:
        text += "; at least 2 steps per side are needed for an interval"
    elif verdict == "inconclusive" and cmp.more_steps_needed:
        text += f"; {cmp.more_steps_needed:,} more steps per side would decide"
    elif verdict == "inconclusive":
        text += "; more steps cannot decide: repeat each side's run (perfdoctor diff B1 B2 B3 --vs A1 A2 A3)"
    return text


def mean_step_words(source: str) -> str:
    """What the verdict's mean step is: the job's step on a multi-rank trace series, else the mean step."""
    return "mean job step (longest rank's mean)" if "the job's step" in source else "mean step"


RUN_NOISE_GIVEN = "given with --run-noise-pct"
RUN_NOISE_ASSUMED = (
    "assumed, not measured on this machine: the run-to-run noise of CPU runs measured in this project on a "
    "shared 2-core machine (16 pairs of identical runs); give several runs per side (perfdoctor diff B1 B2 B3 "
    "--vs A1 A2 A3) to measure it, or pass --run-noise-pct (0 on a dedicated runner)"
)
RUN_NOISE_NONE = (
    "none assumed for GPU runs, so the interval covers step-to-step noise within each run only, not a machine "
    "that changed between the runs; give several runs per side (perfdoctor diff B1 B2 B3 --vs A1 A2 A3) to "
    "measure it, or pass --run-noise-pct"
)


def run_noise(before: Side, after: Side, given_pct: float | None) -> tuple[float, str]:
    """(σ_run in %, where it comes from) for one run per side: the user's value, else the assumed CPU figure when
    both sides ran on the host only, else 0 (no measurement for GPUs)."""
    if given_pct is not None:
        return given_pct, RUN_NOISE_GIVEN
    if steps.is_cpu(before.model) and steps.is_cpu(after.model):
        return stats.CPU_RUN_NOISE_PCT, RUN_NOISE_ASSUMED
    return 0.0, RUN_NOISE_NONE


def _as_runs(side: Side | Sequence[Side]) -> list[Side]:
    return [side] if isinstance(side, Side) else list(side)


def _interval(
    sb: list[steps.StepSeries],
    sa: list[steps.StepSeries],
    before: list[Side],
    after: list[Side],
    noise_pct: float,
    run_noise_pct: float | None,
) -> tuple[stats.Comparison, str, float, str, list[str]]:
    """(comparison, method text, σ_run (%), where σ_run comes from, warnings): one run per side with the assumed
    or given σ_run (:mod:`perfdoctor.diff.stats`), several runs on a side with the one measured from them
    (:mod:`perfdoctor.diff.runs`)."""
    if len(sb) == 1 and len(sa) == 1:
        sigma_run, sigma_source = run_noise(before[0], after[0], run_noise_pct)
        cmp = stats.compare_means(
            sb[0].values_us, sa[0].values_us, noise_pct, (sb[0].level_shift_pct, sa[0].level_shift_pct), sigma_run
        )
        return cmp, stats.method_text(sigma_run), sigma_run, sigma_source, []
    cmp = runs_mod.compare_runs([x.values_us for x in sb], [x.values_us for x in sa], noise_pct)
    unused = (
        [f"--run-noise-pct {run_noise_pct:g} not used: the run-to-run noise is measured from the runs"]
        if run_noise_pct is not None
        else []
    )
    sigma = cmp.measured_run_noise_pct or 0.0
    source = runs_mod.noise_source(cmp.runs, cmp.run_cv_pct, sigma)
    return cmp, runs_mod.method_text(cmp.runs), sigma, source, unused


def unit_headline(verdict: str, wc: WorkComparison, step: str) -> str:
    """``faster per token: +1.2% tokens/s (95% CI …); time per token … µs; per step: <the step headline>``, or
    the cannot-tell line."""
    if wc.basis == "cannot-tell":
        return f"cannot tell per step from per sample ({wc.reason}); per step: {step}"
    pct = stats.signed_pct
    ci = wc.throughput_ci95_pct
    ci_text = f", 95% CI {pct(ci[0])} to {pct(ci[1])}" if ci is not None else ""
    per = wc.mean_us_per_unit
    return (
        f"{VERDICT_WORDS[verdict]} per {wc.unit}: {pct(wc.throughput_change_pct)} {wc.unit}s/s{ci_text} (time per "
        f"{wc.unit} {per.before or 0:,.4g} → {per.after or 0:,.4g} µs); per step: {step}"
    )


def _work(
    runs: tuple[list[Side], list[Side]],
    series: tuple[list[steps.StepSeries], list[steps.StepSeries]],
    cmp: stats.Comparison,
    noise: tuple[float, float | None],
    flags: dict[str, tuple[float, float] | None],
) -> tuple[WorkComparison, str, str | None, list[str]]:
    """(the work comparison, the verdict, its reason when not the step's, notes): the step comparison of ``cmp``
    kept per step, or made again on each step time ÷ its side's job work per step (:mod:`perfdoctor.diff.work`)."""
    (b_runs, a_runs), (sb, sa) = runs, series
    wb, nb = work.side_work(b_runs[0], {u: f[0] if f else None for u, f in flags.items()}, "BEFORE")
    wa, na = work.side_work(a_runs[0], {u: f[1] if f else None for u, f in flags.items()}, "AFTER")
    differ = work.shapes_differ(b_runs[0], a_runs[0])
    basis, unit, reason = work.choose_basis(wb, wa, differ, work.no_shapes_reason(b_runs[0], a_runs[0]))
    mean = Pair(cmp.mean_before_us, cmp.mean_after_us)
    base = WorkComparison(basis, reason, wb, wa, cmp.verdict, rates=work.rates(wb, wa, mean, b_runs[0], a_runs[0]))
    base = msgspec.structs.replace(base, shapes_differ=differ)
    if basis == "cannot-tell":
        return base, "inconclusive", reason, nb + na
    if unit is None:
        return base, cmp.verdict, None, nb + na
    jb, ja = (w.job_tokens if unit == "token" else w.job_samples for w in (wb, wa))
    assert jb and ja
    per_b = [dataclasses.replace(x, values_us=x.values_us / jb) for x in sb]
    per_a = [dataclasses.replace(x, values_us=x.values_us / ja) for x in sa]
    u, *_ = _interval(per_b, per_a, b_runs, a_runs, *noise)
    ci = list(u.ci95_pct) if u.ci95_pct is not None else None
    wc = msgspec.structs.replace(
        base,
        unit=unit,
        mean_us_per_unit=Pair(u.mean_before_us, u.mean_after_us),
        change_pct=u.change_pct,
        ci95_pct=ci,
        throughput_change_pct=work.throughput_pct(u.change_pct),
        throughput_ci95_pct=[work.throughput_pct(ci[1]), work.throughput_pct(ci[0])] if ci else None,
        verdict_reason=u.reason,
    )
    return wc, u.verdict, u.reason, nb + na


def _per_unit_prediction_note(wc: WorkComparison, pred: object) -> list[str]:
    """A warning when a prediction per step is set against a step that changed its work."""
    if pred is None or wc.basis == "per-step":
        return []
    return [
        "the work per step differs between the sides: predicted vs measured sets a fix's saving per step against a "
        "step change that includes the change of work"
    ]


def _side_series(b_runs: list[Side], a_runs: list[Side]) -> tuple[list[steps.StepSeries], list[steps.StepSeries]]:
    """Each run's step series (:func:`perfdoctor.diff.steps.side_series`), BEFORE's then AFTER's.

    Raises:
        PerfDoctorError: a side has no runs, or a run's mean step time is not positive.
    """
    if not b_runs or not a_runs:
        raise PerfDoctorError("each side needs at least one run")
    sb, sa = steps.side_series([(s.model, s.path) for s in b_runs], [(s.model, s.path) for s in a_runs])
    for side, series in zip((*b_runs, *a_runs), (*sb, *sa)):
        if float(series.values_us.mean()) <= 0:
            raise PerfDoctorError(f"{side.path}: mean step time is 0 µs: nothing to compare")
    return sb, sa


def _measured_saving(cmp: stats.Comparison) -> tuple[float, list[float] | None]:
    """(the measured step saving BEFORE − AFTER in µs, its 95% interval in µs or None): what a finding's predicted
    saving is set against."""
    measured = cmp.mean_before_us - cmp.mean_after_us
    ci_us = (
        [-cmp.ci95_pct[1] / 100 * cmp.mean_before_us, -cmp.ci95_pct[0] / 100 * cmp.mean_before_us]
        if cmp.ci95_pct is not None
        else None
    )
    return measured, ci_us


def _statistics(
    cmp: stats.Comparison, method: str, source: str, noise_pct: float, run_noise: tuple[float, str]
) -> Statistics:
    """The statistics block of the diff: the comparison ``cmp`` with its ``method`` text, the step series'
    ``source``, the noise threshold (%) and (σ_run in %, where σ_run comes from)."""
    return Statistics(
        method=method,
        source=source,
        steps=Pair(cmp.n_before, cmp.n_after),
        effective_steps=Pair(cmp.n_eff_before, cmp.n_eff_after),
        std_us=Pair(cmp.std_before_us, cmp.std_after_us),
        dof=cmp.dof,
        noise_threshold_pct=noise_pct,
        more_steps_needed=cmp.more_steps_needed,
        reason=cmp.reason,
        run_noise_pct=run_noise[0],
        run_noise_source=run_noise[1],
        runs=Pair(*cmp.runs),
        run_cv_pct=Pair(*cmp.run_cv_pct),
        run_noise_measured=cmp.measured_run_noise_pct is not None,
        runs_needed=cmp.runs_needed,
    )


def _all_warnings(
    infos: tuple[SideInfo, SideInfo],
    runs: tuple[list[Side], list[Side]],
    series: tuple[list[steps.StepSeries], list[steps.StepSeries]],
    later: list[str],
) -> list[str]:
    """The diff's warnings in their order, each once: partial runs, step windows, the step series' notes, the
    sides' differences, runs that differ within a side, then ``later`` (the statistics' and work's notes)."""
    (info_b, info_a), (b_runs, a_runs), (sb, sa) = infos, runs, series
    notes = [n for x in (*sb, *sa) for n in x.notes]
    side_warnings = [*_within_side("BEFORE", b_runs, sb), *_within_side("AFTER", a_runs, sa)]
    return list(
        dict.fromkeys(
            [
                *_partial_notes(info_b, info_a),
                *_window_notes(b_runs, a_runs),
                *notes,
                *_warnings(info_b, info_a, b_runs, a_runs),
                *side_warnings,
                *later,
            ]
        )
    )


def _scaling(
    infos: tuple[SideInfo, SideInfo],
    wc: WorkComparison,
    cmp: stats.Comparison,
    category_rows: tuple[list[CategoryRow], float, float],
    models: tuple[list[Report], list[Report]],
) -> Scaling | None:
    """The scaling block (:func:`perfdoctor.diff.scaling.scaling`): the sides' rank counts, the work comparison,
    the mean steps (µs), the category rows with each side's mean trace step (µs) and each side's job trace step."""
    cats, step_b, step_a = category_rows
    mb, ma = models
    return scaling.scaling(
        Pair(infos[0].n_ranks, infos[1].n_ranks),
        wc,
        Pair(cmp.mean_before_us, cmp.mean_after_us),
        cats,
        Pair(step_b, step_a),
        Pair(categories.job_trace_step(mb), categories.job_trace_step(ma)),
    )


def compare(
    before: Side | Sequence[Side],
    after: Side | Sequence[Side],
    noise_pct: float = stats.DEFAULT_NOISE_PCT,
    run_noise_pct: float | None = None,
    samples_per_step: tuple[float, float] | None = None,
    tokens_per_step: tuple[float, float] | None = None,
) -> Diff:
    """The whole comparison of two loaded sides, each one run or several runs of the same code (the verdict then
    uses the run-to-run noise measured from them, :mod:`perfdoctor.diff.runs`; the tables pool the runs,
    :mod:`perfdoctor.diff.pool`). ``run_noise_pct``: σ_run of this machine (%) for one run per side, None: the
    default of :func:`run_noise`. ``samples_per_step`` / ``tokens_per_step``: (BEFORE, AFTER) work per step of
    one rank, overriding run.json and the traces (:mod:`perfdoctor.diff.work`); when the work per step differs,
    the verdict is per sample or per token.

    Raises:
        PerfDoctorError: a side has no runs, a run has no steps, or a non-positive mean step time.
    """
    b_runs, a_runs = _as_runs(before), _as_runs(after)
    sb, sa = _side_series(b_runs, a_runs)
    cmp, method, sigma_run, sigma_source, unused = _interval(sb, sa, b_runs, a_runs, noise_pct, run_noise_pct)
    flags = {"token": tokens_per_step, "sample": samples_per_step}
    wc, verdict, _, work_notes = _work((b_runs, a_runs), (sb, sa), cmp, (noise_pct, run_noise_pct), flags)
    step_line = headline(cmp.verdict, cmp, mean_step_words(sb[0].source))
    info_b, info_a = side_info(b_runs, sb), side_info(a_runs, sa)
    mb, ma = [s.model for s in b_runs], [s.model for s in a_runs]
    rows = findings.compare_findings(mb, ma)
    pred, note = findings.predictions(mb, rows, *_measured_saving(cmp), cmp.mean_before_us)
    cats, step_b, step_a = categories.category_rows(mb, ma)
    later = [*unused, *work_notes, *_per_unit_prediction_note(wc, pred)]
    return Diff(
        schema=SCHEMA,
        schema_version=SCHEMA_VERSION,
        tool={"name": "perfdoctor", "version": __version__},
        before=info_b,
        after=info_a,
        verdict=verdict,
        headline=step_line if wc.basis == "per-step" else unit_headline(verdict, wc, step_line),
        mean_step_us=Pair(cmp.mean_before_us, cmp.mean_after_us),
        change_pct=cmp.change_pct,
        ci95_pct=list(cmp.ci95_pct) if cmp.ci95_pct is not None else None,
        statistics=_statistics(cmp, method, sb[0].source, noise_pct, (sigma_run, sigma_source)),
        throughput=_throughput(mb, ma),
        categories=cats,
        category_step_us=Pair(step_b, step_a),
        kernels=movers.top_movers(b_runs, a_runs, "kernels"),
        cpu_ops=movers.top_movers(b_runs, a_runs, "cpu_ops"),
        findings=rows,
        predicted_vs_measured=pred,
        shrunk=findings.shrunk(rows),
        predicted_note=note,
        efficiency=efficiency.efficiency_rows(mb, ma),
        straggler=efficiency.straggler(mb, ma),
        warnings=_all_warnings((info_b, info_a), (b_runs, a_runs), (sb, sa), later),
        category_step_source=categories.step_source(mb, ma),
        work=wc,
        scaling=_scaling((info_b, info_a), wc, cmp, (cats, step_b, step_a), (mb, ma)),
    )


def regression(diff: Diff, fail_pct: float) -> bool:
    """The CI gate: AFTER slower by more than ``fail_pct`` % and the 95% interval excludes zero change (the
    interval of one run per side, or of several runs with their measured run-to-run noise). Slower per step, or
    per token / sample when the work per step differs (``work.basis``: the time per unit, i.e. the throughput);
    never when the diff cannot tell per step from per sample."""
    basis = diff.work.basis
    if basis == "cannot-tell":
        return False
    change, ci = (diff.change_pct, diff.ci95_pct) if basis == "per-step" else (diff.work.change_pct, diff.work.ci95_pct)
    return change is not None and ci is not None and change > fail_pct and ci[0] > 0
