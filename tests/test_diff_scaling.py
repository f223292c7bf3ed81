"""Scaling efficiency of a diff between runs with different rank counts (perfdoctor/diff/scaling.py): hand-worked
numbers (µs) on the diff's own inputs, the table every renderer shows, and a real 1 → 2 process diff."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfdoctor.diff.model import CategoryRow, Pair, WorkComparison, WorkSide
from perfdoctor.diff.scaling import scaling

REPO = Path(__file__).resolve().parents[1]


def _side(samples, ranks):
    return WorkSide(samples, None, ranks, samples * ranks, None, "run.json", "run.json")


def _wc(b, a):
    return WorkComparison("per-step", "", b, a, "faster")


def _row(group, key, before, after):
    return CategoryRow(key, key, group, before, after, after - before)


def _parts(sc):
    return {p.key: p.lost_us for p in sc.parts}


def test_one_to_two_ranks_same_batch_per_rank():
    # 1 rank: 10,000 µs step = matmul 8,000 + DataLoader 1,000 + idle Python 1,000.
    # 2 ranks, 64 samples each as before: job step 13,000 µs, the ranks' mean step 12,500 = matmul 8,200 + gloo
    # 3,000 + DataLoader 1,000 + idle Python 300. Ideal: 10,000; lost 3,000 = communication 3,000 + waiting
    # (13,000 − 12,500) 500 + data 0 + host (300 − 1,000) −700 + compute (8,200 − 8,000) 200.
    cats = [
        _row("busy", "matmul", 8000, 8200),
        _row("busy", "host_collective", 0, 3000),
        _row("busy", "dataloader", 1000, 1000),
        _row("idle", "python", 1000, 300),
        _row("detail", "communication_overlapped", 0, 999),  # a detail row: not in the sum
    ]
    wc = _wc(_side(64, 1), _side(64, 2))
    sc = scaling(Pair(1, 2), wc, Pair(10000, 13000), cats, Pair(10000, 12500), Pair(10000, 13000))
    assert sc.smaller == "before" and sc.unit == "sample"
    assert sc.ideal_step_us == 10000 and sc.lost_us == 3000
    assert _parts(sc) == {"communication": 3000, "waiting": 500, "data_loading": 0, "host": -700, "compute": 200}
    assert sum(_parts(sc).values()) == sc.lost_us
    # per rank: 64 / 10 ms = 6,400 samples/s → 64 / 13 ms = 4,923.1; efficiency 10,000 / 13,000 = 76.92%
    assert sc.throughput_per_rank.before == pytest.approx(6400) and sc.throughput_per_rank.after == pytest.approx(
        64 / 13000 * 1e6
    )
    assert sc.efficiency_pct == pytest.approx(100 * 10000 / 13000)
    assert sc.speedup == pytest.approx(2 * 10000 / 13000) and sc.ideal_speedup == 2
    # the verdict's steps from steps.csv (9,500 and 12,000 µs) where the traces' are 10,000 and 13,000: ideal 9,500,
    # lost 2,500 = the same 3,000 in the traces + (12,000 − 13,000) − (9,500 − 10,000) = −500 outside them
    sc = scaling(Pair(1, 2), wc, Pair(9500, 12000), cats, Pair(10000, 12500), Pair(10000, 13000))
    assert sc.lost_us == 2500 and _parts(sc)["outside"] == -500 and sum(_parts(sc).values()) == 2500


def test_four_to_two_ranks_same_global_batch():
    # BEFORE 4 ranks x 16 samples, step 4,000 µs (ranks' mean 3,800: matmul 2,000 + nccl 1,800);
    # AFTER 2 ranks x 32 samples, step 6,000 µs (ranks' mean 6,000: matmul 4,400 + nccl 1,600).
    # The smaller job is AFTER; r = 16 / 32 = 0.5: ideal BEFORE step 0.5 x 6,000 = 3,000, lost 1,000 =
    # communication 1,800 − 800 = 1,000 + waiting 200 − 0 = 200 + compute 2,000 − 2,200 = −200.
    cats = [_row("busy", "matmul", 2000, 4400), _row("busy", "communication", 1800, 1600)]
    sc = scaling(
        Pair(4, 2), _wc(_side(16, 4), _side(32, 2)), Pair(4000, 6000), cats, Pair(3800, 6000), Pair(4000, 6000)
    )
    assert sc.smaller == "after" and sc.ideal_step_us == 3000 and sc.lost_us == 1000
    assert _parts(sc) == {"communication": 1000, "waiting": 200, "data_loading": 0, "host": 0, "compute": -200}
    # per rank: 32 / 6 ms = 5,333.3 samples/s (smaller) → 16 / 4 ms = 4,000 (larger): 75%
    assert sc.efficiency_pct == pytest.approx(75.0)
    assert sc.job_throughput.before == pytest.approx(16000) and sc.job_throughput.after == pytest.approx(64 / 6e-3)


def test_no_scaling_for_equal_ranks_and_unknown_work_assumed_equal():
    assert scaling(Pair(2, 2), _wc(_side(8, 2), _side(8, 2)), Pair(1, 2), [], Pair(1, 2), Pair(1, 2)) is None
    unknown = WorkSide(None, None, 1, None, None, "unknown", "unknown")
    sc = scaling(Pair(1, 2), _wc(unknown, unknown), Pair(100, 125), [], Pair(100, 125), Pair(100, 125))
    assert sc.unit == "step" and sc.efficiency_pct == pytest.approx(80.0) and "assumed" in sc.method
    # no category rows: the whole 25 µs is outside them, said so
    assert _parts(sc)["other"] == pytest.approx(25.0)


@pytest.mark.slow
@pytest.mark.skipif(
    __import__("importlib").util.find_spec("perfdoctor.capture.runner") is None, reason="needs perfdoctor profile"
)
def test_real_one_to_two_processes(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = {}
    for name, flags in (("one", ["--threads", "1"]), ("two", ["--ddp"])):
        out = tmp_path / name
        cmd = [sys.executable, "-m", "perfdoctor", "profile", str(REPO / "examples" / "mlp.py"), "--steps", "14"]
        cmd += ["--active", "4", "--out", str(out), "--no-report", "--", "--log-every", "0", *flags]
        subprocess.run(cmd, check=True, capture_output=True, timeout=600, env=env)
        runs[name] = out
    diff_json = tmp_path / "diff.json"
    cmd = [sys.executable, "-m", "perfdoctor", "diff", str(runs["one"]), str(runs["two"]), "-o", str(diff_json)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    sc = json.loads(diff_json.read_text())["scaling"]
    assert sc["ranks"] == {"before": 1, "after": 2} and sc["unit"] == "sample"
    assert sc["work_per_rank"] == {"before": 64, "after": 64}  # mlp's batch per rank, from run.json
    steps = sc["step_us"]
    assert sc["efficiency_pct"] == pytest.approx(100 * steps["before"] / steps["after"])
    assert sum(p["lost_us"] for p in sc["parts"]) == pytest.approx(sc["lost_us"], abs=1e-6)
