"""Traces: the same arrivals sent by `autobatch load --trace` to the real Triton and
simulated by `autobatch simulate --trace` agree: p50 within 15% (the issue's criterion),
p95 within 40% (as tests/integration/test_simulator_fidelity.py says why).

The emulated accelerator runs a curve from curves/ (laptop-256x144-fp16: batching
pays) with preferred sizes 4 and 8 and max_batch_size 8, so multi-row requests
meet the max batch size often. Three traces of 4 s each, each sent three times (medians): Poisson, bursts of 8
sent at one instant, and requests of 1-4 rows. What the server adds beyond the
curve is measured from Triton's timers during the runs
(:mod:`autobatch.lab.traces`). benchmarks/trace_fidelity.py runs the same cases
longer, twice each, against the 10% target.

This is one of the few tests in the suite that asserts on timing.
"""

from __future__ import annotations

from typing import Any

import pytest

from autobatch.curve import load_curve
from autobatch.lab.serve import EMULATOR_MODEL
from autobatch.lab.traces import make_trace, trace_fidelity
from autobatch.profiles import Profile

from ..conftest import CURVES, REPOSITORY

CURVE = load_curve(CURVES / "laptop-256x144-fp16.yaml")
PROFILE = Profile(name="trace-fidelity", max_batch_size=8, preferred_batch_size=(4, 8),
                  max_queue_delay_us=2000)
SECONDS = 4.0
RUNS = 3  # interleaved round the traces; medians of three: one stall on a shared machine moves one run,
# not the figure (with two, the median was their mean, and one stall moved it)
TOLERANCE = 0.15
P95_TOLERANCE = 0.40  # the tail on a shared VM (test_simulator_fidelity.py's docstring)
TRACES = (
    make_trace("poisson", 250, SECONDS, seed=1),
    make_trace("bursty", 160, SECONDS, burst_size=8, seed=2),
    make_trace("multi-row", 100, SECONDS, rows={1: 0.4, 2: 0.3, 3: 0.2, 4: 0.1}, seed=3),
)


@pytest.fixture
def emulator(triton: Any):
    triton.load_emulator(CURVE, PROFILE)
    yield triton
    # The repository's own config and curve, for the tests after this one.
    triton.load_emulator(load_curve(REPOSITORY / EMULATOR_MODEL / "curve.yaml"))


@pytest.mark.serial  # measured latency against a prediction: alone, after the parallel tests
def test_load_trace_and_simulate_trace_agree_within_15_percent(emulator: Any, tmp_path) -> None:
    result = trace_fidelity(emulator.urls.grpc, emulator.urls.http, EMULATOR_MODEL, CURVE, PROFILE,
                            TRACES, tmp_path, runs=RUNS)
    print(f"\noverheads: {result.overheads.to_dict()}")
    print("trace        p50 real  p50 sim   err   p95 real  p95 sim   err   batch real  batch sim")
    for r in result.rows:
        print(f"{r.name:10s} {r.measured_p50_ms:9.1f} {r.predicted_p50_ms:8.1f} {r.error('p50'):+6.1%}"
              f" {r.measured_p95_ms:9.1f} {r.predicted_p95_ms:8.1f} {r.error('p95'):+6.1%}"
              f" {r.measured_mean_batch:10.2f} {r.predicted_mean_batch:10.2f}")
    # The sent traces were recorded, and hold what the trace files asked for.
    for trace in TRACES:
        sent = (tmp_path / f"{trace.source}-sent-0.csv").read_text().splitlines()
        assert len(sent) == len(trace) + 1  # a header, then every request
    # The cases exercise batching, and the multi-row one batches rows, not requests.
    assert all(r.measured_mean_batch > 1.5 for r in result.rows)
    for r in result.rows:
        assert abs(r.error("p50")) <= TOLERANCE, r.to_dict()
        assert abs(r.error("p95")) <= P95_TOLERANCE, r.to_dict()
