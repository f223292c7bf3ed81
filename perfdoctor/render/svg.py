"""Small inline-SVG chart builders for the HTML report.

Pure functions: numbers in, an SVG string out. Every piece of text is
escaped here (trace names are hostile input), coordinates are written with a
fixed number of decimals so the same input gives the same bytes, and nothing
refers to an external resource. Tooltips are SVG ``<title>`` elements, so the
charts need no JavaScript.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from perfdoctor.vocab import Category, IdleCause

# Colour per breakdown category / idle cause (colour-blind-friendly, Okabe-Ito + greys)
PALETTE = {**{c.value: c.colour for c in Category}, **{c.key: c.colour for c in IdleCause}}
_FALLBACK = ("#4E79A7", "#F28E2B", "#E15759", "#76B7B2", "#59A14F", "#EDC948", "#B07AA1", "#FF9DA7")


def color(key: str, i: int = 0) -> str:
    """The colour of a series key (a fixed palette entry, else a fallback by index)."""
    return PALETTE.get(key, _FALLBACK[i % len(_FALLBACK)])


def _t(text: object) -> str:
    return escape(str(text), quote=True)


def _f(x: float) -> str:
    """Fixed 1-decimal coordinate (stable bytes)."""
    return f"{x:.1f}"


def fmt_num(x: float) -> str:
    """Compact axis label: 1.2k, 3.4M, 0.05."""
    ax = abs(x)
    if ax >= 1e9:
        return f"{x / 1e9:.3g}G"
    if ax >= 1e6:
        return f"{x / 1e6:.3g}M"
    if ax >= 1e3:
        return f"{x / 1e3:.3g}k"
    return f"{x:.3g}"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks, v = [], start
    while True:
        ticks.append(round(v, 10))
        if v >= hi - step * 1e-9:
            return ticks
        v += step


@dataclass
class Series:
    """One stacked series: ``key`` picks the colour, ``label`` is shown in the legend."""

    key: str
    label: str
    values: list[float]


def _open(width: float, height: float, title: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{_t(title)}">',
        f"<title>{_t(title)}</title>",
    ]


@dataclass(frozen=True)
class Axes:
    """A chart's frame: the SVG's size and the margins around the plot (px), and the values each axis spans
    (linear, or log10 of the values when ``log``): :meth:`px` and :meth:`py` place a value in the plot."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    x_lo: float = 0.0
    x_hi: float = 1.0
    y_lo: float = 0.0
    y_hi: float = 1.0
    log: bool = False

    @property
    def plot_w(self) -> int:
        """Width of the plot (px)."""
        return self.width - self.left - self.right

    @property
    def plot_h(self) -> int:
        """Height of the plot (px)."""
        return self.height - self.top - self.bottom

    def px(self, x: float) -> float:
        """The x pixel of the value ``x``."""
        if self.log:
            lo, hi = math.log10(self.x_lo), math.log10(self.x_hi)
            return self.left + (math.log10(x) - lo) / (hi - lo) * self.plot_w
        return self.left + (x - self.x_lo) / (self.x_hi - self.x_lo) * self.plot_w

    def py(self, y: float) -> float:
        """The y pixel of the value ``y`` (up is larger)."""
        if self.log:
            lo, hi = math.log10(self.y_lo), math.log10(self.y_hi)
            return self.top + self.plot_h - (math.log10(y) - lo) / (hi - lo) * self.plot_h
        return self.top + self.plot_h - (y - self.y_lo) / (self.y_hi - self.y_lo) * self.plot_h

    def y_rule(self, y_px: float, label: str, text_dy: float = 4) -> list[str]:
        """A horizontal grid line at ``y_px`` and its axis label, ``text_dy`` px below it."""
        return [
            f'<line x1="{self.left}" x2="{self.width - self.right}" y1="{_f(y_px)}" y2="{_f(y_px)}" class="grid"/>',
            f'<text x="{self.left - 4}" y="{_f(y_px + text_dy)}" class="ax" text-anchor="end">{_t(label)}</text>',
        ]

    def x_tick(self, x_px: float, label: str) -> str:
        """An x axis label under the plot at ``x_px``."""
        return (
            f'<text x="{_f(x_px)}" y="{self.height - self.bottom + 14}" class="ax" '
            f'text-anchor="middle">{_t(label)}</text>'
        )

    def x_title(self, text: str, from_bottom: int = 4) -> str:
        """The x axis title, centred, ``from_bottom`` px above the SVG's bottom edge."""
        return (
            f'<text x="{_f(self.left + self.plot_w / 2)}" y="{self.height - from_bottom}" class="ax" '
            f'text-anchor="middle">{_t(text)}</text>'
        )

    def y_title(self, text: str) -> str:
        """The y axis title, turned upright, centred on the plot's left."""
        mid = _f(self.top + self.plot_h / 2)
        return (
            f'<text x="12" y="{mid}" class="ax" transform="rotate(-90 12 {mid})" text-anchor="middle">{_t(text)}</text>'
        )

    def baseline(self) -> str:
        """The x axis line along the plot's bottom."""
        y = self.top + self.plot_h
        return f'<line x1="{self.left}" x2="{self.width - self.right}" y1="{y}" y2="{y}" class="axis"/>'


