"""Split a merged multi-rank trace (several ranks' events in one file) into one trace per rank.

Merge tools write several ranks into one Chrome-trace file so Perfetto shows them side by side. Analysed as
one trace, such a file looks like one rank with several devices and its ranks' collectives are folded together,
so perfdoctor splits it first. Three layouts are recognised:

- ``args.rank`` on the events (TraceLens TraceFusion: every event gets ``args["rank"]``; ``pid``,
  ``id`` and ``correlation`` / ``External id`` are offset per rank, the originals kept as ``<field>_raw``,
  which are restored here);
- a pid per rank: ``process_name`` metadata events whose label names a rank (``rank 3``, ``[rank3]``),
  every event of that pid going to that rank;
- ``distributedInfo`` blocks: a top-level JSON array of whole per-rank traces, each with its own
  ``traceEvents`` and ``distributedInfo.rank``.

Detection reads the first :data:`SNIFF_BYTES` of the (decompressed) JSON; only a file that looks merged is
parsed whole (orjson) and written back as one temporary trace per rank, which the normal reader then loads.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import tempfile
from collections import defaultdict
from dataclasses import dataclass

import orjson

from perfdoctor.errors import TraceFormatError
from perfdoctor.trace.json_value import JsonObject, JsonValue

SNIFF_BYTES = 8 << 20
_ARGS_RANK = re.compile(rb'"rank"\s*:\s*(\d+)')
_LABEL_RANK = re.compile(r"\brank\s*[-_#:]?\s*(\d+)", re.I)
_RAW = ("pid", "id")
_ARG_RAW = ("correlation", "External id")


@dataclass
class RankPart:
    """One rank of a merged file: its rank, a temporary trace file holding only its events, and the note."""

    rank: int
    path: str
    note: str


def _open(path: str) -> gzip.GzipFile | io.BufferedReader:
    """The file for reading bytes, through gzip when its name ends in ``.gz``."""
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def _head(path: str) -> bytes:
    try:
        with _open(path) as fh:
            return bytes(fh.read(SNIFF_BYTES))
    except (OSError, EOFError):
        return b""


def looks_merged(path: str) -> bool:
    """Cheap test on the file's head: a top-level array of traces, several ``"rank": N`` values, or
    process names that name ranks."""
    head = _head(path)
    stripped = head.lstrip()
    if stripped.startswith(b"[") and head.count(b'"traceEvents"') >= 1:
        return True
    if len({m.group(1) for m in _ARGS_RANK.finditer(head)}) >= 2:
        return True
    return (
        b'"process_name"' in head
        and len({m.group(1) for m in re.finditer(rb'"name"\s*:\s*"[^"]*\brank\s*[-_#:]?\s*(\d+)', head, re.I)}) >= 2
    )


def _load(path: str) -> JsonValue:
    try:
        with _open(path) as fh:
            doc: JsonValue = orjson.loads(fh.read())
            return doc
    except (OSError, EOFError, orjson.JSONDecodeError) as exc:
        raise TraceFormatError(
            f"{path}: looks like a merged multi-rank trace but cannot be parsed whole ({exc})"
        ) from None


def _restore(ev: JsonObject) -> JsonObject:
    """Undo a merge tool's per-rank offsets (``<field>_raw`` holds the original)."""
    args = ev.get("args")
    if not isinstance(args, dict):
        return ev
    for f in _RAW:
        if f"{f}_raw" in args:
            ev[f] = args.pop(f"{f}_raw")
    for f in _ARG_RAW:
        if f"{f}_raw" in args:
            args[f] = args.pop(f"{f}_raw")
    args.pop("rank", None)
    return ev


def _by_args_rank(events: list[JsonValue]) -> dict[int, list[JsonObject]] | None:
    """The events grouped by their ``args.rank`` (metadata events without one go to every rank); None when fewer
    than two ranks are named."""
    groups: dict[int, list[JsonObject]] = defaultdict(list)
    unranked: list[JsonValue] = []
    for ev in events:
        args = ev.get("args") if isinstance(ev, dict) else None
        r = args.get("rank") if isinstance(args, dict) else None
        if isinstance(ev, dict) and isinstance(r, int) and not isinstance(r, bool):
            groups[r].append(ev)
        else:
            unranked.append(ev)
    if len(groups) < 2:
        return None
    for ev in unranked:  # metadata without a rank (e.g. a merger's own labels) goes to every rank
        if isinstance(ev, dict) and ev.get("ph") == "M":
            for g in groups.values():
                g.append(ev)
    return dict(groups)


