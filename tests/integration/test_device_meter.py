"""The device meter across reloads on the real Triton.

What Triton's ``/v2/models/M/stats`` does when the reload actuator swaps the model
under load: the new copy's counters (``inference_count``, ``execution_count``,
``batch_stats``) all start again from 0, while the old copy serves and counts until
the swap. The meter, polled, must count what both copies ran: every request the
client saw succeed, but for the old copy's last moments before each swap.

A server of its own (the test reloads the model), on a copy of dense_mlp's folder.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from autobatch.actuators import TritonReloadActuator
from autobatch.lab.device import DeviceMeter, DeviceTotals
from autobatch.lab.process import poll_until_async
from autobatch.profiles import load_profiles

from ..conftest import PROFILES, REPOSITORY
from ..helpers import BackgroundLoad

pytestmark = pytest.mark.triton

MODEL = "dense_mlp"
RATE = 80.0
POLL_S = 0.25
# Executions the copy in service runs before it is swapped (about 2 s at RATE, more when it
# batches): its counters then stand far above what the new copy runs between its load and
# the read after the swap, so "every counter restarted" is not a race. With none, the first
# swap came 8 requests into the load and the new copy had run 10 by the read (CI, 2026-12-01).
FLOOR = int(2 * RATE)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Any]:
    from autobatch.lab.serve import TritonServer

    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(REPOSITORY / MODEL, root / MODEL, ignore=shutil.ignore_patterns("__pycache__"))
    with TritonServer.on_free_ports(root, models=[MODEL]) as srv:
        yield srv


class RecordingMeter(DeviceMeter):
    """The meter, keeping each sample it took with when its request went out and came back
    (``time.monotonic``, the load's clock)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.samples: list[tuple[float, float, DeviceTotals]] = []

    async def _sample(self, model: str) -> DeviceTotals:
        sent = time.monotonic()
        totals = await super()._sample(model)
        self.samples.append((sent, time.monotonic(), totals))
        return totals


def swaps_seen(samples: list[tuple[float, float, DeviceTotals]]) -> list[tuple[float, float]]:
    """For each reset between two consecutive samples (any counter fell: a new copy), when the
    last sample of the old copy went out and when the first of the new one came back."""
    out = []
    for (sent, _, a), (_, back, b) in zip(samples, samples[1:]):
        if b.requests < a.requests or b.executions < a.executions or b.compute_ns < a.compute_ns:
            out.append((sent, back))
    return out


def counters(url: str) -> dict[str, int]:
    (entry,) = httpx.get(f"{url}/v2/models/{MODEL}/stats", timeout=10).json()["model_stats"]
    return {
        "inference_count": int(entry["inference_count"]),
        "execution_count": int(entry["execution_count"]),
        "batch_executions": sum(int(r["compute_infer"]["count"]) for r in entry["batch_stats"]),
    }


async def test_a_reload_restarts_every_counter_and_the_polled_meter_counts_both_copies(server):
    profiles = load_profiles(PROFILES / MODEL)
    ladder = sorted(profiles.values(), key=lambda p: p.max_queue_delay_us)
    # The load over gRPC, as the sidecar sends it (actuator.load_api's default): a load sent
    # over HTTP holds a Triton HTTP thread for the whole load, a poll can land on it and wait
    # the load out, and the old copy's counts since the last read go with it (243 of 1897
    # requests lost in one fresh-ci run, 2026-12-01, with reloads of 6-9 s).
    actuator = TritonReloadActuator(server.urls.http, MODEL, ladder, grpc_url=server.urls.grpc)
    meter = RecordingMeter(server.urls.http, [MODEL])
    stop = asyncio.Event()
    seen: list[dict[str, int]] = []
    try:
        with BackgroundLoad(server.urls.grpc, MODEL, RATE, max_s=120) as load:
            start = await meter.read()
            ok_before = sum(1 for *_, outcome in load.done if outcome == "ok")
            poller = asyncio.ensure_future(meter.poll(stop, interval_s=POLL_S))
            for name in ("efficient", "latency-soft"):
                await poll_until_async(
                    lambda: counters(server.urls.http)["execution_count"] >= FLOOR,
                    timeout_s=60, interval_s=POLL_S, what=f"the copy in service to run {FLOOR} batches",
                )
                before = await asyncio.to_thread(counters, server.urls.http)
                result = await actuator.apply(profiles[name])
                assert result.ok, result.message
                after = await asyncio.to_thread(counters, server.urls.http)
                seen.append(before)
                seen.append(after)
                # Let the new copy serve more than the old one had: the case a meter read
                # only at the ends of the stretch gets wrong.
                passed = before["inference_count"] + 50
                await poll_until_async(
                    lambda n=passed: counters(server.urls.http)["inference_count"] > n,
                    timeout_s=30, interval_s=POLL_S, what="the new copy to pass the old one's count",
                )
            load.stop.set()
        stop.set()
        await poller
        ok = sum(1 for *_, outcome in load.done if outcome == "ok") - ok_before
        total = await meter.read() - start
    finally:
        stop.set()
        await meter.aclose()
        await actuator.aclose()

    # Triton: each swap restarted every counter of the model's statistics together.
    for before, after in zip(seen[::2], seen[1::2], strict=True):
        assert all(after[k] < before[k] for k in before), (before, after)
    # The meter: every request the client saw served, but the old copies' last moments, and
    # no request twice (a few in flight at the first reading may be counted by one side only).
    # What an old copy takes along is what it served after the meter's last sample of it:
    # requests sent before the first sample of the new copy came back, and answered after
    # the old one's last went out. Those are counted from the client's own records, swap by
    # swap. The allowance was RATE x 2 x the longest gap between reads per swap, which is
    # not that bound: Triton stalls on a loaded machine and answers in bursts, and an old
    # copy drains what it holds after the swap (make test on the shared machine, 2026-12-02:
    # 157 lost against 156 allowed; 410 of 4989 against 340, longest gap 1.07 s).
    swapped = swaps_seen(meter.samples)
    lost = sum(1 for sent, done, outcome in load.done if outcome == "ok"
               for last_old, first_new in swapped if sent < first_new and done > last_old)
    print(f"\n[meter] longest gap between reads {meter.longest_gap_s:.2f} s; {ok} served, "
          f"{total.requests} counted, {ok - total.requests} lost; {lost} answered across the swaps "
          f"({', '.join(f'{b - a:.2f}' for a, b in swapped)} s)")
    assert len(swapped) == len(seen) // 2, swapped  # the meter saw each swap as one
    assert ok - lost <= total.requests <= ok + 5, (ok, total, meter.longest_gap_s, lost)
    assert 0 < total.executions <= total.requests
    assert total.compute_ns > 0