def _legend(items: list[tuple[str, str]], x0: float, y0: float, width: float) -> tuple[list[str], float]:
    """Legend swatches wrapped into rows; returns (elements, height used)."""
    out, x, y = [], x0, y0
    for label, col in items:
        w = 26 + 6.8 * len(label)
        if x + w > x0 + width and x > x0:
            x, y = x0, y + 16
        out.append(f'<rect x="{_f(x)}" y="{_f(y)}" width="10" height="10" fill="{col}"/>')
        out.append(f'<text x="{_f(x + 14)}" y="{_f(y + 9)}" class="lg">{_t(label)}</text>')
        x += w
    return out, (y - y0) + 16


def stacked_bars(
    labels: list[str], series: list[Series], unit: str, title: str, width: int = 860, bar_max: float = 48.0
) -> str:
    """Vertical stacked bars, one per label (e.g. per step), series stacked bottom-up.

    ``values`` of each series align with ``labels``; the y axis is in ``unit``.
    Each segment has a tooltip "label — series: value unit".
    """
    series = [s for s in series if any(v > 0 for v in s.values)]
    legend, lh = _legend([(s.label, color(s.key, i)) for i, s in enumerate(series)], 60, 8, width - 70)
    top, left, bottom, right = 16 + lh, 60, 36, 12
    height = top + 200 + bottom
    plot_h, plot_w = 200.0, width - left - right
    totals = [sum(s.values[i] for s in series) for i in range(len(labels))]
    ymax = max(totals, default=0.0) or 1.0
    ticks = nice_ticks(0, ymax)
    ymax = max(ticks[-1], ymax)
    out = _open(width, height, title) + legend
    for tv in ticks:
        y = top + plot_h - tv / ymax * plot_h
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{_f(y)}" y2="{_f(y)}" class="grid"/>')
        out.append(f'<text x="{left - 4}" y="{_f(y + 4)}" class="ax" text-anchor="end">{_t(fmt_num(tv))}</text>')
    n = max(len(labels), 1)
    slot = plot_w / n
    bw = min(bar_max, slot * 0.8)
    every = max(1, math.ceil(n / 30))
    for i, lab in enumerate(labels):
        x = left + i * slot + (slot - bw) / 2
        y = top + plot_h
        for k, s in enumerate(series):
            v = s.values[i]
            if v <= 0:
                continue
            h = v / ymax * plot_h
            y -= h
            out.append(
                f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(bw)}" height="{_f(h)}" fill="{color(s.key, k)}">'
                f"<title>{_t(lab)} — {_t(s.label)}: {_t(f'{v:,.2f}')} {_t(unit)}</title></rect>"
            )
        if i % every == 0:
            out.append(
                f'<text x="{_f(x + bw / 2)}" y="{_f(top + plot_h + 14)}" class="ax" '
                f'text-anchor="middle">{_t(lab)}</text>'
            )
    out.append(
        f'<text x="12" y="{_f(top + plot_h / 2)}" class="ax" transform="rotate(-90 12 '
        f'{_f(top + plot_h / 2)})" text-anchor="middle">{_t(unit)}</text>'
    )
    out.append(f'<line x1="{left}" x2="{width - right}" y1="{_f(top + plot_h)}" y2="{_f(top + plot_h)}" class="axis"/>')
    out.append("</svg>")
    return "\n".join(out)


