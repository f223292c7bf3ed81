"""Regenerate ``reports/`` from ``sample_traces/``: ``python -m perfdoctor.tools.regen_reports``.

For each trace in ``sample_traces/`` (a ``.json``/``.json.gz`` file, or a
directory of per-rank traces) this runs ``perfdoctor report`` exactly as a
user would and writes ``reports/<sample>.html``, ``.md`` and ``.json``. It runs
from the repository root and passes the trace path relative to it, so the
reports name ``sample_traces/...`` and are the same bytes on every machine.
``tests/test_reports_fresh.py`` fails when the committed reports are stale.

Options: ``--root DIR`` (repository root, default: the current directory),
``--out DIR`` (default ``<root>/reports``), ``--check`` (compare instead of
writing; exit 1 and list the stale files).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
from pathlib import Path

FORMATS = ("html", "md", "json")
_SUFFIXES = (".json.gz", ".json")


def sample_name(path: Path) -> str:
    """``sample_traces/mlp_cpu.pt.trace.json.gz`` -> ``mlp_cpu.pt.trace``; directories keep their name."""
    for suf in _SUFFIXES:
        if path.name.endswith(suf):
            return path.name[: -len(suf)]
    return path.name


def samples(root: Path) -> list[Path]:
    """Trace files and per-rank trace directories directly under ``root/sample_traces``, sorted by name."""
    d = root / "sample_traces"
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.is_dir() or p.name.endswith(_SUFFIXES))


def _report(rel_trace: str, out: Path) -> None:
    """``perfdoctor report TRACE -o OUT --force`` with its terminal output swallowed."""
    from perfdoctor.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        rc = main(["report", rel_trace, "-o", str(out), "--force", "--width", "100"])
    if rc != 0:
        raise SystemExit(f"perfdoctor report {rel_trace} failed (exit {rc}): {err.getvalue().strip()}")


def regenerate(root: Path, out_dir: Path) -> list[Path]:
    """Write every sample's reports into ``out_dir``; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    cwd = os.getcwd()
    home = os.environ.get("PERFDOCTOR_HOME")
    os.chdir(root)
    # the committed reports must not depend on this machine's `perfdoctor calibrate` results
    scratch = tempfile.TemporaryDirectory()
    os.environ["PERFDOCTOR_HOME"] = scratch.name
    try:
        for trace in samples(root):
            rel = trace.relative_to(root).as_posix()
            for fmt in FORMATS:
                dest = out_dir.resolve() / f"{sample_name(trace)}.{fmt}"
                _report(rel, dest)
                written.append(dest)
    finally:
        os.chdir(cwd)
        scratch.cleanup()
        if home is None:
            os.environ.pop("PERFDOCTOR_HOME", None)
        else:
            os.environ["PERFDOCTOR_HOME"] = home
    return written


def stale(root: Path, reports: Path) -> list[str]:
    """Names of reports in ``reports`` that differ from a fresh regeneration, are missing, or are extra."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = {p.name: p.read_bytes() for p in regenerate(root, Path(tmp))}
    have = {
        p.name: p.read_bytes() for p in reports.glob("*") if p.suffix.lstrip(".") in FORMATS and p.name != "README.md"
    }
    return sorted(n for n in fresh.keys() | have.keys() if fresh.get(n) != have.get(n))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfdoctor.tools.regen_reports", description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=".", help="repository root (holds sample_traces/)")
    ap.add_argument("--out", default=None, help="output directory (default: ROOT/reports)")
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 when reports are stale")
    args = ap.parse_args(argv)
    root = Path(args.root).resolve()
    out = Path(args.out) if args.out else root / "reports"
    if not samples(root):
        print(f"no sample traces in {root / 'sample_traces'}", file=sys.stderr)
        return 2
    if args.check:
        bad = stale(root, out)
        for name in bad:
            print(f"stale: {out / name}")
        return 1 if bad else 0
    for p in regenerate(root, out):
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
