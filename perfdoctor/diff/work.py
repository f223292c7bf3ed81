"""Per step or per unit of work: the work each side's step does, and which comparison the verdict is.

A step's time compares two runs only when both steps do the same work. Moving from batch 4 to batch 32 makes a
step 8× the work, and a step 7× longer is then a faster job, not a +600% regression. Each side's work per step:

- samples and tokens per step of one rank, each unit from the first of: ``--samples-per-step A,B`` /
  ``--tokens-per-step A,B`` (the user's word overrides; a note says when it disagrees with what the run or the
  trace says), the run's ``run.json`` (``perfdoctor profile``'s batch probe, or its own flags: report ``run``
  section ``tokens_per_step`` / ``samples_per_step``), the trace's recorded input shapes
  (:mod:`perfdoctor.analysis.work.batch_shape`, the op read and why stated);
- the job's work per step: the sum over ranks (a trace's ranks each read from their own trace when every rank
  tells; otherwise, and for run.json and the flags, one rank's figure × the ranks, as data parallelism gives
  every rank its own batch of the same size).

The basis (:func:`choose_basis`): tokens, then samples, whose job figures are known on both sides and differ →
per token / per sample; known and equal → per step; unknown, and the two sides' common ops were called with
different ``Input Dims`` (the first call of each op name in the first analysed step) → cannot tell per step from
per sample, so no verdict; else per step, as before.

Per unit, the verdict is the time per unit's: each step time ÷ its side's job work per step, compared with the
same statistics as the steps (:mod:`perfdoctor.diff.stats`, :mod:`perfdoctor.diff.runs`). The work per step is a
count, exact, so dividing by it shifts the log ratio by ``−ln(W_a ÷ W_b)`` and leaves its half-width (and the
degrees of freedom, the steps still needed) as they are: the interval is the step interval's, carried over.
Throughput is its inverse: ``100 (1 ÷ (1 + c) − 1)`` % for a change ``c`` of the time per unit.
"""

from __future__ import annotations

import math

from perfdoctor.diff import steps
from perfdoctor.diff.model import Pair, RateRow, WorkSide
from perfdoctor.diff.sides import Side, rank_number
from perfdoctor.errors import PerfDoctorError

UNITS = ("token", "sample")
MAX_SHAPE_ROWS = 5


def parse_pair(text: str | None, flag: str) -> tuple[float, float] | None:
    """``"A,B"`` → (A, B), two positive finite numbers (BEFORE's, AFTER's work per step of one rank).

    Raises:
        PerfDoctorError: not two positive finite numbers separated by a comma.
    """
    if text is None:
        return None
    parts = text.split(",")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) != 2 or not all(math.isfinite(v) and v > 0 for v in values):
        raise PerfDoctorError(f"{flag}: give BEFORE,AFTER as two positive numbers, e.g. 1024,8192 (got {text!r})")
    return values[0], values[1]


def _n_ranks(side: Side) -> int:
    return max(len(side.model.ranks), 1)


def _trace_unit(side: Side, unit: str) -> tuple[float | None, float | None, str]:
    """(one rank's, the job's, words) of ``unit`` per step from the side's traces; Nones when no rank tells."""
    attr = "tokens" if unit == "token" else "samples"
    got = {r: getattr(b, attr) for r, b in side.batches.items() if getattr(b, attr) is not None}
    if not got:
        return None, None, ""
    first = min(got)
    batch = side.batches[first]
    n = _n_ranks(side)
    shape = "×".join(str(d) for d in batch.shape)
    words = f"the trace ({batch.why}, {batch.dtype} [{shape}])"
    if batch.varies:
        words += f" (its steps' batches differ: the median of {batch.steps} steps)"
    if len(got) == n:
        job = float(sum(got.values()))
        if n > 1:
            words += f"; the job: the sum over its {n} ranks, each read from its own trace"
        return float(got[first]), job, words
    words += f" (rank {first}); the job: × {n} ranks (the other ranks' traces do not tell)"
    return float(got[first]), float(got[first]) * n, words


