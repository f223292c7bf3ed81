"""F19: a rule whose check computes its saving by replay says so in its TOML ``saving`` text (what
``perfdoctor rule PDxxx`` prints), and no longer calls that saving an upper bound."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPLAYED = {
    "PD101",
    "PD102",
    "PD103",
    "PD104",
    "PD105",
    "PD201",
    "PD202",
    "PD203",
    "PD204",
    "PD205",
    "PD301",
    "PD302",
    "PD401",
}


def _replaying_checks() -> set[str]:
    """Codes whose check module calls the replayed-saving helper (``ctx.replayed_saving``)."""
    codes = set()
    for path in (ROOT / "perfdoctor" / "checks").glob("pd[0-9][0-9][0-9]_*.py"):
        if "replayed_saving(" in path.read_text():
            codes.add("PD" + re.match(r"pd(\d{3})_", path.name).group(1))
    return codes


def test_every_replayed_rule_describes_the_replay():
    codes = _replaying_checks()
    assert REPLAYED <= codes  # F19's nine checks and the CPU ones (issue 10 item 7) all replay
    for code in sorted(codes):
        saving = tomllib.loads((ROOT / "rules" / f"{code}.toml").read_text())["saving"]
        flat = " ".join(saving.split())
        assert "replay" in flat, code
        assert "What-if `" in flat and "not a bound" in flat, code
        assert not flat.startswith("Upper bound"), code


def test_rule_command_prints_the_replay_text(capsys):
    from perfdoctor.cli import main

    assert main(["rule", "PD101"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "prefetch-dataloader" in out and "An estimate from replay, not a bound" in out
