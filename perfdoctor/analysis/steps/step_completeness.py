"""Which steps of a trace are completely recorded, and dropping the others.

Two ways a step can be incomplete:

- **the profiler stopped inside it**: the last ``ProfilerStep#N`` of a trace can
  be a stub (torch.profiler closes the window right after ``prof.step()``): a
  host duration under :data:`STUB_FRACTION` of the other steps' median and no
  GPU work, while the other steps have some.
- **the file was cut** (a killed exporter): launches whose kernels, memcpys or
  memsets never made it into the file, host events that stop before the
  step's end, or a step at or after the last device activity in the file
  (device activities are written in time order, so later ones were lost).
  Such a step's device time would read as idle, a wrong number, so it is
  dropped with a warning.

Every drop is reported in ``Steps.warnings``; a trace left with no complete
step raises :class:`~perfdoctor.errors.TraceFormatError`.
"""

from __future__ import annotations

import numpy as np

from perfdoctor.errors import TraceFormatError
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.device_side import LAUNCH_CALL
from perfdoctor.trace.join import has_activity
from perfdoctor.trace.tables import TraceTables

STUB_FRACTION = 0.10
# above this share of launches without a device activity, a complete trace warns
MISSING_LAUNCH_WARN = 0.05


def _launches(tables: TraceTables) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(host ts_us, found-on-device bool, name id) of every runtime call that launches device work."""
    rt = tables.runtime
    if len(rt) == 0:
        return np.empty(0), np.empty(0, dtype=bool), np.empty(0, dtype=np.int64)
    is_launch = tables.names_matching(LAUNCH_CALL)[rt["name_id"]] & (rt["correlation"] >= 0)
    return rt["ts_us"][is_launch], has_activity(tables)[is_launch], rt["name_id"][is_launch]


def _counted_names(tables: TraceTables, name_ids: np.ndarray) -> str:
    """The commonest names among ``name_ids`` with counts ("22 cudaMemsetAsync")."""
    ids, counts = np.unique(name_ids, return_counts=True)
    top = sorted(zip(counts.tolist(), ids.tolist()), reverse=True)[:3]
    return ", ".join(f"{c} {tables.names[i]}" for c, i in top)


def _host_horizon(tables: TraceTables) -> float:
    ends = [float(tables.tables[t]["end_us"].max()) for t in ("cpu_ops", "runtime") if len(tables.tables[t])]
    return max(ends) if ends else np.inf


def _device_horizon(tables: TraceTables) -> float:
    ends = [float(tables.tables[t]["end_us"].max()) for t in ("kernels", "memcpy", "memset") if len(tables.tables[t])]
    return max(ends) if ends else np.inf


def incomplete_mask(
    tables: TraceTables, host_start: np.ndarray, host_end: np.ndarray, device_end: np.ndarray, window_end: np.ndarray
) -> tuple[np.ndarray, list[str]]:
    """Boolean mask of incomplete steps and one warning line per reason (see module docstring)."""
    n = host_start.size
    drop = np.zeros(n, dtype=bool)
    notes: list[str] = []
    launch_ts, found, launch_names = _launches(tables)
    k = iv.containing(launch_ts, (host_start, host_end))
    inside = k >= 0
    missing = np.bincount(k[inside & ~found], minlength=n)[:n] if n else np.zeros(0, int)
    # a cut file that lost its whole device side never gets here: trace.device_side refuses it at load time
    if tables.truncated:
        # device activities are written in time order: the step holding the last one that made it into
        # the file, and every later step, may have lost device work after it
        t_dev = _device_horizon(tables)
        first_cut = int(np.searchsorted(window_end, t_dev, side="left")) if np.isfinite(t_dev) else n
        after_device_horizon = np.arange(n) >= first_cut
        cut = (missing > 0) | (host_end > _host_horizon(tables)) | after_device_horizon
        if cut.any():
            notes.append(
                f"{tables.path}: the file is truncated: {int(cut.sum())} step(s) lost part of their events "
                "and are left out (their device time would read as idle)"
            )
        drop |= cut
    elif launch_ts.size and (~found).mean() > MISSING_LAUNCH_WARN:
        missing_names = _counted_names(tables, launch_names[~found])
        notes.append(
            f"{tables.path}: {100 * (~found).mean():.0f}% of device launches ({missing_names}) "
            "have no kernel/memcpy/memset in the trace: device busy time is understated by their work"
        )
    if n >= 2 and not drop[-1]:
        others = np.median(host_end[:-1] - host_start[:-1])
        has_gpu = ~np.isnan(device_end)
        stub = (host_end[-1] - host_start[-1]) < STUB_FRACTION * others
        if stub and (not has_gpu.any() or (has_gpu[:-1].any() and not has_gpu[-1])):
            drop[-1] = True
            notes.append(
                f"{tables.path}: the last step holds {host_end[-1] - host_start[-1]:.0f} µs of host time "
                "and no device work (the profiler stopped inside it); it is left out"
            )
    if drop.all():
        raise TraceFormatError(
            f"{tables.path}: no completely recorded step (the file is truncated before the first step's device work)"
            if tables.truncated
            else f"{tables.path}: no completely recorded step"
        )
    return drop, notes
