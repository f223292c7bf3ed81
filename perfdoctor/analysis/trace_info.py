"""Profiler settings and versions recorded in a trace's top-level metadata (as text, nothing inferred)."""

from __future__ import annotations

from perfdoctor.trace.json_value import JsonObject

SETTING_KEYS = (
    "schemaVersion",
    "record_shapes",
    "profile_memory",
    "with_stack",
    "with_flops",
    "with_modules",
    "displayTimeUnit",
    "cupti_version",
    "cuda_runtime_version",
    "cuda_driver_version",
    "roctracer_version",
    "hip_runtime_version",
    "hip_driver_version",
)
_MAX_CHARS = 200


def profiler_settings(metadata: JsonObject) -> dict[str, str]:
    """Known settings found in the trace metadata, values as text (cut to 200 characters).

    ``distributedInfo`` contributes ``backend``, ``rank`` and ``world_size``; absent keys are left out.
    """
    out = {k: str(metadata[k])[:_MAX_CHARS] for k in SETTING_KEYS if k in metadata}
    dist = metadata.get("distributedInfo")
    if isinstance(dist, dict):
        for k in ("backend", "rank", "world_size"):
            if k in dist:
                out[f"distributed {k}"] = str(dist[k])[:_MAX_CHARS]
    return out
