"""Traces from and to the real Triton: Triton's own trace file read back as arrivals,
and `autobatch load --trace --record-trace` round trips.

The trace is switched on for the emulated accelerator only, through Triton's
trace extension (POST /v2/models/M/trace/setting: TIMESTAMPS and TENSORS, every
request), and off again at the end. Triton writes ``trace.json.0`` once it has
collected ``log_frequency`` traces.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from autobatch.cli import app
from autobatch.lab.process import poll_until
from autobatch.lab.serve import EMULATOR_MODEL
from autobatch.load import run_load
from autobatch.traces import ArrivalTrace, read_trace

pytestmark = pytest.mark.triton

# 10 ms apart: Triton's trace order is its arrival order, whatever the client's threads do.
SENT = ArrivalTrace.of([0.01 * k for k in range(12)], [1, 2, 3, 1, 4, 1, 2, 1, 3, 1, 1, 2], source="sent")


def _trace_setting(triton: Any, **settings: Any) -> None:
    r = httpx.post(f"{triton.urls.http}/v2/models/{EMULATOR_MODEL}/trace/setting", json=settings, timeout=10)
    assert r.status_code == 200, r.text


@pytest.fixture
def traced(triton: Any, tmp_path: Path):
    _trace_setting(triton, trace_file=str(tmp_path / "trace.json"), trace_level=["TIMESTAMPS", "TENSORS"],
                   trace_rate="1", trace_count="-1", log_frequency=str(len(SENT)))
    try:
        yield triton
    finally:
        _trace_setting(triton, trace_level=["OFF"])


def test_tritons_own_trace_file_replays_as_arrivals(traced: Any, tmp_path: Path) -> None:
    recorded = tmp_path / "sent.csv"
    report = run_load(traced.urls.grpc, EMULATOR_MODEL, SENT, record_trace=recorded)
    assert report.total.ok == len(SENT)
    path = tmp_path / "trace.json.0"
    poll_until(lambda: path.exists() and path.stat().st_size > 0, timeout_s=20, interval_s=0.1,
               what="Triton's trace file")
    # Triton writes the file whole; read it once it parses.
    poll_until(lambda: _parses(path), timeout_s=20, interval_s=0.1, what="a complete trace file")
    trace = read_trace(path, model=EMULATOR_MODEL)
    assert len(trace) == len(SENT)
    assert trace.rows.tolist() == SENT.rows.tolist()  # rows from the traced input tensors
    assert trace.t_s[-1] > 0.05  # 110 ms of sends, seen on the server's clock

    # `autobatch simulate --trace` reads Triton's file; `--trace` of what load recorded too.
    for source in (path, recorded):
        result = CliRunner().invoke(app, ["simulate", "--curve", "curves/laptop-256x144-fp16.yaml",
                                          "--trace", str(source), "--json"])
        assert result.exit_code == 0, result.output
        out = json.loads(result.output)
        assert out["requests"] == len(SENT) and out["rows"] == int(SENT.rows.sum())


def _parses(path: Path) -> bool:
    try:
        json.loads(path.read_text())
    except ValueError:
        return False
    return True
