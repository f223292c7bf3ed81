"""Terminal renderer: a rich summary of the typed report (fixed width in tests)."""

from __future__ import annotations

from msgspec import UNSET
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from perfdoctor.model import Report
from perfdoctor.model.report import DeviceSection, RankSection
from perfdoctor.render import memory_view
from perfdoctor.render.view import device_name, finding_codes, ms, pct, step_range, step_time_text, summary_facts
from perfdoctor.vocab import category_label, explaining_code, idle_label


def breakdown_table(rank: RankSection, dev: DeviceSection, codes: list[str] | None = None) -> Table:
    """Mean time per step by category and idle cause, with shares of step time; an idle cause that a finding among
    ``codes`` explains names it (:func:`perfdoctor.vocab.explaining_code`)."""
    totals = dev.totals
    n = max(totals.n_steps, 1)
    step_total = totals.dur_us or 1.0
    table = Table(title="Where a step's time goes (mean per step)", title_justify="left")
    table.add_column("category")
    table.add_column("per step", justify="right")
    table.add_column("share", justify="right")
    for cat, us in totals.categories_us.items():
        if us <= 0:
            continue
        table.add_row(category_label(cat), ms(us / n), pct(us / step_total))
    for cause, us in totals.idle_causes_us.items():
        if us <= 0:
            continue
        code = explaining_code(cause, codes or [])
        table.add_row(idle_label(cause) + (f" → {code}" if code else ""), ms(us / n), pct(us / step_total))
    table.add_row(Text("step (total)", style="bold"), ms(step_total / n), "100.0%")
    return table


def _rank_header(rank: RankSection, dev: DeviceSection) -> Text:
    st = dev.step_time_us
    totals = dev.totals
    lines = [f"Rank {rank.rank}", f"trace: {rank.path}", f"device: {device_name(rank, dev.device)}"]
    if rank.steps_source == "whole-trace":
        lines.append("steps: none found — whole trace analysed as one window")
    else:
        lines.append(f"steps analysed: {len(dev.steps)} ({rank.steps_source} {step_range(dev)})")
    lines.append(f"step time: {step_time_text(st)}")
    if dev.kind == "gpu":
        lines.append(f"device utilization (busy ÷ step time, all steps): {pct(dev.utilization)}")
        comm = totals.communication
        if comm.total_us:
            overlap = comm.overlapped_us / comm.total_us
            lines.append(
                f"communication: {ms(comm.total_us / totals.n_steps)} per step, "
                f"{pct(overlap)} overlapped with compute, exposed {ms(comm.exposed_us / totals.n_steps)} per step"
            )
    else:
        lines.append(f"host busy in ops (busy ÷ step time): {pct(dev.utilization)}")
    return Text("\n".join(lines))


def memory_lines(rank: RankSection) -> list[str]:
    """At most two lines on the rank's main device: the peak and what is live at it
    (:mod:`perfdoctor.render.memory_view`)."""
    dev = memory_view.main_device(rank)
    if dev is None:
        return []
    return [line for line in (memory_view.peak_line(dev), memory_view.contributors_line(dev)) if line]


def _print_run_only(report: Report, console: Console) -> None:
    """The summary of a report without a trace: the run's steady-state step time and throughput."""
    for label, value, detail in summary_facts(report):
        if label in ("PARTIAL RUN", "trace"):
            continue
        console.print(Text.assemble((f"{label}: ", "bold"), value, (f"  ({detail})" if detail else "", "dim")))
    console.print()


def _print_opening(report: Report, console: Console) -> None:
    """The partial-run banner and the one-sentence verdict, when the report has them."""
    run = report.run if report.run is not UNSET else None
    if (run is not None and run.partial) or report.partial is True:
        console.print(
            Text(
                f"PARTIAL RUN: {(run.stop_reason if run else None) or 'the run did not complete'} "
                f"({run.steps_completed if run else None} steps ran)",
                style="bold yellow",
            )
        )
    if report.verdict is not UNSET and report.verdict:
        console.print(Text.assemble(("verdict: ", "bold"), report.verdict))
        console.print()


def _print_ranks(report: Report, console: Console) -> None:
    """Each rank's header, breakdown table and memory lines."""
    for rank in report.ranks:
        dev = rank.primary
        console.print(Group(_rank_header(rank, dev), breakdown_table(rank, dev, finding_codes(report))))
        console.print()
        memory = memory_lines(rank)
        if memory:
            console.print(Text("\n".join(memory)))
            console.print()


def _print_spread(report: Report, console: Console) -> None:
    """One line on a multi-rank report: the longest and shortest median step and their spread."""
    summ = report.summary
    if summ.n_ranks > 1 and summ.median_step_us is not UNSET:
        med = summ.median_step_us
        slow, fast = summ.slowest_rank, summ.fastest_rank
        console.print(
            f"{summ.n_ranks} ranks: longest median step time rank {slow} "
            f"({ms(med.get(slow) if isinstance(slow, int) else None)}), shortest rank {fast} "
            f"({ms(med.get(fast) if isinstance(fast, int) else None)}): spread {summ.spread_pct:.1f}% of the shortest"
        )


def render_terminal(
    rep: Report,
    console: Console,
    err_console: Console | None = None,
    per_rank: bool = False,
    details: bool = False,
) -> None:
    """Print the human summary of a report to ``console``; warnings about the input go to
    ``err_console`` (stderr in the CLI) when given. A multi-rank job (a ``job`` section) prints the job summary
    (:mod:`perfdoctor.render.job_terminal`) instead of one table per rank unless ``per_rank``; ``details`` adds each
    finding's evidence, message and method, and each skipped check's reason."""
    _print_opening(rep, console)
    if not rep.ranks:
        _print_run_only(rep, console)
    job_view = rep.job is not UNSET and not per_rank
    if job_view and rep.job is not UNSET:
        from perfdoctor.render.job_terminal import render_job

        render_job(rep.job, console)  # not the ranks: thousands of them, decoded
    else:
        _print_ranks(rep, console)
    _print_spread(rep, console)
    warnings = list(rep.warnings)
    if job_view:
        from perfdoctor.render.job_terminal import grouped_warnings

        warnings = grouped_warnings(warnings, [r.path for r in rep.ranks])
    for w in warnings:
        (err_console or console).print(Text(f"warning: {w}", style="yellow"))
    from perfdoctor.render.rules_text import findings_renderables

    for part in findings_renderables(rep, details):
        console.print(part)
