"""Terminal renderer: a rich summary of the report dict (fixed width in tests)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from perfdoctor.model import Report, as_report, to_builtins
from perfdoctor.render.view import CAT_LABELS as _CAT_LABELS
from perfdoctor.render.view import IDLE_LABELS as _IDLE_LABELS
from perfdoctor.render.view import device_name, ms, pct


def breakdown_table(rank: dict[str, Any], dev: dict[str, Any]) -> Table:
    """Mean time per step by category and idle cause, with shares of step time."""
    totals = dev["totals"]
    n = max(int(totals.get("n_steps", 1)), 1)
    step_total = totals.get("dur_us", 0.0) or 1.0
    table = Table(title="Where a step's time goes (mean per step)", title_justify="left")
    table.add_column("category")
    table.add_column("per step", justify="right")
    table.add_column("share", justify="right")
    for cat, us in totals.get("categories_us", {}).items():
        if us <= 0:
            continue
        table.add_row(_CAT_LABELS.get(cat, cat), ms(us / n), pct(us / step_total))
    for cause, us in totals.get("idle_causes_us", {}).items():
        if us <= 0:
            continue
        table.add_row(_IDLE_LABELS.get(cause, cause), ms(us / n), pct(us / step_total))
    table.add_row(Text("step (total)", style="bold"), ms(step_total / n), "100.0%")
    return table


def _rank_header(rank: dict[str, Any], dev: dict[str, Any]) -> Text:
    st = dev["step_time_us"]
    totals = dev["totals"]
    lines = [f"Rank {rank['rank']}", f"trace: {rank['path']}", f"device: {device_name(rank, dev['device'])}"]
    if rank["steps_source"] == "whole-trace":
        lines.append("steps: none found — whole trace analysed as one window")
    else:
        nums = [s["step"] for s in dev["steps"]]
        lines.append(f"steps analysed: {len(nums)} ({rank['steps_source']} #{nums[0]}–#{nums[-1]})")
    if st:
        lines.append(
            f"step time: median {ms(st['median'])} (p10 {ms(st['p10'])}, p90 {ms(st['p90'])}; "
            f"min {ms(st['min'])}, max {ms(st['max'])})"
        )
    if dev["kind"] == "gpu":
        lines.append(f"device utilization (busy ÷ step time, all steps): {pct(dev['utilization'])}")
        comm = totals.get("communication", {})
        if comm.get("total_us"):
            overlap = comm["overlapped_us"] / comm["total_us"]
            lines.append(
                f"communication: {ms(comm['total_us'] / totals['n_steps'])} per step, "
                f"{pct(overlap)} overlapped with compute, exposed {ms(comm['exposed_us'] / totals['n_steps'])} per step"
            )
    else:
        lines.append(f"host busy in ops (busy ÷ step time): {pct(dev['utilization'])}")
    return Text("\n".join(lines))


def _print_run_only(report: dict[str, Any], console: Console) -> None:
    """The summary of a report without a trace: the run's steady-state step time and throughput."""
    from perfdoctor.render.view import summary_facts

    for label, value, detail in summary_facts(report):
        if label in ("PARTIAL RUN", "trace"):
            continue
        console.print(Text.assemble((f"{label}: ", "bold"), value, (f"  ({detail})" if detail else "", "dim")))
    console.print()


def render_terminal(report: Report | Mapping[str, Any], console: Console, err_console: Console | None = None,
                    per_rank: bool = False) -> None:
    """Print the human summary of a report to ``console``; warnings about the input go to
    ``err_console`` (stderr in the CLI) when given. A multi-rank job (a ``job`` section) prints the job summary
    (:mod:`perfdoctor.render.job_terminal`) instead of one table per rank unless ``per_rank``."""
    report = to_builtins(as_report(report))
    run = report.get("run") or {}
    if run.get("partial") or report.get("partial"):
        console.print(Text(f"PARTIAL RUN: {run.get('stop_reason') or 'the run did not complete'} "
                           f"({run.get('steps_completed')} steps ran)", style="bold yellow"))
    if not report["ranks"]:
        _print_run_only(report, console)
    job_view = "job" in report and not per_rank
    if job_view:
        from perfdoctor.render.job_terminal import render_job

        render_job(report, console)
    for rank in ([] if job_view else report["ranks"]):
        dev = next(d for d in rank["devices"] if d["device"] == rank["primary_device"])
        console.print(Group(_rank_header(rank, dev), breakdown_table(rank, dev)))
        console.print()
    summ = report.get("summary", {})
    if summ.get("n_ranks", 0) > 1:
        med = summ.get("median_step_us", {})
        console.print(
            f"{summ['n_ranks']} ranks: longest median step time rank {summ['slowest_rank']} "
            f"({ms(med.get(summ['slowest_rank']))}), shortest rank {summ['fastest_rank']} "
            f"({ms(med.get(summ['fastest_rank']))}): spread {summ['spread_pct']:.1f}% of the shortest"
        )
    warnings = report.get("warnings", [])
    if job_view:
        from perfdoctor.render.job_terminal import grouped_warnings

        warnings = grouped_warnings(warnings, [r["path"] for r in report["ranks"]])
    for w in warnings:
        (err_console or console).print(Text(f"warning: {w}", style="yellow"))
    from perfdoctor.render.rules_text import findings_renderables

    for part in findings_renderables(report):
        console.print(part)