LABEL_CHAR_PX = 6.2  # width of one character of an axis label (11 px sans-serif), for stacking labels


@dataclass
class Band:
    """A shaded x range on a line chart (warm-up, steady state, a phase)."""

    x0: float
    x1: float
    label: str
    key: str = "band"


BAND_FILL = {"warmup": "#F4D6A0", "steady": "#CDEBC9", "band": "#E3E8F4"}


def _bands(axes: Axes, bands: list[Band]) -> list[str]:
    """Shaded x ranges clipped to the plot, each labelled at its left; the labels of bands too narrow for them
    stack on rows below one another."""
    out: list[str] = []
    label_ends: list[float] = []  # right end of the last label on each text row (labels of narrow bands stack)
    for b in bands:
        x0, x1 = axes.px(max(b.x0, axes.x_lo)), axes.px(min(b.x1, axes.x_hi))
        out.append(
            f'<rect x="{_f(x0)}" y="{axes.top}" width="{_f(max(x1 - x0, 1.0))}" height="{axes.plot_h}" '
            f'fill="{BAND_FILL.get(b.key, "#E3E8F4")}" opacity="0.6"><title>{_t(b.label)}</title></rect>'
        )
        row = next((i for i, end in enumerate(label_ends) if x0 + 3 > end + 6), len(label_ends))
        end = x0 + 3 + LABEL_CHAR_PX * len(b.label)
        label_ends[row : row + 1] = [end]
        out.append(f'<text x="{_f(x0 + 3)}" y="{axes.top + 11 + 12 * row}" class="ax">{_t(b.label)}</text>')
    return out


def _x_ticks(axes: Axes, integral: bool) -> list[str]:
    """About 8 x axis labels inside the plotted range (whole numbers only when ``integral``)."""
    return [
        axes.x_tick(axes.px(tv), fmt_num(tv))
        for tv in nice_ticks(axes.x_lo, axes.x_hi, 8)
        if axes.x_lo <= tv <= axes.x_hi and (not integral or float(tv).is_integer())
    ]


def _marks(axes: Axes, marks: list[tuple[float, str]], ref_y: tuple[float, str] | None) -> list[str]:
    """Vertical marks at (x, label) and the horizontal reference line (y, label), each with its tooltip."""
    out = [
        f'<line x1="{_f(axes.px(x))}" x2="{_f(axes.px(x))}" y1="{axes.top}" y2="{axes.top + axes.plot_h}" '
        f'class="mark"><title>{_t(label)}</title></line>'
        for x, label in marks
    ]
    if ref_y is not None:
        out.append(
            f'<line x1="{axes.left}" x2="{axes.width - axes.right}" y1="{_f(axes.py(ref_y[0]))}" '
            f'y2="{_f(axes.py(ref_y[0]))}" class="ref"><title>{_t(ref_y[1])}</title></line>'
        )
    return out


def _line(axes: Axes, xs: list[float], ys: list[float], x_label: str, unit: str) -> list[str]:
    """The series as a polyline, with a dot and tooltip per point up to 200 points."""
    pts = " ".join(f"{_f(axes.px(x))},{_f(axes.py(y))}" for x, y in zip(xs, ys))
    out = [f'<polyline points="{pts}" class="line"/>']
    if len(xs) <= 200:
        out += [
            f'<circle cx="{_f(axes.px(x))}" cy="{_f(axes.py(y))}" r="3" class="dot">'
            f"<title>{_t(x_label)} {_t(fmt_num(x))}: {_t(f'{y:,.3f}')} {_t(unit)}</title></circle>"
            for x, y in zip(xs, ys)
        ]
    return out


