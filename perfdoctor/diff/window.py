"""Does a run's profiled window describe its run? The warning when it does not.

The category table and the top movers of a diff are built from each side's trace, i.e. its profiled window
(:mod:`perfdoctor.diff.categories`, :mod:`perfdoctor.diff.movers`), while a run directory's verdict comes from
the whole run's steady-state steps (:mod:`perfdoctor.diff.steps`). When a run's window ran at another speed than
its run, the tables describe that window, not the run the verdict measures: a table "step −7.09 ms" next to a
verdict "+12.7% slower" (a run whose DataLoader workers were still filling their queue while it was profiled).

Test, PD601-style (:mod:`perfdoctor.checks.pd601_transient_measurement`) on the number the tables show: the
window's mean step ``w`` (µs, the mean of the ranks' mean analysed steps, the table's step row) against the run's
steady state (``run.steady_state``: rank 0's unprofiled steady-state train-only steps, median ``m``, band
p10–p90). Outside the band alone is what 20% of the run's own steps are, so the window disagrees with its run when

- it is faster: ``w < p10`` and ``w ÷ m < 1 −`` :data:`MAX_DEVIATION` (PD601's default ``max_deviation``). The
  profiler only adds time, so a faster window is a transient;
- it is slower: ``w > p90`` and ``w ÷ m > 1 +`` :data:`MAX_DEVIATION`, and either the unprofiled steps next to the
  window are outside the band too (``window_neighbor_median_s``, PD601's witness: the run itself was slower there,
  a transient), or ``w ÷ m >`` :data:`LARGE_RATIO` (the profiler's own overhead at least doubled the step, so the
  tables' shares are the profiled step's, not the run's). A window slower by less, with neighbours inside the band,
  is the profiler's overhead on a step like the run's (the bundled tiny_gpt run: 1.34×, neighbours 1.08×): no
  warning.
"""

from __future__ import annotations

from perfdoctor.diff.steps import primary_device, run_of
from perfdoctor.model import Report

MAX_DEVIATION = 0.10  # rules/PD601.toml max_deviation: a window more than 10% off the steady median
LARGE_RATIO = 2.0  # a profiled window this many times the steady median: the tables are the profiler's step


def window_mean_us(model: Report) -> float | None:
    """The mean over the ranks with steps of each rank's mean analysed step (µs; the category table's step row),
    None without a trace."""
    means = []
    for rank in model.ranks:
        dev = primary_device(rank)
        if dev is not None and dev.steps:
            means.append(float(dev.totals.dur_us) / float(dev.totals.n_steps or len(dev.steps)))
    return sum(means) / len(means) if means else None


def window_note(model: Report, label: str, path: str) -> str | None:
    """The warning when a run's profiled window disagrees with its run (module docstring), else None; None too
    when the side is not a run with both a trace and a steady state. ``label``: ``BEFORE``, ``AFTER run 2``..."""
    run = run_of(model)
    ss = run.steady_state if run is not None else None
    w = window_mean_us(model)
    if ss is None or w is None or ss.median_s <= 0:
        return None
    p10, p90, median = ss.p10_s * 1e6, ss.p90_s * 1e6, ss.median_s * 1e6
    ratio = w / median
    neighbours = ss.window_neighbor_median_s
    if w < p10 and ratio < 1.0 - MAX_DEVIATION:
        why = "a transient"
    elif w > p90 and ratio > 1.0 + MAX_DEVIATION:
        if neighbours is not None and not ss.p10_s <= neighbours <= ss.p90_s:
            why = "a transient (the unprofiled steps next to it are outside the band too)"
        elif ratio > LARGE_RATIO:
            why = "a step the profiler's own overhead at least doubled"
        else:
            return None
    else:
        return None
    return (
        f"{label} ({path}): its profiled window's mean step, {w / 1e3:,.2f} ms (the step of the category and "
        f"mover tables), is {ratio:.2f}× its run's steady-state median ({median / 1e3:,.2f} ms) and outside the "
        f"run's p10–p90 band ({p10 / 1e3:,.2f}–{p90 / 1e3:,.2f} ms): the category and mover tables describe "
        f"{label}'s profiled window, {why}, not the run the verdict measures"
    )
