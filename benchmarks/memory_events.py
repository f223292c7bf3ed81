#!/usr/bin/env python3
"""What reading memory over the step costs `perfdoctor report`: the same trace with and without it.

Makes a ~460 MB (uncompressed) trace from the real A100 MoE trace recorded with ``profile_memory=True``
(../shared/traces/switchtransformers__a100_moe_profile_memory.json.gz, 155 copies: 1.71 M events, 166 k
``[memory]`` events) with ../shared/tools/scale_trace.py (cached in --data-dir, default benchmarks/_data/), and
times ``perfdoctor report TRACE`` as a whole process, alternating:

- with: perfdoctor as it is (the ``Addr`` column read, :func:`perfdoctor.analysis.memory.memory_steps.memory_over_steps`
  run, the section rendered);
- without: the same code with the ``Addr`` field taken out of the trace schema before anything is decoded and
  ``memory_over_steps`` answering ``[]`` (what perfdoctor did before memory over the step).

Prints wall and CPU seconds (best of --repeat, CPU of the best-wall run) and the ratio with ÷ without. Target
(the target): at most 1.10. On a shared machine compare the CPU seconds; run both sides in one invocation.

Usage: python benchmarks/memory_events.py [--data-dir DIR] [--repeat 3] [--trace TRACE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trace_load import TRACES, run_child

SOURCE = TRACES / "switchtransformers__a100_moe_profile_memory.json.gz"

WITH = """
import sys
from perfdoctor.cli import main
sys.argv = ["perfdoctor", "report", sys.argv[1]]
main()
"""
# the fields module loaded and edited before perfdoctor.trace (whose modules build the schema from it) is imported
WITHOUT = """
import importlib.util, pathlib, sys
import perfdoctor
spec = importlib.util.spec_from_file_location(
    "perfdoctor.trace.fields", pathlib.Path(perfdoctor.__file__).parent / "trace" / "fields.py"
)
fields = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = fields
spec.loader.exec_module(fields)
fields.ARG_FIELDS = tuple(f for f in fields.ARG_FIELDS if f.key != "Addr")
from perfdoctor.model import build
build.memory_over_steps = lambda tables, steps: []
from perfdoctor.cli import main
sys.argv = ["perfdoctor", "report", sys.argv[1]]
main()
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, default=Path(__file__).resolve().parent / "_data")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trace", type=Path, default=None, help="time this trace instead of the scaled one")
    args = ap.parse_args()
    from trace_load import make_trace

    trace = args.trace or make_trace(SOURCE, 500, args.data_dir)
    best: dict[str, tuple[float, float, str]] = {}
    for i in range(args.repeat):
        for label, code in (("with", WITH), ("without", WITHOUT)):
            wall, _, tail, cpu, _ = run_child(code, str(trace))
            print(f"run {i + 1} {label:8s} wall {wall:6.2f} s  CPU {cpu:6.2f} s", flush=True)
            if label not in best or wall < best[label][0]:
                best[label] = (wall, cpu, tail)
    (w1, c1, _), (w0, c0, _) = best["with"], best["without"]
    print(f"\n{trace.name}")
    print(f"with memory over the step:    wall {w1:6.2f} s  CPU {c1:6.2f} s")
    print(f"without:                      wall {w0:6.2f} s  CPU {c0:6.2f} s")
    print(f"ratio with ÷ without:         wall {w1 / w0:.3f}   CPU {c1 / c0:.3f}")


if __name__ == "__main__":
    main()
