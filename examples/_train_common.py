"""Shared training loop for the example scripts (plain PyTorch, no perfdoctor code).

The examples are "unmodified user scripts": they know nothing about perfdoctor.
Each flag below switches on one CPU-reproducible performance problem so the
rules can be proved to fire with it and stay silent without it:

    --slow-getitem-ms MS   Dataset.__getitem__ sleeps MS ms (pair with --num-workers 0)
    --busy-getitem-ms MS   Dataset.__getitem__ computes for MS ms of CPU (pure Python; examples/mlp.py)
    --batch-size B         tiny batches
    --unfused-chain N      N extra elementwise ops per block per step
    --item-every-step      loss.item() + print every step (host sync)
    --item-on-even-steps   the same on even steps only (odd steps are the same loop without it)
    --bf16-autocast        CPU bf16 autocast
    --grad-accum K         K micro-batches per optimizer step
    --ddp                  2 gloo processes via torch.multiprocessing.spawn
    --sync-every-microbatch  under --ddp, all-reduce every micro-batch (no no_sync)
    --fsdp                 under --ddp or torchrun, shard with fully_shard (FSDP2) instead of DDP: one unit per
                           module of the model's ModuleLists, then the root (forward all-gathers not prefetched)
    --fsdp-prefetch        under --fsdp, each unit prefetches the next one's all-gather in forward
    --no-distributed-sampler under --ddp / torchrun, no DistributedSampler: every rank shuffles the whole
                           dataset with the same seed, so every rank reads the same batches
    --slowdown-at S --slowdown-factor F   steps >= S take F times as long
    --raise-at S           raise RuntimeError at the start of step S
    --python-metrics-ms MS per step, MS ms of pure-Python metric bookkeeping (no torch op)
    --leak                 keep each step's loss with its graph in a list (backward with retain_graph=True):
                           every step's saved activations stay alive, memory grows step after step
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def base_parser(description: str, **defaults) -> argparse.ArgumentParser:
    """The flags every example shares; ``defaults`` overrides per-script defaults."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=600, help="optimizer steps to train")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--slow-getitem-ms", type=float, default=0.0)
    p.add_argument("--busy-getitem-ms", type=float, default=0.0)
    p.add_argument("--unfused-chain", type=int, default=0)
    p.add_argument("--item-every-step", action="store_true")
    p.add_argument("--item-on-even-steps", action="store_true")
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--bf16-autocast", action="store_true")
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--ddp", action="store_true", help="spawn --world-size gloo processes")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument(
        "--no-sync",
        dest="no_sync",
        action="store_true",
        default=True,
        help="under --ddp, skip all-reduce on accumulation micro-batches (default)",
    )
    p.add_argument(
        "--sync-every-microbatch",
        dest="no_sync",
        action="store_false",
        help="under --ddp, all-reduce on every micro-batch",
    )
    p.add_argument("--fsdp", action="store_true", help="under --ddp or torchrun, fully_shard instead of DDP")
    p.add_argument("--fsdp-prefetch", action="store_true", help="under --fsdp, forward prefetch one unit ahead")
    p.add_argument(
        "--no-distributed-sampler",
        dest="distributed_sampler",
        action="store_false",
        help="under --ddp, no DistributedSampler: every rank shuffles the whole dataset with the same seed",
    )
    p.add_argument("--slowdown-at", type=int, default=-1)
    p.add_argument("--slowdown-factor", type=float, default=1.0)
    p.add_argument(
        "--python-metrics-ms",
        type=float,
        default=0.0,
        help="per step, this many ms of pure-Python metric bookkeeping outside any torch op",
    )
    p.add_argument("--raise-at", type=int, default=-1)
    p.add_argument(
        "--leak",
        action="store_true",
        help="keep each step's loss with its graph (retain_graph=True) in a list: a memory leak",
    )
    p.add_argument("--eval-batches", type=int, default=4, help="batches in the final evaluation")
    p.add_argument("--ckpt", default=None, help="save a checkpoint here after training")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave)")
    p.set_defaults(**defaults)
    return p


def unfused_chain(h: torch.Tensor, n: int) -> torch.Tensor:
    """n elementwise ops that eager mode runs as n separate kernels."""
    for _ in range(n):
        h = h.mul(0.999999).add(1e-6)
    return h


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun_rank() -> tuple[int, int] | None:
    if "RANK" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return None


def launch(args, build) -> None:
    """Run ``train`` once, under torchrun ranks, or in ``--ddp`` spawned processes.

    ``build(args) -> (model, dataset, loss_fn)`` where ``loss_fn(model, batch)`` returns a scalar loss.
    """
    ranks = _torchrun_rank()
    if ranks is not None:
        dist.init_process_group("gloo")
        try:
            train(ranks[0], ranks[1], args, build)
        finally:
            dist.destroy_process_group()
    elif args.ddp:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(_free_port())
        mp.spawn(_spawned, args=(args.world_size, args, build), nprocs=args.world_size, join=True)
        print("all ranks finished", flush=True)
    else:
        train(0, 1, args, build)


