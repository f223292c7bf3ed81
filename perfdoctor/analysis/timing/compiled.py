"""torch.compile in a trace: compiled regions, the graph breaks between them, recompilations in the steady state.

What the profiler records of a ``torch.compile`` program (torch 2.x; the same names on CUDA, ROCm and CPU):

- ``TorchDynamo Cache Lookup``: Dynamo evaluating the guards of a frame's compiled code before running it;
- ``Torch-Compiled Region: F/C``: one run of the compiled code of Dynamo frame ``F``, compiled for the ``C``-th
  time (``0/0``; a recompilation of frame 0 runs as ``0/1``). A graph break ends a frame's graph: the frame's code
  runs the rest eagerly and enters a resume function, a new frame whose region is recorded *inside* the first one.
  A region that lies inside another region on the same thread is therefore one graph break; the outermost
  regions are the entries from eager code (``torch.compile(model)`` called once per step: one per step);
- ``CompiledFunction`` (AOTAutograd's forward, with ``CompiledFunctionBackward`` in the backward) and
  ``## Call CompiledFxGraph <hash> ##`` (the Inductor graph itself): the graph's own work;
- ``Pregraph bytecode``, ``AOTDispatcher Runtime Wrapper Prologue``/``Epilogue``: the wrapper around each graph;
- compilation itself: ``(dynamo_timed)`` annotations and Inductor/AOT compile ops
  (:data:`perfdoctor.analysis.steps.warmup.COMPILE`).

Sources: torch/_dynamo/eval_frame.py and convert_frame.py (the ``Torch-Compiled Region`` and cache-lookup
record_function names), torch/_functorch/_aot_autograd/runtime_wrappers.py; checked on the wings236 RTX 4090 traces
(compiled ResNet18: one region per step; explicit ``graph_break()``: 0/0 ⊃ 1/0 ⊃ 2/0 ⊃ 3/0 per step) and on CPU
runs of ``examples/compile_breaks.py`` (torch 2.13).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from perfdoctor.analysis.steps.warmup import COMPILE
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.tables import TraceTables

REGION = re.compile(r"^Torch-Compiled Region: (\d+)/(\d+)$")
CACHE_LOOKUP = re.compile(r"^TorchDynamo Cache Lookup$")
GRAPH_CALL = re.compile(r"^CompiledFunction$|^## Call CompiledFxGraph")
# compilation: PD902's names, and the spans torch 2.13 records around a (re)compile on CPU: ``dynamo`` >
# ``entire_frame_compile`` > ``_compile.compile_inner (dynamo_timed)``, and the lazily compiled backward's
# ``entire_backward_compile`` inside ``CompiledFunctionBackward``
COMPILE_SPAN = re.compile(COMPILE.pattern + r"|^dynamo$|^entire_(frame|backward)_compile$", re.IGNORECASE)
# CUDA-graph recording: torch.compile(mode="reduce-overhead")'s cudagraph trees time it as a ``(dynamo_timed)``
# range (torch/_inductor/cudagraph_trees.py), a manual ``torch.cuda.graph`` capture shows as the capture calls
CUDAGRAPH_RECORD = re.compile(r"^CUDAGraphNode\.record \(dynamo_timed\)$")
CAPTURE_BEGIN = re.compile(r"^(cuda|hip)StreamBeginCapture")
CAPTURE_END = re.compile(r"^(cuda|hip)StreamEndCapture")
GRAPH_INSTANTIATE = re.compile(r"^(cuda|hip)GraphInstantiate|^cuGraphInstantiate")
WRAPPER = re.compile(r"^(Pregraph bytecode|AOTDispatcher Runtime Wrapper (Prologue|Epilogue))$")
NAMES_SHOWN = 4  # eager op names listed
LOOKUP_GAP_US = 50.0  # a cache lookup ending at most this long before a region is that region's (wings236: 1-2 µs)


@dataclass
class CompiledSteps:
    """torch.compile facts per analysed step (arrays of shape ``(n_steps,)``; times in µs, host timeline).

    Attributes:
        regions: ``Torch-Compiled Region`` runs starting in the step.
        entries: of those, the outermost (entries into compiled code from eager code).
        breaks: ``regions - entries``: regions entered from inside another region (graph breaks).
        backward_graphs: ``CompiledFunctionBackward`` runs in the step.
        eager_us: host time of the eager ops run between graphs (inside a region, outside its graph calls and
            nested regions, not Dynamo's own wrapper ops), union per step.
        overhead_us: per break, the nested region's cache lookup and its time outside its graph calls, nested
            regions and eager ops: what entering one more graph costs, per step.
        eager_ops: the eager ops' names with their count per step, most time first (at most :data:`NAMES_SHOWN`).
        frames: region names (``F/C``) seen in the steps, in first-seen order.
        overhead_cut: the intervals of ``overhead_us`` over all steps (sorted, disjoint), the graph-break fix's cut.
        pid: the process of the regions (-1 when none).
    """

    regions: np.ndarray
    entries: np.ndarray
    breaks: np.ndarray
    backward_graphs: np.ndarray
    eager_us: np.ndarray
    overhead_us: np.ndarray
    eager_ops: list[tuple[str, float]] = field(default_factory=list)
    frames: list[str] = field(default_factory=list)
    overhead_cut: iv.Intervals = iv.EMPTY
    pid: int = -1


def _rows(tables: TraceTables, rx: re.Pattern[str], tname: str = "cpu_ops") -> np.ndarray:
    tab = tables.tables[tname]
    if len(tab) == 0:
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(tables.names_matching(rx)[tab["name_id"]])


def _window(ts_us: np.ndarray, start_us: np.ndarray, end_us: np.ndarray) -> np.ndarray:
    """Index of the window ``[start_us[k], end_us[k])`` holding each time (-1 outside all)."""
    k = np.searchsorted(start_us, ts_us, side="right") - 1
    ok = (k >= 0) & (ts_us < end_us[np.maximum(k, 0)]) if start_us.size else np.zeros(ts_us.size, dtype=bool)
    return np.where(ok, k, -1)


def _spans(tables: TraceTables, rx: re.Pattern[str], pid: int, tid: int) -> iv.Intervals:
    """Union of the cpu_ops and annotations named like ``rx`` on one thread."""
    parts = []
    for tname in ("cpu_ops", "annotations"):
        tab, rows = tables.tables[tname], _rows(tables, rx, tname)
        if rows.size:
            m = (tab["pid"][rows] == pid) & (tab["tid"][rows] == tid)
            parts.append(iv.union(tab["ts_us"][rows[m]], tab["end_us"][rows[m]]))
    return iv.union_of(*parts)


def compiled_steps(tables: TraceTables, start_us: np.ndarray, end_us: np.ndarray) -> CompiledSteps | None:
    """The torch.compile facts of each host window ``[start_us[k], end_us[k])`` (µs), or None when the trace has
    no ``Torch-Compiled Region`` (an eager program, or a trace from before torch 2.1)."""
    ops = tables.cpu_ops
    reg = _rows(tables, REGION)
    if reg.size == 0:
        return None
    n = start_us.size
    z = np.zeros(n)
    out = CompiledSteps(z.copy(), z.copy(), z.copy(), z.copy(), z.copy(), z.copy())
    out.pid = int(ops["pid"][reg[0]])
    names = tables.name_array()
    in_step = _window(ops["ts_us"][reg], start_us, end_us)
    out.frames = list(dict.fromkeys(str(names[i]).split(": ", 1)[1] for i in ops["name_id"][reg[in_step >= 0]]))
    eager_cut: list[iv.Intervals] = []
    over_cut: list[iv.Intervals] = []
    eager_names: dict[str, float] = {}  # µs in the steps, per name
    eager_calls: dict[str, int] = {}  # calls in the steps, per name
    for pid, tid in sorted({(int(p), int(t)) for p, t in zip(ops["pid"][reg], ops["tid"][reg], strict=True)}):
        mine = reg[(ops["pid"][reg] == pid) & (ops["tid"][reg] == tid)]
        mine = mine[np.lexsort((-ops["end_us"][mine], ops["ts_us"][mine]))]
        s, e = ops["ts_us"][mine], ops["end_us"][mine]
        nested = np.zeros(s.size, dtype=bool)
        nested[1:] = s[1:] < np.maximum.accumulate(e)[:-1]
        k = _window(s, start_us, end_us)
        ok = k >= 0
        out.regions += np.bincount(k[ok], minlength=n)[:n]
        out.entries += np.bincount(k[ok & ~nested], minlength=n)[:n]
        graphs = _spans(tables, GRAPH_CALL, pid, tid)
        regions = iv.union(s, e)
        look = _spans(tables, CACHE_LOOKUP, pid, tid)
        not_eager = iv.union_of(graphs, look, _spans(tables, COMPILE_SPAN, pid, tid))
        eager, eager_rows = _eager_ops(tables, pid, tid, regions, not_eager)
        eager_cut.append(eager)
        in_steps = eager_rows[_window(ops["ts_us"][eager_rows], start_us, end_us) >= 0]
        for r in in_steps.tolist():
            name = str(names[ops["name_id"][r]])
            eager_names[name] = eager_names.get(name, 0.0) + float(ops["dur_us"][r])
            eager_calls[name] = eager_calls.get(name, 0) + 1
        # per break: its cache lookup (the op that ends where the nested region starts, or just before it) and the
        # nested region's time outside its graphs, its own nested regions and the eager ops
        li = np.searchsorted(look[1], s[nested], side="right") - 1
        lk = li[(li >= 0)]
        lk = lk[s[nested][li >= 0] - look[1][lk] < LOOKUP_GAP_US] if lk.size else lk
        own = iv.subtract(iv.union(s[nested], e[nested]), iv.union_of(graphs, eager, _deeper(s, e, nested)))
        over_cut.append(iv.union_of(own, (look[0][lk], look[1][lk])))
    bw = _rows(tables, re.compile(r"^CompiledFunctionBackward$"))
    kb = _window(ops["ts_us"][bw], start_us, end_us)
    out.backward_graphs = np.bincount(kb[kb >= 0], minlength=n)[:n].astype(np.float64)
    out.breaks = out.regions - out.entries
    eager_all = iv.union_of(*eager_cut)
    out.overhead_cut = iv.union_of(*over_cut)
    out.eager_us = iv.per_window(eager_all, start_us, end_us)
    out.overhead_us = iv.per_window(out.overhead_cut, start_us, end_us)
    top = sorted(eager_names.items(), key=lambda kv: -kv[1])[:NAMES_SHOWN]
    out.eager_ops = [(name, eager_calls[name] / max(n, 1)) for name, _ in top]
    return out


def _deeper(s: np.ndarray, e: np.ndarray, nested: np.ndarray) -> iv.Intervals:
    """The regions nested two or more levels deep (inside a nested region): each nested region's own time leaves
    out the regions inside it."""
    if not nested.any():
        return iv.EMPTY
    ns, ne = s[nested], e[nested]
    deeper = np.zeros(ns.size, dtype=bool)
    deeper[1:] = ns[1:] < np.maximum.accumulate(ne)[:-1]
    return iv.union(ns[deeper], ne[deeper])


def _eager_ops(
    tables: TraceTables, pid: int, tid: int, regions: iv.Intervals, compiled: iv.Intervals
) -> tuple[iv.Intervals, np.ndarray]:
    """The outermost cpu_ops of one thread inside ``regions`` that are neither inside ``compiled`` (graph calls,
    cache lookups, compilation) nor Dynamo's own (cache lookups, regions, wrapper ops): the eager ops between
    graphs, as an interval set and their cpu_ops rows."""
    ops = tables.cpu_ops
    own = tables.names_matching(REGION) | tables.names_matching(CACHE_LOOKUP) | tables.names_matching(WRAPPER)
    rows = np.flatnonzero((ops["pid"] == pid) & (ops["tid"] == tid) & ~own[ops["name_id"]])
    s, e = ops["ts_us"][rows], ops["end_us"][rows]
    inside = iv.containing(s, regions) >= 0
    free = ~(iv.containing(s, compiled) >= 0)
    rows, s, e = rows[inside & free], s[inside & free], e[inside & free]
    order = np.lexsort((-e, s))
    rows, s, e = rows[order], s[order], e[order]
    top = np.ones(s.size, dtype=bool)
    top[1:] = s[1:] >= np.maximum.accumulate(e)[:-1]
    return iv.union(s[top], e[top]), rows[top]


@dataclass
class Recompiles:
    """Compilation inside analysed steps (µs, host timeline).

    Attributes:
        compile_us: per step, the union of compile spans (:data:`COMPILE_SPAN`) and of the cache lookups that ran a
            compile (a lookup that holds a compile span).
        new_frames: per step, the ``F/C`` regions whose first run in the analysed steps is in that step with
            ``C > 0`` (a recompiled frame running its new code), as text.
        cut: the compile intervals over all steps (sorted, disjoint), the fix's cut.
        shapes: per step with a recompile, ``"[64, 128] → [63, 128]"``: the input shapes of the first graph call
            in the step before and in the step (empty when the trace has no shapes or they did not change).
    """

    compile_us: np.ndarray
    new_frames: list[list[str]]
    cut: iv.Intervals
    shapes: list[str]


def recompiles(tables: TraceTables, start_us: np.ndarray, end_us: np.ndarray) -> Recompiles:
    """Compile spans and recompiled frames in each host window ``[start_us[k], end_us[k])`` (µs)."""
    spans = []
    for tname in ("annotations", "cpu_ops"):
        tab, rows = tables.tables[tname], _rows(tables, COMPILE_SPAN, tname)
        if rows.size:
            spans.append(iv.union(tab["ts_us"][rows], tab["end_us"][rows]))
    # a CUDA graph's recording is timed as a "(dynamo_timed)" range too: PD109's, not a compilation
    comp = iv.subtract(iv.union_of(*spans), graph_recording(tables, start_us, end_us).cut)
    ops = tables.cpu_ops
    look = _rows(tables, CACHE_LOOKUP)
    if look.size and comp[0].size:  # a lookup that ran a compile: its whole span is the recompilation's
        ls, le = ops["ts_us"][look], ops["end_us"][look]
        holds = iv.covered_until(comp, le) - iv.covered_until(comp, ls) > 0
        comp = iv.union_of(comp, iv.union(ls[holds], le[holds]))
    window = iv.union(start_us, end_us)
    cut = iv.intersect(comp, window)
    n = start_us.size
    new_frames: list[list[str]] = [[] for _ in range(n)]
    reg = _rows(tables, REGION)
    names = tables.name_array()
    seen: set[str] = set()
    for r in reg[np.argsort(ops["ts_us"][reg], kind="stable")].tolist():
        k = int(_window(ops["ts_us"][r : r + 1], start_us, end_us)[0])
        label = str(names[ops["name_id"][r]]).split(": ", 1)[1]
        if k < 0 or label in seen:
            continue
        seen.add(label)
        m = REGION.match(str(names[ops["name_id"][r]]))
        if m and int(m.group(2)) > 0 and k > 0:
            new_frames[k].append(label)
    compile_us = iv.per_window(cut, start_us, end_us)
    return Recompiles(compile_us, new_frames, cut, _shape_changes(tables, start_us, end_us, compile_us > 0))


def _shape_changes(tables: TraceTables, start_us: np.ndarray, end_us: np.ndarray, hit: np.ndarray) -> list[str]:
    """Per step: the first graph call's input shapes in the step before → in the step, where a recompiling step's
    differ ("" elsewhere, or without ``record_shapes``)."""
    ops = tables.cpu_ops
    out = [""] * start_us.size
    if "input_dims" not in ops or not hit.any():
        return out
    rows = _rows(tables, GRAPH_CALL)
    rows = rows[np.argsort(ops["ts_us"][rows], kind="stable")]
    k = _window(ops["ts_us"][rows], start_us, end_us)
    dims = ops["input_dims"]
    first: dict[int, str] = {}
    for r, w in zip(rows.tolist(), k.tolist(), strict=True):
        if w >= 0 and w not in first and dims[r] is not None:
            first[w] = _dims_text(dims[r])
    for w in np.flatnonzero(hit).tolist():
        before, now = first.get(w - 1), first.get(w)
        if before and now and before != now:
            out[w] = f"{before} → {now}"
    return out


def _dims_text(raw: object) -> str:
    """The first non-empty shape of an ``Input Dims`` list (raw JSON bytes), as ``[64, 128]``."""
    import json

    try:
        dims = json.loads(raw if isinstance(raw, (bytes, str)) else str(raw))
    except ValueError:
        return ""
    for d in dims if isinstance(dims, list) else []:
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            return "[" + ", ".join(str(x) for x in d) + "]"
    return ""


@dataclass
class GraphRecording:
    """CUDA-graph recording inside analysed steps (µs, host timeline).

    Attributes:
        record_us: per step, the union of cudagraph trees' ``CUDAGraphNode.record`` ranges, of each stream capture
            (from a ``cudaStreamBeginCapture`` to the next ``cudaStreamEndCapture`` of its thread) and of the
            ``cudaGraphInstantiate`` calls.
        recordings: per step, the recordings started in it (record ranges, else captures).
        cut: the recording intervals over all steps (sorted, disjoint), the fix's cut.
        api: the runtime's word for a CUDA graph in the trace ("CUDA graph", or "HIP graph" on ROCm).
    """

    record_us: np.ndarray
    recordings: np.ndarray
    cut: iv.Intervals
    api: str


def graph_recording(tables: TraceTables, start_us: np.ndarray, end_us: np.ndarray) -> GraphRecording:
    """CUDA-graph recordings in each host window ``[start_us[k], end_us[k])`` (µs)."""
    parts, starts = [], []
    ann = tables.annotations
    rows = _rows(tables, CUDAGRAPH_RECORD, "annotations")
    if rows.size:
        parts.append(iv.union(ann["ts_us"][rows], ann["end_us"][rows]))
        starts.append(ann["ts_us"][rows])
    rt = tables.runtime
    hip = False
    if len(rt):
        names = tables.name_array()
        begin, end = _rows(tables, CAPTURE_BEGIN, "runtime"), _rows(tables, CAPTURE_END, "runtime")
        inst = _rows(tables, GRAPH_INSTANTIATE, "runtime")
        hip = any(str(names[rt["name_id"][r]]).startswith("hip") for r in np.concatenate([begin, inst]).tolist())
        for tid in np.unique(rt["tid"][begin]).tolist():
            b = begin[rt["tid"][begin] == tid]
            e = end[rt["tid"][end] == tid]
            bs, es = rt["ts_us"][b], np.sort(rt["end_us"][e])
            k = np.searchsorted(es, bs, side="left")
            ok = k < es.size
            parts.append(iv.union(bs[ok], es[np.minimum(k, max(es.size - 1, 0))][ok] if es.size else bs[ok]))
            if not rows.size:
                starts.append(bs[ok])
        if inst.size:
            parts.append(iv.union(rt["ts_us"][inst], rt["end_us"][inst]))
    cut = iv.intersect(iv.union_of(*parts), iv.union(start_us, end_us))
    first = np.concatenate(starts) if starts else np.empty(0)
    k = _window(first, start_us, end_us)
    return GraphRecording(
        record_us=iv.per_window(cut, start_us, end_us),
        recordings=np.bincount(k[k >= 0], minlength=start_us.size)[: start_us.size].astype(np.float64),
        cut=cut,
        api="HIP graph" if hip else "CUDA graph",
    )
