"""Scaffold a new rule: ``python -m perfdoctor.tools.new_rule PD123 some-name``.

Writes the three files a rule is made of (see CONTRIBUTING.md), each a skeleton to fill in:

- ``rules/PD123.toml``: the rule's text, requirements, message and headline templates and ``[thresholds]``;
- ``perfdoctor/checks/pd123_some_name.py``: the check (``CODE``, ``METRICS``, ``MESSAGE_FIELDS``, the
  ``Thresholds`` dataclass it reads typed, ``check(ctx)`` handing ``min_saving_pct`` to the engine in its ``Hit``,
  as the shipped rules do), already ruff- and ``mypy --strict``-clean;
- ``tests/rules/test_pd123.py``: a firing and a silent case on a TraceBuilder trace. The firing case fails until
  the check detects something: write the trace and the hand-worked numbers first.

The category comes from the code's family (PD1xx input pipeline, PD2xx GPU compute, ...); nothing is ever
overwritten, and a code or name already in the catalogue is refused. Each file holds ``TODO`` where a word or a
number is the author's to write: ``tests/test_rules_layout.py`` fails while one is left.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from perfdoctor.checks.catalogue import load_catalogue
from perfdoctor.errors import PerfDoctorError

# STYLE.md's code families -> catalogue category
FAMILY_CATEGORY = {
    "1": "input-pipeline",
    "2": "gpu-compute",
    "3": "distributed",
    "4": "synchronization",
    "5": "memory",
    "6": "measurement",
    "9": "trace-quality",
}

TOML = '''code = "{code}"
name = "{name}"
category = "{category}"
severity = "medium"
requires = ["steps"]
# builds_on = ["PD101"]  # the rules whose outcome on the rank the check reads (ctx.built_on); they run first
# the placeholders are the hit's fields, every one listed in the module's MESSAGE_FIELDS (checked at load);
# saving_ms and saving_pct come from the estimate
message = "TODO what: {{example_ms:.1f}} ms per step ({{example_pct:.0f}}%) of TODO (saves {{saving_ms:.1f}} ms)"
# one sentence of at most 120 characters once filled: what is wrong and how big (not the saving, not the method)
headline = "TODO the claim: {{example_ms:.1f}} ms per step of TODO"
summary = """
TODO: what the rule detects, in one or two sentences a performance engineer can check in the trace."""
why = """
TODO: why it costs time (the mechanism), with the source of any figure."""
saving = """
TODO: how the saving is estimated (upper bound? which transformation of the step?) and its assumption."""
fix = """
TODO: what to change."""
example_before = \'\'\'
# TODO: the code that shows the problem
\'\'\'
example_after = \'\'\'
# TODO: the same code fixed
\'\'\'
references = []

[thresholds]
# % of the mean step time below which the saving is noise: the engine judges it on the report's step
# (perfdoctor/checks/after.py), the check hands it over in its Hit
min_saving_pct = 5.0

[verdict]  # the report's one-line verdict when this finding tops it (perfdoctor/model/verdict.py)
kind = "TODO-bound"  # what bounds the step, e.g. "input-bound"
removes = "TODO what the fix removes"  # after "fixing": e.g. "the wait for the DataLoader"
# replayed_with = "TODO the fix replayed"  # after "replaying the step with", when the saving is replayed
'''

MODULE = '''"""{code} {name}: TODO one line on what the check measures.

TODO: the detection (which events, which windows), the estimate and its source.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfdoctor.checks.common import pct, steps_over
from perfdoctor.checks.context import Outcome, RankContext, passed
from perfdoctor.findings import Estimate, Evidence, Hit

CODE = "{code}"
METRICS = {{
    "example_us": "TODO mean µs per step of what the rule measures",
    "example_pct": "example_us as % of the mean step time",
}}
# every field a hit gives the TOML message and headline (its evidence values and fields; checked at load)
MESSAGE_FIELDS = ("example_ms", "example_pct")


@dataclass(frozen=True)
class Thresholds:
    """``[thresholds]`` of rules/{code}.toml: names and types checked when the catalogue loads."""

    min_saving_pct: float


