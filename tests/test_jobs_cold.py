"""Cold-start steps (PD902) in cross-rank statistics: left out of PD303/PD304 and the job section's stragglers,
breakdown outliers and collective wait, or every one of them skipped when no rank has a warm step. Hand-built
rank summaries (µs, worked out in the comments) and the ykcai MoE 2× A100 traces, whose numbers are read from
the raw JSON here with independent code."""

from __future__ import annotations

import io
import json
from collections import defaultdict
from pathlib import Path

import msgspec
from conftest import shared_trace
from rich.console import Console

from perfdoctor.analysis.timing.breakdown import Communication, StepBreakdown
from perfdoctor.checks import config, engine
from perfdoctor.crossrank.collectives import CollectiveTimeline
from perfdoctor.crossrank.job_section import job_section
from perfdoctor.jobs import summary as js
from perfdoctor.jobs.reduce import JobAnalysis, reduce
from perfdoctor.jobs.summary import RankSummary
from perfdoctor.model.report import JobSection
from perfdoctor.render.job_terminal import render_job

STEP_US = 10_000.0
ALL_COLD = "every analysed step is a cold start (PD902)"


def _row(step: int, compute_us: float, comm_us: float) -> StepBreakdown:
    """One 10,000 µs step: ``compute_us`` of matmul, then ``comm_us`` of collective, none overlapped."""
    busy = compute_us + comm_us
    return StepBreakdown(
        step=step,
        name=f"ProfilerStep#{step}",
        host_start_us=STEP_US * (step - 1),
        host_dur_us=STEP_US,
        start_us=STEP_US * (step - 1),
        dur_us=STEP_US,
        busy_us=busy,
        idle_us=STEP_US - busy,
        categories_us={"matmul": compute_us, "communication": comm_us},
        category_union_us={"matmul": compute_us, "communication": comm_us},
        idle_causes_us={},
        communication=Communication(total_us=comm_us, exposed_us=comm_us, overlapped_us=0.0),
        communication_by_collective_us={"all_reduce": comm_us},
        memcpy_by_direction_us={},
        phases_host_us={},
        phases_device_us={},
        n_kernels=2,
        kernel_sum_us=busy,
    )


def _rank(rank: int, steps: list[tuple[float, float]], cold: list[int], n_ranks: int) -> RankSummary:
    """Rank ``rank`` with steps 1..k of (compute µs, collective µs); one collective per step, every rank's copy
    ending 9,000 µs into the step (one clock); ``cold``: its cold-start steps (PD902)."""
    ends = [STEP_US * k + 9_000.0 for k in range(len(steps))]
    colls = [c for _, c in steps]
    timeline = CollectiveTimeline(
        rank=rank,
        world_size=n_ranks,
        window_steps=list(range(1, len(steps) + 1)),
        analysed_steps=list(range(1, len(steps) + 1)),
        kind=["all_reduce"] * len(steps),
        bytes=[-1] * len(steps),
        launch_us=[e - d - 5.0 for e, d in zip(ends, colls)],
        start_us=[e - d for e, d in zip(ends, colls)],
        end_us=ends,
        dur_us=colls,
        window=list(range(len(steps))),
    )
    path = f"rank{rank}.json"
    return RankSummary(
        index=rank,
        path=path,
        rank=rank,
        input={"path": path, "bytes": 1, "sha256": None, "events": 1, "uncompressed_bytes": 1},
        steps_source="ProfilerStep",
        primary_kind="gpu",
        primary_device=0,
        step_rows=[_row(n + 1, c, m) for n, (c, m) in enumerate(steps)],
        collectives=timeline,
        world_size=n_ranks,
        warmup_us_by_step={n: 5_000.0 for n in cold},
        cold_steps=cold,
    )


def _reduce(summaries: list[RankSummary]) -> JobAnalysis:
    cat, codes = engine.prepare(config.resolve(select="PD303,PD304"))
    return reduce(summaries, cat, codes)


def _finding(job: JobAnalysis, code: str) -> object:
    return next((f for f in job.checks.findings if f.code == code), None)


def _skipped(job: JobAnalysis, code: str) -> str:
    return next(s["reason"] for s in job.checks.skipped if s["code"] == code)


def _view(section: JobSection) -> str:
    out = io.StringIO()
    render_job(section, Console(file=out, width=400, color_system=None))
    return out.getvalue()


def _uncold(summaries: list[RankSummary]) -> list[RankSummary]:
    """The same summaries as a format-5 writer made them: no cold steps recorded."""
    return [msgspec.structs.replace(s, cold_steps=[], warmup_us_by_step={}) for s in summaries]


def _cold_first_step(n_ranks: int = 5) -> list[RankSummary]:
    # steps 2-4: every rank computes 3,000 and spends 6,000 in the collective (own work 4,000). Step 1 is cold on
    # rank 0: its host does first-call work, it computes 1,000 and arrives late (collective 500, own 9,500); the
    # others compute 500 and wait in the collective for 9,000 (own 1,000).
    warm = [(3_000.0, 6_000.0)] * 3
    return [_rank(0, [(1_000.0, 500.0), *warm], [1], n_ranks)] + [
        _rank(r, [(500.0, 9_000.0), *warm], [], n_ranks) for r in range(1, n_ranks)
    ]


