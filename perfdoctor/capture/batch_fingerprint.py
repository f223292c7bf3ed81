"""Fingerprints of each rank's input batches, to tell whether data-parallel ranks read different data.

For each of the first ``steps`` training steps, the first tensor argument of the step's first training forward
(the one :mod:`perfdoctor.capture.batch_probe` reads the batch size from) is sampled at ``elements`` evenly spaced
flat positions: a strided view of the tensor, copied on its own device (one small copy, no host-device sync, no
copy of the batch). The samples are hashed only when the session closes (:meth:`BatchFingerprints.digests`), so a
GPU run reads them back once, after training. The hash covers the shape, the dtype and the sampled values
(BLAKE2b, 8 bytes): two ranks whose batches are equal at a step have equal digests there; different batches of
real data differ at nearly every sampled position, so their digests differ.
"""

from __future__ import annotations

import hashlib
from typing import TypedDict

import torch

DEFAULT_STEPS = 8  # steps fingerprinted per rank: enough to tell "every step alike" from a chance match
DEFAULT_ELEMENTS = 256  # sampled elements per batch


class BatchDigest(TypedDict):
    """One fingerprinted step's first input batch in ``rank<R>.json``: a blake2b digest of its sampled values (None:
    no tensor argument, or one that cannot be sampled), its shape and dtype (PD307 compares them across ranks)."""

    step: int
    digest: str | None
    shape: list[int]
    dtype: str


class BatchFingerprints:
    """Samples of the first input tensor of steps ``0 .. steps - 1`` (one per step, its first training forward)."""

    def __init__(self, steps: int = DEFAULT_STEPS, elements: int = DEFAULT_ELEMENTS) -> None:
        self.steps = steps
        self.elements = elements
        self._step = 0
        self._seen_this_step = False
        self._samples: list[tuple[int, tuple[int, ...], str, torch.Tensor | None]] = []

    @property
    def done(self) -> bool:
        """True once every step to fingerprint has ended (the probe may then go)."""
        return self._step >= self.steps

    def observe(self, args: tuple[object, ...], kwargs: dict[str, object] | None) -> None:
        """A training forward of the current step: sample its first tensor argument if it is the step's first."""
        if self._seen_this_step or self.done:
            return
        self._seen_this_step = True
        t = first_tensor(args, kwargs)
        try:
            sample = sample_of(t, self.elements) if t is not None else None
        except (RuntimeError, TypeError, NotImplementedError):  # a sparse, nested or fake tensor: no flat view
            sample = None
        if t is None or sample is None:
            self._samples.append((self._step, (), "", None))
            return
        self._samples.append((self._step, tuple(int(d) for d in t.shape), str(t.dtype), sample))

    def end_step(self) -> None:
        """The current step ended (called from the step hook)."""
        self._step += 1
        self._seen_this_step = False

    def digests(self) -> list[BatchDigest]:
        """One ``{"step", "digest", "shape", "dtype"}`` per fingerprinted step (``digest`` None: the forward had no
        tensor argument, or one that cannot be sampled). Reads the samples to the host (one synchronizing copy each,
        after training)."""
        out: list[BatchDigest] = []
        for step, shape, dtype, sample in self._samples:
            digest = None
            if sample is not None:
                h = hashlib.blake2b(digest_size=8)
                h.update(repr((shape, dtype)).encode())
                h.update(sample.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
                digest = h.hexdigest()
            out.append({"step": step, "digest": digest, "shape": list(shape), "dtype": dtype.removeprefix("torch.")})
        return out


def first_tensor(args: tuple[object, ...], kwargs: dict[str, object] | None) -> torch.Tensor | None:
    """The first tensor positional argument, else the first tensor keyword argument, else None."""
    t = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if t is None:
        t = next((v for v in (kwargs or {}).values() if isinstance(v, torch.Tensor)), None)
    return t


def sample_of(t: torch.Tensor, elements: int) -> torch.Tensor:
    """Up to ``elements`` values of ``t`` at evenly spaced flat positions (0, s, 2s, … with s = numel // elements),
    copied on ``t``'s device. A contiguous ``t`` is read through a strided view (no copy of the batch); another
    layout is flattened first."""
    flat = t.detach().reshape(-1)
    n = flat.numel()
    stride = max(1, n // elements)
    return flat[::stride][:elements].clone()
