"""Profile the ranks a script starts itself with ``torch.multiprocessing.spawn`` / ``start_processes``.

While a script runs under ``perfdoctor profile``, ``start_processes`` (which
``spawn`` calls) is replaced by a wrapper that starts each child through
:func:`_child_main`: the child opens its own :class:`Session` as rank = its
spawn index, runs the user's function, and writes its own files into the run
directory. When the children were stopped at ``--steps`` the parent stops too
(its remaining work is skipped, as for a single process).
"""

from __future__ import annotations

import functools
import json
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from perfdoctor.capture.rundir import rank_json_name
from perfdoctor.capture.schedule import ProfileConfig
from perfdoctor.capture.session import Session, StopRun, Terminated, line_buffer_output


@dataclass
class ChildSpec:
    """Everything a child needs to profile itself (pickled to the child)."""

    run_dir: str
    cfg: ProfileConfig
    rank_offset: int = 0
    nprocs: int = 1  # processes this spawn starts on the machine (PD104's thread probe: threads = cores ÷ nprocs)


@dataclass
class SpawnState:
    """What the patched ``start_processes`` saw in the parent."""

    ranks: list[int] = field(default_factory=list)
    stopped: bool = False


def patch(run_dir: Path, cfg: ProfileConfig) -> tuple[SpawnState, Callable[[], None]]:
    """Install the wrapper; returns (state, restore)."""
    tmp = sys.modules["torch.multiprocessing.spawn"]
    import torch.multiprocessing as tmp_pkg

    orig = tmp.start_processes
    state = SpawnState()

    def start_processes(
        fn: Callable[..., object],
        args: tuple[object, ...] = (),
        nprocs: int = 1,
        join: bool = True,
        daemon: bool = False,
        start_method: str = "spawn",
    ) -> Any:
        spec = ChildSpec(str(run_dir), cfg, rank_offset=len(state.ranks), nprocs=nprocs)
        ranks = list(range(spec.rank_offset, spec.rank_offset + nprocs))
        state.ranks.extend(ranks)
        result = orig(functools.partial(_child_main, fn, spec), args, nprocs, join, daemon, start_method)
        if join and _all_stopped(run_dir, ranks):
            state.stopped = True
            raise StopRun()
        return result

    tmp.start_processes = tmp_pkg.start_processes = start_processes  # type: ignore[attr-defined]  # not in its __all__

    def restore() -> None:
        tmp.start_processes = tmp_pkg.start_processes = orig  # type: ignore[attr-defined]  # not in its __all__

    return state, restore


def _all_stopped(run_dir: Path, ranks: list[int]) -> bool:
    for r in ranks:
        try:
            data = json.loads((Path(run_dir) / rank_json_name(r)).read_text())
        except (OSError, ValueError):
            return False
        if data.get("partial") or data.get("steps_completed", 0) < data.get("steps_requested", 1):
            return False
    return True


def _raise_terminated(signum: int, frame: FrameType | None) -> NoReturn:
    raise Terminated()


def _child_main(fn: Callable[..., object], spec: ChildSpec, index: int, *args: object) -> None:
    """Child entry point: profile ``fn(index, *args)`` as rank ``rank_offset + index``."""
    line_buffer_output()
    signal.signal(signal.SIGTERM, _raise_terminated)
    session = Session(
        spec.cfg,
        Path(spec.run_dir),
        rank=spec.rank_offset + index,
        progress=lambda msg: print(f"perfdoctor: rank {spec.rank_offset + index}: {msg}", file=sys.stderr),
    )
    session.local_processes = spec.nprocs
    session.start()
    partial, reason = True, None
    try:
        fn(index, *args)
        reason = f"rank function returned after {session.timer.steps_done} steps"
        partial = session.timer.steps_done < spec.cfg.steps
    except StopRun:
        partial = False
    except Terminated:
        reason = "terminated (SIGTERM)"
        raise SystemExit(143) from None
    except KeyboardInterrupt:
        reason = "interrupted"
        raise
    except BaseException as exc:
        reason = f"rank raised {type(exc).__name__}: {exc}"
        raise
    finally:
        session.close(partial=partial, reason=reason)
