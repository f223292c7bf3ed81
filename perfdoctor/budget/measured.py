"""The MFU a perfdoctor report measured, as a budget's input: refused unless it was measured on the plan's device
at the plan's dtype peak (an MFU is relative to one device's peak and does not carry over).

The report is read as parsed JSON (any perfdoctor version's report, or a file that is not one): every key is
checked where it is read.
"""

from __future__ import annotations

import math
import re

from perfdoctor.analysis.work.hardware import DeviceSpec, match_device
from perfdoctor.errors import PerfDoctorError
from perfdoctor.trace.json_value import JsonObject, JsonValue

PEAK_RTOL = 0.005  # a report's peak within 0.5% of the plan's is the same datasheet figure (rounding in the JSON)
LOW_MFU = 0.05  # below 5% a measured MFU describes a toy, cold or input-bound run, not a tuned one at scale
MIN_STEPS = 3


def _object(value: JsonValue) -> JsonObject:
    """``value`` when it is a JSON object, else an empty one (a key it lacks reads as absent)."""
    return value if isinstance(value, dict) else {}


def _ranks(report: JsonValue) -> list[JsonValue]:
    """The report's ``ranks`` list ([] when it has none)."""
    ranks = _object(report).get("ranks")
    return ranks if isinstance(ranks, list) else []


def _report_device_properties(entry: JsonObject) -> JsonObject:
    """A report's ``device_properties`` entry (name, compute_capability "9.0", sm_count,
    memory_bytes) back in Kineto's keys, for :func:`~perfdoctor.analysis.work.hardware.match_device`."""
    props: JsonObject = {
        "name": entry.get("name"),
        "numSms": entry.get("sm_count"),
        "totalGlobalMem": entry.get("memory_bytes"),
    }
    cc = re.fullmatch(r"(\d+)\.(\d+)", str(entry.get("compute_capability") or ""))
    if cc:
        props["computeMajor"], props["computeMinor"] = int(cc.group(1)), int(cc.group(2))
    return props


def measured_on(rank: JsonObject) -> tuple[str, str | None]:
    """The device one report rank's MFU was measured on: (words for it, hardware-table key).

    The key is None for a CPU (never a GPU) and for a GPU the table does not know. The GPU
    is the first ``device_properties`` entry, as :func:`perfdoctor.analysis.work.mfu.roofs_for_trace`
    chose it for the MFU's peak; a rank with ``mfu.on_gpu`` false is a CPU-only trace whose
    peak came from ``perfdoctor calibrate`` (its ``peak_source`` names the CPU model).
    """
    mfu = _object(rank.get("mfu"))
    listed = rank.get("device_properties")
    props = [p for p in (listed if isinstance(listed, list) else []) if isinstance(p, dict)]
    if mfu.get("on_gpu") is False or (mfu.get("on_gpu") is None and rank.get("primary_device") == -1):
        cpu = re.search(r"\((.*)\) at ", str(mfu.get("peak_source") or ""))
        return (f"a CPU ({cpu.group(1)})" if cpu else "a CPU"), None
    if not props:
        return "a device the report does not record (no ranks[i].device_properties)", None
    spec = match_device(_report_device_properties(props[0]))
    if spec is None:
        return f"'{props[0].get('name')}', which is not in the hardware table", None
    return spec.name, spec.key


def _rank_mfu(rank: JsonValue, path: str, where: str) -> float | None:
    """``rank["mfu"]["mfu"]`` as a float, None when absent; PerfDoctorError when not in (0, 1]."""
    value = _object(_object(rank).get("mfu")).get("mfu")
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not (math.isfinite(value) and 0 < value <= 1):
        raise PerfDoctorError(f"{path}: {where}.mfu.mfu is {value}, not an MFU in (0, 1]")
    return float(value)


