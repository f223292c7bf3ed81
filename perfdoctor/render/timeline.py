"""The annotated timeline: a Chrome-trace JSON file (ui.perfetto.dev, chrome://tracing) of the chosen steps.

Per rank shown (one rank: it; a job: the median rank, the job's outlier ranks and the rank its fix plan speaks for),
one process "rank R": first perfdoctor's rows (the primary device's idle by cause, the replay's critical path, one
row per finding: a slice per chosen step over the events it cites, named by its headline, its saving in ``args``;
the step replayed after the fix plan and its device activities), then the recorded events of its chosen steps
(:mod:`perfdoctor.timeline.tracks`), one row per trace thread. Chrome's Trace Event Format: ``X``
complete events (``ts``, ``dur`` in µs), ``M`` metadata events naming processes and threads.

The file stays under :data:`MAX_BYTES` of JSON: perfdoctor's rows always go in, then the recorded events step by
step (the plan's rank first) while they fit; the top-level ``perfdoctor`` object says what was left out.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeAlias

import numpy as np
import orjson

from perfdoctor.errors import PerfDoctorError
from perfdoctor.model.report import FindingSection, JobSection, Report
from perfdoctor.timeline.tracks import Event, RankTimeline

# a JSON value as the file holds it (events, their args, the top-level metadata)
JsonValue: TypeAlias = "str | int | float | bool | None | Sequence[JsonValue] | Mapping[str, JsonValue]"
TraceEvent: TypeAlias = dict[str, JsonValue]  # one Chrome trace event (``ph`` X or M)
_RowKey: TypeAlias = str | tuple[str, int, int]  # a process or row: "rank", a perfdoctor row, ("trace", pid, tid)

MAX_BYTES = 100_000_000  # the JSON written (before gzip): what a browser tab opens without trouble
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}  # Kineto: tid is the stream
MAX_OUTLIERS = 6  # outlier ranks shown beside the median rank and the plan's
CRITICAL_PATH_NOTE = (
    "critical path: the replay's (perfdoctor.replay.attribution), walked back from the last analysed step's end; "
    "its times are the replayed recording's, which reproduces the recording by construction"
)


def shown_ranks(report: Report, timelines: Sequence[RankTimeline]) -> list[tuple[RankTimeline, str]]:
    """The ranks to show and why: the only rank; or the job's median rank (by its median step,
    ``report.job.step_median_us``), the rank the fix plan speaks for (its first entry's finding's rank) and up to
    :data:`MAX_OUTLIERS` of the job's outlier ranks (``report.job.outliers``), in that order."""
    by_rank = {t.rank: t for t in timelines}
    if len(timelines) <= 1:
        return [(t, "the only rank") for t in timelines]
    job = report.job if isinstance(report.job, JobSection) else None
    why: dict[int, str] = {}
    if job is not None:
        meds = [(m, r) for r, m in zip(job.ranks, job.step_median_us, strict=False) if m is not None]
        if meds:
            meds.sort()
            why[meds[(len(meds) - 1) // 2][1]] = "the median rank (median step)"
    plan_rank = _plan_rank(report)
    if plan_rank is not None:
        why.setdefault(plan_rank, "the rank the fix plan speaks for (its findings' numbers)")
    if job is not None:
        for r, reasons in list(job.outliers.items())[:MAX_OUTLIERS]:
            why.setdefault(int(r), "outlier: " + "; ".join(reasons))
    if not why:
        why[timelines[0].rank] = "the first rank"
    return [(by_rank[r], w) for r, w in why.items() if r in by_rank]


def _plan_rank(report: Report) -> int | None:
    findings = report.findings if isinstance(report.findings, list) else []
    for f in findings:
        if f.plan_position == 1 and f.rank is not None:
            return f.rank
    return None


def _findings(report: Report) -> list[FindingSection]:
    return list(report.findings) if isinstance(report.findings, list) else []


class _Ids:
    """Process and thread ids of the output: each rank's processes get ids of their own (two ranks' ``pid 0``
    are two rows), threads are numbered per process in order of appearance, each named by a metadata event."""

    def __init__(self) -> None:
        self.meta: list[TraceEvent] = []
        self._pids: dict[tuple[int, _RowKey], int] = {}
        self._tids: dict[tuple[int, _RowKey], int] = {}

    def pid(self, rank_pos: int, key: _RowKey, name: str) -> int:
        """The process id of the rank at ``rank_pos`` for ``key``, named ``name`` when first met."""
        k = (rank_pos, key)
        if k not in self._pids:
            pid = self._pids[k] = (rank_pos + 1) * 1000 + len([p for p in self._pids if p[0] == rank_pos])
            self.meta.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0, "args": {"name": name}})
            sort: TraceEvent = {
                "ph": "M",
                "name": "process_sort_index",
                "pid": pid,
                "tid": 0,
                "ts": 0,
                "args": {"sort_index": pid},
            }
            self.meta.append(sort)
        return self._pids[k]

    def tid(self, pid: int, key: _RowKey, name: str) -> int:
        """The thread id of row ``key`` in process ``pid``, named ``name`` when first met."""
        k = (pid, key)
        if k not in self._tids:
            tid = self._tids[k] = 1 + len([t for t in self._tids if t[0] == pid])
            self.meta.append(
                {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0, "args": {"name": name}}
            )
            sort: TraceEvent = {
                "ph": "M",
                "name": "thread_sort_index",
                "pid": pid,
                "tid": tid,
                "ts": 0,
                "args": {"sort_index": tid},
            }
            self.meta.append(sort)
        return self._tids[k]


