"""Replay: the step's dependency graph (:mod:`.graph`), its discrete-event replay (:mod:`.simulate`), replayed
step windows (:mod:`.windows`) and what-if transformations."""
