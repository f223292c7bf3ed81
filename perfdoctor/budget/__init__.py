"""Planning a training run before it exists: compute-optimal tokens, 6·N·D FLOPs, wall-clock at an MFU and memory
per GPU (:mod:`.plan`), with the MFU optionally taken from a report a profiled run produced (:mod:`.measured`)."""