def _by_pid_label(events: list[JsonValue]) -> dict[int, list[JsonObject]] | None:
    """The events grouped by the rank their process's name gives (``process_name`` metadata naming a rank); None
    when fewer than two ranks are named."""
    rank_of: dict[str, int] = {}  # by the pid's JSON text: a pid may be a number or a string
    for ev in events:
        if isinstance(ev, dict) and ev.get("ph") == "M" and ev.get("name") == "process_name":
            args = ev.get("args")
            m = _LABEL_RANK.search(str(args.get("name", "") if isinstance(args, dict) else ""))
            if m:
                rank_of[_pid_key(ev.get("pid"))] = int(m.group(1))
    if len(set(rank_of.values())) < 2:
        return None
    groups: dict[int, list[JsonObject]] = defaultdict(list)
    for ev in events:
        if isinstance(ev, dict) and _pid_key(ev.get("pid")) in rank_of:
            groups[rank_of[_pid_key(ev.get("pid"))]].append(ev)
    return dict(groups)


def _pid_key(pid: JsonValue) -> str:
    """A pid as a key that compares as the values do in Python (``1``, ``1.0`` and ``true`` alike, ``"1"`` apart)."""
    if isinstance(pid, (int, float)):
        return repr(float(pid))
    return repr(pid)


def split_merged(path: str) -> tuple[list[RankPart], str] | None:
    """The ranks of a merged file as temporary per-rank traces and the temporary directory holding them (the
    caller removes it), or None when ``path`` holds one rank.

    Raises:
        TraceFormatError: the file looks merged but is not valid JSON as a whole.
    """
    if not looks_merged(path):
        return None
    doc = _load(path)
    parts: dict[int, tuple[JsonObject, list[JsonValue]]] = {}
    how = ""
    if isinstance(doc, list):
        for i, sub in enumerate(x for x in doc if isinstance(x, dict) and isinstance(x.get("traceEvents"), list)):
            info = sub.get("distributedInfo")
            given = info.get("rank") if isinstance(info, dict) else None
            rank = given if isinstance(given, int) else i
            events = sub.get("traceEvents")
            parts[int(rank or 0)] = (
                {k: v for k, v in sub.items() if k != "traceEvents"},
                events if isinstance(events, list) else [],
            )
        how = "its distributedInfo blocks (a JSON array of per-rank traces)"
    elif isinstance(doc, dict) and isinstance(all_events := doc.get("traceEvents"), list):
        meta = {k: v for k, v in doc.items() if k != "traceEvents"}
        groups = _by_args_rank(all_events)
        how = "args.rank on its events"
        if groups is None:
            groups = _by_pid_label(all_events)
            how = "its process names (one pid per rank)"
        if groups is None:
            return None
        dist = meta.get("distributedInfo")
        world = dist.get("world_size") if isinstance(dist, dict) else None
        for r, evs in groups.items():
            rank_info: JsonObject = {"rank": r, **({"world_size": world} if world else {})}
            restored: list[JsonValue] = [_restore(dict(e)) for e in evs]
            parts[r] = ({**meta, "distributedInfo": rank_info}, restored)
    if len(parts) < 2:
        return None
    tmp = tempfile.mkdtemp(prefix="perfdoctor-ranks-")
    out = []
    for r in sorted(parts):
        part_meta, part_events = parts[r]
        p = os.path.join(tmp, f"rank{r}.json")
        with open(p, "wb") as fh:
            fh.write(orjson.dumps({**part_meta, "traceEvents": part_events}))
        out.append(
            RankPart(r, p, f"{path}: a merged trace of {len(parts)} ranks, split into ranks by {how}; this is rank {r}")
        )
    return out, tmp
