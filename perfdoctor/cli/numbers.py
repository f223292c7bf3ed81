"""Number flags: argparse's ``float`` takes "nan" and "inf", which then pass every range check (a NaN is neither
below nor above a bound): ``perfdoctor diff --fail-on-regression nan`` turned the CI gate off and exited 0."""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable

from perfdoctor.errors import PerfDoctorError


def flag(name: str) -> str:
    """The command-line spelling of an argparse destination: ``tokens_per_step`` -> ``--tokens-per-step``."""
    return "--" + name.replace("_", "-")


def check_finite(args: argparse.Namespace, names: Iterable[str]) -> None:
    """Raise PerfDoctorError (exit 2, one line) naming the first of the float flags ``names`` given as NaN or ±inf."""
    for name in names:
        value = getattr(args, name, None)
        if value is not None and not math.isfinite(value):
            raise PerfDoctorError(f"{flag(name)}: must be a finite number, got {value}")
