"""DeviceMeter against a fake stats endpoint (httpx.MockTransport); the real Triton's
stats are read by benchmarks/closed_loop.py and tests/integration/test_demo.py."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from autobatch.errors import TritonError
from autobatch.lab.device import DeviceMeter, DeviceTotals


def stats(model: str, rows: dict[int, tuple[int, int]], count: int | None = None) -> dict[str, Any]:
    """The stats endpoint's answer: per batch size (executions, compute_infer ns)."""
    count = sum(b * c for b, (c, _) in rows.items()) if count is None else count
    return {"model_stats": [{
        "name": model, "version": "1",
        "inference_count": count, "execution_count": sum(c for c, _ in rows.values()),
        "inference_stats": {"success": {"count": count, "ns": 0}},
        "batch_stats": [{"batch_size": b, "compute_infer": {"count": c, "ns": ns}}
                        for b, (c, ns) in sorted(rows.items())],
    }]}


class Fake:
    def __init__(self) -> None:
        self.rows: dict[str, dict[int, tuple[int, int]]] = {"a": {}, "b": {}}
        self.count: dict[str, int] = {}

    def handler(self, request: httpx.Request) -> httpx.Response:
        model = request.url.path.split("/")[3]
        if model not in self.rows:
            return httpx.Response(400, json={"error": f"unknown model {model}"})
        return httpx.Response(200, json=stats(model, self.rows[model], self.count.get(model)))


@pytest.fixture
def fake() -> Fake:
    return Fake()


async def test_totals_are_differences_from_the_first_read_summed_over_models(fake):
    fake.rows["a"] = {1: (10, 80_000_000)}                 # before the meter starts: not counted
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handler)) as client:
        meter = DeviceMeter("triton.test:8000", ["a", "b"], client=client)
        assert await meter.read() == DeviceTotals()
        fake.rows["a"] = {1: (12, 96_000_000), 4: (5, 100_000_000)}   # +2 x b1 (16 ms), 5 x b4 (100 ms)
        fake.rows["b"] = {8: (1, 20_000_000)}
        got = await meter.read()
    assert got == DeviceTotals(compute_ns=136_000_000, requests=2 + 20 + 8, executions=8)
    assert got.device_ms_per_request == pytest.approx(136 / 30)
    assert got.mean_batch == pytest.approx(30 / 8)


async def test_a_reload_restarts_the_counters_and_the_new_copy_counts_from_zero(fake):
    fake.rows["a"] = {1: (100, 800_000_000)}
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handler)) as client:
        meter = DeviceMeter("http://triton.test:8000", ["a"], client=client)
        await meter.read()
        fake.rows["a"] = {1: (110, 880_000_000)}
        first = await meter.read()
        fake.rows["a"] = {16: (2, 60_000_000)}                 # a new copy: counters from 0
        second = await meter.read()
    assert first == DeviceTotals(80_000_000, 10, 10)
    assert second - first == DeviceTotals(60_000_000, 32, 2)


async def test_an_unknown_model_is_a_triton_error(fake):
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handler)) as client:
        meter = DeviceMeter("triton.test:8000", ["nope"], client=client)
        with pytest.raises(TritonError, match="stats of 'nope'.*HTTP 400"):
            await meter.read()


def test_no_requests_means_no_figure():
    assert DeviceTotals().device_ms_per_request is None and DeviceTotals().mean_batch is None


async def test_a_reload_that_restarts_only_the_batch_stats_counts_each_counter_on_its_own(fake):
    """On the real Triton a reload restarted batch_stats while inference_count went on: taking
    every counter from 0 then counted all requests since the model's load again (a step's high
    phase read batches of 9.3 where the sidecar's windows saw 4.2)."""
    fake.rows["a"], fake.count["a"] = {1: (100, 800_000_000)}, 100
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handler)) as client:
        meter = DeviceMeter("http://triton.test:8000", ["a"], client=client)
        await meter.read()
        fake.rows["a"], fake.count["a"] = {16: (2, 60_000_000)}, 132  # batch_stats from 0, count on
        got = await meter.read()
    assert got == DeviceTotals(60_000_000, 32, 2)
    assert got.mean_batch == 16