def test_a_cold_step_on_one_rank_is_no_straggler() -> None:
    job = _reduce(_cold_first_step())
    # steps 2-4 only: every rank's own work is 4,000 µs: no straggler
    assert _finding(job, "PD303") is None and "PD303" in job.checks.passed
    section = job_section(job)
    assert section.cold_steps == [1] and section.cold_note is msgspec.UNSET
    assert section.stragglers == [] and section.breakdown_outliers == []
    assert "cold-start step(s) 1 left out of the cross-rank statistics" in _view(section)
    # the same summaries without cold steps (format 5): rank 0's own work (9,500 + 3 × 4,000) / 4 = 5,375 µs vs the
    # others' (1,000 + 3 × 4,000) / 4 = 3,250: a 2,125 µs "straggler" that is its first-call work
    old = _finding(_reduce(_uncold(_cold_first_step())), "PD303")
    assert old is not None and old.saving_us == 2_125.0


def test_a_warm_straggler_is_measured_on_the_warm_steps_only() -> None:
    # as above, plus rank 4 computes 6,000 and spends 3,000 in the collective in steps 2-4 (own 7,000; step 1 as
    # the other warm ranks). Steps 2-4: PD303's excess 7,000 − median(4,000 × 4) = 3,000 µs, 30% of the step.
    # Job section, steps 2-4: compute per step 3,000 (ranks 0-3) vs 6,000; robust z per step with MAD 0:
    # 3,000 / (1.253314 × 3,000 / 5) = 3.99 ≥ 3.5; matmul share 18,000 / 30,000 = 0.6 vs 0.3.
    s = _cold_first_step()
    s[4] = _rank(4, [(500.0, 9_000.0)] + [(6_000.0, 3_000.0)] * 3, [], 5)
    job = _reduce(s)
    f = _finding(job, "PD303")
    assert f is not None and f.saving_us == 3_000.0 and f.evidence.values["straggler"] == 4
    assert f.evidence.steps == [2, 3, 4] and f.evidence.values["cold_steps_left_out"] == [1]
    section = job_section(job)
    [straggler] = section.stragglers
    assert straggler.rank == 4 and straggler.compute_us == 6_000.0 and straggler.median_compute_us == 3_000.0
    assert abs(straggler.z - 3 * 5 / (3 * 1.253314)) < 1e-9
    matmul = [b for b in section.breakdown_outliers if b.category == "matmul"]
    assert [(b.rank, round(b.share, 12), round(b.median_share, 12)) for b in matmul] == [(4, 0.6, 0.3)]


def test_every_step_cold_skips_the_cross_rank_verdicts() -> None:
    # one step per rank, cold on every rank (the ykcai MoE shape); rank 4 would be a straggler (own 7,000 vs 4,000,
    # compute z 3.99) if its first-call work counted as compute
    s = [_rank(r, [(3_000.0, 6_000.0)], [1], 5) for r in range(4)] + [_rank(4, [(6_000.0, 3_000.0)], [1], 5)]
    job = _reduce(s)
    assert _skipped(job, "PD303") == f"{ALL_COLD}: a straggler cannot be told from first-call work"
    assert _skipped(job, "PD304") == f"{ALL_COLD}: a wait for another rank cannot be told from first-call work"
    section = job_section(job)
    assert section.cold_note == ALL_COLD and section.stragglers == [] and section.breakdown_outliers == []
    assert f"outlier ranks: not judged: {ALL_COLD}" in _view(section)
    # a rank whose every step shares a step number with another rank's cold step has nothing left either
    mixed = [_rank(0, [(3_000.0, 6_000.0)], [1], 2), _rank(1, [(3_000.0, 6_000.0)], [], 2)]
    assert _skipped(_reduce(mixed), "PD303").startswith(f"{ALL_COLD} on at least one rank: ")


def test_collective_wait_leaves_cold_steps_out() -> None:
    # 2 ranks, steps 1-4, one collective per step ending together. Step 1 cold on rank 0: its copy 500, rank 1's
    # 3,500 (rank 1 waits 3,000 for rank 0's first-call work). Steps 2-4: rank 1 arrives last: its copy 1,000,
    # rank 0's 1,600 (rank 0 waits 600 = 6% of the step ≥ 5%).
    s = [
        _rank(0, [(1_000.0, 500.0)] + [(3_000.0, 1_600.0)] * 3, [1], 2),
        _rank(1, [(1_000.0, 3_500.0)] + [(3_000.0, 1_000.0)] * 3, [], 2),
    ]
    f = _finding(_reduce(s), "PD304")
    assert f is not None and f.evidence.values["rank"] == 0 and f.saving_us == 600.0
    assert "rank 1 arrives last to 3 of the 3 matched collectives outside cold-start steps" in f.message
    section = job_section(_reduce(s))
    assert section.collective_wait.wait_us_per_step == [600.0, 0.0]
    assert section.collective_wait.last_arrivals == [0, 3]
    # counting step 1: rank 1 waits (3,000 + 0) / 4 = 750 per step, rank 0 (0 + 3 × 600) / 4 = 450: rank 1 named
    old = _finding(_reduce(_uncold(s)), "PD304")
    assert old is not None and old.evidence.values["rank"] == 1 and old.saving_us == 750.0


