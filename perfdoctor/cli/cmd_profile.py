"""``perfdoctor profile``: profile an unmodified training script in its steady state.

    perfdoctor profile train.py --steps 500 -- --batch_size=32
    perfdoctor profile -m package.module --steps 200
    torchrun --nproc-per-node 2 -m perfdoctor profile train.py --out runs/ddp

Step detection needs no code changes (optimizer step hooks); scripts without a
``torch.optim`` optimizer call ``perfdoctor.step()`` once per step.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from perfdoctor.cli.needs import require_torch
from perfdoctor.errors import PerfDoctorError

if TYPE_CHECKING:  # the runner imports torch: only `run` loads it, so `perfdoctor --help` stays fast
    from perfdoctor.capture.runner import RunResult
    from perfdoctor.model.report import FindingSection
    from perfdoctor.pipeline import BuiltReport

NAME = "profile"
HELP = "run a training script under the profiler (steady state, N steps) and write a run directory + report"


def _add_options(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    d = (lambda value: argparse.SUPPRESS) if default is argparse.SUPPRESS else (lambda value: value)
    parser.add_argument("-m", dest="module", metavar="MODULE", default=d(None), help="run a module, like python -m")
    parser.add_argument("--steps", type=int, default=d(500), help="optimizer steps to run, then stop (default 500)")
    parser.add_argument(
        "--wait", type=int, default=d(None), help="steps before the profiler window (default 40%% of --steps)"
    )
    parser.add_argument(
        "--warmup", type=int, default=d(None), help="profiler warm-up steps before each window (default 5)"
    )
    parser.add_argument("--active", type=int, default=d(None), help="steps recorded per window (default 10)")
    parser.add_argument("--repeat", type=int, default=d(1), help="number of profiler windows (default 1)")
    parser.add_argument(
        "--out", default=d(None), help="run directory to create (must be new; default perfdoctor-runs/<script>-<time>)"
    )
    parser.add_argument(
        "--tokens-per-step", type=int, default=d(None), help="tokens per optimizer step (default: from batch shapes)"
    )
    parser.add_argument(
        "--samples-per-step", type=int, default=d(None), help="samples per optimizer step (default: from batch shapes)"
    )
    parser.add_argument(
        "--no-flops", action="store_true", default=d(False), help="skip the FlopCounterMode measurement"
    )
    parser.add_argument("--no-report", action="store_true", default=d(False), help="write the run directory only")
    parser.add_argument(
        "--with-stack",
        action="store_true",
        default=d(False),
        help="record Python stacks in the profiled window: findings name the line of your code their time starts at",
    )
    parser.add_argument(
        "--memory-snapshot",
        action="store_true",
        default=d(False),
        help="CUDA only: record the allocator's history over the profiled window and write it to the run directory "
        "(memory_snapshot.rank<R>.pickle; `perfdoctor report RUN_DIR` reads it); on a machine without CUDA it "
        "stops before the script runs (exit 2)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _add_options(parser)
    parser.add_argument(
        "rest",
        nargs=argparse.REMAINDER,
        metavar="SCRIPT [OPTIONS] [-- SCRIPT_ARGS]",
        help="the script, then perfdoctor options, then -- and the script's arguments",
    )


class _OptionParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one clear line instead of argparse's usage + exit
        raise PerfDoctorError(f"profile: {message}; put the script's own arguments after --")


def _split_script_args(args: argparse.Namespace) -> tuple[str, list[str], bool]:
    """(target, script args, is_module) from ``rest``; options between SCRIPT and -- update ``args``."""
    rest = list(args.rest)
    if args.module is None:
        if not rest or rest[0] == "--":
            raise PerfDoctorError("profile: give a SCRIPT or -m MODULE")
        target, rest = rest[0], rest[1:]
    else:
        target = args.module
    cut = rest.index("--") if "--" in rest else len(rest)
    before, script_args = rest[:cut], rest[cut + 1 :]
    if before:
        opts = _OptionParser(prog="perfdoctor profile", add_help=False)
        _add_options(opts, default=argparse.SUPPRESS)
        opts.parse_args(before, namespace=args)
    if args.module is not None and target != args.module:
        raise PerfDoctorError("profile: give either a SCRIPT or -m MODULE, not both")
    return target, script_args, args.module is not None


def run(args: argparse.Namespace) -> int:
    require_torch("profile")
    from perfdoctor.capture.runner import run_profile
    from perfdoctor.capture.schedule import ProfileConfig

    target, script_args, module = _split_script_args(args)
    for flag in ("tokens_per_step", "samples_per_step"):
        value = getattr(args, flag, None)
        if value is not None and value <= 0:
            raise PerfDoctorError(f"profile: --{flag.replace('_', '-')} must be positive (got {value})")
    if args.memory_snapshot:
        _require_cuda_for_snapshot()
    cfg = ProfileConfig(
        steps=args.steps,
        wait=args.wait,
        warmup=args.warmup,
        active=args.active,
        repeat=args.repeat,
        tokens_per_step=args.tokens_per_step,
        samples_per_step=args.samples_per_step,
        measure_flops=not args.no_flops,
        with_stack=args.with_stack,
        memory_snapshot=args.memory_snapshot,
    )
    result = run_profile(target, script_args, cfg, module=module, out=args.out, command=["perfdoctor", *sys.argv[1:]])
    if result.traceback:
        sys.stderr.write(result.traceback)
    if result.error:
        print(f"perfdoctor: error: {result.error}", file=sys.stderr)
    if not result.coordinator:
        return result.exit_code
    if result.missing_ranks:
        print(f"perfdoctor: ranks {result.missing_ranks} did not finish; the report covers the others", file=sys.stderr)
    if result.partial:
        print(
            f"perfdoctor: partial run ({result.reason}); everything recorded so far is in {result.run_dir}",
            file=sys.stderr,
        )
    if not args.no_report:
        _print_summary(make_report(result.run_dir), result)
    else:
        print(f"perfdoctor: run directory {result.run_dir}", file=sys.stderr)
    return result.exit_code


def _require_cuda_for_snapshot() -> None:
    """Stop before the script runs when ``--memory-snapshot`` cannot be honoured: the snapshot is the CUDA caching
    allocator's history, and a run without it would silently lack what was asked for.

    Raises:
        PerfDoctorError: torch sees no CUDA device (exit 2).
    """
    import torch

    if not torch.cuda.is_available():
        raise PerfDoctorError(
            "profile: --memory-snapshot needs CUDA (it records the CUDA caching allocator's history) and torch sees "
            "no CUDA device here; run without it: on CPU the run's RSS and the trace's [memory] events are recorded"
        )


@dataclass(frozen=True)
class WrittenReport:
    """The report written into a run directory: its path, its findings (report order), ``kind`` "html" or
    "html-run-only" (from the run data alone), and why no trace was analysed (None when one was)."""

    path: Path
    findings: list[FindingSection]
    kind: str
    why: str | None


def make_report(run_dir: Path) -> WrittenReport:
    """Write ``report.html`` for ``run_dir``.

    The report pipeline (traces + run data -> checks -> HTML). Without a
    trace (no completed profiler window), or when the trace cannot be
    analysed, the report covers the run data alone (step series, throughput,
    run checks) and says why; ``run.json`` records which report was written.
    """
    from msgspec import UNSET

    from perfdoctor import pipeline
    from perfdoctor.capture.run_data import load_run_dir
    from perfdoctor.render.formats import render_bytes

    data = load_run_dir(run_dir)
    built = None
    try:
        built = pipeline.build([str(run_dir)], timeline_steps=[], loaded_run=data)
        if data.partial:
            built.model.partial = True
        report = built.model
    except PerfDoctorError as exc:  # e.g. a trace the reader rejects: keep the run data's report
        report = pipeline.build_report(
            [],
            run_dir=str(run_dir),
            partial=data.partial,
            without_traces=f"trace analysis failed: {exc.message}",
            loaded_run=data,
        )
    path = run_dir / "report.html"
    path.write_bytes(render_bytes(report, "html"))
    if built is not None and built.timelines():
        _write_run_timeline(run_dir, built)
    kind = "html" if report.ranks else "html-run-only"
    why = report.no_trace if isinstance(report.no_trace, str) else None
    _note_report(run_dir, {"kind": kind, "path": path.name, **({"why": why} if why is not None else {})})
    return WrittenReport(path, list(report.findings) if report.findings is not UNSET else [], kind, why)


def _write_run_timeline(run_dir: Path, built: BuiltReport) -> None:
    """``timeline.json.gz`` beside the report (the annotated timeline of the median and slowest step); a timeline
    that cannot be made is said in one line, the report stands."""
    from perfdoctor.render.timeline import write_timeline

    try:
        write_timeline(str(run_dir / "timeline.json.gz"), built.model, built.timelines())
    except PerfDoctorError as exc:
        print(f"perfdoctor: no timeline: {exc.message}", file=sys.stderr)


def _note_report(run_dir: Path, info: dict[str, str]) -> None:
    """Record in ``run.json`` which report was written (``kind``, ``path``, and ``why`` without a trace)."""
    import json

    from perfdoctor.capture.rundir import write_json

    run_json = run_dir / "run.json"
    data = json.loads(run_json.read_text())
    data["report"] = info
    write_json(run_json, data)


def _print_summary(report: WrittenReport, result: RunResult) -> None:
    """On stderr: why no trace was analysed, the first five findings (code and message), where the report is."""
    if report.why:
        print(f"perfdoctor: no trace to analyse: {report.why}", file=sys.stderr)
    for f in report.findings[:5]:
        print(" ", f.code, f.message, file=sys.stderr)  # "  PD101 message"
    if not report.findings:
        print("  no findings", file=sys.stderr)
    print(f"perfdoctor: {result.steps_completed} steps run; report: {report.path}", file=sys.stderr)
