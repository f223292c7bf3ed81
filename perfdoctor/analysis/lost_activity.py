"""Signs that a trace's export lost recorded activity (Kineto's activity buffer overflowed, or the export was cut).

Kineto collects device activity (and its own ``overhead`` records, such as CUPTI's "Activity Buffer Request") in
buffers it flushes when the profiler stops; a run that profiles far more than fits, or an export that fails,
leaves a file whose events cover a sliver of what was recorded. Read as it stands, the host's blocking calls look
like host time with nothing to wait for. The signs (each with its numbers):

- **span**: the profiler's own span (the ``Trace`` event "PyTorch Profiler (0)") is at least
  :data:`MIN_SPAN_RATIO` times, and :data:`MIN_LOST_SPAN_US` longer than, the span its events cover;
- **no device activity**: CUDA/HIP runtime calls were recorded with CUPTI on (its ``overhead`` records are in
  the file, or ac2g flows point at the device) but no kernel, memcpy or memset;
- **device stops**: at least :data:`MIN_LOST_LAUNCHES` launch calls after the last device activity have no
  activity of their own, while the host goes on.

A sign is reported with the host time spent in blocking calls (synchronize, blocking copies) that waited for
device work the trace does not hold: host-blocked time, never Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from perfdoctor.analysis.timing import host
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.device_side import LAUNCH_CALL
from perfdoctor.trace.join import has_activity
from perfdoctor.trace.tables import TraceTables

BUFFER_REQUEST = "Activity Buffer Request"
MIN_SPAN_RATIO = 10.0  # the profiler's span at least this many times the events' span...
MIN_LOST_SPAN_US = 1e6  # ...and 1 s longer: seconds of recording without an event
MIN_LOST_LAUNCHES = 10  # launch calls after the last device activity with none of their own
_DEVICE = ("kernels", "memcpy", "memset")


@dataclass(frozen=True)
class LostActivity:
    """What an export lost, in µs and counts; ``signs``: one line of text per sign found (empty: none)."""

    signs: list[str]
    span_us: float | None  # the profiler's own span (None without its Trace event)
    events_us: float  # first to last recorded op, annotation, runtime call or device activity
    buffer_requests: int
    blocked_us: float  # host time in blocking calls while no recorded device activity ran
    blocked_calls: str  # their names, commonest first

    def text(self) -> str:
        """One line for PD901: the signs and the blocked host time."""
        out = "; ".join(self.signs)
        if self.blocked_us > 0:
            out += (
                f"; the host sat {self.blocked_us / 1000:,.1f} ms in blocking calls ({self.blocked_calls}) waiting "
                "for device work the trace does not hold (host-blocked time, not Python)"
            )
        return out


def _events_span(tables: TraceTables) -> tuple[float, float]:
    lo, hi = np.inf, -np.inf
    for name in ("cpu_ops", "annotations", "runtime", "python_functions", *_DEVICE):
        tab = tables.tables[name]
        if len(tab):
            lo, hi = min(lo, float(tab["ts_us"].min())), max(hi, float(tab["end_us"].max()))
    return lo, hi


def _device_busy(tables: TraceTables) -> iv.Intervals:
    parts = [iv.union(tables.tables[t]["ts_us"], tables.tables[t]["end_us"]) for t in _DEVICE if len(tables.tables[t])]
    return iv.union_of(*parts) if parts else iv.EMPTY


def _blocked(tables: TraceTables) -> tuple[float, str]:
    """Host µs in synchronize calls and blocking copies while no recorded device activity ran, and their names."""
    rt = tables.runtime
    if len(rt) == 0:
        return 0.0, ""
    m = tables.names_matching(re.compile(host.SYNC_RUNTIME))[rt["name_id"]]
    waits = iv.union_of(iv.union(rt["ts_us"][m], rt["end_us"][m]), host.blocking_memcpy_calls(tables))
    unrecorded = iv.subtract(waits, _device_busy(tables))
    names = tables.name_array()[rt["name_id"][m]]
    counts: dict[str, float] = {}
    for name, dur in zip(names.tolist(), rt["dur_us"][m].tolist()):
        counts[name] = counts.get(name, 0.0) + dur
    return iv.total(unrecorded), ", ".join(sorted(counts, key=lambda n: -counts[n])[:3])


def _device_stop_sign(tables: TraceTables) -> str:
    """The 'device stops' sign as text ("" when absent)."""
    rt = tables.runtime
    if len(rt) == 0 or not tables.has_device_activity:
        return ""
    dev_end = max(float(tables.tables[t]["end_us"].max()) for t in _DEVICE if len(tables.tables[t]))
    launch = tables.names_matching(LAUNCH_CALL)[rt["name_id"]] & (rt["correlation"] >= 0) & (rt["ts_us"] > dev_end)
    lost = launch & ~has_activity(tables)
    if int(lost.sum()) < MIN_LOST_LAUNCHES:
        return ""
    host_end = float(rt["end_us"].max())
    return (
        f"device activity stops {(host_end - dev_end) / 1000:,.1f} ms before the host's last runtime call, and "
        f"the {int(lost.sum()):,} launch calls after it have no kernel, memcpy or memset"
    )


def lost_activity(tables: TraceTables) -> LostActivity | None:
    """The signs that the export lost recorded activity (module docstring), or None when there is none.

    Sources: Kineto writes the profiler's span as a ``Trace`` event and CUPTI's buffer requests as ``overhead``
    events (libkineto CuptiActivityProfiler); the thresholds are this module's constants.
    """
    prof = tables.tables["profiler"]
    names = tables.name_array()
    spans = prof["dur_us"][prof["is_span"]] if len(prof) else np.empty(0)
    span_us = float(spans.max()) if spans.size else None
    overhead = names[prof["name_id"][~prof["is_span"]]] if len(prof) else np.empty(0, dtype=object)
    requests = int(np.count_nonzero(overhead == BUFFER_REQUEST))
    lo, hi = _events_span(tables)
    events_us = max(hi - lo, 0.0) if np.isfinite(lo) else 0.0
    signs = []
    if span_us is not None and span_us >= MIN_SPAN_RATIO * events_us and span_us - events_us >= MIN_LOST_SPAN_US:
        signs.append(
            f"the profiler's span is {span_us / 1000:,.1f} ms but its events cover {events_us / 1000:,.1f} ms "
            f"({100 * events_us / span_us:.2g}% of it)"
        )
    cupti_on = overhead.size > 0 or len(tables.tables["flows"]) > 0
    if not tables.has_device_activity and len(tables.runtime) and cupti_on:
        signs.append(
            f"no kernel, memcpy or memset although {len(tables.runtime):,} CUDA/HIP runtime call(s) were recorded "
            f"with device tracing on ({overhead.size} Kineto overhead event(s), {requests} '{BUFFER_REQUEST}')"
        )
    if stop := _device_stop_sign(tables):
        signs.append(stop)
    if not signs:
        return None
    blocked_us, blocked_calls = _blocked(tables)
    return LostActivity(signs, span_us, events_us, requests, blocked_us, blocked_calls)
