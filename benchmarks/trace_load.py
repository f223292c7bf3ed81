#!/usr/bin/env python3
"""Trace loading speed and memory: `perfdoctor report` vs orjson.loads vs gunzip vs HolisticTraceAnalysis.

Makes two ~450 MB (uncompressed) traces with ../shared/tools/scale_trace.py (cached in --data-dir, default
benchmarks/_data/): one from the real V100 nanosecond-resolution trace, one from the real distributed A100
trace with NCCL kernels (HTA's nccl_parser_config). On each it times every contender as a whole process,
in one run, on the same file:

- perfdoctor: ``perfdoctor report TRACE`` (load + steps + breakdown + replay + every rule + terminal report)
- perfdoctor 2w / perfdoctor 1w: the same with ``PERFDOCTOR_LOAD_WORKERS`` 2 and 1 (the events decoded by worker
  processes beside the one that inflates and cuts, perfdoctor.trace.parallel): the speed-up the workers give
- orjson: gzip decompress + ``orjson.loads`` (what any JSON-to-dicts loader pays)
- gunzip: gzip decompress alone (the floor for anything that reads the file)
- HTA: ``TraceAnalysis(trace_dir)`` + ``get_temporal_breakdown`` (with --hta; it needs minutes and GBs)

Prints wall seconds (the best of --repeat runs, and the spread), CPU seconds (user + system of the child and its
workers, in the best run), peak RSS (ru_maxrss: the largest single process, the child or one of its workers) and
the peak of the RSS summed over the child and its workers (sampled every 20 ms; shared copy-on-write pages count
once per process, so it is an upper bound), and the ratios. On a shared machine, compare CPU seconds too: wall
time there says as much about the other load as about the contender. Targets: perfdoctor ≤ 0.35×
orjson on both traces; peak RSS ≤ 1.5× the uncompressed size.

Usage: python benchmarks/trace_load.py [--data-dir DIR] [--hta] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TRACES = REPO.parent / "shared" / "traces"
SCALER = REPO.parent / "shared" / "tools" / "scale_trace.py"
# (label, source trace, --target-mb): scale_trace sizes copies by the input's uncompressed bytes but writes
# compact JSON, so the target is above the ~450 MB it gives (V100: 33 copies, 446 MB; A100: 51 copies, 448 MB)
SOURCES = (
    ("V100", TRACES / "hta__ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", 515),
    ("A100 NCCL", TRACES / "hta__nccl_parser_config__nccl_data.json.gz", 500),
)

OURS = """
import sys
from perfdoctor.cli import main
sys.argv = ["perfdoctor", "report", sys.argv[1]]
main()
"""
ORJSON = """
import gzip, sys, orjson
with gzip.open(sys.argv[1], "rb") as fh:
    doc = orjson.loads(fh.read())
print(len(doc["traceEvents"]), "events")
"""
GUNZIP = """
import gzip, sys
with gzip.open(sys.argv[1], "rb") as fh:
    print(len(fh.read()), "bytes")
"""
HTA = """
import logging, sys
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
print(ta.get_temporal_breakdown(visualize=False).to_dict("records"))
"""


Run = tuple[float, int, str, float, int]  # wall s, peak RSS bytes, stdout tail, CPU s, peak tree RSS bytes


def _tree_rss(pid: int) -> int:
    """RSS bytes of ``pid`` and its descendants now (0 for those gone)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as fh:
                total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            with open(f"/proc/{p}/task/{p}/children") as fh:
                todo += [int(c) for c in fh.read().split()]
        except (OSError, ValueError):
            continue
    return total


