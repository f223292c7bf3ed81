import numpy as np

from perfdoctor.trace import intervals as iv


def _set(*pairs):
    return iv.union(np.array([p[0] for p in pairs], float), np.array([p[1] for p in pairs], float))


def test_union_merges_overlapping_and_touching():
    s, e = iv.union(np.array([5, 0, 10, 30.0]), np.array([12, 5, 20, 31.0]))
    assert s.tolist() == [0, 30] and e.tolist() == [20, 31]


def test_union_drops_empty():
    s, e = iv.union(np.array([1.0, 3.0]), np.array([1.0, 2.0]))
    assert s.size == 0


def test_intersect_subtract_total():
    a = _set((0, 10), (20, 30))
    b = _set((5, 25))
    assert iv.total(iv.intersect(a, b)) == 10  # [5,10) + [20,25)
    assert iv.total(iv.subtract(a, b)) == 10  # [0,5) + [25,30)
    assert iv.total(iv.subtract(b, a)) == 10  # [10,20)


def test_per_window_splits_exactly():
    a = _set((0, 10), (20, 30))
    got = iv.per_window(a, np.array([0, 5, 25.0]), np.array([5, 25, 40.0]))
    assert got.tolist() == [5, 10, 5]


def test_complement_inside_bounds():
    gaps = iv.complement(_set((10, 20), (30, 40)), 0, 50)
    assert list(zip(*[g.tolist() for g in gaps])) == [(0, 10), (20, 30), (40, 50)]


def test_containing_finds_the_holding_interval_or_minus_one():
    windows = _set((0, 10), (20, 30))
    got = iv.containing(np.array([-1, 0, 9.99, 10, 15, 20, 29, 30, 100.0]), windows)
    assert got.tolist() == [-1, 0, 0, -1, -1, 1, 1, -1, -1]  # [start, end): the end is outside
    assert iv.containing(np.array([5.0]), iv.EMPTY).tolist() == [-1]
    # overlapping (unmerged) intervals: the latest one starting at or before the point decides
    nested = (np.array([0.0, 2.0]), np.array([10.0, 4.0]))
    assert iv.containing(np.array([3.0, 5.0]), nested).tolist() == [1, -1]


def test_launch_rows_join_kernels_to_their_runtime_call_once_per_trace(tmp_path):
    from tracebuilder import TraceBuilder

    from perfdoctor.trace import load_trace
    from perfdoctor.trace.join import launch_rows, launched_values

    tb = TraceBuilder()
    tb.step(1, 0, 1000)
    tb.launch("k_a", launch_ts=10, start=100, dur=50, launch_dur=7)
    tb.kernel("k_orphan", start=200, dur=10)  # no runtime call carries its correlation
    tb.launch("k_b", launch_ts=30, start=300, dur=50, launch_dur=3)
    t = load_trace(str(tb.write(tmp_path / "t.json")))
    rows = launch_rows(t, "kernels")
    names = t.name_array()
    by_kernel = {names[n]: r for n, r in zip(t.kernels["name_id"].tolist(), rows.tolist())}
    assert by_kernel["k_orphan"] == -1
    assert names[t.runtime["name_id"][by_kernel["k_a"]]] == "cudaLaunchKernel"
    assert t.runtime["ts_us"][by_kernel["k_a"]] == 10 and t.runtime["ts_us"][by_kernel["k_b"]] == 30
    durs = dict(zip([names[n] for n in t.kernels["name_id"].tolist()], launched_values(t, "kernels", "dur_us")))
    assert durs["k_a"] == 7 and durs["k_b"] == 3 and np.isnan(durs["k_orphan"])
    assert launch_rows(t, "kernels") is rows  # computed once per trace


def _cells(s, e, n=120):
    """Coverage of each unit cell [k, k+1) by integer intervals [s, e): the brute-force reference."""
    out = np.zeros(n, bool)
    for a, b in zip(np.asarray(s, int).tolist(), np.asarray(e, int).tolist()):
        out[a:b] = True
    return out


def test_time_each_category_runs_alone_against_a_cell_count():
    """decompose._alone: per category, the time inside the span when it is the only category running, checked
    against counting unit cells of random integer activities."""
    from perfdoctor.replay.decompose import _alone

    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(0, 40))
        s = rng.integers(0, 90, n).astype(float)
        e = s + rng.integers(0, 25, n)
        cats = rng.choice(np.array(["matmul", "memcpy", "communication"], dtype=object), n)
        span_s, span_e = np.array([0.0, 50.0]), np.array([40.0, 110.0])
        span = iv.union(span_s, span_e)
        in_span = _cells(span_s, span_e)
        cover = {c: _cells(s[cats == c], e[cats == c]) & in_span for c in set(cats.tolist())}
        running = sum((v.astype(int) for v in cover.values()), np.zeros(120, int))
        got = _alone(s, e, cats, span)
        assert set(got) == set(cover)
        for c, v in cover.items():
            assert got[c] == float((v & (running == 1)).sum())


def test_attribution_per_window_inside_gaps_against_a_cell_count():
    """Attribution.per_window(within=gaps): each label's µs inside the gaps, per window, against unit cells."""
    from perfdoctor.replay.attribution import Attribution

    rng = np.random.default_rng(11)
    for _ in range(200):
        bounds = np.unique(rng.integers(0, 100, 2 * int(rng.integers(0, 20))))
        bounds = bounds[: bounds.size // 2 * 2].astype(float)
        s, e = bounds[0::2], bounds[1::2]
        labels = rng.choice(np.array(["python", "matmul", "other"], dtype=object), s.size)
        gs = rng.integers(0, 100, 12).astype(float)
        gaps = iv.union(gs, gs + rng.integers(0, 12, 12))
        ws, we = np.array([0.0, 30.0, 70.0]), np.array([30.0, 70.0, 100.0])
        got = Attribution(s, e, labels).per_window(ws, we, within=gaps)
        in_gaps = _cells(*gaps)
        for lab in set(labels.tolist()):
            cells = _cells(s[labels == lab], e[labels == lab]) & in_gaps
            want = [float(cells[int(a) : int(b)].sum()) for a, b in zip(ws, we)]
            assert got[lab].tolist() == want


def test_device_work_per_window_against_a_cell_count():
    """decompose._work_per_window: the activities' summed time inside each window, overlaps counted as often as
    they run (the 'device work gone' part of a saving), against unit cells counted per activity."""
    from perfdoctor.replay.decompose import _work_per_window

    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(0, 30))
        s = rng.integers(0, 100, n).astype(float)
        e = s + rng.integers(0, 40, n)
        bounds = np.unique(rng.integers(0, 120, 2 * int(rng.integers(1, 5))))
        bounds = bounds[: bounds.size // 2 * 2].astype(float)
        ws, we = bounds[0::2], bounds[1::2]
        cells = sum((_cells([a], [b], 140).astype(int) for a, b in zip(s, e)), np.zeros(140, int))
        want = [float(cells[int(a) : int(b)].sum()) for a, b in zip(ws, we)]
        assert _work_per_window(s, e, ws, we).tolist() == want
