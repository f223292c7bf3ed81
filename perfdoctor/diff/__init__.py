"""``perfdoctor diff``: two reports → the comparison (verdict, where time moved, movers, findings, predictions).

Modules: :mod:`sides` (load a side), :mod:`steps` (the step times compared), :mod:`stats` (interval and
verdict), :mod:`categories`, :mod:`names` + :mod:`movers`, :mod:`findings`, :mod:`efficiency`; :mod:`compare`
sequences them into a :class:`perfdoctor.diff.model.Diff`.
"""
