#!/usr/bin/env python3
"""Trace loading speed and memory: perfdoctor vs orjson.loads vs HolisticTraceAnalysis.

Makes a ~450 MB (uncompressed) trace from the real V100 nanosecond-resolution
trace with ../shared/tools/scale_trace.py (cached in benchmarks/_data/), then
times each contender as a whole process, in one run, on the same file:

- perfdoctor: load + steps + full per-step breakdown + report dict
- orjson: gzip decompress + ``orjson.loads`` (the floor for any JSON-based loader)
- HTA: ``TraceAnalysis(trace_dir)`` + ``get_temporal_breakdown``

Prints wall seconds, peak RSS (ru_maxrss of the child) and the ratios.
Targets: perfdoctor ≤ 0.5× orjson, ≥ 10× faster than HTA, peak RSS ≤ 1.5×
the uncompressed trace size.

Usage: python benchmarks/trace_load.py [--target-mb 515] [--skip-hta] [--repeat 1]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SOURCE = REPO.parent / "shared" / "traces" / "hta__ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
SCALER = REPO.parent / "shared" / "tools" / "scale_trace.py"

OURS = """
import sys
from perfdoctor import pipeline
a = pipeline.analyze_paths([sys.argv[1]], hash_inputs=False)
r = pipeline.report_dict(a)
print(sum(len(d["steps"]) for x in r["ranks"] for d in x["devices"]), "steps")
"""
ORJSON = """
import gzip, sys, orjson
with gzip.open(sys.argv[1], "rb") as fh:
    doc = orjson.loads(fh.read())
print(len(doc["traceEvents"]), "events")
"""
HTA = """
import logging, sys
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
print(ta.get_temporal_breakdown(visualize=False).to_dict("records"))
"""


def run_child(code: str, arg: str) -> tuple[float, int, str]:
    """Run ``python -c code arg``; returns (wall seconds, peak RSS bytes, stdout tail)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, arg], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    out = proc.stdout.read().decode()[-200:] if proc.stdout else ""
    err = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
    if status != 0:
        raise SystemExit(f"child failed ({status}):\n{err}")
    return wall, usage.ru_maxrss * 1024, out.strip()


def make_trace(target_mb: float) -> Path:
    out = HERE / "_data" / f"ns_resolution_x{int(target_mb)}mb.json.gz"
    if out.exists():
        return out
    if not SOURCE.exists() or not SCALER.exists():
        raise SystemExit(f"needs {SOURCE} and {SCALER}")
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"making {out.name} with scale_trace.py ...", flush=True)
    subprocess.run([sys.executable, str(SCALER), str(SOURCE), str(out), "--target-mb", str(target_mb)], check=True)
    return out


def uncompressed_size(path: Path) -> int:
    n = 0
    with gzip.open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            n += len(block)
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # scale_trace sizes copies by the pretty-printed input (15.4 MB) but writes compact JSON (13.5 MB/copy):
    # --target-mb 515 gives 33 copies, about 450 MB uncompressed
    ap.add_argument("--target-mb", type=float, default=515)
    ap.add_argument("--skip-hta", action="store_true", help="skip HTA (it needs minutes and GBs)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per contender; the best is kept")
    a = ap.parse_args()
    trace = make_trace(a.target_mb)
    size = uncompressed_size(trace)
    print(f"trace: {trace} ({trace.stat().st_size / 1e6:.0f} MB gzip, {size / 1e6:.0f} MB uncompressed)")

    def best(code: str, arg: str) -> tuple[float, int, str]:
        runs = [run_child(code, arg) for _ in range(a.repeat)]
        return min(runs, key=lambda r: r[0])

    results = {"perfdoctor": best(OURS, str(trace)), "orjson.loads": best(ORJSON, str(trace))}
    if not a.skip_hta:
        tmp = Path(tempfile.mkdtemp())
        try:
            shutil.copy(trace, tmp / trace.name)
            results["HTA"] = best(HTA, str(tmp))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'contender':<14}{'wall s':>9}{'peak RSS MB':>14}   output")
    for name, (wall, rss, out) in results.items():
        print(f"{name:<14}{wall:>9.2f}{rss / 1e6:>14.0f}   {out[:60]}")
    ours_wall, ours_rss, _ = results["perfdoctor"]
    print(f"perfdoctor / orjson time: {ours_wall / results['orjson.loads'][0]:.2f}x (target <= 0.5x)")
    if "HTA" in results:
        print(f"HTA / perfdoctor time:    {results['HTA'][0] / ours_wall:.1f}x faster (target >= 10x)")
    print(f"perfdoctor peak RSS / uncompressed size: {ours_rss / size:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
