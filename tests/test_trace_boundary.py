"""The trace boundary: every field the reader takes is checked for type and range (trace/fields.py).

Each test builds a tiny trace by hand, spoils one value, and checks exactly which events are dropped
(the count in the warning) and that the rest loads as before.
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from tracebuilder import TraceBuilder

from perfdoctor.errors import TraceFormatError
from perfdoctor.trace import load_trace, read_trace_file
from perfdoctor.trace.fields import MAX_NESTING, MAX_SPAN_US

EPOCH_US = 1_694_128_201_428_080.0  # a Kineto epoch timestamp (µs)


def write(tmp_path, doc, name="t.json") -> str:
    p = tmp_path / name
    p.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    return str(p)


def op(name="aten::mm", ts=EPOCH_US + 10, dur=5.0, **args):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def test_a_zero_timestamp_among_epoch_times_is_dropped_not_a_53_year_step(tmp_path):
    tb = TraceBuilder()
    tb.step(1, EPOCH_US, 1000).step(2, EPOCH_US + 1000, 1000)
    tb.cpu_op("aten::mm", EPOCH_US + 100, 50).cpu_op("aten::add", 0, 50)
    t = load_trace(write(tmp_path, tb.to_dict()))
    assert len(t.cpu_ops) == 1 and t.cpu_ops["ts_us"][0] == EPOCH_US + 100
    assert t.annotations["end_us"].max() - t.annotations["ts_us"].min() == 2000
    assert any("1 event(s) more than 1 day from the trace's median timestamp dropped" in w for w in t.warnings)


def test_events_within_a_day_of_the_median_are_kept(tmp_path):
    # 23 h apart: a long but possible profile; nothing dropped
    events = [op(ts=EPOCH_US), op(ts=EPOCH_US + 1), op(ts=EPOCH_US + 23 * 3600e6)]
    t = load_trace(write(tmp_path, {"traceEvents": events}))
    assert len(t.cpu_ops) == 3 and not any("dropped" in w for w in t.warnings)


@pytest.mark.parametrize("doc", [[{}], {"traceEvents": [{}, {}]}, {"traceEvents": [{"ph": "X", "cat": "cpu_op"}]}])
def test_content_free_traces_are_refused(tmp_path, doc):
    path = write(tmp_path, doc)
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path)
    assert exc.value.message.startswith(path) and "nothing to analyse" in exc.value.message


@pytest.mark.parametrize(
    "field,value,reason",
    [
        ("External id", 2**63, "'External id' out of range"),
        ("External id", 10**30, "'External id' out of range"),
        ("External id", 1e308, "'External id' out of range"),
        ("correlation", -(2**63) - 1, "'correlation' out of range"),
    ],
)
def test_arg_beyond_int64_drops_only_that_event(tmp_path, field, value, reason):
    events = [op(ts=EPOCH_US + i) for i in range(5)]
    events[2]["args"][field] = value
    raw = read_trace_file(write(tmp_path, {"traceEvents": events}))
    assert raw.n_events == 4 and raw.n_dropped == 1
    assert f"1 event(s) with invalid fields dropped: {reason} (1)" in raw.warnings[0]


@pytest.mark.parametrize(
    "key,value,reason",
    [
        ("ts", 1e300, "'ts' out of range"),
        ("ts", 10**36, "'ts' out of range"),
        ("ts", "-Infinity", "'ts' is not finite"),
        ("ts", "NaN", "'ts' is not finite"),
        ("dur", MAX_SPAN_US + 1, "'dur' out of range"),
        ("dur", -(2**63) - 1, "'dur' out of range"),
        ("pid", 2**64, "'pid' out of range"),
    ],
)
def test_times_and_ids_out_of_range_drop_the_event(tmp_path, key, value, reason):
    events = [op(ts=EPOCH_US + i) for i in range(3)]
    events[1][key] = value
    raw = read_trace_file(write(tmp_path, {"traceEvents": events}))
    assert raw.n_events == 2 and f"{reason} (1)" in raw.warnings[0]


def test_coercible_values_are_kept(tmp_path):
    # a numeric string ts and a float id are read as numbers (the lenient path), not dropped
    events = [op(ts=EPOCH_US), op(ts=str(EPOCH_US + 7)), op(ts=EPOCH_US + 9, **{"External id": 12.0})]
    t = load_trace(write(tmp_path, {"traceEvents": events}))
    assert t.cpu_ops["ts_us"].tolist() == [EPOCH_US, EPOCH_US + 7, EPOCH_US + 9]
    assert t.cpu_ops["external_id"].tolist()[2] == 12 and t.warnings == []


def test_rank_numbers_beyond_int32_in_a_file_name_are_not_ranks(tmp_path):
    doc = TraceBuilder().step(1, 0, 1000).to_dict()
    t = load_trace(write(tmp_path, doc, "rank-99999999999999999999999.json"))
    assert t.rank is None and any("rank number in the file name is beyond 2147483647" in w for w in t.warnings)
    assert load_trace(write(tmp_path, doc, "rank-7.json")).rank == 7


def test_string_pid_beyond_int64_is_an_interned_name_not_an_overflow(tmp_path):
    events = [op(ts=EPOCH_US), {**op(ts=EPOCH_US + 1), "pid": "99999999999999999999999"}]
    t = load_trace(write(tmp_path, {"traceEvents": events}))
    assert len(t.cpu_ops) == 2 and t.cpu_ops["pid"][1] <= -1_000_000


def test_deep_nesting_drops_the_event_without_recursion_error(tmp_path):
    deep = b"[" * 10_000 + b"]" * 10_000
    good = json.dumps(op()).encode()
    bad = json.dumps(op(ts=EPOCH_US + 1, foo=0)).encode().replace(b'"foo": 0', b'"foo": ' + deep)
    raw = read_trace_file(write(tmp_path, b'{"traceEvents": [' + good + b"," + bad + b"]}"))
    assert raw.n_events == 1 and f"nested deeper than {MAX_NESTING} levels (1)" in raw.warnings[0]


def test_shapes_that_are_not_lists_are_ignored(tmp_path):
    events = [
        op(ts=EPOCH_US, **{"Input Dims": [[2, 3], [3, 4]]}),
        op(ts=EPOCH_US + 1, **{"Input Dims": {}}),
        op(ts=EPOCH_US + 2, **{"Input Dims": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}),
    ]
    t = load_trace(write(tmp_path, {"traceEvents": events}))
    assert t.cpu_ops["input_dims"].tolist() == [b"[[2, 3], [3, 4]]", None, None]  # the raw JSON, as written
    assert any("2 'input_dims' value(s) that are not a JSON list" in w for w in t.warnings)


def test_metadata_of_the_wrong_type_is_removed(tmp_path):
    doc = TraceBuilder(rank=0, world_size=2).step(1, 0, 1000).to_dict()
    doc["deviceProperties"][0]["computeMajor"] = None
    doc["distributedInfo"]["world_size"] = "two"
    doc["baseTimeNanoseconds"] = 10**30
    t = load_trace(write(tmp_path, doc))
    props = t.device_properties[0]
    assert "computeMajor" not in props and props["computeMinor"] == 0 and props["name"] == "NVIDIA A100-SXM4-80GB"
    assert "world_size" not in t.metadata["distributedInfo"] and t.rank == 0 and "baseTimeNanoseconds" not in t.metadata
    assert any("3 trace metadata value(s) of the wrong type or out of range" in w for w in t.warnings)


def test_utf8_bom_is_accepted_in_both_forms(tmp_path):
    events = [op(ts=EPOCH_US), op(ts=EPOCH_US + 1)]
    for doc in (events, {"traceEvents": events}):
        t = load_trace(write(tmp_path, b"\xef\xbb\xbf" + json.dumps(doc).encode()))
        assert len(t.cpu_ops) == 2 and t.warnings == []


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_utf16_is_refused_with_the_reason(tmp_path, encoding):
    path = write(tmp_path, json.dumps({"traceEvents": [op()]}).encode(encoding))
    with pytest.raises(TraceFormatError) as exc:
        read_trace_file(path)
    assert exc.value.message == (
        f"{path}: UTF-16 or UTF-32 text; a trace is UTF-8 JSON (convert it, e.g. iconv -f UTF-16 -t UTF-8)"
    )


def test_junk_after_a_complete_gzip_is_ignored_with_a_warning(tmp_path):
    events = [op(ts=EPOCH_US + i) for i in range(4)]
    path = write(tmp_path, gzip.compress(json.dumps({"traceEvents": events}).encode()) + b"junk" * 5, "t.json.gz")
    t = load_trace(path)
    assert len(t.cpu_ops) == 4 and not t.truncated
    assert "20 byte(s) that are not gzip data after the gzip stream ignored" in t.warnings[0]


def test_trimmed_header_recovers_the_events(tmp_path):
    events = [op(ts=EPOCH_US + i) for i in range(3)]
    text = b'{\n {"id": 0, "name": "GPU"}], "traceEvents": ' + json.dumps(events).encode() + b"}"
    t = load_trace(write(tmp_path, text))
    assert len(t.cpu_ops) == 3 and t.metadata == {}
    assert any("the JSON before 'traceEvents' is malformed" in w for w in t.warnings)


def test_end_times_stay_finite(tmp_path):
    events = [op(ts=EPOCH_US, dur=MAX_SPAN_US), op(ts=EPOCH_US + 5, dur=1.0)]
    t = load_trace(write(tmp_path, {"traceEvents": events}))
    assert np.isfinite(t.cpu_ops["end_us"]).all() and t.cpu_ops["end_us"].max() == EPOCH_US + MAX_SPAN_US


# -- the declarative field table -------------------------------------------------------------------------------
def test_memory_addr_read_absent_and_out_of_range(tmp_path):
    """``Addr`` of a [memory] event: read as int64, -1 when absent, beyond int64 the event is dropped."""

    def mem(ts, **args):
        a = {"Device Type": 1, "Device Id": 0, "Bytes": 512, "Total Allocated": 512, "Total Reserved": 2048}
        return {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "args": {**a, **args}}

    events = [op(), mem(EPOCH_US + 20, Addr=140098913959936), mem(EPOCH_US + 21), mem(EPOCH_US + 22, Addr=2**64)]
    tables = load_trace(write(tmp_path, {"traceEvents": events}))
    assert tables.tables["memory"]["addr"].tolist() == [140098913959936, -1]
    assert "'Addr' out of range (1)" in tables.warnings[0]


def test_generated_tables_have_the_documented_columns():
    from perfdoctor.trace.columns import TABLES

    assert {t: cols for t, (_, cols) in TABLES.items()} == {
        "cpu_ops": (
            "external_id",
            "input_dims",
            "input_type",
            "concrete_inputs",
            "collective",
            "in_nelems",
            "dtype",
            "group_size",
        ),  # record_param_comms names its collective
        "annotations": ("external_id", "input_dims", "input_type"),
        "gpu_annotations": ("device", "stream", "external_id"),
        "python_functions": ("python_id", "python_parent_id", "python_caller"),  # a stack frame and its caller line
        "kernels": ("device", "stream", "correlation", "external_id", "collective", "in_nelems", "dtype", "group_size"),
        "memcpy": ("device", "stream", "correlation", "external_id", "bytes"),
        "memset": ("device", "stream", "correlation", "external_id", "bytes"),
        "runtime": ("correlation", "external_id", "is_driver"),
        "syncs": ("device", "stream", "correlation", "external_id"),
        "flows": ("flow_id", "cat_id", "is_start"),
        "memory": ("mem_bytes", "total_allocated", "total_reserved", "device_id", "device_type", "addr"),
        "profiler": ("is_span",),
    }


def test_a_new_field_is_one_row(tmp_path):
    """Kineto's ``blocks per SM`` kernel arg, added as one TraceField: typed decode, fallback, column, range."""
    from perfdoctor.trace import schema
    from perfdoctor.trace.fields import ARG_FIELDS, EVENT_FIELDS, TraceField

    row = TraceField("blocks_per_sm", "blocks per SM", "float", None, 0.0, 1e6, ("kernels",))
    kinds = schema.build(EVENT_FIELDS, (*ARG_FIELDS, row))

    def kernel(ts, **args):
        return {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": ts,
            "dur": 1.0,
            "args": {"device": 0, "stream": 7, "correlation": 5, **args},
        }

    events = [
        kernel(EPOCH_US, **{"blocks per SM": 2.5}),
        kernel(EPOCH_US + 1),
        kernel(EPOCH_US + 2, **{"blocks per SM": "0.75"}),  # a string: the fallback parser
        kernel(EPOCH_US + 3, **{"blocks per SM": -1.0}),
    ]  # below its range: dropped
    raw = read_trace_file(write(tmp_path, {"traceEvents": events}), kinds=kinds)
    col = raw.tables["kernels"]["blocks_per_sm"]
    assert col[0] == 2.5 and np.isnan(col[1]) and col[2] == 0.75 and col.size == 3
    assert "'blocks per SM' out of range (1)" in raw.warnings[0]
    # the default schema does not know the key: same file, no such column, nothing dropped
    plain = read_trace_file(write(tmp_path, {"traceEvents": events}, "u.json"))
    assert "blocks_per_sm" not in plain.tables["kernels"] and plain.n_events == 4
