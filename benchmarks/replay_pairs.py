#!/usr/bin/env python3
"""Predicted saving of a fix (replayed what-if on the "before" trace) vs the measured change (before → after).

GPU pairs from ../shared/traces (their README): each "before" trace is replayed with the transformation of the fix
its author applied; the measured change is the difference of the mean analysed step times of the two traces, and
the noise is two standard errors of that difference (None for one-step traces: such a pair cannot separate the fix
from noise). A prediction is good when within 25% of the measured change or within the noise.

``--cpu`` also records CPU pairs with ``perfdoctor profile`` on examples/mlp.py (problem flag on / off, same
settings; blocks of one run per side, at least ``--runs`` and at most ``--max-blocks``, added until the pair is
decided or ``--budget-s`` per pair is spent): see benchmarks/cpu_pairs.py for how their change, its noise
(measured between blocks) and their verdict are computed.

``--steps`` prints, per step of the ResNet50 pair, what the prefetch what-if models and what it cannot see: the
predicted step beside the "after" trace's, the after side's hand-off (DataLoader ``__next__`` start to the batch's
host→device copy call), that copy's host call and device time, and how much slower the after side's host ops ran
than the same ops in the before trace (median over ops of the ratio to that op name's median before).

Usage: python benchmarks/replay_pairs.py [--cpu [--runs N] [--max-blocks N] [--budget-s S]] [--steps]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from perfdoctor.analysis.steps.steps import find_steps  # noqa: E402
from perfdoctor.analysis.timing import host  # noqa: E402
from perfdoctor.crossrank.joint import match  # noqa: E402
from perfdoctor.replay.machine import CoreBudget  # noqa: E402
from perfdoctor.replay.rank import RankReplay, replay_rank  # noqa: E402
from perfdoctor.replay.transforms import WhatIf  # noqa: E402
from perfdoctor.replay.transforms.host import (  # noqa: E402
    batch_copies,
    cuda_graphs,
    prefetch_dataloader,
    remove_syncs,
)
from perfdoctor.replay.transforms.kernels import issue_collectives_early  # noqa: E402
from perfdoctor.trace import load_trace  # noqa: E402
from perfdoctor.trace.tables import TraceTables  # noqa: E402

SHARED = REPO.parent / "shared" / "traces"
Transform = Callable[[RankReplay, TraceTables], WhatIf]


def _syncs(rr: RankReplay, t: TraceTables) -> WhatIf:
    """PD401's fix: a per-element copy loop becomes one copy; otherwise the syncs stop blocking."""
    w = batch_copies(rr, t, host.synchronization(t))
    return w if w.changes_anything else remove_syncs(rr, host.synchronization(t))


# The ResNet50 pair's machine, assumed: the trace records no cores, but its four "Tesla V100-DGXS-32GB" devices are
# those of an NVIDIA DGX Station, whose CPU is one 20-core Intel Xeon E5-2698 v4 (40 threads; NVIDIA DGX Station
# datasheet). No CPU time per step is recorded, so the budget is the cores only.
DGX_STATION = CoreBudget(
    40, "Intel Xeon E5-2698 v4", source="assumed from the V100-DGXS devices: DGX Station datasheet"
)

PAIRS: list[tuple[str, str, str, Transform]] = [
    (
        "ResNet50 V100 DataLoader num_workers 0 -> 4 (PD101)",
        "kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz",
        "kineto__resnet50_num_workers_4__worker0.pt.trace.json.gz",
        lambda rr, t: prefetch_dataloader(rr, t, workers=4),
    ),
    (
        "ResNet50 V100 nw 0 -> 4, 40 logical CPUs assumed (PD101)",
        "kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz",
        "kineto__resnet50_num_workers_4__worker0.pt.trace.json.gz",
        lambda rr, t: prefetch_dataloader(rr, t, workers=4, budget=DGX_STATION),
    ),
    (
        "RTX 3060 torch.compile default -> CUDA graphs (PD103)",
        "luatil__rtx3060_compile_default__trace_04.json",
        "luatil__rtx3060_compile_cudagraphs__trace_05.json",
        cuda_graphs,
    ),
    (
        "A100 4096 per-element .cpu() -> one copy (PD401)",
        "gpupuzzlers__d2h_sync_first_sum.json.gz",
        "gpupuzzlers__d2h_sync_third_sum.json.gz",
        _syncs,
    ),
]
MOE = "ykcai__a100x2_moe_{layers}_{side}/rank{rank}.pt.trace.json"  # both ranks of each side: a joint replay


