"""Gradient accumulation seen in a trace: the micro-batches of each optimizer step and the all-reduces each issues.

An *update* is the host time from the end of one ``Optimizer.step`` to the start of the next (without optimizer
annotations: one step window, as ``perfdoctor profile`` marks one step per optimizer step). Its micro-batches are
its backward passes, found without any model annotation: the autograd engine runs the same graph for every
micro-batch, so the sequence of ``autograd::engine::evaluate_function: <node>`` ops of an update is one backward
pass's sequence repeated K times; the smallest period of that sequence gives K and the passes' spans. Where the
sequence is not an exact repetition (a graph that changes between micro-batches), the micro-batches are the
``DistributedDataParallel.forward`` annotations, and without them the update counts as one micro-batch.

Gradient all-reduces are the all-reduce calls (``c10d::allreduce_``, ``nccl:all_reduce``) issued inside a backward
pass, where DDP's autograd hooks issue its buckets: an all-reduce outside backward (a logged loss) is not a
gradient bucket. DDP all-reduces one bucket set per backward pass unless the pass runs under ``no_sync()``, so
all-reduce calls in any pass but the last of an update are the ones ``no_sync`` removes.
Source: ``torch.nn.parallel.DistributedDataParallel`` (Reducer: buckets all-reduced from autograd hooks;
``no_sync`` context manager).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from perfdoctor.analysis.timing import host
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.tables import TraceTables

BACKWARD_NODE = re.compile(r"^autograd::engine::evaluate_function")
DDP_FORWARD = r"^DistributedDataParallel\.forward$"
ALLREDUCE_CALL = r"^c10d::allreduce_$|^nccl:all_reduce$"
ALLREDUCE_WORK = r"^gloo:all_reduce$|^nccl:all_reduce$"
# DDP's own host work per synchronized backward pass: gradients copied into buckets, buckets copied back
REDUCER_WORK = r"reducer::"


@dataclass
class Update:
    """One optimizer step's micro-batches (µs): ``pass_start_us``/``pass_end_us`` per micro-batch (time-sorted),
    ``calls`` the gradient all-reduce calls' ``(starts, ends)``, ``micro_source`` how the micro-batches were found
    (``"backward graph"``, ``"DDP forwards"``, ``"one backward"``)."""

    start_us: float
    end_us: float
    pass_start_us: np.ndarray
    pass_end_us: np.ndarray
    calls: iv.Intervals
    micro_source: str

    @property
    def micro_batches(self) -> int:
        return int(self.pass_start_us.size)

    @property
    def last_start_us(self) -> float:
        """Start of the last micro-batch's backward pass (the end of the update when it has none)."""
        return float(self.pass_start_us[-1]) if self.pass_start_us.size else self.end_us

    @property
    def early(self) -> np.ndarray:
        """Mask of :attr:`calls` issued before the last micro-batch's backward pass."""
        return np.asarray(self.calls[0] < self.last_start_us)

    @property
    def synced_passes(self) -> int:
        """Backward passes that issued at least one gradient all-reduce (one bucket set each)."""
        s, e = self.pass_start_us, self.pass_end_us
        return int(sum(bool(((self.calls[0] >= a) & (self.calls[0] <= b)).any()) for a, b in zip(s, e, strict=True)))


@dataclass
class Accumulation:
    """The updates of a trace (:func:`accumulation`) and the host ranges the check and the what-if read (µs)."""

    updates: list[Update] = field(default_factory=list)
    work: iv.Intervals = field(default_factory=lambda: iv.EMPTY)  # the all-reduce work (gloo/nccl ranges)
    reducer: iv.Intervals = field(default_factory=lambda: iv.EMPTY)  # DDP's Reducer host ops

    def early_spans(self) -> iv.Intervals:
        """Per update, from its first micro-batch's backward to its last one's start: where the all-reduces
        ``no_sync`` removes, and the Reducer work around them, happen."""
        s = [u.pass_start_us[0] for u in self.updates if u.micro_batches >= 2]
        e = [u.last_start_us for u in self.updates if u.micro_batches >= 2]
        return iv.union(np.asarray(s, dtype=np.float64), np.asarray(e, dtype=np.float64))

    def early_tails(self) -> iv.Intervals:
        """Per synchronized backward pass before the last of its update: from the pass's end to the end of the
        Reducer's last op before the next micro-batch's backward (``copy_bucket_to_grad``). DDP's
        ``finalize_backward`` runs there: it waits for the pass's all-reduces, then copies the buckets into
        ``.grad``; the host waits outside any op while the all-reduce runs on the collective's thread."""
        rs, re_ = self.reducer
        starts, ends = [], []
        for u in self.updates:
            for j in range(u.micro_batches - 1):
                lo, hi = float(u.pass_end_us[j]), float(u.pass_start_us[j + 1])
                m = (rs >= lo) & (rs < hi)
                if m.any():
                    starts.append(lo)
                    ends.append(float(re_[m].max()))
        return iv.union(np.asarray(starts, dtype=np.float64), np.asarray(ends, dtype=np.float64))


