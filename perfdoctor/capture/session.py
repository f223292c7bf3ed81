"""One rank's profiling session: step counter, timer, batch probe, FLOPs, torch.profiler.

A session is started before the script runs and closed after it stops, for
whatever reason. After each step it: writes the step's row (``steps.csv``),
drives the FLOPs meter (step 1) and the torch.profiler schedule, and raises
:class:`StopRun` once ``ProfileConfig.steps`` steps are done. ``StopRun`` is a
``BaseException`` so the script's own ``except Exception`` does not swallow it.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import NoReturn, TypedDict

import torch

from perfdoctor.capture import hooks
from perfdoctor.capture.batch_fingerprint import BatchDigest
from perfdoctor.capture.batch_probe import BatchProbe
from perfdoctor.capture.flops import FlopMeter
from perfdoctor.capture.loaders import LoaderWatch
from perfdoctor.capture.memory_history import MemoryHistory
from perfdoctor.capture.non_training import NonTrainingClock
from perfdoctor.capture.rundir import rank_json_name, steps_csv_name, trace_name, write_json
from perfdoctor.capture.schedule import ProfileConfig, Schedule
from perfdoctor.capture.stacks import add_callers
from perfdoctor.capture.step_log import StepLog, write_tensorboard
from perfdoctor.capture.step_record import StepRecord
from perfdoctor.capture.step_timer import StepTimer


class StopRun(BaseException):
    """Raised from the step hook when the requested number of steps is done."""


class Terminated(BaseException):
    """Raised in the main thread by the SIGTERM handler."""


class ProfilerConflict(BaseException):
    """The script started its own torch.profiler while perfdoctor profiles it."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.location = location


def _user_location() -> str:
    pkg_dirs = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))
    for frame in reversed(traceback.extract_stack()[:-2]):
        if not frame.filename.startswith(pkg_dirs) and "contextlib" not in frame.filename:
            return f"{frame.filename}:{frame.lineno}"
    return "unknown location"


class WindowRecord(TypedDict):
    """One profiled window in ``rank<R>.json`` (:class:`perfdoctor.capture.run_data.ProfiledWindow` reads it back):
    its position, its first and last step, whether its trace was written (``path``: the file's name, None when it
    was not: the run stopped inside the window)."""

    index: int
    first_step: int
    last_step: int
    complete: bool
    path: str | None


