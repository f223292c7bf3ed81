"""The second round of rank tasks: re-analyse the ranks that arrived last with their peers' arrivals (all µs).

A rank's summary is made alone (:mod:`perfdoctor.jobs.task`), so its what-ifs bound each collective by its
recorded end (:mod:`perfdoctor.crossrank.bounds`: the recorded wait is the peers'). Once every rank's collectives are
known and match (:func:`perfdoctor.crossrank.collectives.compute`), a rank's collective ``k`` may end as early
as ``T[r, k]``, the latest other rank's recorded arrival plus the transfer
(:func:`perfdoctor.crossrank.bounds.earliest_ends`). That is below the recorded end only where the rank arrived
last; replays being max-plus, the recorded bound understates the rank's savings by at most its largest margin
``recorded end − T``. A rank whose margin exceeds :data:`perfdoctor.crossrank.bounds.MARGIN_SHARE` of its
mean step is analysed again with those bounds (:attr:`perfdoctor.jobs.summary.SummaryOptions.peer_ends`); the
others keep their summaries.
The re-analysis runs in this process: typically the few ranks that arrived last.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
import numpy as np

from perfdoctor.crossrank.bounds import peer_bounds
from perfdoctor.jobs.summary import RankSummary, SummaryOptions

if TYPE_CHECKING:
    from perfdoctor.checks.catalogue import Catalogue
    from perfdoctor.jobs.executors import Executor


def peer_ends(summaries: list[RankSummary]) -> dict[str, tuple[list[float], list[float]]]:
    """{summary path: (recorded starts of its collectives, their earliest ends)}: the GPU ranks' peer bounds
    (:func:`perfdoctor.crossrank.bounds.peer_bounds`) by the path their summary names."""
    gpu = [s for s in summaries if not s.error and s.primary_kind == "gpu" and s.step_rows and s.collectives]
    step_us = {int(s.rank or 0): float(np.mean([r.dur_us for r in s.step_rows])) for s in gpu}
    bounds = peer_bounds([s.collectives for s in gpu if s.collectives is not None], step_us)
    return {s.path: bounds[int(s.rank or 0)] for s in gpu if int(s.rank or 0) in bounds}


def with_peer_arrivals(
    files: list[str],
    summaries: list[RankSummary],
    opts: SummaryOptions,
    cat: Catalogue,
    cache: bool = False,
    executor: Executor | None = None,
) -> list[RankSummary]:
    """``summaries`` (of ``files``, by their ``index``) with the ranks :func:`peer_ends` names analysed again
    with their peers' bounds (each a summary of the same file; a rank that fails the second time keeps its
    first summary). ``executor`` (:mod:`perfdoctor.jobs.executors`; default this process) runs the second
    round, quietly (no progress): on a pool or a cluster those ranks are analysed side by side, not one after
    another here (a rank of a 1 GB trace takes a worker tens of seconds)."""
    from perfdoctor.jobs.executors import InProcess

    plan = peer_ends(summaries)
    if not plan:
        return summaries
    again = sorted({s.index for s in summaries if s.path in plan})
    opts2 = msgspec.structs.replace(opts, peer_ends=plan)
    runner = executor if executor is not None else InProcess()
    second = runner.summarise([files[i] for i in again], opts2, cat, cache, indices=again, quiet=True)
    redone = {s.path: s for s in second if not s.error}
    return [redone.get(s.path, s) for s in summaries]