def check(ctx: RankContext) -> Outcome:
    """TODO: detect; return passed(**metrics), skipped(reason) or an Outcome with a Hit."""
    th = ctx.thresholds(Thresholds)  # typed: th.min_saving_pct is a float
    example = ctx.per_step(lambda s: 0.0)  # TODO: µs per step of what the rule looks for
    mean = float(example.mean())
    share = pct(mean, ctx.step_us)
    metrics = {{"example_us": mean, "example_pct": share}}
    if mean <= 0:  # min_saving_pct is the engine's, on the report's denominator (perfdoctor.checks.after)
        return passed(**metrics)
    ev = Evidence(
        values={{"example_ms": mean / 1000, "example_pct": share}},
        steps=steps_over(example, ctx.per_step(lambda s: s.dur_us), th.min_saving_pct, ctx.step_numbers),
    )
    method = "TODO: how the saving is estimated, the assumption and its source"
    hit = Hit(evidence=ev, estimate=Estimate(mean, method), min_saving_pct=th.min_saving_pct)
    return Outcome(metrics=metrics, hit=hit)
'''

TEST = '''"""{code} {name}: a firing and a silent case, numbers worked out by hand (µs)."""

from rules_helpers import SGEMM, run_tb
from tracebuilder import TraceBuilder


def _trace() -> TraceBuilder:
    """TODO: the smallest trace that shows the problem (one 1000 µs step here)."""
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=10, start=20, dur=900)
    return tb


def test_{lower}_fires(tmp_path):
    r = run_tb(_trace(), tmp_path, ["{code}"])
    f = r.findings["{code}"]  # fails until the check detects the problem in _trace()
    assert f["saving_us_per_step"] == 0  # TODO: the saving worked out by hand from _trace()


def test_{lower}_silent(tmp_path):
    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch(SGEMM, launch_ts=10, start=20, dur=970)
    r = run_tb(tb, tmp_path, ["{code}"])
    assert "{code}" in r.passed
'''


def scaffold(code: str, name: str, root: Path) -> list[Path]:
    """Write the rule's TOML, check module and test under ``root``; returns the paths written.

    Raises:
        PerfDoctorError: a malformed code or name, a code of no known family, a code or name the catalogue
            already has, or a file that already exists (never overwritten).
    """
    if not re.fullmatch(r"PD\d{3}", code):
        raise PerfDoctorError(f"{code!r}: a rule code is PD and three digits, like PD123")
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name):
        raise PerfDoctorError(f"{name!r}: a rule name is kebab-case, like small-batch")
    category = FAMILY_CATEGORY.get(code[2])
    if category is None:
        raise PerfDoctorError(
            f"{code}: no code family PD{code[2]}xx (families: "
            f"{', '.join(f'PD{k}xx {v}' for k, v in FAMILY_CATEGORY.items())})"
        )
    rules_dir = root / "rules"
    cat = load_catalogue(builtin_dir=rules_dir)
    if code in cat.rules or cat.by_name(name) is not None:
        raise PerfDoctorError(
            f"{code} {name}: the catalogue in {rules_dir} already has this code or name (codes are never reused)"
        )
    lower = code.lower()
    files = {
        rules_dir / f"{code}.toml": TOML.format(code=code, name=name, category=category),
        root / "perfdoctor" / "checks" / f"{lower}_{name.replace('-', '_')}.py": MODULE.format(code=code, name=name),
        root / "tests" / "rules" / f"test_{lower}.py": TEST.format(code=code, name=name, lower=lower),
    }
    existing = [str(p) for p in files if p.exists()]
    if existing:
        raise PerfDoctorError(f"{existing[0]} already exists: nothing written")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return list(files)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 written, 2 refused with one line)."""
    ap = argparse.ArgumentParser(prog="python -m perfdoctor.tools.new_rule", description=__doc__.splitlines()[0])
    ap.add_argument("code", help="the new code, e.g. PD123 (its family sets the category)")
    ap.add_argument("name", help="kebab-case name, e.g. some-name")
    ap.add_argument("--root", default=".", help="repository root (holds rules/, perfdoctor/, tests/)")
    args = ap.parse_args(argv)
    try:
        paths = scaffold(args.code, args.name, Path(args.root))
    except PerfDoctorError as exc:
        print(f"new_rule: error: {exc.message}", file=sys.stderr)
        return 2
    for p in paths:
        print(f"wrote {p}")
    print(
        "next: fill in the TODOs (CONTRIBUTING.md), then `python -m pytest tests/rules/"
        f"test_{args.code.lower()}.py` and `python -m perfdoctor.tools.refresh`"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
