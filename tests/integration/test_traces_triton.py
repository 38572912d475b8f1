"""Traces from and to the real Triton: Triton's own trace file read back as arrivals,
and `autobatch load --trace --record-trace` round trips.

Triton takes the trace file only on its command line (the trace extension
refuses to move it: "trace file location can not be updated through network
protocol"), so this module starts its own server with the emulated accelerator
and ``--trace-config`` as a production server would run it: TIMESTAMPS and
TENSORS (for the rows) of every request, ``trace.json.0`` written once
``log-frequency`` traces are collected.
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
from autobatch.lab.serve import EMULATOR_MODEL, TritonServer
from autobatch.load import run_load
from autobatch.traces import ArrivalTrace, read_trace

from ..conftest import CURVES, REPOSITORY

# 10 ms apart; on a busy machine the client can still send two at once, and Triton may
# then take them in either order.
SENT = ArrivalTrace.of([0.01 * k for k in range(12)], [1, 2, 3, 1, 4, 1, 2, 1, 3, 1, 1, 2], source="sent")


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("triton-trace")
    args = ["--trace-config", f"triton,file={folder / 'trace.json'}",
            "--trace-config", f"triton,log-frequency={len(SENT) + 1}",
            "--trace-config", "rate=1", "--trace-config", "level=TIMESTAMPS",
            "--trace-config", "level=TENSORS"]
    with TritonServer.on_free_ports(REPOSITORY, models=[EMULATOR_MODEL], extra_args=args) as server:
        yield server, folder


def test_tritons_own_trace_file_replays_as_arrivals(traced: Any, tmp_path: Path) -> None:
    server, folder = traced
    recorded = tmp_path / "sent.csv"
    report = run_load(server.urls.grpc, EMULATOR_MODEL, SENT, record_trace=recorded)
    assert report.total.ok == len(SENT)
    setting = httpx.get(f"{server.urls.http}/v2/trace/setting", timeout=10).json()
    print("\ntrace setting:", setting)
    # Triton traced load's warm-up request too: the file holds it, then the 12 sent.
    path = folder / "trace.json.0"
    poll_until(lambda: path.exists() and path.stat().st_size > 0, timeout_s=20, interval_s=0.1,
               what="Triton's trace file")
    # Triton writes the file whole; read it once it parses.
    poll_until(lambda: _parses(path), timeout_s=20, interval_s=0.1, what="a complete trace file")
    trace = read_trace(path, model=EMULATOR_MODEL)
    assert len(trace) == len(SENT) + 1
    # Rows from the traced input tensors, one request each.
    assert sorted(trace.rows.tolist()) == sorted([1, *SENT.rows.tolist()])
    # Arrivals on the server's clock: in order, and spread out rather than read as one instant.
    # (How far apart is the machine's business: a late client sends a burst to catch up.)
    times = trace.t_s.tolist()
    assert times == sorted(times) and times[-1] > times[1]

    # `autobatch simulate --trace` reads Triton's file; `--trace` of what load recorded too.
    for source in (path, recorded):
        result = CliRunner().invoke(app, ["simulate", "--curve", str(CURVES / "laptop-256x144-fp16.yaml"),
                                          "--trace", str(source), "--json"])
        assert result.exit_code == 0, result.output
        out = json.loads(result.output)
        warm_up = 1 if source == path else 0
        assert out["requests"] == len(SENT) + warm_up and out["rows"] == int(SENT.rows.sum()) + warm_up


def _parses(path: Path) -> bool:
    try:
        json.loads(path.read_text())
    except ValueError:
        return False
    return True