def _steps_us(path: Path) -> tuple[np.ndarray, RankReplay, TraceTables]:
    t = load_trace(str(path))
    st = find_steps(t)
    return np.asarray(st.end_us - st.start_us, dtype=np.float64), replay_rank(t, st), t


def _noise(a: np.ndarray, b: np.ndarray) -> float | None:
    """Two standard errors of the difference of the means (µs); None when a side has one step."""
    if a.size < 2 or b.size < 2:
        return None
    return 2.0 * float(np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size))


def _verdict(pred: float, meas: float, noise: float | None, confound: str = "") -> str:
    if confound:
        return "CONFOUNDED (" + confound + ")"
    if meas != 0 and abs(pred - meas) <= 0.25 * abs(meas):
        return "within 25%"
    if noise is not None and abs(pred - meas) <= noise:
        return "within noise"
    return "MISS" + ("" if noise is not None else " (one step: noise unknown)")


def _row(name: str, pred: float, meas: float, noise: float | None, extra: str = "", confound: str = "") -> str:
    nz = f"{noise / 1e3:8.2f}" if noise is not None else "  1 step"
    verdict = _verdict(pred, meas, noise, confound)
    return f"{name:62} {pred / 1e3:10.2f} {meas / 1e3:10.2f} {nz} {verdict:28} {extra}"


def _warmup_us(path: Path) -> float:
    """Mean first-call (cold-start) work per analysed step (perfdoctor.analysis.steps.warmup, PD902's evidence), µs."""
    w = find_steps(load_trace(str(path))).warmup
    return float(w.per_window_us.mean()) if w is not None and w.per_window_us.size else 0.0


def _confound(before: Path, after: Path, meas: float) -> str:
    """Why the pair cannot separate the fix from something else: the sides' cold-start work per step differs by
    more than a quarter of the measured change ("" when it does not)."""
    wb, wa = _warmup_us(before), _warmup_us(after)
    if abs(wb - wa) <= 0.25 * abs(meas):
        return ""
    return f"cold start: before {wb / 1e3:.1f} ms, after {wa / 1e3:.1f} ms first-call work per step"


def _moe_paths(layers: str) -> dict[tuple[str, int], Path]:
    """The MoE pair's four rank traces, by (side, rank)."""
    return {
        (side, r): SHARED / MOE.format(layers=layers, side=side, rank=r) for side in ("before", "after") for r in (0, 1)
    }


def moe_pairs() -> list[str]:
    """The MoE all-to-all pairs: both ranks of the before side replayed jointly with the fix on every rank
    (perfdoctor.crossrank.joint; each rank alone when the collectives do not match), against each rank's measured
    change."""
    rows = []
    for layers in ("3layer", "1layer"):
        paths = _moe_paths(layers)
        if not all(p.exists() for p in paths.values()):
            rows.append(f"2x A100 MoE {layers} (traces absent)")
            continue
        before = [_steps_us(paths["before", r]) for r in (0, 1)]
        ws = [issue_collectives_early(rr, t) for _, rr, t in before]
        jr, why = match([rr for _, rr, _ in before], [t for _, _, t in before])
        fixed = (
            jr.step_times([w.scenario for w in ws])
            if jr is not None
            else [rr.step_times(w.scenario) for (_, rr, _), w in zip(before, ws)]
        )
        how = "joint replay of both ranks" if jr is not None else f"each rank alone ({why})"
        for r in (0, 1):
            b_us, rr, _ = before[r]
            a_us, _, _ = _steps_us(paths["after", r])
            pred = float((rr.recorded_step_us - fixed[r]).mean())
            meas = float(b_us.mean() - a_us.mean())
            rows.append(
                _row(
                    f"2x A100 MoE {layers} all-to-all reordered, rank {r} (PD301)",
                    pred,
                    meas,
                    _noise(b_us, a_us),
                    f"{b_us.mean() / 1e3:.2f} -> {a_us.mean() / 1e3:.2f} ms; {how}; {ws[r].assumption}",
                    _confound(paths["before", r], paths["after", r], meas),
                )
            )
    return rows


