"""Terminal view of a multi-rank job: the job at a glance, the outlier ranks with why, never a table per rank.

Reads the report's ``job`` section (:class:`perfdoctor.model.report.JobSection`); the
findings are printed after it by :func:`perfdoctor.render.terminal.render_terminal`.
"""

from __future__ import annotations

import re

import numpy as np
from msgspec import UNSET
from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfdoctor.checks.common import rank_list_text
from perfdoctor.model.report import JobCollectiveWait, JobSection
from perfdoctor.render.view import CAT_LABELS, IDLE_LABELS, collectives_free_text, ms

MAX_OUTLIERS = 8  # rows of outlier ranks (ranks with the same reasons share one); the rest are counted
_NUM = re.compile(r"\d+(\.\d+)?")


def _label(key: str) -> str:
    if key.startswith("idle: "):
        return IDLE_LABELS.get(key[6:], key)
    return CAT_LABELS.get(key, key)


def render_job(job: JobSection, console: Console) -> None:
    """Print the job summary of a report's ``job`` section to ``console``."""
    ranks = job.ranks
    n = job.n_ranks
    head = [f"Job: {n} rank{'' if n == 1 else 's'} analysed"]
    if job.world_size:
        head.append(f"world size {job.world_size}")
    if job.missing_ranks:
        miss = job.missing_ranks
        head.append(f"{len(miss)} ranks without a trace ({_ids(miss)}): cross-rank results cover the given ranks only")
    if job.failed:
        head.append(f"{len(job.failed)} trace(s) could not be analysed")
    console.print(Text("; ".join(head), style="bold"))
    for f in job.failed:
        console.print(Text(f"  failed: {f.error}", style="red"))
    med = [m for m in job.step_median_us if m is not None]
    if med:
        arr = np.array([np.nan if m is None else m for m in job.step_median_us], dtype=float)
        lo, hi = float(np.nanmin(arr)), float(np.nanmax(arr))
        ends = (
            f"every rank {ms(lo)}"
            if lo == hi
            else f"shortest {_who(ranks, arr, lo)} {ms(lo)}, longest {_who(ranks, arr, hi)} {ms(hi)}"
        )
        console.print(
            f"median step time over ranks: {ms(float(np.median(med)))} (p10 {ms(float(np.percentile(med, 10)))}"
            f", p90 {ms(float(np.percentile(med, 90)))}; {ends}); {len(job.steps)} step(s)"
        )
    console.print(_shares_table(job))
    cw = job.collective_wait
    if cw.matched:
        console.print(f"collectives matched across ranks: {cw.n_collectives}; {_wait_text(cw, ranks)}")
    elif cw.note:
        console.print(Text(f"collectives not matched across ranks: {cw.note}", style="dim"))
    if job.collectives_free is not UNSET:
        console.print(collectives_free_text(job.collectives_free))
    _outliers(job, console)
    console.print()


def _who(ranks: list[int], values: np.ndarray, target: float) -> str:
    """The rank with ``target`` ("rank 3"), or the ranks that tie at it ("ranks 0–6 (a tie)"; argmax: the first)."""
    tied = [ranks[i] for i in np.flatnonzero(values == target)]
    return f"rank {tied[0]}" if len(tied) == 1 else f"ranks {rank_list_text(tied, limit=4)} (a tie)"


def _wait_text(cw: JobCollectiveWait, ranks: list[int]) -> str:
    """The longest wait inside collectives and who arrived last most often; ranks that tie are named together
    (argmax would name the first of them, rank 0), none when nobody waits or nobody arrives last alone."""
    waits = np.array(cw.wait_us_per_step or [], dtype=float)
    top = float(waits.max()) if waits.size else 0.0
    if top <= 0:
        longest = "no rank waits inside collectives"
    else:
        longest = f"longest wait inside collectives: {_who(ranks, waits, top)} {ms(top)} per step"
    counts = list(cw.last_arrivals or [])
    most = max(counts, default=0)
    if most <= 0:
        return f"{longest}; no rank arrived last alone to any collective"
    who = _who(ranks, np.array(counts), most)
    return f"{longest}; arrived last most often: {who} ({most} of {cw.n_collectives})"


