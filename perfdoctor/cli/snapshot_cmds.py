"""``perfdoctor report SNAPSHOT.pickle`` and ``perfdoctor diff BEFORE.pickle AFTER.pickle``: the memory-snapshot
path of the two commands, taken when an input is a ``torch.cuda.memory._dump_snapshot`` file."""

from __future__ import annotations

import argparse
import hashlib
import os
import sys

from perfdoctor.errors import PerfDoctorError


def snapshot_inputs(paths: list[str]) -> bool:
    """Whether the inputs are memory snapshots (True), traces (False); refuses a mix.

    Raises:
        PerfDoctorError: some inputs are snapshots and others are not.
    """
    from perfdoctor.snapshot.reader import looks_like_snapshot

    snaps = [p for p in paths if looks_like_snapshot(p)]
    if snaps and len(snaps) != len(paths):
        other = next(p for p in paths if p not in snaps)
        raise PerfDoctorError(f"{snaps[0]}: a memory snapshot, and {other} is not; give snapshots or traces, not both")
    return bool(snaps)


def _load(path: str) -> object:
    from perfdoctor.snapshot.analysis import analyse
    from perfdoctor.snapshot.reader import read_snapshot

    snapshot = read_snapshot(path)
    with open(path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    return analyse(snapshot, digest)


def _emit(doc: object, args: argparse.Namespace, inputs: list[str], exit_code: int) -> int:
    """Write ``-o`` (format from its extension), then stdout in ``--format``; return ``exit_code``."""
    from rich.console import Console

    from perfdoctor.cli.console import show_then_exit, stdout_console
    from perfdoctor.cli.output import check_output, write_report
    from perfdoctor.render import snapshot as render
    from perfdoctor.render.formats import format_for
    from perfdoctor.snapshot.report import SnapshotDiff, SnapshotReport

    assert isinstance(doc, SnapshotReport | SnapshotDiff)
    if args.output is not None:
        check_output(args.output, inputs, args.force)
        write_report(args.output, render.render_bytes(doc, format_for(args.output)))
        Console(stderr=True).print(f"report written to {args.output}", highlight=False)

    def show() -> None:
        if args.format in ("json", "md"):
            sys.stdout.buffer.write(render.render_bytes(doc, args.format))
        else:
            render.render_terminal(doc, stdout_console(args.width))

    return show_then_exit(show, exit_code)


def report_snapshot(args: argparse.Namespace) -> int:
    """``perfdoctor report SNAPSHOT``: one snapshot's memory report.

    Raises:
        PerfDoctorError: more than one snapshot, or one that cannot be read (:func:`read_snapshot`).
    """
    if len(args.paths) != 1:
        raise PerfDoctorError(
            f"{args.paths[1]}: report reads one memory snapshot at a time; compare two with "
            f"`perfdoctor diff {args.paths[0]} {args.paths[1]}`"
        )
    if args.output is not None:  # refused before the reading, as for traces
        from perfdoctor.cli.output import check_output

        check_output(args.output, args.paths, args.force)
        args.force = True  # the file was checked now; the probe left nothing behind
    return _emit(_load(args.paths[0]), args, args.paths, 0)


def diff_snapshots(args: argparse.Namespace) -> int:
    """``perfdoctor diff BEFORE AFTER`` of two snapshots; exit 1 when ``--fail-on-regression PCT`` is given and a
    device's peak allocated bytes grew by more than PCT %.

    Raises:
        PerfDoctorError: not exactly two snapshots, ``--vs`` given, a negative PCT, or an unreadable file.
    """
    from rich.console import Console

    from perfdoctor.snapshot.diff import compare, peak_regression

    paths = args.paths + (args.vs or [])
    if args.vs is not None or len(paths) != 2:
        raise PerfDoctorError("diff of memory snapshots takes exactly BEFORE.pickle AFTER.pickle (no --vs)")
    if os.path.realpath(paths[0]) == os.path.realpath(paths[1]):
        raise PerfDoctorError(f"{paths[1]}: the same file was given twice; give BEFORE and AFTER")
    pct = args.fail_on_regression
    if pct is not None and not pct >= 0:
        raise PerfDoctorError(f"--fail-on-regression must be ≥ 0 (got {pct:g})")
    if args.output is not None:
        from perfdoctor.cli.output import check_output

        check_output(args.output, paths, args.force)
        args.force = True
    before, after = _load(paths[0]), _load(paths[1])
    diff = compare(before, after)  # type: ignore[arg-type]
    worse = peak_regression(diff, pct) if pct is not None else None
    code = _emit(diff, args, paths, 1 if worse else 0)
    if worse is not None:
        grew = "from 0" if worse.peak_allocated_change_pct is None else f"{worse.peak_allocated_change_pct:+.1f}%"
        Console(stderr=True).print(
            f"regression: device {worse.device}'s peak allocated grew {grew} "
            f"({worse.before_peak_allocated_bytes:,} → {worse.after_peak_allocated_bytes:,} bytes), beyond "
            f"--fail-on-regression {pct:g}%",
            highlight=False,
        )
    return code
