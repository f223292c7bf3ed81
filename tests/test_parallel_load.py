"""Decoding in worker processes (perfdoctor.trace.parallel) gives the serial reader's result, bit for bit.

The serial reader is the reference: every field of the RawTrace (each column's dtype and values, the string tables,
metadata events, warnings, counts) must be equal. Small blocks make many pieces, so the renumbering of names,
categories and string ids across pieces is exercised on real traces, the fuzz reproducers and hand-made ones.
"""

import gzip
import json
import os

import numpy as np
import pytest
from conftest import shared_trace

from perfdoctor.trace import parallel, reader
from perfdoctor.trace.columns import STRING_ID_BASE, TableColumns

FUZZ = os.path.join(os.path.dirname(__file__), "data", "fuzz")


def _same(a, b, where=""):
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, where
        if a.dtype == object:
            assert a.tolist() == b.tolist(), where
        else:
            assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    else:
        assert a == b, where


def _read(path, workers, monkeypatch, block):
    monkeypatch.setattr(reader, "MAX_BLOCK_OUT", block)
    monkeypatch.setattr(reader, "BLOCK_BYTES", min(block, reader.BLOCK_BYTES))  # a plain file is read as is
    monkeypatch.setenv(parallel.WORKERS_ENV, str(workers))
    try:
        return reader.read_trace_file(str(path)), None
    except Exception as exc:  # noqa: BLE001 - the error must be the same one
        return None, f"{type(exc).__name__}: {exc}"


@pytest.fixture
def spy(monkeypatch):
    """Counts pieces absorbed from workers and fallbacks to the serial reader."""
    seen = {"absorbed": 0, "fallbacks": 0}
    absorb, read = TableColumns.absorb, reader._read

    def counting_absorb(self, part):
        absorb(self, part)
        seen["absorbed"] += 1

    def counting_read(p, file_bytes, on_progress, kinds, workers):
        try:
            return read(p, file_bytes, on_progress, kinds, workers)
        except parallel.Fallback:
            seen["fallbacks"] += 1
            raise

    monkeypatch.setattr(TableColumns, "absorb", counting_absorb)
    monkeypatch.setattr(reader, "_read", counting_read)
    return seen


def _check_same(path, monkeypatch, block, workers=2):
    serial, serial_err = _read(path, 0, monkeypatch, block)
    par, par_err = _read(path, workers, monkeypatch, block)
    assert par_err == serial_err
    if serial is not None:
        for f in serial.__dataclass_fields__:
            _same(getattr(serial, f), getattr(par, f), f)
    return serial


@pytest.mark.parametrize(
    "name",
    [
        # string pids ("Spans", "Traces") and negative integer tids (wrapped pthread ids) in one file
        "hta__ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
        "hta__nccl_parser_config__nccl_data.json.gz",  # NCCL kernels: collective/dtype string columns
        "kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz",  # 2021 generation: "stream 7" tids
        "epsilonpidelta__cpu_resnet_memory.pt.trace.json",  # [memory] instants, Input Dims json lists
    ],
)
@pytest.mark.parametrize("workers", [1, 2])
def test_workers_give_the_serial_columns_on_real_traces(name, workers, monkeypatch, spy):
    raw = _check_same(shared_trace(name), monkeypatch, 1 << 17, workers)
    assert raw is not None and raw.n_events > 5_000
    assert spy["fallbacks"] == 0 and spy["absorbed"] > 10  # the workers decoded it, in many pieces


@pytest.mark.parametrize("name", sorted(os.listdir(FUZZ)))
def test_workers_give_the_serial_result_on_fuzz_reproducers(name, monkeypatch):
    # 512-byte pieces; 16 KiB for the reproducers over 50 kB on disk (hang01: 14 MB decompressed, 840 pieces,
    # where 27,000 of 512 bytes took 20 s and exercise the same renumbering)
    path = os.path.join(FUZZ, name)
    _check_same(path, monkeypatch, 1 << 14 if os.path.getsize(path) > 50_000 else 512)


