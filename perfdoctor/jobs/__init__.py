"""Many ranks: a compact summary per rank, made in parallel (process pool or Dask); the cross-rank analyses
that read the summaries live in :mod:`perfdoctor.crossrank`.

Flow: :func:`perfdoctor.jobs.task.summarise_file` (one trace file → one :class:`RankSummary` per rank in it,
on a worker) → :mod:`perfdoctor.jobs.executors` (where it runs) → :mod:`perfdoctor.jobs.reduce` (the job's
findings and report sections) and :mod:`perfdoctor.crossrank.job_section` (stragglers, rank × step matrices).
"""
