#!/usr/bin/env python3
"""Cost of the replay next to loading and the breakdown, on one trace (graph + replay + every
transformation at most 30% of load + breakdown).

Times, in one process: load (``load_trace``) + steps + breakdown of every device; the graph and its replay; the
critical-path attribution; each what-if transformation replayed; and the fix plan over all of them as findings
(:func:`perfdoctor.checks.after.plan`, timed inside the rules' checks on this rank as ``perfdoctor report`` runs
them: the greedy rounds' joint replays over the findings that fire). Prints seconds and the ratio (the replay
share counts the plan).

Usage: python benchmarks/replay_speed.py TRACE [--repeat 3]
       (make a big trace with ../shared/tools/scale_trace.py IN OUT.json.gz --target-mb 450)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from perfdoctor.analysis.steps.steps import find_steps  # noqa: E402
from perfdoctor.analysis.timing.breakdown import device_ids, gpu_breakdown  # noqa: E402
from perfdoctor.analysis.work.hardware import device_for_trace  # noqa: E402
from perfdoctor.replay.attribution import critical_path  # noqa: E402
from perfdoctor.replay.rank import replay_rank  # noqa: E402
from perfdoctor.replay.transforms import host as h  # noqa: E402
from perfdoctor.replay.transforms import kernels as k  # noqa: E402
from perfdoctor.replay.transforms.copies import pinned_copies  # noqa: E402
from perfdoctor.trace import load_trace  # noqa: E402


def once(path: str) -> tuple[float, float, float, float, int]:
    t0 = time.perf_counter()
    tables = load_trace(path)
    steps = find_steps(tables)
    t1 = time.perf_counter()
    rr = replay_rank(tables, steps)
    t2 = time.perf_counter()
    att = critical_path(tables, rr)
    t3 = time.perf_counter()
    for d in device_ids(tables):
        gpu_breakdown(tables, steps, d, att)
    t4 = time.perf_counter()
    from perfdoctor.analysis.timing import host as hh

    spec = device_for_trace(tables.device_properties)
    whatifs = [
        h.prefetch_dataloader(rr, tables),
        h.fused_optimizer(rr, tables),
        h.cuda_graphs(rr, tables),
        h.remove_syncs(rr, hh.synchronization(tables)),
        h.batch_copies(rr, tables, hh.synchronization(tables)),
        pinned_copies(rr, tables, __import__("numpy").arange(len(tables.memcpy))),
        k.fused_elementwise(rr, tables),
        k.overlap_communication(rr, tables),
    ]
    if spec is not None:
        whatifs.append(k.tensor_cores(rr, tables, spec))
    for w in whatifs:
        rr.step_times(w.scenario)
    t5 = time.perf_counter()
    # the fix plan as perfdoctor report makes it: the rules' checks on this rank, timing their plan
    # (perfdoctor.checks.after.plan: the greedy rounds' joint replays over the findings that fire)
    planned = _plan_seconds(path, tables)
    t6 = t5 + planned[0]
    chosen = planned[1]
    return t1 - t0 + (t4 - t3), t2 - t1, t3 - t2, t5 - t4, t6 - t5, len(chosen), rr.graph.n_act + rr.graph.n_blk


def _plan_seconds(path: str, tables: object) -> tuple[float, list[str]]:
    """Seconds the production checks spend in the fix plan on this trace's rank, and the plan's codes."""
    import os

    from perfdoctor.analysis.rank import InputFile
    from perfdoctor.checks import after, config, engine
    from perfdoctor.checks import context as cx
    from perfdoctor.jobs.rank_stage import analyse_rank
    from perfdoctor.jobs.summary import SummaryOptions

    tables.rank = 0  # type: ignore[attr-defined]
    info = InputFile(path, os.path.getsize(path), None, tables.n_events, tables.uncompressed_bytes)  # type: ignore[attr-defined]
    analysis = analyse_rank(tables, info, SummaryOptions(hash_inputs=False))
    cat, codes = engine.prepare(config.resolve())
    spent, codes_out, plan = [0.0], [], after.plan

    def timed(*args: object, **kwargs: object) -> list[str]:
        start = time.perf_counter()
        out = plan(*args, **kwargs)  # type: ignore[arg-type]
        spent[0] += time.perf_counter() - start
        codes_out.extend(out)
        return out

    after.plan = timed  # type: ignore[assignment]
    try:
        engine.rank_outcomes(analysis, cx.RankContext(analysis, analysis.ranks[0]), cat, engine.check_order(cat, codes))
    finally:
        after.plan = plan  # type: ignore[assignment]
    return spent[0], codes_out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args(argv)
    print(
        f"{'load+steps+breakdown s':>22} {'graph+replay s':>14} {'attribution s':>13} {'9 what-ifs s':>12} "
        f"{'plan s (entries)':>16} {'nodes':>9} {'replay share':>12}"
    )
    for _ in range(a.repeat):
        base, graph, att, whatifs, planned, entries, nodes = once(a.trace)
        share = (graph + att + whatifs + planned) / base
        print(
            f"{base:22.2f} {graph:14.2f} {att:13.2f} {whatifs:12.2f} {planned:11.2f} ({entries}) {nodes:9d} "
            f"{100 * share:11.0f}%",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
