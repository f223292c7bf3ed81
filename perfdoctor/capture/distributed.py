"""torchrun support: which rank this is, one shared run directory, waiting for all ranks.

Under torchrun (``RANK`` and ``WORLD_SIZE`` set, world size > 1) every rank
runs ``perfdoctor profile`` and writes its own files into one run directory:

- ``--out DIR`` (or env ``PERFDOCTOR_RUN_DIR``): rank 0 creates DIR; the other
  ranks wait until it holds ``run.json``. Use this on several nodes.
- otherwise rank 0 creates ``perfdoctor-runs/<stem>-<time>`` and writes its
  path to ``perfdoctor-runs/.torchrun-<key>``, where the key is the torchrun
  agent's pid, ``MASTER_PORT`` and ``TORCHELASTIC_RUN_ID`` (the same for every
  rank of one torchrun on one node); the other ranks read it.

Each rank's ``rank<R>.json`` marks it done; rank 0 waits for all of them
(:func:`wait_for_ranks`) before writing the combined report.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from perfdoctor.capture.rundir import DEFAULT_PARENT, new_run_dir, rank_json_name
from perfdoctor.errors import PerfDoctorError

RUN_DIR_ENV = "PERFDOCTOR_RUN_DIR"


@dataclass(frozen=True)
class RankInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def rank_from_env(env: Mapping[str, str] | None = None) -> RankInfo:
    """Rank, world size and local rank from torchrun's environment variables (default: 0, 1, 0)."""
    env = os.environ if env is None else env
    try:
        world = int(env.get("WORLD_SIZE", "1"))
        if world > 1 and "RANK" in env:
            return RankInfo(int(env["RANK"]), world, int(env.get("LOCAL_RANK", "0")))
    except ValueError:
        pass
    return RankInfo()


def _pointer_path(parent: Path) -> Path:
    key = f"{os.getppid()}-{os.environ.get('MASTER_PORT', '')}-{os.environ.get('TORCHELASTIC_RUN_ID', '')}"
    return parent / f".torchrun-{key}"


def shared_run_dir(stem: str, out: str | None, info: RankInfo, timeout_s: float = 120.0) -> Path:
    """The run directory for this rank: created by rank 0, found by the others.

    Raises:
        PerfDoctorError: rank 0 cannot create it, or another rank does not see it within ``timeout_s``.
    """
    out = out or os.environ.get(RUN_DIR_ENV)
    if not info.distributed:
        return new_run_dir(stem, out)
    if info.rank == 0:
        path = new_run_dir(stem, out)
        if out is None:
            ptr = _pointer_path(Path(DEFAULT_PARENT))
            ptr.write_text(str(path.resolve()))
        return path
    deadline = time.monotonic() + timeout_s
    started = time.time() - 5.0
    while time.monotonic() < deadline:
        if out is not None:
            if (Path(out) / "run.json").exists():
                return Path(out)
        else:
            ptr = _pointer_path(Path(DEFAULT_PARENT))
            if ptr.exists() and ptr.stat().st_mtime >= started - 600:
                path = Path(ptr.read_text().strip())
                if (path / "run.json").exists():
                    return path
        time.sleep(0.1)
    raise PerfDoctorError(
        f"rank {info.rank}: rank 0 did not create the run directory within "
        f"{timeout_s:.0f} s; pass the same --out DIR to every rank"
    )


def release_pointer(info: RankInfo) -> None:
    """Rank 0: remove the run-directory pointer file once every rank has found it."""
    if info.distributed and info.rank == 0:
        try:
            _pointer_path(Path(DEFAULT_PARENT)).unlink()
        except OSError:
            pass


def wait_for_ranks(run_dir: Path, ranks: range | list[int], timeout_s: float = 120.0) -> list[int]:
    """Wait until every rank's ``rank<R>.json`` exists; returns the ranks still missing."""
    deadline = time.monotonic() + timeout_s
    while True:
        missing = [r for r in ranks if not (run_dir / rank_json_name(r)).exists()]
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(0.2)
