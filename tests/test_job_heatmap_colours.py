"""The rank × step heatmap's colours: every cell visible on the report's white page, darker for larger values.

The DLRM 8-rank job's step-time heatmap drew rank 7 (the shortest step, 12.51 ms) in pure white, the page's own
colour: its row looked empty, as if the rank had no data. The values here are those eight ranks' step times in µs
(one profiled step each, from the job report).
"""

from __future__ import annotations

import re

from perfdoctor.render.job_html import heatmap

STEP_US = [14455.0, 19901.0, 13017.0, 18711.0, 17979.0, 17797.0, 13091.0, 12509.0]  # ranks 0-7, ProfilerStep#10


def _luminance(hex_colour: str) -> float:
    """Relative luminance (WCAG 2.x) of ``#rrggbb``."""

    def lin(c: int) -> float:
        x = c / 255
        return x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4

    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)


def test_every_cell_differs_from_the_white_page_and_larger_is_darker() -> None:
    svg = str(heatmap([[v] for v in STEP_US], list(range(8)), ["#10"], "Step time (rank × step)"))
    cells = re.findall(r'<rect [^>]*fill="(#[0-9a-f]{6})"><title>rank (\d+), #10: ([\d.]+) ms</title>', svg)
    assert [int(r) for _, r, _ in cells] == list(range(8))
    assert [float(ms) for _, _, ms in cells] == [round(v / 1000, 3) for v in STEP_US]
    for fill, rank, _ in cells:
        assert fill != "#ffffff", f"rank {rank} is drawn in the page's white"
        # at least a 1.05 contrast ratio against white (1.0 = the same colour)
        assert (1.05 / (_luminance(fill) + 0.05)) >= 1.05, (rank, fill)
    by_value = sorted(cells, key=lambda c: float(c[2]))
    lum = [_luminance(f) for f, _, _ in by_value]
    assert lum == sorted(lum, reverse=True)  # the shortest step is the palest, the longest (rank 1) the darkest
    assert by_value[0][1] == "7" and by_value[-1][1] == "1"
