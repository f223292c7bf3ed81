"""How a side of several runs becomes one column of a table: every run weighs equally.

A side may hold several runs of the same code (``perfdoctor diff B1 B2 B3 --vs A1 A2 A3``). The verdict compares
the means of the runs' mean steps (:mod:`perfdoctor.diff.runs`); every other table pools the runs the same way,
each run weighing equally whatever its step count:

- where the time moved (:mod:`perfdoctor.diff.categories`) and the top movers (:mod:`perfdoctor.diff.movers`):
  the mean over the runs of each run's time per step (a category or name a run lacks counts 0 there, as a
  name missing from one rank's list does across ranks);
- findings (:mod:`perfdoctor.diff.findings`): a finding is on a side when it fired in any of its runs; its
  saving is the mean over the runs that ran the rule (0 where it passed); resolved / new need the rule to have
  run, and found nothing, in at least one run of the other side; the runs it fired in are counted;
- predicted vs measured: the resolved findings' pooled savings against the change of the pooled means;
- efficiency: per rank, the mean over the runs of utilization, MFU and median step, the largest memory peak;
- throughput: the mean over the runs of each rate.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def mean_of(per_run: Sequence[dict[K, float]]) -> dict[K, float]:
    """The mean over the runs of each key's value (a key a run lacks counts 0 there); {} for no runs."""
    keys: dict[K, None] = {}
    for d in per_run:
        keys.update(dict.fromkeys(d))
    return {k: sum(d.get(k, 0.0) for d in per_run) / len(per_run) for k in keys}


def mean_present(values: Sequence[float | None]) -> float | None:
    """The mean of the values that are there (None when none is)."""
    have = [v for v in values if v is not None]
    return sum(have) / len(have) if have else None