@pytest.mark.parametrize(
    "name",
    [
        "bad__trailing_comma__gpupuzzlers_launch_queue.trace.json",
        "bad__trimmed_header__gpupuzzlers_same_priority_streams.json.gz",
    ],
)
def test_damaged_real_traces_read_alike(name, monkeypatch):
    raw = _check_same(shared_trace(name), monkeypatch, 4096)
    assert raw is not None and raw.warnings


def _write(tmp_path, events, name="t.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events}, indent=1))
    return path


def _ev(i, pid, tid, name="op"):
    return {"ph": "X", "cat": "cpu_op", "name": f"{name}{i % 7}", "pid": pid, "tid": tid, "ts": 10.0 * i, "dur": 1}


def test_string_ids_first_seen_in_different_pieces_are_renumbered(tmp_path, monkeypatch, spy):
    # each piece meets the string ids in another order; the serial reader numbers them in the order it meets them
    events = []
    for i in range(400):
        pid = ["alpha", "beta", 1, "gamma"][i % 4] if i > 50 else 1
        tid = ["x", 7, "beta", "stream 3"][(i // 3) % 4]
        events.append(_ev(i, pid, tid))
    events.append({"ph": "M", "name": "thread_name", "pid": "gamma", "tid": "x", "args": {"name": "worker"}})
    events += [{"ph": "s", "cat": "ac2g", "id": "f1", "pid": "beta", "tid": 1, "ts": 5.0, "name": "flow"}]
    raw = _check_same(_write(tmp_path, events), monkeypatch, 700)
    assert spy["fallbacks"] == 0 and spy["absorbed"] > 20
    # worked by hand: "stream 3" is stream 3 and 7 stays 7; the first string id met gets code 0
    tids = set(raw.tables["cpu_ops"]["tid"].tolist())
    assert {7, 3} <= tids and STRING_ID_BASE in tids
    assert [m for m in raw.meta if m[0] == "thread_name"][0][3] == "worker"


def test_an_integer_id_among_string_codes_is_read_serially(tmp_path, monkeypatch, spy):
    # tid -1_000_000 is also the code of the first string id of a piece: the piece cannot be renumbered
    events = [_ev(i, 1, "main" if i % 2 else STRING_ID_BASE) for i in range(300)]
    _check_same(_write(tmp_path, events), monkeypatch, 600)
    assert spy["fallbacks"] == 1


def _die(piece):
    os._exit(3)


@pytest.mark.timeout(120)
def test_a_worker_that_dies_does_not_hang_the_reader(monkeypatch, spy):
    monkeypatch.setattr(parallel, "_decode", _die)  # the forked workers inherit it
    _check_same(shared_trace("hta__nccl_parser_config__nccl_data.json.gz"), monkeypatch, 1 << 18)
    assert spy["fallbacks"] == 1 and spy["absorbed"] == 0


def test_small_files_are_decoded_in_process(tmp_path, monkeypatch):
    monkeypatch.delenv(parallel.WORKERS_ENV, raising=False)
    monkeypatch.setattr(parallel, "DEFAULT_ON", True)
    path = shared_trace("hta__nccl_parser_config__nccl_data.json.gz")
    assert parallel.worker_count(str(path), path.stat().st_size) == 0
    monkeypatch.setenv(parallel.WORKERS_ENV, "3")
    assert parallel.worker_count(str(path), path.stat().st_size) == 3


def test_uncompressed_size_from_the_gzip_trailer(tmp_path):
    body = b'{"traceEvents": []}' * 5000
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(body))
    assert parallel.uncompressed_estimate(str(gz), gz.stat().st_size) == len(body)
    plain = tmp_path / "t.json"
    plain.write_bytes(body)
    assert parallel.uncompressed_estimate(str(plain), len(body)) == len(body)
