"""Loading every trace shape, and damaged or non-trace files."""

import gzip
import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import SHARED_TRACES, shared_trace
from tracebuilder import TraceBuilder

from perfdoctor.errors import TraceFormatError
from perfdoctor.trace import load_trace, read_trace_file

SHARED = sorted(p.name for p in SHARED_TRACES.glob("*.json*")) if SHARED_TRACES.exists() else []


@pytest.mark.parametrize("name", SHARED)
def test_every_shared_trace_loads_with_all_events(name):
    path = shared_trace(name)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    text = raw.decode()
    try:
        expected = len(json.loads(text)["traceEvents"])
    except json.JSONDecodeError:  # the deliberately malformed file: count with a lenient fix
        import re

        expected = len(json.loads(re.sub(r",(\s*[}\]])", r"\1", text))["traceEvents"])
    t = load_trace(str(path))
    assert t.n_events == expected
    for tab in t.tables.values():
        if len(tab):
            assert np.all(np.diff(tab["ts_us"]) >= 0)
            assert np.all(tab["end_us"] >= tab["ts_us"])


def test_table_contents_of_a_real_kernel():
    t = load_trace(str(shared_trace("hta__nccl_parser_config__nccl_data.json.gz")))
    k = t.kernels
    names = t.name_array()[k["name_id"]]
    i = int(np.flatnonzero(names == "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)")[0])
    assert k["stream"][i] == 40 and k["device"][i] == 0 and k["correlation"][i] > 0
    assert k["collective"][i] == "allreduce" and k["in_nelems"][i] > 0
    assert t.rank == 0 and t.device_properties[0]["name"] == "NVIDIA A100-PG509-200"
    # every kernel links to a launching runtime call by correlation id
    assert np.isin(k["correlation"], t.runtime["correlation"]).mean() > 0.99


def test_old_generation_string_tids_and_streams():
    t = load_trace(str(shared_trace("kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz")))
    assert len(t.kernels) == 8772 and len(t.memcpy) == 12 and len(t.memset) == 312
    assert set(np.unique(t.kernels["stream"]).tolist()) == {7}
    assert set(np.unique(t.cpu_ops["tid"]).tolist()) <= {25738, 25772}  # "tid": "25738" strings parsed
    assert (t.cpu_ops["input_dims"] != None).sum() > 1000  # noqa: E711 - recorded shapes kept


def test_nanosecond_float_timestamps_keep_precision():
    t = load_trace(str(shared_trace("hta__ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")))
    frac = t.kernels["ts_us"] % 1
    assert (frac > 0).mean() > 0.5  # sub-µs parts survive
    assert t.metadata["displayTimeUnit"] == "ns"


def test_trailing_comma_file_loads_with_one_warning():
    t = load_trace(str(shared_trace("bad__trailing_comma__gpupuzzlers_launch_queue.trace.json")))
    assert t.n_events == 765
    assert len(t.warnings) == 1 and "trailing comma" in t.warnings[0]


def _trace_text(n_steps=3):
    tb = TraceBuilder()
    for i in range(n_steps):
        tb.step(i, i * 1000, 1000)
        tb.launch("volta_sgemm_128x64_nn", launch_ts=i * 1000 + 10, start=i * 1000 + 20, dur=100)
    return json.dumps(tb.to_dict(), indent=1), len(tb.to_dict()["traceEvents"])


def test_truncated_file_recovers_complete_events(tmp_path):
    text, n = _trace_text()
    cut = text[: int(len(text) * 0.7)]
    p = tmp_path / "killed.json"
    p.write_text(cut)
    raw = read_trace_file(str(p))
    assert 0 < raw.n_events < n
    assert len(raw.warnings) == 1
    assert f"recovered {raw.n_events} events" in raw.warnings[0] and "truncated" in raw.warnings[0]


def test_truncated_gzip_recovers(tmp_path):
    text, n = _trace_text(20)
    data = gzip.compress(text.encode())
    p = tmp_path / "killed.json.gz"
    p.write_bytes(data[: int(len(data) * 0.6)])
    raw = read_trace_file(str(p))
    assert 0 < raw.n_events < n and "truncated" in raw.warnings[0]


def test_missing_closing_bracket(tmp_path):
    text, n = _trace_text()
    p = tmp_path / "noclose.json"
    p.write_text(text.rstrip().rstrip("}").rstrip().rstrip("]"))
    raw = read_trace_file(str(p))
    assert raw.n_events == n and len(raw.warnings) == 1


def test_one_malformed_event_is_skipped_and_counted(tmp_path):
    text, n = _trace_text()
    bad = text.replace('"ph": "X"', '"ph": "X", "oops": [1,,2]', 1)
    p = tmp_path / "bad.json"
    p.write_text(bad)
    raw = read_trace_file(str(p))
    assert raw.n_events == n - 1 and raw.n_dropped == 1
    assert "1 malformed event(s) skipped" in raw.warnings[0]


def test_odd_types_are_coerced(tmp_path):
    doc = {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": "stream 7", "ts": "10.5",
                            "dur": 2, "args": {"device": 0, "stream": 7, "correlation": "12"}}]}
    p = tmp_path / "odd.json"
    p.write_text(json.dumps(doc))
    t = load_trace(str(p))
    assert len(t.kernels) == 1 and t.kernels["ts_us"][0] == 10.5 and t.kernels["correlation"][0] == 12


@pytest.mark.parametrize(
    "content,needle",
    [
        (b"", "empty file"),
        (b"\x00\x01\x02binary\xff\xfe" * 10, "binary data"),
        (b"hello world", "not JSON"),
        (b'{"foo": [1, 2, 3]}', "without a 'traceEvents' list"),
        (gzip.compress(b"{\"traceEvents\": []}")[:12] + b"garbage-garbage-garbage", "corrupted or truncated gzip"),
    ],
)
def test_not_a_trace_is_one_clear_error(tmp_path, content, needle):
    p = tmp_path / "x.json.gz" if "gzip" in needle else tmp_path / "x.json"
    p.write_bytes(content)
    with pytest.raises(TraceFormatError) as exc:
        read_trace_file(str(p))
    assert str(p) in exc.value.message and needle in exc.value.message


def test_bare_array_trace(tmp_path):
    p = tmp_path / "arr.json"
    p.write_text(json.dumps([{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]))
    assert load_trace(str(p)).n_events == 1


def test_cli_bad_file_exit_2_one_line_no_traceback(tmp_path):
    p = tmp_path / "empty.json"
    p.write_bytes(b"")
    r = subprocess.run([sys.executable, "-m", "perfdoctor", "report", str(p)], capture_output=True, text=True)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [f"perfdoctor: error: {p}: empty file, not a trace"]
