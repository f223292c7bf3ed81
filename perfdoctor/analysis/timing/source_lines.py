"""Source lines: the line of the user's code where a stretch of host time starts, read from the trace's Python stacks.

A trace recorded with ``with_stack=True`` holds one ``python_function`` event per Python call (Kineto's python
tracer): ``"train.py(30): step"`` for a Python frame (the file as the profiler shortens it, the function's first
line, the function), ``"<built-in method item of Tensor object at 0x...>"`` for a C call, each with its ``Python
id`` and ``Python parent id``. Kineto names a frame by the first line of its function, not by the line the call was
made from; ``perfdoctor profile --with-stack`` adds that line to each event as ``Python caller``
(:func:`perfdoctor.capture.stacks.add_callers`), and the named line is then exact.

For a moment on a thread (the start of a sync call, of a DataLoader fetch, of an optimizer step), the innermost
``python_function`` event around it is found, and its stack is walked up past every *library* frame to the first
frame of the user's code; the location is the line that frame called into the library from (exact with
``Python caller``, else the frame's function as the trace names it). Library frames (skipped):

- torch and the libraries around it (:data:`LIBRARY_ROOTS`: torchvision, numpy, transformers, lightning, tqdm,
  ... and perfdoctor itself, whose capture hooks wrap the user's calls);
- the standard library (:data:`sys.stdlib_module_names`, ``<frozen ...>``, ``<string>``);
- anything under ``site-packages`` or ``dist-packages`` when the trace keeps the full path;
- C calls (``<built-in method ...>``) and the tracer's own ``nn.Module:`` / ``Optimizer.`` records.

Everything is vectorised over the queried moments (one numpy pass per stack level): a trace with millions of
``python_function`` events costs a sort per thread and a few array passes.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field

import numpy as np

from perfdoctor.trace.tables import Table, TraceTables

# top-level packages whose frames are never the user's line (shortened paths: "torch/nn/modules/module.py")
LIBRARY_ROOTS = frozenset(
    (
        "torch torchvision torchaudio torchtext torchdata functorch triton numpy scipy pandas transformers "
        "accelerate deepspeed lightning pytorch_lightning lightning_fabric timm apex einops datasets tokenizers "
        "safetensors huggingface_hub tensorboard wandb hydra omegaconf tqdm loguru typing_extensions fsspec "
        "pkg_resources setuptools perfdoctor"
    ).split()
)
_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<func>.*)$")
_C_CALL = re.compile(r"^<built-in (?:method|function) (?P<name>\w+)(?: of (?P<owner>\w+) object)?")
# at most this many Python levels walked (a real stack is tens; a corrupt parent chain must still end)
_MAX_DEPTH = 512
# user frames listed in a location's stack, innermost first
_STACK_FRAMES = 6


@dataclass(frozen=True)
class SourceLine:
    """Where in the user's code a finding's time starts.

    Attributes:
        location: ``file:line`` (the file as the trace names it).
        function: the user's function that line is in.
        exact: True when ``line`` is the line of the call (``Python caller``, recorded by ``perfdoctor profile
            --with-stack``); False when it is the function's first line (Kineto's frame name).
        calls: what that line calls into, as the trace names it (``Tensor.item``,
            ``torch/utils/data/dataloader.py: __next__``); "" when the time starts in the user's frame itself.
        frames: the user's frames from that line outwards (``file:line in function``), at most six.
        skipped: library frames skipped between the line and where the time starts (torch, the standard library,
            site-packages: the module docstring lists them).
        share_pct: % of the finding's time (the weights given) that starts at this line.
        module: the innermost ``nn.Module`` around that time, where the trace records module calls ("" otherwise).
    """

    location: str
    function: str
    exact: bool
    calls: str = ""
    frames: list[str] = field(default_factory=list)
    skipped: int = 0
    share_pct: float = 100.0
    module: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "location": self.location,
            "function": self.function,
            "exact": self.exact,
            "calls": self.calls,
            "frames": list(self.frames),
            "skipped": self.skipped,
            "share_pct": round(self.share_pct, 3),
            "module": self.module,
        }


def is_library(frame_file: str) -> bool:
    """Whether a frame's file (as the profiler names it) is torch, a library around it or the standard library."""
    if frame_file.startswith("<"):  # <string>, <frozen importlib._bootstrap>
        return True
    path = frame_file.replace("\\", "/")
    if "/site-packages/" in path or "/dist-packages/" in path or "/lib/python" in path:
        return True
    top = path.lstrip("/").split("/", 1)[0]
    top = top[:-3] if top.endswith(".py") else top
    return top in LIBRARY_ROOTS or top in sys.stdlib_module_names


