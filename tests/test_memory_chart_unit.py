"""The memory chart's axis unit follows the data: the SwitchTransformers A100 trace records a GPU peak of
23,111,038,976 B (21.5 GiB) and a CPU peak of 160 B (its ``[memory]`` events' largest ``Total Allocated`` per
``Device Type``, read here from the raw JSON). The CPU chart was drawn on a GiB axis labelled 5e-08 ... 1.5e-07;
now each axis is in the largest binary unit its values reach (GiB and B here) and its labels are plain numbers."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from conftest import shared_trace
from reporting import cli

from perfdoctor.render.memory_view import axis_unit

TRACE = "switchtransformers__a100_moe_profile_memory.json.gz"


def test_axis_unit_by_hand() -> None:
    assert axis_unit(1) == (1, "B")
    assert axis_unit(1023) == (1, "B")
    assert axis_unit(1024) == (1024, "KiB")
    assert axis_unit(5 * 1024**2) == (1024**2, "MiB")
    assert axis_unit(23_111_038_976) == (1024**3, "GiB")


def test_cpu_and_gpu_memory_charts_have_their_own_unit(tmp_path: Path) -> None:
    path = shared_trace(TRACE)
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    peaks: dict[int, int] = {}
    for e in events:
        if e.get("name") == "[memory]":
            dt = e["args"]["Device Type"]
            peaks[dt] = max(peaks.get(dt, 0), int(e["args"]["Total Allocated"]))
    assert peaks == {0: 160, 1: 23_111_038_976}  # CPU (Device Type 0) and CUDA (1)

    out = tmp_path / "r.html"
    rc, _, err = cli("report", str(path), "-o", str(out))
    assert rc in (0, 1), err
    html = out.read_text()
    charts = {
        m.group(1): m.group(0)
        for m in re.finditer(r'<svg[^>]*aria-label="Memory over step 0 — rank 0, ([^"]+)".*?</svg>', html, re.S)
    }
    assert set(charts) == {"GPU 0", "CPU"}
    for device, unit, peak in (("GPU 0", "GiB", peaks[1] / 1024**3), ("CPU", "B", peaks[0])):
        svg = charts[device]
        assert re.findall(r'text-anchor="middle">(B|KiB|MiB|GiB)</text>', svg) == [unit]
        ticks = re.findall(r'class="ax" text-anchor="end">([^<]*)<', svg)
        assert ticks and all(re.fullmatch(r"\d+(\.\d+)?", t) for t in ticks), ticks  # no 1.5e-07
        assert float(ticks[0]) == 0 and float(ticks[-1]) >= peak  # the scale holds the peak
        assert float(ticks[-1]) < 2 * peak + 50  # and is not orders of magnitude above it
