"""The work a step does and what the hardware could do: FLOPs and bytes per op, roofline, MFU, peaks, calibration."""
