"""The shared joins of a trace (perfdoctor.trace.join): rows worked out by hand from a TraceBuilder trace."""

from __future__ import annotations

import numpy as np
from tracebuilder import TraceBuilder

from perfdoctor.trace import load_trace
from perfdoctor.trace.join import external_id_ranges, external_id_rows, has_activity, launch_rows, launched_rows


def test_joins_by_correlation_and_external_id(tmp_path):
    # cpu_ops by start: aten::mm (ext 7) at 10, aten::add (ext 9) at 20, aten::mul (ext 7 again) at 30
    # runtime by start: cudaLaunchKernel (corr 1001, its kernel k1) at 12, cudaLaunchKernel (corr 1002, no kernel)
    # at 22, cudaMemcpyAsync (corr 1003, its memcpy) at 24; a kernel k0 with no runtime call (corr 1004)
    tb = TraceBuilder()
    tb.cpu_op("aten::mm", 10, 5, external_id=7)
    tb.cpu_op("aten::add", 20, 5, external_id=9)
    tb.cpu_op("aten::mul", 30, 5, external_id=7)
    tb.launch("k1", launch_ts=12, start=40, dur=5)
    tb.runtime("cudaLaunchKernel", 22, 1)
    tb.memcpy(launch_ts=24, start=50, dur=5)
    tb.kernel("k0", start=60, dur=5)
    t = load_trace(str(tb.write(tmp_path / "t.json")))
    # ext 7: the first op in start order (row 0); 9: row 1; 8 none; 0 and -1 are "no id", never joined
    assert external_id_rows(t, np.array([7, 9, 8, 0, -1])).tolist() == [0, 1, -1, -1, -1]
    # every op with each id, in start order: ext 7 -> rows 0 and 2 (aten::mm, then aten::mul); 9 -> row 1; none else
    order, lo, hi = external_id_ranges(t, np.array([7, 9, 8, 0, -1]))
    assert [order[a:b].tolist() for a, b in zip(lo, hi)] == [[0, 2], [1], [], [], []]
    assert launch_rows(t, "kernels").tolist() == [0, -1]  # k1 <- runtime row 0; k0 has no call
    assert launched_rows(t, "memcpy").tolist() == [2] and launched_rows(t, "kernels", np.array([1])).tolist() == []
    assert has_activity(t).tolist() == [True, False, True]
