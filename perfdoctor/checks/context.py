"""What a check sees: one rank (or the whole job), its rule's thresholds, and shared derived arrays.

A check module exposes ``CODE``, ``METRICS`` (metric name -> description with
unit; user rules may compare against them), its ``Thresholds`` dataclass (read
typed with ``ctx.thresholds(Thresholds)``) and ``check(ctx) -> Outcome``; it
reads another rule's outcome only through ``ctx.built_on(code)``, for a code its
TOML's ``builds_on`` names (:mod:`perfdoctor.checks.contract`).
``ctx`` is a :class:`RankContext` for ``scope = "rank"`` rules and a
:class:`JobContext` for ``scope = "job"`` rules. Derived arrays that several
checks need (kernels of the primary device with their classes, device idle
gaps) are computed once per rank and cached.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from perfdoctor.analysis.rank import Analysis, RankAnalysis, RankResult, UnprofiledStep
from perfdoctor.analysis.steps.steps import Steps, gpu_launch_times
from perfdoctor.analysis.steps.warmup import job_cold_steps
from perfdoctor.analysis.timing.breakdown import DeviceBreakdown, StepBreakdown
from perfdoctor.analysis.timing.kernel_ops import kernel_labels
from perfdoctor.checks.catalogue import RuleSpec
from perfdoctor.checks.common import step_list_text
from perfdoctor.checks.contract import thresholds_of
from perfdoctor.crossrank.bounds import peers_text
from perfdoctor.errors import PerfDoctorError
from perfdoctor.findings import Evidence, Hit
from perfdoctor.text import replayed_method, replayed_what
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.join import launched_values
from perfdoctor.trace.tables import TraceTables

if TYPE_CHECKING:
    from perfdoctor.replay.attribution import Attribution
    from perfdoctor.replay.decompose import SavingParts
    from perfdoctor.replay.machine import CoreBudget
    from perfdoctor.replay.rank import RankReplay
    from perfdoctor.replay.transforms import WhatIf

T = TypeVar("T")  # a check module's ``Thresholds``


@dataclass
class Outcome:
    """A check's answer: metrics always; a hit when the rule fires; a reason when it cannot run."""

    metrics: dict[str, Any] = field(default_factory=dict)
    hit: Hit | None = None
    skip: str | None = None


def skipped(reason: str, **metrics: Any) -> Outcome:
    return Outcome(metrics=metrics, skip=reason)


def passed(**metrics: Any) -> Outcome:
    return Outcome(metrics=metrics)


@dataclass
class KernelView:
    """Kernels of one device (µs arrays, one entry per kernel, time-sorted).

    ``step`` is the index of the step window the kernel starts in (-1 outside
    all windows); ``launch_dur_us`` the duration of its launching runtime call
    (NaN when the trace has none); ``launch_gap_us`` the host time from its
    launch to the next kernel launch of the same device (NaN for the last one,
    or without launch times): a kernel shorter than that gap finishes before
    the host queues the next one.
    """

    name_id: np.ndarray
    ts_us: np.ndarray
    dur_us: np.ndarray
    launch_us: np.ndarray
    launch_dur_us: np.ndarray
    step: np.ndarray
    category: np.ndarray
    triton: np.ndarray
    launch_gap_us: np.ndarray

    def __len__(self) -> int:
        return int(self.ts_us.size)


