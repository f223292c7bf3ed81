"""The line each Python call was made from, added to an exported trace's ``python_function`` events.

Kineto names a Python frame by its function's first line (``"train.py(30): step"``): a finding could name the
function that calls ``.item()``, not the line. The profiler knows more than it exports: each Python call event of
its event tree (``experimental_event_tree()``) keeps its *caller*'s frame at the moment of the call, line included.
:func:`add_callers` writes that frame into the exported trace as ``args["Python caller"]`` (``"train.py(42):
step"``, Kineto's own frame format), which :mod:`perfdoctor.analysis.timing.source_lines` reads.

The tree's events and the exported ones carry no shared id; they are matched per event name (a C call's name holds
its object's address, a Python frame's its file and line) in order of start time, and a name whose counts differ in
the two is left without callers (never a wrong line).
"""

from __future__ import annotations

import gzip
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from perfdoctor.trace.json_value import JsonObject, JsonValue

if TYPE_CHECKING:
    import torch

CALLER_KEY = "Python caller"


def caller_lines(prof: torch.profiler.profile) -> dict[str, list[str]]:
    """Per Python call name, its callers' frames (``"file(line): function"``) in order of start time.

    ``prof``: a stopped ``torch.profiler.profile`` recorded with ``with_stack=True``; {} when it holds no tree.
    """
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if results is None:
        return {}
    found: dict[str, list[tuple[int, str]]] = defaultdict(list)
    todo = list(results.experimental_event_tree())
    while todo:
        event = todo.pop()
        todo.extend(event.children)
        caller = getattr(event.extra_fields, "caller", None)
        if caller is None:
            continue
        found[event.name].append(
            (int(event.start_time_ns), f"{caller.file_name}({caller.line_number}): {caller.function_name}")
        )
    return {name: [c for _, c in sorted(calls)] for name, calls in found.items()}


def add_callers(prof: torch.profiler.profile, path: Path) -> int:
    """Add ``args["Python caller"]`` to the ``python_function`` events of the trace at ``path`` (gzip when its name
    ends in ``.gz``), rewriting it in place; returns how many events got one."""
    callers = caller_lines(prof)
    if not callers:
        return 0
    with gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb") as fh:
        trace: JsonValue = msgspec.json.decode(fh.read())
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        return 0
    by_name: dict[str, list[JsonObject]] = defaultdict(list)
    for e in events:
        if isinstance(e, dict) and e.get("cat") == "python_function":
            by_name[str(e.get("name"))].append(e)
    added = 0
    for name, exported in by_name.items():
        recorded = callers.get(name)
        if recorded is None or len(recorded) != len(exported):
            continue
        exported.sort(key=_ts)
        for e, caller in zip(exported, recorded):
            args = e.setdefault("args", {})
            if isinstance(args, dict):
                args[CALLER_KEY] = caller
                added += 1
    with gzip.open(path, "wb") if path.name.endswith(".gz") else open(path, "wb") as fh:
        fh.write(msgspec.json.encode(trace))
    return added


def _ts(event: JsonObject) -> float:
    """An exported event's ``ts`` (µs; 0 when absent), the order its calls were made in."""
    ts = event.get("ts", 0.0)
    return float(ts) if isinstance(ts, (int, float, str)) else 0.0
