"""The ranks' report sections kept encoded (msgpack bytes), decoded one at a time when read.

A rank's section (its per-step breakdown, top kernels and ops, roofline rows, replay) is about 38 kB as msgpack
and about 90 kB as Python objects (the 8-rank DLRM job's ranks, measured with tracemalloc). A many-rank report
reads most of them never (the terminal and HTML show the job and its outlier ranks) or once in passing (the JSON
report), so :class:`RankSections` holds the bytes the workers sent and decodes a section on each access
(0.05 ms each), keeping only the last :data:`MEMO` decoded: a small job's sections keep their identity across
reads, a 4,096-rank job never holds more than :data:`MEMO` of them as objects.

It is a ``Sequence[RankSection]``: ``Report.ranks`` may be one (a report built from rank summaries) or a plain
list (a report read back from JSON); :func:`perfdoctor.model.codec.to_builtins` writes both alike.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import overload

import msgspec

from perfdoctor.model.report import RankSection, ReplaySection

MEMO = 32  # decoded sections kept (most recently read); above 16 ranks the HTML details only the outlier ranks

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(RankSection)


class _ReplayOnly(msgspec.Struct):
    """The ``replay`` field of an encoded section, decoded without the rest (msgspec skips unknown fields)."""

    replay: ReplaySection | None = None


_REPLAY_DECODER = msgspec.msgpack.Decoder(_ReplayOnly)


class _Median(msgspec.Struct):
    median: float


class _DeviceHead(msgspec.Struct):
    device: int
    step_time_us: _Median


class _Head(msgspec.Struct):
    """The rank and its devices' median step times of an encoded section, without the rest."""

    rank: int | None = None
    primary_device: int = -1
    devices: list[_DeviceHead] = []

    def median_step_us(self) -> float | None:
        """The primary device's median step time (µs), as ``RankSection.primary.step_time_us.median``."""
        return next((d.step_time_us.median for d in self.devices if d.device == self.primary_device), None)


_HEAD_DECODER = msgspec.msgpack.Decoder(_Head)


def encode_section(section: RankSection) -> bytes:
    """msgpack bytes of ``section`` (exact: floats written as IEEE doubles)."""
    return _ENCODER.encode(section)


def decode_section(data: bytes) -> RankSection:
    """The section :func:`encode_section` wrote. Raises msgspec.DecodeError / ValidationError on other bytes."""
    return _DECODER.decode(data)


def replay_of(data: bytes) -> ReplaySection | None:
    """The ``replay`` of an encoded section, without decoding the rest."""
    return _REPLAY_DECODER.decode(data).replay


class RankSections(Sequence[RankSection]):
    """The sections of ranks, from their :func:`encode_section` bytes (see the module docstring)."""

    def __init__(self, blobs: Sequence[bytes]) -> None:
        self._blobs = list(blobs)
        self._memo: OrderedDict[int, RankSection] = OrderedDict()
        self._heads: list[_Head] | None = None

    def _head(self) -> list[_Head]:
        if self._heads is None:  # ~3 µs a section, against ~0.1 ms to decode one whole
            self._heads = [_HEAD_DECODER.decode(b) for b in self._blobs]
        return self._heads

    def ranks(self) -> list[int | None]:
        """Each section's ``rank``, in order, without decoding the sections."""
        return [h.rank for h in self._head()]

    def median_steps_us(self) -> dict[int, float]:
        """``{rank: primary.step_time_us.median}`` (µs) of the sections that name a rank, without decoding them."""
        heads = [(h.rank, h.median_step_us()) for h in self._head()]
        return {r: m for r, m in heads if r is not None and m is not None}

    def __len__(self) -> int:
        return len(self._blobs)

    @overload
    def __getitem__(self, i: int) -> RankSection: ...

    @overload
    def __getitem__(self, i: slice) -> list[RankSection]: ...

    def __getitem__(self, i: int | slice) -> RankSection | list[RankSection]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        k = range(len(self))[i]  # IndexError past the end; negative indices count from it
        sec = self._memo.pop(k, None)
        if sec is None:
            sec = decode_section(self._blobs[k])
        self._memo[k] = sec
        if len(self._memo) > MEMO:
            self._memo.popitem(last=False)
        return sec

    def __iter__(self) -> Iterator[RankSection]:
        return (self[k] for k in range(len(self)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value like a list

    def __repr__(self) -> str:
        return f"RankSections({len(self)} ranks, {sum(len(b) for b in self._blobs):,} bytes)"


def as_builtins(obj: object) -> list[RankSection]:
    """msgspec ``enc_hook``: a :class:`RankSections` as a list of its sections."""
    if isinstance(obj, RankSections):
        return list(obj)
    raise NotImplementedError(f"cannot serialise {type(obj).__name__}")
