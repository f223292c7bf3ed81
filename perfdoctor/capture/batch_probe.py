"""Watch top-level ``nn.Module`` calls: batch shapes, dtypes, autocast, the model.

A global forward pre-hook / post-hook pair tracks call depth; a call at depth 0
with gradients enabled is a *training forward* of a top-level module (a DDP
wrapper, or the model itself). From its first tensor argument (positional, else
the first tensor keyword argument) we read the batch:

- an integer tensor of 2+ dims ``(B, T, ...)`` -> ``B*T`` tokens and ``B`` samples;
- a floating tensor ``(B, ...)`` -> ``B`` samples, tokens unknown;
- anything else -> unknown (the step's tokens/samples become ``None``).

Global module hooks take every module call off PyTorch's fast path, so the
probe removes itself (:meth:`BatchProbe.detach`) once the runner has seen
enough steps with a constant batch; the last per-step value is then reused.
It also keeps fingerprints of the first steps' input batches (:mod:`perfdoctor.capture.batch_fingerprint`).
"""

from __future__ import annotations

import time

import torch
from torch.utils.hooks import RemovableHandle

from perfdoctor.capture.batch_fingerprint import DEFAULT_STEPS, BatchFingerprints, first_tensor


class BatchProbe:
    """Observes training forwards; per-step totals are read with :meth:`take_step`."""

    def __init__(self, fingerprint_steps: int = DEFAULT_STEPS) -> None:
        self.fingerprints = BatchFingerprints(fingerprint_steps)
        self.first_forward_s: float | None = None  # perf_counter() at the first training forward
        self.models: dict[int, torch.nn.Module] = {}
        self.param_dtypes: set[str] = set()
        self.autocast: set[str] = set()
        self._depth = 0
        self._tokens: int | None = 0
        self._samples: int | None = 0
        self._forwards = 0
        self._handles: list[RemovableHandle] = []

    def attach(self) -> None:
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        self._handles = [
            register_module_forward_pre_hook(self._pre),
            register_module_forward_hook(self._post, with_kwargs=True, always_call=True),
        ]

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    @property
    def attached(self) -> bool:
        return bool(self._handles)

    def _pre(self, module: torch.nn.Module, args: tuple[object, ...]) -> None:
        self._depth += 1
        if self._depth == 1 and torch.is_grad_enabled() and self.first_forward_s is None:
            self.first_forward_s = time.perf_counter()

    def _post(
        self, module: torch.nn.Module, args: tuple[object, ...], kwargs: dict[str, object], output: object
    ) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth or not torch.is_grad_enabled():
            return
        self._forwards += 1
        self.fingerprints.observe(args, kwargs)
        if len(self.models) < 8 and id(module) not in self.models:
            self.models[id(module)] = module
            self._note_dtypes(module)
        tokens, samples = batch_size_of(args, kwargs)
        self._tokens = None if tokens is None or self._tokens is None else self._tokens + tokens
        self._samples = None if samples is None or self._samples is None else self._samples + samples

    def _note_dtypes(self, module: torch.nn.Module) -> None:
        for p in module.parameters():
            self.param_dtypes.add(str(p.dtype).removeprefix("torch."))
            break
        for dev in ("cpu", "cuda"):
            try:
                if torch.is_autocast_enabled(dev):
                    self.autocast.add(f"{dev}:{str(torch.get_autocast_dtype(dev)).removeprefix('torch.')}")
            except (RuntimeError, TypeError):  # older torch: no device_type argument
                pass

    def take_step(self) -> tuple[int | None, int | None]:
        """(tokens, samples) of the training forwards since the last call; ``None`` = unknown."""
        out: tuple[int | None, int | None]
        if self._forwards == 0:
            out = (None, None)
        else:
            out = (self._tokens or None, self._samples or None)
        self._tokens, self._samples, self._forwards = 0, 0, 0
        return out

    def parameter_count(self) -> int:
        """Unique parameters (elements) of the top-level modules seen in training forwards."""
        seen: dict[int, int] = {}
        for m in self.models.values():
            for p in m.parameters():
                seen[id(p)] = p.numel()
        return sum(seen.values())


def batch_size_of(args: tuple[object, ...], kwargs: dict[str, object] | None) -> tuple[int | None, int | None]:
    """(tokens, samples) read from the first tensor argument, per the module docstring."""
    t = first_tensor(args, kwargs)
    if t is None or t.dim() == 0:
        return None, None
    if t.is_floating_point() or t.is_complex():
        return None, int(t.shape[0])
    if t.dim() >= 2:
        return int(t.shape[0]) * int(t.shape[1]), int(t.shape[0])
    return None, None
