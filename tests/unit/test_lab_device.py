"""DeviceMeter against a fake stats endpoint (httpx.MockTransport); the real Triton's
stats are read by benchmarks/closed_loop.py and tests/integration/test_demo.py."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from autobatch.errors import TritonError
from autobatch.lab.device import DeviceMeter, DeviceTotals
from autobatch.lab.process import poll_until_async


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


async def test_a_new_copy_that_overtook_the_old_one_between_two_reads_mixes_the_copies(fake):
    """Why the meter must be polled: read only at the ends, a new copy that has served
    more than the old one had looks, counter by counter, like the old one counting on."""
    fake.rows["a"] = {1: (100, 800_000_000)}
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handler)) as client:
        sparse = DeviceMeter("http://triton.test:8000", ["a"], client=client)
        dense = DeviceMeter("http://triton.test:8000", ["a"], client=client)
        await sparse.read(), await dense.read()
        fake.rows["a"] = {2: (10, 100_000_000)}                  # the new copy, early on
        await dense.read()
        fake.rows["a"] = {2: (100, 1_000_000_000)}               # every counter past the old copy's
        wrong, right = await sparse.read(), await dense.read()
    assert right == DeviceTotals(1_000_000_000, 200, 100)
    assert wrong == DeviceTotals(200_000_000, 100, 0)             # the difference of two copies


async def test_one_counter_going_backwards_marks_a_new_copy_for_all_of_them(fake):
    fake.rows["a"], fake.count["a"] = {1: (100, 800_000_000)}, 100
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handler)) as client:
        meter = DeviceMeter("http://triton.test:8000", ["a"], client=client)
        await meter.read()
        fake.rows["a"], fake.count["a"] = {16: (8, 160_000_000)}, 128  # executions back to 8
        got = await meter.read()
    assert got == DeviceTotals(160_000_000, 128, 8)


class Stepping(Fake):
    """Each request of the stats endpoint serves the next of ``answers``, then the last."""

    def __init__(self, answers: list[dict[int, tuple[int, int]]]) -> None:
        super().__init__()
        self.answers = answers

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.rows["a"] = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return super().handler(request)


async def test_poll_reads_until_stopped_and_so_sees_the_new_copy():
    fake = Stepping([{1: (100, 800_000_000)}, {2: (10, 100_000_000)}, {2: (100, 1_000_000_000)}])
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handler)) as client:
        meter = DeviceMeter("http://triton.test:8000", ["a"], client=client)
        assert await meter.read() == DeviceTotals()
        stop = asyncio.Event()
        task = asyncio.ensure_future(meter.poll(stop, interval_s=0.001))
        await poll_until_async(lambda: len(fake.answers) == 1, timeout_s=10, what="two polls")
        stop.set()
        await task
        got = await meter.read()
    assert got == DeviceTotals(1_000_000_000, 200, 100)


async def test_the_longest_gap_between_completed_reads_is_kept(fake):
    """What a swap can take along: the counts since the last completed read; a failed
    read does not end a gap."""
    now = [0.0]
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handler)) as client:
        meter = DeviceMeter("triton.test:8000", ["a"], client=client, clock=lambda: now[0])
        await meter.read()
        assert meter.longest_gap_s == 0.0
        now[0] = 0.25
        await meter.read()
        now[0] = 1.0
        meter.models = ("nope",)
        with pytest.raises(TritonError):
            await meter.read()
        meter.models = ("a",)
        now[0] = 1.6
        await meter.read()
        now[0] = 1.8
        await meter.read()
    assert meter.longest_gap_s == pytest.approx(1.35)
