#!/usr/bin/env python3
"""What the training process pays to receive a batch from a DataLoader worker, measured on this machine with a
real ``torch.utils.data.DataLoader`` (the source of ``HANDOFF_US``, ``HANDOFF_FREE_NS_PER_BYTE`` and
``HANDOFF_READ_NS_PER_BYTE`` in perfdoctor/replay/transforms/host.py).

A worker builds each batch in shared memory (torch's ``default_collate`` allocates the batch in shared memory in a
worker) and the main process receives it as a file descriptor it maps; the pages are not yet in its page tables.
Per batch the main process pays, beyond what ``num_workers=0`` pays for the same batch:

* ``next``: ``__next__`` with the batch already waiting in the queue (get, unpickle, map the storage);
* ``free``: releasing the previous batch (unmapping a shared-memory segment, vs. ``free`` of a heap block);
* ``read``: the first read of the batch (``dst.copy_(batch)``, standing in for the pageable ``.to(device)`` copy,
  which the CUDA driver stages through a host ``memcpy``): it takes the page faults of the fresh mapping.

``num_workers=0`` pays ``free`` and ``read`` for a heap batch its own collate has just written; the hand-off is
``next_w + (free_w − free_0) + (read_w − read_0)``, printed as ``next`` and a line (µs per batch + ns per byte)
through each of the two differences. The main process sleeps ``SLEEP_S`` before each fetch (not
timed) so the workers have the batch ready and are idle while it is timed: the cost measured is the hand-off's
alone, not the workers' competition for cores. Batch sizes 2–16 MiB (32 samples). Each phase's
cost is its minimum over ``ITERS`` batches: this machine's 2 cores are shared with other jobs, which only add time
(Python's timeit docs: the minimum is the bound the machine can run the code at, higher values come from other
processes interfering). Repeated ``--repeats`` times, the spread printed.

Usage: flock /tmp/bench.lock python benchmarks/dataloader_handoff.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

BATCH = 32
SIZES_MIB = (2, 8, 16)
ITERS = 20
WARMUP = 3
SLEEP_S = 0.08


class Tensors(torch.utils.data.Dataset[torch.Tensor]):
    """``n`` samples of ``per_sample`` float32 values each (a view of one tensor: ``__getitem__`` costs nothing)."""

    def __init__(self, n: int, per_sample: int) -> None:
        self.x = torch.randn(n, per_sample)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.x[i]


def _phases(workers: int, nbytes: int) -> np.ndarray:
    """Per batch (rows) the main process's ``next``, ``free``, ``read`` times (µs), shape ``(ITERS, 3)``."""
    per_sample = nbytes // 4 // BATCH
    ds = Tensors(BATCH * (ITERS + WARMUP + 2), per_sample)
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=workers)
    dst = torch.empty(BATCH, per_sample)
    dst.fill_(0.0)  # the destination's pages are mapped, as a staging buffer's are
    out = np.empty((ITERS + WARMUP, 3))
    it = iter(loader)
    prev: torch.Tensor | None = next(it)
    for k in range(ITERS + WARMUP):
        time.sleep(SLEEP_S)
        t0 = time.perf_counter()
        batch = next(it)
        t1 = time.perf_counter()
        prev = None  # the training loop's rebinding of ``data`` frees the previous batch here
        t2 = time.perf_counter()
        dst.copy_(batch)
        t3 = time.perf_counter()
        prev = batch
        del batch
        out[k] = (t1 - t0, t2 - t1, t3 - t2)
    del prev, it
    return out[WARMUP:] * 1e6


def measure() -> tuple[np.ndarray, list[tuple[int, np.ndarray, np.ndarray]]]:
    """One pass over ``SIZES_MIB``: the fit ``[next µs (median over sizes), free µs, free ns/byte, read µs, read
    ns/byte]`` (free and read: beyond num_workers=0, a least-squares line over the sizes) and per size (bytes,
    minima with workers, minima without)."""
    rows = []
    for mib in SIZES_MIB:
        nbytes = mib << 20
        rows.append((nbytes, _phases(2, nbytes).min(axis=0), _phases(0, nbytes).min(axis=0)))
    x = np.array([r[0] for r in rows], dtype=np.float64)
    free = np.polyfit(x, [w[1] - z[1] for _, w, z in rows], 1)
    read = np.polyfit(x, [w[2] - z[2] for _, w, z in rows], 1)
    nxt = float(np.median([w[0] for _, w, _ in rows]))
    return np.array([nxt, free[1], free[0] * 1e3, read[1], read[0] * 1e3]), rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # the driver's staging memcpy is one thread
    fits = []
    for r in range(args.repeats):
        fit, rows = measure()
        fits.append(fit)
        for nbytes, w, z in rows:
            print(
                f"repeat {r} {nbytes / 2**20:5.0f} MiB: next {w[0]:7.1f} µs; free {w[1]:7.1f} (num_workers=0: "
                f"{z[1]:6.1f}); read {w[2]:7.1f} ({z[2]:7.1f})",
                flush=True,
            )
        print(f"repeat {r}: {_fit_text(fit)}", flush=True)
    f = np.array(fits)
    print(f"median of {args.repeats} repeats: {_fit_text(np.median(f, axis=0))}; torch {torch.__version__}")
    print(f"range: {_fit_text(f.min(axis=0))} .. {_fit_text(f.max(axis=0))}")
    return 0


def _fit_text(f: np.ndarray) -> str:
    return (
        f"next {f[0]:.0f} µs; free {f[1]:.0f} µs + {f[2]:.3f} ns/byte; read {f[3]:.0f} µs + {f[4]:.3f} ns/byte "
        f"(beyond num_workers=0)"
    )


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