def test_a_format_5_summary_decodes_with_no_cold_step() -> None:
    new = _cold_first_step(2)[0]
    as_dict = msgspec.to_builtins(new)
    del as_dict["cold_steps"], as_dict["warmup_us_by_step"]
    [old] = js.decode(msgspec.msgpack.encode([as_dict]))
    assert old.cold_steps == [] and old.warmup_us_by_step == {} and old.step_rows == new.step_rows


# -- the ykcai MoE 3-layer "before" job, from the raw JSON ---------------------------------------------------------


def _union_us(ivs: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(ivs):
        total += max(b - max(a, end), 0.0)
        end = max(end, b)
    return total


def _raw_rank(path: Path) -> dict[str, float]:
    """Step window (the ``moe_train_step`` annotation until the last kernel it launched ends), collective kernel
    time, and first-call work: launch calls ≥ 1 ms that are their kernel's first launch, and ops whose first
    call is ≥ 3× and ≥ 1 ms longer than every later call (µs)."""
    ev = json.loads(path.read_text())["traceEvents"]
    [step] = [e for e in ev if e.get("name") == "moe_train_step" and e.get("cat") == "user_annotation"]
    t0, t1 = step["ts"], step["ts"] + step["dur"]
    launch = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime"}
    kernels = sorted((e for e in ev if e.get("cat") == "kernel"), key=lambda k: launch[k["args"]["correlation"]]["ts"])
    end = max(t1, *(k["ts"] + k["dur"] for k in kernels if t0 <= launch[k["args"]["correlation"]]["ts"] <= t1))
    comm = [(k["ts"], k["ts"] + k["dur"]) for k in kernels if "nccl" in k["name"].lower()]
    first: dict[str, int] = {}
    for k in kernels:
        first.setdefault(k["name"], k["args"]["correlation"])
    cold = [(c["ts"], c["ts"] + c["dur"]) for c in (launch[i] for i in first.values()) if c["dur"] >= 1000]
    calls: dict[str, list[dict[str, float]]] = defaultdict(list)
    for e in ev:
        if e.get("cat") == "cpu_op":
            calls[e["name"]].append(e)
    for c in calls.values():
        c.sort(key=lambda e: e["ts"])
        later = max((e["dur"] for e in c[1:]), default=float("inf"))
        if c[0]["dur"] >= 3 * later and c[0]["dur"] - later >= 1000:
            cold.append((c[0]["ts"], c[0]["ts"] + c[0]["dur"]))
    clip = [(max(a, t0), min(b, end)) for a, b in cold if min(b, end) > max(a, t0)]
    return {"step_us": end - t0, "comm_us": _union_us(comm), "cold_us": _union_us(clip)}


def test_moe_3layer_before_job_draws_no_straggler_from_its_cold_start() -> None:
    folder = shared_trace("ykcai__a100x2_moe_3layer_before")
    raw = [_raw_rank(folder / f"rank{r}.pt.trace.json") for r in (0, 1)]
    # the raw JSON: steps 22,758.9 / 23,168.3 µs, 65.6% / 65.0% of them first-call work (12.0 / 12.1 ms of it the
    # AccumulateGrad add_ kernel's first launch); own work (step − collectives) 20,693.2 vs 13,537.3 µs
    assert abs(raw[0]["step_us"] - 22_758.949) < 0.01 and abs(raw[1]["step_us"] - 23_168.295) < 0.01
    from perfdoctor.jobs.task import summarise_file

    cat, codes = engine.prepare(config.resolve(select="PD303,PD304,PD902"))
    summaries = [
        s
        for r in (0, 1)
        for s in summarise_file(str(folder / f"rank{r}.pt.trace.json"), r, js.SummaryOptions(codes=codes), cat)
    ]
    for s, x in zip(summaries, raw):
        [row] = s.step_rows
        assert abs(row.dur_us - x["step_us"]) < 0.01 and s.cold_steps == [row.step]
        assert abs(s.warmup_us_by_step[row.step] - x["cold_us"]) < 0.01 and x["cold_us"] >= 0.25 * x["step_us"]
    job = reduce(summaries, cat, codes)
    assert _skipped(job, "PD303") == f"{ALL_COLD}: a straggler cannot be told from first-call work"
    assert _skipped(job, "PD304").startswith(ALL_COLD)
    assert job_section(job).cold_note == ALL_COLD
    # what PD303 read before: rank 0's own work over rank 1's, first-call work counted as its steady state (own
    # work leaves out device idle of no known cause, so at most the raw excess of step − collectives)
    old = _finding(reduce(_uncold(summaries), cat, codes), "PD303")
    excess = (raw[0]["step_us"] - raw[0]["comm_us"]) - (raw[1]["step_us"] - raw[1]["comm_us"])
    assert old is not None and 0 < old.saving_us <= excess + 0.01 and abs(excess - 7_155.955) < 0.01
