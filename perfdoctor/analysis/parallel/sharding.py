"""Sharded data parallelism (FSDP, ``fully_shard``, DeepSpeed ZeRO) from the host annotations it records.

Which sharding the trace shows (:func:`flavour`) and, per FSDP unit, the all-gathers and reduce-scatters each step
issues for it (:func:`sharded_comm`): when each was issued on the host, whether it was prefetched, and how much of
its time nothing else hid (exposed). Names are the record_function labels of torch 2.13:

- ``fully_shard`` (FSDP2, ``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``): ``FSDP::all_gather (fqn)``,
  ``FSDP::post_forward (fqn)``, ``FSDP::post_backward_reduce (fqn)``, and ``FSDP::forward_prefetch for fqn`` /
  ``FSDP::backward_prefetch for fqn`` around an all-gather issued ahead of its unit (the root module's labels have
  no ``(fqn)``);
- ``FullyShardedDataParallel`` (FSDP1, ``torch/distributed/fsdp/_runtime_utils.py``): ``FullyShardedDataParallel.
  _pre_forward`` / ``._pre_backward_hook`` around an all-gather issued for the unit itself,
  ``._pre_forward_prefetch`` / ``._pre_backward_prefetch`` / ``._post_backward_prefetch`` around one issued ahead,
  ``._post_backward_hook`` around the reduce-scatter. FSDP1 labels carry no module name: a unit is named by its
  place in the forward pass (``unit #k``; backward
  runs the units in reverse);
- DeepSpeed ZeRO records no per-module label that torch.profiler keeps (its ranges are NVTX): it is recognised from
  its Python frames and classes (``deepspeed/runtime/zero``, ``DeepSpeedZeroOptimizer``), with no units.

Exposed time: on a device, the collective's kernels (launched from inside its host call) with no compute kernel
of that device running (as :mod:`perfdoctor.analysis.timing.breakdown` counts exposed communication); on a CPU-only
trace, the training thread's time inside the collective (a gloo collective waited for on that thread, with nothing
else running there meanwhile): ``fully_shard``'s label (its ``work.wait()`` is no op of its own, so the wait lies
inside the label but outside the ``c10d::_allgather_base_`` call), FullyShardedDataParallel's c10d call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from perfdoctor.trace import intervals as iv
from perfdoctor.trace.tables import TraceTables

FSDP2 = r"^FSDP::"
FSDP1 = r"^FullyShardedDataParallel\."
ZERO = r"deepspeed[/.]runtime[/.]zero|DeepSpeedZero|DeepSpeedZeRo|^zero[_:]|ZeROOrderedDict"
_ALL_GATHER_CALL = r"^c10d::(_allgather_base_|allgather_\w*|allgather_into_tensor\w*)$"
_REDUCE_SCATTER_CALL = r"^c10d::(_reduce_scatter_base_|reduce_scatter\w*)$"
_FSDP2_AG = re.compile(r"^FSDP::all_gather(?: \((?P<fqn>.*)\))?(?: \[pg=\d+\])?$")
_FSDP2_RS = re.compile(r"^FSDP::post_backward_reduce(?: \((?P<fqn>.*)\))?(?: \[pg=\d+\])?$")
_FSDP2_PREFETCH = r"^FSDP::(forward|backward)_prefetch for "
_FSDP2_BACKWARD = r"^FSDP::(pre_backward|backward_prefetch for )"
_FSDP1_PREFETCH = r"^FullyShardedDataParallel\._(pre_forward|pre_backward|post_backward)_prefetch$"
_FSDP1_BACKWARD = r"^FullyShardedDataParallel\._(pre_backward_hook|pre_backward_prefetch|post_backward_\w+)$"
_FSDP1_RS = r"^FullyShardedDataParallel\._post_backward_hook$"


def flavour(tables: TraceTables) -> str | None:
    """``"fsdp2"`` (``fully_shard``), ``"fsdp1"`` (``FullyShardedDataParallel``), ``"zero"`` (DeepSpeed) or None,
    from the names of the trace's host events (FSDP2 first: a model may mix, FSDP2's labels name the units)."""
    for name, pattern in (("fsdp2", FSDP2), ("fsdp1", FSDP1), ("zero", ZERO)):
        if tables.names_matching(pattern).any():
            return name
    return None


@dataclass(frozen=True)
class Collective:
    """One all-gather or reduce-scatter of an FSDP unit in an analysed step (times µs, the trace's clock).

    ``issue_us`` / ``call_end_us``: the host call (the FSDP2 label; the FSDP1 c10d op); ``exposed_us``: see the
    module docstring; ``busy_us``: its time in all (device kernels' union, or the host call); ``prefetched``:
    issued ahead of its unit (inside a prefetch label); ``kernels``: rows of ``tables.kernels`` it launched."""

    kind: str  # "all_gather" | "reduce_scatter"
    unit: str
    phase: str  # "forward" | "backward"
    step: int  # index of the analysed step window
    issue_us: float
    call_end_us: float
    busy_us: float
    exposed_us: float
    prefetched: bool
    kernels: tuple[int, ...]


@dataclass(frozen=True)
class ShardedComm:
    """The FSDP collectives of the analysed steps, in issue order (:func:`sharded_comm`)."""

    flavour: str
    collectives: list[Collective]
    n_steps: int
    on_device: bool

    def gathers(self) -> list[Collective]:
        return [c for c in self.collectives if c.kind == "all_gather"]

    def per_unit(self) -> dict[str, dict[str, float | int | str]]:
        """Per unit (in first-issue order): mean µs per step of all-gather and reduce-scatter time, in all and
        exposed, and the all-gathers per step not prefetched (the first of each pass has nothing to hide behind and
        is not counted)."""
        out: dict[str, dict[str, float | int | str]] = {}
        n = max(self.n_steps, 1)
        first = self._first_of_pass()
        for i, c in enumerate(self.collectives):
            row = out.setdefault(
                c.unit,
                {"all_gather_us": 0.0, "all_gather_exposed_us": 0.0, "reduce_scatter_us": 0.0,
                 "reduce_scatter_exposed_us": 0.0, "not_prefetched": 0.0},
            )  # fmt: skip
            row[f"{c.kind}_us"] = float(row[f"{c.kind}_us"]) + c.busy_us / n
            row[f"{c.kind}_exposed_us"] = float(row[f"{c.kind}_exposed_us"]) + c.exposed_us / n
            if c.kind == "all_gather" and not c.prefetched and i not in first:
                row["not_prefetched"] = float(row["not_prefetched"]) + 1 / n
        return out

    def _first_of_pass(self) -> set[int]:
        seen: set[tuple[int, str]] = set()
        out: set[int] = set()
        for i, c in enumerate(self.collectives):
            if c.kind == "all_gather" and (c.step, c.phase) not in seen:
                seen.add((c.step, c.phase))
                out.add(i)
        return out

    def late_gathers(self) -> list[tuple[Collective, Collective]]:
        """(previous all-gather of the pass, this one) for each all-gather not prefetched that has a previous one in
        its step and pass: the ones prefetching one unit ahead would issue earlier."""
        prev: dict[tuple[int, str], Collective] = {}
        out = []
        for c in self.gathers():
            p = prev.get((c.step, c.phase))
            if p is not None and not c.prefetched:
                out.append((p, c))
            prev[(c.step, c.phase)] = c
        return out


def _labels(tables: TraceTables, pattern: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ts_us, end_us, name_id) of annotations matching ``pattern``, sorted by start."""
    ann = tables.annotations
    if len(ann) == 0:
        return np.empty(0), np.empty(0), np.empty(0, dtype=np.int64)
    m = tables.names_matching(pattern)[ann["name_id"]]
    order = np.argsort(ann["ts_us"][m], kind="stable")
    return ann["ts_us"][m][order], ann["end_us"][m][order], ann["name_id"][m][order]


def _inside(t: float, spans: tuple[np.ndarray, np.ndarray, np.ndarray]) -> bool:
    return bool(((spans[0] <= t) & (spans[1] >= t)).any())


def sharded_comm(tables: TraceTables, win_start_us: np.ndarray, win_end_us: np.ndarray) -> ShardedComm | None:
    """The FSDP units' collectives in the analysed step windows (``win_start_us`` / ``win_end_us``, µs), or None when
    the trace shows no FSDP (ZeRO included: it names no units)."""
    kind = flavour(tables)
    if kind not in ("fsdp1", "fsdp2"):
        return None
    from perfdoctor.analysis.timing import host

    names = tables.names
    calls = {
        "all_gather": host.ranges_named(tables, _ALL_GATHER_CALL, ("cpu_ops",)),
        "reduce_scatter": host.ranges_named(tables, _REDUCE_SCATTER_CALL, ("cpu_ops",)),
    }
    device = _DeviceComm(tables)
    found: list[tuple[str, str, float, float, str, bool]] = []  # kind, unit, start, end, phase, prefetched
    if kind == "fsdp2":
        prefetch, backward = _labels(tables, _FSDP2_PREFETCH), _labels(tables, _FSDP2_BACKWARD)
        for pattern, what, rx in (("^FSDP::all_gather", "all_gather", _FSDP2_AG), (
                "^FSDP::post_backward_reduce", "reduce_scatter", _FSDP2_RS)):  # fmt: skip
            s, e, ids = _labels(tables, pattern)
            for ts, end, nid in zip(s.tolist(), e.tolist(), ids.tolist()):
                m = rx.match(names[int(nid)])
                if m is None:
                    continue
                phase = "backward" if what == "reduce_scatter" or _inside(ts, backward) else "forward"
                pre = what == "all_gather" and _inside(ts, prefetch)
                found.append((what, m.group("fqn") or "(root)", ts, end, phase, pre))
    else:
        prefetch, backward = _labels(tables, _FSDP1_PREFETCH), _labels(tables, _FSDP1_BACKWARD)
        for what in ("all_gather", "reduce_scatter"):
            s, e = calls[what]
            for ts, end in zip(s.tolist(), e.tolist()):
                phase = "backward" if what == "reduce_scatter" or _inside(ts, backward) else "forward"
                found.append((what, "", ts, end, phase, what == "all_gather" and _inside(ts, prefetch)))
    step_of = _step_index(win_start_us, win_end_us)
    found.sort(key=lambda f: f[2])
    order: dict[tuple[int, str, str], int] = {}
    out = []
    n_fwd: dict[int, int] = {}
    for what, _, ts, _, phase, _ in found:
        if what == "all_gather" and phase == "forward":
            n_fwd[step_of(ts)] = n_fwd.get(step_of(ts), 0) + 1
    for what, unit, ts, end, phase, pre in found:
        st = step_of(ts)
        if st < 0:
            continue
        if kind == "fsdp1":  # no module names: the place in the forward pass (backward runs the units in reverse)
            k = order[(st, what, phase)] = order.get((st, what, phase), -1) + 1
            n = n_fwd.get(st, 0)
            unit = f"unit #{k}" if phase == "forward" else f"unit #{n - 1 - k}" if k < n else f"backward #{k}"
        # fully_shard on a CPU waits for the collective inside its label but outside the c10d call
        cs, ce = (ts, end) if kind == "fsdp2" else _calls_within(calls[what], ts, end)
        rows = device.launched_between(ts, end)
        busy, exposed = device.times(rows) if rows.size else (ce - cs, ce - cs)
        out.append(Collective(what, unit, phase, st, cs, ce, busy, exposed, pre, tuple(rows.tolist())))
    return ShardedComm(kind, out, int(win_start_us.size), device.any)


def _step_index(ws: np.ndarray, we: np.ndarray):  # type: ignore[no-untyped-def]
    def of(t: float) -> int:
        hit = np.flatnonzero((ws <= t) & (we > t))
        return int(hit[0]) if hit.size else -1

    return of


def _calls_within(calls: tuple[np.ndarray, np.ndarray], ts: float, end: float) -> tuple[float, float]:
    """The host span of the collective calls inside a label (the label itself when it holds none)."""
    m = (calls[0] >= ts) & (calls[1] <= end)
    if not m.any():
        return ts, end
    return float(calls[0][m].min()), float(calls[1][m].max())


class _DeviceComm:
    """Communication kernels by the host time of their launch, and the compute kernels that may hide them."""

    def __init__(self, tables: TraceTables) -> None:
        from perfdoctor.analysis.timing.classify import classify_kernel
        from perfdoctor.trace.join import launch_rows

        kern = tables.kernels
        self.ts = kern["ts_us"] if len(kern) else np.empty(0)
        self.end = kern["end_us"] if len(kern) else np.empty(0)
        self.any = bool(len(kern))
        cats = {nid: classify_kernel(tables.names[nid]).category for nid in set(kern["name_id"].tolist())} if len(
            kern) else {}  # fmt: skip
        cat = np.array([cats[n] for n in kern["name_id"].tolist()], dtype=object) if len(kern) else np.empty(0)
        self.comm = cat == "communication"
        rows = launch_rows(tables, "kernels") if len(kern) else np.empty(0, dtype=np.int64)
        rt = tables.runtime
        self.launch = np.where(rows >= 0, rt["ts_us"][np.maximum(rows, 0)], np.nan) if rows.size else np.empty(0)
        compute = ~self.comm
        self.compute = iv.union(self.ts[compute], self.end[compute]) if self.any else iv.EMPTY

    def launched_between(self, ts: float, end: float) -> np.ndarray:
        if not self.any:
            return np.empty(0, dtype=np.int64)
        return np.flatnonzero(self.comm & (self.launch >= ts) & (self.launch <= end))

    def times(self, rows: np.ndarray) -> tuple[float, float]:
        """(union µs, µs of it with no compute kernel running) of kernel ``rows``."""
        u = iv.union(self.ts[rows], self.end[rows])
        return iv.total(u), iv.total(iv.subtract(u, self.compute))
