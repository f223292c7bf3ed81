"""Which DataLoaders a profiled script iterates: the most worker processes any of them used.

PD104 (CPU thread oversubscription) counts DataLoader worker processes among the busy threads; only the running
script knows ``num_workers``, so the session wraps ``torch.utils.data.DataLoader.__iter__`` while the script runs
(the wrapper only reads ``self.num_workers`` and calls the original) and records the largest count seen. It also
records the class name of each iterated DataLoader's sampler (``DistributedSampler``, ``RandomSampler``, ...), which
tells PD307 why ranks read the same data.
Source: PyTorch ``torch.utils.data`` docs, "Multi-process data loading" (``num_workers`` worker processes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch.utils.data


class LoaderWatch:
    """Wraps ``DataLoader.__iter__`` between :meth:`install` and :meth:`uninstall`; ``max_workers`` is the largest
    ``num_workers`` of a DataLoader the script iterated (None: it iterated none)."""

    def __init__(self) -> None:
        self.max_workers: int | None = None
        self.samplers: set[str] = set()
        self._original: Callable[..., Iterator[object]] | None = None

    def install(self) -> None:
        if self._original is not None:
            return
        cls = torch.utils.data.DataLoader
        original = cls.__iter__
        watch = self

        def __iter__(loader: torch.utils.data.DataLoader[object]) -> Iterator[object]:  # noqa: N807 - the wrapped dunder
            workers = getattr(loader, "num_workers", None)
            if isinstance(workers, int) and workers >= 0:
                watch.max_workers = max(watch.max_workers or 0, workers)
            sampler = getattr(loader, "sampler", None)
            if sampler is not None and len(watch.samplers) < 8:
                watch.samplers.add(type(sampler).__name__)
            return original(loader)

        self._original = original
        cls.__iter__ = __iter__  # type: ignore[method-assign,assignment]

    def uninstall(self) -> None:
        if self._original is not None:
            torch.utils.data.DataLoader.__iter__ = self._original  # type: ignore[method-assign,assignment]
            self._original = None
