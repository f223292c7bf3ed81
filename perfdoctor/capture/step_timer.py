"""Per-step timing and memory, cheap enough to run on every step.

CPU: ``time.perf_counter()`` at each step boundary, and the process's and the step loop thread's CPU time
(``time.process_time()``, ``time.thread_time()``) beside it. CUDA: additionally a
``torch.cuda.Event`` is recorded at each boundary and resolved later with
``Event.query()`` (never a per-step synchronize), so a step's duration is the
GPU-side time between boundaries when available; rows are emitted in step order
as their events complete, and :meth:`StepTimer.finish` synchronizes once.

A step spans from the previous step's end to its own end; the first step starts
at the first training forward (``first_start_s``) so that the script's setup
is not counted as a step.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable

import torch

from perfdoctor.capture.step_record import StepRecord

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


_statm: tuple[int, int] | None = None  # (pid, fd): a forked child must open its own


def rss_bytes() -> int | None:
    """Resident set size of this process in bytes (``/proc/self/statm``, else psutil).

    The statm file is kept open and re-read with ``pread`` (one syscall per step).
    """
    global _statm
    try:
        if _statm is None or _statm[0] != os.getpid():
            _statm = (os.getpid(), os.open("/proc/self/statm", os.O_RDONLY))
        return int(os.pread(_statm[1], 128, 0).split()[1]) * _PAGE
    except OSError:
        try:
            import psutil

            return int(psutil.Process().memory_info().rss)
        except Exception:  # noqa: BLE001 - RSS is optional
            return None


def _cuda_memory(rec: StepRecord) -> None:
    stats = torch.cuda.memory_stats()
    rec.cuda_allocated_bytes = int(stats.get("allocated_bytes.all.current", 0))
    rec.cuda_reserved_bytes = int(stats.get("reserved_bytes.all.current", 0))
    rec.cuda_alloc_retries = int(stats.get("num_alloc_retries", 0))
    if "num_device_alloc" in stats:
        rec.cuda_malloc_count = int(stats["num_device_alloc"])


def _run_queue_wait_s() -> float | None:
    """Seconds this thread has waited on a run queue (the second field of Linux's ``/proc/thread-self/schedstat``,
    ns), or None where the file is absent."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") and "SC_CLK_TCK" in os.sysconf_names else 100


def _machine_busy_s() -> float | None:
    """CPU seconds all the machine's CPUs have been busy since boot (Linux ``/proc/stat``'s ``cpu`` line: user + nice
    + system + irq + softirq + steal, in clock ticks), or None where the file is absent."""
    try:
        with open("/proc/stat", "rb") as fh:
            f = fh.readline().split()
        return (int(f[1]) + int(f[2]) + int(f[3]) + int(f[6]) + int(f[7]) + int(f[8])) / _CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def _minor_faults() -> int | None:
    """Minor page faults this process has taken (``getrusage(RUSAGE_SELF).ru_minflt``), or None where there is
    no ``resource`` module (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


CpuTimes = tuple[float, float, float | None, float | None, int | None]


def _cpu_times() -> CpuTimes:
    """(process CPU s, this thread's CPU s, this thread's run-queue wait s or None, the machine's busy CPU s or
    None, the process's minor page faults or None) now."""
    return time.process_time(), time.thread_time(), _run_queue_wait_s(), _machine_busy_s(), _minor_faults()


class StepTimer:
    """Times steps and hands finished :class:`StepRecord` rows to ``sink`` in step order.

    Args:
        t0_s: ``perf_counter()`` value that ``start_s`` is measured from.
        sink: called once per step with the finished row.
        cuda: also record CUDA events (use when the script trains on CUDA).
    """

    def __init__(self, t0_s: float, sink: Callable[[StepRecord], None], cuda: bool = False) -> None:
        self.t0_s = t0_s
        self.sink = sink
        self.cuda = cuda
        self._prev_end_s: float | None = None
        # (process CPU, thread CPU, thread run-queue wait, machine busy) seconds and minor page faults at the last
        # boundary
        self._prev_cpu_s: CpuTimes | None = None
        self._prev_event: torch.cuda.Event | None = None
        self._pending: deque[tuple[StepRecord, torch.cuda.Event | None, torch.cuda.Event]] = deque()
        self.steps_done = 0

    def end_step(
        self,
        first_start_s: float | None,
        tokens: int | None,
        samples: int | None,
        phase: str,
        eval_s: float = 0.0,
        checkpoint_s: float = 0.0,
    ) -> None:
        """Close the current step. ``first_start_s``: perf_counter() at the first forward;
        ``eval_s``/``checkpoint_s``: host seconds of evaluation / torch.save inside the step."""
        now = time.perf_counter()
        cpu_now = _cpu_times()
        start = self._prev_end_s if self._prev_end_s is not None else (first_start_s or now)
        rec = StepRecord(
            self.steps_done,
            start - self.t0_s,
            now - start,
            tokens,
            samples,
            rss_bytes(),
            profiler_phase=phase,
            eval_s=eval_s,
            checkpoint_s=checkpoint_s,
        )
        if self._prev_cpu_s is not None:  # the first step's start is the forward's, where no CPU time was read
            rec.cpu_s = cpu_now[0] - self._prev_cpu_s[0]
            rec.main_cpu_s = cpu_now[1] - self._prev_cpu_s[1]
            before_wait, wait = self._prev_cpu_s[2], cpu_now[2]
            rec.main_wait_s = wait - before_wait if wait is not None and before_wait is not None else None
            busy_before, busy = self._prev_cpu_s[3], cpu_now[3]
            rec.machine_cpu_s = busy - busy_before if busy is not None and busy_before is not None else None
            faults_before, faults = self._prev_cpu_s[4], cpu_now[4]
            rec.minor_faults = faults - faults_before if faults is not None and faults_before is not None else None
        self._prev_end_s = now
        self._prev_cpu_s = cpu_now
        self.steps_done += 1
        if not self.cuda:
            self.sink(rec)
            return
        _cuda_memory(rec)
        event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        event.record()
        self._pending.append((rec, self._prev_event, event))
        self._prev_event = event
        self._drain(block=False)

    def exclude_until_now(self) -> None:
        """Start the next step now: perfdoctor's own work in the step hook (trace export,
        FLOPs counter set-up) is not charged to the script's next step."""
        if self._prev_end_s is not None:
            self._prev_end_s = time.perf_counter()
            self._prev_cpu_s = _cpu_times()
        if self.cuda and self._prev_event is not None:
            event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]  # torch leaves it unannotated
            event.record()
            self._prev_event = event

    def _drain(self, block: bool) -> None:
        while self._pending:
            rec, start_ev, end_ev = self._pending[0]
            if not block and not end_ev.query():  # type: ignore[no-untyped-call]  # torch leaves it unannotated
                return
            if block:
                end_ev.synchronize()
            if start_ev is not None:
                rec.duration_s = start_ev.elapsed_time(end_ev) / 1000.0
            self._pending.popleft()
            self.sink(rec)

    def finish(self) -> None:
        """Emit every pending row (synchronizes on CUDA once)."""
        if self.cuda:
            self._drain(block=True)
