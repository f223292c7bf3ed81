"""PD307 ranks-read-same-data: run data with fingerprints written by hand, and real 2-rank DDP runs of
examples/mlp.py (gloo on CPU) with and without a DistributedSampler."""

import json
import os
import socket
import subprocess
import sys

from examples_runs import ONE_THREAD, REPO, profile, real_run, runs_root
from rules_helpers import run_analysis

from perfdoctor.checks import pd307_ranks_read_same_data as pd307
from perfdoctor.checks.catalogue import load_catalogue
from perfdoctor.checks.context import JobContext


def _rank(rank, digests, samplers=("RandomSampler",)):
    return {
        "rank": rank,
        "samplers": list(samplers),
        "batch_fingerprints": [
            {"step": s, "digest": d, "shape": [8, 4], "dtype": "float32"} for s, d in enumerate(digests)
        ],
    }


def _check(ranks, world_size=None):
    run = {"world_size": world_size or len(ranks), "ranks": ranks}
    return pd307.check(JobContext(run_analysis(run_json=run), [], load_catalogue().rules["PD307"]))


def test_pd307_fires_when_two_of_four_ranks_read_the_same_batches():
    # ranks 1 and 3 equal at steps 0, 1, 3 of 4 (3/4 = 0.75 >= 0.5); rank 0 and 2 read their own data
    out = _check(
        [
            _rank(0, ["a0", "a1", "a2", "a3"]),
            _rank(1, ["b0", "b1", "b2", "b3"]),
            _rank(2, ["c0", "c1", "c2", "c3"]),
            _rank(3, ["b0", "b1", "x2", "b3"]),
        ]
    )
    assert out.hit is not None
    ev = out.hit.evidence
    assert ev.steps == [0, 1, 3]
    assert ev.values["n_ranks"] == 2 and ev.values["identical_steps"] == 3 and ev.values["fingerprinted_steps"] == 4
    assert ev.events[0]["ranks"] == [1, 3]
    assert out.metrics["identical_rank_pairs"] == 1 and out.metrics["max_identical_share"] == 0.75
    assert out.hit.fields["ranks_text"] == "1, 3" and out.hit.fields["steps_text"] == "#0, #1, #3"
    assert out.hit.estimate is None  # a correctness finding: no saving, severity from the rule
    assert "no `DistributedSampler`" in out.hit.advice["fix"]  # RandomSampler seen: the no-sampler advice


def test_pd307_names_a_misconfigured_distributed_sampler():
    # a DistributedSampler given the local rank on two nodes of two: global ranks 0/2 and 1/3 read the same shards
    same = ["s0", "s1", "s2"]
    other = ["t0", "t1", "t2"]
    ds = ("DistributedSampler",)
    out = _check([_rank(0, same, ds), _rank(1, other, ds), _rank(2, same, ds), _rank(3, other, ds)])
    assert [e["ranks"] for e in out.hit.evidence.events] == [[0, 2], [1, 3]]
    assert out.hit.fields["ranks_text"] == "0–3"
    assert "wrong `rank`" in out.hit.advice["fix"]


def test_pd307_silent_when_every_rank_reads_its_own_batches():
    # one equal step of four (a chance match at 1/4 = 0.25 < 0.5) is not a finding
    out = _check([_rank(0, ["a", "b", "c", "d"]), _rank(1, ["a", "x", "y", "z"])])
    assert out.hit is None and out.skip is None
    assert out.metrics["max_identical_share"] == 0.25


def test_pd307_skipped_without_two_fingerprinted_ranks():
    assert "single process" in _check([_rank(0, ["a", "b"])], world_size=1).skip
    assert "lacks batch fingerprints" in _check([_rank(0, ["a", "b"]), {"rank": 1}]).skip
    # a fixed synthetic batch on every rank and step: nothing to compare, said so
    assert "fixed synthetic input" in _check([_rank(0, ["k", "k", "k"]), _rank(1, ["k", "k", "k"])]).skip


def test_rank_list_text():
    assert pd307.rank_list_text([0, 1, 2, 5]) == "0–2, 5"
    assert pd307.rank_list_text([3, 4]) == "3, 4"
    long = pd307.rank_list_text(list(range(0, 200, 2)))
    assert len(long) <= 40 and long.endswith("…")


# -- real runs: the example's own mp.spawn, and torchrun; no timing is compared, so a loaded machine does not matter --


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@real_run
def test_pd307_fires_on_a_real_ddp_run_without_distributed_sampler():
    findings, skipped, _, _ = profile("ddp_same_data", ["--ddp", "--no-distributed-sampler"], steps=12)
    f = findings["PD307"]
    assert f["severity"] == "high"
    assert f["evidence"]["events"][0]["ranks"] == [0, 1]
    assert f["steps"] == list(range(8))  # every fingerprinted step


@real_run
def test_pd307_silent_on_a_real_ddp_run_with_distributed_sampler():
    findings, skipped, _, _ = profile("ddp_nosync", ["--ddp", "--grad-accum", "4"], steps=20)
    assert "PD307" not in findings and "PD307" not in skipped


@real_run
def test_pd307_fires_under_torchrun():
    out = runs_root() / "torchrun_same_data"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_free_port()),
        "-m", "perfdoctor", "profile", str(REPO / "examples" / "mlp.py"), "--steps", "10", "--out", str(out),
        "--no-report", "--", "--no-distributed-sampler", "--log-every", "0",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, **ONE_THREAD})
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    fp = pd307.fingerprints(run)
    assert sorted(fp) == [0, 1] and fp[0] == fp[1]
    assert {r["rank"]: r["samplers"] for r in run["ranks"]} == {0: ["RandomSampler"], 1: ["RandomSampler"]}