def _dump(event: JsonValue) -> bytes:
    """One event as JSON; a name orjson refuses (a lone surrogate from a ``\\ud800`` escape in the trace) is
    written with ASCII escapes instead."""
    try:
        return orjson.dumps(event)
    except orjson.JSONEncodeError:
        return json.dumps(event, ensure_ascii=True).encode()


def _x(name: str, cat: str, ts: float, dur: float, pid: int, tid: int, args: dict[str, JsonValue]) -> TraceEvent:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": max(dur, 0.0), "pid": pid, "tid": tid, "args": args}


def _own_rows(tl: RankTimeline, pos: int, ids: _Ids, report: Report) -> list[TraceEvent]:
    """The rank's perfdoctor rows: its slices, then one row per finding."""
    pid = ids.pid(pos, "rank", f"rank {tl.rank}")
    shown = [f for f in _findings(report) if _on_rank(f, tl.rank)]
    # rows top to bottom: idle, critical path, the findings, the step after the plan, then its device activities
    rows = list(dict.fromkeys(s.row for s in tl.slices)) + [f"finding {f.code}" for f in shown]

    def place(row: str) -> int:
        return 0 if "idle" in row else 1 if row == "critical path" else 2 if row.startswith("finding") else 3

    for row in sorted(rows, key=place):  # stable: each group keeps its order
        ids.tid(pid, row, row)
    out = []
    for s in tl.slices:
        out.append(_x(s.name, "perfdoctor", s.ts_us, s.dur_us, pid, ids.tid(pid, s.row, s.row), dict(s.args)))
    for f in shown:
        row = f"finding {f.code}"
        tid = ids.tid(pid, row, row)
        for step in tl.steps:
            ts, dur, n = finding_span(f, tl.events, step.start_us, step.end_us)
            out.append(_x(_headline(f), "perfdoctor", ts, dur, pid, tid, _finding_args(f, step.step, n)))
    return out


def _on_rank(f: FindingSection, rank: int) -> bool:
    """Whether finding ``f`` is drawn on ``rank``: it fired there, or it names no ranks and is that rank's (or the
    job's)."""
    if f.ranks:
        return rank in f.ranks
    return f.rank is None or f.rank == rank


def _headline(f: FindingSection) -> str:
    from perfdoctor.render.view import headline

    return f"{f.code} {headline(f)}"


def finding_span(f: FindingSection, events: Sequence[Event], lo_us: float, hi_us: float) -> tuple[float, float, int]:
    """(start µs, length µs, events matched) of finding ``f`` in the step ``[lo_us, hi_us)``: from the first start to
    the last end of the recorded events there whose name is one the finding cites (``evidence.events``), cut to
    the step; the whole step when it cites none found there."""
    cited = {e.get("name") for e in f.events}
    hits = [(e.ts_us, e.ts_us + e.dur_us) for e in events if e.name in cited and lo_us <= e.ts_us < hi_us]
    if not hits:
        return lo_us, hi_us - lo_us, 0
    a = max(lo_us, min(h[0] for h in hits))
    b = min(hi_us, max(h[1] for h in hits))
    return a, max(b - a, 0.0), len(hits)


def _finding_args(f: FindingSection, step: int, n: int) -> dict[str, JsonValue]:
    return {
        "code": f.code,
        "step": step,
        "message": f.message,
        "saving_us_per_step": f.saving_us_per_step,
        "saving_pct_of_step": f.saving_pct_of_step,
        "saving_method": f.saving_method,
        "plan_position": f.plan_position,
        "step_after_us": f.step_after_us,
        "numbers_from_rank": f.rank,
        "cited_events_in_step": n,
        "span": "first to last cited event in the step" if n else "the whole step (no cited event in it)",
    }


def _recorded_rows(tl: RankTimeline, pos: int, ids: _Ids, events: Iterable[Event]) -> list[TraceEvent]:
    """The recorded events as rows of the rank's process, one per trace thread: "<process> · <thread>" by the
    trace's own names, "GPU D · stream S" for device activities (Kineto's ``tid`` is the stream)."""
    pid = ids.pid(pos, "rank", f"rank {tl.rank}")
    out = []
    for e in events:
        key = ("trace", e.pid, e.tid)
        if e.cat in DEVICE_CATS:
            where = f"GPU {e.args.get('device', e.pid)}"
            thread = tl.thread_names.get(f"{e.pid}/{e.tid}", f"stream {e.tid}")
        else:
            where = tl.process_names.get(e.pid, f"pid {e.pid}")
            thread = tl.thread_names.get(f"{e.pid}/{e.tid}", f"thread {e.tid}")
        out.append(_x(e.name, e.cat, e.ts_us, e.dur_us, pid, ids.tid(pid, key, f"{where} · {thread}"), dict(e.args)))
    return out