def _run_unit(side: Side, unit: str) -> float | None:
    run = steps.run_of(side.model)
    if run is None:
        return None
    value = run.tokens_per_step if unit == "token" else run.samples_per_step
    return float(value) if value else None


def side_work(side: Side, flags: dict[str, float | None], label: str) -> tuple[WorkSide, list[str]]:
    """(the side's work per step, notes): each unit from the flag, else run.json, else the trace (module
    docstring); ``flags``: ``{"token": value or None, "sample": ...}`` of this side."""
    n = _n_ranks(side)
    per_rank: dict[str, float | None] = {}
    job: dict[str, float | None] = {}
    words: list[tuple[str, str]] = []
    origins: list[str] = []
    notes: list[str] = []
    for unit in UNITS:
        flag = flags.get(unit)
        run_value = _run_unit(side, unit)
        trace_rank, trace_job, trace_words = _trace_unit(side, unit)
        read = run_value if run_value is not None else trace_rank
        times = f" × {n} ranks" if n > 1 else ""
        if flag is not None:
            per_rank[unit], job[unit] = flag, flag * n
            words.append((unit, f"--{unit}s-per-step{times}"))
            origins.append("flag")
            if read is not None and read != flag:
                where = "run.json" if run_value is not None else "the trace"
                notes.append(
                    f"{label}: --{unit}s-per-step {flag:,.10g} used; {where} says {read:,.10g} {unit}s per step"
                )
        elif run_value is not None:
            per_rank[unit], job[unit] = run_value, run_value * n
            words.append((unit, f"run.json (the runner's batch probe or its flag, rank 0){times}"))
            origins.append("run.json")
        elif trace_rank is not None:
            per_rank[unit], job[unit] = trace_rank, trace_job
            words.append((unit, trace_words))
            origins.append("trace")
        else:
            per_rank[unit], job[unit] = None, None
    origin = origins[0] if origins else "unknown"
    if len(words) == 2 and words[0][1] == words[1][1]:
        source = f"{words[0][0]}s and {words[1][0]}s from {words[0][1]}"
    else:
        source = "; ".join(f"{unit}s from {text}" for unit, text in words)
    source = source or "unknown: no run.json figure, no input shape that tells, no flag"
    ws = WorkSide(per_rank["sample"], per_rank["token"], n, job["sample"], job["token"], origin, source)
    return ws, notes


def shapes_differ(before: Side, after: Side) -> list[str]:
    """The op names both sides' first traces called with different ``Input Dims`` (first call in the first
    analysed step), as ``name: dims → dims`` (at most :data:`MAX_SHAPE_ROWS`)."""
    b, a = before.input_shapes, after.input_shapes
    out = [f"{name}: {_cut(b[name])} → {_cut(a[name])}" for name in b if name in a and b[name] != a[name]]
    return out[:MAX_SHAPE_ROWS]


def no_shapes_reason(before: Side, after: Side) -> str | None:
    """Why the two sides' steps cannot be compared by shape, None when both have input shapes."""
    if before.input_shapes and after.input_shapes:
        return None
    if any(s.kind == "report" and not s.input_shapes for s in (before, after)):
        return "a report JSON keeps no input shapes; pass --samples-per-step A,B or --tokens-per-step A,B"
    return "record with record_shapes=True, or pass --samples-per-step A,B or --tokens-per-step A,B"


def _cut(dims: str, width: int = 60) -> str:
    return dims if len(dims) <= width else dims[: width - 1] + "…"


def _job(ws: WorkSide, unit: str) -> float | None:
    return ws.job_tokens if unit == "token" else ws.job_samples