def step_line(
    xs: list[float],
    ys: list[float],
    unit: str,
    title: str,
    x_label: str = "step",
    bands: list[Band] | None = None,
    marks: list[tuple[float, str]] | None = None,
    ref_y: tuple[float, str] | None = None,
    width: int = 860,
    height: int = 240,
) -> str:
    """Step time (or any series) against step number, with shaded bands, vertical marks
    (e.g. phase changes) and an optional horizontal reference line (e.g. the median)."""
    if not xs:
        return "\n".join(_open(width, height, title) + ["</svg>"])
    x_lo, x_hi = min(xs), max(xs)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    ticks = nice_ticks(0, max(ys) or 1.0)
    y_hi = max(ticks[-1], max(ys)) or 1.0
    axes = Axes(width, height, 60, 12, 14, 36, x_lo, x_hi, 0.0, y_hi)
    out = _open(width, height, title) + _bands(axes, bands or [])
    for tv in ticks:
        out += axes.y_rule(axes.py(tv), fmt_num(tv))
    out += _x_ticks(axes, all(float(x).is_integer() for x in xs))
    out += _marks(axes, marks or [], ref_y)
    out += _line(axes, xs, ys, x_label, unit)
    out += [axes.x_title(x_label), axes.y_title(unit), axes.baseline(), "</svg>"]
    return "\n".join(out)


@dataclass
class Point:
    """A roofline point: arithmetic intensity (FLOP/byte), achieved rate (TFLOP/s), size weight."""

    x: float
    y: float
    weight: float
    label: str
    key: str = "other"


@dataclass
class Roof:
    """A roof: ``peak`` TFLOP/s (flat) or a bandwidth ``slope`` in TB/s (y = slope·x)."""

    label: str
    peak_tflops: float | None = None
    bw_tbps: float | None = None


def _decades(lo: float, hi: float) -> list[float]:
    return [10.0**k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]


def _decade_grid(axes: Axes) -> list[str]:
    """Grid lines and labels at the powers of ten inside each log axis."""
    out: list[str] = []
    for d in _decades(axes.x_lo, axes.x_hi):
        if axes.x_lo <= d <= axes.x_hi:
            x = _f(axes.px(d))
            out.append(f'<line x1="{x}" x2="{x}" y1="{axes.top}" y2="{axes.top + axes.plot_h}" class="grid"/>')
            out.append(axes.x_tick(axes.px(d), fmt_num(d)))
    for d in _decades(axes.y_lo, axes.y_hi):
        if axes.y_lo <= d <= axes.y_hi:
            out += axes.y_rule(axes.py(d), fmt_num(d))
    return out


def _compute_roofs(axes: Axes, roofs: list[Roof], peaks: list[float], bws: list[float]) -> list[str]:
    """Each flat compute roof (TFLOP/s) from its ridge with each bandwidth roof to the right edge, labelled at the
    right."""
    out: list[str] = []
    for pk in peaks:
        for bw in list[float | None](bws) or [None]:
            ridge = pk / bw if bw else axes.x_lo
            x0 = max(ridge, axes.x_lo)
            out.append(
                f'<line x1="{_f(axes.px(x0))}" x2="{_f(axes.px(axes.x_hi))}" y1="{_f(axes.py(pk))}" '
                f'y2="{_f(axes.py(pk))}" class="roof"/>'
            )
    for r in roofs:
        if r.peak_tflops:
            out.append(
                f'<text x="{_f(axes.left + axes.plot_w - 4)}" y="{_f(axes.py(r.peak_tflops) - 4)}" class="lg" '
                f'text-anchor="end">{_t(r.label)}</text>'
            )
    return out


def _bandwidth_roofs(axes: Axes, roofs: list[Roof], peaks: list[float]) -> list[str]:
    """Each sloped bandwidth roof (y = TB/s × FLOP/byte) from the left edge up to the highest compute roof,
    labelled near its foot."""
    out: list[str] = []
    for r in roofs:
        if not r.bw_tbps:
            continue
        cap = max(peaks, default=axes.y_hi)
        x_end = min(cap / r.bw_tbps, axes.x_hi)
        y0 = r.bw_tbps * axes.x_lo
        out.append(
            f'<line x1="{_f(axes.px(axes.x_lo))}" x2="{_f(axes.px(x_end))}" y1="{_f(axes.py(max(y0, axes.y_lo)))}" '
            f'y2="{_f(axes.py(r.bw_tbps * x_end))}" class="roof"/>'
        )
        lx = axes.x_lo * 2
        out.append(
            f'<text x="{_f(axes.px(lx))}" y="{_f(axes.py(max(r.bw_tbps * lx, axes.y_lo)) - 6)}" class="lg">'
            f"{_t(r.label)}</text>"
        )
    return out