def _stream_index(g: object) -> dict[int, tuple[int, int, int]]:
    """Activity -> (device, stream, position on that stream in start order) of a replay graph."""
    out: dict[int, tuple[int, int, int]] = {}
    seen: dict[tuple[int, int], int] = {}
    for a in np.argsort(g.act_ts_us, kind="stable").tolist():  # type: ignore[attr-defined]
        key = (int(g.act_device[a]), int(g.act_stream[a]))  # type: ignore[attr-defined]
        out[a] = (*key, seen.get(key, 0))
        seen[key] = seen.get(key, 0) + 1
    return out


def _moved(rr: RankReplay, w: WhatIf) -> list[tuple[int, int, list[int]]]:
    """(collective, its input's producer, the kernels it was moved past) for each collective the reorder moved."""
    g, mv = rr.graph, w.scenario.xdep_src_moved
    out = []
    for e in np.flatnonzero(mv >= 0).tolist() if mv is not None else []:
        k, src, passed = int(mv[e]), int(g.xdep_src[e]), []
        while src >= 0 and src != k:
            passed.append(src)
            src = int(g.act_prev[src])
        out.append((int(g.xdep_dst[e]), k, passed))
    return out


def _queued(g: object, start: np.ndarray, end: np.ndarray, c: int, ready_us: float) -> bool:
    """Whether collective ``c`` started because the previous activity on its stream ended (after ``ready_us``, when
    its input was ready): queued behind a collective waiting for the peer, so its start says nothing of the fix."""
    p = int(g.act_prev[c])  # type: ignore[attr-defined]
    return p >= 0 and float(end[p]) > ready_us and float(start[c]) - float(end[p]) < 5.0


def moe_segments() -> list[str]:
    """The reorder's direct effect, which the host's cold start does not reach: each moved all-to-all starts earlier,
    by the kernels it was moved past. Per moved all-to-all: its start minus its input producer's start (device
    times, µs), before (recorded), predicted (the before side replayed with the fix: jointly when the ranks'
    collectives match, else each rank alone with its peers' recorded ends) and after (recorded: the same kernels
    found by their position on their stream, names checked); summed over the all-to-alls that were not queued on
    their stream behind an earlier collective's wait for the peer in either trace (those start when it ends, not
    when their input is ready). Noise: the kernels moved past ran that much longer or shorter in the after trace
    (sum of |duration before − after|, one step each)."""
    from perfdoctor.replay.simulate import replay

    rows = []
    for layers in ("3layer", "1layer"):
        paths = _moe_paths(layers)
        if not all(p.exists() for p in paths.values()):
            continue
        before = [_steps_us(paths["before", r]) for r in (0, 1)]
        ws = [issue_collectives_early(rr, t) for _, rr, t in before]
        jr, _ = match([rr for _, rr, _ in before], [t for _, _, t in before])
        if jr is not None:
            fixed = jr.replay([w.scenario for w in ws])
        else:
            fixed = [
                replay(rr.graph, rr.peers.apply(w.scenario, rr.graph.n_act) if rr.peers else w.scenario)
                for (_, rr, _), w in zip(before, ws)
            ]
        for r in (0, 1):
            _, rr, tb = before[r]
            _, ra, ta = _steps_us(paths["after", r])
            gb, ga = rr.graph, ra.graph
            pos_b = _stream_index(gb)
            at = {v: a for a, v in _stream_index(ga).items()}
            eb, ea = gb.act_ts_us + gb.act_dur_us, ga.act_ts_us + ga.act_dur_us
            pred = meas = noise = 0.0
            n = queued = lost = 0
            for c, k, passed in _moved(rr, ws[r]):
                acts = [c, k, *passed]
                mapped = [at.get(pos_b[a], -1) for a in acts]
                names_b = [tb.names[int(tb.kernels["name_id"][gb.act_row[a]])] for a in acts]
                names_a = [ta.names[int(ta.kernels["name_id"][ga.act_row[a]])] if a >= 0 else "" for a in mapped]
                if names_a != names_b:
                    lost += 1
                    continue
                ca, ka = mapped[0], mapped[1]
                if _queued(gb, gb.act_ts_us, eb, c, max(float(eb[x]) for x in passed)) or _queued(
                    ga, ga.act_ts_us, ea, ca, float(ea[ka])
                ):
                    queued += 1
                    continue
                arr_b = float(gb.act_ts_us[c] - gb.act_ts_us[k])
                pred += arr_b - float(fixed[r].act_start_us[c] - fixed[r].act_start_us[k])
                meas += arr_b - float(ga.act_ts_us[ca] - ga.act_ts_us[ka])
                noise += sum(
                    abs(float(gb.act_dur_us[x]) - float(ga.act_dur_us[y])) for x, y in zip(acts[1:], mapped[1:])
                )
                n += 1
            how = "joint replay" if jr is not None else "each rank alone"
            verdict = (
                "n/a"
                if n == 0
                else "within 25%"
                if meas != 0 and abs(pred - meas) <= 0.25 * abs(meas)
                else "within noise"
                if abs(pred - meas) <= noise
                else "MISS"
            )
            rows.append(
                f"2x A100 MoE {layers} rank {r}: {n} of {len(_moved(rr, ws[r]))} moved all-to-alls compared "
                f"({queued} queued behind a peer wait, {lost} not found after; {how}): start earlier by "
                f"{pred:7.1f} us predicted, {meas:7.1f} us measured, noise {noise:5.1f} us: {verdict}"
            )
    return rows


