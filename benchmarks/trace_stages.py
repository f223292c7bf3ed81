#!/usr/bin/env python3
"""CPU seconds per stage of ``perfdoctor report TRACE`` (one run, in this process; what benchmarks/trace_load.py
times as a whole). Each stage's time is inclusive (``replays`` lies inside ``analysis`` and ``rules``); ``load``
counts this process and, when the events are decoded by worker processes (perfdoctor.trace.parallel), the
workers' CPU seconds, shown apart. CPU seconds move less than wall time with the machine's other load, but a
loaded machine still inflates them (shared caches, hyperthreads): compare runs made side by side.

Usage: python benchmarks/trace_stages.py TRACE [--workers N]   (N: PERFDOCTOR_LOAD_WORKERS; default as perfdoctor)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

TOTAL: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)
STAGES = (
    "load: inflate + decode + columnise",
    "tables (sort, join)",
    "analysis (steps, replay, attribution, breakdown)",
    "  steps",
    "  graph + recorded replay",
    "  critical path (attribution)",
    "  GPU breakdown",
    "rules (with their what-if replays)",
    "  replays (the recording's and each what-if)",
)


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(module: Any, name: str, stage: str) -> None:
    """Replace ``module.name`` with a wrapper that adds its CPU seconds to ``stage``."""
    fn: Callable[..., Any] = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t, c = time.process_time(), _children_cpu()
        try:
            return fn(*args, **kwargs)
        finally:
            TOTAL[stage] += time.process_time() - t
            TOTAL[stage + " (workers)"] += _children_cpu() - c
            CALLS[stage] += 1

    setattr(module, name, wrapper)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--workers", help="PERFDOCTOR_LOAD_WORKERS for this run")
    a = ap.parse_args()
    if a.workers is not None:
        os.environ["PERFDOCTOR_LOAD_WORKERS"] = a.workers
    t0, w0 = time.process_time(), time.perf_counter()
    import perfdoctor.checks.engine as engine
    import perfdoctor.jobs.rank_stage as rank
    import perfdoctor.replay.rank as replay_rank
    import perfdoctor.trace as trace
    from perfdoctor.cli import main as cli_main

    TOTAL["imports (CLI, analysis, rules)"] = time.process_time() - t0
    for stage in STAGES:  # printed in this order
        TOTAL[stage] += 0.0
    timed(trace, "read_trace_file", "load: inflate + decode + columnise")
    timed(trace, "build_tables", "tables (sort, join)")
    timed(rank, "analyze_tables", "analysis (steps, replay, attribution, breakdown)")
    timed(rank, "find_steps", "  steps")
    timed(rank, "replay_rank", "  graph + recorded replay")
    timed(rank, "critical_path", "  critical path (attribution)")
    timed(rank, "gpu_breakdown", "  GPU breakdown")
    timed(engine, "rank_outcomes", "rules (with their what-if replays)")
    timed(replay_rank, "replay", "  replays (the recording's and each what-if)")
    sys.argv = ["perfdoctor", "report", a.trace]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        cli_main()
    total, wall = time.process_time() - t0, time.perf_counter() - w0
    workers = _children_cpu()
    print(f"{a.trace}  (load workers: {os.environ.get('PERFDOCTOR_LOAD_WORKERS', 'default')})")
    for stage, secs in TOTAL.items():
        if stage.endswith(" (workers)"):
            continue
        w = TOTAL.get(stage + " (workers)", 0.0)
        extra = f"  + {w:.2f} in workers" if w > 0.005 else ""
        calls = f"  ({CALLS[stage]} calls)" if CALLS[stage] > 1 else ""
        print(f"  {stage:<52}{secs:>7.2f} CPU-s{extra}{calls}")
    top = [s for s in TOTAL if not s.startswith(" ") and not s.endswith(" (workers)")]
    rest = total - sum(TOTAL[s] for s in top)
    print(f"  {'the rest (lazy imports, report model, render)':<52}{rest:>7.2f} CPU-s")
    print(f"  {'whole run (this process)':<52}{total:>7.2f} CPU-s  + {workers:.2f} in workers; wall {wall:.2f} s")


if __name__ == "__main__":
    main()
