"""`perfdoctor calibrate`: measure this machine's achievable matmul FLOP/s and copy bandwidth."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from perfdoctor.cli.needs import require_torch
from perfdoctor.errors import PerfDoctorError

NAME = "calibrate"
HELP = "measure this machine's achievable matmul FLOP/s per dtype and memory bandwidth (CPU and CUDA)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        action="append",
        metavar="DEV",
        help="device to measure: cpu, cuda, cuda:N (repeatable; default: cpu and cuda:0 if present)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds; for tests, not for reports)")
    parser.add_argument("--out-dir", type=Path, help="where to store (default $PERFDOCTOR_HOME or ~/.cache/perfdoctor)")
    parser.add_argument("--show", action="store_true", help="print the stored calibration and measure nothing")
    parser.add_argument("--json", action="store_true", help="print the record as JSON")


def _devices(requested: list[str] | None) -> list[str]:
    import torch

    if not requested:
        return ["cpu"] + (["cuda:0"] if torch.cuda.is_available() else [])
    out = []
    for dev in requested:
        dev = "cuda:0" if dev == "cuda" else dev
        if dev.startswith("cuda") and not torch.cuda.is_available():
            raise PerfDoctorError(f"--device {dev}: CUDA is not available on this machine")
        if dev != "cpu" and not dev.startswith("cuda"):
            raise PerfDoctorError(f"--device {dev}: expected cpu, cuda or cuda:N")
        out.append(dev)
    return out


def run(args: argparse.Namespace) -> int:
    from perfdoctor.analysis.work import calibration as cal

    if not args.show:
        require_torch("calibrate")
    if args.show:
        path = None
        if args.out_dir:
            path = args.out_dir / "calibration" / f"{cal.machine_id()}.json"
        record = cal.load_calibration(path)
    else:
        record = cal.calibrate(_devices(args.device), quick=args.quick)
        path = cal.save_calibration(record, args.out_dir / "calibration" if args.out_dir else None)
        record["path"] = str(path)
    if args.json:
        print(json.dumps(record, indent=2, sort_keys=True))
        return 0
    print(f"machine {record['machine_id']} ({record['cpu_model']}), measured {record['measured_at']}")
    for dev, entry in record["devices"].items():
        peaks = ", ".join(f"{d} {v / 1e12:.3g} TFLOP/s" for d, v in entry["peak_flops"].items())
        quick = " (quick: not representative)" if entry["method"].get("quick") else ""
        print(f"  {dev} {entry['device_name']}: {peaks}; copy {entry['copy_bytes_per_s'] / 1e9:.3g} GB/s{quick}")
    if record.get("under_load"):
        print(f"warning: {record['under_load']}; reports will not use these CPU figures")
    if "path" in record:
        print(f"stored in {record['path']} (refreshing overwrites this cache file)")
    return 0
