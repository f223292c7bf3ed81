"""Rules on real CPU training runs of examples/ recorded with `perfdoctor profile`.

Each problem flag must make its rule fire, the fixed variant must keep it
silent and be measurably faster (both step times are printed: run with -s). The runs are shared with the rule
files that use them (tests/examples_runs.py): PD201, PD204 and PD302 live in tests/rules/.
"""

from __future__ import annotations

from examples_runs import BIG, SMALL, example, faster, profile, quiet_machine, real_run  # noqa: F401 (a fixture)


@example
def test_pd101_slow_getitem_without_workers():
    slow = profile("dl_slow", [*BIG, "--slow-getitem-ms", "2", "--num-workers", "0"])
    fixed = profile("dl_fixed", [*BIG, "--slow-getitem-ms", "2", "--num-workers", "2"])
    assert "PD101" in slow[0] and slow[0]["PD101"]["severity"] == "high"
    wait_slow = slow[0]["PD101"]["saving_us_per_step"]
    wait_fixed = fixed[0]["PD101"]["saving_us_per_step"] if "PD101" in fixed[0] else 0.0
    assert wait_fixed < 0.3 * wait_slow
    # without the problem (a fast Dataset) the rule is silent; with 2 workers on a 2-core box the workers
    # still compete with training for the cores, so some wait remains: the fix is judged by the wait and the time
    healthy = profile("healthy", [*BIG, "--num-workers", "0"])
    assert "PD101" not in healthy[0]
    print(f"\nPD101 wait: problem {wait_slow / 1e3:.2f} ms per step, 2 workers {wait_fixed / 1e3:.2f} ms per step")
    faster(slow, fixed, "PD101 slow __getitem__")


@example
def test_pd202_unfused_chain():
    slow = profile("chain", [*SMALL, "--unfused-chain", "32"])
    fixed = profile("small", SMALL)
    assert "PD202" in slow[0] and "PD202" not in fixed[0]
    f = slow[0]["PD202"]
    # replayed on the CPU: each chain of mul/add ops fused into one op costing its bytes at the memory bandwidth
    # (measured by `perfdoctor calibrate` on an idle machine, else the assumed one, said so), not the 0.5 bound
    assert "fused into one op that reads its inputs once" in f["saving_method"] and "GB/s" in f["saving_method"]
    assert "max_fused_fraction" not in f["saving_method"]
    # the chains' spans go (their ops, the Python and autograd nodes between them) but for the fused ops' cost: the
    # saving is above 0 and below the step (elementwise_ms is elementwise_pct % of it)
    step_us = f["evidence"]["elementwise_ms"] * 1000 * 100 / f["evidence"]["elementwise_pct"]
    assert 0 < f["saving_us_per_step"] < step_us
    print(f"\nPD202 replayed saving {f['saving_us_per_step'] / 1e3:.2f} ms: {f['saving_method']}")
    faster(slow, fixed, "PD202 elementwise chain")


@example
def test_pd401_item_every_step_is_not_a_device_sync_on_cpu():
    slow = profile("item", [*SMALL, "--item-every-step"])
    # .item() on a CPU tensor waits for no device: the rule is skipped with the reason, never fired
    assert "PD401" not in slow[0] and "CPU-only" in slow[1]["PD401"]


@example
def test_healthy_run_has_no_medium_or_high_finding():
    healthy = profile("healthy", [*BIG, "--num-workers", "0"])
    assert [c for c, f in healthy[0].items() if f["severity"] in ("medium", "high")] == []


@example
def test_pd105_python_bookkeeping_between_ops():
    slow = profile("pymetrics", [*SMALL, "--python-metrics-ms", "10"])
    fixed = profile("small", SMALL)
    f = slow[0]["PD105"]
    # 10 ms of pure Python per step: the rule's estimate is that time (the loop's own Python adds a little)
    assert 10_000 <= f["saving_us_per_step"] <= 13_000
    assert "PD105" not in fixed[0]
    faster(slow, fixed, "PD105 Python metrics in the loop")


@real_run
def test_pd105_per_head_loop_fires_on_its_loops_and_batched_heads_are_silent():
    loop = profile("headloop", ["--hidden", "768", "--head-loop", "96"], steps=30)
    batched = profile("headbatched", ["--hidden", "768", "--head-loop", "96", "--head-batched"], steps=30)
    f = loop[0]["PD105"]
    # 96 heads: per step the forward's 96 Linear calls, their backward (96 x 4 ops) and AdamW's single-tensor loop
    # over the heads' 96 weight + bias pairs (a 20-op body inside Optimizer.step); the DataLoader's per-sample
    # indexing (64 x 2 ops inside the fetch) is PD101's, not a loop here
    shapes = f["evidence"]["loop_shapes"]
    assert set(shapes) == {"96×1", "96×4", "96×20"}, shapes
    assert f["saving_us_per_step"] > 0 and f["evidence"]["outside_pct"] < 15  # fired on the loops, not the gaps
    assert "PD105" not in batched[0]
