"""``perfdoctor profile``: run an unmodified training script under the profiler -> run directory.

:func:`run_profile` runs the script in-process as ``__main__`` (see
:mod:`perfdoctor.capture.script`), counts optimizer steps, stops the script
after ``--steps`` steps, and always leaves a run directory behind: on an
exception, Ctrl-C, SIGTERM or an early exit it still writes ``steps.csv``,
the trace of every completed profiler window and a ``run.json`` marked
``partial`` with the reason. :func:`profile_script` is the short form tests use.

Exit codes (``RunResult.exit_code``): 0 stopped at ``--steps`` or the script
finished; the script's own ``SystemExit`` code; 1 the script raised; 130
Ctrl-C; 143 SIGTERM; 2 the script started its own profiler.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from perfdoctor import __version__
from perfdoctor.capture import distributed, environment, spawn
from perfdoctor.capture.rundir import rank_json_name, write_json
from perfdoctor.capture.schedule import ProfileConfig, Schedule
from perfdoctor.capture.script import check_target, run_target
from perfdoctor.capture.session import ProfilerConflict, Session, StopRun, Terminated, line_buffer_output
from perfdoctor.capture.spawn import SpawnState


@dataclass
class RunResult:
    """Outcome of one ``perfdoctor profile`` run in this process."""

    run_dir: Path
    exit_code: int
    partial: bool
    reason: str | None
    steps_completed: int
    coordinator: bool = True  # this process writes run.json and the report
    traceback: str | None = None  # the script's traceback, for the CLI to print
    error: str | None = None  # a one-line perfdoctor message (profiler conflict)
    missing_ranks: list[int] = field(default_factory=list)


def _stderr_progress(prefix: str) -> Callable[[str], None]:
    return lambda msg: print(f"perfdoctor: {prefix}{msg}", file=sys.stderr, flush=True)


def _script_traceback(exc: BaseException, target: str) -> str:
    """The traceback from the script's first frame down (perfdoctor/runpy frames dropped)."""
    tb = exc.__traceback__
    target_real = os.path.realpath(target)
    frames = tb
    while frames is not None:
        name = frames.tb_frame.f_code.co_filename
        if os.path.realpath(name) == target_real or "perfdoctor" not in name and "runpy" not in name:
            break
        frames = frames.tb_next
    return "".join(traceback.format_exception(type(exc), exc, frames or tb))


@dataclass
class _Outcome:
    """How the script's run ended: the exit ``code`` (see the module docstring), whether the run is ``partial``
    and the ``reason`` it stopped, the script's ``traceback`` and perfdoctor's one-line ``error``."""

    code: int = 0
    partial: bool = True
    reason: str | None = None
    traceback: str | None = None
    error: str | None = None


def run_profile(
    target: str,
    args: Sequence[str] = (),
    cfg: ProfileConfig | None = None,
    *,
    module: bool = False,
    out: str | os.PathLike[str] | None = None,
    command: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
    rank_timeout_s: float = 120.0,
) -> RunResult:
    """Profile ``target`` (a script path, or a module name with ``module=True``).

    Args:
        target, args: what ``python target *args`` (or ``python -m target *args``) would run.
        cfg: steps and profiler schedule; defaults to ``ProfileConfig()`` (500 steps).
        out: run directory to create (must not exist or be empty); default a new
            ``perfdoctor-runs/<stem>-<YYYYmmdd-HHMMSS>``.
        command: the full command line to record in ``run.json``.
        progress: called with one-line progress messages (default: stderr).
    Raises:
        PerfDoctorError: missing script/module, bad schedule, ``out`` not new.
    """
    cfg = cfg or ProfileConfig()
    info = distributed.rank_from_env()
    progress = progress or _stderr_progress(f"rank {info.rank}: " if info.distributed else "")
    run_dir, facts = _open_run(target, args, cfg, module, out, command, info, progress, rank_timeout_s)
    session = Session(cfg, run_dir, info.rank, progress)
    spawn_state, restore_spawn = spawn.patch(run_dir, cfg)
    restore_signal = _install_sigterm()
    line_buffer_output()
    wall_start = time.time()
    outcome = _Outcome()
    try:
        outcome = _run_script(session, target, args, module, cfg, spawn_state)
    finally:
        restore_signal()
        restore_spawn()
        steps_completed = session.close(outcome.partial, outcome.reason, write_rank_file=not spawn_state.ranks)
    if not outcome.partial and (session.stop_reason or spawn_state.stopped):
        progress(f"{outcome.reason}; the script's remaining work (evaluation, checkpoint saving, ...) was not run")
    coordinator = info.rank == 0
    result = RunResult(
        run_dir,
        outcome.code,
        outcome.partial,
        outcome.reason,
        steps_completed,
        coordinator,
        outcome.traceback,
        outcome.error,
    )
    if coordinator:
        ranks = spawn_state.ranks or list(range(info.world_size))
        result.missing_ranks = distributed.wait_for_ranks(run_dir, ranks, rank_timeout_s)
        distributed.release_pointer(info)
        result.steps_completed = _write_final_run_json(
            run_dir, facts, result, ranks, wall_start, bool(spawn_state.ranks)
        )
    return result


