"""Validate a trace's top-level metadata (``deviceProperties``, ``distributedInfo``, ...).

The analyses read a few of these keys as numbers (a GPU's compute capability,
its memory, the job's world size); a value of the wrong type or beyond int64
is removed here, with one warning that counts what was removed, so nothing
downstream sees ``computeMajor: null`` or a 100-digit rank.
"""

from __future__ import annotations

from perfdoctor.trace.fields import INT64_MAX, INT64_MIN, MAX_RANK
from perfdoctor.trace.json_value import JsonObject, JsonValue

#: ``deviceProperties`` keys that must be non-negative integers when present (Kineto's
#: ``CudaDeviceProperties`` / ``RocmDeviceProperties``, libkineto/src/CuptiActivityProfiler.cpp).
DEVICE_INT_KEYS = (
    "id",
    "computeMajor",
    "computeMinor",
    "totalGlobalMem",
    "numSms",
    "maxThreadsPerBlock",
    "maxThreadsPerMultiprocessor",
    "regsPerBlock",
    "regsPerMultiprocessor",
    "warpSize",
    "sharedMemPerBlock",
    "sharedMemPerMultiprocessor",
    "sharedMemPerBlockOptin",
)
#: ``distributedInfo`` keys that must be integers in ``[0, MAX_RANK]`` when present.
DIST_INT_KEYS = ("rank", "world_size", "pg_count")


def _is_int(value: object, lo: int, hi: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def _too_big(value: JsonValue) -> bool:
    """An integer (not a bool) beyond int64."""
    return isinstance(value, int) and not isinstance(value, bool) and not _is_int(value, INT64_MIN, INT64_MAX)


def _prune(value: JsonValue, removed: list[int]) -> JsonValue:
    """``value`` without integers beyond int64 (counted in ``removed[0]``); iterative, any depth."""
    stack: list[JsonValue] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            bad_keys = [k for k, v in node.items() if _too_big(v)]
            for k in bad_keys:
                del node[k]
            removed[0] += len(bad_keys)
            stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            bad = [i for i, v in enumerate(node) if _too_big(v)]
            for i in reversed(bad):
                del node[i]
            removed[0] += len(bad)
            stack.extend(v for v in node if isinstance(v, (dict, list)))
    return value


def _device_entry(entry: JsonValue, removed: list[int]) -> JsonObject | None:
    """One ``deviceProperties`` entry without its invalid values (counted); None when it is not an object."""
    if not isinstance(entry, dict):
        removed[0] += 1
        return None
    for key in DEVICE_INT_KEYS:
        if key in entry and not _is_int(entry[key], 0, INT64_MAX):
            del entry[key]
            removed[0] += 1
    if "name" in entry and not isinstance(entry["name"], str):
        del entry["name"]
        removed[0] += 1
    return entry


def sanitize_metadata(path: str, doc: JsonObject, warnings: list[str]) -> JsonObject:
    """``doc`` with invalid values removed; appends one warning naming the count when any were.

    Rules: integers anywhere must fit int64; ``deviceProperties`` must be a list of objects
    whose :data:`DEVICE_INT_KEYS` are non-negative integers and whose ``name`` is a string;
    ``distributedInfo`` must be an object whose :data:`DIST_INT_KEYS` are integers in
    ``[0, MAX_RANK]``. ``doc`` is modified in place and returned.
    """
    removed = [0]
    _prune(doc, removed)
    props = doc.get("deviceProperties")
    if props is not None:
        if isinstance(props, list):
            doc["deviceProperties"] = [e for e in (_device_entry(p, removed) for p in props) if e is not None]
        else:
            del doc["deviceProperties"]
            removed[0] += 1
    info = doc.get("distributedInfo")
    if info is not None:
        if isinstance(info, dict):
            for key in DIST_INT_KEYS:
                if key in info and not _is_int(info[key], 0, MAX_RANK):
                    del info[key]
                    removed[0] += 1
        else:
            del doc["distributedInfo"]
            removed[0] += 1
    if removed[0]:
        warnings.append(
            f"{path}: {removed[0]} trace metadata value(s) of the wrong type or out of range "
            "(deviceProperties, distributedInfo, integers beyond 64 bits) ignored"
        )
    return doc