def run_child(code: str, arg: str, extra_env: dict[str, str] | None = None) -> Run:
    """Run ``python -c code arg``; returns (wall seconds, peak RSS bytes of that child or its largest waited-for
    worker, stdout tail, CPU seconds of the child and its workers, peak RSS bytes summed over them)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "120", **(extra_env or {})}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", code, arg], stdout=out, stderr=err, env=env)
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.02):
                peak[0] = max(peak[0], _tree_rss(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode not in (0, 1):  # perfdoctor report exits 1 only with --fail-on
            raise SystemExit(f"child failed ({proc.returncode}):\n{err.read().decode()[-2000:]}")
        cpu = usage.ru_utime + usage.ru_stime
        return (
            wall,
            usage.ru_maxrss * 1024,
            out.read().decode()[-200:].strip(),
            cpu,
            max(peak[0], usage.ru_maxrss * 1024),
        )


def make_trace(source: Path, target_mb: float, data_dir: Path) -> Path:
    out = data_dir / f"{source.name.split('.')[0]}_x{int(target_mb)}mb.json.gz"
    if out.exists():
        return out
    if not source.exists() or not SCALER.exists():
        raise SystemExit(f"needs {source} and {SCALER}")
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"making {out} with scale_trace.py ...", flush=True)
    subprocess.run([sys.executable, str(SCALER), str(source), str(out), "--target-mb", str(target_mb)], check=True)
    return out


def uncompressed_size(path: Path) -> int:
    n = 0
    with gzip.open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            n += len(block)
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=HERE / "_data", help="where the scaled traces are kept")
    ap.add_argument("--hta", action="store_true", help="also time HTA (it needs minutes and GBs)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per contender; the best is kept, the spread shown")
    ap.add_argument("--only", choices=[label for label, _, _ in SOURCES], help="one trace only")
    a = ap.parse_args()
    for label, source, target_mb in SOURCES:
        if a.only and label != a.only:
            continue
        trace = make_trace(source, target_mb, a.data_dir)
        size = uncompressed_size(trace)
        print(f"\n{label}: {trace} ({trace.stat().st_size / 1e6:.0f} MB gzip, {size / 1e6:.0f} MB uncompressed)")
        contenders = {
            "perfdoctor": (OURS, {}),
            "perfdoctor 2w": (OURS, {"PERFDOCTOR_LOAD_WORKERS": "2"}),
            "perfdoctor 1w": (OURS, {"PERFDOCTOR_LOAD_WORKERS": "1"}),
            "orjson.loads": (ORJSON, {}),
            "gunzip": (GUNZIP, {}),
        }
        results: dict[str, list[Run]] = {name: [] for name in contenders}
        for _ in range(a.repeat):  # interleaved, so a change in the machine's load hits every contender alike
            for name, (code, extra) in contenders.items():
                results[name].append(run_child(code, str(trace), extra))
        if a.hta:
            tmp = Path(tempfile.mkdtemp())
            try:
                shutil.copy(trace, tmp / trace.name)
                results["HTA"] = [run_child(HTA, str(tmp)) for _ in range(a.repeat)]
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        report(results, size)


def report(results: dict[str, list[Run]], size: int) -> None:
    best = {name: min(runs, key=lambda r: r[0]) for name, runs in results.items()}
    print(
        f"{'contender':<15}{'best s':>8}{'runs s':>24}{'CPU s':>8}{'min CPU s':>10}{'peak RSS MB':>13}"
        f"{'all procs MB':>14}   output"
    )
    for name, runs in results.items():
        walls = " ".join(f"{r[0]:.2f}" for r in runs)
        rss = max(r[1] for r in runs)
        tree = max(r[4] for r in runs)
        print(
            f"{name:<15}{best[name][0]:>8.2f}{walls:>24}{best[name][3]:>8.2f}{min(r[3] for r in runs):>10.2f}"
            f"{rss / 1e6:>13.0f}{tree / 1e6:>14.0f}   {best[name][2][-40:]!r}"
        )
    ours = [r[0] for r in results["perfdoctor"]]
    orj = [r[0] for r in results["orjson.loads"]]
    gz = [r[0] for r in results["gunzip"]]
    pairs = [o / j for o, j in zip(ours, orj, strict=True)]
    print(
        f"perfdoctor / orjson time: {min(ours) / min(orj):.2f}x best/best "
        f"(per repeat {min(pairs):.2f}-{max(pairs):.2f}x; target <= 0.35x)"
    )
    cpu = {name: min(r[3] for r in runs) for name, runs in results.items()}
    print(f"perfdoctor / orjson CPU seconds: {cpu['perfdoctor'] / cpu['orjson.loads']:.2f}x (least of each)")
    print(f"perfdoctor / gunzip time: {min(ours) / min(gz):.1f}x; gunzip / orjson: {min(gz) / min(orj):.2f}x")
    for name in ("perfdoctor 2w", "perfdoctor 1w"):
        if name in results:
            w = min(r[0] for r in results[name])
            print(f"perfdoctor / {name} time: {min(ours) / w:.2f}x (the speed-up of the decoding workers)")
    if "HTA" in results:
        print(f"HTA / perfdoctor time:    {min(r[0] for r in results['HTA']) / min(ours):.1f}x faster")
    rss = max(r[1] for r in results["perfdoctor"])
    print(f"perfdoctor peak RSS / uncompressed size: {rss / size:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