def _open_run(
    target: str,
    args: Sequence[str],
    cfg: ProfileConfig,
    module: bool,
    out: str | os.PathLike[str] | None,
    command: Sequence[str] | None,
    info: distributed.RankInfo,
    progress: Callable[[str], None],
    rank_timeout_s: float,
) -> tuple[Path, dict[str, Any]]:
    """Check the target and the schedule, create (or, on another rank, find) the run directory, write the
    coordinator's ``run.json`` with status ``running`` and say what is profiled; returns the run directory and
    the run's facts for the final ``run.json``.

    Raises:
        PerfDoctorError: missing script/module, bad schedule, ``out`` not new.
    """
    check_target(target, module)
    schedule = Schedule.resolve(cfg)
    stem = target.rsplit(".", 1)[-1] if module else Path(target).stem
    run_dir = distributed.shared_run_dir(stem, str(out) if out else None, info, rank_timeout_s)
    facts = _run_facts(target, args, module, cfg, schedule, info, command)
    if info.rank == 0:
        write_json(run_dir / "run.json", {**facts, "status": "running"})
    progress(
        f"profiling {target} for {cfg.steps} steps; profiler window at steps "
        f"{schedule.window_steps(0)[0]}-{schedule.window_steps(0)[1]}; run directory {run_dir}"
    )
    cold = schedule.cold_window_warning() if cfg.trace else None
    if cold and info.rank == 0:
        progress(f"warning: {cold}")
    return run_dir, facts


def _run_script(
    session: Session, target: str, args: Sequence[str], module: bool, cfg: ProfileConfig, spawn_state: SpawnState
) -> _Outcome:
    """Run the script under the profiling session until it ends, ``--steps`` stops it, or it fails; how it
    ended (every exception the script raises, SystemExit and KeyboardInterrupt included, is its outcome)."""
    try:
        session.start()
        run_target(target, list(args), module)
        done = session.timer.steps_done
        return _Outcome(
            partial=not spawn_state.ranks and done < cfg.steps,
            reason=None if spawn_state.ranks else f"script finished after {done} of {cfg.steps} steps",
        )
    except StopRun:
        reason = (
            session.stop_reason or f"ranks {spawn_state.ranks} stopped after {cfg.steps} steps (--steps {cfg.steps})"
        )
        return _Outcome(partial=False, reason=reason)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return _Outcome(
            code=code,
            reason=f"script exited with status {code} after {session.timer.steps_done} steps",
            traceback=None if isinstance(exc.code, (int, type(None))) else f"{exc.code}\n",
        )
    except KeyboardInterrupt:
        return _Outcome(code=130, reason="interrupted (Ctrl-C)")
    except Terminated:
        return _Outcome(code=143, reason="terminated (SIGTERM)")
    except ProfilerConflict as exc:
        return _Outcome(
            code=2,
            reason="the script starts its own torch.profiler",
            error=(
                f"the script starts its own torch.profiler ({exc.location}); perfdoctor profile "
                "already profiles it: remove or disable that profiler, or run the script without "
                "perfdoctor profile and pass its trace to `perfdoctor report`"
            ),
        )
    except BaseException as exc:  # noqa: BLE001 - the script's own failure, reported as partial
        return _Outcome(
            code=1, reason=f"script raised {type(exc).__name__}: {exc}", traceback=_script_traceback(exc, target)
        )


def profile_script(
    script: str,
    args: Sequence[str] = (),
    *,
    steps: int = 500,
    out: str | os.PathLike[str] | None = None,
    module: bool = False,
    **cfg_fields: Any,
) -> Path:
    """Profile ``script`` in this process and return its run directory (for tests and tools).

    ``cfg_fields`` are :class:`ProfileConfig` fields (``wait``, ``active``, ``repeat``,
    ``tokens_per_step``, ...). The run directory is returned even when the script failed;
    ``run.json`` says whether the run is ``partial`` and why.
    """
    cfg = ProfileConfig(steps=steps, **cfg_fields)
    quiet = lambda msg: None  # noqa: E731
    return run_profile(script, args, cfg, module=module, out=out, progress=quiet).run_dir


