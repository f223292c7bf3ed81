"""Sequence the diff stages: two loaded sides → :class:`perfdoctor.diff.model.Diff`. Holds no policy."""

from __future__ import annotations

from perfdoctor import __version__
from perfdoctor.diff import categories, efficiency, findings, movers, stats, steps
from perfdoctor.diff.model import (
    SCHEMA,
    SCHEMA_VERSION,
    Diff,
    Pair,
    SideInfo,
    Statistics,
    Throughput,
)
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


def side_info(side: Side) -> SideInfo:
    """Path, kind, rank count, primary device name and parameter count of one side."""
    ranks = side.model.ranks
    device = "–"
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
    run = steps.run_of(side.model)
    return SideInfo(
        path=side.path,
        kind=side.kind,
        n_ranks=len(ranks),
        device=device,
        parameter_count=run.parameter_count if run is not None else None,
    )


def _warnings(b: SideInfo, a: SideInfo, before: Side, after: Side) -> list[str]:
    """What makes the two sides less comparable ("compare what can be compared")."""
    out = []
    if b.n_ranks != a.n_ranks:
        out.append(
            f"different rank counts: BEFORE has {b.n_ranks}, AFTER {a.n_ranks}; the step time is the job's "
            "(longest rank per step), per-rank rows cover the ranks both sides have"
        )
    if b.device != a.device and UNKNOWN_GPU not in (b.device, a.device):
        out.append(f"different devices: BEFORE ran on {b.device}, AFTER on {a.device}")
    if b.parameter_count and a.parameter_count and b.parameter_count != a.parameter_count:
        out.append(f"different models: BEFORE has {b.parameter_count:,} parameters, AFTER {a.parameter_count:,}")
    ops_b = {k[0] for k in movers.per_step(before, "cpu_ops")[0]}
    ops_a = {k[0] for k in movers.per_step(after, "cpu_ops")[0]}
    if ops_b and ops_a:
        top = min(len(ops_b), len(ops_a), 20)
        common = len(ops_b & ops_a) / max(len(ops_b | ops_a), 1)
        if common < 0.3 and top >= 5:
            out.append(
                f"the two sides share only {common:.0%} of their CPU op names: they may be different models "
                "or programs; the step-time verdict still holds, the movers compare unlike work"
            )
    return out


def _throughput(before: Report, after: Report) -> list[Throughput]:
    rb, ra = steps.run_of(before), steps.run_of(after)
    tb = rb.throughput if rb is not None else {}
    ta = ra.throughput if ra is not None else {}
    out = []
    for key in sorted(set(tb) | set(ta)):
        vb = tb[key].value if key in tb else None
        va = ta[key].value if key in ta else None
        unit = (tb.get(key) or ta[key]).unit
        change = 100.0 * (va / vb - 1.0) if vb and va is not None else None
        out.append(Throughput(key=key, unit=unit, before=vb, after=va, change_pct=change))
    return out


def headline(verdict: str, cmp: stats.Comparison, what: str = "mean step") -> str:
    """One line: verdict, means, change with its interval, steps per side (and what would decide)."""
    pct = stats.signed_pct
    ci = f", 95% CI {pct(cmp.ci95_pct[0])} to {pct(cmp.ci95_pct[1])}" if cmp.ci95_pct is not None else ""
    text = (
        f"{VERDICT_WORDS[verdict]}: {what} {cmp.mean_before_us / 1e3:,.2f} → {cmp.mean_after_us / 1e3:,.2f} ms "
        f"({pct(cmp.change_pct)}{ci}; {cmp.n_before} vs {cmp.n_after} steps)"
    )
    if verdict == "inconclusive" and cmp.ci95_pct is None:
        text += "; at least 2 steps per side are needed for an interval"
    elif verdict == "inconclusive" and cmp.more_steps_needed:
        text += f"; {cmp.more_steps_needed:,} more steps per side would decide"
    elif verdict == "inconclusive":
        text += "; more steps cannot decide: repeat each side's run"
    return text


def mean_step_words(source: str) -> str:
    """What the verdict's mean step is: the job's step on a multi-rank trace series, else the mean step."""
    return "mean job step (longest rank's mean)" if "the job's step" in source else "mean step"


