"""Arrival traces: CSV, JSON lines and Triton's own trace file in; CSV and JSON lines out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autobatch.errors import ConfigError
from autobatch.plan.simulator import Workload
from autobatch.traces import ArrivalTrace, draw_rows, parse_rows, read_trace, write_trace


def test_csv_with_rows_and_priority(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("# from production\ntime_s,rows,priority\n10.5,2,1\n10.0,1,0\n10.25,4,2\n")
    trace = read_trace(path)
    # Sorted by time and shifted to start at 0.
    np.testing.assert_allclose(trace.t_s, [0.0, 0.25, 0.5])
    assert trace.rows.tolist() == [1, 4, 2]
    assert trace.priority.tolist() == [0, 2, 1]
    assert trace.duration_s == pytest.approx(0.5)


def test_jsonl_rows_and_priority_are_optional(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"time_s": 0}\n\n{"time_s": 0.002, "rows": 3}\n')
    trace = read_trace(path)
    assert trace.rows.tolist() == [1, 3] and trace.priority is None


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_written_trace_reads_back(tmp_path, suffix):
    trace = ArrivalTrace.of([0.0, 0.001234, 0.5], [1, 2, 8], [0, 1, 0], source="x")
    back = read_trace(write_trace(trace, tmp_path / f"out{suffix}"))
    np.testing.assert_allclose(back.t_s, trace.t_s, atol=1e-6)
    assert back.rows.tolist() == [1, 2, 8] and back.priority.tolist() == [0, 1, 0]


def _triton_trace(entries):
    return json.dumps(entries)


def test_triton_trace_file_arrivals_and_rows(tmp_path):
    """Triton's layout: one entry with the model, one with the timestamps, tensor entries."""
    path = tmp_path / "trace.json"
    path.write_text(_triton_trace([
        {"id": 2, "model_name": "m", "model_version": 1},
        {"id": 2, "timestamps": [{"name": "REQUEST_START", "ns": 3_000_000},
                                 {"name": "QUEUE_START", "ns": 3_000_100}]},
        {"id": 2, "activity": "TENSOR_QUEUE_INPUT",
         "tensor": {"name": "INPUT", "data": "0,0", "shape": "3,16", "dtype": "FP32"}},
        {"id": 1, "model_name": "m", "model_version": 1},
        {"id": 1, "timestamps": [{"name": "REQUEST_START", "ns": 1_000_000}]},
    ]))
    trace = read_trace(path)
    np.testing.assert_allclose(trace.t_s, [0.0, 0.002])
    assert trace.rows.tolist() == [1, 3]
    assert len(Workload.from_trace(trace)) == 2


