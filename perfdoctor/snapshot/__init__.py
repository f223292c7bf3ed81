"""CUDA caching-allocator snapshots (``torch.cuda.memory._snapshot()`` / ``_dump_snapshot`` pickles).

A separate small path beside the trace report: :mod:`.reader` (the pickle, read without running code, into
typed records) → :mod:`.analysis` (peaks, segments, call sites) → :mod:`.report` (the typed report and its JSON)
→ :mod:`perfdoctor.render.snapshot` (terminal, Markdown, HTML). :mod:`.diff` compares two reports.
"""