class RankContext:
    """One rank (:class:`perfdoctor.analysis.rank.RankResult`) of ``analysis``, plus the rule being checked
    (``spec``) and a per-rank cache. Where the rank was analysed, ``rank.trace`` holds its tables, steps and replay
    (:attr:`tables`, :attr:`steps`, :meth:`replay`); read back from its summary, only its step rows."""

    def __init__(self, analysis: Analysis[RankResult], rank: RankResult, spec: RuleSpec | None = None) -> None:
        self.analysis = analysis
        self.rank = rank
        self.spec = spec
        # memoisation of this rank's derived arrays (kernels, busy intervals, replay), never a channel between rules
        self.cache: dict[str, Any] = {}
        # the outcomes of the rules already run on this rank, by code, in run order (the engine fills it): a check
        # reads another rule's only through :meth:`built_on` and :meth:`skip_reasons`, its own rank pass through
        # :meth:`rank_pass`
        self.earlier: dict[str, Outcome] = {}

    # -- rule ------------------------------------------------------------------
    def thresholds(self, cls: type[T]) -> T:
        """The rule's ``[thresholds]`` (its TOML's, user overrides applied) as the check module's ``Thresholds``
        dataclass ``cls``: typed fields, checked against the TOML (:func:`perfdoctor.checks.contract.thresholds_of`).

        Raises:
            PerfDoctorError: a key ``cls`` does not declare, one it lacks or one of the wrong type (names the file).
        """
        return thresholds_of(self.spec, cls)

    def advice(self, situation: str) -> dict[str, str]:
        """The rule's advice for ``situation`` as ``Hit.advice`` (its TOML's ``fix_<situation>`` and examples:
        :meth:`perfdoctor.checks.catalogue.RuleSpec.advice`); {} without a rule (the rule's own text stays)."""
        return self.spec.advice(situation) if self.spec is not None else {}

    def built_on(self, code: str) -> Outcome | None:
        """The outcome on this rank of rule ``code``, which the rule being checked builds on (its TOML's
        ``builds_on`` names it; the contract makes it run first), or None where it did not run.

        Raises:
            PerfDoctorError: the rule does not declare ``code`` in ``builds_on``.
        """
        if self.spec is None or code not in self.spec.builds_on:
            who = self.spec.code if self.spec is not None else "a check without its rule"
            raise PerfDoctorError(f'{who} reads {code}\'s outcome without builds_on = ["{code}"] in its TOML')
        return self.earlier.get(code)

    def skip_reasons(self) -> list[tuple[str, str]]:
        """``(code, reason)`` of every rule skipped on this rank so far, in run order, for a rule that runs after
        all others (``runs_after_others = true`` in its TOML; PD901 reads why the others could not run).

        Raises:
            PerfDoctorError: the rule does not run after the others (it would see only some of them).
        """
        if self.spec is None or not self.spec.runs_after_others:
            raise PerfDoctorError("only a rule with runs_after_others = true reads the other rules' skip reasons")
        return [(code, o.skip) for code, o in self.earlier.items() if o.skip]

    def rank_pass(self) -> Outcome | None:
        """The rule's own outcome where the rank was analysed, when the engine checks it again from the rank's
        summary with the job's cross-rank results (a module with ``CROSS_RANK = True``); None on that first pass."""
        return self.earlier.get(self.spec.code) if self.spec is not None else None

    # -- the trace, where the rank was analysed --------------------------------------
    @property
    def has_trace(self) -> bool:
        """The rank's tables are here (its worker); False for a rank read back from its summary."""
        return self.rank.trace is not None

    @property
    def traced(self) -> RankAnalysis:
        """The rank's whole analysis (tables, steps, replay, roofline, MFU).

        Raises:
            AssertionError: the rank was read back from its summary (check :attr:`has_trace` first).
        """
        trace = self.rank.trace
        assert trace is not None, "a rank read back from its summary has no tables"
        return trace

    @property
    def tables(self) -> TraceTables:
        """The rank's trace tables (:attr:`traced`)."""
        return self.traced.tables

    @property
    def steps(self) -> Steps:
        """The rank's step windows as found in its trace (:attr:`traced`)."""
        return self.traced.steps

    # -- steps -------------------------------------------------------------------

    @property
    def device(self) -> DeviceBreakdown:
        if "primary" not in self.cache:  # RankAnalysis.primary sums every step of every device
            self.cache["primary"] = self.rank.primary
        primary: DeviceBreakdown = self.cache["primary"]
        return primary

    @property
    def is_gpu(self) -> bool:
        return self.device.kind == "gpu"

    @property
    def step_rows(self) -> list[StepBreakdown]:
        return self.device.steps

    @property
    def step_numbers(self) -> list[int]:
        return [s.step for s in self.step_rows]

    @property
    def n_steps(self) -> int:
        return len(self.step_rows)

    @property
    def step_us(self) -> float:
        """Mean step time (µs) over the analysed steps (computed once per context: the engine reads it for every
        rule of every rank, 80,000 times at 4,096 ranks)."""
        if "step_us" not in self.cache:
            rows = self.step_rows
            self.cache["step_us"] = float(np.mean([s.dur_us for s in rows])) if rows else 0.0
        step_us: float = self.cache["step_us"]
        return step_us

    def per_step(self, getter: Callable[[StepBreakdown], float]) -> np.ndarray:
        """``getter(StepBreakdown) -> float`` for every step, as an array."""
        return np.array([float(getter(s)) for s in self.step_rows], dtype=np.float64)

    def windows(self) -> tuple[np.ndarray, np.ndarray]:
        """The analysed step windows' starts and ends (µs, trace clock)."""
        return self.steps.start_us, self.steps.end_us

    def step_of(self, ts_us: np.ndarray) -> np.ndarray:
        """Index of the step window holding each time (-1 outside all windows;
        :meth:`perfdoctor.analysis.steps.steps.Steps.step_of`)."""
        return self.steps.step_of(ts_us)

    # -- derived, cached ---------------------------------------------------------
    def kernels(self) -> KernelView:
        """Kernels of the primary device with their classification (cached)."""
        if "kernels" in self.cache:
            cached: KernelView = self.cache["kernels"]
            return cached
        tab = self.tables.kernels
        dev = self.device.device
        m = tab["device"] == dev if len(tab) else np.zeros(0, dtype=bool)
        launch = gpu_launch_times(self.tables, "kernels")[m] if len(tab) else np.empty(0)
        ids = tab["name_id"][m] if len(tab) else np.empty(0, dtype=np.int64)
        labels = kernel_labels(self.tables)
        cat = labels.category[m] if len(tab) else np.empty(0, object)
        tri = labels.triton[m] if len(tab) else np.empty(0, bool)
        ts = tab["ts_us"][m] if len(tab) else np.empty(0)
        launch_dur = launched_values(self.tables, "kernels", "dur_us", m) if len(tab) else np.empty(0)
        view = KernelView(
            name_id=ids,
            ts_us=ts,
            dur_us=tab["dur_us"][m] if len(tab) else np.empty(0),
            launch_us=launch,
            launch_dur_us=launch_dur,
            step=self.steps.activity_step(self.tables, "kernels")[m] if ts.size else np.empty(0, dtype=np.int64),
            category=cat,
            triton=tri,
            launch_gap_us=_next_launch_gaps(np.where(np.isnan(launch_dur), np.nan, launch)),
        )
        self.cache["kernels"] = view
        return view

    def device_busy(self) -> iv.Intervals:
        """Union of kernels, memcpys and memsets of the primary device (cached)."""
        if "busy" in self.cache:
            cached: iv.Intervals = self.cache["busy"]
            return cached
        starts, ends = [], []
        for tname in ("kernels", "memcpy", "memset"):
            tab = self.tables.tables[tname]
            if len(tab):
                m = tab["device"] == self.device.device
                starts.append(tab["ts_us"][m])
                ends.append(tab["end_us"][m])
        busy = iv.union(np.concatenate(starts), np.concatenate(ends)) if starts else iv.EMPTY
        self.cache["busy"] = busy
        return busy

    def device_gaps(self) -> iv.Intervals:
        """Device idle intervals inside the analysed step windows (cached)."""
        if "gaps" not in self.cache:
            ws, we = self.windows()
            self.cache["gaps"] = iv.complement(self.device_busy(), float(ws[0]), float(we[-1]))
        gaps: iv.Intervals = self.cache["gaps"]
        return gaps

    def attribution(self) -> Attribution:
        """The rank's one attribution: the replay's labelled critical path (cached; built when the analysis lacks
        it)."""
        att = self.traced.attribution
        if att is None:
            att = self.cache.get("attribution")
            if att is None:
                from perfdoctor.replay.attribution import critical_path
                from perfdoctor.replay.rank import replay_rank

                att = self.cache["attribution"] = critical_path(self.tables, replay_rank(self.tables, self.steps))
        return att

    def replay(self) -> RankReplay:
        """The rank's :class:`~perfdoctor.replay.rank.RankReplay` (built when the analysis lacks it)."""
        rr = self.traced.replay
        if rr is None:
            rr = self.cache.get("replay")
            if rr is None:
                from perfdoctor.replay.rank import replay_rank

                rr = self.cache["replay"] = replay_rank(self.tables, self.steps)
        return rr

    def built_replay(self) -> RankReplay | None:
        """The rank's replay if the analysis holds one or a check built it (:meth:`replay`), else None (a rank
        read back from its summary: its replay stayed where it was analysed)."""
        trace = self.rank.trace
        rr = trace.replay if trace is not None else None
        return rr if rr is not None else self.cache.get("replay")

    def saving_parts(self, whatif: WhatIf, after: WhatIf | None = None) -> SavingParts:
        """Where the saving :meth:`replayed_saving` gives ``whatif`` (on top of ``after``) comes from: the
        attributions of the two replays it is the difference of, subtracted
        (:class:`perfdoctor.replay.decompose.SavingParts`, µs per step; scaled as the saving is for a ``perfdoctor
        profile`` run's unprofiled step). The parts add up to the saving."""
        from perfdoctor.replay.decompose import saving_parts

        rr = self.replay()
        first = [] if after is None else [after]
        base = rr.fixed_whatif(first)
        both = rr.fixed_whatif([*first, whatif])
        assert both is not None  # holds ``whatif``: never empty
        parts = saving_parts(
            self.tables,
            rr,
            both.scenario,
            int(self.device.device),
            None if base is None else base.scenario,
            self.attribution() if base is None else None,
        )
        u = rr.unprofiled
        return parts.scaled(u.ratio) if u is not None and u.whatif is None else parts

    def replayed_saving(
        self, whatif: WhatIf, after: WhatIf | None = None, after_text: str = "", record: bool = True
    ) -> tuple[float, np.ndarray, str]:
        """Saving of a what-if (:class:`~perfdoctor.replay.transforms.WhatIf`): ``(mean µs, per-step µs, method)``.

        Per step: the step savings are taken from (:meth:`perfdoctor.replay.rank.RankReplay.fixed_step_times`: the
        recording, or a ``perfdoctor profile`` run's unprofiled step) − that step replayed with the transformation;
        the mean is over the analysed steps (the report's one denominator is their mean: :attr:`base_step_us`). With
        ``after`` (another what-if, described by ``after_text``), the saving is the step replayed with ``after`` −
        the step replayed with both: what the fix adds once the time ``after`` removes is gone, for a fix that would
        otherwise hide another cause's time (CUDA graphs free the host to fetch the next batch while the device
        computes: that time is the DataLoader's). The method names the assumption and its source, the unprofiled
        step's method and the profiler's overhead per event where there is one, and says so when the replay does
        not reproduce the recording (the saving is then an upper bound). ``record`` False: an alternative fix, not
        the rule's (the fix-all replay keeps the rule's what-if).
        """
        rr = self.replay()
        u = rr.unprofiled
        first = [] if after is None else [after]
        per = np.asarray(rr.fixed_step_times(first) - rr.fixed_step_times([*first, whatif]), dtype=np.float64)
        both = rr.fixed_whatif([*first, whatif])
        if self.spec is not None and record:
            rr.whatifs[self.spec.code] = whatif
        method = replayed_method(
            whatif.assumption,
            whatif.source,
            replayed_what(u is not None, after_text if after is not None else None),
            per.size,
            step_list_text(self.step_numbers),
            u.text(rr.base_step_us) if u is not None else profiled_step_text(self.analysis.run_json()),
            None if rr.peers is None or both is None else peers_text(rr.peers, both.scenario),
            rr.fallback,
        )
        saving = float(per.mean()) if per.size else 0.0
        return saving, per, method

    @property
    def unprofiled(self) -> UnprofiledStep | None:
        """A ``perfdoctor profile`` run's unprofiled step the rank's savings are stated for (the report's
        ``replay.unprofiled``: :attr:`perfdoctor.analysis.rank.RankResult.unprofiled`), or None."""
        return self.rank.unprofiled

    @property
    def base_step_us(self) -> float:
        """Mean step (µs) this rank's savings are taken from: the mean of the analysed steps, or for a
        ``perfdoctor profile`` run its unprofiled step (:attr:`unprofiled`, :mod:`perfdoctor.replay.unprofiled`)."""
        u = self.unprofiled
        return u.step_us if u is not None else self.step_us

    def idle_after(self, calls: iv.Intervals) -> np.ndarray:
        """Per step: device idle time (µs) the replay's critical path spends inside ``calls`` on the host.

        That is the time the device waits because of the calls: the host sitting in one while nothing is queued,
        or a blocking call's release latency after the work it waited for. Host work after a call returned is not
        the call's (a sync that returned within µs and was followed by seconds of other host work costs µs).
        """
        from perfdoctor.replay.attribution import HOST_CAUSES

        gaps = self.device_gaps()
        ws, we = self.windows()
        if calls[0].size == 0 or gaps[0].size == 0:
            return np.zeros(ws.size)
        att = self.attribution()
        host = iv.union_of(*(att.intervals(c) for c in HOST_CAUSES))
        return iv.per_window(iv.intersect(iv.intersect(gaps, host), calls), ws, we)