def smallest_period(names: np.ndarray) -> int:
    """Length of the shortest block whose repetition is exactly ``names`` (``len(names)`` when none is shorter)."""
    n = int(names.size)
    for p in range(1, n // 2 + 1):
        if n % p == 0 and bool((names.reshape(-1, p) == names[:p]).all()):
            return p
    return n


def _backward_nodes(tables: TraceTables) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ts_us, end_us, name_id) of the autograd engine's ``evaluate_function`` ops, time-sorted."""
    ops = tables.cpu_ops
    if len(ops) == 0:
        return np.empty(0), np.empty(0), np.empty(0, dtype=np.int64)
    m = tables.names_matching(BACKWARD_NODE)[ops["name_id"]]
    order = np.argsort(ops["ts_us"][m], kind="stable")
    return ops["ts_us"][m][order], ops["end_us"][m][order], ops["name_id"][m][order]


def _passes(
    bw: tuple[np.ndarray, np.ndarray, np.ndarray], fwd: np.ndarray, lo: float, hi: float
) -> tuple[np.ndarray, np.ndarray, str]:
    """The backward passes inside ``[lo, hi)``: (starts, ends, how they were found)."""
    ts, end, ids = bw
    m = (ts >= lo) & (ts < hi)
    if not m.any():
        return np.empty(0), np.empty(0), "no backward"
    ts, end, ids = ts[m], end[m], ids[m]
    p = smallest_period(ids)
    k = ids.size // p
    if k >= 2:
        starts = ts.reshape(k, p)[:, 0]
        ends = np.maximum.accumulate(end).reshape(k, p)[:, -1]
        return starts, ends, "backward graph"
    f = fwd[(fwd >= lo) & (fwd < hi)]
    if f.size >= 2:  # a graph that changes between micro-batches: the DDP forwards split the backward ops
        k_of = np.searchsorted(f, ts, side="right") - 1
        keep = k_of >= 0
        starts = np.array([ts[keep & (k_of == j)].min() for j in np.unique(k_of[keep])])
        ends = np.array([end[keep & (k_of == j)].max() for j in np.unique(k_of[keep])])
        return starts, ends, "DDP forwards"
    return ts[:1], np.array([end.max()]), "one backward"


def accumulation(tables: TraceTables, windows: tuple[np.ndarray, np.ndarray]) -> Accumulation:
    """The updates inside the analysed step ``windows`` (``(starts, ends)``, µs): per update its micro-batches'
    backward passes and its gradient all-reduce calls (see the module docstring). An update needs a backward pass
    to be listed."""
    ws, we = windows
    out = Accumulation(
        work=host.named(tables, ALLREDUCE_WORK, ("annotations", "cpu_ops")),
        reducer=host.named(tables, REDUCER_WORK, ("cpu_ops", "annotations")),
    )
    if ws.size == 0:
        return out
    lo_all, hi_all = float(ws[0]), float(we[-1])
    opt_s, opt_e = host.ranges_named(tables, host.OPTIMIZER_STEP)
    order = np.argsort(opt_s)
    opt_s, opt_e = opt_s[order], opt_e[order]
    inside = (opt_s >= lo_all) & (opt_s < hi_all)
    if inside.any():
        his = opt_s[inside]
        los = np.concatenate([[lo_all], opt_e[inside][:-1]])
    else:
        los, his = ws.astype(np.float64), we.astype(np.float64)
    bw = _backward_nodes(tables)
    fwd = np.sort(host.ranges_named(tables, DDP_FORWARD)[0])
    cs, ce = host.ranges_named(tables, ALLREDUCE_CALL, ("cpu_ops", "annotations"))
    order = np.argsort(cs)
    cs, ce = cs[order], ce[order]
    for lo, hi in zip(los.tolist(), his.tolist(), strict=True):
        starts, ends, source = _passes(bw, fwd, lo, hi)
        if starts.size == 0:
            continue
        k = np.searchsorted(starts, cs, side="right") - 1
        in_pass = (cs >= lo) & (cs < hi) & (k >= 0) & (cs <= ends[np.maximum(k, 0)])
        out.updates.append(Update(lo, hi, starts, ends, (cs[in_pass], ce[in_pass]), source))
    return out
