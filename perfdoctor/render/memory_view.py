"""Memory over the step as every renderer shows it: the peak line, the top contributors and the chart.

One home for the words: the terminal and Markdown print :func:`peak_line` and :func:`contributors_line`, the
HTML report shows them above :func:`memory_chart` (inline SVG, built from
:class:`~perfdoctor.model.report.MemoryChart`).
"""

from __future__ import annotations

from msgspec import UNSET

from perfdoctor.model.report import MemoryChart, MemoryOverStep, MemoryStepPeak, RankSection
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


def _memory_axes(dev: MemoryOverStep) -> tuple[svg.Axes, tuple[int, str], list[float], bool]:
    """(the chart's axes: µs into the step by bytes; the y unit (bytes per unit, its name); the y ticks in that
    unit; whether the capacity line is drawn: it is when within :data:`CAPACITY_SCALE` of the largest value)."""
    c = dev.chart
    y_max = max([*c.reserved_bytes, *c.allocated_bytes, 1])
    cap = dev.capacity_bytes
    show_cap = cap is not None and cap <= y_max * CAPACITY_SCALE
    if show_cap and cap is not None:
        y_max = max(y_max, cap)
    unit, unit_name = axis_unit(y_max)
    ticks = svg.nice_ticks(0, y_max / unit)
    y_hi = max(ticks[-1] * unit, y_max)
    x_hi = max(c.dur_us, c.offsets_us[-1] if c.offsets_us else 0.0, 1e-9)
    return svg.Axes(860, 260, 64, 12, 22, 36, 0.0, x_hi, 0.0, y_hi), (unit, unit_name), ticks, show_cap


def _phase_bands(axes: svg.Axes, chart: MemoryChart) -> list[str]:
    """A shaded, labelled band per phase of the step (forward, backward, optimizer)."""
    out: list[str] = []
    for b in chart.phases:
        x0, x1 = axes.px(b.start_us), axes.px(b.end_us)
        out.append(
            f'<rect x="{svg._f(x0)}" y="{axes.top}" width="{svg._f(max(x1 - x0, 1.0))}" height="{axes.plot_h}" '
            f'fill="{PHASE_FILL.get(b.phase, "#E3E8F4")}"><title>{svg._t(b.phase)}</title></rect>'
            f'<text x="{svg._f(x0 + 3)}" y="{axes.top + 11}" class="ax">{svg._t(b.phase)}</text>'
        )
    return out


def _byte_lines(axes: svg.Axes, chart: MemoryChart) -> list[str]:
    """Reserved (when any) and allocated bytes as step lines: each value holds until the next change and the last
    one to the step's end."""
    out: list[str] = []
    for series, colour, label in (
        (chart.reserved_bytes, "#999999", "reserved"),
        (chart.allocated_bytes, "#0072B2", "allocated"),
    ):
        if label == "reserved" and not any(series):
            continue
        pts: list[str] = []
        for i, (x, y) in enumerate(zip(chart.offsets_us, series)):
            if i:
                pts.append(f"{svg._f(axes.px(x))},{svg._f(axes.py(series[i - 1]))}")
            pts.append(f"{svg._f(axes.px(x))},{svg._f(axes.py(y))}")
        pts.append(f"{svg._f(axes.px(axes.x_hi))},{svg._f(axes.py(series[-1]))}")
        out.append(
            f'<polyline points="{" ".join(pts)}" fill="none" stroke="{colour}" stroke-width="1.5">'
            f"<title>{svg._t(label)}</title></polyline>"
        )
    return out


def _capacity_and_peak(axes: svg.Axes, dev: MemoryOverStep, show_cap: bool) -> list[str]:
    """The capacity line (when drawn), the high-water mark's dot and the legend naming both."""
    p, cap = _peak(dev), dev.capacity_bytes
    out: list[str] = []
    if show_cap and cap is not None:
        out.append(
            f'<line x1="{axes.left}" x2="{axes.width - axes.right}" y1="{svg._f(axes.py(cap))}" '
            f'y2="{svg._f(axes.py(cap))}" class="ref"><title>capacity {svg._t(nbytes(cap))}</title></line>'
        )
    out.append(
        f'<circle cx="{svg._f(axes.px(p.peak_offset_us))}" cy="{svg._f(axes.py(p.peak_allocated_bytes))}" r="4" '
        f'fill="#D55E00"><title>peak {svg._t(nbytes(p.peak_allocated_bytes))} at {svg._t(ms(p.peak_offset_us))}'
        f"{svg._t(f' in {p.op}' if p.op else '')}</title></circle>"
    )
    legend = f"allocated (blue), reserved (grey), peak (dot) {nbytes(p.peak_allocated_bytes)}"
    if cap is not None:
        legend += f"; capacity {nbytes(cap)}" + ("" if show_cap else " (above the scale)")
    out.append(f'<text x="{axes.left}" y="{axes.top - 8}" class="lg">{svg._t(legend)}</text>')
    return out


def memory_chart(dev: MemoryOverStep, rank: int | None) -> str:
    """Allocated and reserved bytes over the step holding the high-water mark (inline SVG): phase bands, the
    capacity line when it is near the scale, the peak marked."""
    c = dev.chart
    axes, (unit, unit_name), ticks, show_cap = _memory_axes(dev)
    out = svg._open(axes.width, axes.height, f"Memory over step {c.step} — rank {rank}, {dev.label}")
    out += _phase_bands(axes, c)
    for tv in ticks:
        out += axes.y_rule(axes.py(tv * unit), svg.fmt_num(tv), 0)
    out += _byte_lines(axes, c) + _capacity_and_peak(axes, dev, show_cap)
    out.append(axes.x_title(f"ms into step {c.step}"))
    out += [
        axes.x_tick(axes.px(tv * 1000), svg.fmt_num(tv))
        for tv in svg.nice_ticks(0, axes.x_hi / 1000, 8)
        if tv * 1000 <= axes.x_hi
    ]
    out += [axes.y_title(unit_name), axes.baseline(), "</svg>"]
    return "\n".join(out)
