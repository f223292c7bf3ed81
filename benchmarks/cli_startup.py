"""Start-up time of ``perfdoctor report --help`` against a bare ``python -c pass``.

Each command runs ``--repeats`` times in a fresh interpreter (the same one running this script), alternating
with the baseline so both see the same machine load; prints min and median wall-clock seconds of each, the
difference (perfdoctor's own import cost) and whether torch was imported. Target: under 0.3 s.

    python benchmarks/cli_startup.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "perfdoctor report --help": [sys.executable, "-m", "perfdoctor", "report", "--help"],
    "perfdoctor --help": [sys.executable, "-m", "perfdoctor", "--help"],
}


def wall_s(argv: list[str]) -> float:
    """Wall-clock seconds of one run of ``argv`` (stdout discarded)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env, cwd=ROOT)
    return time.perf_counter() - start


def imports_torch() -> bool:
    """Whether building the report parser and printing its help imports torch."""
    code = (
        "import contextlib, io, sys\nfrom perfdoctor.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['report', '--help'])\nprint('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    ).stdout
    return out.strip() == "True"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.repeats):
        for name, argv in COMMANDS.items():
            times[name].append(wall_s(argv))
    base = statistics.median(times["python -c pass"])
    print(f"{'command':<28}{'min s':>8}{'median s':>10}{'− baseline s':>14}")
    for name, series in times.items():
        med = statistics.median(series)
        print(f"{name:<28}{min(series):>8.3f}{med:>10.3f}{med - base:>14.3f}")
    print(f"torch imported by `report --help`: {imports_torch()}")


if __name__ == "__main__":
    main()