def gpu_pairs() -> list[str]:
    rows = []
    for name, before, after, transform in PAIRS:
        pb, pa = SHARED / before, SHARED / after
        if not (pb.exists() and pa.exists()):
            rows.append(f"{name:62} (traces absent)")
            continue
        b_us, rr, t = _steps_us(pb)
        a_us, _, _ = _steps_us(pa)
        w = transform(rr, t)
        pred = float((rr.recorded_step_us - rr.step_times(w.scenario)).mean())
        meas = float(b_us.mean() - a_us.mean())
        rows.append(
            _row(
                name,
                pred,
                meas,
                _noise(b_us, a_us),
                f"{b_us.mean() / 1e3:.2f} -> {a_us.mean() / 1e3:.2f} ms; {w.assumption}",
            )
        )
    return rows


def _h2d_batch_copies(t: TraceTables, fetch_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per fetch, the largest host→device copy launched after it (within 20 ms): its runtime call's start and
    duration and the copy's device duration (µs; nan where none)."""
    from perfdoctor.analysis.timing.classify import classify_kernel

    mc, rt = t.memcpy, t.runtime
    h2d = np.array([classify_kernel(t.names[i]).direction == "h2d" for i in mc["name_id"].tolist()], dtype=bool)
    by_corr = {int(c): i for i, c in enumerate(rt["correlation"].tolist())}
    out = np.full((3, fetch_end.size), np.nan)
    for k, fe in enumerate(fetch_end.tolist()):
        best = -1.0
        for i in np.flatnonzero(h2d).tolist():
            r = by_corr.get(int(mc["correlation"][i]), -1)
            if r < 0 or not fe <= rt["ts_us"][r] < fe + 20_000 or mc["bytes"][i] <= best:
                continue
            best = float(mc["bytes"][i])
            out[:, k] = (rt["ts_us"][r], rt["dur_us"][r], mc["dur_us"][i])
    return out[0], out[1], out[2]


def _host_op_ratio(t: TraceTables, ref: dict[int, float], names: list[str], a: float, b: float, pid: int) -> float:
    """Median over the step's host ops (``[a, b)`` µs, process ``pid``) of duration ÷ the before trace's median
    duration of the same op name (``ref``: name → µs)."""
    ops = t.cpu_ops
    m = (ops["ts_us"] >= a) & (ops["ts_us"] < b) & (ops["pid"] == pid)
    r = [
        float(d) / ref[names[int(n)]]
        for n, d in zip(ops["name_id"][m].tolist(), ops["dur_us"][m].tolist(), strict=True)
        if names[int(n)] in ref
    ]
    return float(np.median(r)) if r else float("nan")


def resnet_steps() -> list[str]:
    """Per step of the ResNet50 V100 pair: predicted vs after, and what the after side spent that the prediction
    does not see (see the module docstring)."""
    pb, pa = SHARED / PAIRS[0][1], SHARED / PAIRS[0][2]
    if not (pb.exists() and pa.exists()):
        return ["ResNet50 V100 pair: traces absent"]
    b_us, rr, tb = _steps_us(pb)
    a_us, rra, ta = _steps_us(pa)
    pred = rr.step_times(PAIRS[0][3](rr, tb).scenario)
    nb = tb.names
    ops = tb.cpu_ops
    durs: dict[str, list[float]] = {}
    for n, d in zip(ops["name_id"].tolist(), ops["dur_us"].tolist(), strict=True):
        durs.setdefault(nb[int(n)], []).append(float(d))
    ref = {k: float(np.median(v)) for k, v in durs.items() if len(v) >= 30 and np.median(v) > 0}
    rows = [
        "ResNet50 V100 num_workers 0 -> 4, per step (ms; host-op ratio: after ÷ before, median over ops)",
        f"{'step':>4} {'before':>8} {'pred':>8} {'after':>8} {'after-pred':>10} {'handoff':>8} {'copy call':>9} "
        f"{'copy dev':>8} {'host ops':>8}",
    ]
    out = []
    for side, t, r in (("before", tb, rr), ("after", ta, rra)):
        fs, fe = host.ranges_named(t, host.DATALOADER)
        pid = r.windows.pid
        own = (fs >= r.windows.host_start_us[0]) & (fs < r.windows.host_end_us[-1])
        fs, fe = fs[own], fe[own]
        call, call_dur, dev = _h2d_batch_copies(t, fe)
        ratio = [
            _host_op_ratio(t, ref, t.names, a, b, pid)
            for a, b in zip(r.windows.host_start_us.tolist(), r.windows.host_end_us.tolist(), strict=True)
        ]
        out.append((side, (call - fs) / 1e3, call_dur / 1e3, dev / 1e3, np.asarray(ratio)))
    _, hb, cb, db, rb = out[0]
    _, ha, ca, da, ra = out[1]
    for k in range(a_us.size):
        rows.append(
            f"{k:>4} {b_us[k] / 1e3:8.2f} {pred[k] / 1e3:8.2f} {a_us[k] / 1e3:8.2f} {(a_us[k] - pred[k]) / 1e3:10.2f} "
            f"{ha[k]:8.2f} {ca[k]:9.2f} {da[k]:8.2f} {ra[k]:8.2f}"
        )
    rows.append(
        f"before, median of steps: fetch->copy call {np.median(hb):.2f} ms (the fetch itself), copy call "
        f"{np.median(cb):.2f} ms, copy on device {np.median(db):.2f} ms, host-op ratio {np.median(rb):.2f}"
    )
    return rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="also record and compare the CPU example pairs")
    ap.add_argument("--runs", type=int, default=3, help="CPU blocks (one run per side) at least (default 3)")
    ap.add_argument("--max-blocks", type=int, default=8, help="CPU blocks at most (default 8)")
    ap.add_argument("--budget-s", type=float, default=420.0, help="seconds per CPU pair before it stops adding blocks")
    ap.add_argument("--steps", action="store_true", help="also print the ResNet50 pair step by step")
    args = ap.parse_args(argv)
    print(f"{'pair':62} {'pred ms':>10} {'meas ms':>10} {'2SE ms':>8} {'verdict':28} detail")
    for r in gpu_pairs() + moe_pairs():
        print(r, flush=True)
    if args.steps:
        print("\n".join(resnet_steps()), flush=True)
    print("\nthe MoE reorder's direct effect (moe_segments: how much earlier each moved all-to-all starts after its")
    print("input's producer; device times, which the host's cold start does not reach):")
    for r in moe_segments():
        print(r, flush=True)
    if args.cpu:
        from cpu_pairs import rows  # benchmarks/ is the script's directory

        for r in rows(args.runs, max_blocks=args.max_blocks, budget_s=args.budget_s):
            print(r, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
