"""The summary of one rank: everything the report and the cross-rank analyses need, without the raw events.

A :class:`RankSummary` holds the rank's report section (per-step breakdown, top kernels and ops, roofline, MFU,
memory), the outcome of every rank-scope rule (its metrics and evidence), the reasons the rank lacks what a rule
needs, its analysed step rows and its collective timeline (:class:`CollectiveTimeline`: kind, bytes, launch,
start and end of each collective kernel). Its size grows with the steps, the collectives per step and the
top-N tables, not with the trace's events: a few hundred kB for a trace of a few hundred steps.

It is made where the trace is (a pool or Dask worker) by :func:`summarise_file`, serialises with msgspec
(``encode`` / ``decode``; JSON and msgpack both round-trip floats exactly), and is cached under
``$PERFDOCTOR_HOME/cache`` (default ``~/.cache/perfdoctor/cache``) keyed by the trace's sha256 and the options it
was made with.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from perfdoctor import __version__
from perfdoctor.analysis.memory.run_memory import AllocatorValues
from perfdoctor.analysis.rank import Analysis, CpuSeries, RankAnalysis, UnprofiledStep
from perfdoctor.analysis.timing.breakdown import DeviceBreakdown, StepBreakdown
from perfdoctor.analysis.work.batch_shape import BatchShape, batch_shape, input_shapes
from perfdoctor.analysis.work.mfu import ModelFlops
from perfdoctor.checks.context import Outcome
from perfdoctor.crossrank.collectives import CollectiveTimeline
from perfdoctor.crossrank.joint import JointInputs, rank_inputs
from perfdoctor.errors import PerfDoctorError
from perfdoctor.model.report import RankSection, UnprofiledSection
from perfdoctor.model.sections import decode_section, encode_section, replay_of
from perfdoctor.timeline.tracks import RankTimeline

if TYPE_CHECKING:
    from perfdoctor.analysis.work.roofline import Roofs
    from perfdoctor.checks.catalogue import Catalogue

FORMAT = 12  # bump when RankSummary changes: cached summaries of another format are made again (12: collectives_free)
CACHE_SUFFIX = ".perfdoctor-summary"


def cache_dir() -> str:
    """Where ``--cache`` keeps summaries: ``$PERFDOCTOR_HOME/cache``, else ``~/.cache/perfdoctor/cache`` (the home
    :func:`perfdoctor.analysis.work.calibration.calibration_dir` uses). Each entry is named by the sha256 of its key."""
    home = os.environ.get("PERFDOCTOR_HOME")
    base = home if home else os.path.join(os.path.expanduser("~"), ".cache", "perfdoctor")
    return os.path.join(base, "cache")


class SummaryOptions(msgspec.Struct, frozen=True):
    """What a rank's analysis depends on besides its trace (part of the cache key).

    ``codes``: the rules to run (built-in codes, in :func:`perfdoctor.checks.engine.check_order`);
    ``rules_dirs``: user rule directories; ``run_json``: ``run.json`` of a ``perfdoctor profile`` run directory;
    ``step_time_s_by_rank``: that run's steady-state median step time per rank (s); ``run_allocator_by_rank``: its
    CUDA allocator counts per steady step over the whole run, per rank, as evidence values
    (:func:`perfdoctor.analysis.memory.run_memory.run_allocator_values`); ``peer_ends``: per rank
    (its summary's path), the recorded starts of its collectives and the earliest each may end given its peers'
    arrivals (µs, :mod:`perfdoctor.jobs.rounds`).
    """

    step_marker: str | None = None
    model_flops: ModelFlops | None = None
    step_time_s_by_rank: dict[int, float] = {}
    run_allocator_by_rank: dict[int, AllocatorValues] = {}
    # each rank's steps.csv CPU-time series and steady start (perfdoctor.capture.run_data.rank_inputs)
    run_cpu_by_rank: dict[int, CpuSeries] = {}
    run_json: dict[str, Any] | None = None
    codes: list[str] = []
    rules_dirs: list[str] = []
    hash_inputs: bool = True
    peer_ends: dict[str, tuple[list[float], list[float]]] = {}
    # the job has several trace files, so its ranks may be replayed jointly: each summary carries its JointInputs
    # (four replays of the rank); a one-file report makes them only for the ranks of a merged multi-rank file
    joint: bool = True
    # make each rank's annotated timeline (perfdoctor.timeline.tracks) of these step numbers ([]: the median and
    # the slowest step); None: no timeline
    timeline_steps: list[int] | None = None
    # this machine's calibrated CPU roofs (perfdoctor calibrate) for a CPU-only run recorded on it, else None
    measured_roofs: Roofs | None = None

    def fingerprint(self) -> str:
        """sha256 of the options, the perfdoctor version, its code fingerprint
        (:func:`perfdoctor.jobs.fingerprint.code_fingerprint`: edited code makes its summaries again) and the
        summary format (hex)."""
        from perfdoctor.jobs.fingerprint import code_fingerprint

        h = hashlib.sha256(msgspec.json.encode(self, enc_hook=_enc))
        h.update(f"{__version__}/{code_fingerprint()}/{FORMAT}".encode())
        return h.hexdigest()


class CollectivesFreeStep(msgspec.Struct, frozen=True):
    """One rank's mean step (µs) as measured (the step its savings are taken from) and replayed with every
    collective free (:func:`perfdoctor.replay.transforms.collectives.free_collectives`)."""

    step_us: float
    free_step_us: float


class RankSummary(msgspec.Struct):
    """One rank of a job (see the module docstring).

    ``index``: position of its file among the inputs (the rank when the trace names none); ``section``: the
    rank's typed report section (:func:`perfdoctor.model.build.rank_section`) as msgpack bytes
    (:func:`perfdoctor.model.sections.encode_section`: the reducer holds thousands of them, decoded only when
    read; :meth:`rank_section`); None for a rank that failed;
    ``input``: the report's ``inputs`` entry (path,
    bytes, sha256, events, uncompressed bytes); ``step_rows``: the primary device's analysed steps (µs);
    ``outcomes``: rank-scope rule outcomes by code, each as msgpack bytes (:func:`encode_outcome`; ~0.5 kB each,
    ~3× that as objects: the reducer decodes one rule's outcomes at a time, :class:`Outcomes`);
    ``requirement_reasons``: why the rank lacks a requirement
    (``perfdoctor.checks.catalogue.REQUIREMENTS``); ``error``: the one-line error of a rank that failed (the
    other fields then empty); ``note``: how the rank was found (e.g. split from a merged file); ``rank_named``,
    ``devices``, ``world_size``: what tells ranks of one job from separate runs (:func:`perfdoctor.jobs.reduce.reduce`);
    ``warmup_us_by_step``: first-call work per step (µs, by step number, left-out leading cold steps included) and
    ``cold_steps``: the steps it fills (PD902; :meth:`perfdoctor.analysis.steps.steps.Steps.cold_steps`), which
    cross-rank statistics leave out. Both default empty, so a summary written before them (format 5) decodes as
    one with no cold step. ``joint``: what the reducer replays the job's ranks jointly from (their fixes together
    and the recording: :class:`perfdoctor.crossrank.joint.JointInputs`, a few numbers per collective and per step);
    None for a rank without collective kernels or replay. ``batch``: the input batch of its steps read from the
    recorded shapes (:func:`perfdoctor.analysis.work.batch_shape.batch_shape`; None when none tells), ``input_shapes``:
    each op's first ``Input Dims`` in its first analysed step
    (:func:`perfdoctor.analysis.work.batch_shape.input_shapes`),
    which ``perfdoctor diff`` reads to compare work per step. ``timeline``: the rank's annotated timeline
    (:class:`perfdoctor.timeline.tracks.RankTimeline`), made only when the options ask for it.
    ``collectives_free``: the rank's mean step measured and with every collective free (:class:`CollectivesFreeStep`),
    made with ``joint`` (a job of several ranks) for a rank with collectives; None otherwise.
    """

    index: int
    path: str
    rank: int | None = None
    input: dict[str, Any] = {}
    section: bytes | None = None
    steps_source: str = ""
    step_marker: str = ""  # the section's step_marker, kept out of the encoded section for the rules
    primary_kind: str = ""
    primary_device: int = -1
    step_rows: list[StepBreakdown] = []
    collectives: CollectiveTimeline | None = None
    outcomes: dict[str, bytes] = {}
    requirement_reasons: dict[str, str] = {}
    warnings: list[str] = []
    error: str | None = None
    note: str | None = None
    rank_named: bool = True  # the trace names its rank (distributedInfo or file name); else ``rank`` is ``index``
    devices: str = ""  # the GPUs its deviceProperties lists ("4 × Tesla V100-DGXS-32GB"; "" none)
    world_size: int = 0  # distributedInfo.world_size (0 unknown)
    key: str = ""  # sha256 of the trace + options fingerprint this summary was made for (the cache key)
    perfdoctor_version: str = ""
    code_fingerprint: str = ""
    worker: str = ""
    warmup_us_by_step: dict[int, float] = {}
    cold_steps: list[int] = []
    joint: JointInputs | None = None
    batch: BatchShape | None = None
    input_shapes: dict[str, str] = {}
    timeline: RankTimeline | None = None  # the rank's annotated timeline, when SummaryOptions.timeline_steps asks
    collectives_free: CollectivesFreeStep | None = None

    def rank_section(self) -> RankSection | None:
        """The rank's report section, decoded from ``section`` (None for a rank that failed)."""
        return None if self.section is None else decode_section(self.section)

    def replay(self) -> dict[str, Any] | None:
        """The ``replay`` of the rank's report section as plain values, decoded without the rest of the section;
        None without one."""
        rep = None if self.section is None else replay_of(self.section)
        return None if rep is None else msgspec.to_builtins(rep)


