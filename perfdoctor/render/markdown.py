"""Markdown renderer: a PR-comment-sized summary of the typed report.

Summary facts, the top findings, the step-time breakdown of the summary rank
and (for multi-rank input) a per-rank table. Trace text is escaped so a kernel
name cannot open a link, an image, raw HTML or break a table row.
"""

from __future__ import annotations

import re

from msgspec import UNSET

from perfdoctor.model import Report
from perfdoctor.model.report import RankSection
from perfdoctor.render import memory_view, view

MAX_FINDINGS = 10
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|<>~])")


def esc(text: object) -> str:
    """Escape Markdown/HTML metacharacters and newlines (table-cell safe)."""
    s = str(text).replace("&", "&amp;")
    s = _MD_SPECIAL.sub(r"\\\1", s)
    return s.replace("\r", " ").replace("\n", " ")


def esc_prose(text: object) -> str:
    """Like :func:`esc`, but `code spans` are kept as code (their content is literal in Markdown)."""
    parts = re.split(r"(`[^`\n]+`)", str(text))
    return "".join(p if p.startswith("`") and p.endswith("`") and len(p) > 1 else esc(p) for p in parts)


def _table(header: list[str], rows: list[list[str]], right: set[int] | None = None) -> list[str]:
    right = right or set()
    out = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|",
    ]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _findings(report: Report) -> list[str]:
    items = view.findings(report)
    out = ["## Fix plan", ""]
    if not items:
        if report.findings is not UNSET:
            out.append("No check found a problem.")
        else:
            out.append("_The rule engine did not run on this report: no findings are available._")
        return out + [""]
    plan = [f for f in items if f["plan_position"] is not None]  # a plan entry's saving is replayed: never None
    if plan:
        out += _table(
            ["#", "code", "finding", "saves", "step after"],
            [
                [
                    str(f["plan_position"]),
                    f"**{esc(f['code'])}**",
                    esc(f["headline"]),
                    f"{f['about']} {view.saving_ms(f['saving_us'] or 0.0)} ({view.pct(f['saving_frac'])})",
                    view.ms(f["step_after_us"]),
                ]
                for f in plan
            ],
            {0, 3, 4},
        )
        out.append("")
    for i, f in enumerate(items[:MAX_FINDINGS], 1):
        saving = "saving not estimated"
        if f["saving_us"] is not None:
            saving = f"saves {f['about']} {view.saving_ms(f['saving_us'])}/step"
            if f["saving_frac"] is not None:
                saving += f" ({view.pct(f['saving_frac'])})"
            if f["once"]:
                saving += f" {f['once']}"
            if f["plan_note"]:
                saving = f"off the plan: {f['plan_note']} ({view.saving_ms(f['alone_us'] or 0.0)} alone)"
        ranks = f" ({len(f['ranks'])} ranks)" if len(f["ranks"]) > 1 else ""
        out.append(f"{i}. **{esc(f['code'])}** {esc(f['headline'])}{ranks} — {saving}")
        if f["evidence"]:
            out.append("   - evidence: " + "; ".join(f"{esc(k)} {esc(v)}" for k, v in f["evidence"]))
        if f["fix"]:
            out.append(f"   - fix: {esc_prose(' '.join(f['fix'].split()))}")
        if f["source"]:
            out.append(f"   - source: {esc_prose(f['source'])}")
        if f["method"]:
            out += ["   <details><summary>method</summary>", "", f"   {esc(f['method'])}", "   </details>"]
    if view.denominator_text(report):
        out += ["", f"_{esc(view.denominator_text(report))}_"]
    if report.findings_note:
        out += ["", f"_{esc(report.findings_note)}_"]
    if len(items) > MAX_FINDINGS:
        out.append(f"\n…and {len(items) - MAX_FINDINGS} more in the HTML/JSON report.")
    sk = view.skipped(report)
    if sk:
        out += ["", "Skipped checks: " + "; ".join(f"{esc(c)} ({esc(r)})" for c, r in sk)]
    return out + [""]


