"""Memory headroom and what it buys (perfdoctor.analysis.memory.headroom; PD201's batch that fits, PD502's split and the
bytes each fix frees): hand-built traces with values worked out by hand, and the A100 Switch Transformers trace
against its raw ``[memory]`` events."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import shared_trace
from rules_helpers import SGEMM, run_tb
from tracebuilder import TraceBuilder

from perfdoctor.analysis.memory.headroom import headroom
from perfdoctor.analysis.steps.steps import find_steps
from perfdoctor.trace import load_trace

GIB = 2**30


def _small_batch_trace(start_gib, step_gib, reserved_gib, optimizer=None, world_size=None):
    """3 steps of 1,000 µs: an aten::linear of 4 rows (M = 4) launching a 50 µs SGEMM; the device idles the rest.
    ``start_gib`` is allocated before the first step (parameters, optimizer state); each step allocates
    ``step_gib`` at +100 µs (the peak, reserved ``reserved_gib``) and frees it at +800 µs."""
    tb = TraceBuilder(total_memory=80 * GIB, rank=0 if world_size else None, world_size=world_size)
    tb.memory(-50, start_gib * GIB, start_gib * GIB, reserved_gib * GIB, addr=1)
    for n in range(3):
        s = 1000 * n
        tb.step(n + 1, s, 1000)
        tb.cpu_op("aten::linear", s + 10, 60, input_dims=[[4, 1024], [1024, 1024], [1024]])
        tb.launch(SGEMM, launch_ts=s + 20, start=s + 30, dur=50)
        tb.memory(s + 100, step_gib * GIB, (start_gib + step_gib) * GIB, reserved_gib * GIB, addr=100 + n)
        tb.memory(s + 800, -step_gib * GIB, start_gib * GIB, reserved_gib * GIB, addr=100 + n)
        if optimizer:
            tb.annotation(f"Optimizer.step#{optimizer}.step", s + 850, 100)
    return tb


def test_headroom_splits_the_peak_into_the_step_start_and_the_step(tmp_path):
    t = load_trace(str(_small_batch_trace(10, 8, 20).write(tmp_path / "t.json")))
    hr = headroom(t, find_steps(t), 0)
    assert hr is not None
    assert (hr.capacity_bytes, hr.peak_allocated_bytes) == (80 * GIB, 18 * GIB)
    assert (hr.fixed_bytes, hr.activation_bytes) == (10 * GIB, 8 * GIB)  # headroom: 80 − 18 = 62 GiB
    assert hr.batch_factor(0.9) == (72 - 10) / 8  # 7.75: 10 + 7.75 × 8 = 72 GiB = 90% of 80


def test_pd201_says_how_large_a_batch_fits_and_grows_no_further(tmp_path):
    f = run_tb(_small_batch_trace(40, 8, 40), tmp_path, ["PD201"]).findings["PD201"]
    # M = 4 asks for 64 / 4 = 16×, capped at max_batch_growth 8; (72 − 40) / 8 = 4× fits: the what-if grows 4×
    assert f["evidence"]["growth"] == 4.0 and f["evidence"]["batch_that_fits_x"] == 4.0
    assert f["message"].endswith(
        "a micro-batch 4× larger would spread it; peak 48.0 of 80.0 GiB: a batch of ~4.0× fits"
    )
    assert "the batch that fits" in f["saving_method"]
    g = run_tb(_small_batch_trace(10, 8, 20), tmp_path, ["PD201"], name="u.json").findings["PD201"]
    assert g["evidence"]["growth"] == 7.75 and "a batch of ~7.8× fits" in g["message"]


def test_pd502_names_what_fills_the_peak_and_the_fix_that_frees_most(tmp_path):
    """30 GiB from before the step (AdamW: parameters + two moments, so 20 GiB of state), 45 GiB allocated in the
    step, 76 GiB reserved of 80 (95%), 4 ranks, fp32 GEMMs (SGEMM). Frees: checkpointing up to 45 GiB, bf16
    activations 22.5 GiB, AdamW state sharded over 4 ranks 20 × 3/4 = 15 GiB."""
    f = run_tb(_small_batch_trace(30, 45, 76, optimizer="AdamW", world_size=4), tmp_path, ["PD502"]).findings["PD502"]
    ev = f["evidence"]
    assert (ev["step_start_allocated_gib"], ev["activation_gib"]) == (30.0, 45.0)
    assert ev["frees_checkpointing_gib"] == 45.0 and ev["frees_bf16_activations_gib"] == 22.5
    assert ev["frees_sharded_optimizer_gib"] == pytest.approx(15.0)
    assert "30.0 GiB is held from the step's start" in f["message"] and "45.0 GiB was allocated" in f["message"]
    assert "frees most: activation checkpointing ~45.0 GiB" in f["message"]
    assert f["message"].index("bf16 activations ~22.5") < f["message"].index("sharded optimizer state ~15.0")


def test_pd502_one_rank_has_nothing_to_shard(tmp_path):
    f = run_tb(_small_batch_trace(30, 45, 76, optimizer="AdamW"), tmp_path, ["PD502"]).findings["PD502"]
    assert f["evidence"]["frees_sharded_optimizer_gib"] == 0 and "sharded" not in f["message"]


def test_headroom_on_the_a100_switch_transformers_trace_matches_its_memory_events():
    """A100 80 GB, profile_memory, no step markers (one whole-trace step). From the raw JSON: the GPU's [memory]
    events in time order; the level before the first is its Total Allocated − Bytes, the peak the largest Total
    Allocated; the capacity deviceProperties' totalGlobalMem."""
    path = shared_trace("switchtransformers__a100_moe_profile_memory.json.gz")
    with gzip.open(path, "rt") as fh:
        raw = json.load(fh)
    mem = sorted(
        (e for e in raw["traceEvents"] if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1),
        key=lambda e: e["ts"],
    )
    start = mem[0]["args"]["Total Allocated"] - mem[0]["args"]["Bytes"]
    peak = max(e["args"]["Total Allocated"] for e in mem)
    cap = raw["deviceProperties"][0]["totalGlobalMem"]
    t = load_trace(str(path))
    hr = headroom(t, find_steps(t), 0)
    assert hr is not None
    assert (hr.capacity_bytes, hr.peak_allocated_bytes, hr.fixed_bytes) == (cap, peak, start)
    assert hr.activation_bytes == peak - start
    assert hr.batch_factor(0.9) == pytest.approx((0.9 * cap - start) / (peak - start))  # ≈ 3.56×
    assert round(peak / GIB, 1) == 21.5 and round(cap / GIB, 1) == 79.2