def _next_launch_gaps(launch_us: np.ndarray) -> np.ndarray:
    """Per kernel: µs from its launch to the next later launch (NaN for the last or unknown launches)."""
    out = np.full(launch_us.size, np.nan)
    known = np.flatnonzero(~np.isnan(launch_us))
    if known.size < 2:
        return out
    order = known[np.argsort(launch_us[known], kind="stable")]
    out[order[:-1]] = np.diff(launch_us[order])
    return out


class JobContext:
    """All ranks of one job, for ``scope = "job"`` rules."""

    def __init__(self, analysis: Analysis[RankResult], ranks: list[RankContext], spec: RuleSpec | None = None) -> None:
        self.analysis = analysis
        self.ranks = ranks
        self.spec = spec
        self.cache: dict[str, Any] = {}
        # the rule's ``rank_part`` outcome on each rank, computed where the rank's tables are (a pool or Dask
        # worker: the job's rank contexts are summaries without them); None where a rank has none
        self.rank_parts: list[Outcome | None] = []

    def thresholds(self, cls: type[T]) -> T:
        """The rule's thresholds as its check module's ``Thresholds`` (:meth:`RankContext.thresholds`)."""
        return thresholds_of(self.spec, cls)

    def advice(self, situation: str) -> dict[str, str]:
        """The rule's advice for ``situation`` as ``Hit.advice`` (:meth:`RankContext.advice`)."""
        return self.spec.advice(situation) if self.spec is not None else {}

    @property
    def cold(self) -> tuple[set[int], str]:
        """The steps cross-rank statistics leave out (cold on some rank, PD902) and, when that leaves a rank no
        step, why none can be drawn ("" otherwise): :func:`perfdoctor.analysis.steps.warmup.job_cold_steps`."""
        if "cold" not in self.cache:
            ids = [int(c.rank.rank) if c.rank.rank is not None else i for i, c in enumerate(self.ranks)]
            steps = {r: c.step_numbers for r, c in zip(ids, self.ranks)}
            cold = {r: c.rank.steps.cold_steps() for r, c in zip(ids, self.ranks)}
            self.cache["cold"] = job_cold_steps(steps, cold)
        out: tuple[set[int], str] = self.cache["cold"]
        return out

    def warm_rows(self, c: RankContext) -> list[StepBreakdown]:
        """``c``'s analysed steps without the job's cold ones (:attr:`cold`)."""
        cold = self.cold[0]
        return [s for s in c.step_rows if s.step not in cold]


