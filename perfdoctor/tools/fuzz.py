"""Seeded mutation fuzzer for ``perfdoctor report``: ``python -m perfdoctor.tools.fuzz``.

Each case takes a trace from the corpus (``tests/data`` and ``sample_traces`` by default), applies one to
three random mutations (truncation, deleted keys, swapped types, 2**63 / 10**30 / 1e308 / NaN / negative
times and ids, 10,000-level nesting, many step markers, a huge rank number in the file name, junk after
the gzip stream, a byte-order mark, UTF-16) and runs ``perfdoctor report FILE --format json`` in this
process. Outcomes:

- ``report``: exit 0/1 and a JSON report;
- ``clean_error``: exit 2 and exactly one stderr line naming the file;
- ``bad_error``: exit 2 without that one line;
- ``traceback``: an exception escaped the CLI (a bug: the place is recorded);
- ``slow``: the case ran past ``--timeout`` seconds (stopped with SIGALRM);
- ``runtime_warning``: numpy printed a RuntimeWarning (counted besides the outcome);
- ``absurd``: a report with a step longer than a day (counted besides the outcome);
- ``impossible_share``: a report with a percentage outside 0–100 or a fraction outside 0–1
  (:func:`impossible_shares`; counted besides the outcome).

The same seed gives the same cases. ``--save DIR`` keeps every failing case. The test suite runs a few
dozen cases (``tests/test_fuzz.py``; ``PERFDOCTOR_FUZZ_CASES=10000`` for a long run).

Usage: python -m perfdoctor.tools.fuzz [--cases 200] [--seed 0] [--corpus PATH ...] [--max-kb 64]
       [--timeout 20] [--save DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gzip
import io
import json
import math
import random
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TypeAlias

# a parsed JSON value, mutable (the mutations edit the parsed trace in place)
Json: TypeAlias = "None | bool | int | float | str | list[Json] | dict[str, Json]"
TraceDoc: TypeAlias = dict[str, Json] | list[Json]  # a trace file: the object form, or the bare array of events

EXTREMES: tuple[Json, ...] = (
    2**63,
    -(2**63) - 1,
    2**64,
    10**30,
    -(10**30),
    1e308,
    -1e308,
    math.nan,
    math.inf,
    -1,
    -1e15,
    0,
    10**400,
    "NaN",
    "-Infinity",
    1.5,
)
NUMERIC_KEYS = ("ts", "dur", "pid", "tid", "id")
ARG_KEYS = (
    "correlation",
    "External id",
    "external id",
    "device",
    "stream",
    "bytes",
    "Input Dims",
    "Input type",
    "In msg nelems",
    "Group size",
    "Collective name",
    "Bytes",
    "Total Allocated",
    "Total Reserved",
    "Device Id",
    "Device Type",
    "name",
    "labels",
)
TOP_KEYS = ("deviceProperties", "distributedInfo", "baseTimeNanoseconds", "schemaVersion")
OUTCOMES = ("report", "clean_error", "bad_error", "traceback", "slow")
FLAGS = ("runtime_warning", "absurd", "impossible_share")  # counted besides the outcome, listed even when 0


class _Timeout(BaseException):
    """Raised by SIGALRM inside a case that runs too long (a BaseException: the CLI must not catch it)."""


@dataclass
class Case:
    """One mutated trace: the bytes to write, the file name, and what was done."""

    data: bytes
    name: str
    mutations: list[str]


@dataclass
class Tally:
    """Counts per outcome, the distinct crash sites, and the extra flags."""

    outcomes: Counter[str] = field(default_factory=Counter)
    sites: Counter[str] = field(default_factory=Counter)
    flags: Counter[str] = field(default_factory=Counter)
    failures: list[tuple[str, str, Case]] = field(default_factory=list)


# -- the corpus ----------------------------------------------------------------------------------------------
def corpus(paths: list[Path], max_bytes: int) -> list[tuple[str, TraceDoc]]:
    """(name, parsed JSON document) of every trace file under ``paths`` no larger than ``max_bytes`` on disk."""
    files = sorted(
        f
        for p in paths
        for f in ([p] if p.is_file() else p.rglob("*.json*"))
        if f.is_file()
        and f.name.endswith((".json", ".json.gz"))
        and "fuzz" not in f.parts
        and f.name not in ("run.json", "rank0.json")
        and f.stat().st_size <= max_bytes
    )
    docs: list[tuple[str, TraceDoc]] = []
    for f in files:
        raw = f.read_bytes()
        try:
            doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        except (ValueError, OSError):
            continue  # the deliberately broken traces of the corpus: mutate the others
        if isinstance(doc, (dict, list)):
            docs.append((f.name, doc))
    return docs


# -- mutations ------------------------------------------------------------------------------------------------
def _events(doc: TraceDoc) -> list[Json]:
    if isinstance(doc, list):
        return doc
    ev = doc.get("traceEvents")
    return ev if isinstance(ev, list) else []


def _nested(rng: random.Random) -> Json:
    value: Json = 0
    for _ in range(rng.choice((100, 1_000, 10_000))):
        value = [value] if rng.random() < 0.5 else {"a": value}
    return value


def _pick_event(doc: TraceDoc, rng: random.Random) -> dict[str, Json] | None:
    events = [e for e in _events(doc) if isinstance(e, dict)]
    return rng.choice(events) if events else None


def m_extreme(doc: TraceDoc, rng: random.Random) -> str:
    ev = _pick_event(doc, rng)
    if ev is None:
        return "extreme: no event"
    value = rng.choice(EXTREMES)
    args = ev.get("args")
    if rng.random() < 0.5 or not isinstance(args, dict):
        key = rng.choice(NUMERIC_KEYS)
        ev[key] = value
    else:
        key = rng.choice(ARG_KEYS)
        args[key] = value
    return f"extreme {key}={value!r}"[:80]


def m_delete_key(doc: TraceDoc, rng: random.Random) -> str:
    if isinstance(doc, dict) and rng.random() < 0.2:
        keys = list(doc)
        if keys:
            key = rng.choice(keys)
            del doc[key]
            return f"delete top-level {key}"
    ev = _pick_event(doc, rng)
    if not ev:
        return "delete: no event"
    args = ev.get("args")
    target = args if isinstance(args, dict) and args and rng.random() < 0.4 else ev
    key = rng.choice(list(target)) if target else ""
    target.pop(key, None)
    return f"delete {key}"


def m_swap_type(doc: TraceDoc, rng: random.Random) -> str:
    ev = _pick_event(doc, rng)
    if not ev:
        return "swap: no event"
    args = ev.get("args")
    keys = list(ev) + [f"args.{k}" for k in (args if isinstance(args, dict) else {})]
    key = rng.choice(keys) if keys else "ts"
    values: tuple[Json, ...] = (None, True, "x", "12", [], {}, [1, 2], {"k": 1}, 3.5, -7)
    value = rng.choice(values)
    if key.startswith("args.") and isinstance(args, dict):
        args[key[5:]] = value
    else:
        ev[key] = value
    return f"swap {key}={value!r}"


def m_negative_time(doc: TraceDoc, rng: random.Random) -> str:
    ev = _pick_event(doc, rng)
    if not ev:
        return "negative: no event"
    key = rng.choice(("ts", "dur"))
    old = ev.get(key) or 1.0
    if rng.random() < 0.5:  # a list or object there (an earlier mutation's) counts as 1.0; a string as float reads it
        ev[key] = -abs(float(old)) if isinstance(old, (int, float, str)) else -1.0
    else:
        ev[key] = 0
    return f"negative/zero {key}"


def m_nest(doc: TraceDoc, rng: random.Random) -> str:
    where = rng.choice(("event", "args", "top", "list"))
    ev = _pick_event(doc, rng)
    if where == "top" and isinstance(doc, dict):
        doc["deviceProperties"] = _nested(rng)
    elif where == "list" and _events(doc):
        _events(doc).insert(rng.randrange(len(_events(doc)) + 1), _nested(rng))
    elif ev is not None:
        deep = _nested(rng)
        args = ev.get("args", {})
        target = ev
        if where == "args" and isinstance(args, dict):
            ev["args"] = target = args
        target["deep"] = deep
    return f"nest in {where}"


def m_many_steps(doc: TraceDoc, rng: random.Random) -> str:
    events = _events(doc)
    steps = [e for e in events if isinstance(e, dict) and str(e.get("name", "")).startswith("ProfilerStep#")]
    if not steps:
        return "many steps: none"
    base = steps[0]
    n = rng.choice((1_000, 5_000))
    base_ts = base.get("ts")
    ts = float(base_ts or 0) if isinstance(base_ts, (int, float)) else 0.0
    for k in range(n):
        events.append({**base, "name": f"ProfilerStep#{k + 10**6}", "ts": ts + k, "dur": 1})
    return f"{n} extra ProfilerStep markers"


def m_metadata(doc: TraceDoc, rng: random.Random) -> str:
    if not isinstance(doc, dict):
        return "metadata: array form"
    key = rng.choice(TOP_KEYS)
    values: tuple[Json, ...] = (
        None,
        "x",
        10**30,
        [None],
        [{"computeMajor": None, "id": 0}],
        {"rank": 10**25},
        {"world_size": "two", "rank": -1},
        [{"totalGlobalMem": -5, "name": 7}],
    )
    value = rng.choice(values)
    doc[key] = value
    return f"metadata {key}={value!r}"[:80]


STRUCTURAL: tuple[Callable[[TraceDoc, random.Random], str], ...] = (
    m_extreme,
    m_extreme,
    m_delete_key,
    m_swap_type,
    m_negative_time,
    m_nest,
    m_many_steps,
    m_metadata,
)


def _copy_for_mutation(doc: TraceDoc) -> TraceDoc:
    """A copy deep enough that mutating events does not touch the corpus (events are copied lazily below)."""
    if isinstance(doc, list):
        return [copy.deepcopy(e) for e in doc]
    out = dict(doc)
    out["traceEvents"] = [copy.deepcopy(e) for e in _events(doc)]
    for key in TOP_KEYS:
        if key in out:
            out[key] = copy.deepcopy(out[key])
    return out


def make_case(name: str, doc: TraceDoc, rng: random.Random) -> Case:
    """One case: structural mutations on the document, then (sometimes) byte-level ones."""
    mutated = _copy_for_mutation(doc)
    done = [fn(mutated, rng) for fn in rng.sample(STRUCTURAL, rng.randint(0, 2))]
    try:
        data = json.dumps(mutated).encode()
    except (ValueError, RecursionError):
        data = json.dumps(_copy_for_mutation(doc)).encode()
        done.append("(nesting too deep to write: unmutated)")
    byte_ops = ("truncate", "junk_gz", "bom", "utf16", "flip", "none", "none", "none")
    op = rng.choice(byte_ops) if done else rng.choice(byte_ops[:5])
    gz = rng.random() < 0.3
    if op == "truncate":
        data = data[: rng.randrange(1, len(data))]
    elif op == "bom":
        data = b"\xef\xbb\xbf" + data
    elif op == "utf16":
        data = data.decode("utf-8", "replace").encode("utf-16")
    elif op == "flip":
        buf = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        data = bytes(buf)
    if gz or op == "junk_gz":
        data = gzip.compress(data, mtime=0)
        if op == "junk_gz":
            data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    if op != "none":
        done.append(op)
    stem = rng.choice(("trace", "trace", f"rank-{rng.choice((3, 2**31, 10**22))}", "worker7", "trace.JSON"))
    return Case(data, f"{stem}.json" + (".gz" if gz or op == "junk_gz" else ""), [f"{name}:"] + done)


# -- running a case -------------------------------------------------------------------------------------------
# the package's own folder: a frame is ours when its file lies under it, whatever the folders above are called (a
# clone in a folder named "perfdoctor" holds its virtualenv's numpy there too)
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def _package_relative(filename: str) -> str | None:
    """``trace/reader.py`` for a file of the perfdoctor package; None for any other file."""
    try:
        return Path(filename).resolve().relative_to(PACKAGE_DIR).as_posix()
    except ValueError:
        return None


def _crash_site(exc: BaseException) -> str:
    """``TypeError at trace/reader.py:150 (function)``: the innermost frame in the perfdoctor package (else the
    innermost frame, by its file name alone)."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [(f, rel) for f in frames if (rel := _package_relative(f.filename)) is not None]
    where, short = ours[-1] if ours else (frames[-1], Path(frames[-1].filename).name)
    return f"{type(exc).__name__} at {short}:{where.lineno} ({where.name})"


