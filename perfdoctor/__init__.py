"""perfdoctor: profiler-driven diagnosis of PyTorch training performance.

Data flows one way: ``trace`` (Kineto JSON -> columnar tables) -> ``analysis``
(pure functions: steps, breakdown, idle causes, ...) -> ``checks`` (findings)
-> ``render`` (terminal, JSON, Markdown, HTML). The CLI is the only place that
prints or exits.
"""

from __future__ import annotations

__version__ = "0.1.0"


def step() -> None:
    """Mark the end of one training step for ``perfdoctor profile``.

    Scripts without a ``torch.optim`` optimizer call this once per step; under
    ``perfdoctor profile`` it advances the step counter and the profiler
    schedule, elsewhere it does nothing.
    """
    from perfdoctor.capture import hooks

    hooks.mark_step()
