"""PD104 cpu-thread-oversubscription: more busy compute threads than CPU cores.

From the run data of ``perfdoctor profile``: the intra-op threads of every
rank's process (``torch.get_num_threads()`` recorded by each rank at the end of
its run, after the script set its own count) + DataLoader worker processes,
against the machine's logical CPUs (single-node runs).
PyTorch sizes each process's intra-op pool to all cores, so N processes on
one machine oversubscribe it N-fold unless each sets its own thread count.
On a CPU-only trace the saving is the replay's
(:func:`perfdoctor.replay.transforms.cpu.fit_threads_to_cores`: op time ÷ the
busy threads per core), from the first rank with a trace; on a GPU trace, or
without a trace, it is not estimated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from perfdoctor.checks.context import JobContext, Outcome, RankContext, passed, skipped
from perfdoctor.checks.run_facts import number, table, tables
from perfdoctor.findings import Estimate, Evidence, Hit

CODE = "PD104"
METRICS = {"threads_per_core": "busy compute threads ÷ logical CPUs"}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = ("busy_threads", "cores", "dataloader_workers", "processes", "ratio", "threads_per_process")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD104.toml: names and types checked when the catalogue loads."""

    max_threads_per_core: float


def thread_counts(run: Mapping[str, object]) -> tuple[list[int], int, int] | str:
    """(intra-op threads of each process, DataLoader worker processes of all ranks, logical CPUs) from
    ``run.json``, or why not.

    Each rank's ``torch_threads`` is ``torch.get_num_threads()`` recorded at the end of its run (after the script
    set its own count); a single-process run of an older version falls back to the start-up count.
    """
    env, cpu = table(run, "environment"), table(run, "cpu")
    cores = number(cpu, "logical_cpus")
    ranks = tables(run, "ranks")
    per_rank = [r.get("torch_threads") for r in ranks]
    counts: list[int]
    env_threads = number(env, "torch_threads")
    if ranks and all(isinstance(t, int) and t > 0 for t in per_rank):
        counts = [int(t) for t in per_rank if isinstance(t, int)]
    elif (run.get("world_size") or 1) == 1 and env_threads:
        counts = [int(env_threads)]
    else:
        return (
            "the run data lacks each rank's intra-op thread count (recorded by perfdoctor profile from this version on)"
        )
    if not cores:
        return "the run data lacks the CPU count"
    # each rank's DataLoader workers (recorded per rank from this version on), else the run's single count
    rank_workers = [r.get("dataloader_workers") for r in ranks]
    if any(isinstance(w, int) for w in rank_workers):
        workers = sum(w for w in rank_workers if isinstance(w, int))
    else:
        workers = int(number(env, "dataloader_workers") or 0)
    return counts, workers, int(cores)


def check(job: JobContext) -> Outcome:

    th = job.thresholds(Thresholds)
    counts = thread_counts(job.analysis.run_json() or {})
    if isinstance(counts, str):
        return skipped(counts)
    per_process, workers, cores = counts
    local = len(per_process)
    threads = max(per_process)
    busy = sum(per_process) + workers
    ratio = busy / cores
    if ratio <= th.max_threads_per_core:
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
    run = job.analysis.run_json() or {}
    estimate = next((o.hit.estimate for o in job.rank_parts if o is not None and o.hit is not None), None)
    if estimate is None:
        estimate = _replayed(job, busy, int(cores), thread_probe(run))
    return Outcome(metrics={"threads_per_core": ratio}, hit=Hit(evidence=ev, estimate=estimate))


def rank_part(ctx: RankContext) -> Outcome:
    """On a CPU-only rank with analysed steps, where its tables are: the replayed saving of fitting the job's
    threads to the cores (:func:`perfdoctor.replay.transforms.cpu.fit_threads_to_cores`, the run's measured
    ratio where it has one), as a hit whose estimate :func:`check` states; a pass otherwise."""
    from perfdoctor.replay.transforms.cpu import fit_threads_to_cores

    th = ctx.thresholds(Thresholds)
    run = ctx.analysis.run_json()
    counts = thread_counts(run) if run is not None else "no run data"
    if isinstance(counts, str) or ctx.is_gpu or ctx.n_steps == 0 or not ctx.has_trace:
        return passed()
    assert run is not None
    per_process, workers, cores = counts
    busy = sum(per_process) + workers
    if busy / cores <= th.max_threads_per_core:
        return passed()
    whatif = fit_threads_to_cores(ctx.replay(), ctx.tables, busy, cores, thread_probe(run))
    saving, _, method = ctx.replayed_saving(whatif)
    return Outcome(metrics={}, hit=Hit(evidence=Evidence(values={}), estimate=Estimate(max(saving, 0.0), method)))


def thread_probe(run: Mapping[str, object]) -> dict[str, object] | None:
    """The first rank's ``thread_probe`` of ``run.json`` (:func:`perfdoctor.capture.op_probe.probe_threads`), or
    None."""
    for r in tables(run, "ranks"):
        probe = r.get("thread_probe")
        if isinstance(probe, dict) and (number(probe, "suggested_over_recorded") or 0) > 0:
            return probe
    return None


def _replayed(job: JobContext, busy: int, cores: int, probe: dict[str, object] | None) -> Estimate | None:
    """The replayed saving of one thread per core on the first CPU-only rank with a trace (op times scaled by the
    run's measured ratio where it has one), or None."""
    from perfdoctor.replay.transforms.cpu import fit_threads_to_cores

    rc = next((r for r in job.ranks if r.has_trace and not r.is_gpu), None)
    if rc is None or rc.n_steps == 0:
        return None
    rc.spec = job.spec  # the what-if is recorded under this rule's code
    saving, _, method = rc.replayed_saving(fit_threads_to_cores(rc.replay(), rc.tables, busy, cores, probe))
    return Estimate(max(saving, 0.0), method)
