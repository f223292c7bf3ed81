"""What ``profile_memory=True`` costs a CPU run: the profiled steps' time and the trace's size, with and without.

Runs ``examples/tiny_gpt.py`` (the small configuration of ``runner_overhead.py``) under
:func:`perfdoctor.capture.runner.run_profile`, alternately with ``profile_memory`` off and on, in this one
process, and compares the median wall and CPU (``process_time``: robust to other processes on the cores) seconds
of the profiled window's active steps, the trace's size on disk and its ``[memory]`` event count.

    python benchmarks/cpu_profile_memory.py [--pairs 3] [--steps 60]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from torch.optim.optimizer import register_optimizer_step_post_hook

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfdoctor.capture.run_data import load_run_dir  # noqa: E402
from perfdoctor.capture.runner import run_profile  # noqa: E402
from perfdoctor.capture.schedule import ProfileConfig  # noqa: E402

SCRIPT = str(ROOT / "examples" / "tiny_gpt.py")
ARGS = ["--n-layer", "2", "--d-model", "64", "--seq-len", "64", "--batch-size", "8", "--log-every", "0"]
ARGS += ["--threads", "1"]


def one_run(tmp: Path, name: str, memory: bool, steps: int) -> tuple[float, float, int, int]:
    """(median wall s, median cpu s) of the active steps, trace bytes, [memory] events of one profiled run."""
    wall: list[float] = []
    cpu: list[float] = []
    h = register_optimizer_step_post_hook(
        lambda *a: (wall.append(time.perf_counter()), cpu.append(time.process_time()))
    )
    try:
        cfg = ProfileConfig(steps=steps, profile_memory=memory, measure_flops=False)
        res = run_profile(SCRIPT, ARGS, cfg, out=tmp / name, progress=lambda m: None)
    finally:
        h.remove()
    phase = load_run_dir(res.run_dir).steps["profiler_phase"]
    active = np.flatnonzero(phase[1 : len(wall)] == "active")  # step k spans hook k-1 -> k
    w, c = np.diff(wall)[active], np.diff(cpu)[active]
    trace = next(res.run_dir.glob("trace.rank0*.json.gz"))
    with gzip.open(trace, "rt") as fh:
        n_mem = sum(1 for e in json.load(fh)["traceEvents"] if e.get("name") == "[memory]")
    return float(np.median(w)), float(np.median(c)), trace.stat().st_size, n_mem


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--steps", type=int, default=60)
    a = p.parse_args()
    rows: dict[bool, list[tuple[float, float, int, int]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(a.pairs):
            for memory in (False, True):
                r = one_run(Path(tmp), f"run{k}-{int(memory)}", memory, a.steps)
                rows[memory].append(r)
                print(
                    f"pair {k} profile_memory={memory}: active step {r[0] * 1e3:.2f} ms wall, {r[1] * 1e3:.2f} ms "
                    f"cpu; trace {r[2] / 1024:.0f} KiB, {r[3]} [memory] events",
                    flush=True,
                )
    off, on = rows[False], rows[True]
    for i, what in ((0, "wall"), (1, "cpu")):
        ratio = statistics.median(b[i] / a_[i] for a_, b in zip(off, on))
        print(f"profiled step {what} time with/without profile_memory: {ratio:.3f} ({(ratio - 1) * 100:+.1f}%)")
    size = statistics.median(b[2] / a_[2] for a_, b in zip(off, on))
    print(f"trace size with/without: {size:.2f}x; [memory] events per active step: {on[0][3] / 10:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