def _spawned(rank: int, world_size: int, args, build) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        train(rank, world_size, args, build)
    finally:
        dist.destroy_process_group()


def _batches(loader):
    while True:
        yield from loader


def train(rank: int, world_size: int, args, build) -> None:
    """The training loop: one optimizer step per ``--grad-accum`` micro-batches."""
    if args.threads:
        torch.set_num_threads(args.threads)
    elif world_size > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // world_size))
    torch.manual_seed(args.seed + rank)
    model, dataset, loss_fn = build(args)
    if world_size > 1 and args.fsdp:
        model = _fully_shard(model, args.fsdp_prefetch)
    elif world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    sampler, shuffle_order = None, None
    if world_size > 1 and args.distributed_sampler:
        sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    elif world_size > 1:  # the same shuffled order on every rank: N ranks train on one rank's data
        shuffle_order = torch.Generator().manual_seed(args.seed)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=sampler is None,
        sampler=sampler,
        generator=shuffle_order,
        num_workers=args.num_workers,
        drop_last=True,
        persistent_workers=args.num_workers > 0,
    )
    batches = _batches(loader)
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.bf16_autocast else contextlib.nullcontext
    t_start = time.perf_counter()
    kept = []  # --leak: every step's loss, each holding its graph and saved activations
    for step in range(args.steps):
        if step == args.raise_at:
            raise RuntimeError(f"deliberate failure at step {step} (--raise-at)")
        t0 = time.perf_counter()
        for micro in range(args.grad_accum):
            batch = next(batches)
            skip_sync = world_size > 1 and args.no_sync and micro < args.grad_accum - 1 and hasattr(model, "no_sync")
            with model.no_sync() if skip_sync else contextlib.nullcontext(), autocast():
                loss = loss_fn(model, batch) / args.grad_accum
            loss.backward(retain_graph=args.leak)
            if args.leak:
                kept.append(loss)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if args.slowdown_at >= 0 and step >= args.slowdown_at and args.slowdown_factor > 1:
            time.sleep((args.slowdown_factor - 1.0) * (time.perf_counter() - t0))
        if args.python_metrics_ms:
            _python_metrics(args.python_metrics_ms / 1000.0)
        if args.item_every_step or (args.item_on_even_steps and step % 2 == 0):
            print(f"rank {rank} step {step} loss {loss.item() * args.grad_accum:.4f}", flush=True)
        elif rank == 0 and args.log_every and (step % args.log_every == 0 or step == args.steps - 1):
            print(
                f"step {step} loss {loss.item() * args.grad_accum:.4f} ({time.perf_counter() - t_start:.1f} s)",
                flush=True,
            )
    _finish(rank, model, loss_fn, batches, args, autocast)


def _fully_shard(model, prefetch: bool):
    """FSDP2: each module of the model's ModuleLists is a unit, then the root; with ``prefetch`` each unit issues the
    next one's all-gather in forward (backward prefetches one unit by default)."""
    from torch.distributed.fsdp import fully_shard

    units = [m for lst in model.modules() if isinstance(lst, torch.nn.ModuleList) for m in lst]
    for unit in units:
        fully_shard(unit)
    fully_shard(model)
    if prefetch:
        chain = [model, *units]  # the root's own all-gather first, then each unit in forward order
        for a, b in zip(chain, chain[1:]):
            a.set_modules_to_forward_prefetch([b])
    return model


def _python_metrics(seconds: float) -> None:
    """Pure-Python per-step bookkeeping (running statistics over a list), the kind of work a training loop
    does between ops: it keeps the interpreter busy for ``seconds`` without calling into torch."""
    history: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        history.append(len(history) * 0.5)
        if len(history) > 256:
            mean = sum(history) / len(history)
            history = [v - mean for v in history[-128:]]


def _finish(rank, model, loss_fn, batches, args, autocast) -> None:
    """The work after training that a profiler run stops before: evaluation and a checkpoint."""
    model.eval()
    with torch.no_grad(), autocast():
        losses = [loss_fn(model, next(batches)).item() for _ in range(args.eval_batches)]
    if rank == 0:
        print(f"final eval loss {sum(losses) / max(1, len(losses)):.4f}", flush=True)
        if args.ckpt:
            target = model.module if hasattr(model, "module") else model
            torch.save(target.state_dict(), args.ckpt)
            print(f"saved checkpoint {args.ckpt}", flush=True)
