"""Host time inside training steps that is not training: evaluation and checkpoint saving.

A step spans from one ``optimizer.step()`` to the next, so an evaluation or a
checkpoint done inside the training loop lands in a step and makes it look
slow. These are not training steps' work (the brief: "evaluation,
checkpointing and compilation are not training steps"), so the runner
records them per step and the run statistics use the train-only time
``duration_s - eval_s - checkpoint_s``.

- Evaluation: from a module's ``train(False)`` (``model.eval()``) while it was
  in training mode to the same module's ``train(True)`` (``model.train()``).
  An interval that spans an optimizer step is not evaluation (a script that
  trains in eval mode, e.g. to freeze batch-norm statistics) and is dropped;
  one that is never closed (a teacher model set to eval once) counts nothing.
- Checkpointing: time inside the outermost ``torch.save`` call.

Only the outermost ``Module.train`` call is looked at (``model.eval()``
recurses into every child). Both patches cost one Python call per
``train()``/``save()``, nothing per forward. Times are host seconds
(``time.perf_counter``).
"""

from __future__ import annotations

import time
from typing import Any

import torch


class NonTrainingClock:
    """Accumulates evaluation and checkpoint seconds until :meth:`take_step`.

    ``install()`` patches ``torch.nn.Module.train`` and ``torch.save``;
    ``uninstall()`` restores them. Not thread-safe beyond the GIL: a step is
    one thread's loop.
    """

    def __init__(self) -> None:
        self.eval_s = 0.0
        self.checkpoint_s = 0.0
        self._open: dict[int, tuple[float, int]] = {}  # id(module) -> (eval start, step generation)
        self._generation = 0
        self._train_depth = 0
        self._save_depth = 0
        self._orig_train: Any = None
        self._orig_save: Any = None

    def install(self) -> None:
        if self._orig_train is not None:
            return
        clock = self
        orig_train, orig_save = torch.nn.Module.train, torch.save
        self._orig_train, self._orig_save = orig_train, orig_save

        def train(module: torch.nn.Module, mode: bool = True) -> torch.nn.Module:
            if clock._train_depth:
                return orig_train(module, mode)
            was = module.training
            clock._train_depth += 1
            try:
                return orig_train(module, mode)
            finally:
                clock._train_depth -= 1
                clock._transition(module, was, bool(mode))

        def save(*args: Any, **kwargs: Any) -> None:
            if clock._save_depth:
                return orig_save(*args, **kwargs)
            clock._save_depth += 1
            t0 = time.perf_counter()
            try:
                return orig_save(*args, **kwargs)
            finally:
                clock._save_depth -= 1
                clock.checkpoint_s += time.perf_counter() - t0

        train.__doc__, save.__doc__ = orig_train.__doc__, orig_save.__doc__
        torch.nn.Module.train = train  # type: ignore[method-assign,assignment]  # patched on purpose, undone below
        torch.save = save

    def uninstall(self) -> None:
        if self._orig_train is None:
            return
        torch.nn.Module.train = self._orig_train  # type: ignore[method-assign]  # the original, back
        torch.save = self._orig_save
        self._orig_train = self._orig_save = None

    def _transition(self, module: torch.nn.Module, was_training: bool, mode: bool) -> None:
        key = id(module)
        if was_training and not mode:
            self._open[key] = (time.perf_counter(), self._generation)
        elif mode and not was_training and key in self._open:
            t0, generation = self._open.pop(key)
            if generation == self._generation:  # no optimizer step in between: evaluation
                self.eval_s += time.perf_counter() - t0

    def take_step(self) -> tuple[float, float]:
        """(evaluation s, checkpoint s) since the last call; called at each step boundary."""
        out = (self.eval_s, self.checkpoint_s)
        self.eval_s = self.checkpoint_s = 0.0
        self._generation += 1
        return out