def test_triton_trace_with_several_models_needs_one_named(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(_triton_trace([
        {"id": 1, "model_name": "a", "timestamps": [{"name": "REQUEST_START", "ns": 5}]},
        {"id": 2, "model_name": "b", "timestamps": [{"name": "REQUEST_START", "ns": 9}]},
    ]))
    with pytest.raises(ConfigError, match=r"trace.json: model: the trace holds 2 models \(a, b\)"):
        read_trace(path)
    assert len(read_trace(path, model="b")) == 1
    with pytest.raises(ConfigError, match=r"model = 'c': not in the trace"):
        read_trace(path, model="c")


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("t.csv", "time_s,rows\n0.1,1\n0.2,x\n", r"t.csv:3: rows = 'x': must be an integer >= 1"),
        ("t.csv", "time_s,rows\n0.1,0\n", r"t.csv:2: rows = 0: must be an integer >= 1"),
        ("t.csv", "time_s\n-1\n", r"t.csv:2: time_s = -1.0: must be a number >= 0"),
        ("t.csv", "time_s,rows,priority\n0,1,-2\n", r"t.csv:2: priority = -2: must be an integer >= 0"),
        ("t.csv", "when,rows\n0,1\n", r"t.csv:1: header = 'when,rows': must name the columns"),
        ("t.csv", "time_s,size\n0,1\n", r"t.csv:1: column 'size': must be time_s, rows or priority"),
        ("t.csv", "time_s,rows\n0,1,3\n", r"t.csv:2: 3 field\(s\): must have 2"),
        ("t.csv", "time_s,rows\n", r"t.csv: the trace holds no request"),
        ("t.jsonl", '{"time_s": 0}\n{"rows": 2}\n', r"t.jsonl:2: time_s: missing"),
        ("t.jsonl", '{"time_s": 0}\n{"time_s": nan}\n', r"t.jsonl:2: not JSON"),
        ("t.jsonl", '{"time_s": "soon"}\n', r"t.jsonl:1: time_s = 'soon': must be a number"),
        ("t.jsonl", '{"time_s": 0, "rows": 1.5}\n', r"t.jsonl:1: rows = 1.5: must be an integer"),
        ("t.jsonl", "[1, 2]\n", r"t.jsonl:1: '\[1, 2\]': must be a JSON object"),
        ("t.json", "[{\"model_name\": \"m\"}]", r"t.json: entry 0: must be an object with an id"),
        ("t.json", "[{\"id\": 1, \"model_name\": \"m\"}]", r"t.json: no request with a REQUEST_START"),
        ("t.json", "[{\"id\": 1,", r"t.json:1: not JSON"),
        ("t.json", '[{"id": 1, "timestamps": [{"name": "REQUEST_START", "ns": 1}]},'
                   ' {"id": 1, "activity": "TENSOR_QUEUE_INPUT", "tensor": {"shape": "x,16"}}]',
         r"t.json: trace id 1: tensor shape = 'x,16': must start with the batch dimension"),
        ("t.txt", "0\n", r"t.txt: suffix '.txt': a trace file must be .csv, .jsonl"),
        # Past what one request can carry (Triton's max_batch_size is an int32).
        ("t.csv", "time_s,rows\n0,99999999999999999999\n",
         r"t.csv:2: rows = 99999999999999999999: must be an integer >= 1 and <= 2147483647"),
        ("t.jsonl", '{"time_s": 0, "rows": 1e30}\n', r"t.jsonl:1: rows = 1e\+30: must be an integer >= 1 "),
        ("t.jsonl", '{"time_s": 0, "priority": 1e30}\n', r"t.jsonl:1: priority = 1e\+30: must be"),
        ("t.json", '[{"id": 1, "timestamps": [{"name": "REQUEST_START", "ns": 1}]},'
                   ' {"id": 1, "activity": "TENSOR_QUEUE_INPUT", "tensor": {"shape": "9999999999,16"}}]',
         r"t.json: trace id 1: tensor shape = '9999999999,16': batch dimension must be >= 1 and <="),
        # More than 30 days from the first arrival to the last.
        ("t.jsonl", '{"time_s": 0}\n{"time_s": 1e9}\n',
         r"t.jsonl:2: time_s = 1000000000.0: 1e\+09 s after the first arrival: a trace spans at most"),
        ("t.csv", "time_s\n5\n2592006\n", r"t.csv:3: time_s = 2592006.0: 2.592e\+06 s after the first"),
        ("t.json", '[{"id": 1, "timestamps": [{"name": "REQUEST_START", "ns": 5}]},'
                   ' {"id": 2, "timestamps": [{"name": "REQUEST_START", "ns": 3000000000000005}]}]',
         r"t.json: trace id 2: REQUEST_START ns = 3000000000000005: 3e\+06 s after"),
        # Keys and columns: an unknown key is refused as an unknown column is; a column once.
        ("t.jsonl", '{"time_s": 0, "rowz": 4}\n', r"t.jsonl:1: key 'rowz': must be time_s, rows or priority"),
        ("t.csv", "time_s,time_s\n0,1\n", r"t.csv:1: column 'time_s': given twice"),
        ("t.csv", "time_s,rows,rows\n0,1,2\n", r"t.csv:1: column 'rows': given twice"),
        # Triton's trace ids are integers (or strings); timestamps a list.
        ("t.json", '[{"id": [1], "model_name": "m", "timestamps": [{"name": "REQUEST_START", "ns": 5}]}]',
         r"t.json: entry 0: id = \[1\]: must be an integer or a string"),
        ("t.json", '[{"id": {"a": 1}}]', r"t.json: entry 0: id = \{'a': 1\}: must be an integer or a string"),
        ("t.json", '[{"id": 1, "timestamps": 5}]', r"t.json: trace id 1: timestamps = 5: must be a list"),
    ],
)
def test_errors_name_the_file_line_field_and_value(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        read_trace(path)
    assert "\n" not in str(info.value)


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"nope.csv: file not found"):
        read_trace(tmp_path / "nope.csv")


