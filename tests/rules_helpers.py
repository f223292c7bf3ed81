"""Helpers for rule tests: run the engine on TraceBuilder traces."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from tracebuilder import TraceBuilder

from perfdoctor import pipeline
from perfdoctor.analysis.rank import Analysis
from perfdoctor.checks.config import RuleOptions
from perfdoctor.checks.context import JobContext

SGEMM = "volta_sgemm_128x64_nn"
HGEMM = "volta_h884gemm_64x128_ldg8_nn"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)"
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


class Result:
    """Findings and skips by code, plus the engine's metrics."""

    def __init__(self, res) -> None:
        self.res = res
        self.report = res.to_report()
        self.findings = {f["code"]: f for f in self.report["findings"]}
        self.skipped = {s["code"]: s["reason"] for s in self.report["skipped_checks"]}
        self.passed = set(self.report["passed_checks"])

    def metrics(self, code: str, rank: str = "0") -> dict:
        return self.res.metrics[code][rank]


def run_rules(paths, codes, rules_dirs=()):
    """The findings of the rules ``codes`` on trace files ``paths`` as ``perfdoctor report PATHS --select CODES``
    makes them (the production path: every rule runs, the selection is shown); returns a :class:`Result`."""
    opts = RuleOptions(select=list(codes) if codes else None, rules_dirs=[str(d) for d in rules_dirs])
    built = pipeline.build([str(p) for p in paths], rule_options=opts)
    return Result(built.checks)


def run_tb(tb, tmp_path, codes, name="t.json", rules_dirs=()):
    return run_rules([tb.write(tmp_path / name)], codes, rules_dirs)


# -- run-data rules (PD601, PD602, PD603): steady state and step-time series ------------


def run_analysis(run=None, run_json=None):
    """A job's analysis without ranks: the run directory's data ``run`` (a RunData, or an object with the fields the
    rule reads) or a worker's ``run.json`` alone (``run_json``)."""
    return Analysis(ranks=[], inputs=[], run=run, run_facts=run_json)


def job(ss, run_json=None, **th):
    """A job context over steady state ``ss`` (run data only), thresholds ``th``."""
    analysis = run_analysis(SimpleNamespace(steady_state=ss, run=run_json or {}, steps={}))
    return JobContext(analysis, [], SimpleNamespace(thresholds=th))


def series(levels, noise=0.01, seed=0):
    """Step times: ``(count, seconds)`` levels with relative Gaussian noise, seeded."""
    rng = np.random.default_rng(seed)
    d = np.concatenate([np.full(n, v) for n, v in levels])
    return d * (1 + noise * rng.standard_normal(d.size))


def run_job(d, ss, window=None, **th):
    """A job context over step times ``d`` and steady state ``ss``; ``window`` marks the profiled steps."""
    phase = np.where(window, "active", "none") if window is not None else np.full(d.size, "none")
    analysis = run_analysis(SimpleNamespace(steady_state=ss, run={}, steps={"duration_s": d, "profiler_phase": phase}))
    return JobContext(analysis, [], SimpleNamespace(thresholds=th))


# -- traces several rule files share ----------------------------------------------------------------------


def few_kernels_trace():
    """16 kernels of 5 µs, one per 50 µs host op: the device waits for every launch."""
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    for i in range(16):
        tb.cpu_op("aten::add", 50 * i, 50)
        tb.launch(ADD, launch_ts=50 * i + 10, start=50 * i + 20, dur=5)
    return tb


def gloo_trace(overlap: bool):
    """CPU-only, 2 steps of 1000 µs: an mm, then a 600 µs gloo all_reduce of 250,000 floats (1 MB)."""
    tb = TraceBuilder(device_name=None)
    for n in range(2):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        tb.cpu_op("aten::mm", s, 900 if overlap else 300)
        tb.events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "gloo:all_reduce",
                "pid": tb.pid,
                "tid": 200,
                "ts": s + 300,
                "dur": 600,
                "args": {"External id": 900 + n, "Input Dims": [[250000]], "Input type": ["float"]},
            }
        )
    return tb
