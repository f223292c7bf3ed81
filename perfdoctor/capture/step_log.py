"""Per-step output: ``steps.csv`` streamed row by row, TensorBoard scalars at the end.

``steps.csv`` is opened at the first row and written at least every
:data:`FLUSH_EVERY_S` seconds (and at close, which every exit path but SIGKILL
reaches), so a run killed without warning keeps nearly every finished step. Columns: see
:data:`perfdoctor.capture.step_record.STEP_FIELDS` (times in seconds, memory in
bytes, empty = not measured).

TensorBoard events are written once at the end (no per-step cost, no writer
thread during training), under ``tensorboard/rank<R>``, tags ``perfdoctor/*``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from perfdoctor.capture.step_record import STEP_FIELDS, StepRecord

FLUSH_EVERY_S = 0.5  # a run killed without warning (SIGKILL) loses at most this much of steps.csv


class StepLog:
    """Collects :class:`StepRecord` rows and streams them to ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: list[StepRecord] = []
        self._fd: int | None = None
        self._pending: list[str] = []
        self._last_write_s = 0.0

    def __call__(self, rec: StepRecord) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(self._fd, (",".join(STEP_FIELDS) + "\n").encode())
        self.records.append(rec)
        self._pending.append(",".join(_cell(v) for v in rec.row()))
        now = time.monotonic()
        if now - self._last_write_s >= FLUSH_EVERY_S:
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        """Write the buffered rows (one unbuffered write)."""
        if self._fd is not None and self._pending:
            os.write(self._fd, ("\n".join(self._pending) + "\n").encode())
            self._pending.clear()
        self._last_write_s = time.monotonic() if now is None else now

    def close(self) -> None:
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _cell(v: object) -> str:
    if v is None:
        return ""
    return f"{v:.6f}" if isinstance(v, float) else str(v)


def write_tensorboard(directory: Path, records: list[StepRecord]) -> str | None:
    """Write per-step scalars; returns None, or the reason nothing was written.

    Tags: ``perfdoctor/step_time_ms``, ``perfdoctor/tokens_per_s`` and
    ``perfdoctor/samples_per_s`` (this step's count / this step's time, not a
    cumulative average), ``perfdoctor/rss_mib``, ``perfdoctor/cuda_allocated_mib``.
    """
    if not records:
        return "no steps"
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception as exc:  # noqa: BLE001 - tensorboard is optional at runtime
        return f"tensorboard unavailable: {exc}"
    writer = SummaryWriter(log_dir=str(directory))
    try:
        for r in records:
            writer.add_scalar("perfdoctor/step_time_ms", r.duration_s * 1e3, r.step)
            if r.duration_s > 0 and r.tokens:
                writer.add_scalar("perfdoctor/tokens_per_s", r.tokens / r.duration_s, r.step)
            if r.duration_s > 0 and r.samples:
                writer.add_scalar("perfdoctor/samples_per_s", r.samples / r.duration_s, r.step)
            if r.rss_bytes:
                writer.add_scalar("perfdoctor/rss_mib", r.rss_bytes / 2**20, r.step)
            if r.cuda_allocated_bytes is not None:
                writer.add_scalar("perfdoctor/cuda_allocated_mib", r.cuda_allocated_bytes / 2**20, r.step)
    finally:
        writer.close()
    return None
