"""Loading every trace shape, and damaged or non-trace files."""

import gzip
import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import real_trace_names, shared_trace
from tracebuilder import TraceBuilder

from perfdoctor.errors import TraceFormatError
from perfdoctor.trace import load_trace, read_trace_file

SHARED = real_trace_names()


@pytest.mark.parametrize("name", SHARED)
def test_every_shared_trace_loads_with_all_events(name):
    path = shared_trace(name)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    text = raw.decode()
    try:
        doc = json.loads(text)
        expected = len(doc if isinstance(doc, list) else doc["traceEvents"])  # the 2020 generation: a bare array
    except json.JSONDecodeError:  # the deliberately malformed files: count with a lenient fix
        import re

        text = re.sub(r",(\s*[}\]])", r"\1", text)
        start = text.index("[", text.index('"traceEvents"'))  # a trimmed header: decode the event list alone
        expected = len(json.JSONDecoder().raw_decode(text, start)[0])
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
    i = int(
        np.flatnonzero(names == "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)")[0]
    )
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
    doc = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k",
                "pid": 0,
                "tid": "stream 7",
                "ts": "10.5",
                "dur": 2,
                "args": {"device": 0, "stream": 7, "correlation": "12"},
            }
        ]
    }
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
        (gzip.compress(b'{"traceEvents": []}')[:12] + b"garbage-garbage-garbage", "corrupted or truncated gzip"),
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


# -- a GPU trace without its device side is never a CPU-only one -------------------------------------------------

RESNET = "kineto__resnet50_num_workers_0__worker0.pt.trace.json.gz"
NO_GPU_ACTIVITY = "truncated before any GPU activity was written"


def _cli_report(path):
    return subprocess.run([sys.executable, "-m", "perfdoctor", "report", str(path)], capture_output=True, text=True)


@pytest.mark.parametrize("n_bytes", [1_000_000, 3_000_000, 5_000_000, 8_900_000])
def test_resnet_cut_before_its_kernels_is_refused(tmp_path, n_bytes):
    # Kineto writes host events first: these cuts hold cpu_ops (the 3 MB one nothing else, not even a
    # ProfilerStep) and the header's four V100s, but no kernel
    raw = gzip.decompress(shared_trace(RESNET).read_bytes())
    p = tmp_path / "cut.json"
    p.write_bytes(raw[:n_bytes])
    with pytest.raises(TraceFormatError) as exc:
        load_trace(str(p))
    assert exc.value.message == (
        f"{p}: the file is {NO_GPU_ACTIVITY} (it holds CUDA/HIP runtime calls or GPU "
        "properties but no kernel, memcpy or memset): the device side cannot be analysed"
    )


@pytest.mark.parametrize("n_bytes", [100_000, 250_000, 350_000])
def test_resnet_gzip_cut_before_its_kernels_is_refused(tmp_path, n_bytes):
    p = tmp_path / "cut.json.gz"
    p.write_bytes(shared_trace(RESNET).read_bytes()[:n_bytes])
    with pytest.raises(TraceFormatError) as exc:
        load_trace(str(p))
    assert NO_GPU_ACTIVITY in exc.value.message


@pytest.mark.parametrize("gz", [False, True])
def test_cli_truncated_gpu_trace_exits_2_never_cpu(tmp_path, gz):
    data = shared_trace(RESNET).read_bytes()
    p = tmp_path / ("cut.json.gz" if gz else "cut.json")
    p.write_bytes(data[:300_000] if gz else gzip.decompress(data)[:3_000_000])  # the user's 3 MB cut
    r = _cli_report(p)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        (
            f"perfdoctor: error: {p}: the file is {NO_GPU_ACTIVITY} (it holds CUDA/HIP runtime calls or GPU properties "
            "but no kernel, memcpy or memset): the device side cannot be analysed"
        )
    ]


def test_cut_inside_the_metadata_says_truncated(tmp_path):
    p = tmp_path / "cut.json"
    p.write_bytes(gzip.decompress(shared_trace(RESNET).read_bytes())[:1000])  # inside deviceProperties
    with pytest.raises(TraceFormatError) as exc:
        load_trace(str(p))
    assert "truncated before any 'traceEvents' list" in exc.value.message


def _host_only_steps(tb, n=3, launches=False):
    for i in range(n):
        tb.step(i, i * 1000, 1000)
        tb.cpu_op("aten::mm", i * 1000 + 5, 300)
        if launches:
            tb.runtime("cudaLaunchKernel", i * 1000 + 10, 5)
    return tb


