"""Queue-policy timeouts on the real Triton, against the simulator's general engine.

Triton's batcher cannot prefetch with a queue policy, so while its one instance
is busy it waits for it 500 ms at a time and rejects expired requests only when
such a wait runs out (dynamic_batch_scheduler.cc, WaitForPayloadSlotAvailable);
until then the expired requests keep their max_queue_size slots. The trace below
tells that apart from a prompt rejection by its outcomes alone (no timing is
asserted): the emulated accelerator takes 1 s per batch, the queue holds 2 and
a request expires after 100 ms.

    ms    request  Triton, per its source               if timeouts were prompt
    0     0        runs until ~1000                     runs
    10    1        queued; rejected at ~1000 (timeout)  rejected at ~110
    20    2        queued; rejected at ~1000 (timeout)  rejected at ~120
    30    3        refused: the queue is full           refused
    700   4        refused: 1 and 2 still hold slots    queued, then rejected (timeout)
    1200  5        runs (the queue was emptied)         runs
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

from .conftest import REPOSITORY

pytestmark = pytest.mark.triton

CURVE = BatchCurve({1: 1000.0, 32: 1000.0}, name="1 s per batch")
PROFILE = Profile(name="bounded", max_batch_size=1, preferred_batch_size=(1,), max_queue_delay_us=0,
                  default_queue_policy=QueuePolicy(timeout_action="REJECT",
                                                   default_timeout_microseconds=100_000, max_queue_size=2))
TRACE = ArrivalTrace.of([0.0, 0.010, 0.020, 0.030, 0.700, 1.200], source="bounded-queue")


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
    assert real == ["ok", "timeout", "timeout", "full", "full", "ok"]

    # The simulator, fed what was sent, predicts the same fate for every request.
    sent = sent_trace(report.records)
    sim = simulate(PROFILE, ServiceModel(CURVE), Workload.from_trace(sent), keep_latencies=True)
    kinds = np.full(len(sent), "ok", dtype=object)
    kinds[~np.isnan(sim.rejected_at_s)] = "timeout"
    door = np.isclose(sim.rejected_at_s, sent.t_s)
    kinds[door] = "full"
    print("simulated rejection after (ms):", np.round((sim.rejected_at_s - sent.t_s) * 1000))
    assert list(kinds) == real
    assert (sim.rejected_full, sim.rejected_timeout) == (2, 2)