def profiled_step_text(run: Mapping[str, object] | None) -> str:
    """The clause a replayed saving carries when it is not stated for an unprofiled step: it is for the profiled
    step, which the profiler's per-event host overhead lengthens (:mod:`perfdoctor.replay.unprofiled`). ``run``: the
    run's ``run.json`` (a ``perfdoctor profile`` run whose unprofiled steps found no steady level), or None (a bare
    trace: nothing recorded the step without the profiler)."""
    if run is not None:
        return "for the profiled step (the run's unprofiled steps reach no steady level; the profiler's cost included)"
    return "for the profiled step (a bare trace: the profiler's cost per recorded op included)"


def run_core_budget(ctx: RankContext) -> CoreBudget | None:
    """The rank's :class:`perfdoctor.replay.machine.CoreBudget` (the run's cores and its unprofiled steady steps'
    CPU time, from the run's steady-state start on), or None for a bare trace or a run that records no CPU count.
    The steps come from the rank's worker's ``run_cpu`` (SummaryOptions.run_cpu_by_rank), else the run data."""
    from perfdoctor.replay.machine import core_budget

    analysis = ctx.analysis
    facts = analysis.run_json()
    if facts is None:
        return None
    cpu = analysis.run_cpu
    if cpu is not None:
        steps = {
            k: np.array([np.nan if x is None else x for x in v], dtype=object if k == "profiler_phase" else float)
            for k, v in cpu.items()
            if isinstance(v, list)
        }
        start = cpu.get("steady_start_step")
        return core_budget(facts, steps, start if isinstance(start, int) else 0)
    run = analysis.run
    if run is None:
        return core_budget(facts, None, 0)
    rank = ctx.rank.rank
    series = run.rank_steps.get(int(rank)) if rank is not None and int(rank) in run.rank_steps else run.steps
    ss = run.steady_state
    return core_budget(facts, series, int(ss.steady_start_step) if ss is not None else 0)


def replayed_outcome(
    ctx: RankContext,
    metrics: dict[str, Any],
    evidence: Evidence,
    saving_us: float,
    method: str,
    fields: dict[str, Any],
    advice: dict[str, str] | None = None,
    *,
    min_saving_pct: float,
) -> Outcome:
    """The outcome of a check whose hit has a replayed saving (``saving_us`` µs per step, its ``method``) and
    leaves its threshold (the rule's ``min_saving_pct``, % of the step) to the engine
    (:func:`perfdoctor.checks.after.gate`)."""
    from perfdoctor.checks.common import replayed_estimate

    hit = Hit(
        min_saving_pct=min_saving_pct,
        evidence=evidence,
        estimate=replayed_estimate(saving_us, method, fields),
        fields=fields,
        advice=advice or {},
    )
    return Outcome(metrics=metrics, hit=hit)