def _cut(tmp_path, tb, name="cut.json"):
    text = json.dumps(tb.to_dict(), indent=1)
    p = tmp_path / name
    p.write_text(text[: int(len(text) * 0.8)])
    return p


def test_cut_trace_naming_no_devices_is_refused(tmp_path):
    # no deviceProperties key (metadata written after the events, or an older exporter): a GPU trace cut
    # before its device events looks exactly like this, so it is not passed on as CPU training
    p = _cut(tmp_path, _host_only_steps(TraceBuilder(device_name=None)))
    with pytest.raises(TraceFormatError) as exc:
        load_trace(str(p))
    assert "names no devices (no deviceProperties)" in exc.value.message and "truncated" in exc.value.message


def test_cut_cpu_only_trace_still_loads(tmp_path):
    tb = _host_only_steps(TraceBuilder(device_name=None), n=4)
    tb.meta["deviceProperties"] = []  # what a CPU-only Kineto trace writes
    t = load_trace(str(_cut(tmp_path, tb)))
    assert t.truncated and not t.has_device_activity and len(t.cpu_ops) > 0
    assert not any("GPU activity missing" in w for w in t.warnings)


@pytest.mark.parametrize("launches", [True, False])
def test_complete_gpu_trace_without_device_activity_warns_first(tmp_path, launches):
    p = tmp_path / "nodev.json"
    _host_only_steps(TraceBuilder(), launches=launches).write(p)  # an A100 in deviceProperties
    t = load_trace(str(p))
    assert not t.truncated and not t.has_device_activity
    first = t.warnings[0]
    assert first.startswith(f"{p}: GPU activity missing: ") and "not a CPU-only run" in first
    if launches:
        assert "3 CUDA/HIP launch call(s) (cudaLaunchKernel) put work on a GPU" in first
    else:
        assert "(1 × NVIDIA A100-SXM4-80GB in deviceProperties)" in first
    r = _cli_report(p)
    assert r.returncode == 0 and "GPU activity missing" in " ".join((r.stdout + r.stderr).split())  # rich wraps


def test_complete_cpu_only_trace_has_no_gpu_warning(tmp_path):
    p = tmp_path / "cpu.json"
    _host_only_steps(TraceBuilder(device_name=None)).write(p)
    assert not any("GPU" in w for w in load_trace(str(p)).warnings)


def test_truncated_trace_without_steps_warns_that_idle_is_an_upper_bound(tmp_path):

    raw = gzip.open(shared_trace("gpupuzzlers__launch_queue_N1600.trace.json.gz")).read()
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: int(len(raw) * 0.9)])
    from analysed import rank_analysis

    a = rank_analysis(cut)
    assert a.ranks[0].steps.source == "whole-trace" and a.ranks[0].tables.truncated
    assert any("idle is an upper bound and busy a lower bound" in w for w in a.ranks[0].warnings)
    whole = rank_analysis(shared_trace("gpupuzzlers__launch_queue_N1600.trace.json.gz"))
    assert not any("upper bound" in w for w in whole.ranks[0].warnings)


class _CountingPattern:
    """A regular expression that counts its searches (names_matching takes a compiled pattern)."""

    def __init__(self, rx: str) -> None:
        import re

        self._rx = re.compile(rx)
        self.pattern, self.flags = f"counted:{rx}", 0
        self.searched: list[str] = []

    def search(self, name: str):  # type: ignore[no-untyped-def]
        self.searched.append(name)
        return self._rx.search(name)


def test_names_matching_searches_each_name_once_across_traces(tmp_path):
    """Two ranks' tables share names: the second searches only the names the first did not have, and each mask is
    the one a plain search of its own names gives."""
    import re

    paths = []
    for rank, kernels in enumerate((["sgemm_a", "elementwise_b"], ["sgemm_a", "sgemm_c", "reduce_d"])):
        tb = TraceBuilder()
        tb.step(1, 0, 100)
        for i, k in enumerate(kernels):
            tb.launch(k, launch_ts=10 * i, start=10 * i + 2, dur=5)
        paths.append(tb.write(tmp_path / f"rank{rank}.json"))
    first, second = (load_trace(str(p)) for p in paths)
    rx = _CountingPattern(r"^sgemm_")
    masks = [t.names_matching(rx) for t in (first, second)]
    for t, m in zip((first, second), masks):
        assert m.tolist() == [re.search(r"^sgemm_", n) is not None for n in t.names]
    assert sorted(rx.searched) == sorted(set(first.names) | set(second.names))  # each distinct name once