def _classify(names: list[str], name_ids: np.ndarray) -> tuple[np.ndarray, dict[int, re.Match[str]]]:
    """Per name id used by ``python_function`` events: whether it is a user frame, and its parsed frame."""
    is_user = np.zeros(len(names), dtype=bool)
    parsed: dict[int, re.Match[str]] = {}
    for nid in np.unique(name_ids).tolist():
        m = _FRAME.match(names[nid])
        if m is not None:
            parsed[nid] = m
            is_user[nid] = not is_library(m["file"])
    return is_user, parsed


class PythonStacks:
    """The ``python_function`` events of one trace as a forest per thread, ready for :meth:`locate`.

    Raises nothing: a trace without Python stacks gives ``bool(stacks) is False``.
    """

    def __init__(self, tables: TraceTables) -> None:
        py: Table = tables.python_functions
        self.tables = tables
        self.n = len(py)
        if not self.n or "python_id" not in py:
            self.n = 0
            return
        # rows grouped by thread, each group by start time (the table is sorted by ts_us; a stable sort keeps it)
        thread = py["pid"].astype(np.int64) * (1 << 32) + (py["tid"].astype(np.int64) & 0xFFFFFFFF)
        order = np.argsort(thread, kind="stable")
        self.thread = thread[order]
        self.ts = py["ts_us"][order]
        self.end = py["end_us"][order]
        self.name_id = py["name_id"][order]
        caller = py["python_caller"][order] if "python_caller" in py else None
        self.caller = caller if caller is not None and any(c is not None for c in caller.tolist()) else None
        ids = py["python_id"][order]
        parent_ids = py["python_parent_id"][order]
        by_id = np.argsort(ids, kind="stable")
        pos = np.searchsorted(ids[by_id], parent_ids)
        pos = np.clip(pos, 0, self.n - 1)
        found = (ids[by_id][pos] == parent_ids) & (parent_ids >= 0)
        self.parent = np.where(found, by_id[pos], -1)
        self.is_user_name, self.parsed = _classify(tables.names, self.name_id)
        self.user = self.is_user_name[self.name_id]
        self.is_module = tables.names_matching(r"^nn\.Module: ")[self.name_id]

    def __bool__(self) -> bool:
        return self.n > 0

    @property
    def exact(self) -> bool:
        """Whether the events carry the line of each call (``Python caller``)."""
        return self.caller is not None

    def innermost(self, pid: np.ndarray, tid: np.ndarray, ts_us: np.ndarray) -> np.ndarray:
        """Row of the innermost ``python_function`` event on thread (pid, tid) that is open at ``ts_us``; -1 where
        none is (shapes: (q,) each)."""
        q = np.asarray(pid, dtype=np.int64) * (1 << 32) + (np.asarray(tid, dtype=np.int64) & 0xFFFFFFFF)
        t = np.asarray(ts_us, dtype=np.float64)
        # the last event of the thread starting at or before t, by (thread, ts) order
        key_lo = np.searchsorted(self.thread, q, side="left")
        key_hi = np.searchsorted(self.thread, q, side="right")
        row = np.full(q.size, -1, dtype=np.int64)
        for thr in np.unique(q[key_hi > key_lo]).tolist():  # one vectorised search per thread
            sel = np.flatnonzero(q == thr)
            lo, hi = int(key_lo[sel[0]]), int(key_hi[sel[0]])
            row[sel] = lo + np.searchsorted(self.ts[lo:hi], t[sel], side="right") - 1
            row[sel[row[sel] < lo]] = -1
        # climb while the candidate closed before t (siblings that ended, then their parents)
        for _ in range(_MAX_DEPTH):
            open_ = row >= 0
            stale = open_ & (self.end[np.maximum(row, 0)] < t)
            if not stale.any():
                break
            row[stale] = self.parent[row[stale]]
        return row

    def anchor(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each row: (the nearest user frame at or above it, the row just below that frame on the path: the
        call it made, -1 when the row is the user frame itself; library frames skipped). -1 where there is none."""
        cur = rows.copy()
        below = np.full(rows.size, -1, dtype=np.int64)
        skipped = np.zeros(rows.size, dtype=np.int64)
        for _ in range(_MAX_DEPTH):
            climb = (cur >= 0) & ~self.user[np.maximum(cur, 0)]
            if not climb.any():
                break
            below[climb] = cur[climb]
            skipped[climb] += 1
            cur[climb] = self.parent[cur[climb]]
        return cur, below, np.maximum(skipped - 1, 0)

    def _frame_text(self, user_row: int, below_row: int) -> tuple[str, str, bool]:
        """(``file:line``, function, exact) of a user frame, at the line it called ``below_row`` from."""
        if below_row >= 0 and self.caller is not None:
            c = self.caller[below_row]
            m = _FRAME.match(c) if isinstance(c, str) else None
            if m is not None:
                return f"{m['file']}:{m['line']}", m["func"], True
        m = self.parsed[int(self.name_id[user_row])]
        return f"{m['file']}:{m['line']}", m["func"], False

    def _calls(self, row: int) -> str:
        if row < 0:
            return ""
        name = self.tables.names[int(self.name_id[row])]
        c = _C_CALL.match(name)
        if c is not None:
            return f"{c['owner']}.{c['name']}" if c["owner"] else c["name"]
        m = self.parsed.get(int(self.name_id[row]))
        return f"{m['file']}: {m['func']}" if m is not None else name

    def _module(self, row: int) -> str:
        names = self.tables.names
        for _ in range(_MAX_DEPTH):
            if row < 0:
                return ""
            name = names[int(self.name_id[row])]
            if name.startswith("nn.Module: "):
                return name[len("nn.Module: ") :]
            row = int(self.parent[row])
        return ""

    def stack(self, user_row: int, below_row: int) -> list[str]:
        """The user's frames from ``user_row`` outwards, ``file:line in function`` each (at most six)."""
        out: list[str] = []
        row, below = user_row, below_row
        for _ in range(_MAX_DEPTH):
            if row < 0 or len(out) >= _STACK_FRAMES:
                break
            if self.user[row]:
                loc, func, _ = self._frame_text(row, below)
                out.append(f"{loc} in {func}")
            below, row = row, int(self.parent[row])
        return out

    def modules(self, rows: np.ndarray) -> np.ndarray:
        """Row of the innermost ``nn.Module:`` record at or above each row (-1: none)."""
        cur = rows.copy()
        for _ in range(_MAX_DEPTH):
            climb = (cur >= 0) & ~self.is_module[np.maximum(cur, 0)]
            if not climb.any():
                break
            cur[climb] = self.parent[cur[climb]]
        return cur

    def locate(
        self,
        pid: np.ndarray,
        tid: np.ndarray,
        ts_us: np.ndarray,
        weight: np.ndarray | None = None,
        by_module: bool = False,
    ) -> SourceLine | None:
        """The user line where most of the weight starts: each moment ``ts_us`` on thread (pid, tid) is placed
        at its line (the innermost ``python_function`` around it, walked up past library frames), the weights
        (µs, default 1 per moment) are summed per line, and the heaviest line is returned with its share.
        ``by_module``: the moments of the heaviest ``nn.Module`` (by its recorded name) first, then its heaviest
        line; ``share_pct`` is then the module's share. None when no moment falls inside a user frame."""
        if not self.n or np.size(ts_us) == 0:
            return None
        rows = self.innermost(pid, tid, ts_us)
        user, below, skipped = self.anchor(rows)
        w = np.ones(rows.size) if weight is None else np.asarray(weight, dtype=np.float64)
        ok = user >= 0
        module_share = None
        if by_module and ok.any():
            mod = self.modules(rows)
            has = ok & (mod >= 0)
            if has.any():
                mod_names = self.name_id[np.maximum(mod, 0)]
                per_module = np.bincount(mod_names[has], weights=w[has])
                top = int(np.argmax(per_module))
                module_share = float(100.0 * per_module[top] / w[ok].sum())
                ok = has & (mod_names == top)
        if not ok.any() or w[ok].sum() <= 0:
            return None
        # one key per line: the recorded call line where there is one, else the user frame's own name
        if self.caller is not None:
            callers = np.asarray(self.caller, dtype=object)[np.maximum(below[ok], 0)]
            callers[below[ok] < 0] = None
            keys = np.asarray(
                [f"{c}" if c is not None else f"#{n}" for c, n in zip(callers.tolist(), self.name_id[user[ok]])],
                dtype=object,
            )
        else:
            keys = self.name_id[user[ok]].astype(object)
        uniq, inv = np.unique(keys.astype(str), return_inverse=True)
        totals = np.bincount(inv, weights=w[ok], minlength=uniq.size)
        best = int(np.argmax(totals))
        pick = np.flatnonzero(ok)[np.flatnonzero(inv == best)[0]]
        loc, func, exact = self._frame_text(int(user[pick]), int(below[pick]))
        return SourceLine(
            location=loc,
            function=func,
            exact=exact,
            calls=self._calls(int(below[pick])),
            frames=self.stack(int(user[pick]), int(below[pick])),
            skipped=int(skipped[pick]),
            share_pct=float(100.0 * totals[best] / totals.sum()) if module_share is None else module_share,
            module=self._module(int(rows[pick])),
        )


def stacks_of(tables: TraceTables) -> PythonStacks:
    """The trace's :class:`PythonStacks`, built once per table set (the checks that name a line share it)."""
    cached = tables.__dict__.get("_python_stacks")
    if cached is None:
        cached = PythonStacks(tables)
        tables.__dict__["_python_stacks"] = cached
    return cached
