"""HTML view of a multi-rank job: rank × step heatmaps, per-rank distributions, the collective-wait matrix.

Charts are inline SVG built here from the report's ``job`` section (:func:`perfdoctor.crossrank.job_section.
job_section`). The page stays small at thousands of ranks: heatmap rows are bins of consecutive ranks (at most
:data:`MAX_ROWS`, each cell the bin's maximum, so one slow rank still shows) and steps are binned the same way
(:data:`MAX_COLS`); a box plot shows each distribution with only the ranks outside its whiskers drawn as dots
(at most :data:`MAX_DOTS` per box). :func:`slim_report` keeps per-rank sections only for the ranks the page
details (outliers and the longest-step rank), so the embedded JSON does not grow with the job either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

import msgspec
import numpy as np
from markupsafe import Markup, escape
from msgspec import UNSET

from perfdoctor.model import Report
from perfdoctor.model.report import JobSection
from perfdoctor.render.view import CAT_LABELS, IDLE_LABELS, collectives_free_text

MAX_ROWS = 128
MAX_COLS = 64
MAX_DOTS = 40
DETAIL_RANKS = 16  # jobs with more ranks than this show per-rank detail for the outlier ranks only,
MAX_DETAIL = 12  # at most this many outliers (most deviant first), plus the ranks the findings and summary name
# pale orange → orange → red → dark red: the lowest value is a visible tint, not the page's white (a rank at the
# minimum read as a missing row)
_RAMP = ((254, 230, 206), (253, 174, 97), (215, 48, 39), (103, 0, 13))


def _t(x: object) -> str:
    return str(escape(str(x)))


def _colour(v: float) -> str:
    """Colour of ``v`` in [0, 1] on :data:`_RAMP` (linear between its stops)."""
    v = min(max(v, 0.0), 1.0) * (len(_RAMP) - 1)
    i = min(int(v), len(_RAMP) - 2)
    f = v - i
    rgb = [round(a + (b - a) * f) for a, b in zip(_RAMP[i], _RAMP[i + 1])]
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def _bins(n: int, most: int) -> list[tuple[int, int]]:
    """[start, end) index ranges splitting ``n`` items into at most ``most`` consecutive bins."""
    k = min(n, most)
    edges = np.linspace(0, n, k + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def heatmap(
    matrix: Sequence[Sequence[float | None]],
    ranks: list[int],
    cols: list[str],
    title: str,
    unit_ms: bool = True,
    width: int = 860,
) -> Markup:
    """Rank × column heatmap (values µs, shown in ms); rows binned to ≤ MAX_ROWS, columns to ≤ MAX_COLS (max)."""
    m = np.array([[np.nan if v is None else v for v in row] for row in matrix], dtype=float).reshape(len(ranks), -1)
    rb, cb = _bins(len(ranks), MAX_ROWS), _bins(m.shape[1], MAX_COLS)
    left, top, legend_h = 90, 30, 40
    cell_w = (width - left - 20) / max(len(cb), 1)
    cell_h = max(3.0, min(18.0, 520 / max(len(rb), 1)))
    height = int(top + cell_h * len(rb) + legend_h + 20)
    finite = m[np.isfinite(m)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    span = hi - lo or 1.0
    scale = 1000.0 if unit_ms else 1.0
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{_t(title)}"><title>{_t(title)}</title>',
        f'<text x="{left}" y="16" class="lg">{_t(title)}</text>',
    ]
    for i, (a, b) in enumerate(rb):
        y = top + i * cell_h
        label = f"rank {ranks[a]}" if b - a == 1 else f"ranks {ranks[a]}–{ranks[b - 1]}"
        if len(rb) <= 40 or i % max(1, len(rb) // 16) == 0:
            out.append(
                f'<text x="{left - 4}" y="{y + cell_h * 0.8:.1f}" text-anchor="end" class="ax">{_t(label)}</text>'
            )
        for j, (c, d) in enumerate(cb):
            block = m[a:b, c:d]
            ok = block[np.isfinite(block)]
            if not ok.size:
                continue
            v = float(ok.max())
            cl = cols[c] if d - c == 1 else f"{cols[c]}–{cols[d - 1]}"
            out.append(
                f'<rect x="{left + j * cell_w:.1f}" y="{y:.1f}" width="{cell_w:.1f}" height="{cell_h:.1f}" '
                f'fill="{_colour((v - lo) / span)}"><title>{_t(label)}, {_t(cl)}: '
                f"{v / scale:.3f} {'ms' if unit_ms else ''}</title></rect>"
            )
    y = top + cell_h * len(rb) + 14
    for k in range(11):
        out.append(f'<rect x="{left + k * 24}" y="{y:.1f}" width="24" height="10" fill="{_colour(k / 10)}"/>')
    out.append(f'<text x="{left}" y="{y + 24:.1f}" class="ax">{lo / scale:.2f}</text>')
    out.append(
        f'<text x="{left + 264}" y="{y + 24:.1f}" text-anchor="end" class="ax">{hi / scale:.2f} '
        f"{'ms' if unit_ms else ''} (bin maximum)</text>"
    )
    out.append("</svg>")
    return Markup("".join(out))


def box_plot(
    groups: list[tuple[str, list[float]]],
    ranks: list[int],
    title: str,
    unit: str,
    width: int = 860,
    fmt: str = "{:.1f}",
) -> Markup:
    """One horizontal box per group over the ranks: p25–p75 box, median line, p5–p95 whiskers, ranks outside
    the whiskers as dots (hover: the rank)."""
    left, row_h, top = 220, 26, 30
    height = top + row_h * len(groups) + 30
    vals = np.array([v for _, xs in groups for v in xs], dtype=float)
    hi = float(vals.max()) if vals.size else 1.0
    hi = hi if hi > 0 else 1.0
    plot_w = width - left - 30

    def px(v: float) -> float:
        return left + plot_w * v / hi

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{_t(title)}"><title>{_t(title)}</title>',
        f'<text x="{left}" y="16" class="lg">{_t(title)}</text>',
    ]
    for i, (label, xs) in enumerate(groups):
        x = np.array(xs, dtype=float)
        y = top + i * row_h + row_h / 2
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="ax">{_t(label)}</text>')
        if not x.size:
            continue
        p5, p25, p50, p75, p95 = np.percentile(x, [5, 25, 50, 75, 95])
        out.append(f'<line x1="{px(p5):.1f}" x2="{px(p95):.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="#888"/>')
        out.append(
            f'<rect x="{px(p25):.1f}" y="{y - 7:.1f}" width="{max(px(p75) - px(p25), 1):.1f}" height="14" '
            f'fill="#c6dbef" stroke="#4a6fa5"><title>{_t(label)}: median {fmt.format(p50)} {unit}, '
            f"p25–p75 {fmt.format(p25)}–{fmt.format(p75)}, p5–p95 {fmt.format(p5)}–{fmt.format(p95)}</title>"
            "</rect>"
        )
        out.append(
            f'<line x1="{px(p50):.1f}" x2="{px(p50):.1f}" y1="{y - 7:.1f}" y2="{y + 7:.1f}" stroke="#1f3b63" '
            'stroke-width="2"/>'
        )
        outside = np.flatnonzero((x < p5) | (x > p95))
        outside = outside[np.argsort(-np.abs(x[outside] - p50))][:MAX_DOTS]
        for k in outside.tolist():
            out.append(
                f'<circle cx="{px(float(x[k])):.1f}" cy="{y:.1f}" r="3" fill="#d62728">'
                f"<title>rank {ranks[k]}: {fmt.format(float(x[k]))} {unit}</title></circle>"
            )
    out.append(
        f'<text x="{left}" y="{height - 8}" class="ax">0</text><text x="{width - 30}" y="{height - 8}" '
        f'text-anchor="end" class="ax">{fmt.format(hi)} {unit}</text></svg>'
    )
    return Markup("".join(out))


def _share_label(key: str) -> str:
    return IDLE_LABELS.get(key[6:], key) if key.startswith("idle: ") else CAT_LABELS.get(key, key)


def detail_ranks(rep: Report) -> set[int] | None:
    """Ranks the page details (outliers + the longest-step rank + ranks findings name), or None to detail every
    rank (small jobs)."""
    if rep.job is UNSET or len(rep.ranks) <= DETAIL_RANKS:
        return None
    keep = {int(r) for r in list(rep.job.outliers)[:MAX_DETAIL]}
    if rep.summary.slowest_rank is not UNSET:
        keep.add(int(rep.summary.slowest_rank))
    for f in rep.findings if rep.findings is not UNSET else []:
        if f.rank is not None:
            keep.add(int(f.rank))
    return keep


def slim_report(rep: Report) -> Report:
    """``rep`` with per-rank sections only for :func:`detail_ranks` (all of them for a small job), so neither
    the page nor its embedded JSON grows with the job; ``perfdoctor report --format json`` has every rank."""
    keep = detail_ranks(rep)
    if keep is None:
        return rep
    return msgspec.structs.replace(rep, ranks=[r for r in rep.ranks if r.rank in keep])


class JobView(TypedDict):
    """The template's job section (:func:`job_view`): the job section, its charts as SVG markup, the outlier ranks
    with their reasons, and how many of the job's ranks have their detail on the page."""

    job: JobSection
    step_heatmap: Markup
    comm_heatmap: Markup
    step_box: Markup
    share_box: Markup
    wait_chart: Markup | None
    outliers: list[tuple[str, list[str]]]
    collectives_free: str | None
    detailed: int
    n_ranks: int


