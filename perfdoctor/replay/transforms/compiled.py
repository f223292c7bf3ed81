"""Transformations of torch.compile programs: the graphs of a step merged into one (no graph breaks), and no
recompilation in the steady state.

Both are host cuts (:class:`~perfdoctor.replay.simulate.Scenario` ``host_cut``) of intervals measured by
:mod:`perfdoctor.analysis.timing.compiled`: the replay squeezes them out of the step's process and lets the device work
queued after them start earlier where it waited for the host.
"""

from __future__ import annotations

from perfdoctor.replay.rank import RankReplay
from perfdoctor.replay.simulate import Scenario
from perfdoctor.replay.transforms import WhatIf
from perfdoctor.trace import intervals as iv


def _pid(rr: RankReplay, pid: int) -> int:
    return rr.windows.pid if rr.windows.pid >= 0 else pid


def merge_graphs(rr: RankReplay, overhead: iv.Intervals, pid: int, breaks: float, eager_ops: str) -> WhatIf:
    """Each graph break's entry into one more compiled graph goes: per break, the resume frame's
    ``TorchDynamo Cache Lookup`` (its guards) and its ``Torch-Compiled Region`` time outside its graph calls and
    eager ops (Dynamo's bytecode, AOTAutograd's runtime wrapper prologue and epilogue), ``overhead`` (µs intervals
    on process ``pid``: :attr:`perfdoctor.analysis.timing.compiled.CompiledSteps.overhead_cut`).

    Assumption: the code that broke the graph is rewritten so that Dynamo traces it (a value kept on the device, a
    print moved out of the compiled function), and the step runs one graph per entry. The eager ops between the
    graphs keep their time, and so do the graphs' device work and the backward's extra graph boundaries: a lower
    bound, since one graph also lets Inductor fuse across the old boundaries. Source: the trace's own Dynamo and
    AOTAutograd spans (torch/_dynamo/eval_frame.py, torch/_functorch/_aot_autograd/runtime_wrappers.py).
    """
    who = _pid(rr, pid)
    return WhatIf(
        "merge-compiled-graphs",
        Scenario("merge-compiled-graphs", host_cut={who: overhead} if overhead[0].size else {}, peers_move=True),
        f"the {breaks:g} graph break(s) per step gone: each break's cache lookup and the resumed graph's Dynamo and "
        f"AOTAutograd wrapper time leave the step; the eager ops between the graphs ({eager_ops}) and the graphs' "
        "own work stay (a lower bound: one graph also fuses across the old boundaries)",
        "the trace's TorchDynamo Cache Lookup and Torch-Compiled Region spans",
    )


def no_recompiles(rr: RankReplay, compile_cut: iv.Intervals, pid: int) -> WhatIf:
    """The compilation inside the analysed steps goes (``compile_cut``, µs intervals on process ``pid``:
    :attr:`perfdoctor.analysis.timing.compiled.Recompiles.cut`): the ``(dynamo_timed)`` and Inductor/AOT compile spans,
    and the cache lookups that ran them.

    Assumption: the guard that failed holds again (shapes marked dynamic or padded to a few buckets, a Python
    scalar passed as a tensor), so the frame's cached graph runs instead; running it costs what the step's other
    calls of it cost, already in the recording. Source: the trace's compile spans.
    """
    who = _pid(rr, pid)
    return WhatIf(
        "no-recompiles",
        Scenario("no-recompiles", host_cut={who: compile_cut} if compile_cut[0].size else {}, peers_move=True),
        "no recompilation in the steady state: the compile spans inside the analysed steps leave them, the "
        "cached graph runs instead",
        "the trace's Dynamo/Inductor compile spans ((dynamo_timed) annotations, compile ops, the cache lookups "
        "that ran them)",
    )


def no_rerecording(rr: RankReplay, record_cut: iv.Intervals, api: str) -> WhatIf:
    """The CUDA-graph recordings inside the analysed steps go (``record_cut``, µs intervals on the step's process:
    :attr:`perfdoctor.analysis.timing.compiled.GraphRecording.cut`): cudagraph trees' ``CUDAGraphNode.record`` ranges,
    stream captures and ``cudaGraphInstantiate`` calls.

    Assumption: the graph recorded once is replayed (its inputs keep their shapes and addresses), at the cost of
    the step's other graph launches, already in the recording. The kernels launched while capturing did not run
    (a capture only records them), so no device work is removed. Source: the trace's recording spans; CUDA
    Graphs (stream capture, instantiate, launch).
    """
    pid = rr.windows.pid
    return WhatIf(
        "no-rerecording",
        Scenario("no-rerecording", host_cut={pid: record_cut} if record_cut[0].size and pid >= 0 else {}),
        f"no {api} recorded in the steady state: the recordings inside the analysed steps leave them, the graph "
        "recorded before is replayed instead",
        "the trace's CUDAGraphNode.record ranges, stream captures and graph instantiations",
    )