# percentages that are changes against a baseline, not shares of a whole: a straggler 3x the median is 200%
# above it, a phase that got faster changes by a negative percentage
RELATIVE_PCT = frozenset(
    ("excess_pct", "spread_pct", "trend_rise_pct", "change_pct", "cv_pct", "deviation_pct", "window_deviation_pct")
)
# fractions of a whole (0-1): a kernel's share of device time, device utilization, MFU, memory reserved
FRACTION_KEYS = frozenset(("share", "utilization", "mfu"))


def impossible_shares(report: Json) -> list[str]:
    """Every share in a JSON report outside what a share can be: a number under a key with a ``pct`` part
    (``idle_pct``, ``pct_of_attainable``, ``saving_pct_of_step``) outside 0-100, or a fraction (``share``,
    ``utilization``, ``mfu``, ``*_fraction``) outside 0-1; relative changes (:data:`RELATIVE_PCT`) aside.
    1e-6 of slack: a share summed from float parts may round to 100.00000000001. Returns ``"key = value"``."""
    found = []
    stack: list[Json] = [report]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and isinstance(k, str):
                    top = 100.0 if "pct" in k.split("_") and k not in RELATIVE_PCT else None
                    if k in FRACTION_KEYS or k.endswith("_fraction"):
                        top = 1.0
                    if top is not None and not -1e-6 <= v <= top * (1 + 1e-8) + 1e-6:
                        found.append(f"{k} = {v:.4g}")
                stack.append(v)
        elif isinstance(node, list):
            stack.extend(node)
    return sorted(set(found))


