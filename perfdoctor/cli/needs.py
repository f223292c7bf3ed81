"""What a command needs that the base install does not bring (torch for ``profile`` and ``calibrate``).

``pip install perfdoctor`` reads traces (``report``, ``rules``, ``rule``, ``budget``) without torch; the commands
that run PyTorch code check for it up front so a missing torch is one line and exit 2, not an ImportError.
"""

from __future__ import annotations

import importlib.util

from perfdoctor.errors import PerfDoctorError

# the CPU wheel index: https://pytorch.org/get-started/locally/ ("Compute Platform: CPU")
CPU_TORCH = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
PROFILE_EXTRA = 'pip install "perfdoctor[profile]"'


def require_torch(command: str) -> None:
    """Raise :class:`PerfDoctorError` (exit 2) when torch cannot be imported.

    Uses ``importlib.util.find_spec`` so the check costs no torch import (about 1 s); a ``None`` entry for
    ``torch`` in ``sys.modules`` (how the tests hide torch) counts as missing.

    Raises:
        PerfDoctorError: one line naming ``command``: the torch build for the machine first (the CPU-only
            command), then the ``profile`` extra.
    """
    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # ValueError: a sys.modules entry without a __spec__
        found = False
    if not found:
        raise PerfDoctorError(
            f"perfdoctor {command} needs PyTorch, which is not installed: install the torch build for your machine "
            f"first (CPU-only: {CPU_TORCH}), then {PROFILE_EXTRA} (on Linux, {PROFILE_EXTRA} alone pulls the "
            "multi-GB CUDA build of torch)"
        )