def job_view(rep: Report, n_ranks: int) -> JobView:
    """What the template's job section shows: facts and charts (SVG markup); ``n_ranks``: ranks in the job
    (``rep`` may hold fewer rank sections, see :func:`slim_report`)."""
    assert rep.job is not UNSET
    job = rep.job
    ranks = job.ranks
    steps = [f"#{s}" for s in job.steps]
    shares = job.shares
    keys = sorted({k for s in shares for k in s}, key=lambda k: -float(np.median([s.get(k, 0.0) for s in shares])))
    keys = [k for k in keys if max(s.get(k, 0.0) for s in shares) >= 0.005]
    cw = job.collective_wait
    wait_chart = None
    if cw.matched and cw.worst_collectives and cw.wait_matrix_us is not UNSET:
        cols = [f"#{c.index} {c.kind}" for c in cw.worst_collectives]
        wait_chart = heatmap(cw.wait_matrix_us, ranks, cols, "Wait inside the worst collectives (rank × collective)")
    step_med = [v for v in job.step_median_us if v is not None]
    return {
        "job": job,
        "step_heatmap": heatmap(job.step_time_us, ranks, steps, "Step time (rank × step)"),
        "comm_heatmap": heatmap(job.exposed_comm_us, ranks, steps, "Exposed communication (rank × step)"),
        "step_box": box_plot(
            [("median step time", [v / 1000 for v in step_med])], ranks, "Per-rank median step time", "ms", fmt="{:.2f}"
        ),
        "share_box": box_plot(
            [(_share_label(k), [100 * s.get(k, 0.0) for s in shares]) for k in keys],
            ranks,
            "Share of step time per category, over the ranks",
            "%",
        ),
        "wait_chart": wait_chart,
        "collectives_free": collectives_free_text(job.collectives_free) if job.collectives_free is not UNSET else None,
        "outliers": list(job.outliers.items()),
        "detailed": len(rep.ranks),
        "n_ranks": n_ranks,
    }
