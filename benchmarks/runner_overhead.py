"""Per-step overhead of `perfdoctor profile` outside the profiler window.

Runs the same example script, in this one process, alternately

- bare: as ``python SCRIPT`` would, with only a perf_counter() read in a global
  optimizer step hook (the least anything can do to time a step), and
- profiled: under :func:`perfdoctor.capture.runner.run_profile` (step hooks,
  batch probe, steps.csv, torch.profiler in its wait phase),

and compares the median step time of the steady steps (after warm-up, outside
the profiler's warm-up/active window and the FLOPs step). Target: ratio <= 1.02.

The batch fingerprints (:mod:`perfdoctor.capture.batch_fingerprint`) are taken in the first 8 steps only, which
the steady series leaves out, so their cost is timed directly: the sampling in each fingerprinted step's forward
plus the hashing at the end of the run spread over those steps, as a share of the bare step. Target: under 1%.

    python benchmarks/runner_overhead.py [--pairs 3] [--steps 150]
"""

from __future__ import annotations

import argparse
import runpy
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from torch.optim.optimizer import register_optimizer_step_post_hook

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfdoctor.capture.batch_fingerprint import BatchFingerprints  # noqa: E402
from perfdoctor.capture.run_data import load_run_dir  # noqa: E402
from perfdoctor.capture.runner import run_profile  # noqa: E402
from perfdoctor.capture.schedule import ProfileConfig  # noqa: E402
from perfdoctor.capture.session import Session  # noqa: E402

SCRIPT = str(ROOT / "examples" / "tiny_gpt.py")
ARGS = [
    "--n-layer",
    "2",
    "--d-model",
    "64",
    "--seq-len",
    "64",
    "--batch-size",
    "8",
    "--log-every",
    "0",
    "--threads",
    "1",
]
SKIP = 10  # warm-up steps left out of both series
HOOK_US: list[float] = []
FINGERPRINT_US: list[float] = []  # per fingerprinted step: sampling + its share of the hashing
BARE_MS: list[float] = []


class StepClock:
    """Global optimizer hook recording wall (perf_counter) and CPU (process_time) at each step end.

    Installed identically in both runs. CPU seconds per step are what the
    runner adds work to; they are also robust to other processes competing for
    the cores, which inflate wall time in both runs at random.
    """

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self._h = register_optimizer_step_post_hook(self._hook)

    def _hook(self, opt, args, kwargs) -> None:
        self.wall.append(time.perf_counter())
        self.cpu.append(time.process_time())

    def durations(self, keep: np.ndarray | None = None) -> tuple[float, float]:
        """Median (wall s, cpu s) per step over the kept steps (step k = diff k-1 -> k)."""
        self._h.remove()
        w, c = np.diff(self.wall), np.diff(self.cpu)
        mask = np.arange(w.size) + 1 >= SKIP
        if keep is not None:
            mask &= keep[1 : w.size + 1]
        return float(np.median(w[mask])), float(np.median(c[mask]))


def bare_steps(steps: int) -> tuple[float, float]:
    """(wall, cpu) median seconds per step of the script run bare."""
    clock = StepClock()
    saved = sys.argv[:]
    sys.argv = [SCRIPT, *ARGS, "--steps", str(steps), "--eval-batches", "1"]
    sys.path.insert(0, str(Path(SCRIPT).parent))
    try:
        runpy.run_path(SCRIPT, run_name="__main__")
    finally:
        sys.argv = saved
        sys.path.pop(0)
    return clock.durations()


def profiled_steps(steps: int, tmp: Path, k: int) -> tuple[float, float]:
    """(wall, cpu) median seconds per step under the runner, outside the profiler window."""
    clock = StepClock()
    orig = Session._on_step
    hook_s: list[float] = []

    def timed(self, count):  # the runner's own work at each step boundary, timed directly
        t = time.perf_counter()
        try:
            return orig(self, count)
        finally:
            if self.schedule.phase(count - 1) == "none" and count - 1 != self.flops_step:
                hook_s.append(time.perf_counter() - t)

    Session._on_step = timed
    observe, digests = BatchFingerprints.observe, BatchFingerprints.digests
    spent_s: list[float] = []

    def timed_observe(self, args, kwargs):
        t = time.perf_counter()
        try:
            return observe(self, args, kwargs)
        finally:
            spent_s.append(time.perf_counter() - t)

    def timed_digests(self):
        t = time.perf_counter()
        try:
            return digests(self)
        finally:
            spent_s.append(time.perf_counter() - t)

    BatchFingerprints.observe, BatchFingerprints.digests = timed_observe, timed_digests
    try:
        res = run_profile(SCRIPT, ARGS, ProfileConfig(steps=steps), out=tmp / f"run{k}", progress=lambda m: None)
    finally:
        Session._on_step = orig
        BatchFingerprints.observe, BatchFingerprints.digests = observe, digests
    FINGERPRINT_US.append(sum(spent_s) / ProfileConfig().fingerprint_steps * 1e6)
    HOOK_US.append(float(np.median(hook_s[SKIP:])) * 1e6)
    phase = load_run_dir(res.run_dir).steps["profiler_phase"]
    return clock.durations(keep=np.asarray(phase == "none"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--steps", type=int, default=150)
    a = p.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(a.pairs):
            bw, bc = bare_steps(a.steps)
            BARE_MS.append(bw * 1e3)
            pw, pc = profiled_steps(a.steps, Path(tmp), k)
            ratios.append((pw / bw, pc / bc))
            print(
                f"pair {k}: bare {bw * 1e3:.2f} ms/step wall, {bc * 1e3:.2f} ms cpu; profiled "
                f"{pw * 1e3:.2f} ms wall, {pc * 1e3:.2f} ms cpu; ratio wall {pw / bw:.4f} cpu {pc / bc:.4f}",
                flush=True,
            )
    wall = statistics.median(r[0] for r in ratios)
    cpu = statistics.median(r[1] for r in ratios)
    print(
        f"runner overhead outside the active window: wall ratio {wall:.4f} ({(wall - 1) * 100:+.2f}%), "
        f"cpu ratio {cpu:.4f} ({(cpu - 1) * 100:+.2f}%) per step; target <= +2%"
    )
    bare_ms = statistics.median(r for r in BARE_MS)
    hook = statistics.median(HOOK_US)
    print(
        f"runner work at each step boundary: {hook:.1f} us/step = {hook / (bare_ms * 1e3) * 100:.2f}% "
        f"of a {bare_ms:.2f} ms step (timed directly; immune to other load on the machine)"
    )
    fp = statistics.median(FINGERPRINT_US)
    print(
        f"batch fingerprints: {fp:.1f} us per fingerprinted step (sampling + hashing) = "
        f"{fp / (bare_ms * 1e3) * 100:.2f}% of a {bare_ms:.2f} ms step, in the first "
        f"{ProfileConfig().fingerprint_steps} steps only; target < 1%"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
