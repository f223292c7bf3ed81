"""What each rule reports on every shared real trace, compared exactly with tests/golden/rules_on_shared_traces.json.

Refresh after an intended change: PERFDOCTOR_UPDATE_GOLDEN=1 pytest tests/test_rules_golden.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import SHARED_TRACES, shared_trace
from rules_helpers import run_rules

from perfdoctor.errors import PerfDoctorError

GOLDEN = Path(__file__).parent / "golden" / "rules_on_shared_traces.json"
# every trace file and every multi-rank job directory of the shared corpus (issue 11: each must load and report)
INPUTS = (
    sorted(p.name for p in SHARED_TRACES.iterdir() if p.is_dir() or p.name.endswith((".json", ".json.gz")))
    if SHARED_TRACES.exists()
    else []
)


def summarize(report: dict | PerfDoctorError) -> dict:
    """The golden's entry of one trace from its report (``conftest.corpus_report``)."""
    if isinstance(report, PerfDoctorError):  # a bad input must fail with one clear line: the line is the answer
        return {"error": str(report).replace(str(SHARED_TRACES), "../shared/traces")}
    return {
        "findings": [
            {
                "code": f["code"],
                "severity": f["severity"],
                "position": f["position"],
                "rank": f["rank"],
                "saving_ms_per_step": round(f["saving_us_per_step"] / 1000, 2),
                "saving_pct": round(f["saving_pct_of_step"], 1),
                "ranks": f["evidence"]["ranks"],
            }
            for f in report["findings"]
        ],
        "skipped": {s["code"]: s["reason"] for s in sorted(report["skipped_checks"], key=lambda s: s["code"])},
        "passed": sorted(report["passed_checks"]),
    }


@pytest.mark.skipif(not INPUTS, reason="the golden covers every trace in ../shared/traces, which is absent")
def test_rules_on_shared_traces_match_golden(corpus_report):
    got = {name: summarize(corpus_report(SHARED_TRACES / name)) for name in INPUTS}
    if os.environ.get("PERFDOCTOR_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert got == want


@pytest.mark.skipif(not INPUTS, reason="the golden covers every trace in ../shared/traces, which is absent")
def test_validated_facts_on_shared_traces():
    g = json.loads(GOLDEN.read_text())
    codes = {n: {f["code"]: f for f in v["findings"]} for n, v in g.items() if "findings" in v}
    nw0 = codes["kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz"]
    nw4 = codes["kineto__resnet50_num_workers_4__worker0.pt.trace.json.gz"]
    # tb-profiler: DataLoader 33.4% of the step. Prefetching saves that share at most, less the hand-off of a
    # 19,267,584 B batch from a worker: at most (0.25 + 0.074 ns/B, the HANDOFF_*_NS_PER_BYTE) × 19.27 MB = 6.24 ms
    # per step, 3.5% of the 177.6 ms step (tb-profiler's mean), when no device work hides any of it
    assert 33.4 - 3.5 - 0.5 <= nw0["PD101"]["saving_pct"] <= 33.4 + 0.5
    assert "PD101" not in nw4  # tb-profiler: 0.84%
    # V100, FP32 convolutions: tb-profiler advises AMP, but replayed with each costed FP32 conv at its fp16
    # tensor-core floor (19 ms/step less device time) the steps shrink 2.7 / 1.4 ms: the DataLoader (num_workers=0)
    # and the host (num_workers=4) decide them, as on the issue's T4 AMP pair that gained nothing. Under PD203's
    # 3% alone, but on top of the fixes above it in the plan (tests/test_after_savings.py): reported and stated
    # (share, severity) with its saving after those fixes, the one that fires it: above 10% (high) once the host
    # no longer hides the ~19 ms of device time the GEMM fix removes
    assert nw0["PD203"]["saving_pct"] >= 10 and nw4["PD203"]["saving_pct"] >= 10
    assert nw0["PD203"]["severity"] == nw4["PD203"]["severity"] == "high"
    # in the fix plan: third on nw0 (after PD101 and PD103, whose host-side fixes it needs; PD205 then saves
    # nothing and follows it, off the plan), second on nw4
    assert nw0["PD203"]["position"] == 3 and nw0["PD205"]["position"] == 4
    assert nw4["PD203"]["position"] == 2  # on top of PD103's CUDA graphs
    dlrm = g["param__dlrm_8ranks"]
    # all 8 ranks end the step within 0.9 ms; their collective time is waiting for rank 7 (and the other late
    # starters), the transfer itself is 0.22 ms: PD304 says so, PD301 (overlap advice) stays silent
    assert "PD304" in codes["param__dlrm_8ranks"] and "PD301" not in codes["param__dlrm_8ranks"]
    assert codes["param__dlrm_8ranks"]["PD304"]["ranks"] == [1] and "PD301" in dlrm["passed"]
    assert "PD303" in dlrm["passed"]  # it ran on 8 ranks (no clear straggler: see the check's docstring)
    # 13.2 ms (5.9%) of exposed NCCL per step, but the device idles 78% of the step waiting for the host:
    # replayed with the collectives overlapped, the step does not get shorter, so PD301 stays silent. One rank of a
    # DDP job: CUDA graphs are a change every rank gets, so the peers (alike) move with it and each all_reduce
    # keeps its recorded duration (crossrank/bounds.py): the step replays at 42.1 ms, above the compute stream's
    # 39.4 ms of kernels (tests/test_replay_peers.py), and PD103 saves 180.3 ms (81%; the replay with the
    # peers moving: 42.4/41.8/42.1 ms per step)
    nccl = g["hta__nccl_parser_config__nccl_data.json.gz"]
    nccl_codes = codes["hta__nccl_parser_config__nccl_data.json.gz"]
    assert "PD301" in nccl["passed"] and nccl_codes["PD103"]["saving_ms_per_step"] == pytest.approx(180.3, abs=0.5)
    # traces without step markers are one window; the README calls the launch-queue puzzle launch-bound, and
    # the non-blocking-streams puzzle copies 100 pageable host buffers
    assert "PD103" in codes["gpupuzzlers__launch_queue_N1600.trace.json.gz"]
    assert "PD102" in codes["gpupuzzlers__non_blocking_streams.json.gz"]


def test_findings_on_a_trace_without_steps_say_what_per_step_means():
    r = run_rules([shared_trace("gpupuzzlers__non_blocking_streams.json.gz")], ["PD102"])
    f = r.findings["PD102"]
    assert "100 per step" in f["message"] and f["message"].endswith(
        "(no step markers: 'per step' means over the whole trace window)"
    )


def test_pd203_advice_on_v100_is_amp_not_tf32(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()  # the replayed saving is 1.5% of the step: fire from 1% to read the advice
    (rules / "PD203.toml").write_text('code = "PD203"\n[thresholds]\nmin_saving_pct = 1.0\n')
    r = run_rules(
        [shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz")], ["PD203"], rules_dirs=[rules]
    )
    msg = r.findings["PD203"]["message"]
    assert "float16" in msg and "GradScaler" in msg
    assert "set_float32_matmul_precision" not in msg and "bfloat16" not in msg