def _enc(obj: object) -> object:
    """msgspec encode hook: numpy scalars and arrays as Python numbers and lists."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise NotImplementedError(f"cannot serialise {type(obj).__name__}")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc)
_DECODER = msgspec.msgpack.Decoder(list[RankSummary])
_OUTCOME_DECODER = msgspec.msgpack.Decoder(Outcome)


def encode_outcome(outcome: Outcome) -> bytes:
    """msgpack bytes of a rule's outcome on one rank (numpy values as Python numbers and lists, sets sorted)."""
    return _ENCODER.encode(outcome)


def decode_outcome(data: bytes) -> Outcome:
    """The outcome :func:`encode_outcome` wrote. Raises msgspec.ValidationError / DecodeError on other bytes."""
    return _OUTCOME_DECODER.decode(data)


class Outcomes(Mapping[str, Outcome]):
    """A rank's encoded outcomes (:attr:`RankSummary.outcomes`) read as ``{code: Outcome}``: each read decodes
    afresh (a few µs) and keeps nothing, so the reducer holds one rule's outcomes of every rank at a time, not
    every rule's (4,096 ranks × 19 rules held 144 MB as objects, measured with tracemalloc)."""

    def __init__(self, encoded: Mapping[str, bytes]) -> None:
        self._encoded = encoded

    def __getitem__(self, code: str) -> Outcome:
        return decode_outcome(self._encoded[code])

    def __iter__(self) -> Iterator[str]:
        return iter(self._encoded)

    def __len__(self) -> int:
        return len(self._encoded)


