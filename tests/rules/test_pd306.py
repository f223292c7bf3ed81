"""PD306 fsdp-all-gather-not-prefetched: firing and silent cases on traces shaped like a real FSDP run, numbers
worked out by hand (µs).

The labels are the ones torch 2.13 records (``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py`` and
``_runtime_utils.py``), in the nesting a two-process gloo run of ``fully_shard`` / ``FullyShardedDataParallel``
records them: ``FSDP::pre_forward (fqn)`` holds ``FSDP::all_gather (fqn)``, which holds the
``c10d::_allgather_base_`` call; a prefetched all-gather sits in ``FSDP::forward_prefetch for fqn``.
"""

from examples_runs import example, profile, quiet_machine, runs_root  # noqa: F401 (a fixture)
from rules_helpers import SGEMM, run_tb
from tracebuilder import TraceBuilder

AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
RS = "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _gather(tb: TraceBuilder, unit: str, ts: float, start: float, prefetch_in: bool = False) -> None:
    """Unit ``unit``'s all-gather issued at host time ``ts`` (10 µs of labels, the launch at ts + 4), its kernel
    [start, start + 100) on the communication stream 20."""
    if prefetch_in:
        tb.annotation(f"FSDP::forward_prefetch for {unit}", ts - 1, 12)
    tb.annotation(f"FSDP::all_gather ({unit})", ts, 10)
    tb.cpu_op("c10d::_allgather_base_", ts + 2, 6)
    tb.launch(AG, launch_ts=ts + 4, start=start, dur=100, stream=20, launch_dur=1)


def _gpu_forward(prefetch: bool) -> TraceBuilder:
    """Two FSDP2 units on a GPU. The host is done at 100: the device decides the step.

    Not prefetched: AG0 [20, 120), GEMM0 [120, 420) (waits for AG0), AG1 issued in pre_forward(layers.1) after
    post_forward(layers.0) and waiting on the device for GEMM0: [420, 520), GEMM1 [520, 820): a 820 µs step.
    Prefetched: AG1 issued inside pre_forward(layers.0) under forward_prefetch: [120, 220), GEMM1 [420, 720).
    """
    tb = TraceBuilder()
    tb.step(1, 0, 100)
    tb.annotation("FSDP::pre_forward (layers.0)", 10, 25)
    _gather(tb, "layers.0", 10, 20)
    if prefetch:
        _gather(tb, "layers.1", 22, 120, prefetch_in=True)
    tb.launch(SGEMM, launch_ts=40, start=120, dur=300)
    tb.annotation("FSDP::post_forward (layers.0)", 50, 5)
    tb.annotation("FSDP::pre_forward (layers.1)", 60, 20)
    if not prefetch:
        _gather(tb, "layers.1", 60, 420)
    tb.launch(SGEMM, launch_ts=85, start=520 if not prefetch else 420, dur=300)
    tb.annotation("FSDP::post_forward (layers.1)", 90, 5)
    return tb


def test_pd306_fires_on_forward_all_gathers_not_prefetched(tmp_path):
    r = run_tb(_gpu_forward(prefetch=False), tmp_path, ["PD306"])
    f = r.findings["PD306"]
    # AG0 [20, 120) and AG1 [420, 520) run with no GEMM: 100 µs exposed each. AG0 is the first of the pass (nothing
    # to hide behind); AG1 is late. Prefetched one unit ahead, AG1 is launched with AG0 and queues behind it on
    # stream 20: [120, 220), no longer waiting for GEMM0; GEMM1 waits for GEMM0 (stream 7) and AG1: [420, 720).
    # 820 -> 720: 100 µs, also the cap (AG1's exposed time). Alone: PD301's overlap what-if, first in the plan,
    # lets every GEMM stop waiting for the all-gathers and leaves nothing after it
    assert f["saving_alone_us_per_step"] == 100 and r.metrics("PD306")["saving_us"] == 100
    m = r.metrics("PD306")
    assert m["all_gather_us"] == 200 and m["all_gather_exposed_us"] == 200
    assert m["late_gathers"] == 1 and m["late_exposed_us"] == 100
    ev = f["evidence"]
    assert ev["all_gather_exposed_ms_by_unit"] == {"layers.0": 0.1, "layers.1": 0.1}
    assert ev["not_prefetched_by_unit"] == {"layers.0": 0.0, "layers.1": 1.0}
    assert ev["flavour"] == "fully_shard (FSDP2)" and ev["passes"] == "forward"
    # fully_shard's advice, not FullyShardedDataParallel's keyword arguments nor DDP's buckets
    assert "set_modules_to_forward_prefetch" in f["fix"] and "bucket_cap_mb" not in f["fix"]
    assert "forward_prefetch=True" not in f["fix"]


def test_pd306_silent_when_the_next_all_gather_is_prefetched(tmp_path):
    r = run_tb(_gpu_forward(prefetch=True), tmp_path, ["PD306"])
    assert "PD306" in r.passed
    m = r.metrics("PD306")
    # AG1 [120, 220) runs under GEMM0 [120, 420): only AG0's 100 µs is exposed
    assert m["late_gathers"] == 0 and m["all_gather_exposed_us"] == 100 and m["saving_us"] == 0


