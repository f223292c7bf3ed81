"""Step detection without code changes: one training step = one optimizer step.

PyTorch's global optimizer step post-hook
(``torch.optim.optimizer.register_optimizer_step_post_hook``) fires after every
``optimizer.step()`` of every optimizer, so a script needs no edits. This also
counts steps under gradient accumulation (one ``step()`` per K micro-batches)
and under ``GradScaler`` (which calls ``optimizer.step()`` itself; a step it
skips for inf/nan gradients merges into the next one).

With several optimizers (GANs, per-group optimizers) only the *first*
optimizer that steps defines the step; when it is garbage-collected the next
one to step takes over. Scripts without a ``torch.optim`` optimizer call
:func:`perfdoctor.step` (= :func:`mark_step`); once a script calls it, optimizer
steps are ignored so that nothing is counted twice.

Outside a profiling session every entry point here is a no-op.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

StepCallback = Callable[[int], None]


class StepCounter:
    """Counts completed training steps and calls ``callbacks(count)`` after each.

    ``count`` is the number of completed steps (1 after the first step). A
    callback may raise (the runner stops a script by raising a
    ``BaseException`` from here); later callbacks are then not called.
    """

    def __init__(self) -> None:
        self.count = 0
        self.api_mode = False
        self._callbacks: list[StepCallback] = []
        self._primary: weakref.ref[object] | None = None

    def add_callback(self, fn: StepCallback) -> None:
        self._callbacks.append(fn)

    def on_optimizer_step(self, optimizer: object) -> None:
        if self.api_mode:
            return
        primary = self._primary() if self._primary is not None else None
        if primary is None:
            self._primary = weakref.ref(optimizer)
        elif primary is not optimizer:
            return
        self._advance()

    def on_mark(self) -> None:
        self.api_mode = True
        self._advance()

    def _advance(self) -> None:
        self.count += 1
        for fn in list(self._callbacks):
            fn(self.count)


_active: StepCounter | None = None
_handle = None


def install(counter: StepCounter) -> None:
    """Make ``counter`` the process's step counter and register the optimizer hook.

    Raises:
        RuntimeError: a counter is already installed (one session per process).
    """
    global _active, _handle
    if _active is not None:
        raise RuntimeError("a perfdoctor step counter is already installed in this process")
    from torch.optim.optimizer import register_optimizer_step_post_hook

    _active = counter
    _handle = register_optimizer_step_post_hook(_optimizer_post_hook)


def uninstall() -> None:
    """Remove the optimizer hook and the counter; safe to call twice."""
    global _active, _handle
    if _handle is not None:
        _handle.remove()
    _active, _handle = None, None


def active() -> StepCounter | None:
    """The installed counter, or ``None`` outside a profiling session."""
    return _active


def _optimizer_post_hook(optimizer: object, args: object, kwargs: object) -> None:
    """torch.optim's global post-step hook: one optimizer step."""
    counter = _active
    if counter is not None:
        counter.on_optimizer_step(optimizer)


def mark_step() -> None:
    """End one training step (public as :func:`perfdoctor.step`); no-op outside a session."""
    counter = _active
    if counter is not None:
        counter.on_mark()