def encode(summaries: list[RankSummary]) -> bytes:
    """msgpack bytes of ``summaries`` (exact: floats are written as IEEE doubles)."""
    return _ENCODER.encode(summaries)


def decode(data: bytes) -> list[RankSummary]:
    """The summaries :func:`encode` wrote. Raises msgspec.ValidationError / DecodeError on other bytes."""
    return _DECODER.decode(data)


def sha256_of(path: str) -> str:
    """Hex sha256 of a file's bytes (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def local_copy(path: str) -> Iterator[str]:
    """``path`` itself, or for an fsspec URL (``s3://…``, ``gs://…``) a temporary local copy of it.

    Raises:
        PerfDoctorError: a URL whose scheme has no fsspec backend installed, or that cannot be read.
    """
    if "://" not in path or path.startswith("file://"):
        yield path.removeprefix("file://")
        return
    try:
        import fsspec  # type: ignore[import-untyped]
    except ImportError:
        raise PerfDoctorError(f"{path}: reading URLs needs fsspec (pip install fsspec and its backend)") from None
    suffix = ".json.gz" if path.endswith(".gz") else ".json"
    fd, tmp = tempfile.mkstemp(suffix=suffix)
    try:
        try:
            with fsspec.open(path, "rb") as src, os.fdopen(fd, "wb") as dst:
                for block in iter(lambda: src.read(1 << 22), b""):
                    dst.write(block)
        except (ImportError, ValueError, OSError) as exc:
            raise PerfDoctorError(f"{path}: cannot read ({exc})") from None
        yield tmp
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def rank_summary(
    analysis: Analysis[RankAnalysis],
    ra: RankAnalysis,
    index: int,
    input_info: dict[str, Any],
    cat: Catalogue,
    order: list[str],
    note: str | None = None,
    joint: bool = True,
) -> RankSummary:
    """The summary of ``ra`` (a :class:`perfdoctor.pipeline.RankAnalysis` inside the one-rank ``analysis``,
    efficiency already added): its rule outcomes, then its report section (rules may add warnings); ``joint``:
    with its :class:`~perfdoctor.crossrank.joint.JointInputs` (only a job of several ranks reads them)."""
    from perfdoctor.checks import context as cx
    from perfdoctor.checks import engine
    from perfdoctor.crossrank import collectives as collective_wait
    from perfdoctor.model.build import rank_section

    ctx = cx.RankContext(analysis, ra)
    outcomes = engine.rank_outcomes(analysis, ctx, cat, order)
    prim = ra.primary
    return RankSummary(
        index=index,
        path=ra.tables.path,
        rank=ra.rank,
        input=input_info,
        section=encode_section(rank_section(ra)),
        steps_source=ra.steps.source,
        step_marker=ra.steps.marker,
        primary_kind=prim.kind,
        primary_device=int(prim.device),
        step_rows=list(prim.steps),
        collectives=collective_wait.timeline(ra),
        outcomes={code: encode_outcome(o) for code, o in outcomes.items()},
        requirement_reasons=engine.requirement_reasons(analysis, ra),
        warnings=list(ra.warnings),
        note=note,
        warmup_us_by_step=ra.steps.warmup_by_step(),
        cold_steps=ra.steps.cold_steps(),
        joint=rank_inputs(ra.replay, ra.tables) if joint and ra.replay is not None else None,
        batch=batch_shape(ra.tables, ra.steps),
        input_shapes=input_shapes(ra.tables, ra.steps),
        collectives_free=_collectives_free(ra) if joint else None,
    )


def _collectives_free(ra: RankAnalysis) -> CollectivesFreeStep | None:
    """The rank's :class:`CollectivesFreeStep` (None without a replay, analysed steps or collectives)."""
    from perfdoctor.replay.transforms.collectives import free_collectives_step_us

    both = None if ra.replay is None else free_collectives_step_us(ra.replay, ra.tables)
    return None if both is None else CollectivesFreeStep(step_us=both[0], free_step_us=both[1])


@dataclass(frozen=True)
class SummarisedSteps:
    """A rank summary's analysed steps (:class:`perfdoctor.analysis.rank.StepFacts`): their ``source`` and
    ``marker`` as found, their ``numbers`` and the ``cold`` ones (PD902)."""

    source: str
    marker: str
    numbers: list[int]
    cold: list[int]

    def cold_steps(self) -> list[int]:
        """As :meth:`perfdoctor.analysis.steps.steps.Steps.cold_steps`, from the summary."""
        return list(self.cold)

    def __len__(self) -> int:
        return len(self.numbers)


@dataclass(frozen=True)
class SummarisedRank:
    """A rank read back from its :class:`RankSummary` where the job's ranks meet
    (:class:`perfdoctor.analysis.rank.RankResult`): its analysed steps' rows on the primary device, the unprofiled
    step of a profile run (its section's ``replay.unprofiled``), no tables (``trace`` None)."""

    summary: RankSummary
    rank: int | None
    primary: DeviceBreakdown
    steps: SummarisedSteps
    warnings: list[str]
    unprofiled: UnprofiledStep | None
    requirement_reasons: dict[str, str]

    @property
    def trace(self) -> None:
        """None: the rank's tables stayed where it was analysed."""
        return None

    @classmethod
    def of(cls, s: RankSummary) -> SummarisedRank:
        """The rank of summary ``s``."""
        rep = None if s.section is None else replay_of(s.section)
        unprofiled = rep.unprofiled if rep is not None and isinstance(rep.unprofiled, UnprofiledSection) else None
        return cls(
            summary=s,
            rank=s.rank,
            primary=DeviceBreakdown(device=s.primary_device, kind=s.primary_kind, steps=list(s.step_rows)),
            steps=SummarisedSteps(s.steps_source, s.step_marker, [int(r.step) for r in s.step_rows], s.cold_steps),
            warnings=s.warnings,
            unprofiled=None if unprofiled is None else UnprofiledStep.of(msgspec.structs.asdict(unprofiled)),
            requirement_reasons=s.requirement_reasons,
        )