def _cpu_fsdp1(prefetch: bool) -> TraceBuilder:
    """Two FullyShardedDataParallel units on a CPU (gloo): the training thread sits in each all-gather call.

    [0, 100) unit 0's all-gather (the call [10, 100)); [100, 400) its matmul; unit 1's all-gather call [420, 600)
    (in ``_pre_forward``, or under ``_pre_forward_prefetch`` when prefetched); [600, 900) its matmul; a 1000 µs
    step.
    """
    tb = TraceBuilder(device_name=None)
    tb.step(1, 0, 1000)
    tb.annotation("FullyShardedDataParallel._pre_forward", 0, 100)
    tb.cpu_op("c10d::allgather_", 10, 90)
    tb.cpu_op("aten::mm", 100, 300)
    tb.annotation("FullyShardedDataParallel._pre_forward_prefetch" if prefetch else "FullyShardedDataParallel."
                  "_pre_forward", 410, 190)  # fmt: skip
    tb.cpu_op("c10d::allgather_", 420, 180)
    tb.cpu_op("aten::mm", 600, 300)
    return tb


def test_pd306_fires_on_a_cpu_gloo_run(tmp_path):
    r = run_tb(_cpu_fsdp1(prefetch=False), tmp_path, ["PD306"])
    f = r.findings["PD306"]
    # unit 1's call [420, 600) is late: 180 µs. The previous unit computes from unit 0's call's return (100) to
    # unit 1's issue (420), 320 µs with no collective call in it, more than 180: the whole call is hidden.
    # 1000 -> 820: 180 µs, 18% of the step
    assert f["saving_alone_us_per_step"] == 180 and r.metrics("PD306")["saving_pct"] == 18.0
    ev = f["evidence"]
    assert ev["all_gather_exposed_ms_by_unit"] == {"unit #0": 0.09, "unit #1": 0.18}
    assert ev["flavour"] == "FullyShardedDataParallel"
    assert "forward_prefetch=True" in f["fix"] and "set_modules_to_forward_prefetch" not in f["fix"]


def test_pd306_silent_on_a_cpu_gloo_run_with_prefetch(tmp_path):
    r = run_tb(_cpu_fsdp1(prefetch=True), tmp_path, ["PD306"])
    assert "PD306" in r.passed and r.metrics("PD306")["late_gathers"] == 0


def test_pd306_skipped_without_fsdp(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=10, start=20, dur=900)
    assert "not an FSDP run" in run_tb(tb, tmp_path, ["PD306"]).skipped["PD306"]


# -- real runs: examples/mlp.py, two gloo processes sharded with fully_shard --------------------------------------
# batch 1024: each unit's matmuls take about as long as its all-gather, so prefetching has compute to hide behind


def _label_us(run_dir, rank: int, steps: list[int], label: str) -> float:
    """Mean µs per step of ``label``'s host time in the ProfilerStep#N windows of rank ``rank``'s trace, read with
    json alone (not perfdoctor's tables)."""
    import gzip
    import json

    path = next(run_dir.glob(f"trace.rank{rank}.*json*"))
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    total = 0.0
    for n in steps:
        (win,) = [e for e in events if e["name"] == f"ProfilerStep#{n}"]
        lo, hi = win["ts"], win["ts"] + win["dur"]
        total += sum(e["dur"] for e in events if e["name"] == label and lo <= e["ts"] < hi)
    return total / len(steps)


@example
def test_pd306_fires_on_fully_shard_without_forward_prefetch(tmp_path):
    from perfdoctor import pipeline
    from perfdoctor.checks.config import RuleOptions

    profile("fsdp", ["--ddp", "--fsdp", "--batch-size", "1024"], steps=12)
    # What is tested here is the detection and its evidence, not the size gate: on the 2-core VM the replayed
    # saving of this run varied 3.1-8.0% of the step over six runs (2026-12-07), around the 5% default that
    # rules/PD306.toml sets as its noise floor (tested on hand-built traces above). A user override, as
    # `--rules DIR` reads it, sets the floor to 1%.
    (tmp_path / "PD306.toml").write_text('code = "PD306"\n[thresholds]\nmin_saving_pct = 1.0\n')
    built = pipeline.build([str(runs_root() / "fsdp")], rule_options=RuleOptions(rules_dirs=[str(tmp_path)]))
    findings = {f["code"]: f for f in built.report["findings"]}
    f = findings["PD306"]
    ev = f["evidence"]
    assert ev["flavour"] == "fully_shard (FSDP2)" and ev["passes"] == "forward"
    # FSDP2's default backward prefetch covers the backward pass; each forward unit after the first waits
    assert ev["not_prefetched_by_unit"]["layers.1"] == 1 and ev["not_prefetched_by_unit"]["(root)"] == 0
    assert f["saving_alone_us_per_step"] > 0
    # on a CPU the exposed all-gather of a unit is its label's host time: checked against the raw trace
    want = _label_us(runs_root() / "fsdp", int(f["rank"]), f["steps"], "FSDP::all_gather (layers.1)")
    assert abs(ev["all_gather_exposed_ms_by_unit"]["layers.1"] * 1000 - want) < 0.01


@example
def test_pd306_silent_with_forward_prefetch():
    flags = ["--ddp", "--fsdp", "--fsdp-prefetch", "--batch-size", "1024"]
    findings, skipped, _, _ = profile("fsdp_prefetch", flags, steps=12)
    assert "PD306" not in findings and "PD306" not in skipped
