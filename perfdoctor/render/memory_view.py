"""Memory over the step as every renderer shows it: the peak line, the top contributors and the chart.

One home for the words: the terminal and Markdown print :func:`peak_line` and :func:`contributors_line`, the
HTML report shows them above :func:`memory_chart` (inline SVG, built from
:class:`~perfdoctor.model.report.MemoryChart`).
"""

from __future__ import annotations

from msgspec import UNSET

from perfdoctor.model.report import MemoryOverStep, MemoryStepPeak, RankSection
from perfdoctor.render import svg
from perfdoctor.render.view import ms, nbytes

PHASE_FILL = {"forward": "#DCEBF7", "backward": "#F9E2CF", "optimizer": "#E4F2DF"}
CAPACITY_SCALE = 1.5  # the capacity line is drawn when it is within this factor of the largest reserved value


def over_step(rank: RankSection) -> list[MemoryOverStep]:
    """The rank's devices with memory over the step (GPUs first, as the analysis lists them)."""
    over = rank.memory.over_step
    return [] if over is UNSET else list(over)


MIN_SHOWN_BYTES = 1024**2  # a high-water mark under this (a few stray CPU allocations) is not worth a line


def main_device(rank: RankSection) -> MemoryOverStep | None:
    """The device the summary speaks of: the GPU with the highest high-water mark, else the CPU; None when no
    device's high-water mark reaches :data:`MIN_SHOWN_BYTES` (an MI300X trace's 8 B on the CPU)."""
    devs = [d for d in over_step(rank) if _peak(d).peak_allocated_bytes >= MIN_SHOWN_BYTES]
    gpus = [d for d in devs if d.device_type != "CPU"] or devs
    return max(gpus, key=lambda d: _peak(d).peak_allocated_bytes) if gpus else None


def _peak(dev: MemoryOverStep) -> MemoryStepPeak:
    return next(s for s in dev.steps if s.step == dev.peak_step)


def peak_line(dev: MemoryOverStep) -> str:
    """One sentence: the high-water mark, of what capacity, in which step, phase and op, reserved and churn."""
    p = _peak(dev)
    whole = len(dev.steps) == 1 and p.name == "whole trace"
    cap = f" of {nbytes(dev.capacity_bytes)}" if dev.capacity_bytes else ""
    where = p.phase + (f", {p.op}" if p.op else "") + f", at {ms(p.peak_offset_us)}"
    text = f"memory ({dev.label}): peak {nbytes(p.peak_allocated_bytes)}{cap} in "
    text += f"the trace ({where})" if whole else f"step {p.step} ({where} into it)"
    if p.reserved_unallocated_bytes is not None:
        text += f"; reserved {nbytes(p.reserved_bytes)} ({nbytes(p.reserved_unallocated_bytes)} cached, unused)"
    churn = sum(s.allocated_in_step_bytes for s in dev.steps) / len(dev.steps)
    return text + f"; {nbytes(churn)} allocated " + ("in the trace" if whole else "per step")


def contributors_line(dev: MemoryOverStep, n: int = 3) -> str:
    """The ``n`` largest contributors to the peak (bytes live at it by the op that allocated them)."""
    parts = [
        f"{c.op} {nbytes(c.bytes)}"
        + (f" ({c.n_allocations:,} allocation{'s' if c.n_allocations != 1 else ''})" if c.n_allocations else "")
        for c in _peak(dev).contributors[:n]
    ]
    return "live at the peak: " + ", ".join(parts) if parts else ""


def axis_unit(max_bytes: float) -> tuple[int, str]:
    """The binary unit (bytes per unit, its name) of a memory axis whose largest value is ``max_bytes``: the
    largest of B, KiB, MiB, GiB that it reaches, so that the tick labels are plain numbers (a CPU trace's 8 B peak
    was drawn on a GiB axis as 8e-09)."""
    for power, name in ((3, "GiB"), (2, "MiB"), (1, "KiB")):
        if max_bytes >= 1024**power:
            return 1024**power, name
    return 1, "B"


