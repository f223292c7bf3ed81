"""``perfdoctor profile --memory-snapshot``: the CUDA caching allocator's history over each active window.

PyTorch records every allocator action (alloc, free, segment alloc/free, OOM) with its stack once
``torch.cuda.memory._record_memory_history()`` is on, and ``torch.cuda.memory._dump_snapshot(path)`` pickles
the segments with that history (the format of ``torch/cuda/memory.py``'s ``_snapshot``; "Understanding CUDA
Memory Usage", pytorch.org/docs/stable/torch_cuda_memory.html). Recording starts after the step before a
window's first active step and is dumped, then turned off, after its last active step, so the snapshot covers
the steps the trace records. A run that stops inside a window (an exception, an out-of-memory error, Ctrl-C)
still dumps what was recorded: the history up to the stop is what an out-of-memory error needs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfdoctor.capture.rundir import snapshot_name
from perfdoctor.capture.schedule import Schedule

MAX_ENTRIES = 100_000  # allocator events kept (torch's ring buffer; the default of _record_memory_history)


class MemoryHistory:
    """Turns the allocator history on and off around the active windows of ``schedule`` and writes one snapshot
    per window into ``run_dir``. ``memory`` is ``torch.cuda.memory`` (a stand-in in tests)."""

    def __init__(
        self, schedule: Schedule, run_dir: Path, rank: int, memory: Any, progress: Callable[[str], None]
    ) -> None:
        self.schedule, self.run_dir, self.rank = schedule, run_dir, rank
        self.memory, self.progress = memory, progress
        self.recording: int | None = None  # the window being recorded
        self.written: list[dict[str, Any]] = []

    def _window(self, step: int) -> int:
        return step // self.schedule.cycle

    def start_if_due(self, next_step: int) -> None:
        """Before ``next_step`` runs: start recording when it is its window's first active step."""
        s = self.schedule
        if self.recording is None and s.phase(next_step) == "active" and s.phase(next_step - 1) != "active":
            self.memory._record_memory_history(max_entries=MAX_ENTRIES)
            self.recording = self._window(next_step)

    def after_step(self, k: int) -> None:
        """After step ``k``: dump and stop after a window's last active step, then start the next if due."""
        if self.recording is not None and self.schedule.phase(k + 1) != "active":
            self.dump(complete=True)
        self.start_if_due(k + 1)

    def dump(self, complete: bool) -> None:
        """Write the recorded history (``complete`` False: the run stopped inside the window) and stop recording."""
        if self.recording is None:
            return
        window, self.recording = self.recording, None
        path = self.run_dir / snapshot_name(self.rank, window, self.schedule.repeat)
        first, last = self.schedule.window_steps(window)
        name: str | None = path.name
        try:
            self.memory._dump_snapshot(str(path))
            self.progress(f"wrote memory snapshot of steps {first}-{last} to {path}")
        except Exception as exc:  # noqa: BLE001 - never lose the run over the snapshot
            self.progress(f"memory snapshot of steps {first}-{last} not written: {exc}")
            name = None
        finally:
            self.memory._record_memory_history(enabled=None)
        self.written.append(
            {"index": window, "first_step": first, "last_step": last, "complete": complete, "path": name}
        )