def _ids(ids: list[int], limit: int = 12) -> str:
    shown = ", ".join(str(i) for i in ids[:limit])
    return shown + (f", … ({len(ids) - limit} more)" if len(ids) > limit else "")


def _shares_table(job: JobSection) -> Table:
    """Share of step time per category over the ranks: median, p10–p90, and the rank with the most."""
    table = Table(title="Where step time goes across ranks (share of each rank's step time)", title_justify="left")
    for col, just in (("category", "left"), ("median", "right"), ("p10–p90", "right"), ("most: rank", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    keys = sorted(
        {k for s in job.shares for k in s}, key=lambda k: -float(np.median([s.get(k, 0.0) for s in job.shares]))
    )
    for k in keys:
        x = np.array([s.get(k, 0.0) for s in job.shares])
        if x.max() < 0.005:
            continue
        top = float(x.max())
        most = "every rank" if top == float(x.min()) else _who(job.ranks, x, top).removeprefix("rank ")
        table.add_row(
            _label(k),
            f"{np.median(x):.1%}",
            f"{np.percentile(x, 10):.1%}–{np.percentile(x, 90):.1%}",
            f"{most} ({top:.1%})",
        )
    return table


def _outliers(job: JobSection, console: Console) -> None:
    """The outlier ranks, those with the same reasons on one row (or why none are judged: every step cold)."""
    why = job.outliers
    if job.cold_note:
        console.print(f"outlier ranks: not judged: {job.cold_note}; first-call work is no rank's steady state")
        return
    cold = job.cold_steps or []
    if cold:
        console.print(f"cold-start step(s) {', '.join(str(n) for n in cold)} left out of the cross-rank statistics")
    if not why:
        console.print("outlier ranks: none (no straggler, no rank whose breakdown differs from the job's)")
        return
    table = Table(title=f"Outlier ranks ({len(why)})", title_justify="left")
    table.add_column("rank", justify="right")
    table.add_column("why")
    # numeric rank order (the JSON keys are strings: "1005" would sort before "101"); ranks with the same reasons
    # share a row (a 1,024-rank job's 128 copies of one straggler are one row, not 128)
    ordered = sorted(why.items(), key=lambda kv: int(kv[0]) if kv[0].lstrip("-").isdigit() else 0)
    groups: dict[str, list[str]] = {}
    for r, reasons in ordered:
        groups.setdefault("; ".join(reasons), []).append(r)
    rows = list(groups.items())
    for text, ranks in rows[:MAX_OUTLIERS]:
        table.add_row(_ids([int(r) for r in ranks if r.lstrip("-").isdigit()], 4) if len(ranks) > 1 else ranks[0], text)
    console.print(table)
    if len(rows) > MAX_OUTLIERS:
        more = sum(len(r) for _, r in rows[MAX_OUTLIERS:])
        console.print(f"… and {more} more outlier ranks (the JSON/HTML report lists them)")


def grouped_warnings(warnings: list[str], paths: list[str]) -> list[str]:
    """Warnings with those repeated across ranks folded into one: the first instance, then ``(and N more ranks
    with the same warning)``; two warnings are the same when they differ only in the trace path and numbers."""
    groups: dict[str, list[str]] = {}
    for w in warnings:
        key = w
        for p in paths:
            if p and key.startswith(p):
                key = key[len(p) :]
                break
        groups.setdefault(_NUM.sub("#", key), []).append(w)
    out = []
    for items in groups.values():
        out.append(items[0] + (f" (and {len(items) - 1} more rank(s) with the same warning)" if len(items) > 1 else ""))
    return out
