"""One row of ``steps.csv``: the per-step record the runner writes and ``perfdoctor report`` reads back.

Kept apart from :mod:`perfdoctor.capture.step_timer` (which needs torch) so that reading a run
directory never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

STEP_FIELDS = (
    "step",
    "start_s",
    "duration_s",
    "tokens",
    "samples",
    "rss_bytes",
    "cuda_allocated_bytes",
    "cuda_reserved_bytes",
    "cuda_malloc_count",
    "cuda_alloc_retries",
    "profiler_phase",
    "eval_s",
    "checkpoint_s",
    "cpu_s",
    "main_cpu_s",
    "main_wait_s",
    "machine_cpu_s",
    "minor_faults",
)


@dataclass
class StepRecord:
    """One row of ``steps.csv``. Times in seconds from the run start (``start_s``)."""

    step: int
    start_s: float
    duration_s: float
    tokens: int | None = None
    samples: int | None = None
    rss_bytes: int | None = None
    cuda_allocated_bytes: int | None = None
    cuda_reserved_bytes: int | None = None
    cuda_malloc_count: int | None = None
    cuda_alloc_retries: int | None = None
    profiler_phase: str = "none"  # none | flops | warmup | active
    eval_s: float = 0.0  # host seconds of evaluation inside the step (perfdoctor.capture.non_training)
    checkpoint_s: float = 0.0  # host seconds inside torch.save in the step
    # CPU seconds the training process used in the step, all its threads (time.process_time: intra-op threads
    # included, DataLoader worker processes not), and the step loop's own thread (time.thread_time): what the
    # machine's cores give the process, beside duration_s, the wall time (perfdoctor.replay.machine)
    cpu_s: float | None = None
    main_cpu_s: float | None = None
    # seconds the step loop's thread waited on a run queue for a core (Linux /proc/thread-self/schedstat): time
    # it wanted to run while other threads had the cores, told apart from sleeping and I/O
    main_wait_s: float | None = None
    # CPU seconds the whole machine's cores were busy in the step (Linux /proc/stat: user, nice, system, irq,
    # softirq and steal time of all CPUs): beside cpu_s, what other processes (and the job's worker processes)
    # took of the cores while the step ran
    machine_cpu_s: float | None = None
    # minor page faults the training process took in the step (getrusage ru_minflt: a page of fresh memory touched
    # for the first time, the kernel mapping and zeroing it): the profiler changes how often the allocator hands
    # out fresh pages (perfdoctor.replay.unprofiled)
    minor_faults: int | None = None

    def row(self) -> list[object]:
        """The record's values in ``STEP_FIELDS`` order (one CSV row)."""
        return [getattr(self, f) for f in STEP_FIELDS]