RUN_NOISE_GIVEN = "given with --run-noise-pct"
RUN_NOISE_ASSUMED = (
    "assumed, not measured on this machine: the run-to-run noise of CPU runs measured in this project on a "
    "shared 2-core machine (16 pairs of identical runs); measure yours from two runs of the same commit and pass "
    "--run-noise-pct (0 on a dedicated runner)"
)
RUN_NOISE_NONE = (
    "none assumed for GPU runs, so the interval covers step-to-step noise within each run only, not a machine "
    "that changed between the runs; measure it from two runs of the same commit and pass --run-noise-pct"
)


def run_noise(before: Side, after: Side, given_pct: float | None) -> tuple[float, str]:
    """(σ_run in %, where it comes from): the user's value, else the assumed CPU figure when both sides ran on
    the host only, else 0 (no measurement for GPUs)."""
    if given_pct is not None:
        return given_pct, RUN_NOISE_GIVEN
    if steps.is_cpu(before.model) and steps.is_cpu(after.model):
        return stats.CPU_RUN_NOISE_PCT, RUN_NOISE_ASSUMED
    return 0.0, RUN_NOISE_NONE


def compare(
    before: Side, after: Side, noise_pct: float = stats.DEFAULT_NOISE_PCT, run_noise_pct: float | None = None
) -> Diff:
    """The whole comparison of two loaded sides. ``run_noise_pct``: σ_run of this machine (%), None: the default
    of :func:`run_noise`.

    Raises:
        PerfDoctorError: a side has no steps, or a non-positive mean step time.
    """
    sb, sa = steps.pair_series(before.model, after.model, before.path, after.path)
    if float(sb.values_us.mean()) <= 0:
        raise PerfDoctorError(f"{before.path}: mean step time is 0 µs: nothing to compare")
    sigma_run, sigma_source = run_noise(before, after, run_noise_pct)
    cmp = stats.compare_means(
        sb.values_us, sa.values_us, noise_pct, (sb.level_shift_pct, sa.level_shift_pct), sigma_run
    )
    info_b, info_a = side_info(before), side_info(after)
    measured = cmp.mean_before_us - cmp.mean_after_us
    ci_us = (
        [-cmp.ci95_pct[1] / 100 * cmp.mean_before_us, -cmp.ci95_pct[0] / 100 * cmp.mean_before_us]
        if cmp.ci95_pct is not None
        else None
    )
    rows = findings.compare_findings(before.model, after.model)
    pred, note = findings.predictions(before.model, rows, measured, ci_us)
    cats, step_b, step_a = categories.category_rows(before.model, after.model)
    warnings = list(dict.fromkeys([*sb.notes, *sa.notes, *_warnings(info_b, info_a, before, after)]))
    return Diff(
        schema=SCHEMA,
        schema_version=SCHEMA_VERSION,
        tool={"name": "perfdoctor", "version": __version__},
        before=info_b,
        after=info_a,
        verdict=cmp.verdict,
        headline=headline(cmp.verdict, cmp, mean_step_words(sb.source)),
        mean_step_us=Pair(cmp.mean_before_us, cmp.mean_after_us),
        change_pct=cmp.change_pct,
        ci95_pct=list(cmp.ci95_pct) if cmp.ci95_pct is not None else None,
        statistics=Statistics(
            method=stats.method_text(sigma_run),
            source=sb.source,
            steps=Pair(cmp.n_before, cmp.n_after),
            effective_steps=Pair(cmp.n_eff_before, cmp.n_eff_after),
            std_us=Pair(cmp.std_before_us, cmp.std_after_us),
            dof=cmp.dof,
            noise_threshold_pct=noise_pct,
            more_steps_needed=cmp.more_steps_needed,
            reason=cmp.reason,
            run_noise_pct=sigma_run,
            run_noise_source=sigma_source,
        ),
        throughput=_throughput(before.model, after.model),
        categories=cats,
        category_step_us=Pair(step_b, step_a),
        kernels=movers.top_movers(before, after, "kernels"),
        cpu_ops=movers.top_movers(before, after, "cpu_ops"),
        findings=rows,
        predicted_vs_measured=pred,
        shrunk=findings.shrunk(rows),
        predicted_note=note,
        efficiency=efficiency.efficiency_rows(before.model, after.model),
        straggler=efficiency.straggler(before.model, after.model),
        warnings=warnings,
        category_step_source=categories.step_source(before.model, after.model),
    )


def regression(diff: Diff, fail_pct: float) -> bool:
    """The CI gate: AFTER slower by more than ``fail_pct`` % and the 95% interval excludes zero change."""
    return (
        diff.change_pct is not None
        and diff.ci95_pct is not None
        and diff.change_pct > fail_pct
        and diff.ci95_pct[0] > 0
    )