def _breakdown(rank: RankSection, codes: list[str]) -> list[str]:
    dev = rank.primary
    t = dev.totals
    out = [f"## Where the time goes — rank {esc(rank.rank)}, {esc(view.device_name(rank, dev.device))}", ""]
    rows = [
        [
            ("_" + esc(r["label"]) + "_")
            if r["kind"] == "subtotal"
            else esc(r["label"]) + (f" → **{r['finding']}**" if r["finding"] else ""),
            view.ms(r["per_step_us"]),
            view.pct(r["share"]),
        ]
        for r in view.breakdown_rows(dev, codes)
    ]
    rows.append(["**step (total)**", f"**{view.ms(t.dur_us / view.n_steps(dev))}**", "**100.0%**"])
    out += _table(["category", "per step", "share of step time"], rows, {1, 2})
    out += [""] + [f"_{esc(n)}_" for n in dev.notes] if dev.notes else []
    comm = t.communication
    if dev.kind == "gpu" and comm.total_us:
        n = view.n_steps(dev)
        out += [
            "",
            f"Communication: {view.ms(comm.total_us / n)}/step, {view.ms(comm.overlapped_us / n)} "
            f"overlapped with compute, {view.ms(comm.exposed_us / n)} exposed.",
        ]
    return out + [""]


def _memory(rank: RankSection) -> list[str]:
    """The peak line and the contributors live at it, on the rank's main device (none without memory events)."""
    dev = memory_view.main_device(rank)
    if dev is None:
        return []
    peak = next(s for s in dev.steps if s.step == dev.peak_step)
    rows = [
        [esc(c.op), view.nbytes(c.bytes), f"{c.n_allocations:,}" if c.n_allocations else "–"] for c in peak.contributors
    ]
    return (
        [f"## Memory over the step — rank {esc(rank.rank)}", "", esc(memory_view.peak_line(dev)), ""]
        + _table(["live at the peak, by the op that allocated it", "bytes", "allocations"], rows, {1, 2})
        + [""]
    )


def _ranks(report: Report) -> list[str]:
    rows = []
    for r in report.ranks:
        d = r.primary
        rows.append(
            [
                esc(r.rank),
                view.ms(d.step_time_us.median),
                view.pct(d.utilization),
                view.ms(d.totals.communication.exposed_us / view.n_steps(d)),
            ]
        )
    free = report.job.collectives_free if report.job is not UNSET else UNSET
    line = [esc_prose(view.collectives_free_text(free)), ""] if free is not UNSET else []
    return (
        ["## Ranks", ""]
        + _table(["rank", "median step", "utilization", "exposed comm / step"], rows, {1, 2, 3})
        + [""]
        + line
    )


def render_markdown(rep: Report) -> str:
    """The Markdown summary (UTF-8 text, ends with a newline; byte-stable for the same report)."""
    inputs = ", ".join(esc(i.path) for i in rep.inputs[:4])
    if len(rep.inputs) > 4:
        inputs += f" and {len(rep.inputs) - 4} more"
    out = ["# perfdoctor report", "", f"Input: {inputs}", ""]
    if rep.verdict is not UNSET and rep.verdict:
        out += [f"**Verdict:** {esc(rep.verdict)}", ""]
    out += _table(["", "value", "detail"], [[esc(a), f"**{esc(b)}**", esc(c)] for a, b, c in view.summary_facts(rep)])
    out.append("")
    out += _findings(rep)
    main = view.summary_rank(rep)
    no_trace = rep.no_trace if rep.no_trace is not UNSET else ""
    out += (
        _breakdown(main, view.finding_codes(rep))
        if main
        else ["## Where the time goes", "", esc(no_trace or "no trace"), ""]
    )
    out += _memory(main) if main else []
    if len(rep.ranks) > 1:
        out += _ranks(rep)
    if rep.warnings:
        out += ["## Warnings", ""] + [f"- {esc(w)}" for w in rep.warnings] + [""]
    out.append(
        f"_perfdoctor {esc(rep.tool.version)}, report schema v{rep.schema_version}; "
        "definitions of every number: docs/report-schema.md._"
    )
    return "\n".join(out) + "\n"
