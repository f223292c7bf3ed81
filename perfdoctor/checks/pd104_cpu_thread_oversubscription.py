"""PD104 cpu-thread-oversubscription: more busy compute threads than CPU cores.

From the run data of ``perfdoctor profile``: processes of the job on this
machine (``LOCAL_WORLD_SIZE`` or the world size of a single-node run) ×
intra-op threads per process (``torch.get_num_threads()`` recorded by the
runner) + DataLoader worker processes, against the machine's logical CPUs.
PyTorch sizes each process's intra-op pool to all cores, so N processes on
one machine oversubscribe it N-fold unless each sets its own thread count.
"""

from __future__ import annotations

from perfdoctor.checks.context import JobContext, Outcome, passed, skipped
from perfdoctor.findings import Evidence, Hit

CODE = "PD104"
METRICS = {"threads_per_core": "busy compute threads ÷ logical CPUs"}


def check(job: JobContext) -> Outcome:
    from perfdoctor.checks.context import run_json

    run = run_json(job.analysis) or {}
    env, cpu = run.get("environment") or {}, run.get("cpu") or {}
    cores = cpu.get("logical_cpus")
    threads = env.get("torch_threads")
    if not cores or not threads:
        return skipped("the run data lacks the CPU count or torch's thread count")
    local = int(env.get("local_world_size") or (run.get("world_size") or 1 if run.get("launcher") != "multi-node"
                                                   else 1))
    workers = int(env.get("dataloader_workers") or 0)
    busy = local * int(threads) + workers
    ratio = busy / int(cores)
    if ratio <= job.th["max_threads_per_core"]:
        return passed(threads_per_core=ratio)
    ev = Evidence(values={"processes": local, "threads_per_process": int(threads), "dataloader_workers": workers,
                          "busy_threads": busy, "cores": int(cores), "ratio": ratio,
                          "suggested_threads": max(1, int(cores) // local)})
    return Outcome(metrics={"threads_per_core": ratio}, hit=Hit(evidence=ev, estimate=None))
