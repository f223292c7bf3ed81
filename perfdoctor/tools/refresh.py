"""Refresh every generated file after an intended change: ``python -m perfdoctor.tools.refresh``.

One command for what used to take several: the golden files in ``tests/golden/`` (the rules on every shared
real trace, and the JSON/Markdown reports of the bundled samples) are rewritten by running their tests with
``PERFDOCTOR_UPDATE_GOLDEN=1``, then ``reports/`` is regenerated (:mod:`perfdoctor.tools.regen_reports`). Read
the diff (``git diff tests/golden reports``) before committing: every changed number should be one you meant to
change. ``--check`` rewrites nothing and exits 1 when anything is stale.

Run it from the repository root with the test dependencies installed (``pip install -e ".[test]"``); the rules
golden needs ``../shared/traces`` (without it that golden is left as it is and the command says so).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from perfdoctor.tools import regen_reports

# test files whose goldens PERFDOCTOR_UPDATE_GOLDEN=1 rewrites (each compares exactly without it)
GOLDEN_TESTS = ("tests/test_rules_golden.py", "tests/test_markdown.py")


def _pytest(root: Path, update: bool) -> int:
    """Run the golden tests under ``root``; with ``update`` they rewrite their goldens. Returns pytest's status."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    if update:
        env["PERFDOCTOR_UPDATE_GOLDEN"] = "1"
    else:
        env.pop("PERFDOCTOR_UPDATE_GOLDEN", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *GOLDEN_TESTS]
    return subprocess.run(cmd, cwd=root, env=env, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 refreshed / fresh, 1 stale or a golden test failed)."""
    ap = argparse.ArgumentParser(prog="python -m perfdoctor.tools.refresh", description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=".", help="repository root (holds tests/, sample_traces/, reports/)")
    ap.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 when a golden or report is stale")
    args = ap.parse_args(argv)
    root = Path(args.root).resolve()
    if not (root / "tests" / "golden").is_dir():
        print(f"{root}: no tests/golden here; run from the repository root or give --root", file=sys.stderr)
        return 2
    status = _pytest(root, update=not args.check)
    if args.check:
        stale = regen_reports.stale(root, root / "reports")
        for name in stale:
            print(f"stale: reports/{name}")
        return 1 if status or stale else 0
    if status:
        print("golden tests failed while refreshing (see above)", file=sys.stderr)
        return 1
    for path in regen_reports.regenerate(root, root / "reports"):
        print(f"wrote {path.relative_to(root)}")
    print("refreshed tests/golden/ and reports/: read `git diff tests/golden reports` before committing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