def _items(node: Json, key: str) -> list[Json]:
    """``node[key]`` when ``node`` is an object holding a list there, else []."""
    value = node.get(key) if isinstance(node, dict) else None
    return value if isinstance(value, list) else []


def _step_over_a_day(step: Json) -> bool:
    dur = step.get("dur_us", 0) if isinstance(step, dict) else 0
    return isinstance(dur, (int, float)) and dur > 86_400e6


def _absurd(report: Json) -> list[str]:
    """Values no real run has: a step over a day."""
    found = []
    for rank in _items(report, "ranks"):
        for dev in _items(rank, "devices"):
            if any(_step_over_a_day(s) for s in _items(dev, "steps")):
                found.append("step longer than a day")
    return sorted(set(found))


def run_case(case: Case, workdir: Path, timeout_s: float) -> tuple[str, str, list[str]]:
    """(outcome, detail, flags) of ``perfdoctor report`` on the case, run in this process."""
    from perfdoctor.cli import main

    path = workdir / case.name
    path.write_bytes(case.data)
    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.StringIO()
    flags: list[str] = []

    def alarm(signum: int, frame: FrameType | None) -> None:
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        with (
            warnings.catch_warnings(record=True) as caught,
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            warnings.simplefilter("always")
            code = main(["report", str(path), "--format", "json"])
    except _Timeout:
        return "slow", f"over {timeout_s:g} s", flags
    except BaseException as exc:  # noqa: BLE001 - any escape is the bug being counted
        return "traceback", _crash_site(exc), flags
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        path.unlink(missing_ok=True)
    if any(issubclass(w.category, RuntimeWarning) for w in caught):
        flags.append(
            "runtime_warning: " + next(str(w.message) for w in caught if issubclass(w.category, RuntimeWarning))[:60]
        )
    lines = err.getvalue().strip().splitlines()
    if code == 2:
        ok = len(lines) == 1 and str(path) in lines[0]
        return ("clean_error" if ok else "bad_error"), (lines[-1] if lines else "(no message)")[:160], flags
    out.flush()
    try:
        report: Json = json.loads(out.buffer.getvalue())
    except ValueError:
        return "bad_error", f"exit {code} without a JSON report", flags
    flags.extend(f"absurd: {a}" for a in _absurd(report))
    flags.extend(f"impossible_share: {a}" for a in impossible_shares(report))
    return "report", "", flags


def cases(docs: list[tuple[str, TraceDoc]], n: int, seed: int) -> Iterator[Case]:
    """``n`` cases, the same for the same seed and corpus."""
    rng = random.Random(seed)
    for _ in range(n):
        name, doc = docs[rng.randrange(len(docs))]
        yield make_case(name, doc, rng)


def campaign(
    docs: list[tuple[str, TraceDoc]],
    n: int,
    seed: int,
    timeout_s: float,
    on_case: Callable[[int, str, str], None] | None = None,
) -> Tally:
    """Run ``n`` cases; returns the tally (failing cases kept in ``failures``).

    ``on_case(index, outcome, detail)`` is called after each case (detail is empty unless it failed).
    """
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="perfdoctor-fuzz-") as tmp:
        for i, case in enumerate(cases(docs, n, seed)):
            outcome, detail, flags = run_case(case, Path(tmp), timeout_s)
            tally.outcomes[outcome] += 1
            for flag in flags:
                tally.flags[flag.split(":", 1)[0]] += 1
                tally.sites[flag] += 1
            if outcome in ("traceback", "bad_error", "slow"):
                tally.sites[f"{outcome}: {detail}"] += 1
            failed = outcome in ("traceback", "bad_error", "slow") or bool(flags)
            if failed:
                tally.failures.append((outcome, detail or "; ".join(flags), case))
            if on_case:
                on_case(i, outcome, f"{detail or '; '.join(flags)} <- {' '.join(case.mutations)}" if failed else "")
    return tally