def _run_facts(
    target: str,
    args: Sequence[str],
    module: bool,
    cfg: ProfileConfig,
    schedule: Schedule,
    info: distributed.RankInfo,
    command: Sequence[str] | None,
) -> dict[str, Any]:
    script_path = None if module else os.path.abspath(target)
    git_dir = os.path.dirname(script_path) if script_path else os.getcwd()
    return {
        "perfdoctor_version": __version__,
        "command": list(command) if command else [target, *args],
        "script": script_path or target,
        "module": module,
        "script_args": list(args),
        "cwd": os.getcwd(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "world_size": info.world_size,
        "launcher": "torchrun" if info.distributed else "single",
        "profiler": {
            "steps": cfg.steps,
            "wait": schedule.wait,
            "warmup": schedule.warmup,
            "active": schedule.active,
            "repeat": schedule.repeat,
            "record_shapes": cfg.record_shapes,
            "with_stack": cfg.with_stack,
            "profile_memory": cfg.profile_memory,
            "memory_snapshot": cfg.memory_snapshot,
            "trace": cfg.trace,
        },
        "tokens_per_step_flag": cfg.tokens_per_step,
        "samples_per_step_flag": cfg.samples_per_step,
        "environment": environment.device_info(),
        "cpu": environment.cpu_info(),
        "memory": environment.memory_info(),
        # 1/5/15-minute load averages (os.getloadavg) at the start and, in the final run.json, at the end: other
        # processes competing for the cores make step times unstable (PD603 names it)
        "load_avg": {"start": _load_avg()},
        "git": environment.git_commit(git_dir),
    }


def _write_final_run_json(
    run_dir: Path, facts: dict[str, Any], result: RunResult, ranks: list[int], wall_start: float, spawned: bool
) -> int:
    """Write the final run.json (merging every rank's summary); returns rank 0's step count."""
    import json

    rank_data = []
    for r in ranks:
        try:
            rank_data.append(json.loads((run_dir / rank_json_name(r)).read_text()))
        except (OSError, ValueError):
            rank_data.append({"rank": r, "missing": True})
    first: dict[str, Any] = next((d for d in rank_data if not d.get("missing")), {})
    partial = result.partial or any(d.get("partial") or d.get("missing") for d in rank_data)
    world = max(facts["world_size"], len(ranks))
    data = {
        **facts,
        "status": "partial" if partial else "complete",
        "partial": partial,
        "stop_reason": result.reason,
        "exit_code": result.exit_code,
        "error": result.error,  # perfdoctor's own one-line error (e.g. a profiler conflict); None otherwise
        "script_traceback": result.traceback,  # the script's exception, when it raised
        "ended_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "wall_s": time.time() - wall_start,
        "world_size": world,
        "launcher": "mp.spawn" if spawned else facts["launcher"],
        "steps_completed": first.get("steps_completed", 0),
        "flops_per_step": first.get("flops_per_step"),
        "parameter_count": first.get("parameter_count"),
        "param_dtypes": sorted({t for d in rank_data for t in d.get("param_dtypes", [])}),
        "autocast": sorted({t for d in rank_data for t in d.get("autocast", [])}),
        "tokens_per_step": first.get("tokens_per_step"),
        "samples_per_step": first.get("samples_per_step"),
        "traces": [w["path"] for d in rank_data for w in d.get("windows", []) if w.get("path")],
        "missing_ranks": result.missing_ranks,
        "ranks": rank_data,
    }
    data["load_avg"] = {**(facts.get("load_avg") or {}), "end": _load_avg()}
    workers = [d.get("dataloader_workers") for d in rank_data if isinstance(d.get("dataloader_workers"), int)]
    if workers:  # PD104 counts them among the busy threads: the most any rank's DataLoader used
        data["environment"] = {**(facts.get("environment") or {}), "dataloader_workers": max(workers)}
    write_json(run_dir / "run.json", data)
    steps_completed: int = data["steps_completed"]
    return steps_completed


def _load_avg() -> list[float] | None:
    """The 1, 5 and 15-minute load averages (os.getloadavg), or None where the platform has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def _install_sigterm() -> Callable[[], None]:
    """SIGTERM -> Terminated raised in the main thread; returns a function restoring the old handler."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: FrameType | None) -> NoReturn:
        raise Terminated()

    old = signal.signal(signal.SIGTERM, handler)

    def restore() -> None:
        signal.signal(signal.SIGTERM, old)

    return restore
