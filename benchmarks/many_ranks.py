#!/usr/bin/env python3
"""Many-rank jobs: wall time, ranks/s and reducer memory of `perfdoctor report` on 256 and 1,024 ranks.

Builds an N-rank job (cached in benchmarks/_data/many_ranks_<N>/) from rank 0 of the shared 8-rank DLRM
traces (V100, NCCL, one ProfilerStep of 14.5 ms, ~0.8 MB of JSON and ~245 kernels per rank; gzip'd ~60 kB):

- every rank gets its own clock offset (rank × 1,000.37 µs + a random 0-50 ms) and ±2% jitter on its compute
  kernels' durations (nothing else moves), and ``distributedInfo`` {rank, world_size};
- planted straggler (rank N/3): 6 ms of extra compute (a GEMM kernel and its host op) inserted before its 3rd
  collective; every later event of that rank moves 6 ms later, and every other rank's 3rd collective runs 6 ms
  longer (they wait for it) with their later events moved too;
- planted slow collective (the 6th, rank 2N/3 late by 3 ms of host delay, no extra compute): the others' 6th
  collective runs 3 ms longer.

Each configuration runs `pipeline.build` in a fresh child process (so peak RSS is the reducer's own; pool and
Dask workers are separate processes) and prints: wall s, ranks/s, reducer peak RSS (after `pipeline.build`:
the summaries received, the job analysed, the typed report made), the peak after rendering the HTML report and
then after writing the JSON report (every rank's section, in full) as the CLI writes it, whether the straggler
(PD303 naming it, and the job's straggler list) and the slow collective (the job's collective-wait matrix:
the 6th collective among the worst, its last arrival the late rank) were found, and findings above low
severity that the single-rank baseline does not have.

`--configs replica4096` measures the reducer alone at 4,096 ranks: 16 ranks of the job are summarised by a
2-worker pool and replicated to 4,096 (straggler and slow-collective columns do not apply there).

Wall time runs from before the executor is made (a DaskCluster on a given client, a LocalPool) to the end of
`pipeline.build`; a LocalCluster's own start is not counted. `daskN` starts a fresh LocalCluster of N one-thread
worker processes (each worker imports perfdoctor on its first task, ~1 s on a loaded machine); `daskwarmN` first
runs an 8-rank job on it, as a cluster that has served a job before, then times the job. "cpu s" is this
(reducing) process's CPU during the timed part: the reducer's own work, and for a LocalCluster also its
scheduler, which runs in this process. `--repeat R` runs the configurations R times, interleaved, and prints
the 1 → 2 worker speed-up of each kind per repetition (neighbouring runs see about the same load), its median
and range; the 1-minute load average is printed before and after each run (the machine is shared).
`--repo PATH` times the perfdoctor checkout at PATH (e.g. main before a change) with this script.

Usage: python benchmarks/many_ranks.py [--ranks 256 1024] [--configs pool1 pool2 dask1 dask2 replica4096]
       [--repeat R] [--repo PATH]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SOURCE = REPO.parent / "shared" / "traces" / "param__dlrm_8ranks" / "worker0_step_12.1694128201545.pt.trace.json.gz"
STRAGGLER_US = 6000.0
SLOW_US = 3000.0
K_STRAGGLER, K_SLOW = 2, 5  # 0-based: the 3rd and the 6th collective kernels


def _insert(events: list[dict[str, Any]], t: float, d: float) -> None:
    """Insert ``d`` µs at time ``t``: events starting at or after ``t`` move; events spanning ``t`` grow."""
    for e in events:
        ts = e.get("ts")
        if not isinstance(ts, (int, float)):
            continue
        if ts >= t:
            e["ts"] = ts + d
        elif isinstance(e.get("dur"), (int, float)) and ts + e["dur"] > t:
            e["dur"] += d


def make_rank(doc: dict[str, Any], rank: int, world: int, rng: random.Random) -> dict[str, Any]:
    """One rank of the synthetic job (see the module docstring)."""
    d = json.loads(json.dumps(doc))
    ev = d["traceEvents"]
    colls = sorted((e for e in ev if e.get("cat") == "kernel" and "nccl" in e["name"]), key=lambda e: e["ts"])
    launch = {
        e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    for e in ev:
        if e.get("cat") == "kernel" and "nccl" not in e["name"]:
            e["dur"] = round(e["dur"] * (1 + rng.uniform(-0.02, 0.02)), 3)
    straggler, late = world // 3, 2 * world // 3
    # apply the later insertion first so the earlier one's times stay valid
    for k, who, d_us, compute in ((K_SLOW, late, SLOW_US, False), (K_STRAGGLER, straggler, STRAGGLER_US, True)):
        c = colls[k]
        if rank == who:
            t = launch[c["args"]["correlation"]]["ts"]
            _insert(ev, t, d_us)
            if compute:
                ev.append(
                    {
                        "ph": "X",
                        "cat": "kernel",
                        "name": "cutlass_planted_straggler_gemm",
                        "pid": c["pid"],
                        "tid": 7,
                        "ts": t,
                        "dur": d_us - 10,
                        "args": {"device": c["args"].get("device", 0), "stream": 7, "correlation": -1},
                    }
                )
                host = launch[c["args"]["correlation"]]
                ev.append(
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": "aten::planted_extra_work",
                        "pid": host["pid"],
                        "tid": host["tid"],
                        "ts": t,
                        "dur": d_us - 10,
                        "args": {},
                    }
                )
        else:
            _insert(ev, c["ts"] + c["dur"] - 0.5, d_us)
    offset = rank * 1000.37 + rng.uniform(0, 50_000)
    for e in ev:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = round(e["ts"] + offset, 3)
    d["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    return d


def build_job(n: int) -> Path:
    out = HERE / "_data" / f"many_ranks_{n}"
    done = out / ".complete"
    if done.exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    doc = json.loads(gzip.open(SOURCE).read())
    for r in range(n):
        data = json.dumps(make_rank(doc, r, n, random.Random(r))).encode()
        with gzip.open(out / f"rank{r:04d}.pt.trace.json.gz", "wb", compresslevel=1) as fh:
            fh.write(data)
    done.write_text("ok")
    return out


CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from perfdoctor import pipeline
from perfdoctor.jobs.executors import DaskCluster, InProcess, LocalPool
kind, workers, path = sys.argv[2], int(sys.argv[3]), sys.argv[4]
t0 = time.perf_counter()
cluster = client = None
make = None
if kind == "pool":
    make = lambda: LocalPool(workers) if workers > 1 else InProcess()
elif kind == "replica":
    import msgspec, pickle
    try:
        from perfdoctor.model.sections import decode_section, encode_section
    except ImportError:  # the code before the sections were kept encoded
        decode_section = encode_section = None

    class Replicas:
        # 16 ranks summarised by a 2-worker pool, replicated to `workers` ranks as if each had arrived from a
        # worker (a pickle round trip each): the reducer's memory at a size no trace set here reaches; no second
        # round (the peers' re-analysis: the replicas' collective timelines are copies)

        def summarise(self, files, opts, cat, cache=False, indices=None, quiet=False):
            if quiet:
                return []
            base = LocalPool(2).summarise(files[:16], opts, cat, cache)
            out = []
            for r in range(workers):
                s = pickle.loads(pickle.dumps(base[r % len(base)]))
                s.rank = s.index = r
                s.world_size = workers
                s.path = s.input["path"] = f"/job/rank{r:05d}.pt.trace.json.gz"
                encoded = isinstance(s.section, bytes)  # a RankSection before the sections were kept encoded
                sec = decode_section(s.section) if encoded else s.section
                sec.rank, sec.path = r, s.path
                s.section = encode_section(sec) if encoded else sec
                s.collectives = msgspec.structs.replace(s.collectives, rank=r, world_size=workers)
                out.append(s)
            return out

    make = Replicas
else:
    from distributed import Client, LocalCluster
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)
    client.wait_for_workers(workers)
    if kind == "daskwarm":  # a cluster that has served a job: its workers imported perfdoctor then
        import glob
        warm = sorted(glob.glob(sys.argv[5] + "/*.json.gz"))[:8]
        pipeline.build(warm, executor=DaskCluster(client))
    make = lambda: DaskCluster(client)
t1 = time.perf_counter()
c1 = time.process_time()
built = pipeline.build([path], executor=make())
wall = time.perf_counter() - t1
cpu = time.process_time() - c1
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the reducer's peak: summaries in, report out
if client is not None:
    client.close(); cluster.close()
import msgspec
from perfdoctor.model import to_builtins
model = built.model  # read its job and findings only: to_builtins(model) would decode every rank's section
job = to_builtins(model.job) if model.job else {"n_ranks": 1, "stragglers": [], "collective_wait": {}, "ranks": [0]}
out = {"wall_s": wall, "cpu_s": cpu, "startup_s": t1 - t0, "rss_mb": rss,
       "n_ranks": job["n_ranks"], "stragglers": [s["rank"] for s in job["stragglers"]],
       "cw": job["collective_wait"], "ranks": job["ranks"],
       "findings": [{"code": f["code"], "severity": f["severity"], "rank": f["rank"],
                     "ranks": f["evidence"].get("ranks", []), "message": f["message"][:160]}
                    for f in msgspec.to_builtins(model.findings)],
       "html_bytes": None}
from perfdoctor.render.formats import render_bytes
t2 = time.perf_counter()
out["html_bytes"] = len(render_bytes(model, "html"))
out["html_s"] = time.perf_counter() - t2
out["html_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
from perfdoctor.render.formats import render_chunks
import os
with open(os.devnull, "wb") as sink:  # as `perfdoctor report -o report.json` writes it: a rank at a time
    out["json_bytes"] = sum(sink.write(piece) for piece in render_chunks(model, "json"))
out["json_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def run(kind: str, workers: int, path: Path, repo: Path = REPO) -> dict[str, Any]:
    load0 = os.getloadavg()[0]
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(repo), kind, str(workers), str(path), str(SOURCE.parent)],
        capture_output=True,
        text=True,
        check=False,
        cwd=repo,  # a forkserver imports its preload with the working directory first on sys.path
    )
    if r.returncode != 0:
        raise SystemExit(r.stderr[-3000:])
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    out["load"] = (load0, os.getloadavg()[0])
    return out


def verdict(res: dict[str, Any], n: int, baseline: set[str]) -> dict[str, Any]:
    straggler, late = n // 3, 2 * n // 3
    pd303 = [f for f in res["findings"] if f["code"] == "PD303"]
    cw = res["cw"]
    worst = [w["index"] for w in cw.get("worst_collectives", [])[:2]]
    last_at_slow = None
    if cw.get("matched") and K_SLOW in worst:
        col = [row[worst.index(K_SLOW)] for row in cw["wait_matrix_us"]]
        last_at_slow = res["ranks"][min(range(len(col)), key=col.__getitem__)]
    extra = sorted({f["code"] for f in res["findings"] if f["severity"] != "low"} - baseline - {"PD303", "PD304"})
    return {
        "straggler_found": bool(pd303 and straggler in pd303[0]["ranks"]) and straggler in res["stragglers"],
        "slow_collective_found": K_STRAGGLER in worst and K_SLOW in worst and last_at_slow == late,
        "other_stragglers": [r for r in res["stragglers"] if r != straggler],
        "new_findings_above_low": extra,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--configs", nargs="+", default=["pool1", "pool2", "dask1", "dask2"])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--repo", type=Path, default=REPO)
    args = ap.parse_args()
    base = run("pool", 1, SOURCE, args.repo)
    baseline = {f["code"] for f in base["findings"] if f["severity"] != "low"}
    print(f"perfdoctor at {args.repo}; the source rank alone: findings above low: {sorted(baseline)}")
    print(
        f"{'ranks':>6} {'config':>9} {'wall s':>8} {'ranks/s':>8} {'cpu s':>6} {'load':>9} {'reducer RSS MB':>15} "
        f"{'straggler':>10} {'slow coll.':>10} {'new >low':>10} {'HTML MB':>8} {'+HTML RSS':>9} {'JSON MB':>8} "
        f"{'+JSON RSS':>9}"
    )
    for n in args.ranks:
        t0 = time.perf_counter()
        path = build_job(n)
        print(
            f"  (job of {n} ranks ready in {time.perf_counter() - t0:.1f} s: "
            f"{sum(f.stat().st_size for f in path.glob('*.gz')) / 1e6:.0f} MB gzip'd)"
        )
        walls: dict[str, list[float]] = {}
        for _ in range(args.repeat):
            for cfg in args.configs:
                kind, workers = cfg.rstrip("0123456789"), int(cfg[len(cfg.rstrip("0123456789")) :])
                res = run(kind, workers, path, args.repo)
                walls.setdefault(cfg, []).append(res["wall_s"])
                v = verdict(res, n, baseline)
                n_ranks = workers if kind == "replica" else n
                load = f"{res['load'][0]:.1f}-{res['load'][1]:.1f}"
                print(
                    f"{n_ranks:>6} {cfg:>9} {res['wall_s']:>8.1f} {n_ranks / res['wall_s']:>8.2f} {res['cpu_s']:>6.2f} "
                    f"{load:>9} {res['rss_mb']:>15.0f} {str(v['straggler_found']):>10} "
                    f"{str(v['slow_collective_found']):>10} {','.join(v['new_findings_above_low']) or '-':>10} "
                    f"{res['html_bytes'] / 1e6:>8.2f} {res['html_rss_mb']:>9.0f} {res['json_bytes'] / 1e6:>8.1f} "
                    f"{res['json_rss_mb']:>9.0f}",
                    flush=True,
                )
                if v["other_stragglers"]:
                    print(f"         other ranks flagged as stragglers: {v['other_stragglers'][:10]}")
        for kind in sorted({c.rstrip("0123456789") for c in walls}):
            one, two = walls.get(f"{kind}1"), walls.get(f"{kind}2")
            if one and two:
                ratios = [a / b for a, b in zip(one, two)]
                print(
                    f"  {n} ranks, {kind} 1 -> 2 workers: speed-up {', '.join(f'{r:.2f}' for r in ratios)} "
                    f"(median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f})",
                    flush=True,
                )


if __name__ == "__main__":
    main()
