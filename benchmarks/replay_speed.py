#!/usr/bin/env python3
"""Cost of the replay next to loading and the breakdown, on one trace (issue 10: graph + replay + every
transformation at most 30% of load + breakdown).

Times, in one process: load (``load_trace``) + steps + breakdown of every device; the graph and its replay; the
critical-path attribution; each what-if transformation replayed; and the fix plan over all of them as findings
(:func:`perfdoctor.checks.after.plan`: the greedy rounds' joint replays, the worst case where every what-if is a
finding). Prints seconds and the ratio (the replay share counts the plan).

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

from perfdoctor.analysis.breakdown import device_ids, gpu_breakdown  # noqa: E402
from perfdoctor.analysis.hardware import device_for_trace  # noqa: E402
from perfdoctor.analysis.steps import find_steps  # noqa: E402
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
    from perfdoctor.analysis import host as hh

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
    # the fix plan over every what-if as a finding (the worst case: each a candidate in every round)
    import numpy as np

    from perfdoctor.checks.after import plan
    from perfdoctor.findings import Estimate, Evidence, Hit

    base = float(np.mean(rr.fixed_step_times([])))
    hits = {}
    for i, w in enumerate(whatifs):
        code = f"W{i}"
        rr.whatifs[code] = w
        alone = base - float(np.mean(rr.fixed_step_times([w])))
        hits[code] = Hit(Evidence(), Estimate(alone, "replay"), min_saving_pct=0.0)
    chosen = plan(rr, hits, base)
    t6 = time.perf_counter()
    return t1 - t0 + (t4 - t3), t2 - t1, t3 - t2, t5 - t4, t6 - t5, len(chosen), rr.graph.n_act + rr.graph.n_blk


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
