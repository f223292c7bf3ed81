"""Model FLOPs of one training step, measured once with ``FlopCounterMode``.

The runner opens the counter at the end of step 0 and closes it at the end of
step 1, so it measures exactly one full optimizer step (every micro-batch's
forward and backward; FlopCounterMode counts matmul/conv/attention FLOPs, not
elementwise or optimizer ops). That step is marked ``profiler_phase = flops``
in ``steps.csv``: counting slows it down, so it is excluded from the
steady-state series and never falls inside a profiler window. The FLOPs are
those of rank-local work (per rank, per step).
"""

from __future__ import annotations

from typing import Any


class FlopMeter:
    """Counts FLOPs between :meth:`start` and :meth:`stop`; errors are kept, not raised."""

    def __init__(self) -> None:
        self._mode: Any = None  # a FlopCounterMode while running; torch leaves its __enter__/__exit__ unannotated
        self.flops: int | None = None
        self.error: str | None = None
        # graphs compiled in this process before this run (an earlier run in the same process, e.g. a test suite's)
        self._graphs_before = compiled_graphs()

    def start(self) -> None:
        """Open the counter, unless torch.compile has compiled a graph since this run began: FlopCounterMode over a
        compiled model leaves it running eagerly for the rest of the run (torch 2.13, CPU: no
        ``Torch-Compiled Region`` in any later step), so the profiled steps would not be the script's."""
        if compiled_graphs() > self._graphs_before:
            self.error = "not measured: torch.compile is in use, and FlopCounterMode would leave it running eagerly"
            return
        try:
            from torch.utils.flop_counter import FlopCounterMode

            self._mode = FlopCounterMode(display=False)
            self._mode.__enter__()
        except Exception as exc:  # noqa: BLE001 - FLOPs are optional; record why they are missing
            self._mode, self.error = None, f"{type(exc).__name__}: {exc}"

    @property
    def running(self) -> bool:
        return self._mode is not None

    def stop(self) -> int | None:
        """Close the counter; returns the FLOPs of the measured step (None on failure)."""
        mode, self._mode = self._mode, None
        if mode is None:
            return None
        try:
            mode.__exit__(None, None, None)
            self.flops = int(mode.get_total_flops())
        except Exception as exc:  # noqa: BLE001
            self.error = f"{type(exc).__name__}: {exc}"
        return self.flops


def compiled_graphs() -> int:
    """Graphs torch.compile (Dynamo) has compiled in this process so far (0 when Dynamo was never imported)."""
    import sys

    if "torch._dynamo" not in sys.modules:
        return 0
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001 - a torch without these counters: assume none
        return 0
