"""What a command needs that the base install does not bring (torch for ``profile`` and ``calibrate``).

``pip install perfdoctor`` reads traces (``report``, ``rules``, ``rule``, ``budget``) without torch; the commands
that run PyTorch code check for it up front so a missing torch is one line and exit 2, not an ImportError.
"""

from __future__ import annotations

import importlib.util

from perfdoctor.errors import PerfDoctorError


def require_torch(command: str) -> None:
    """Raise :class:`PerfDoctorError` (exit 2) when torch cannot be imported.

    Uses ``importlib.util.find_spec`` so the check costs no torch import (about 1 s); a ``None`` entry for
    ``torch`` in ``sys.modules`` (how the tests hide torch) counts as missing.

    Raises:
        PerfDoctorError: one line naming ``command`` and the two ways to get torch.
    """
    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # ValueError: a sys.modules entry without a __spec__
        found = False
    if not found:
        raise PerfDoctorError(
            f"perfdoctor {command} needs PyTorch, which is not installed: "
            'pip install "perfdoctor[profile]", or install the torch build that fits your machine first'
        )
