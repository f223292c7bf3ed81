"""What-ifs of CPU-only graphs that change how many ops run: chains of elementwise ops fused into one (PD202) and
loops of many small same-shape ops batched into one op per loop body (PD105).

Both are host cuts (:class:`~perfdoctor.replay.simulate.Scenario` ``host_cut``) on the step's process, like the other
CPU what-ifs (:mod:`perfdoctor.replay.transforms.cpu`). The per-op dispatch they keep is measured in the trace
(:func:`dispatch_floor_us`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from perfdoctor.replay.rank import RankReplay
from perfdoctor.replay.simulate import Intervals, Scenario
from perfdoctor.replay.transforms import WhatIf, merge_cuts
from perfdoctor.replay.transforms.cpu import step_span
from perfdoctor.trace import intervals as iv
from perfdoctor.trace.signatures import op_keys
from perfdoctor.trace.tables import Table, TraceTables

# dtype casts and copies are autocast's (PD204), not fusion candidates (perfdoctor/checks/common.py COPY_OPS)
_COPY = re.compile(r"^aten::(copy_|to|_to_copy|_copy_from|_copy_from_and_resize)$")


@dataclass(frozen=True)
class Bandwidth:
    """The memory bandwidth a fused op moves its bytes at (B/s) and where the figure comes from (one phrase);
    ``measured`` False when it is an assumption."""

    bytes_per_s: float
    source: str
    measured: bool


def _thread_ops(tables: TraceTables, pid: int) -> Table:
    """The ops of process ``pid`` sorted by thread, then start, then the longer first (a parent before its child)."""
    ops = tables.cpu_ops
    if not len(ops):
        return ops
    ops = ops.take(np.flatnonzero(ops["pid"] == pid)) if pid >= 0 else ops
    order = np.lexsort((-(ops["end_us"] - ops["ts_us"]), ops["ts_us"], ops["tid"]))
    return ops.take(order)


def _outermost(ops: Table, sel: np.ndarray) -> np.ndarray:
    """Of the rows ``sel`` (bool, ``ops`` sorted as :func:`_thread_ops` sorts), those no other selected row of their
    thread contains (bool)."""
    out = np.zeros(len(ops), dtype=bool)
    for t in np.unique(ops["tid"][sel]).tolist():
        rows = np.flatnonzero(sel & (ops["tid"] == t))
        end = ops["end_us"][rows]
        prior = np.concatenate([[-np.inf], np.maximum.accumulate(end)[:-1]])
        out[rows[end > prior]] = True
    return out


def dispatch_floor_us(tables: TraceTables, pid: int) -> float:
    """The cost of dispatching one op that does next to no work (µs): the shortest outermost op recorded on process
    ``pid`` (0 without ops). Source: this trace; a fused or batched op pays it once."""
    ops = _thread_ops(tables, pid)
    if not len(ops):
        return 0.0
    top = _outermost(ops, np.ones(len(ops), dtype=bool))
    return float((ops["end_us"] - ops["ts_us"])[top].min())


def _is_elementwise(tables: TraceTables) -> np.ndarray:
    """Per name id: an elementwise or normalization aten op that is not a copy or cast (bool)."""
    from perfdoctor.analysis.timing.cpu_breakdown import classify_cpu_op

    return np.array(
        [classify_cpu_op(n) in ("elementwise", "reduction_norm") and not _COPY.match(n) for n in tables.names],
        dtype=bool,
    )


def _breaks_chain(tables: TraceTables) -> np.ndarray:
    """Per name id: an op that ends a chain of elementwise ops when it runs between two of them (bool): an aten op
    that computes something other than an elementwise result. Views and shape bookkeeping (a compiler fuses through
    them) and autograd's own nodes (the wrappers around each backward aten op, and the pass-through nodes of an
    ``add`` whose gradient is its input) do not."""
    return np.array([bool(_BREAKS.match(n)) and not _VIEWS.match(n) for n in tables.names], dtype=bool)


_BREAKS = re.compile(r"^aten::")
_VIEWS = re.compile(
    r"^aten::(view|_unsafe_view|reshape|select|slice|t|transpose|expand|expand_as|as_strided|unsqueeze|squeeze|"
    r"permute|alias|detach|empty|empty_like|empty_strided|result_type|broadcast_tensors|unbind|split|chunk|narrow)$"
)


def _in_backward(tables: TraceTables, ops: Table) -> np.ndarray:
    """Per row of ``ops`` (sorted as :func:`_thread_ops` sorts): it runs inside an autograd node of its thread
    (``autograd::engine::evaluate_function: ...``, the backward pass) (bool)."""
    from perfdoctor.analysis.timing.host import BACKWARD_OP

    inside = np.zeros(len(ops), dtype=bool)
    node = tables.names_matching(BACKWARD_OP)[ops["name_id"]] if len(ops) else inside
    for t in np.unique(ops["tid"][node]).tolist():
        on = np.flatnonzero(ops["tid"] == t)
        nodes = iv.union(ops["ts_us"][on][node[on]], ops["end_us"][on][node[on]])
        inside[on] = iv.containing(ops["ts_us"][on], nodes) >= 0
    return inside


def elementwise_chains(ops: Table, ew: np.ndarray, breaks: np.ndarray, backward: np.ndarray) -> list[np.ndarray]:
    """Chains of two or more elementwise ops run back to back on one thread: the outermost elementwise ops (``ew``:
    bool per row) in order, a chain broken by an op that computes something else (``breaks``: bool per row,
    :func:`_breaks_chain`) running entirely between two of them, and where the ops pass from the forward into the
    backward pass or back (``backward``: bool per row, :func:`_in_backward`; a compiler fuses each pass's graph on
    its own, and the autograd engine's start between them is no op's). An op wrapping the next one (an autograd
    node around its aten op) does not break it. Rows of ``ops`` per chain."""
    chains: list[np.ndarray] = []
    top = _outermost(ops, ew)
    for t in np.unique(ops["tid"][top]).tolist():
        on = ops["tid"] == t
        rows = np.flatnonzero(top & on)
        s, e = ops["ts_us"][rows], ops["end_us"][rows]
        other = np.flatnonzero(on & ~ew & breaks)
        xs, xe = ops["ts_us"][other], ops["end_us"][other]
        nxt = np.searchsorted(s, xs, side="left")
        ok = nxt < rows.size
        inside_gap = ok & (xe <= s[np.minimum(nxt, rows.size - 1)])
        inside_gap &= (nxt == 0) | (xs >= e[np.maximum(nxt - 1, 0)])
        starts = np.zeros(rows.size, dtype=bool)
        starts[0] = True
        starts[nxt[inside_gap]] = True
        starts[1:] |= backward[rows][1:] != backward[rows][:-1]
        for chain in np.split(rows, np.flatnonzero(starts)[1:]):
            if chain.size >= 2:
                chains.append(chain)
    return chains


def _chain_bytes(tables: TraceTables, ops: Table, chain: np.ndarray) -> float | None:
    """Bytes a fused chain moves: every tensor input of its first op, the tensor inputs other than the first of each
    later op (the first is taken as the previous op's output, kept in registers), read once, and the last op's
    output (:func:`_io_bytes`) written once. None when a shape is missing."""
    total = 0.0
    for k, row in enumerate(chain.tolist()):
        io = _io_bytes(ops, row)
        if io is None:
            return None
        inputs, output = io
        total += sum(inputs[0 if k == 0 else 1 :])
        if k == chain.size - 1:
            total += output
    return total


def _io_bytes(ops: Table, row: int) -> tuple[list[float], float] | None:
    """One elementwise op's tensor inputs' bytes (in order) and its output's (the inputs broadcast, at the first
    input's element size); None when a shape is missing or it has no tensor input."""
    from perfdoctor.analysis.work.op_args import parse_args

    args = parse_args(ops["input_dims"][row], ops["input_type"][row])
    if args is None:
        return None
    idx = [i for i in range(len(args.dims)) if args.tensor(i) is not None]
    sizes = [args.nbytes(i) for i in idx]
    size = args.elem_bytes(idx[0]) if idx else None
    if not idx or size is None or any(b is None for b in sizes):
        return None
    shape: tuple[int, ...] = ()
    for i in idx:
        shape = _broadcast(shape, args.tensor(i) or ())
    return [float(b) for b in sizes if b is not None], float(math.prod(shape) * size)


# ops whose arithmetic, not their memory traffic, sets their time on a CPU: a fused loop still computes them
_MATH = re.compile(
    r"^aten::(tanh|tanh_backward|exp|expm1|log|log1p|sqrt|rsqrt|erf|erfc|sigmoid|sigmoid_backward|pow|div|div_|"
    r"reciprocal|gelu|gelu_backward|silu|silu_backward|sin|cos|atan|atan2)$"
)


def _arithmetic_us(
    tables: TraceTables, ops: Table, chain: np.ndarray, bandwidth: Bandwidth, overhead: Intervals, floor_us: float
) -> float:
    """The arithmetic a fused chain keeps (µs): for each op of the chain whose math sets its time (:data:`_MATH`:
    transcendentals, powers, divisions and their backward), its recorded time less the profiler's overhead inside
    it (``overhead``: the host time a profile run's unprofiled step cuts, µs intervals; per-event overhead and
    page faults, :mod:`perfdoctor.replay.unprofiled`), its dispatch (``floor_us``) and its own bytes at
    ``bandwidth``; the other ops' (``mul``, ``add``: one instruction per element) is traffic only."""
    names = tables.names
    total = 0.0
    for row in chain.tolist():
        if not _MATH.match(names[int(ops["name_id"][row])]):
            continue
        io = _io_bytes(ops, row)
        if io is None:
            continue
        nbytes = sum(io[0]) + io[1]
        s, e = float(ops["ts_us"][row]), float(ops["end_us"][row])
        profiler = iv.total(iv.intersect(overhead, iv.union(np.array([s]), np.array([e]))))
        total += max(e - s - profiler - floor_us - nbytes / bandwidth.bytes_per_s * 1e6, 0.0)
    return total


def _kept_until(start_us: float, kept_us: float, overhead: Intervals, end_us: float) -> float:
    """The time (µs) from ``start_us`` at which ``kept_us`` of the unprofiled step has passed: host time the
    unprofiled step cuts (``overhead``, sorted µs intervals) does not count, so a fused op keeps ``kept_us`` in
    that step whatever the profiler's cuts inside its span. At least ``end_us`` once it is past the chain's end
    (``end_us``: nothing is cut then, and the cuts after the chain are not walked)."""
    pos, left = start_us, kept_us
    starts, ends = overhead
    for i in range(int(np.searchsorted(ends, start_us, side="right")), starts.size):
        a, b = float(starts[i]), float(ends[i])
        if a - pos >= left or pos >= end_us:
            break
        left -= max(a - pos, 0.0)
        pos = max(pos, b)
    return pos + left


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy broadcasting of two shapes, taking the larger extent where they disagree (a shape the trace got wrong
    must not stop the estimate)."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    return tuple(max(x, y) for x, y in zip(a, b))


@dataclass(frozen=True)
class Fusion:
    """The fused-chains what-if and what it found: ``fused`` chains cut, ``uncosted`` chains without shapes."""

    whatif: WhatIf
    fused: int
    uncosted: int


def fuse_elementwise_chains(rr: RankReplay, tables: TraceTables, bandwidth: Bandwidth, keep_out: Intervals) -> Fusion:
    """Each chain of back-to-back elementwise/normalization ops on the step's process (:func:`elementwise_chains`)
    becomes one fused op costing the bytes it must move (:func:`_chain_bytes`) at ``bandwidth`` plus one op
    dispatch (:func:`dispatch_floor_us`); the chain's recorded span (its ops and the Python between them) is cut down
    to that cost. A chain whose shapes are not recorded, or whose fused cost is not below its span, keeps its time;
    chains touching ``keep_out`` (µs intervals: the optimizer's and the DataLoader's ops, other fixes') too.

    The fused op also keeps the arithmetic of the chain's math-bound ops (:func:`_arithmetic_us`: a ``tanh``, ``pow``
    or ``div`` costs its instructions in a fused loop too; the profiler's overhead inside them, the host time a
    profile run's ``rr.unprofiled`` step cuts (per-event overhead and the window's extra page faults), is not counted
    as arithmetic). The fused op keeps its cost in that step: its span ends once that much time outside those cuts
    has passed (:func:`_kept_until`), so a chain whose profiled span is mostly the profiler's is not cut twice.

    Assumption: the fused loop streams its tensors once at the machine's memory bandwidth (a tensor that stays in
    cache moves faster, so the cost is an upper bound on the fused op's time) and computes what the math-bound ops
    computed. Source: operator fusion as torch.compile's C++/OpenMP backend does it; bytes from the recorded shapes
    and dtypes; the bandwidth as ``bandwidth.source`` says; the arithmetic from the ops' recorded times
    (examples/mlp.py --norm hand vs compiled: a chain holding tanh, pow and div saved no time compiled, where
    streaming its bytes alone replayed a 25 ms saving of a 30.7 ms step).
    """
    pid = rr.windows.pid
    ops = _thread_ops(tables, pid)
    ew = _is_elementwise(tables)[ops["name_id"]] if len(ops) else np.zeros(0, dtype=bool)
    d = dispatch_floor_us(tables, pid)
    span = step_span(rr)
    cut_s: list[float] = []
    cut_e: list[float] = []
    n_chains = n_ops = uncosted = 0
    breaks = _breaks_chain(tables)[ops["name_id"]] if len(ops) else np.zeros(0, dtype=bool)
    u = rr.unprofiled
    overhead = u.whatif.scenario.host_cut.get(pid, iv.EMPTY) if u is not None and u.whatif is not None else iv.EMPTY
    arith_total = 0.0
    for chain in elementwise_chains(ops, ew, breaks, _in_backward(tables, ops)):
        s0, e1 = float(ops["ts_us"][chain[0]]), float(ops["end_us"][chain[-1]])
        if iv.total(iv.intersect(iv.union(np.array([s0]), np.array([e1])), keep_out)) > 0:
            continue
        if iv.total(iv.intersect(iv.union(np.array([s0]), np.array([e1])), span)) < e1 - s0:
            continue  # a chain across a step boundary is not cut
        nbytes = _chain_bytes(tables, ops, chain)
        if nbytes is None:
            uncosted += 1
            continue
        arith = _arithmetic_us(tables, ops, chain, bandwidth, overhead, d)
        fused_us = nbytes / bandwidth.bytes_per_s * 1e6 + arith + d
        # the fused op keeps fused_us of the step the saving is stated for: past the profiler's cuts in its span
        until = _kept_until(s0, fused_us, overhead, e1)
        if until < e1:
            cut_s.append(until)
            cut_e.append(e1)
            n_chains += 1
            n_ops += chain.size
            arith_total += arith
    cut = iv.union(np.array(cut_s), np.array(cut_e))
    whatif = WhatIf(
        "fused-elementwise",
        Scenario("fused-elementwise", host_cut={pid: cut} if cut_s else {}),
        f"{n_chains} chains of back-to-back elementwise/norm ops ({n_ops} ops) each fused into one op that reads its "
        f"inputs once and writes its output once at {bandwidth.bytes_per_s / 1e9:.1f} GB/s ({bandwidth.source}), "
        f"plus one {d:.1f} µs op dispatch (the shortest op in the trace)"
        + (
            f", and the arithmetic of their math-bound ops (tanh, pow, div...: {arith_total / 1e3:.2f} ms in the "
            "analysed steps, their recorded time less their own bytes, dispatch and profiler overhead)"
            if arith_total > 0
            else ""
        )
        + (f"; {uncosted} chains without recorded shapes keep their time" if uncosted else ""),
        "operator fusion (torch.compile, C++/OpenMP on CPU); bytes from the recorded shapes",
    )
    return Fusion(whatif, n_chains, uncosted)


@dataclass(frozen=True)
class OpLoop:
    """A loop of ``iterations`` repeats of a body of ``body_ops`` same-shape outermost ops, on one thread: its span
    ``start_us``–``end_us``, the ops' time ``ops_us`` and the time dispatching them (and the ops inside them) costs,
    ``dispatch_us`` (all µs)."""

    start_us: float
    end_us: float
    iterations: int
    body_ops: int
    ops_us: float
    dispatch_us: float


# an optimizer's per-parameter loop (torch.optim's single-tensor implementations: ~10 ops per parameter, a weight
# and a bias per module) is batched by its multi-tensor implementation; a loop body that long elsewhere may be a
# stack of layers, each feeding the next, which no batching removes
OPTIMIZER_STEP = r"^Optimizer\.step#"
MAX_OPTIMIZER_BODY = 32


def op_loops(
    tables: TraceTables, pid: int, min_iterations: int, max_body: int = 4, long_body_spans: Intervals | None = None
) -> list[OpLoop]:
    """Loops of many same-shape small ops on process ``pid``: runs of outermost ops on a thread where each op repeats
    the op ``p`` places before it (same name, same recorded shapes) for at least ``min_iterations`` repeats of a body
    of ``p`` ≤ ``max_body`` ops, or ≤ :data:`MAX_OPTIMIZER_BODY` for a loop inside one of ``long_body_spans`` (µs;
    the optimizer's steps) (shortest bodies first; an op belongs to one loop). Each op's dispatch is the
    :func:`dispatch_floor_us` per op it dispatches (itself and the ops inside it)."""
    ops = _thread_ops(tables, pid)
    if not len(ops):
        return []
    d = dispatch_floor_us(tables, pid)
    top = _outermost(ops, np.ones(len(ops), dtype=bool))
    loops: list[OpLoop] = []
    longest = MAX_OPTIMIZER_BODY if long_body_spans is not None and long_body_spans[0].size else max_body
    for t in np.unique(ops["tid"][top]).tolist():
        on = np.flatnonzero(ops["tid"] == t)
        rows = np.flatnonzero(top & (ops["tid"] == t))
        keys = op_keys(ops, rows)
        s, e = ops["ts_us"][rows], ops["end_us"][rows]
        inside = np.searchsorted(ops["ts_us"][on], e, side="left") - np.searchsorted(ops["ts_us"][on], s, side="left")
        taken = np.zeros(rows.size, dtype=bool)
        for p in range(1, longest + 1):
            same = np.concatenate([np.zeros(p, dtype=bool), keys[p:] == keys[:-p]]) if rows.size > p else None
            if same is None:
                break
            edges = np.flatnonzero(np.diff(np.concatenate([[0], same.astype(np.int8), [0]])))
            for a, b in zip(edges[::2].tolist(), edges[1::2].tolist()):
                lo, hi = a - p, b  # ops [lo, hi): the first body and its repeats
                n = (hi - lo) // p
                hi = lo + n * p
                if n < min_iterations or taken[lo:hi].any():
                    continue
                if p > max_body and not _within(float(s[lo]), float(e[hi - 1]), long_body_spans):
                    continue
                taken[lo:hi] = True
                loops.append(
                    OpLoop(
                        float(s[lo]),
                        float(e[hi - 1]),
                        n,
                        p,
                        float((e[lo:hi] - s[lo:hi]).sum()),
                        float(inside[lo:hi].sum()) * d,
                    )
                )
    return sorted(loops, key=lambda lp: lp.start_us)


# smallest work an op must do, and shortest time, for its rate to measure the machine rather than the op's fixed
# cost or the clock's resolution
_RATE_MIN_FLOP = 1e6
_RATE_MIN_BYTES = 1e6
_RATE_MIN_US = 20.0
_STREAMING = ("elementwise", "reduction", "norm")


@dataclass(frozen=True)
class WorkRates:
    """The highest rates this trace's own ops reached, each op counted once (the outermost op with a cost formula,
    not the ops it calls): ``flop_per_us`` of matmul-kind ops doing at least 1 MFLOP, ``bytes_per_us`` of
    elementwise, reduction and norm ops moving at least 1 MB, both over ops of at least 20 µs (0 when none
    qualifies). A batched op is assumed to do its work at these rates: the machine's best shown in the trace."""

    flop_per_us: float
    bytes_per_us: float


@dataclass(frozen=True)
class _Work:
    """Per row of a process's ops (sorted as :func:`_thread_ops` sorts): FLOPs, bytes (recorded shapes, 0 without a
    formula), the cost kind ("" without one), and whether it is the outermost costed op (bool)."""

    flops: np.ndarray
    nbytes: np.ndarray
    kind: np.ndarray
    counted: np.ndarray


def _work(tables: TraceTables, ops: Table) -> _Work:
    """The :class:`_Work` of ``ops`` from :func:`perfdoctor.analysis.work.op_flops.cost_op`."""
    from perfdoctor.analysis.work.op_flops import Uncosted, cost_op

    n = len(ops)
    flops, nbytes, kind = np.zeros(n), np.zeros(n), np.full(n, "", dtype=object)
    for row in range(n):
        c = cost_op(
            tables.names[int(ops["name_id"][row])], ops["input_dims"][row], ops["input_type"][row],
            ops["concrete_inputs"][row],
        )  # fmt: skip
        if not isinstance(c, Uncosted):
            flops[row], nbytes[row], kind[row] = c.flops, c.bytes or 0.0, c.kind
    costed = kind != ""
    return _Work(flops, nbytes, kind, _outermost(ops, costed) & costed if n else costed)


def _process_work(tables: TraceTables, pid: int) -> tuple[Table, _Work]:
    """Process ``pid``'s ops (:func:`_thread_ops`) and their :class:`_Work`, costed once per trace and process (a
    Python pass over every op: the what-ifs that read them share it)."""
    memo: dict[int, tuple[Table, _Work]] = tables.__dict__.setdefault("_process_work", {})
    if pid not in memo:
        ops = _thread_ops(tables, pid)
        memo[pid] = (ops, _work(tables, ops))
    return memo[pid]


def work_rates(tables: TraceTables, pid: int) -> WorkRates:
    """The :class:`WorkRates` of process ``pid``'s ops (FLOP/µs, bytes/µs). Source: this trace's op times and
    recorded shapes."""
    ops, w = _process_work(tables, pid)
    if not len(ops):
        return WorkRates(0.0, 0.0)
    dur = ops["end_us"] - ops["ts_us"]
    ok = w.counted & (dur >= _RATE_MIN_US)
    mm = ok & (w.kind == "matmul") & (w.flops >= _RATE_MIN_FLOP)
    mem = ok & np.isin(w.kind, _STREAMING) & (w.nbytes >= _RATE_MIN_BYTES)
    return WorkRates(
        float((w.flops[mm] / dur[mm]).max()) if mm.any() else 0.0,
        float((w.nbytes[mem] / dur[mem]).max()) if mem.any() else 0.0,
    )


def loop_work_us(tables: TraceTables, pid: int, lp: OpLoop, rates: WorkRates) -> float | None:
    """The time the loop's work takes at ``rates`` (µs): its matmuls' FLOPs ÷ ``flop_per_us`` plus its other costed
    ops' bytes ÷ ``bytes_per_us`` (each op counted once, :class:`WorkRates`); None when a rate it needs is unknown."""
    ops, w = _process_work(tables, pid)
    inside = (ops["ts_us"] >= lp.start_us) & (ops["end_us"] <= lp.end_us) & w.counted
    mm = inside & (w.kind == "matmul")
    need_flop, need_bytes = float(w.flops[mm].sum()), float(w.nbytes[inside & ~mm].sum())
    if (need_flop > 0 and rates.flop_per_us <= 0) or (need_bytes > 0 and rates.bytes_per_us <= 0):
        return None
    flop_us = need_flop / rates.flop_per_us if need_flop else 0.0
    return flop_us + (need_bytes / rates.bytes_per_us if need_bytes else 0.0)


def _within(start_us: float, end_us: float, spans: Intervals | None) -> bool:
    """[start_us, end_us] lies inside one of ``spans``."""
    if spans is None or not spans[0].size:
        return False
    k = iv.containing(np.array([start_us, end_us]), spans)
    return bool(k[0] >= 0 and k[0] == k[1])


def batch_op_loops(rr: RankReplay, tables: TraceTables, loops: list[OpLoop], gap_us: float) -> WhatIf:
    """Each loop of same-shape small ops (:func:`op_loops`) becomes one batched op per op of its body (the per-head
    ``Linear`` modules of a Python loop become one batched ``einsum``). The batched ops take one iteration's recorded
    time (its dispatch and each op's fixed cost, paid once) plus the other ``n − 1`` iterations' work at the best
    rates this trace's ops reached (:func:`loop_work_us`: FLOPs and bytes from the recorded shapes), plus ``gap_us``
    (the typical gap between ops) before each batched op after the first; never more than the loop with only its
    dispatch gone (``ops_us − dispatch_us × (n − 1) / n``), which is what is assumed where a loop's work has no
    rate. The loop's span is cut down to that.

    Assumption: a small op's recorded time is mostly its fixed cost (argument checks, allocation, autograd
    bookkeeping, a thread-pool hand-off), which a batched op pays once; its work runs at the trace's best rates.
    Source: the recorded host timeline (µs): the loop's op count, shapes, times and gaps.
    """
    pid = rr.windows.pid
    span = step_span(rr)
    rates = work_rates(tables, pid)
    cut_s: list[float] = []
    cut_e: list[float] = []
    removed = 0.0
    for lp in loops:
        if iv.total(iv.intersect(iv.union(np.array([lp.start_us]), np.array([lp.end_us])), span)) <= 0:
            continue
        n = lp.iterations
        batched = lp.ops_us - lp.dispatch_us * (n - 1) / n
        work = loop_work_us(tables, pid, lp, rates)
        if work is not None:
            batched = min(batched, lp.ops_us / n + work * (n - 1) / n)
        batched += gap_us * (lp.body_ops - 1)
        if batched < lp.end_us - lp.start_us:
            cut_s.append(lp.start_us + max(batched, 0.0))
            cut_e.append(lp.end_us)
            removed += lp.end_us - lp.start_us - max(batched, 0.0)
    cut = iv.intersect(iv.union(np.array(cut_s), np.array(cut_e)), span)
    text = "; ".join(f"{lp.iterations}×{lp.body_ops} ops" for lp in loops[:4]) + ("; ..." if len(loops) > 4 else "")
    return WhatIf(
        "batch-op-loops",
        Scenario("batch-op-loops", host_cut={pid: cut} if cut_s else {}),
        f"{len(loops)} loop(s) of same-shape small ops ({text}) batched into one op per loop-body op: each takes one "
        f"iteration's recorded time (the ops' fixed cost, paid once) and the other iterations' work at the best "
        f"rates this trace's ops reached ({rates.flop_per_us / 1e3:.1f} GFLOP/s for matmuls, "
        f"{rates.bytes_per_us / 1e3:.1f} GB/s for the rest; FLOPs and bytes from the recorded shapes), never more "
        f"than the loop with only its dispatch gone; {removed:.0f} µs of loop time over the trace go",
        "replay of the recorded host timeline (CPU-only trace): the loop's op count, shapes, times and gaps",
    )


def python_and_dispatch(rr: RankReplay, tables: TraceTables, min_iterations: int) -> tuple[WhatIf, list[OpLoop]]:
    """PD105's what-if: the Python outside ops trimmed to the median gap
    (:func:`perfdoctor.replay.transforms.cpu.trim_python_outside_ops`) outside the loops of at least
    ``min_iterations`` same-shape small ops outside DataLoader fetches (longer bodies inside ``Optimizer.step``: its
    per-parameter loop), and
    those loops batched (:func:`batch_op_loops`), which removes their ops' fixed cost as well as the Python between
    them. Returns the what-if and the loops."""
    from perfdoctor.analysis.timing import host
    from perfdoctor.replay.transforms.cpu import median_gap_us, outside_ops, trim_python_outside_ops
    from perfdoctor.replay.transforms.host import DATALOADER, _named

    loops = op_loops(tables, rr.windows.pid, min_iterations, long_body_spans=host.named(tables, OPTIMIZER_STEP))
    # a DataLoader fetch's per-sample loop (``__getitem__`` indexing each sample) is PD101's: its fix moves the fetch
    # to workers or batches it in the Dataset, not in the training loop
    fetch = _named(tables, DATALOADER, rr.windows.pid)
    loops = [lp for lp in loops if not _within(lp.start_us, lp.end_us, fetch)]
    spans = iv.union(np.array([lp.start_us for lp in loops]), np.array([lp.end_us for lp in loops]))
    trim = trim_python_outside_ops(rr, tables, exclude=spans)
    if not loops:
        return trim, loops
    batch = batch_op_loops(rr, tables, loops, median_gap_us(outside_ops(rr, tables)))
    cut = merge_cuts(trim.scenario.host_cut, batch.scenario.host_cut)
    return (
        WhatIf(
            "trim-python-outside-ops",
            Scenario("trim-python-outside-ops", host_cut=cut),
            f"{trim.assumption} (outside the loops below); {batch.assumption}",
            trim.source,
        ),
        loops,
    )


def _scales(shape: tuple[int, ...], rows: int) -> bool:
    """A tensor of ``shape`` grows with the batch: a dimension, or the product of all but its last or all but its
    first dimensions, equals the GEMMs' row count ``rows`` (the batch, or batch × sequence, flattened)."""
    if not shape:
        return False
    return rows in shape or math.prod(shape[:-1]) == rows or math.prod(shape[1:]) == rows


def _has_batch_dim(tables: TraceTables, ops: Table, row: int, rows: int) -> bool:
    """An op's recorded input shapes hold the batch dimension (:func:`_scales`)."""
    from perfdoctor.analysis.work.op_args import parse_args

    args = parse_args(ops["input_dims"][row], ops["input_type"][row])
    if args is None:
        return False
    return any(_scales(s, rows) for s in (args.tensor(i) for i in range(len(args.dims))) if s is not None)


def _roofline_growth(tables: TraceTables, ops: Table, row: int, rows: int, growth: float, rates: WorkRates) -> float:
    """The factor an op's time grows by with a ``growth``× larger batch (1 to ``growth``): its roofline time
    (FLOPs ÷ ``flop_per_us``, bytes ÷ ``bytes_per_us``, the larger) at the larger batch ÷ now, where the FLOPs and the
    bytes of its tensors that have a batch dimension (:func:`_scales`) grow and the rest (weights) do not; ``growth``
    where the op's shapes or a rate are unknown (its time follows the batch)."""
    from perfdoctor.analysis.work.op_args import parse_args
    from perfdoctor.analysis.work.op_flops import Uncosted, cost_op

    name = tables.names[int(ops["name_id"][row])]
    cost = cost_op(name, ops["input_dims"][row], ops["input_type"][row], ops["concrete_inputs"][row])
    args = parse_args(ops["input_dims"][row], ops["input_type"][row])
    if isinstance(cost, Uncosted) or args is None or cost.bytes is None:
        return growth
    fixed = grows = 0.0
    shapes = [args.tensor(i) for i in range(len(args.dims))]
    for i, shape in enumerate(shapes):
        b = args.nbytes(i)
        if shape is None or b is None:
            continue
        if _scales(shape, rows):
            grows += b
        else:
            fixed += b
    out = max(cost.bytes - fixed - grows, 0.0)  # the output: it has a batch dimension when an input has one
    first, last = shapes[0] if shapes else None, shapes[-1] if shapes else None
    out_grows = grows > 0 and (
        cost.kind != "matmul" or bool(first and first[0] == rows) or bool(last and last[-1] == rows)
    )
    grows, fixed = (grows + out, fixed) if out_grows else (grows, fixed + out)
    flop_g = growth if grows > 0 else 1.0
    now = later = 0.0
    if rates.flop_per_us > 0 and cost.flops > 0:
        now, later = cost.flops / rates.flop_per_us, cost.flops * flop_g / rates.flop_per_us
    if rates.bytes_per_us > 0:
        now = max(now, (fixed + grows) / rates.bytes_per_us)
        later = max(later, (fixed + grows * growth) / rates.bytes_per_us)
    if now <= 0:
        return growth
    return float(min(max(later / now, 1.0), growth))


def batch_growth_cuts(
    tables: TraceTables,
    pid: int,
    rows: int,
    growth: float,
    within: Intervals,
    exclude: Intervals,
    gemm_keep: float | None = None,
) -> tuple[Intervals, WorkRates]:
    """For a CPU-only run's ``growth``× larger batch, per step of today's batch: each outermost costed op of
    process ``pid`` inside ``within`` and outside ``exclude`` (µs; the optimizer's steps) keeps its recorded time ×
    its :func:`_roofline_growth` ÷ ``growth``, or, for a GEMM with a batch dimension when ``gemm_keep`` is given
    (the share of its time a sample keeps, measured by the runner on this machine: ``batch_probe``), that share;
    returns the cut tails of those ops (µs intervals) and the rates used. ``rows``: the GEMMs' row count (the batch
    dimension's size). A GEMM reading weights much larger than its activations grows less than the batch; one
    bound by its FLOPs grows with it; one with few rows runs at a lower FLOP rate than a larger one, which only a
    measurement shows."""
    ops, w = _process_work(tables, pid)
    rates = work_rates(tables, pid)
    if not len(ops) or rows <= 0 or growth <= 1.0:
        return iv.EMPTY, rates
    mid = (ops["ts_us"] + ops["end_us"]) / 2
    inside = iv.containing(mid, within) >= 0
    outside_ex = iv.containing(mid, exclude) < 0 if exclude[0].size else np.ones(len(ops), dtype=bool)
    rows_sel = np.flatnonzero(w.counted & inside & outside_ex)
    starts: list[float] = []
    ends: list[float] = []
    for row in rows_sel.tolist():
        if gemm_keep is not None and w.kind[row] == "matmul" and _has_batch_dim(tables, ops, row, rows):
            keep = min(max(gemm_keep, 1.0 / growth), 1.0)
        else:
            keep = _roofline_growth(tables, ops, row, rows, growth, rates) / growth
        if keep < 1.0:
            t0, t1 = float(ops["ts_us"][row]), float(ops["end_us"][row])
            starts.append(t0 + (t1 - t0) * keep)
            ends.append(t1)
    return iv.union(np.array(starts), np.array(ends)), rates
