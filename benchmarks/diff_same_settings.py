"""`perfdoctor diff` on real CPU runs that changed nothing: how often the verdict and the gate stay quiet here.

Records ``--pairs`` pairs of ``perfdoctor profile examples/mlp.py`` runs (``--steps`` steps each, one intra-op
thread, ``--num-workers 0``), the two runs of a pair at the same time so a load that changes between pairs hits
both alike, plus one pair with ``--item-every-step`` on the "before" side only (``.item()`` on a CPU tensor waits
for no device: removing it changes nothing on the CPU). Then it prints, for each pair, one run against one (the
machine's run-to-run noise assumed, ``perfdoctor.diff.stats.CPU_RUN_NOISE_PCT``) and, with three pairs or more,
all "before" runs against all "after" runs (the noise measured from the runs): the verdict, the change, the 95%
interval and the exit code of ``--fail-on-regression 5``, with the load average while the runs were recorded.

A 95% interval misses a true change of 0 in about 1 comparison of 20 when the machine's noise is what the method
assumes; a machine loaded by other work moves runs by more than that (3 runnable tasks per core and up:
``tests/test_diff_examples.py``). What the method guarantees is tested on synthetic draws instead
(``tests/test_diff_runs.py``: the interval's coverage); this script measures what real runs read on a machine.

    python benchmarks/diff_same_settings.py [--pairs 3] [--steps 250] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--num-workers", "0"]


def record(out: Path, flags: dict[str, list[str]], steps: int) -> float:
    """Record the runs named in ``flags`` at the same time under ``out``; the 1-minute load average after."""
    procs = []
    for name, extra in flags.items():
        cmd = [sys.executable, "-m", "perfdoctor", "profile", str(ROOT / "examples" / "mlp.py"), "--steps",
               str(steps), "--out", str(out / name), "--no-report", "--", *extra]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen(cmd, cwd=out, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    for proc in procs:
        _, err = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            raise SystemExit(f"profile failed: {err.decode()[-2000:]}")
    return os.getloadavg()[0]


def diff(before: list[Path], after: list[Path]) -> tuple[int, dict]:
    """(exit code, diff JSON) of ``perfdoctor diff BEFORE... --vs AFTER... --fail-on-regression 5``."""
    argv = [sys.executable, "-m", "perfdoctor", "diff", *map(str, before)]
    if len(before) > 1:
        argv.append("--vs")
    argv += [*map(str, after), "--format", "json", "--fail-on-regression", "5"]
    res = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    if res.returncode not in (0, 1):
        raise SystemExit(f"diff failed: {res.stderr[-2000:]}")
    return res.returncode, json.loads(res.stdout)


def row(label: str, load: float, code: int, d: dict) -> str:
    ci = d.get("ci95_pct") or [float("nan"), float("nan")]
    return (
        f"| {label} | {load:.1f} | {d['verdict']} | {d['change_pct']:+.1f}% | {ci[0]:+.1f}% to {ci[1]:+.1f}% | {code} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3, help="pairs of same-settings runs (default 3)")
    ap.add_argument("--steps", type=int, default=250, help="steps per run (default 250)")
    ap.add_argument("--keep", type=Path, help="record the runs here and keep them (default: a temporary folder)")
    args = ap.parse_args()
    out = args.keep or Path(tempfile.mkdtemp(prefix="perfdoctor-same-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"{os.cpu_count()} logical CPUs; runs under {out}\n")
    print("| comparison | load (1 min) | verdict | change | 95% CI | exit code, gate at 5% |")
    print("|---|---|---|---|---|---|")
    before, after, loads = [], [], []
    try:
        for i in range(args.pairs):
            load = record(out, {f"b{i}": SMALL, f"a{i}": SMALL}, args.steps)
            before.append(out / f"b{i}")
            after.append(out / f"a{i}")
            loads.append(load)
            print(row(f"same settings, pair {i + 1} (1 vs 1)", load, *diff([before[-1]], [after[-1]])), flush=True)
        if args.pairs >= 3:
            print(row(f"same settings, {args.pairs} vs {args.pairs}", max(loads), *diff(before, after)))
        load = record(out, {"item": [*SMALL, "--item-every-step"], "no_item": SMALL}, args.steps)
        print(row(".item() every step removed, CPU (1 vs 1)", load, *diff([out / "item"], [out / "no_item"])))
    finally:
        if args.keep is None:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