def memory_chart(dev: MemoryOverStep, rank: int | None) -> str:
    """Allocated and reserved bytes over the step holding the high-water mark (inline SVG): phase bands, the
    capacity line when it is near the scale, the peak marked."""
    c, p = dev.chart, _peak(dev)
    width, height, left, right, top, bottom = 860, 260, 64, 12, 22, 36
    plot_w, plot_h = width - left - right, height - top - bottom
    title = f"Memory over step {c.step} — rank {rank}, {dev.label}"
    y_max = max([*c.reserved_bytes, *c.allocated_bytes, 1])
    cap = dev.capacity_bytes
    show_cap = cap is not None and cap <= y_max * CAPACITY_SCALE
    if show_cap and cap is not None:
        y_max = max(y_max, cap)
    unit, unit_name = axis_unit(y_max)
    ticks = svg.nice_ticks(0, y_max / unit)
    y_hi = max(ticks[-1] * unit, y_max)
    x_hi = max(c.dur_us, c.offsets_us[-1] if c.offsets_us else 0.0, 1e-9)

    def px(x: float) -> float:
        return left + x / x_hi * plot_w

    def py(y: float) -> float:
        return top + plot_h - y / y_hi * plot_h

    out = svg._open(width, height, title)
    for b in c.phases:
        x0, x1 = px(b.start_us), px(b.end_us)
        out.append(
            f'<rect x="{svg._f(x0)}" y="{top}" width="{svg._f(max(x1 - x0, 1.0))}" height="{plot_h}" '
            f'fill="{PHASE_FILL.get(b.phase, "#E3E8F4")}"><title>{svg._t(b.phase)}</title></rect>'
            f'<text x="{svg._f(x0 + 3)}" y="{top + 11}" class="ax">{svg._t(b.phase)}</text>'
        )
    for tv in ticks:
        ty = svg._f(py(tv * unit))
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{ty}" y2="{ty}" class="grid"/>')
        out.append(f'<text x="{left - 4}" y="{ty}" class="ax" text-anchor="end">{svg._t(svg.fmt_num(tv))}</text>')
    for series, colour, label in (
        (c.reserved_bytes, "#999999", "reserved"),
        (c.allocated_bytes, "#0072B2", "allocated"),
    ):
        if label == "reserved" and not any(series):
            continue
        pts: list[str] = []
        for i, (x, y) in enumerate(zip(c.offsets_us, series)):
            if i:
                pts.append(f"{svg._f(px(x))},{svg._f(py(series[i - 1]))}")
            pts.append(f"{svg._f(px(x))},{svg._f(py(y))}")
        pts.append(f"{svg._f(px(x_hi))},{svg._f(py(series[-1]))}")
        out.append(
            f'<polyline points="{" ".join(pts)}" fill="none" stroke="{colour}" stroke-width="1.5">'
            f"<title>{svg._t(label)}</title></polyline>"
        )
    if show_cap and cap is not None:
        out.append(
            f'<line x1="{left}" x2="{width - right}" y1="{svg._f(py(cap))}" y2="{svg._f(py(cap))}" class="ref">'
            f"<title>capacity {svg._t(nbytes(cap))}</title></line>"
        )
    px_peak, py_peak = px(p.peak_offset_us), py(p.peak_allocated_bytes)
    out.append(
        f'<circle cx="{svg._f(px_peak)}" cy="{svg._f(py_peak)}" r="4" fill="#D55E00">'
        f"<title>peak {svg._t(nbytes(p.peak_allocated_bytes))} at {svg._t(ms(p.peak_offset_us))}"
        f"{svg._t(f' in {p.op}' if p.op else '')}</title></circle>"
    )
    legend = f"allocated (blue), reserved (grey), peak (dot) {nbytes(p.peak_allocated_bytes)}"
    if cap is not None:
        legend += f"; capacity {nbytes(cap)}" + ("" if show_cap else " (above the scale)")
    out.append(f'<text x="{left}" y="{top - 8}" class="lg">{svg._t(legend)}</text>')
    out.append(
        f'<text x="{svg._f(left + plot_w / 2)}" y="{height - 4}" class="ax" text-anchor="middle">'
        f"ms into step {c.step}</text>"
    )
    for tv in svg.nice_ticks(0, x_hi / 1000, 8):
        if tv * 1000 <= x_hi:
            out.append(
                f'<text x="{svg._f(px(tv * 1000))}" y="{height - bottom + 14}" class="ax" '
                f'text-anchor="middle">{svg._t(svg.fmt_num(tv))}</text>'
            )
    out.append(
        f'<text x="12" y="{svg._f(top + plot_h / 2)}" class="ax" transform="rotate(-90 12 '
        f'{svg._f(top + plot_h / 2)})" text-anchor="middle">{unit_name}</text>'
    )
    out.append(f'<line x1="{left}" x2="{width - right}" y1="{top + plot_h}" y2="{top + plot_h}" class="axis"/>')
    out.append("</svg>")
    return "\n".join(out)
