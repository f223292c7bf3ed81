"""PD104 cpu-thread-oversubscription: more busy compute threads than CPU cores.

From the run data of ``perfdoctor profile``: the intra-op threads of every
rank's process (``torch.get_num_threads()`` recorded by each rank at the end of
its run, after the script set its own count) + DataLoader worker processes,
against the machine's logical CPUs (single-node runs).
PyTorch sizes each process's intra-op pool to all cores, so N processes on
one machine oversubscribe it N-fold unless each sets its own thread count.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfdoctor.checks.context import JobContext, Outcome, passed, skipped
from perfdoctor.findings import Evidence, Hit

CODE = "PD104"
METRICS = {"threads_per_core": "busy compute threads ÷ logical CPUs"}

# what a hit's evidence/fields add to METRICS for the TOML message (its placeholders are checked at load)
MESSAGE_FIELDS = ("busy_threads", "cores", "dataloader_workers", "processes", "ratio", "threads_per_process")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD104.toml: names and types checked when the catalogue loads."""

    max_threads_per_core: float


def check(job: JobContext) -> Outcome:
    from perfdoctor.checks.context import run_json

    run = run_json(job.analysis) or {}
    env, cpu = run.get("environment") or {}, run.get("cpu") or {}
    cores = cpu.get("logical_cpus")
    ranks = [r for r in run.get("ranks") or [] if isinstance(r, dict)]
    per_rank = [r.get("torch_threads") for r in ranks]
    thread_counts: list[int]
    if ranks and all(isinstance(t, int) and t > 0 for t in per_rank):
        thread_counts = [int(t) for t in per_rank if isinstance(t, int)]  # recorded in each rank at the end of its run
    elif (run.get("world_size") or 1) == 1 and env.get("torch_threads"):
        thread_counts = [int(env["torch_threads"])]
    else:
        return skipped(
            "the run data lacks each rank's intra-op thread count (recorded by perfdoctor profile from this version on)"
        )
    if not cores:
        return skipped("the run data lacks the CPU count")
    local = len(thread_counts)
    threads = max(thread_counts)
    workers = int(env.get("dataloader_workers") or 0)
    busy = sum(thread_counts) + workers
    ratio = busy / int(cores)
    if ratio <= job.th["max_threads_per_core"]:
        return passed(threads_per_core=ratio)
    ev = Evidence(
        values={
            "processes": local,
            "threads_per_process": int(threads),
            "dataloader_workers": workers,
            "busy_threads": busy,
            "cores": int(cores),
            "ratio": ratio,
            "suggested_threads": max(1, int(cores) // local),
        }
    )
    return Outcome(metrics={"threads_per_core": ratio}, hit=Hit(evidence=ev, estimate=None))