def test_rows_specs():
    assert parse_rows("4") == 4
    assert parse_rows("1:0.5, 4:0.5") == {1: 0.5, 4: 0.5}
    for bad, message in (("0", "rows = 0: must be an integer >= 1"),
                         ("a", "rows = 'a': must be a number of rows"),
                         ("1:-1", "rows = {1: -1.0}: row counts must be integers >= 1"),
                         ("99999999999999999999", "rows = 99999999999999999999: must be an integer >= 1 "
                                                  "and <= 2147483647"),
                         ("4294967296:1", "rows = {4294967296: 1.0}: row counts must be integers"),
                         ("1:nan,2:1", r"rows = {1: nan, 2: 1.0}: row counts must be .* finite shares")):
        with pytest.raises(ConfigError, match=message):
            parse_rows(bad)
    drawn = draw_rows(10_000, {2: 1.0, 5: 3.0}, seed=3)
    assert set(drawn.tolist()) == {2, 5}
    assert np.mean(drawn == 5) == pytest.approx(0.75, abs=0.02)
    np.testing.assert_array_equal(drawn, draw_rows(10_000, {2: 1.0, 5: 3.0}, seed=3))


def _autobatch(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("autobatch")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120, check=False,
                          env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


CURVE = str(Path(__file__).resolve().parents[2] / "curves" / "laptop-256x144-fp16.yaml")
BAD_ROWS = "bad.csv:3: rows = 'two': must be an integer >= 1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["simulate", "--curve", CURVE, "--trace", "{bad}"], BAD_ROWS),
        (["load", "--model", "m", "--trace", "{bad}"], BAD_ROWS),
        (["simulate", "--curve", CURVE, "--trace", "{good}", "--rows", "2"],
         "rows = 2: a trace brings its own arrivals, rows and priorities"),
        (["simulate", "--curve", CURVE, "--rate", "10", "--rows", "0"], "rows = 0: must be an integer >= 1"),
        (["simulate", "--curve", CURVE, "--trace", "{good}", "--max-batch-size", "2"],
         "rows = 4 (request 1 of trace"),
        (["load", "--model", "m", "--trace", "{good}", "--record-trace", "x.txt"],
         "record_trace = 'x.txt': suffix '.txt'"),
    ],
)
def test_bad_trace_input_exits_2_with_one_line(tmp_path, args, message):
    (tmp_path / "bad.csv").write_text("time_s,rows\n0,1\n0.1,two\n")
    (tmp_path / "good.csv").write_text("time_s,rows\n0,1\n0.1,4\n")
    args = [a.format(bad=tmp_path / "bad.csv", good=tmp_path / "good.csv") for a in args]
    r = _autobatch(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_simulate_trace_json_counts_rows_and_rejections(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"time_s": 0, "rows": 2}\n{"time_s": 0, "rows": 3}\n{"time_s": 0.5, "rows": 1}\n')
    r = _autobatch("simulate", "--curve", CURVE, "--trace", str(path), "--burst-gap-us", "0", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    # The two rows and three rows arrive together: one batch of 5 rows, then one of 1.
    assert (out["requests"], out["rows"], out["batch_counts"]) == (3, 6, {"1": 1, "5": 1})
    assert out["rejected_timeout"] == 0 and out["rejection_ms"] is None
