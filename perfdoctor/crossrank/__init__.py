"""What one rank's analysis learns from its peers: the home of every cross-rank idea.

- :mod:`~perfdoctor.crossrank.collectives`: each rank's collective kernels (:class:`CollectiveTimeline`), the
  k-th copies matched across ranks, the clock offsets that align them, and the time each rank waits in them.
- :mod:`~perfdoctor.crossrank.bounds`: how early a rank's collective may end once its peers' arrivals are known,
  what each what-if assumes of the peers, and the job's fix-all figure when the ranks cannot be replayed jointly.
- :mod:`~perfdoctor.crossrank.joint`: the ranks replayed together, each collective ending when its last rank has
  arrived (from each rank's few numbers per collective, so a job's reducer needs no graphs).
- :mod:`~perfdoctor.crossrank.job_section`: stragglers, rank × step matrices and ranks whose breakdown differs,
  for the report's ``job`` section.

It sits above :mod:`perfdoctor.replay` (a rank's own replay, which bounds its collectives by their recorded ends,
:mod:`perfdoctor.replay.collective_floor`) and below the checks and the job runner (:mod:`perfdoctor.jobs`:
tasks, executors, summaries and the second round of rank tasks), which read it.
"""
