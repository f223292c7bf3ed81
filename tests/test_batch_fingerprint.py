"""Batch fingerprints (perfdoctor/capture/batch_fingerprint.py): which elements are sampled, what makes two digests
equal, and the probe taking one per step from the first training forward."""

import pytest

torch = pytest.importorskip("torch")

from perfdoctor.capture.batch_fingerprint import BatchFingerprints, sample_of  # noqa: E402
from perfdoctor.capture.batch_probe import BatchProbe  # noqa: E402


def test_sample_is_evenly_spaced_and_a_copy():
    t = torch.arange(1000).reshape(10, 100)
    s = sample_of(t, 256)  # stride 1000 // 256 = 3: 0, 3, ..., 765 (256 values)
    assert s.tolist() == list(range(0, 768, 3))
    t[0, 0] = -1
    assert s[0] == 0  # a copy, not a view of the batch
    assert sample_of(torch.arange(10), 256).tolist() == list(range(10))  # fewer elements than the sample: all


def test_digests_equal_for_equal_batches_only():
    fps = [BatchFingerprints(steps=2), BatchFingerprints(steps=2), BatchFingerprints(steps=2)]
    a = torch.randn(64, 256, generator=torch.Generator().manual_seed(1))
    b = a.clone()
    c = a.clone()
    c[0, 0] += 1  # flat position 0 is sampled
    for fp, t in zip(fps, (a, b, c)):
        fp.observe((t,), {})
        fp.observe((t * 2,), {})  # a second forward of the same step (accumulation): not fingerprinted
        fp.end_step()
        fp.observe((), {"input_ids": t.long()})  # a keyword-only tensor
        fp.end_step()
    da, db, dc = (fp.digests() for fp in fps)
    assert da == db and da[0]["digest"] != dc[0]["digest"]
    assert [d["step"] for d in da] == [0, 1] and da[1]["dtype"] == "int64" and da[0]["shape"] == [64, 256]
    assert da[0]["digest"] != da[1]["digest"]  # same values, another dtype
    assert all(fp.done for fp in fps)


def test_probe_fingerprints_the_first_training_forward_of_each_step():
    probe = BatchProbe(fingerprint_steps=3)
    model = torch.nn.Linear(4, 2)
    probe.attach()
    try:
        for step in range(4):
            model(torch.full((2, 4), float(step)))
            with torch.no_grad():
                model(torch.full((2, 4), 99.0))  # evaluation: not a training forward
            probe.fingerprints.end_step()
    finally:
        probe.detach()
    got = probe.fingerprints.digests()
    ref = BatchFingerprints(steps=3)
    for step in range(3):
        ref.observe((torch.full((2, 4), float(step)),), None)
        ref.end_step()
    assert [d["digest"] for d in got] == [d["digest"] for d in ref.digests()]


def test_a_tensor_that_cannot_be_sampled_leaves_no_digest():
    fp = BatchFingerprints(steps=2)
    fp.observe((torch.eye(4).to_sparse(),), None)  # a sparse COO tensor has no flat view
    fp.end_step()
    fp.observe((3,), None)  # no tensor argument
    fp.end_step()
    assert [d["digest"] for d in fp.digests()] == [None, None]
