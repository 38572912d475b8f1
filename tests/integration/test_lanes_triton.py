"""Priority lanes on the real Triton: urgent requests keep their latency while the batchable lane batches.

The shipped two-lane profile (profiles/emulated_accelerator/lanes.yaml, written by
`autobatch plan --priority-mix`) on the emulated accelerator with its own curve:
bulk work arrives in bursts of 128 requests (150/s on average) and urgent requests
(priority 1) at 20/s, once with the lanes and once with the same batching on one
level (every request in one FIFO queue), side by side in one test. With one queue
an urgent request waits behind the burst; with the lanes it goes first: of the
batchable requests waiting when it was sent, it must overtake most with the lanes
and hardly any without, while Triton keeps batching.

Which requests it overtook is asserted, not how much sooner it came back: the two
runs are sequential, so a loaded machine's latency moves between them, and the
client's own work on each burst adds to every latency alike (the urgent p95 came
within 0.9x of the one-queue figure at load average 5-6 on 2026-12-02, where the
lanes still overtook 73% of the waiting backlog and one queue none).

What the batchable lane pays is printed, not asserted: on Triton 2.51 a model with
priority levels loses payload prefetching, and the cost is larger than the
simulator predicts (benchmarks/lanes.py measures it; docs/planner.md).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from autobatch.curve import load_curve
from autobatch.lab.lanes import run_lanes
from autobatch.lab.serve import EMULATOR_MODEL
from autobatch.profiles import load_profile

from ..conftest import PROFILES, REPOSITORY

pytestmark = pytest.mark.triton

LANES = load_profile(PROFILES / EMULATOR_MODEL / "lanes.yaml")
ONE_QUEUE = replace(LANES, name="one-queue", priority_levels=0, default_priority_level=0)
CURVE = load_curve(REPOSITORY / EMULATOR_MODEL / "curve.yaml")
URGENT_RPS, BATCHABLE_RPS, BURST, SECONDS = 20.0, 150.0, 128, 6.0


@pytest.fixture
def emulator(triton: Any):
    yield triton
    triton.load_emulator(CURVE)  # the repository's own config, for the tests after this one


def test_urgent_requests_keep_their_latency_while_the_batchable_lane_batches(emulator: Any) -> None:
    assert LANES.priority_levels == 2 and LANES.default_priority_level == 2
    runs = {}
    for profile in (LANES, ONE_QUEUE):
        emulator.load_emulator(CURVE, profile)
        runs[profile.name] = run_lanes(emulator.urls.grpc, emulator.urls.http, EMULATOR_MODEL,
                                       urgent_rps=URGENT_RPS, batchable_rps=BATCHABLE_RPS,
                                       batchable_burst=BURST, duration_s=SECONDS, seed=3)
    for name, run in runs.items():
        print(f"\n{name}: {run.to_dict()}")
    lanes, one = runs["lanes"], runs["one-queue"]
    for run in (lanes, one):
        for lane in (run.urgent, run.batchable):
            assert lane.ok == lane.sent > 0, lane  # nothing rejected or timed out
        # Triton batches either way: at least the preferred 4 on average.
        assert run.mean_batch >= 4.0
    assert lanes.urgent.latency and one.urgent.latency and lanes.batchable.latency
    # Urgent requests go ahead of the batchable backlog with the lanes, and wait in it without:
    # with one FIFO queue an urgent request only ties with those in its own batch.
    assert lanes.overtaken is not None and one.overtaken is not None, (lanes, one)
    assert lanes.overtaken > 0.5 and one.overtaken < 0.25, (lanes.overtaken, one.overtaken)
    assert lanes.urgent.latency.p50_ms < lanes.batchable.latency.p50_ms
    print(f"\nurgent p95 with the lanes / one queue: "
          f"{lanes.urgent.latency.p95_ms / one.urgent.latency.p95_ms:.2f}x; overtaken "
          f"{lanes.overtaken:.2f} / {one.overtaken:.2f}")
