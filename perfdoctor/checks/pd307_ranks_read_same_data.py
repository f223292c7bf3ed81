"""PD307 ranks-read-same-data: data-parallel ranks that read identical input batches.

From the run data of ``perfdoctor profile``: each rank's ``batch_fingerprints`` (``run.json`` ``ranks``; a hash of a
fixed sample of the first input tensor of each of its first steps, :mod:`perfdoctor.capture.batch_fingerprint`).
Two ranks whose digests are equal at a step read the same batch there; ranks equal at ``min_identical_share`` of
the steps both fingerprinted are grouped (transitively). A data-parallel job whose ranks read the same data trains
N replicas on one replica's data: the throughput the report shows is not the throughput of distinct samples, so the
finding stands whatever the step time (no saving is estimated; its severity is the rule's).
The likely cause is picked from the samplers the ranks' DataLoaders used (``samplers`` in ``run.json``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from perfdoctor.checks.common import step_list_text
from perfdoctor.checks.context import JobContext, Outcome, passed, skipped
from perfdoctor.checks.run_facts import tables
from perfdoctor.findings import Evidence, Hit

CODE = "PD307"
METRICS = {
    "fingerprinted_ranks": "ranks with batch fingerprints in the run data",
    "identical_rank_pairs": "pairs of ranks whose batches are identical at the threshold share of steps or more",
    "max_identical_share": "largest share (0–1) of commonly fingerprinted steps at which two ranks read the same batch",
}

# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = ("ranks_text", "n_ranks", "identical_steps", "fingerprinted_steps", "steps_text", "groups_text")
ADVICE = ("no_sampler", "sampler_rank", "no_loader")

_MAX_RANK_TEXT = 40  # characters of the ranks list kept in the headline


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/PD307.toml: names and types checked when the catalogue loads."""

    min_identical_share: float
    min_steps: int


def fingerprints(run: Mapping[str, object]) -> dict[int, dict[int, str]]:
    """Per rank, step → digest of the ranks in ``run.json`` that recorded batch fingerprints (steps whose forward
    had no tensor argument left out)."""
    out: dict[int, dict[int, str]] = {}
    for r in tables(run, "ranks"):
        rank = r.get("rank")
        if not isinstance(rank, int):
            continue
        steps = {
            step: digest
            for f in tables(r, "batch_fingerprints")
            if isinstance(step := f.get("step"), int) and isinstance(digest := f.get("digest"), str)
        }
        if steps:
            out[int(rank)] = steps
    return out


def identical_groups(
    fp: dict[int, dict[int, str]], min_share: float, min_steps: int
) -> tuple[list[tuple[list[int], list[int]]], int, float]:
    """Groups of ranks that read the same batches: ``([(ranks, steps all of them read alike)], pairs, max share)``.

    A pair of ranks is identical when the steps both fingerprinted number at least ``min_steps`` and their digests
    agree at ``min_share`` (0–1) of them or more; groups are the connected pairs. ``pairs``: identical pairs;
    ``max share``: the largest agreement of any pair.
    """
    ranks = sorted(fp)
    parent = {r: r for r in ranks}

    def root(r: int) -> int:
        while parent[r] != r:
            r = parent[r]
        return r

    pairs, best = 0, 0.0
    for i, a in enumerate(ranks):
        for b in ranks[i + 1 :]:
            common = sorted(set(fp[a]) & set(fp[b]))
            if len(common) < min_steps:
                continue
            share = sum(fp[a][s] == fp[b][s] for s in common) / len(common)
            best = max(best, share)
            if share >= min_share:
                pairs += 1
                parent[root(b)] = root(a)
    members: dict[int, list[int]] = {}
    for r in ranks:
        members.setdefault(root(r), []).append(r)
    groups = []
    for group in members.values():
        if len(group) < 2:
            continue
        common = sorted(set.intersection(*(set(fp[r]) for r in group)))
        alike = [s for s in common if len({fp[r][s] for r in group}) == 1]
        groups.append((group, alike))
    return groups, pairs, best


def _constant_input(fp: dict[int, dict[int, str]], ranks: list[int]) -> bool:
    """Every one of ``ranks`` read the same batch at every fingerprinted step (a fixed synthetic input)."""
    return all(len(set(fp[r].values())) == 1 for r in ranks) and len({next(iter(fp[r].values())) for r in ranks}) == 1


def rank_list_text(ranks: list[int]) -> str:
    """``[0, 1, 2, 5]`` → "0–2, 5"; cut with "…" past :data:`_MAX_RANK_TEXT` characters."""
    runs: list[str] = []
    start = prev = ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        runs.append(str(start) if start == prev else f"{start}, {prev}" if prev == start + 1 else f"{start}–{prev}")
        if r is not None:
            start = prev = r
    text = ", ".join(runs)
    return text if len(text) <= _MAX_RANK_TEXT else text[: _MAX_RANK_TEXT - 1].rsplit(",", 1)[0] + ", …"


def _situation(run: Mapping[str, object], ranks: list[int]) -> str:
    """Which fix fits: a DistributedSampler seen on the ranks (its rank/num_replicas are wrong), a DataLoader without
    one, or no DataLoader seen (an IterableDataset or a hand-made loop)."""
    names: set[str] = set()
    for r in tables(run, "ranks"):
        samplers = r.get("samplers")
        if r.get("rank") in ranks and isinstance(samplers, list):
            names |= {str(s) for s in samplers}
    if "DistributedSampler" in names:
        return "sampler_rank"
    if names - {"_InfiniteConstantSampler"}:
        return "no_sampler"
    return "no_loader"


def check(job: JobContext) -> Outcome:
    th = job.thresholds(Thresholds)
    run = job.analysis.run_json() or {}
    fp = fingerprints(run)
    if len(fp) < 2:
        if (run.get("world_size") or 1) < 2:
            return skipped("single process: no other rank to compare input batches with")
        return skipped("the run data lacks batch fingerprints of two ranks (recorded by perfdoctor profile)")
    groups, pairs, best = identical_groups(fp, th.min_identical_share, th.min_steps)
    metrics = {"fingerprinted_ranks": len(fp), "identical_rank_pairs": pairs, "max_identical_share": best}
    flagged = sorted(r for g, _ in groups for r in g)
    if not groups:
        return passed(**metrics)
    if _constant_input(fp, flagged):
        return skipped("every rank's input is the same batch at every fingerprinted step (a fixed synthetic input)")
    steps = sorted({s for _, alike in groups for s in alike})
    common = sorted(set.intersection(*(set(fp[r]) for r in flagged)))
    values = {
        "n_ranks": len(flagged),
        "world_size": run.get("world_size") or len(fp),
        "identical_steps": len(steps),
        "fingerprinted_steps": len(common),
        **metrics,
    }
    fields = {
        "ranks_text": rank_list_text(flagged),
        "steps_text": step_list_text(steps),
        "groups_text": "; ".join(f"ranks {rank_list_text(g)} at steps {step_list_text(a)}" for g, a in groups),
    }
    events = [
        {"name": f"ranks {rank_list_text(g)}", "ranks": g, "steps": a, "digest": fp[g[0]][a[0]] if a else None}
        for g, a in groups
    ]
    ev = Evidence(values=values, steps=steps, events=events)
    advice = job.advice(_situation(run, flagged))
    return Outcome(metrics=metrics, hit=Hit(evidence=ev, estimate=None, fields=fields, advice=advice))
