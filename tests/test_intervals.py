import numpy as np

from perfdoctor.analysis import intervals as iv


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
