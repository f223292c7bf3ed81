"""Helpers for rule tests: run the engine on TraceBuilder traces."""

from __future__ import annotations

from perfdoctor import pipeline
from perfdoctor.checks import engine
from perfdoctor.checks.catalogue import load_catalogue

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
    """Run the rules ``codes`` on trace files ``paths``; returns a :class:`Result`."""
    analysis = pipeline.analyze_paths([str(p) for p in paths], hash_inputs=False)
    cat = load_catalogue(list(rules_dirs))
    return Result(engine.run_checks(analysis, cat, engine.select_codes(cat, codes, None)))


def run_tb(tb, tmp_path, codes, name="t.json", rules_dirs=()):
    return run_rules([tb.write(tmp_path / name)], codes, rules_dirs)
