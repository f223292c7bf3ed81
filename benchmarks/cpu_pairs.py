"""CPU before/after pairs from examples/mlp.py: the replayed saving of each fix vs the change measured over
several runs per side (``python benchmarks/replay_pairs.py --cpu`` prints them after the GPU pairs).

Each pair is one problem flag on ("before") and off ("after"), same process settings (``OMP_NUM_THREADS=1``, so the
only threads are the ones a pair asks for; glibc's allocator thresholds fixed, :data:`MALLOC_FIXED`, so its state
does not flip between runs). A larger-batch pair's "after" level is per step of the "before" side's
batch (÷ how many of its batches one "after" step holds), as PD201 states its saving. Runs come in blocks of two,
the sides alternating in order (A B, B A, A B, ...: a counterbalanced design), so a drift of the shared machine hits
both sides and a steady drift cancels over two blocks. Per run, its level is the median of its unprofiled steady
steps (steps.csv rows from a third of the run on, profiler phase "none"): the median, because other jobs on the
machine add bursts of slow steps, or, when the steps repeat in a cycle (DataLoader workers handing over their
batches together), the median mean of one cycle's steps (the median of single steps would pick one mode). Per
block, the difference before − after; measured change = the mean of the block
differences; noise = the half-width of its 95% interval, t(0.975, blocks − 1) × sd / √blocks (sd between blocks:
Student's t, since three or four blocks estimate sd poorly: t is 4.30 at three blocks, 2.36 at eight, where a plain
2 SE band would call noise a change), so run-to-run noise is measured, not assumed, and the load the two runs of a
block share cancels in their difference. A ``within`` pair (an effect smaller than the run-to-run spread: PD401's
sync) puts both sides in one run, the problem on alternate steps: per block one run, its change the median
difference between each odd unprofiled steady step (with the problem) and the even step before it (without), and
its prediction the what-if's mean saving over the window's odd steps less its mean over the even ones. A ``measure``
pair (a change that follows the machine's state, which moves between separate runs) keeps the user's "before" run
for the prediction and its level, and adds a measuring run per block with both sides in it (the problem on odd
steps, the fix on even ones): its change as a share of its odd steps' level, restated at the "before" run's level.

Blocks are added until the pair is decided or a bound is reached (``max_blocks``, ``budget_s`` per pair; at least
``min_blocks``): decided when the change exceeds its noise, when the prediction lies outside the noise of a change
the runs do not show, or when the noise is under :data:`RESOLUTION` of the before level (then "no change": smaller
than most rules would report). Stopping once decided makes the 95% interval an approximate one (sequential testing),
which each row names. A pair recorded while the load average exceeded :data:`OVERLOAD` per logical CPU is marked
UNRELIABLE: its runs measure the other jobs more than the fix.

The prediction is what the report says for the run directory (mean over the "before" runs): the transformation
replayed on the run's unprofiled step, with the profiler's per-event overhead measured on that run removed in the
replay (:mod:`perfdoctor.replay.unprofiled`; the scaled fallback where it cannot be estimated), saving = that step −
that step with the fix. The "window" column is the saving on the profiled window, unchanged.

Verdict, per the module of replay_pairs.py: "no change (< 3% of step), as predicted" when the measured change with
its whole interval and the prediction are under :data:`RESOLUTION` of the before level; else "within 25%" of a
measured change above its noise, "within noise", or "MISS"; for a change within its noise: "MISS (runs show no
such change)" when the prediction lies outside it, "no change (< 3% of step), as predicted" when the noise is
under :data:`RESOLUTION` of the step, else "cannot separate".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import t as student_t

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from perfdoctor.analysis.parallel.accumulation import accumulation  # noqa: E402
from perfdoctor.analysis.steps.steady_state import step_level  # noqa: E402
from perfdoctor.analysis.steps.steps import find_steps  # noqa: E402
from perfdoctor.capture.run_data import RunData, load_run_dir, rank_inputs  # noqa: E402
from perfdoctor.checks.common import unprofiled_step_times  # noqa: E402
from perfdoctor.checks.pd104_cpu_thread_oversubscription import thread_counts, thread_probe  # noqa: E402
from perfdoctor.replay.machine import CoreBudget, core_budget  # noqa: E402
from perfdoctor.replay.rank import RankReplay, replay_rank  # noqa: E402
from perfdoctor.replay.transforms import WhatIf  # noqa: E402
from perfdoctor.replay.transforms.accumulation import skip_early_allreduces  # noqa: E402
from perfdoctor.replay.transforms.batch import larger_batch  # noqa: E402
from perfdoctor.replay.transforms.cpu import cpu_syncs, fit_threads_to_cores  # noqa: E402
from perfdoctor.replay.transforms.cpu_fusion import python_and_dispatch  # noqa: E402
from perfdoctor.replay.transforms.host import prefetch_dataloader  # noqa: E402
from perfdoctor.replay.unprofiled import page_faults, unprofiled  # noqa: E402
from perfdoctor.trace import load_trace  # noqa: E402
from perfdoctor.trace.tables import TraceTables  # noqa: E402

CpuTransform = Callable[[RankReplay, TraceTables, RunData], WhatIf]
# the smallest change (fraction of the before level) the runs must be able to resolve for "no change" to be a
# verdict: 3% of the step, the median of the rules' thresholds for a saving worth a finding (rules/*.toml
# min_saving_pct: 1-15%, median 3%)
RESOLUTION = 0.03
# load average per logical CPU above which a pair's step times say more about the other jobs than about the fix
# (the suite's own skip threshold, tests/examples_runs.py): its verdict is marked UNRELIABLE
OVERLOAD = 3.0


def _no_sync(rr: RankReplay, t: TraceTables, run: RunData) -> WhatIf:
    steps = find_steps(t)
    return skip_early_allreduces(rr, accumulation(t, (steps.start_us, steps.end_us)))


def _threads(rr: RankReplay, t: TraceTables, run: RunData) -> WhatIf:
    counts = thread_counts(run.run)
    if isinstance(counts, str):
        raise SystemExit(f"PD104 pair: {counts}")
    per_process, workers, cores = counts
    return fit_threads_to_cores(rr, t, sum(per_process) + workers, cores, thread_probe(run.run))


def _budget(run: RunData) -> CoreBudget | None:
    """The run's cores and its unprofiled steady steps' CPU time (PD101's core budget, as the report reads it)."""
    ss = run.steady_state
    return core_budget(run.run, run.steps, int(ss.steady_start_step) if ss is not None else 0)


def _batch_probe(run: RunData) -> dict[str, float] | None:
    """The run's ``batch_probe`` shares (PD201's measurement, as the check reads them), or None."""
    for r in run.run.get("ranks") or []:
        probe = r.get("batch_probe") if isinstance(r, dict) else None
        if isinstance(probe, dict) and isinstance(probe.get("per_sample"), dict):
            return {str(k): float(v) for k, v in probe["per_sample"].items()}
    return None


def _fp32(rr: RankReplay, t: TraceTables, run: RunData) -> WhatIf:
    """PD204's what-if with the bf16 ÷ fp32 GEMM ratio the runner measured on the run's machine."""
    from perfdoctor.checks.pd204_cpu_bf16_autocast import CAST_OPS, GEMM_OPS, op_probe
    from perfdoctor.replay.transforms.cpu import fp32_instead_of_bf16
    from perfdoctor.trace import intervals as iv

    probe = op_probe(run.run)
    if probe is None:
        raise SystemExit("PD204 pair: the run has no op_probe (run.json ranks[].op_probe)")
    ops = t.cpu_ops
    gemm = t.names_matching(GEMM_OPS)[ops["name_id"]] & [x is not None and b"BFloat16" in x for x in ops["input_type"]]
    cast = t.names_matching(CAST_OPS)[ops["name_id"]]
    ratio = max(probe.bf16_over_fp32, 1.0)
    return fp32_instead_of_bf16(
        rr,
        iv.union(ops["ts_us"][gemm], ops["end_us"][gemm]),
        iv.union(ops["ts_us"][cast], ops["end_us"][cast]),
        ratio,
        f"r = {probe.bf16_over_fp32:.2f} measured by the runner",
    )


def _fused(rr: RankReplay, t: TraceTables, run: RunData) -> WhatIf:
    """PD202's CPU what-if at the bandwidth the report uses: ``perfdoctor calibrate``'s on this machine, else the
    rule's assumed one."""
    from perfdoctor.analysis.timing import host
    from perfdoctor.capture.run_data import measured_cpu_roofs
    from perfdoctor.replay.transforms.cpu_fusion import Bandwidth, fuse_elementwise_chains
    from perfdoctor.trace import intervals as iv

    roofs = measured_cpu_roofs(run.facts.environment, run.facts.cpu)
    bw = (
        Bandwidth(roofs.hbm_bytes_per_s, roofs.source, True)
        if roofs is not None and roofs.hbm_bytes_per_s
        else Bandwidth(10e9, "assumed (rules/PD202.toml assumed_cpu_gbps)", False)
    )
    keep_out = iv.union_of(host.named(t, host.OPTIMIZER_STEP), host.dataloader(t))
    return fuse_elementwise_chains(rr, t, bw, keep_out).whatif


@dataclass(frozen=True)
class CpuPair:
    """``after_batches``: how many of the "before" side's batches one "after" step holds (a larger-batch pair:
    its level is ÷ that, per step of the before side's batch, as PD201 states its saving)."""

    name: str
    before: list[str]
    after: list[str]
    transform: CpuTransform
    after_batches: float = 1.0
    env: tuple[tuple[str, str], ...] = ()  # extra environment of both sides (PD204: oneDNN's ISA cap)
    # one run per block holds both sides: its odd steps are "before" (the problem in them), its even steps "after"
    # (the same loop without it); ``after`` is then unused. For a change smaller than the run-to-run spread.
    within: bool = False
    steps: int | None = None  # steps per run where the default is too few for a steady median (None: the default)
    # blocks at least, where the default is too few for the runs' spread (None: ``compare``'s ``min_blocks``)
    min_blocks: int | None = None
    # flags of a run that measures the change in one state of the machine: both sides in it, the problem on odd
    # steps and the fix on even ones; per block the "before" run gives the prediction and its level, this run the
    # change as a share of its odd steps' level, restated at the "before" run's level (``after`` is then unused).
    # For a change whose size follows the machine's state, where separate runs land in different states
    measure: list[str] | None = None


# a small MLP's shape (4 x Linear(1024, 1024) + ReLU, 1 thread, no DataLoader workers)
_WIDE = ["--dim", "1024", "--hidden", "1024", "--depth", "4", "--num-workers", "0"]

CPU_PAIRS = [
    CpuPair(
        "CPU mlp: __getitem__ 1 ms, num_workers 0 -> 2 (PD101)",
        ["--slow-getitem-ms", "1"],
        ["--slow-getitem-ms", "1", "--num-workers", "2"],
        lambda rr, t, run: prefetch_dataloader(rr, t, workers=2, budget=_budget(run)),  # the "after" side's pool
    ),
    CpuPair(  # the fetch is CPU work: the workers take the cores the training loop uses (the core budget). The
        # "after" side's steps spread 6-28 ms (three busy processes on two cores): a 60-step run's median moved
        # 12.2-15.9 ms between runs, a 150-step run's 14.1-14.7
        "CPU mlp: __getitem__ 0.25 ms of CPU, num_workers 0 -> 2 (PD101)",
        ["--busy-getitem-ms", "0.25"],
        ["--busy-getitem-ms", "0.25", "--num-workers", "2"],
        lambda rr, t, run: prefetch_dataloader(rr, t, workers=2, budget=_budget(run)),
        steps=150,
    ),
    CpuPair(
        "CPU mlp: 5 ms Python metrics per step -> none (PD105)",
        ["--python-metrics-ms", "5"],
        [],
        lambda rr, t, run: python_and_dispatch(rr, t, 16)[0],
    ),
    CpuPair(  # the same 96 maps a side: nn.Linear(8, 8) per head in a Python loop -> one (96, 8, 8) einsum
        "CPU mlp 768: 96 per-head Linear in a loop -> one einsum (PD105)",
        ["--hidden", "768", "--head-loop", "96"],
        ["--hidden", "768", "--head-loop", "96", "--head-batched"],
        lambda rr, t, run: python_and_dispatch(rr, t, 16)[0],
    ),
    CpuPair(  # the "after" side has no chain at all; the fused chain of the fix still costs its bytes
        "CPU mlp: 32 unfused mul/add per layer -> none (PD202)",
        ["--unfused-chain", "32"],
        [],
        _fused,
    ),
    CpuPair(  # the fix PD202 replays: the hand-written chain under torch.compile, 1 MB activations. Measured within
        # one run (by hand on odd steps, compiled on even ones): separate runs' levels moved between the machine's
        # states (hand 29.4-40.6 ms, compiled 24.3-35.4 within an hour, 2026-12-07) by more than the 5-9 ms effect,
        # and the effect follows the state (6.9-8.8 ms for a 28-35 ms step, 24-25% of it, in one process)
        "CPU mlp 256, batch 1024: hand-written LayerNorm + tanh-GELU -> torch.compile (PD202)",
        ["--hidden", "256", "--batch-size", "1024", "--norm", "hand"],
        [],
        _fused,
        measure=["--hidden", "256", "--batch-size", "1024", "--norm", "alternate"],
    ),
    CpuPair("CPU mlp: 4 intra-op threads -> 2 on 2 cores (PD104)", ["--threads", "4"], ["--threads", "2"], _threads),
    CpuPair(
        "CPU mlp 1024x4: batch 8 -> 64, per 8 samples (PD201)",
        [*_WIDE, "--batch-size", "8"],
        [*_WIDE, "--batch-size", "64"],
        lambda rr, t, run: larger_batch(rr, t, 8.0, rows=8, per_sample=_batch_probe(run)),  # PD201: M = batch = 8
        after_batches=8.0,
    ),
    CpuPair(  # bf16 emulated through fp32 (oneDNN capped below AVX512_BF16): the runner's op probe measures r
        "CPU mlp 512x1024: bf16 autocast -> fp32, no bf16 units (PD204)",
        ["--dim", "512", "--hidden", "1024", "--bf16-autocast"],
        ["--dim", "512", "--hidden", "1024"],
        _fp32,
        env=(("ONEDNN_MAX_CPU_ISA", "AVX512_CORE"),),
    ),
    CpuPair(
        "CPU mlp DDP x2: 4 micro-batches all-reduced -> no_sync (PD302)",
        ["--ddp", "--grad-accum", "4", "--sync-every-microbatch"],
        ["--ddp", "--grad-accum", "4"],
        _no_sync,
    ),
    CpuPair(  # within one run: separate runs of this ~27 ms step differ by up to 15% (2026-12-07: 1.3 ± 2.6 and
        # 2.3 ± 2.2 ms between the sides), 10 times the effect; a run's odd and even steps share its state. The
        # loop's .item() and print come after optimizer.step(), so an even loop step's lands in the runner's next
        # (odd) step: a step spans from the previous step's end to its own
        "CPU mlp 512x1024: .item() every other step, with vs without (PD401)",
        ["--dim", "512", "--hidden", "1024", "--item-on-even-steps"],
        [],
        lambda rr, t, run: cpu_syncs(rr),
        env=(("ONEDNN_MAX_CPU_ISA", "AVX512_CORE"),),
        within=True,
        steps=240,  # 60-step runs: 15 steps a side, ±1.6 ms over 8 blocks (the run's level drifts 25-40 ms)
    ),
]


# steps of a pair's measuring run (``CpuPair.measure``): 60-step runs give 20 steps a side once the first third is
# dropped, too few for a median of adjacent-step differences
MEASURE_STEPS = 240

# glibc's allocator with fixed thresholds (mallopt M_MMAP_THRESHOLD, M_TRIM_THRESHOLD): left to adjust themselves,
# a run's 196 KB-1 MB tensors are mapped fresh (a minor fault per page) until glibc raises the mmap threshold, at a
# moment that differs between runs, so one side's unprofiled steps fault in one run and not the next
# (examples/mlp.py --head-loop 96: 27.3 ms steps with 3,500 faults, 21.8 ms without, in one run). Fixed, the
# unprofiled steps reuse freed memory and do not fault; the profiled window still does (what the replay removes)
MALLOC_FIXED = (("MALLOC_MMAP_THRESHOLD_", str(1 << 30)), ("MALLOC_TRIM_THRESHOLD_", str(1 << 34)))


def _profile(out: Path, flags: list[str], steps: int, env: tuple[tuple[str, str], ...] = ()) -> RunData:
    cmd = [sys.executable, "-m", "perfdoctor", "profile", str(REPO / "examples" / "mlp.py"), "--steps", str(steps)]
    cmd += ["--out", str(out), "--no-report", "--", *flags]
    env_all = {**os.environ, "OMP_NUM_THREADS": "1", **dict(MALLOC_FIXED), **dict(env)}
    subprocess.run(cmd, check=True, capture_output=True, timeout=900, env=env_all)
    return load_run_dir(out)


def _level(run: RunData, steps: int) -> float:
    """Level of a run's unprofiled steady steps (µs), as the report states a steady level
    (:func:`perfdoctor.analysis.steps.steady_state.step_level`): their median, or the median mean of ``k``
    consecutive steps when they repeat in a cycle of ``k`` (2 DataLoader workers: 64, 9, 64, 9 ms)."""
    _, secs = unprofiled_step_times(run, start=steps // 3)
    return step_level(secs).median_s * 1e6


def _parity_levels(run: RunData, steps: int) -> tuple[float, float]:
    """A ``within`` pair's sides in one run (µs): "before" the median of its odd unprofiled steady steps, "after"
    that less the median difference between each odd step and the even step just before it (adjacent steps: a
    drift of the run's level cancels in each difference, which a difference of the two medians keeps)."""
    idx, secs = unprofiled_step_times(run, start=steps // 3)
    at = dict(zip(idx.tolist(), secs.tolist(), strict=True))
    diffs = [at[i] - at[i - 1] for i in at if i % 2 == 1 and i - 1 in at]
    before = float(np.median(secs[idx % 2 == 1])) * 1e6
    return before, before - float(np.median(diffs)) * 1e6


def _per_side(per_step_us: np.ndarray, numbers: np.ndarray, within: bool) -> float:
    """A fix's saving per step (µs) from its saving on each analysed step: their mean, or for a ``within`` pair the
    mean over its "before" (odd) steps less the mean over its "after" (even) ones: what the fix saves on a step with
    the problem beyond what the same what-if finds on a step without it (what it finds there is no difference
    between the sides)."""
    if not within:
        return float(per_step_us.mean())
    odd = np.asarray(numbers) % 2 == 1
    if not odd.any() or odd.all():
        raise SystemExit("a within pair's window needs odd and even steps")
    return float(per_step_us[odd].mean() - per_step_us[~odd].mean())


def _predict(run: RunData, pair: CpuPair, level_us: float) -> tuple[float, float, str, str]:
    """(saving for the unprofiled step as the report states it, saving on the profiled window, the assumption,
    the unprofiled step's method) of the fix on a "before" run (µs). A run whose unprofiled steps have no steady
    level (the report then states the saving for the profiled step) has its saving as the same share of the run's
    unprofiled level ``level_us`` (µs, the level its measured side uses): a profiled step's saving is no
    prediction of the unprofiled change."""
    trace = sorted(run.path.glob("trace.rank*.pt.trace.json.gz"))[0]
    t = load_trace(str(trace))
    steps = find_steps(t)
    rr = replay_rank(t, steps)
    inputs = rank_inputs(run)
    steady_s = inputs.step_time_s.get(0)
    # as the report does (perfdoctor.jobs.rank_stage): the unprofiled step, with the window's extra page faults, is
    # known before any what-if is built
    faults = page_faults(inputs.cpu.get(0), run.run, 0)
    rr.unprofiled = unprofiled(rr, t, steady_s * 1e6, faults, steps.numbers) if steady_s else None
    w = pair.transform(rr, t, run)
    window, saving = (
        _per_side(rr.recorded_step_us - rr.step_times(w.scenario), steps.numbers, pair.within),
        _per_side(rr.fixed_step_times([]) - rr.fixed_step_times([w]), steps.numbers, pair.within),
    )
    u = rr.unprofiled
    if u is None:
        saving = window * level_us / float(rr.recorded_step_us.mean())
        how = f"no steady level: the window's {window / 1e3:.2f} ms as a share of the level"
    elif u.whatif is None:
        how = f"scaled x{u.ratio:.2f}"
    else:
        how = f"overhead {u.per_event_us:.2f} µs/event"
    return saving, window, w.assumption, how


def verdict(pred: float, meas: float, noise: float, level: float = float("inf")) -> str:
    """The module docstring's verdict of a prediction against a measured change and its noise (µs), with the
    before level (µs) that sets the resolution of a "no change" result."""
    if abs(meas) + noise <= RESOLUTION * level and abs(pred) <= RESOLUTION * level:
        # the change and its interval under the resolution, and so the prediction: no change either way
        return f"no change (< {RESOLUTION:.0%} of step), as predicted"
    if abs(meas) <= noise:
        if abs(pred - meas) > noise:
            return "MISS (runs show no such change)"
        if noise <= RESOLUTION * level:
            return f"no change (< {RESOLUTION:.0%} of step), as predicted"
        return "cannot separate"
    if abs(pred - meas) <= 0.25 * abs(meas):
        return "within 25%"
    return "within noise" if abs(pred - meas) <= noise else "MISS"


def _decided(pred: float, meas: float, noise: float, level: float) -> bool:
    return verdict(pred, meas, noise, level) != "cannot separate"


def compare(
    pair: CpuPair, min_blocks: int = 3, steps: int = 60, max_blocks: int = 8, budget_s: float = 420.0
) -> dict[str, Any]:
    """Record blocks of one run per side (order alternating) until the pair is decided or a bound is reached; the
    measured change, its noise and the prediction (µs)."""
    steps = pair.steps or steps
    min_blocks = max(min_blocks, pair.min_blocks or 0)
    levels: dict[str, list[float]] = {"before": [], "after": []}
    preds, windows, hows, assumption = [], [], [], ""
    shares: list[float] = []
    t0 = time.monotonic()
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        i = 0
        while True:
            order = (("before", pair.before), ("after", pair.measure or pair.after))
            share = 1.0
            for side, flags in [order[0]] if pair.within else order if i % 2 == 0 else order[::-1]:
                n = MEASURE_STEPS if side == "after" and pair.measure else steps
                run = _profile(Path(tmp) / f"{side}{i}", flags, n, pair.env)
                if pair.within:
                    odd, even = _parity_levels(run, n)
                    levels["before"].append(odd)
                    levels["after"].append(even)
                elif side == "after" and pair.measure:
                    odd, even = _parity_levels(run, n)
                    share = even / odd
                else:
                    levels[side].append(_level(run, n) / (pair.after_batches if side == "after" else 1.0))
                if side == "before":
                    pred, window, assumption, how = _predict(run, pair, levels["before"][-1])
                    preds.append(pred)
                    windows.append(window)
                    hows.append(how)
                shutil.rmtree(run.path, ignore_errors=True)
            if pair.measure:  # the measuring run's change, as a share of its step, at the "before" run's level
                levels["after"].append(levels["before"][-1] * share)
                shares.append(1.0 - share)
            loads.append(os.getloadavg()[0])
            i += 1
            if i < max(min_blocks, 2):
                continue
            d = np.asarray(levels["before"]) - np.asarray(levels["after"])
            noise = float(student_t.ppf(0.975, d.size - 1)) * float(d.std(ddof=1)) / np.sqrt(d.size)
            level = float(np.mean(levels["before"]))
            if _decided(float(np.mean(preds)), float(d.mean()), noise, level) or i >= max_blocks:
                break
            if time.monotonic() - t0 > budget_s:
                break
    b, a = np.asarray(levels["before"]), np.asarray(levels["after"])
    return {
        "pred": float(np.mean(preds)),
        "preds": preds,
        "window": float(np.mean(windows)),
        "hows": hows,
        "meas": float(d.mean()),
        "noise": noise,
        "level": level,
        "before": b.tolist(),
        "after": a.tolist(),
        "seconds": time.monotonic() - t0,
        "load": max(loads),
        "assumption": assumption,
        "shares": shares,
    }


def rows(
    runs: int = 3, steps: int = 60, max_blocks: int = 8, budget_s: float = 420.0, only: str | None = None
) -> Iterator[str]:
    """One table row per CPU pair (ms), in replay_pairs.py's columns (``runs``: blocks at least), each as soon as
    its pair is done; ``only``: the pairs whose name holds it."""
    for pair in CPU_PAIRS:
        if only and only not in pair.name:
            continue
        r = compare(pair, runs, steps, max_blocks, budget_s)
        lv = "/".join(f"{x / 1e3:.1f}" for x in r["before"]) + " -> " + "/".join(f"{x / 1e3:.1f}" for x in r["after"])
        pr = "/".join(f"{x / 1e3:.2f}" for x in r["preds"])
        v = verdict(r["pred"], r["meas"], r["noise"], r["level"])
        if r["load"] > OVERLOAD * (os.cpu_count() or 1):
            v = f"UNRELIABLE (load {r['load']:.0f}): {v}"
        yield (
            f"{pair.name:62} {r['pred'] / 1e3:10.2f} {r['meas'] / 1e3:10.2f} {r['noise'] / 1e3:8.2f} "
            f"{v:28} {len(r['before'])} blocks in {r['seconds']:.0f} s (sequential: 95% interval approximate), load "
            f"average up to {r['load']:.1f} on {os.cpu_count()} cores; runs "
            f"{lv} ms"
            + (
                " (after = before × (1 − the change the measuring run showed: "
                + "/".join(f"{x:.1%}" for x in r["shares"])
                + " of its step))"
                if r["shares"]
                else ""
            )
            + f"; predicted per run {pr} ms ({', '.join(r['hows'])}; on the profiled window "
            f"{r['window'] / 1e3:.2f} ms); {r['assumption']}"
        )