def _summary(tally: Tally, n: int, seconds: float) -> str:
    lines = [f"{n} cases in {seconds:.0f} s"]
    lines += [f"  {k:<16}{tally.outcomes.get(k, 0):>7}" for k in OUTCOMES]
    lines += [f"  {k:<16}{tally.flags.get(k, 0):>7}" for k in sorted(set(FLAGS) | set(tally.flags))]
    if tally.sites:
        lines.append("distinct problems:")
        lines += [f"  {v:>5}  {k}" for k, v in tally.sites.most_common()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line; exit 1 when any case ended in a traceback, a bad error or ran too long, or a report held an
    impossible share."""
    repo = Path(__file__).resolve().parents[2]
    ap = argparse.ArgumentParser(prog="python -m perfdoctor.tools.fuzz", description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", type=Path, nargs="*", default=[repo / "tests" / "data", repo / "sample_traces"])
    ap.add_argument("--max-kb", type=int, default=64, help="corpus files up to this size on disk (default 64)")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds before a case counts as slow")
    ap.add_argument("--save", type=Path, help="write every failing case here, with a line on what it is")
    args = ap.parse_args(argv)
    docs = corpus(args.corpus, args.max_kb * 1024)
    if not docs:
        print("no corpus traces found", file=sys.stderr)
        return 2
    t0 = time.perf_counter()

    def progress(i: int, outcome: str, detail: str) -> None:  # failures as they happen, a count every 100
        if detail:
            print(f"case {i}: {outcome}: {detail}", file=sys.stderr, flush=True)
        elif (i + 1) % 100 == 0:
            print(f"{i + 1} cases, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

    tally = campaign(docs, args.cases, args.seed, args.timeout, progress)
    print(_summary(tally, args.cases, time.perf_counter() - t0))
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
        for i, (outcome, detail, case) in enumerate(tally.failures):
            (args.save / f"{i:04d}_{outcome}_{case.name}").write_bytes(case.data)
            with open(args.save / "index.txt", "a") as fh:
                fh.write(f"{i:04d} {outcome}: {detail} <- {' '.join(case.mutations)}\n")
    bad = sum(tally.outcomes.get(k, 0) for k in ("traceback", "bad_error", "slow")) + tally.flags["impossible_share"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