def _by_step(tl: RankTimeline) -> list[tuple[int, list[Event]]]:
    """The rank's recorded events grouped by the first chosen step they overlap (an event spanning two adjacent
    chosen steps is written once)."""
    groups: list[tuple[int, list[Event]]] = [(s.step, []) for s in tl.steps]
    for e in tl.events:
        end = e.ts_us + e.dur_us
        for k, s in enumerate(tl.steps):
            if e.ts_us < s.end_us and (end > s.start_us or e.ts_us >= s.start_us):
                groups[k][1].append(e)
                break
    return groups


def _rank_meta(tl: RankTimeline, why: str) -> dict[str, JsonValue]:
    after = list(tl.after_plan_step_us.values())
    return {
        "rank": tl.rank,
        "why": why,
        "device": tl.device,
        "steps": [
            {
                "step": s.step,
                "why": s.why,
                "start_us": s.start_us,
                "end_us": s.end_us,
                "recorded_step_us": tl.recorded_step_us.get(s.step),
                "after_plan_step_us": tl.after_plan_step_us.get(s.step),
            }
            for s in tl.steps
        ],
        "plan_codes": tl.plan_codes,
        "after_plan_step_us_by_step": {str(k): v for k, v in tl.after_plan_step_us.items()},
        "after_plan_mean_step_us": float(np.mean(after)) if after else None,
        "notes": tl.notes,
    }


def timeline_chunks(report: Report, timelines: Sequence[RankTimeline], max_bytes: int = MAX_BYTES) -> list[bytes]:
    """The Chrome-trace JSON document of ``timelines`` (see the module docstring), as pieces to write in order.

    Raises:
        PerfDoctorError: no rank has a chosen step to show.
    """
    shown = [(t, w) for t, w in shown_ranks(report, timelines) if t.steps]
    if not shown:
        notes = sorted({n for t in timelines for n in t.notes}) or ["no analysed step"]
        raise PerfDoctorError(f"--timeline: nothing to show ({'; '.join(notes)})")
    ids = _Ids()
    own = [e for pos, (tl, _) in enumerate(shown) for e in _own_rows(tl, pos, ids, report)]
    pieces = [_dump(e) for e in own]
    used = sum(len(p) + 1 for p in pieces) + 4096
    left_out: list[str] = []
    for pos, (tl, _) in enumerate(shown):
        for step, events in _by_step(tl):
            rows = _recorded_rows(tl, pos, ids, events)
            part = [_dump(e) for e in rows]
            size = sum(len(p) + 1 for p in part)
            if used + size + sum(len(_dump(m)) + 1 for m in ids.meta) > max_bytes:
                left_out.append(
                    f"rank {tl.rank} step {step}: its {len(rows):,} recorded events ({size / 1e6:,.1f} MB of JSON); "
                    f"the file would pass {max_bytes / 1e6:,.0f} MB"
                )
                continue
            pieces += part
            used += size
    meta: dict[str, JsonValue] = {
        "tool": "perfdoctor",
        "inputs": [i.path for i in report.inputs],
        "ranks": [_rank_meta(tl, why) for tl, why in shown],
        "ranks_not_shown": sorted(t.rank for t in timelines if t not in [s[0] for s in shown]),
        "critical_path": CRITICAL_PATH_NOTE,
        "recorded_events": "re-emitted from perfdoctor's tables: name, times, process, thread, the Kineto category "
        "of their kind, correlation / External id / device / stream; flow arrows and other args are not kept",
        "left_out": left_out,
        "max_bytes": max_bytes,
    }
    other = {"perfdoctor": "annotated timeline", "left_out": "; ".join(left_out) or "nothing"}
    tail = b'],"displayTimeUnit":"ms","otherData":' + _dump(other) + b',"perfdoctor":' + _dump(meta) + b"}\n"
    body = [_dump(m) for m in ids.meta] + pieces
    # traceEvents first: streaming readers (Perfetto's JSON tokenizer) meet the events before the metadata
    return [b'{"traceEvents":[', b",".join(body), tail]


def write_timeline(path: str, report: Report, timelines: Sequence[RankTimeline], force: bool = False) -> None:
    """Write the annotated timeline to ``path`` (gzip when it ends ``.gz``) through a temporary file.

    Raises:
        PerfDoctorError: ``path`` exists and not ``force``; it cannot be written; nothing to show.
    """
    if os.path.exists(path) and not force:
        raise PerfDoctorError(f"{path}: already exists; use --force to overwrite")
    chunks = timeline_chunks(report, timelines)
    tmp = path + ".tmp"
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(tmp, "wb") as fh:
            for c in chunks:
                fh.write(c)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise PerfDoctorError(f"{path}: cannot write the timeline ({exc.strerror or exc})") from None