def choose_basis(b: WorkSide, a: WorkSide, differ: list[str], no_shapes: str | None) -> tuple[str, str | None, str]:
    """(basis, unit, reason): see the module docstring. ``differ``: :func:`shapes_differ`; ``no_shapes``: why the
    steps could not be compared by shape (None: both sides' traces recorded input shapes)."""
    for unit in UNITS:
        jb, ja = _job(b, unit), _job(a, unit)
        if jb is None or ja is None:
            continue
        if jb != ja:
            return (
                f"per-{unit}",
                unit,
                f"the job's {unit}s per step differ ({jb:,.10g} → {ja:,.10g}): compared per {unit}, i.e. by "
                f"throughput ({unit}s/s)",
            )
        return "per-step", None, f"the same {unit}s per step on both sides ({jb:,.10g}): compared per step"
    unknown = " and ".join(label for label, w in (("BEFORE", b), ("AFTER", a)) if w.origin == "unknown") or "a side"
    if differ:
        return (
            "cannot-tell",
            None,
            f"the work per step is unknown on {unknown} and the steps differ in shape ({differ[0]}"
            + (f"; {len(differ) - 1} more op(s)" if len(differ) > 1 else "")
            + "): cannot tell per step from per sample; pass --samples-per-step A,B or --tokens-per-step A,B",
        )
    if no_shapes is not None:
        return (
            "per-step",
            None,
            f"the work per step is unknown on {unknown} and no input shapes to compare ({no_shapes}): compared per "
            "step, as if both did the same work",
        )
    return (
        "per-step",
        None,
        f"the work per step is unknown on {unknown}; the ops both sides run were called with the same input "
        "shapes: compared per step",
    )


def throughput_pct(change_pct: float) -> float:
    """The throughput change (%) of a change of the time per unit (%): ``100 (1 ÷ (1 + c) − 1)``."""
    return 100.0 * (1.0 / (1.0 + change_pct / 100.0) - 1.0)


def rates(b: WorkSide, a: WorkSide, mean_step_us: Pair, before: Side, after: Side) -> list[RateRow]:
    """samples/s and tokens/s of the job (its work per step ÷ the verdict's mean step) and, on multi-rank sides,
    of each rank both have (its work per step ÷ its mean profiled step)."""

    def rate(work: float | None, step_us: float | None) -> float | None:
        return work / (step_us / 1e6) if work is not None and step_us else None

    def change(x: float | None, y: float | None) -> float | None:
        return 100.0 * (y / x - 1.0) if x and y is not None else None

    out = []
    for unit in UNITS:
        rb, ra = rate(_job(b, unit), mean_step_us.before), rate(_job(a, unit), mean_step_us.after)
        if rb is None and ra is None:
            continue
        out.append(RateRow(None, f"{unit}s/s", rb, ra, change(rb, ra)))
    if max(len(before.model.ranks), len(after.model.ranks)) < 2:
        return out
    mb, ma = _rank_rates(before, b), _rank_rates(after, a)
    for rank in sorted(set(mb) & set(ma)):
        for unit in UNITS:
            x, y = mb[rank].get(unit), ma[rank].get(unit)
            if x is not None or y is not None:
                out.append(RateRow(rank, f"{unit}s/s", x, y, change(x, y)))
    return out


def _rank_rates(side: Side, ws: WorkSide) -> dict[int, dict[str, float | None]]:
    """Each rank's samples/s and tokens/s: its own trace's batch where it tells (else the side's per-rank figure)
    ÷ its mean profiled step."""
    out: dict[int, dict[str, float | None]] = {}
    for i, rank in enumerate(side.model.ranks):
        dev = steps.primary_device(rank)
        if dev is None or not dev.steps or not dev.totals.dur_us:
            continue
        step_s = float(dev.totals.dur_us) / float(dev.totals.n_steps or len(dev.steps)) / 1e6
        number = rank_number(rank, i)
        batch = side.batches.get(number)
        row: dict[str, float | None] = {}
        for unit, attr, fallback in (("token", "tokens", ws.tokens), ("sample", "samples", ws.samples)):
            own = getattr(batch, attr) if batch is not None and ws.origin == "trace" else None
            work = own if own is not None else fallback
            row[unit] = work / step_s if work is not None else None
        out[number] = row
    return out
