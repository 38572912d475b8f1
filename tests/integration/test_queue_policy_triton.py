"""Queue-policy timeouts on the real Triton, against the simulator's general engine.

Triton's batcher cannot prefetch with a queue policy. While its one instance is
busy it waits for it 500 ms at a time and rejects expired requests only when
such a wait runs out (dynamic_batch_scheduler.cc, WaitForPayloadSlotAvailable);
that wait starts at the end of its own 500 ms idle wait if the queue was empty
when it last sent a batch. Until then expired requests keep their
max_queue_size slots. The trace below tells that apart from a prompt rejection
and from a rejection only when the instance frees, by outcomes alone (no timing
is asserted): the emulated accelerator takes 2 s per batch, the queue holds 2,
a request expires 100 ms after it arrives.

    ms    request  Triton, per its source        prompt           when the instance frees
    0     0        runs until ~2000              runs             runs
    10    1        rejected at ~1000 (timeout)   ~110             ~2000
    20    2        rejected at ~1000 (timeout)   ~120             ~2000
    30    3        refused: queue full           refused          refused
    700   4        refused: 1, 2 hold the slots  queued; ~800     refused
    1200  5        queued; rejected at ~1500     queued; ~1300    refused

The trace starts 300 ms after load's warm-up request: a request that reaches
Triton just as its instance frees can miss the batcher's wake-up and wait for
the next 500 ms (seen on this server; the simulator does not model that race).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from autobatch.curve import BatchCurve, load_curve
from autobatch.lab.serve import EMULATOR_MODEL
from autobatch.load import run_load, sent_trace
from autobatch.plan.simulator import ServiceModel, Workload, simulate
from autobatch.profiles import Profile, QueuePolicy
from autobatch.traces import ArrivalTrace

from ..conftest import REPOSITORY

CURVE = BatchCurve({1: 2000.0, 32: 2000.0}, name="2 s per batch")
PROFILE = Profile(name="bounded", max_batch_size=1, preferred_batch_size=(1,), max_queue_delay_us=0,
                  default_queue_policy=QueuePolicy(timeout_action="REJECT",
                                                   default_timeout_microseconds=100_000, max_queue_size=2))
# Built directly (not with ArrivalTrace.of, which starts a trace at 0) to keep the lead.
# The first four 30 ms apart: 10 ms apart, the first two once reached Triton swapped on
# a loaded CI machine (the second ran, the first timed out). At 30 ms the fourth still
# meets two unexpired requests queued, and every one arrives inside the first's 2 s run.
TRACE = ArrivalTrace(np.array([0.0, 0.030, 0.060, 0.090, 0.700, 1.200]) + 0.3, np.ones(6, dtype=int),
                     source="bounded-queue")


@pytest.fixture
def emulator(triton: Any):
    triton.load_emulator(CURVE, PROFILE)
    yield triton
    triton.load_emulator(load_curve(REPOSITORY / EMULATOR_MODEL / "curve.yaml"))


def _kind(outcome: str, error: str | None) -> str:
    if outcome == "ok":
        return "ok"
    if "Exceeds maximum queue size" in (error or ""):
        return "full"
    if "Request timeout expired" in (error or ""):
        return "timeout"
    return f"{outcome}: {error}"


def test_expired_requests_hold_their_queue_slots_until_the_batchers_wait_runs_out(emulator: Any) -> None:
    report = run_load(emulator.urls.grpc, EMULATOR_MODEL, TRACE, timeout_s=10.0)
    real = [_kind(r.outcome, r.error) for r in report.records]
    print("\nreal:", [(k, round(r.latency_ms or 0)) for k, r in zip(real, report.records)])
    assert real == ["ok", "timeout", "timeout", "full", "full", "timeout"]

    # The simulator, fed what was sent, predicts the same fate for every request.
    sent = sent_trace(report.records)
    sim = simulate(PROFILE, ServiceModel(CURVE), Workload.from_trace(sent), keep_latencies=True)
    kinds = np.full(len(sent), "ok", dtype=object)
    kinds[~np.isnan(sim.rejected_at_s)] = "timeout"
    door = np.isclose(sim.rejected_at_s, sent.t_s)
    kinds[door] = "full"
    print("simulated rejection after (ms):", np.round((sim.rejected_at_s - sent.t_s) * 1000))
    assert list(kinds) == real
    assert (sim.rejected_full, sim.rejected_timeout) == (2, 3)
