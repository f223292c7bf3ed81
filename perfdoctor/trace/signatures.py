"""Op signatures: which recorded ops are the same op on the same shapes (PD105's loops of same-shape ops, the
unprofiled step's excess of an op over its fastest sibling)."""

from __future__ import annotations

import numpy as np

from perfdoctor.trace.tables import Table


def op_keys(ops: Table, rows: np.ndarray) -> np.ndarray:
    """One integer per row of ``ops`` in ``rows`` (shape ``(len(rows),)``): equal for ops of the same name and
    recorded input shapes (``Input Dims``, as recorded; an op without them keyed by its name alone)."""
    keys: dict[tuple[int, bytes], int] = {}
    out = np.empty(rows.size, dtype=np.int64)
    for k, row in enumerate(rows.tolist()):
        dims = ops["input_dims"][row]
        key = (int(ops["name_id"][row]), bytes(dims) if isinstance(dims, (bytes, bytearray)) else repr(dims).encode())
        out[k] = keys.setdefault(key, len(keys))
    return out