def _check_same_peak(rank: JsonObject, path: str, where: str, target: DeviceSpec, dtype: str, peak: float) -> None:
    """PerfDoctorError when the rank's MFU is relative to another dtype or another peak than the plan's."""
    mfu = _object(rank.get("mfu"))
    if mfu.get("dtype") and mfu["dtype"] != dtype:
        raise PerfDoctorError(
            f"{path}: {where}'s MFU is relative to the {mfu['dtype']} peak of {target.name}, "
            f"the plan uses its {dtype} peak; pass --dtype {mfu['dtype']} to plan at the measured precision, "
            "or give --mfu explicitly"
        )
    report_peak = mfu.get("peak_flops_per_s")
    if isinstance(report_peak, (int, float)) and abs(report_peak - peak) > PEAK_RTOL * peak:
        raise PerfDoctorError(
            f"{path}: {where}'s MFU is relative to a {report_peak / 1e12:.4g} TFLOP/s peak "
            f"({mfu.get('peak_source') or 'source not recorded'}), not the {peak / 1e12:.4g} "
            f"TFLOP/s {dtype} datasheet peak the plan uses; give --mfu explicitly"
        )


def mfu_from_report(report: JsonValue, path: str, target: DeviceSpec, dtype: str, peak_flops_per_s: float) -> float:
    """The MFU a perfdoctor JSON report measured (mean of ``report["ranks"][i]["mfu"]["mfu"]``),
    usable only for a plan on the same device at the same peak.

    Args:
        target: the plan's :class:`~perfdoctor.analysis.work.hardware.DeviceSpec`.
        dtype / peak_flops_per_s: the plan's GEMM dtype and its dense peak, FLOP/s.

    MFU is achieved FLOP/s ÷ one device's peak, so it says nothing about another device
    (a CPU run's MFU is against a calibrated CPU peak; another GPU model has another
    balance of compute, bandwidth and launch cost) or another dtype's peak.

    Raises:
        PerfDoctorError: the key is missing or holds no MFU; a rank's MFU was measured on
            a device other than ``target`` (CPU, another or unknown GPU) or against another
            dtype or peak. Each names the file, the device or peak, and says to pass --mfu.
    """
    ranks = _ranks(report)
    values = []
    for i, entry in enumerate(ranks):
        value = _rank_mfu(entry, path, f"ranks[{i}]")
        if value is None:
            continue
        rank = _object(entry)  # a rank with an MFU is an object
        where = f"rank {rank.get('rank', i)}" if len(ranks) > 1 else "the run"
        device, key = measured_on(rank)
        if key != target.key:
            raise PerfDoctorError(
                f"{path}: {where}'s MFU ({value:.1%}) was measured on {device}, not on the target {target.name}; "
                "an MFU does not carry over to another device: pass --mfu explicitly (a report can give it only "
                f"when measured on {target.name})"
            )
        _check_same_peak(rank, path, where, target, dtype, peak_flops_per_s)
        values.append(value)
    if not values:
        raise PerfDoctorError(f"{path}: no measured MFU in the report (missing key ranks[i].mfu.mfu)")
    return sum(values) / len(values)


def _steps_of_primary(rank: JsonValue) -> int | None:
    """How many steps the rank's primary device has in the report (None when it lists none)."""
    r = _object(rank)
    devices = r.get("devices")
    prim = next(
        (
            d
            for d in (devices if isinstance(devices, list) else [])
            if isinstance(d, dict) and d.get("device") == r.get("primary_device")
        ),
        None,
    )
    steps = prim.get("steps") if prim is not None else None
    return len(steps) if isinstance(steps, list) else None


def report_mfu_caveats(report: JsonValue, mfu: float) -> list[str]:
    """Why a projection from a report's MFU may mislead (one line each; empty when none applies).

    A trace of one or two steps (its MFU carries warm-up and one-off costs) and an MFU under :data:`LOW_MFU`
    (a tiny model, a cold or input-bound step) make the projected wall-clock an upper bound that a tuned run
    would not come near.
    """
    out = []
    counts = [n for n in (_steps_of_primary(r) for r in _ranks(report)) if n is not None]
    if counts and min(counts) < MIN_STEPS:
        out.append(
            f"the report's MFU comes from {min(counts)} step(s): a short trace carries warm-up and one-off "
            "costs, so the projected time is an upper bound; profile a few steady-state steps"
        )
    if mfu < LOW_MFU:
        out.append(
            f"an MFU of {mfu:.1%} describes a toy, cold or input-bound run, not a tuned one at this scale: "
            "the projected time is an upper bound, not a plan (pass --mfu with a target)"
        )
    return out
