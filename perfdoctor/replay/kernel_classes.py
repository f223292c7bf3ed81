"""The kernel class of every activity of a rank's replay graph: its category, math dtype and name.

Transformations (perfdoctor/replay/transforms) and the rank's replay read them; they are made once per graph and
kept on it (:attr:`perfdoctor.replay.graph.ReplayGraph.kernel_classes`).
"""

from __future__ import annotations

import numpy as np

from perfdoctor.analysis.timing.classify import classify_kernel
from perfdoctor.analysis.timing.kernel_dtype import kernel_math_dtype
from perfdoctor.replay.activities import ACT_TABLES
from perfdoctor.replay.graph import ReplayGraph
from perfdoctor.trace.tables import TraceTables


def kernel_classes(tables: TraceTables, g: ReplayGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(category, math dtype or "", name) of every activity of ``g`` (object arrays of ``g.n_act``): the kernel
    classifier's category (:func:`perfdoctor.analysis.timing.classify.classify_kernel`) and math dtype
    (:func:`perfdoctor.analysis.timing.kernel_dtype.kernel_math_dtype`) of each activity's name in ``tables``."""
    if g.kernel_classes is not None:
        return g.kernel_classes
    cat = np.full(g.n_act, "", dtype=object)
    dt = np.full(g.n_act, "", dtype=object)
    name = np.full(g.n_act, "", dtype=object)
    for k, tname in enumerate(ACT_TABLES):
        m = g.act_table == k
        if not m.any():
            continue
        ids = tables.tables[tname]["name_id"][g.act_row[m]]
        uniq, inv = np.unique(ids, return_inverse=True)
        names = [tables.names[i] for i in uniq.tolist()]
        cat[m] = np.array([classify_kernel(n).category for n in names], dtype=object)[inv]
        dt[m] = np.array([kernel_math_dtype(n) or "" for n in names], dtype=object)[inv]
        name[m] = np.array(names, dtype=object)[inv]
    g.kernel_classes = (cat, dt, name)
    return g.kernel_classes
