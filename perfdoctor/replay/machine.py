"""The machine in the replay: how many cores a ``perfdoctor profile`` run had and how much of them its step used.

A what-if that moves host work off the training loop (batches prefetched by DataLoader workers) does not make that
work free: the workers run it on the same machine's cores. Where the run records them (``run.json``'s
``cpu.logical_cpus`` and ``cpu.model``; ``steps.csv``'s ``cpu_s``, the training process's CPU seconds per step over
all its threads, and ``main_cpu_s``, the step loop thread's), the fixed step cannot be shorter than the CPU time
the step needs ÷ the cores (:func:`perfdoctor.replay.transforms.host.core_floor`). A bare trace records neither
(Kineto keeps thread ids, not cores): the what-if then states the fewest cores its saving needs.

Source of the bound: a step that needs ``U`` CPU-µs of work on ``C`` cores lasts at least ``U / C`` µs (work
conservation; the OS time-slices runnable threads over the cores). It is a lower bound on the fixed step: threads
that wait at a parallel region's barrier for a descheduled peer, and caches and memory bandwidth the workers share,
slow it further and are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CoreBudget:
    """A run's cores and the CPU time of its unprofiled steady step (medians over those steps).

    Attributes:
        cores: logical CPUs of the machine that ran the job (``os.cpu_count()`` in ``run.json``).
        cpu_model: its CPU model (``/proc/cpuinfo``), or None.
        step_us: median unprofiled steady step, wall time (µs; None without ``steps.csv`` CPU times).
        process_cpu_us: median CPU time of those steps over all the training process's threads (µs, ``cpu_s``).
        main_cpu_us: the same for the step loop's own thread (µs, ``main_cpu_s``).
        source: where the cores come from (``"run.json"``, or a stated assumption).
        load_avg: the machine's 1-minute load average when the run started (``run.json`` ``load_avg.start``,
            before the job ran a step): other processes' runnable threads, each taking a core's share.
        main_wait_us: median time per step the step loop's thread waited on a run queue for a core (µs,
            ``main_wait_s``; None where not recorded).
        other_cores: the cores other processes kept busy during those steps, measured: (Σ the machine's busy CPU
            time − Σ the training process's) ÷ Σ their wall time (``machine_cpu_s``, ``cpu_s``, ``duration_s``;
            the job's own DataLoader worker processes count as other); None where not recorded or over under
            :data:`MIN_MEASURED_S` of steps (the machine's clock ticks are 10 ms).
    """

    cores: int
    cpu_model: str | None = None
    step_us: float | None = None
    process_cpu_us: float | None = None
    main_cpu_us: float | None = None
    source: str = "run.json"
    load_avg: float | None = None
    main_wait_us: float | None = None
    other_cores: float | None = None

    def job_cores(self, threads: int) -> float:
        """Cores ``threads`` runnable threads of the job get on this machine (processor sharing).

        With the step thread's run-queue wait measured: it got ``f = cpu / (cpu + wait)`` of a core while
        runnable, so ``L = C / f − 1`` other threads shared the ``C`` cores with it, and ``k`` threads get
        ``min(C, k·C / (L + k))``. Without it, or when it waited under 5% of its runnable time (then the other
        load cannot be told from the wait): :attr:`free_cores`."""
        if self.main_wait_us is None or self.main_cpu_us is None or not self.main_cpu_us > 0:
            return self.free_cores
        f = self.main_cpu_us / (self.main_cpu_us + self.main_wait_us)
        if f >= 0.95:
            return self.free_cores
        others = self.cores / f - 1.0
        return min(float(self.cores), threads * self.cores / (others + threads))

    @property
    def free_cores(self) -> float:
        """The cores left to the job: :attr:`cores` − what other processes took of them (at least 1): measured
        during the steps (:attr:`other_cores`) where recorded, else the load average at the start (a 1-minute
        average: it still counts a job that ended just before this one started)."""
        if self.other_cores is not None:
            return max(float(self.cores) - self.other_cores, 1.0)
        load = self.load_avg if self.load_avg is not None and self.load_avg > 0 else 0.0
        return max(float(self.cores) - load, 1.0)

    @property
    def measured(self) -> bool:
        """Whether the run recorded its steps' CPU time (``steps.csv`` ``cpu_s`` and ``main_cpu_s``)."""
        return self.step_us is not None and self.process_cpu_us is not None and self.main_cpu_us is not None

    def off_cpu_us(self) -> float:
        """Time per unprofiled step the step loop's thread was off the CPU by its own doing (µs): sleeping, in
        I/O, or waiting for another thread (wall − its CPU time − its run-queue wait where recorded, at least 0; 0
        when not measured)."""
        if not self.measured:
            return 0.0
        assert self.step_us is not None and self.main_cpu_us is not None
        return max(self.step_us - self.main_cpu_us - (self.main_wait_us or 0.0), 0.0)

    def machine_text(self) -> str:
        """ "2 logical CPUs (Intel Xeon …, run.json)"."""
        model = f"{self.cpu_model}, " if self.cpu_model else ""
        text = f"{self.cores} logical CPU(s) ({model}{self.source})"
        if self.other_cores is not None:
            return text + (
                f", {self.free_cores:.1f} of them free for the job (other processes kept {self.other_cores:.2f} "
                "busy during its unprofiled steps: the machine's busy CPU time (/proc/stat) − the training "
                "process's)"
            )
        if self.free_cores < self.cores:
            text += (
                f", {self.free_cores:.1f} of them free for the job (the machine's load average was "
                f"{self.load_avg:.1f} when the run started: other processes' threads)"
            )
        return text


def core_budget(run: dict[str, Any] | None, steps: dict[str, np.ndarray] | None, start: int = 0) -> CoreBudget | None:
    """The core budget of a ``perfdoctor profile`` run, or None when its ``run.json`` records no CPU count.

    ``run``: ``run.json`` as parsed; ``steps``: the rank's ``steps.csv`` columns (``duration_s``, ``cpu_s``,
    ``main_cpu_s``, ``profiler_phase``; absent CPU columns: an older run, the budget then has the cores only);
    ``start``: the first steady-state step index. Medians are over the unprofiled steps (profiler phase "none")
    from ``start`` on with every value measured; the other processes' share of the cores
    (:attr:`CoreBudget.other_cores`) over every unprofiled step, warm-up included (it is not the job's own load),
    else the load average at the run's start (``run.json`` ``load_avg``) takes it (:attr:`CoreBudget.free_cores`).
    """
    cpu = (run or {}).get("cpu") or {}
    cores = cpu.get("logical_cpus")
    if not isinstance(cores, int) or cores < 1:
        return None
    model = cpu.get("model") if isinstance(cpu.get("model"), str) else None
    at_start = ((run or {}).get("load_avg") or {}).get("start")
    load = (
        float(at_start[0])
        if isinstance(at_start, list) and at_start and isinstance(at_start[0], (int, float))
        else None
    )
    cols = steps or {}
    d, pc, mc = (cols.get(k) for k in ("duration_s", "cpu_s", "main_cpu_s"))
    mw, busy = cols.get("main_wait_s"), cols.get("machine_cpu_s")
    if d is None or pc is None or mc is None or len(d) == 0:
        return CoreBudget(cores, model, load_avg=load)
    d, pc, mc = (np.asarray(x, dtype=np.float64) for x in (d, pc, mc))
    phase = cols.get("profiler_phase")
    unprofiled = np.isfinite(d) & np.isfinite(pc) & np.isfinite(mc)
    if phase is not None:
        unprofiled &= np.asarray(phase) == "none"
    keep = unprofiled & (np.arange(d.size) >= start)
    if not keep.any():
        return CoreBudget(cores, model, load_avg=load)
    return CoreBudget(
        cores,
        model,
        float(np.median(d[keep])) * 1e6,
        float(np.median(pc[keep])) * 1e6,
        float(np.median(mc[keep])) * 1e6,
        load_avg=load,
        main_wait_us=_median_us(mw, keep),
        other_cores=_other_cores(busy, pc, d, unprofiled),
    )


# the least wall time of steps over which other processes' CPU use is taken as measured (s): /proc/stat counts in
# 10 ms clock ticks per CPU, so each contiguous block of steps reads up to a tick per CPU off at either end (a
# 60-step run's two unprofiled blocks of 0.4 s on 2 CPUs: at most 0.08 s, 0.2 cores; the 1-minute load average it
# replaces still counts the job that ran just before, 0.76 cores there)
MIN_MEASURED_S = 0.4


def _other_cores(busy: np.ndarray | None, process: np.ndarray, wall: np.ndarray, keep: np.ndarray) -> float | None:
    """(Σ ``busy`` − Σ ``process``) ÷ Σ ``wall`` over ``keep``'s steps with every value measured (s per step;
    at least 0), or None without ``busy`` or over under :data:`MIN_MEASURED_S`."""
    if busy is None or len(busy) != keep.size:
        return None
    b = np.asarray(busy, dtype=np.float64)
    ok = keep & np.isfinite(b)
    total = float(wall[ok].sum())
    if total < MIN_MEASURED_S:
        return None
    return max(float(b[ok].sum() - process[ok].sum()) / total, 0.0)


def _median_us(col: np.ndarray | None, keep: np.ndarray) -> float | None:
    """Median of ``col`` (s) over ``keep``'s finite values, in µs; None without any."""
    if col is None or len(col) != keep.size:
        return None
    x = np.asarray(col, dtype=np.float64)[keep]
    x = x[np.isfinite(x)]
    return float(np.median(x)) * 1e6 if x.size else None
