"""``perfdoctor diff``: two reports → the comparison (verdict, where time moved, movers, findings, predictions).

Modules: :mod:`sides` (load a side, expand a directory of runs), :mod:`steps` (the step times compared),
:mod:`stats` (interval and verdict, one run per side), :mod:`runs` (the interval from several runs per side, the
run-to-run noise measured), :mod:`pool` (how a side's runs are pooled), :mod:`categories`, :mod:`names` +
:mod:`movers`, :mod:`findings`, :mod:`efficiency`; :mod:`compare` sequences them into a
:class:`perfdoctor.diff.model.Diff`.
"""
