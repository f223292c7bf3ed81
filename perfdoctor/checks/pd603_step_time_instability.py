"""PD603 step-time-instability: the steady-state step times have no single level.

From the run data of ``perfdoctor profile``: p10, median and p90 of the unprofiled
steady-state train-only step times (:mod:`perfdoctor.analysis.steps.steady_state`).
Fires when p90 ÷ p10 exceeds ``max_spread`` and p90 − p10 is at least ``min_spread_ms`` (tiny
steps jitter by scheduler and timer noise alone). It states the dispersion (p10, p90, the coefficient of
variation) and no saving: how much of the variation a fix would remove is not known from the series, and a
"median − p10" taken of the unprofiled steps would not be a share of the report's one denominator (the analysed
steps' mean, :mod:`perfdoctor.checks.denominator`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfdoctor.checks.common import unprofiled_step_times
from perfdoctor.checks.context import JobContext, Outcome, passed, skipped
from perfdoctor.findings import Evidence, Hit

CODE = "PD603"
METRICS = {"spread": "p90 ÷ p10 of the steady-state step times"}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = (
    "p10_ms",
    "p90_ms",
    "slow_pct",
    "cv_pct",
    "machine_load",
    "spread",
)


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD603.toml: names and types checked when the catalogue loads."""

    max_spread: float
    min_steps: int
    min_spread_ms: float


def check(job: JobContext) -> Outcome:
    th = job.thresholds(Thresholds)
    run = job.analysis.run
    ss = run.steady_state if run is not None else None
    if ss is None:
        return skipped("no step series in the run data")
    idx, x = unprofiled_step_times(run, ss.steady_start_step)
    if x.size < th.min_steps:
        return skipped(f"only {x.size} unprofiled steady-state steps (needs {th.min_steps})")
    p10, med, p90 = (float(v) for v in np.percentile(x, [10, 50, 90]))
    spread = p90 / p10 if p10 > 0 else float("inf")
    if spread <= th.max_spread or (p90 - p10) * 1e3 < th.min_spread_ms:
        return passed(spread=spread)  # even, or sub-millisecond jitter (scheduler, timer) on tiny steps
    slow = x > 2 * p10
    ev = Evidence(
        values={
            "p10_ms": p10 * 1e3,
            "median_ms": med * 1e3,
            "p90_ms": p90 * 1e3,
            "spread": spread,
            "slow_pct": 100 * float(slow.mean()),
            "cv_pct": 100 * float(np.std(x) / np.mean(x)),  # population SD ÷ mean of the steady steps
            "steady_steps": int(x.size),
            "machine_load": _machine_load(job),
        },
        steps=[int(s) for s in idx[slow][:20]],
    )
    return Outcome(metrics={"spread": spread}, hit=Hit(evidence=ev, estimate=None))


def _machine_load(job: JobContext) -> str:
    """ "; the machine's load average was L on C logical CPUs ..." when the run recorded a 1-minute load average
    (start or end of the run, the higher) above its logical CPU count, else "". The load counts runnable
    processes, this run's own threads included, so only a load above the cores says others competed for them."""

    run = job.analysis.run_json() or {}
    cores = (run.get("cpu") or {}).get("logical_cpus")
    loads = [v[0] for v in (run.get("load_avg") or {}).values() if isinstance(v, list) and v]
    if not cores or not loads or max(loads) <= cores:
        return ""
    return (
        f"; the machine's load average was {max(loads):.1f} on {int(cores)} logical CPUs during the run: "
        "processes competed for the cores"
    )
