"""Profiler settings and the torch.profiler schedule placed in the steady state.

Steps are numbered from 0. torch.profiler's schedule repeats a cycle of
``wait`` idle steps, ``warmup`` steps (profiler on, results dropped) and
``active`` recorded steps, ``repeat`` times. Defaults for ``--steps N``: one
window of 10 active steps after 5 warm-up steps, starting at ~40% of the run so
that start-up transients (compilation, allocator growth, caches) are over and
the steps after it still show whether the run stayed there.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfdoctor.errors import PerfDoctorError


@dataclass
class ProfileConfig:
    """What ``perfdoctor profile`` was asked to do (None = choose the default)."""

    steps: int = 500
    wait: int | None = None
    warmup: int | None = None
    active: int | None = None
    repeat: int = 1
    tokens_per_step: int | None = None
    samples_per_step: int | None = None
    measure_flops: bool = True
    trace: bool = True  # False: time the steps only (no torch.profiler)
    record_shapes: bool = True
    with_stack: bool = False  # Python stacks in the window, each call's line added (perfdoctor.capture.stacks)
    probe_steps: int = 20  # batch probe removed after this many identical batches
    profile_memory: bool = True  # torch.profiler's [memory] events (CPU and CUDA)
    memory_snapshot: bool = False  # record the allocator's history over each active window (CUDA only)
    fingerprint_steps: int = 8  # steps whose input batch is fingerprinted (perfdoctor.capture.batch_fingerprint)


FIRST_WARM_STEP = 5  # a window starting earlier is warned about (Schedule.cold_window_warning)
MIN_WARM_STEPS = 10  # the smallest default --steps whose window starts at FIRST_WARM_STEP


@dataclass
class Schedule:
    wait: int
    warmup: int
    active: int
    repeat: int

    @classmethod
    def resolve(cls, cfg: ProfileConfig) -> Schedule:
        """Fill in defaults and check the windows fit in ``cfg.steps``.

        Raises:
            PerfDoctorError: non-positive steps/active/repeat, negative wait/warmup,
                or windows that end after the last step.
        """
        n, repeat = cfg.steps, cfg.repeat
        if n < 1 or repeat < 1:
            raise PerfDoctorError("--steps and --repeat must be at least 1")
        active = cfg.active if cfg.active is not None else max(1, min(10, n // 5))
        warmup = cfg.warmup if cfg.warmup is not None else (0 if n < 3 else min(5, max(1, n // 10)))
        if cfg.wait is not None:
            wait = cfg.wait
        elif repeat == 1:
            wait = max(min(2, n - warmup - active), int(0.4 * n))
        else:
            wait = max(0, int(0.9 * n / repeat) - warmup - active)
        if active < 1 or warmup < 0 or wait < 0:
            raise PerfDoctorError("--active must be at least 1; --wait and --warmup at least 0")
        last = (wait + warmup + active) * repeat
        if last > n:
            raise PerfDoctorError(
                f"profiler windows end at step {last} but --steps is {n}: "
                f"(wait {wait} + warmup {warmup} + active {active}) x repeat {repeat} must be <= steps"
            )
        return cls(max(0, wait), warmup, active, repeat)

    @property
    def cycle(self) -> int:
        return self.wait + self.warmup + self.active

    def phase(self, step: int) -> str:
        """``none``, ``warmup`` or ``active`` for a 0-based step, as torch.profiler.schedule does."""
        if step < 0 or step >= self.cycle * self.repeat:
            return "none"
        mod = step % self.cycle
        if mod < self.wait:
            return "none"
        return "warmup" if mod < self.wait + self.warmup else "active"

    def cold_window_warning(self) -> str | None:
        """A warning when the first profiled window starts before step :data:`FIRST_WARM_STEP` (None
        otherwise): a run's first steps hold first-call work (op and kernel selection, allocator growth, lazy
        initialisation, the DataLoader's iterator and shuffle), so a window there describes the start-up, not
        the training loop. The smallest default ``--steps`` whose window starts at that step is
        :data:`MIN_WARM_STEPS` (with ``--steps 10``: wait 4, warm-up 1, active steps 5–6)."""
        first = self.window_steps(0)[0]
        if first >= FIRST_WARM_STEP:
            return None
        return (
            f"the profiled window starts at step {first} (wait {self.wait}, warm-up {self.warmup}): the first "
            "steps of a run hold first-call work (op selection, allocator growth, lazy initialisation, the "
            "DataLoader's first iterator), so the trace describes the start-up, not the training loop; use "
            f"--steps {MIN_WARM_STEPS} or more (or --wait/--warmup so the window starts at step "
            f"{FIRST_WARM_STEP} or later)"
        )

    def window_steps(self, index: int) -> tuple[int, int]:
        """(first, last) active step of window ``index`` (0-based, inclusive)."""
        first = index * self.cycle + self.wait + self.warmup
        return first, first + self.active - 1