class Session:
    """Profiles the steps of this process as rank ``rank``; files go to ``run_dir``."""

    def __init__(
        self, cfg: ProfileConfig, run_dir: Path, rank: int = 0, progress: Callable[[str], None] | None = None
    ) -> None:
        self.cfg, self.run_dir, self.rank = cfg, Path(run_dir), rank
        self.schedule = Schedule.resolve(cfg)
        self.progress = progress or (lambda msg: None)
        self.probe = BatchProbe(cfg.fingerprint_steps)
        self.log = StepLog(self.run_dir / steps_csv_name(rank))
        self.meter = FlopMeter()
        self.windows: list[WindowRecord] = []
        # training processes on this machine (spawned ranks, else LOCAL_WORLD_SIZE): the thread probe's fair share
        self.local_processes = int(os.environ.get("LOCAL_WORLD_SIZE") or 1)
        self.prof: torch.profiler.profile | None = None
        self.stop_reason: str | None = None
        self._closing = False
        self._batch_history: list[tuple[int | None, int | None]] = []
        self._frozen_batch: tuple[int | None, int | None] | None = None
        self._restore_guard: Callable[[], None] | None = None
        self.t0_s = time.perf_counter()
        self.timer = StepTimer(self.t0_s, self.log)
        self.non_training = NonTrainingClock()
        self.loaders = LoaderWatch()
        self.flops_step = 1 if cfg.measure_flops and self.schedule.phase(1) == "none" else None
        self.history = (
            MemoryHistory(self.schedule, self.run_dir, rank, torch.cuda.memory, self.progress)
            if cfg.memory_snapshot and torch.cuda.is_available()
            else None
        )

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Install the step hook and batch probe; start torch.profiler (in its wait phase).

        Raises:
            ProfilerConflict: a torch profiler is already running in this process.
        """
        if torch.autograd.profiler._is_profiler_enabled:
            raise ProfilerConflict("a torch profiler was already running before the script started")
        counter = hooks.StepCounter()
        counter.add_callback(self._on_step)
        hooks.uninstall()  # a forked child inherits its parent's counter
        hooks.install(counter)
        self.probe.attach()
        self.non_training.install()
        self.loaders.install()
        if self.cfg.trace:
            self._restore_guard = _guard_other_profilers()
            if self._window_starts(0):
                self._start_window(0)
        if self.history is not None:
            self.history.start_if_due(0)

    def _start_window(self, step: int) -> None:
        """Start a torch.profiler for the window whose warm-up (or active) steps begin at ``step``.

        One profiler per window, alive only for its warm-up + active steps: outside
        the windows no profiler exists, so the script pays nothing for it.
        ``step_num`` is set so the trace's ``ProfilerStep#N`` are the run's step numbers.
        """
        acts = [torch.profiler.ProfilerActivity.CPU]
        cuda = torch.cuda.is_available()
        if cuda:
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        s = self.schedule
        with warnings.catch_warnings():  # --warmup 0 is the user's choice: torch's advice about it is noise here
            warnings.filterwarnings("ignore", message=".*warmup.*", category=UserWarning)
            base = torch.profiler.schedule(wait=0, warmup=s.warmup, active=s.active, repeat=1)
        prof = torch.profiler.profile(
            activities=acts,
            schedule=lambda n: base(max(0, n - step)),
            on_trace_ready=self._on_trace_ready,
            record_shapes=self.cfg.record_shapes,
            profile_memory=self.cfg.profile_memory,
            with_stack=self.cfg.with_stack,
        )
        prof._perfdoctor = True  # type: ignore[attr-defined]  # a marker: the guard lets our own profilers start
        prof.step_num = step
        prof.start()
        self.prof = prof

    def _advance_profiler(self, k: int) -> None:
        """After step ``k``: step the window's profiler, end it after its last active step,
        start the next window's when step ``k + 1`` is its first."""
        if self.prof is not None:
            self.prof.step()
            if self.schedule.phase(k + 1) == "none" or (k + 1) % self.schedule.cycle == self.schedule.wait:
                self.prof.stop()
                self.prof = None
        if self.prof is None and self._window_starts(k + 1):
            self._start_window(k + 1)

    def _window_starts(self, step: int) -> bool:
        s = self.schedule
        return s.phase(step) != "none" and (s.phase(step - 1) == "none" or step % s.cycle == s.wait)

    def _on_step(self, count: int) -> None:
        k = count - 1  # index of the step that just ended
        self.probe.fingerprints.end_step()
        tokens, samples = self._batch()
        phase = "flops" if k == self.flops_step else self.schedule.phase(k)
        if k == 0 and torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            self.timer.cuda = True
        eval_s, checkpoint_s = self.non_training.take_step()
        self.timer.end_step(self.probe.first_forward_s, tokens, samples, phase, eval_s, checkpoint_s)
        if self.flops_step is not None and k == self.flops_step - 1:
            self.meter.start()
        elif self.flops_step is not None and k == self.flops_step:
            self.meter.stop()
        if self.cfg.trace:
            self._advance_profiler(k)
        if self.history is not None:
            self.history.after_step(k)
        self.timer.exclude_until_now()
        if count >= self.cfg.steps:
            self.stop_reason = f"stopped after {count} steps (--steps {self.cfg.steps})"
            raise StopRun()

    def _batch(self) -> tuple[int | None, int | None]:
        if self._frozen_batch is not None:
            observed = self._frozen_batch
        else:
            observed = self.probe.take_step()
            self._batch_history.append(observed)
            recent = self._batch_history[-self.cfg.probe_steps :]
            # removing global module hooks fails torch.compile's guards (the next call recompiles): never just
            # before a recorded step, where that recompilation would be profiled as the script's
            next_recorded = self.schedule.phase(len(self._batch_history)) == "active"
            constant = len(recent) == self.cfg.probe_steps and len(set(recent)) == 1
            if constant and self.probe.fingerprints.done and not next_recorded:
                self.probe.detach()  # constant batch: stop paying for global module hooks
                self._frozen_batch = observed
        tokens = self.cfg.tokens_per_step if self.cfg.tokens_per_step is not None else observed[0]
        samples = self.cfg.samples_per_step if self.cfg.samples_per_step is not None else observed[1]
        return tokens, samples

    def _on_trace_ready(self, prof: torch.profiler.profile) -> None:
        index = len([w for w in self.windows if w["complete"]])
        first, last = self.schedule.window_steps(index)
        if self._closing:  # stopped inside a window: its trace is incomplete, keep none
            self.windows.append(
                {"index": index, "first_step": first, "last_step": last, "complete": False, "path": None}
            )
            return
        path = self.run_dir / trace_name(self.rank, index, self.schedule.repeat)
        export_trace(prof, path, with_callers=self.cfg.with_stack)
        self.windows.append(
            {"index": index, "first_step": first, "last_step": last, "complete": True, "path": path.name}
        )
        self.progress(f"wrote trace of steps {first}-{last} to {path}")

    def _op_probe(self) -> dict[str, object] | None:
        """After a CPU bf16-autocast run: its dominant bf16 GEMMs timed in bf16 and fp32 (a few seconds at most);
        None for any other run, or when the probe fails (it never costs the run its data)."""
        trace = _probe_trace(self)
        if "cpu:bfloat16" not in self.probe.autocast or trace is None:
            return None
        from perfdoctor.capture.op_probe import probe_bf16

        try:
            return probe_bf16(trace)
        except Exception as exc:  # noqa: BLE001 - a measurement for a rule, never the run's data
            self.progress(f"bf16/fp32 op probe failed: {exc}")
            return None

    def _thread_probe(self) -> dict[str, object] | None:
        """After a run whose processes' intra-op threads outnumber the cores: its dominant GEMMs timed at the
        recorded thread count and at the cores' fair share (PD104's measurement); None otherwise or on failure."""
        trace = _probe_trace(self)
        cores = os.cpu_count() or 1
        threads = torch.get_num_threads()
        if trace is None or threads * max(self.local_processes, 1) <= cores:
            return None
        from perfdoctor.capture.op_probe import probe_threads

        try:
            return probe_threads(trace, threads, max(1, cores // max(self.local_processes, 1)))
        except Exception as exc:  # noqa: BLE001 - a measurement for a rule, never the run's data
            self.progress(f"thread probe failed: {exc}")
            return None

    def _fault_probe(self) -> dict[str, object] | None:
        """After a run that recorded a trace: the cost of a minor page fault on this machine
        (:func:`perfdoctor.capture.fault_probe.probe_faults`, 0.1-0.4 s: how much of the profiled window's extra
        time the extra faults in it explain); None without a trace or on failure."""
        if _probe_trace(self) is None:
            return None
        try:
            from perfdoctor.capture.fault_probe import probe_faults

            return probe_faults()
        except Exception as exc:  # noqa: BLE001 - a measurement for the replay, never the run's data
            self.progress(f"page-fault probe failed: {exc}")
            return None

    def _batch_probe(self, records: list[StepRecord]) -> dict[str, object] | None:
        """After a CPU run with a small batch (the step's tokens, else samples, at most
        :data:`perfdoctor.capture.op_probe.BATCH_PROBE_MAX_ROWS`): its dominant GEMMs timed at larger batches
        (PD201's measurement); None otherwise or on failure."""
        trace = _probe_trace(self)
        rows = _most_common([r.tokens for r in records]) or _most_common([r.samples for r in records])
        from perfdoctor.capture.op_probe import BATCH_PROBE_MAX_ROWS, probe_batch

        if trace is None or self.timer.cuda or not rows or rows > BATCH_PROBE_MAX_ROWS:
            return None
        try:
            return probe_batch(trace, int(rows))
        except Exception as exc:  # noqa: BLE001 - a measurement for a rule, never the run's data
            self.progress(f"batch probe failed: {exc}")
            return None

    def close(self, partial: bool, reason: str | None, write_rank_file: bool = True) -> int:
        """Stop everything, flush files, write ``rank<R>.json`` (:meth:`_rank_summary`); returns the steps
        completed."""
        self._stop_recording()
        records = self.log.records
        op_probe = self._op_probe()
        thread_probe = self._thread_probe()
        tb_error = write_tensorboard(self.run_dir / "tensorboard" / f"rank{self.rank}", records)
        probes = {
            "op_probe": op_probe,
            "thread_probe": thread_probe,
            "batch_probe": self._batch_probe(records),
            "fault_probe": self._fault_probe(),
        }
        summary = self._rank_summary(partial, reason, records, tb_error, probes)
        if write_rank_file:
            write_json(self.run_dir / rank_json_name(self.rank), summary)
        return len(records)

    def _stop_recording(self) -> None:
        """Stop the profiler (a failure to is said, never raised: the step data is kept), dump the memory history,
        stop the FLOPs meter, take every hook out and flush the step log."""
        self._closing = True
        if self.prof is not None:
            try:
                self.prof.stop()
            except Exception as exc:  # noqa: BLE001 - never lose the step data over the trace
                self.progress(f"profiler stop failed: {exc}")
        if self.history is not None:
            self.history.dump(complete=False)
        if self._restore_guard:
            self._restore_guard()
        if self.meter.running:
            self.meter.stop()
            self.meter.flops, self.meter.error = None, "run stopped during the FLOPs step"
        hooks.uninstall()
        self.probe.detach()
        self.non_training.uninstall()
        self.loaders.uninstall()
        self.timer.finish()
        self.log.close()

    def _rank_summary(
        self,
        partial: bool,
        reason: str | None,
        records: list[StepRecord],
        tb_error: str | None,
        probes: dict[str, dict[str, object] | None],
    ) -> dict[str, object]:
        """This rank's ``rank<R>.json`` (the coordinator merges them into ``run.json``): its steps, windows, FLOPs,
        batch facts and totals (s), threads and workers, tensorboard, and the GEMM probes' timings."""
        return {
            "rank": self.rank,
            "pid": os.getpid(),
            "steps_completed": len(records),
            "steps_requested": self.cfg.steps,
            "partial": partial,
            "stop_reason": reason or self.stop_reason,
            "steps_csv": self.log.path.name if records else None,
            "windows": self.windows,
            "memory_snapshots": self.history.written if self.history is not None else [],
            "flops_per_step": self.meter.flops,
            "flops_step": self.flops_step,
            "flops_error": self.meter.error,
            "parameter_count": self.probe.parameter_count() or None,
            "param_dtypes": sorted(self.probe.param_dtypes),
            "autocast": sorted(self.probe.autocast),
            # the first steps' input batches, hashed (PD307 compares them across ranks)
            "batch_fingerprints": _fingerprints(self.probe),
            # the sampler class of every DataLoader the script iterated (PD307 names the likely cause)
            "samplers": sorted(self.loaders.samplers),
            "tokens_per_step": _most_common([r.tokens for r in records]),
            "samples_per_step": _most_common([r.samples for r in records]),
            "train_s": sum(max(r.duration_s - r.eval_s - r.checkpoint_s, 0.0) for r in records),
            "eval_s": sum(r.eval_s for r in records),
            "checkpoint_s": sum(r.checkpoint_s for r in records),
            # the intra-op pool as the script left it (it may call torch.set_num_threads after start-up)
            "torch_threads": torch.get_num_threads(),
            # the most worker processes of a DataLoader the script iterated (None: none iterated)
            "dataloader_workers": self.loaders.max_workers,
            "wall_s": time.perf_counter() - self.t0_s,
            "cuda_timed": self.timer.cuda,
            "tensorboard": None if tb_error else f"tensorboard/rank{self.rank}",
            "tensorboard_error": tb_error,
            "schedule": asdict(self.schedule),
            # the measurements taken after training (perfdoctor.capture.op_probe; None where not taken): a CPU
            # bf16-autocast run's dominant GEMMs timed again in bf16 and fp32 (op_probe), an oversubscribed run's at
            # its thread count and at cores ÷ processes (thread_probe), a small-batch CPU run's at larger batches
            # (batch_probe), and a minor page fault's cost on this machine (fault_probe, perfdoctor.capture.fault_probe)
            **probes,
        }


def _probe_trace(session: Session) -> Path | None:
    """The session's first complete trace, or None."""
    done = [w["path"] for w in session.windows if w["complete"] and w["path"]]
    return session.run_dir / done[0] if done else None


def _fingerprints(probe: BatchProbe) -> list[BatchDigest]:
    """The probe's batch fingerprints; [] when the samples cannot be read back (a failed device)."""
    try:
        return probe.fingerprints.digests()
    except Exception:  # noqa: BLE001 - never lose the rank's summary over its fingerprints
        return []


def _most_common(values: list[int | None]) -> int | None:
    """The most frequent known value (None when none is known)."""
    known = [v for v in values if v is not None]
    return max(set(known), key=known.count) if known else None


def _guard_other_profilers() -> Callable[[], None]:
    """Make any other torch.profiler / autograd profiler start raise ProfilerConflict."""
    kineto_cls = torch.profiler.profile
    legacy_cls = torch.autograd.profiler.profile
    orig_start, orig_enter = kineto_cls.start, legacy_cls.__enter__

    def start(self: torch.profiler.profile) -> None:
        if not getattr(self, "_perfdoctor", False):
            raise ProfilerConflict(_user_location())
        return orig_start(self)

    def enter(self: torch.autograd.profiler.profile) -> NoReturn:
        raise ProfilerConflict(_user_location())

    kineto_cls.start, legacy_cls.__enter__ = start, enter  # type: ignore[method-assign]  # patched on purpose

    def restore() -> None:
        kineto_cls.start, legacy_cls.__enter__ = orig_start, orig_enter  # type: ignore[method-assign]

    return restore


def line_buffer_output() -> None:
    """Make stdout/stderr line-buffered so the script's output shows live, even through a pipe."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # a replaced stream may lack it: caught
        except (AttributeError, ValueError):
            pass


def export_trace(prof: torch.profiler.profile, path: Path, with_callers: bool = False) -> None:
    """Export ``prof``'s trace to ``path`` through a temporary name beside it (``.incomplete.<name>``: no
    reader's pattern matches it; it keeps the ``.gz`` that makes torch compress) and an atomic rename, so a
    Ctrl-C or a crash while exporting leaves no half trace under the final name (it left a gzip with a bad
    CRC that `perfdoctor report` then refused). The temporary file is removed on any failure. ``with_callers``:
    each ``python_function`` event gets the line its call was made from (:func:`perfdoctor.capture.stacks.add_callers`).
    """
    tmp = path.with_name(".incomplete." + path.name)
    try:
        prof.export_chrome_trace(str(tmp))
        if with_callers:
            add_callers(prof, tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
