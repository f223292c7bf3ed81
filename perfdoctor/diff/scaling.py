"""Scaling efficiency: two sides with different rank counts, and where the larger job's lost time per step went.

Throughput per rank = one rank's work per step ÷ the job's mean step (the verdict's step, the longest of the
ranks' mean steps). Efficiency = the larger job's throughput per rank ÷ the smaller job's (× 100): 100% is the
ideal N× speed-up for N× the ranks. The work per rank is the diff's (:mod:`perfdoctor.diff.work`: tokens, else
samples per step of one rank, from the flags, run.json or the traces); unknown on a side, each rank is assumed to
do the same work per step on both sides (data parallelism with the same per-rank batch), and the method says so.

The waterfall: with ``r`` = larger ÷ smaller work per rank, the larger job's ideal step is the smaller job's step
× ``r``; the lost time per step, larger step − ideal, is split over the diff's category rows (busy categories and
idle causes, each side's mean over its ranks, :mod:`perfdoctor.diff.categories`), each the larger side's time −
``r`` × the smaller side's, grouped into exposed communication, data loading, host work and compute (kernel or op
efficiency at the per-rank batch), plus *waiting for slower ranks*: the job's trace step (its longest rank's mean
step) beyond the ranks' mean step, larger − ``r`` × smaller. Busy and idle rows add up to the ranks' mean step, so
these parts add up to the lost time of the traces' steps; where the verdict's steps are others (a run directory's
steady unprofiled steps, from ``steps.csv``), the difference is its own bar, so the parts add up to the lost time.
"""

from __future__ import annotations

from perfdoctor.diff.model import CategoryRow, Pair, Scaling, ScalingPart, WorkComparison

# category keys (perfdoctor.vocab Category / IdleCause) → waterfall bar; any other key counts as compute
_BARS = {
    ("busy", "communication"): "communication",
    ("busy", "host_collective"): "communication",
    ("busy", "dataloader"): "data_loading",
    ("idle", "dataloader"): "data_loading",
    ("idle", "synchronization"): "host",
    ("idle", "host_launch_bound"): "host",
    ("idle", "python"): "host",
    ("idle", "other"): "host",
}
LABELS = {
    "communication": "exposed communication (collectives, waits inside them included)",
    "waiting": "waiting for slower ranks (the job's step beyond the ranks' mean)",
    "data_loading": "data loading per rank",
    "host": "extra host work (idle for syncs, launches, Python)",
    "compute": "compute at the per-rank batch (kernel / op efficiency)",
    "outside": "the verdict's steps beyond the profiled window's (steady unprofiled steps vs traced ones)",
}
_ORDER = ("communication", "waiting", "data_loading", "host", "compute", "outside")


def _work(wc: WorkComparison) -> tuple[str, float, float, str]:
    """(unit, BEFORE work per step of one rank, AFTER's, words) of the diff's work (1, 1 per step when unknown)."""
    for unit, attr in (("token", "tokens"), ("sample", "samples")):
        b, a = getattr(wc.before, attr), getattr(wc.after, attr)
        if b and a:
            return unit, float(b), float(a), f"{unit}s per step of one rank ({wc.before.source}; {wc.after.source})"
    return "step", 1.0, 1.0, "work per step unknown on a side: each rank assumed to do the same work per step on both"


def scaling(
    ranks: Pair, wc: WorkComparison, step_us: Pair, cats: list[CategoryRow], cat_step_us: Pair, trace_step_us: Pair
) -> Scaling | None:
    """The scaling comparison (see the module docstring); None when both sides have the same number of ranks or a
    side's step is unknown. ``ranks``, ``step_us`` (the verdict's mean step, µs), ``cat_step_us`` (the ranks' mean
    step the category rows add up to, µs) and ``trace_step_us`` (the job's trace step: its longest rank's mean, µs)
    are (BEFORE, AFTER)."""
    nb, na = ranks.before, ranks.after
    if not nb or not na or nb == na or not step_us.before or not step_us.after:
        return None
    unit, wb, wa, words = _work(wc)
    small_is_before = nb < na
    n_s, n_l = (nb, na) if small_is_before else (na, nb)
    w_s, w_l = (wb, wa) if small_is_before else (wa, wb)
    t_s, t_l = (step_us.before, step_us.after) if small_is_before else (step_us.after, step_us.before)
    c_s, c_l = (cat_step_us.before, cat_step_us.after) if small_is_before else (cat_step_us.after, cat_step_us.before)
    j_s, j_l = (
        (trace_step_us.before, trace_step_us.after) if small_is_before else (trace_step_us.after, trace_step_us.before)
    )
    r = w_l / w_s
    bars = dict.fromkeys(_ORDER, (0.0, 0.0))
    for row in cats:
        if row.group not in ("busy", "idle"):
            continue
        key = _BARS.get((row.group, row.key), "compute")
        s, l_ = (row.before_us, row.after_us) if small_is_before else (row.after_us, row.before_us)
        bars[key] = (bars[key][0] + r * s, bars[key][1] + l_)
    if c_s and c_l and j_s and j_l:
        bars["waiting"] = (r * (j_s - c_s), j_l - c_l)
        bars["outside"] = (r * (t_s - j_s), t_l - j_l)
    ideal = r * t_s
    parts = [ScalingPart(k, LABELS[k], s, l_, l_ - s) for k, (s, l_) in bars.items() if s or l_ or k != "outside"]
    rest = (t_l - ideal) - sum(p.lost_us for p in parts)
    if abs(rest) > 1e-6 * max(t_l, 1.0):  # category rows that do not add up to the ranks' mean step
        parts.append(ScalingPart("other", "not in the category rows", 0.0, rest, rest))
    per_rank = (w_s / t_s * 1e6, w_l / t_l * 1e6)
    tp = (per_rank[0] * n_s, per_rank[1] * n_l)
    method = (
        f"throughput per rank = work per step of one rank ÷ the job's mean step; work: {words}; the larger job's "
        f"ideal step = the smaller job's step × {r:.3g} (its work per rank ÷ the smaller's); each bar = the larger "
        f"job's µs per step − {r:.3g} × the smaller's, from the category rows (each side's mean over its ranks)"
    )
    return Scaling(
        ranks=ranks,
        smaller="before" if small_is_before else "after",
        unit=unit,
        work_per_rank=Pair(wb, wa),
        throughput_per_rank=Pair(*(per_rank if small_is_before else per_rank[::-1])),
        job_throughput=Pair(*(tp if small_is_before else tp[::-1])),
        speedup=tp[1] / tp[0],
        ideal_speedup=n_l / n_s,
        efficiency_pct=100.0 * per_rank[1] / per_rank[0],
        step_us=step_us,
        ideal_step_us=ideal,
        lost_us=t_l - ideal,
        parts=parts,
        method=method,
    )
