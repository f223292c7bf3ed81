#!/usr/bin/env python3
"""Recorded vs replayed step time for every trace in ../shared/traces (one row per rank file).

The replay runs the dependency graph (perfdoctor.replay) with the recorded durations; the bound is
the mean replayed step within 2% of the recorded one and every step within 5%. Also prints the time the graph and
the replay took next to the trace's load time.

Usage: python benchmarks/replay_error.py [TRACE ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from perfdoctor.analysis.steps.steps import find_steps  # noqa: E402
from perfdoctor.errors import PerfDoctorError  # noqa: E402
from perfdoctor.replay.rank import replay_rank  # noqa: E402
from perfdoctor.trace import load_trace  # noqa: E402

SHARED = REPO.parent / "shared" / "traces"


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted(p for p in SHARED.rglob("*") if p.is_file() and ".json" in p.name)
    if not paths:
        print(f"no traces: {SHARED} is absent")
        return 1
    print(
        f"{'trace':58} {'steps':>5} {'recorded ms':>12} {'replayed ms':>12} {'mean err':>9} {'worst step':>10} "
        f"{'load s':>7} {'replay s':>8}  fallback"
    )
    for p in paths:
        try:
            t0 = time.perf_counter()
            tables = load_trace(str(p))
            steps = find_steps(tables)
            t1 = time.perf_counter()
            rr = replay_rank(tables, steps)
            t2 = time.perf_counter()
        except PerfDoctorError as exc:
            print(
                f"{str(p.relative_to(SHARED) if p.is_relative_to(SHARED) else p)[:58]:58} not analysed: "
                f"{str(exc)[-80:]}"
            )
            continue
        d = rr.to_dict()
        name = str(p.relative_to(SHARED) if p.is_relative_to(SHARED) else p)[:58]
        print(
            f"{name:58} {len(steps):5d} {d['recorded_mean_step_us'] / 1e3:12.3f} "
            f"{d['replayed_mean_step_us'] / 1e3:12.3f} {100 * d['mean_error']:8.2f}% {100 * d['max_step_error']:9.2f}% "
            f"{t1 - t0:7.2f} {t2 - t1:8.3f}  {d['fallback'] or ''}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