def _points(axes: Axes, pts: list[Point]) -> list[str]:
    """The points, largest weight first (drawn below the smaller), each of area proportional to its weight."""
    wmax = max((p.weight for p in pts), default=1.0) or 1.0
    out: list[str] = []
    for i, p in enumerate(sorted(pts, key=lambda p: -p.weight)):
        rad = 3 + 15 * math.sqrt(max(p.weight, 0.0) / wmax)
        out.append(
            f'<circle cx="{_f(axes.px(p.x))}" cy="{_f(axes.py(p.y))}" r="{_f(rad)}" fill="{color(p.key, i)}" '
            f'class="pt"><title>{_t(p.label)}</title></circle>'
        )
    return out


def roofline(points: list[Point], roofs: list[Roof], title: str, width: int = 860, height: int = 380) -> str:
    """Log-log roofline: x = arithmetic intensity (FLOP/byte), y = TFLOP/s.

    The attainable rate is min(peak, bandwidth × intensity) per compute/bandwidth
    roof pair; each point's area is proportional to its ``weight`` (e.g. time).
    """
    pts = [p for p in points if p.x > 0 and p.y > 0]
    peaks = [r.peak_tflops for r in roofs if r.peak_tflops]
    bws = [r.bw_tbps for r in roofs if r.bw_tbps]
    xs = [p.x for p in pts] + [pk / bw for pk in peaks for bw in bws]
    ys = [p.y for p in pts] + peaks
    x_lo, x_hi = (min(xs) / 4, max(xs) * 4) if xs else (0.1, 1000.0)
    y_lo, y_hi = (min(ys) / 4, max(ys) * 2) if ys else (0.01, 100.0)
    axes = Axes(width, height, 64, 16, 14, 40, x_lo, x_hi, y_lo, y_hi, log=True)
    out = _open(width, height, title) + _decade_grid(axes)
    out += _compute_roofs(axes, roofs, peaks, bws) + _bandwidth_roofs(axes, roofs, peaks) + _points(axes, pts)
    out += [axes.x_title("arithmetic intensity (FLOP/byte, log)", 6), axes.y_title("TFLOP/s (log)"), "</svg>"]
    return "\n".join(out)


def before_after(
    step_ms: float, after_ms: float, texts: tuple[str, str], title: str = "", labels: tuple[str, str] = ("now", "fixed")
) -> str:
    """Two horizontal bars: the mean step before and with the fix, both in ms, labelled with ``texts`` (the
    caller's formatting, so a bar reads as the same step does elsewhere in the report) and named ``labels`` (a plan
    entry's "before" is the step with the entries above it in)."""
    w, bar_h, left, right = 420.0, 16.0, 52.0, 90.0
    scale = (w - left - right) / step_ms if step_ms > 0 else 0.0
    rows = []
    bars = ((labels[0], step_ms, texts[0], "#999999"), (labels[1], after_ms, texts[1], "#59A14F"))
    for i, (label, value, text, fill) in enumerate(bars):
        y = 4.0 + i * (bar_h + 6.0)
        rows.append(
            f'<text x="{_f(left - 6)}" y="{_f(y + 12)}" text-anchor="end" font-size="11">{label}</text>'
            f'<rect x="{_f(left)}" y="{_f(y)}" width="{_f(value * scale)}" height="{_f(bar_h)}" '
            f'fill="{fill}"><title>{_t(label)}: {_t(text)}</title></rect>'
            f'<text x="{_f(left + value * scale + 4)}" y="{_f(y + 12)}" font-size="11">{_t(text)}</text>'
        )
    h = 4.0 + 2 * (bar_h + 6.0)
    return (
        f'<svg class="chart before-after" xmlns="http://www.w3.org/2000/svg" width="{_f(w)}" height="{_f(h)}" '
        f'viewBox="0 0 {_f(w)} {_f(h)}" role="img" aria-label="{_t(title or "mean step now and with the fix")}">'
        + "".join(rows)
        + "</svg>"
    )
