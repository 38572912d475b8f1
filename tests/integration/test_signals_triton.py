"""The direct source against the real embedded Triton: under load, across reloads and a restart,
and against endpoints that refuse, hang or answer with something else."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from autobatch.errors import ScrapeError
from autobatch.lab.serve import EMULATOR_MODEL, TritonServer, free_port
from autobatch.signals import TritonSample, TritonSource, window_between, windows

from ..conftest import REPOSITORY
from ..helpers import BackgroundLoad

pytestmark = pytest.mark.triton

M = EMULATOR_MODEL


def batch_stats_mean(before: TritonSample, after: TritonSample) -> float:
    """Mean batch size from /stats' per-batch-size execution table (not from /metrics)."""
    assert before.stats is not None and after.stats is not None
    rows0 = {b: c for b, c, _ in before.stats.batch_stats}
    execs = {b: c - rows0.get(b, 0) for b, c, _ in after.stats.batch_stats}
    return sum(b * n for b, n in execs.items()) / sum(execs.values())


@pytest.mark.parametrize(
    ("rate_rps", "batch_size"),
    [(10.0, 2), (120.0, 1)],
    ids=["10rps-batch2", "120rps-batch1"],
)
async def test_window_agrees_with_the_load_generator(
    triton: Any, rate_rps: float, batch_size: int
) -> None:
    window_s = 5.0
    async with TritonSource(triton.urls.http, M, metrics_url=triton.urls.metrics) as source:
        with BackgroundLoad(triton.urls.grpc, M, rate_rps, max_s=window_s + 4.0, batch_size=batch_size,
                            drain_s=5.0) as load:
            load.wait_for(int(rate_rps))  # past the start-up
            a = await source.sample()
            load.wait_for(len(load.done_at) + int(rate_rps * window_s))
            b = await source.sample()
        w = window_between(a, b)
    assert not w.stale, w.stale_detail
    generator_rps = load.completed_between(a.taken_s, b.taken_s) / w.interval_s
    # shown with `pytest -rP`: the figures behind the assertions
    print(f"{rate_rps:g} rps x batch {batch_size}: window {w.request_rps:.2f} rps vs generator "
          f"{generator_rps:.2f} rps; mean batch {w.mean_batch_size} (/metrics) vs "
          f"{batch_stats_mean(a, b):.3f} (/stats batch_stats); items/request "
          f"{w.inference_rps / w.request_rps:.3f}; queue {w.mean_queue_ms} ms over {w.interval_s:.2f} s")
    assert w.request_rps == pytest.approx(generator_rps, rel=0.10)
    assert w.failures_rps == 0
    # items per request: exactly what the generator put in each request
    assert w.inference_rps / w.request_rps == pytest.approx(batch_size, rel=0.10)
    assert w.mean_batch_size is not None
    assert w.mean_batch_size == pytest.approx(batch_stats_mean(a, b), rel=0.10)
    if rate_rps <= 10:
        # 10 requests/s against a ~7 ms model rarely meet in the queue: each is its own batch
        assert w.mean_batch_size == pytest.approx(batch_size, rel=0.10)
    else:
        assert w.mean_batch_size > 1.05  # at 120 requests/s Triton's batcher merges some
    assert w.mean_queue_ms is not None and w.mean_queue_ms >= 0
    assert w.mean_compute_ms is not None and w.mean_compute_ms > 0
    assert w.batch_curve_ms and all(ms > 0 for ms in w.batch_curve_ms.values())
    assert w.p95_ms is not None and w.p99_ms is not None and w.p99_ms >= w.p95_ms
    assert w.pending_requests is not None and w.pending_requests >= 0
    assert w.utilization is None  # a CPU-only server: absent, never 0


def infer(client: httpx.Client, n: int) -> None:
    body = {"inputs": [{"name": "INPUT", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16}]}
    for _ in range(n):
        r = client.post(f"/v2/models/{M}/infer", json=body)
        assert r.status_code == 200, r.text


def reload_with_delay(client: httpx.Client, delay_us: int) -> None:
    """A profile switch: load the READY model again with a config override."""
    config = client.get(f"/v2/models/{M}/config").json()
    config["dynamic_batching"]["max_queue_delay_microseconds"] = delay_us
    r = client.post(f"/v2/repository/models/{M}/load",
                    json={"parameters": {"config": json.dumps(config)}}, timeout=120)
    assert r.status_code == 200, r.text


async def sample_when(source: TritonSource, ok: Callable[[TritonSample], bool],
                      timeout_s: float = 10.0) -> TritonSample:
    """The first sample that is ``ok``, else the last one read after ``timeout_s``. A client can
    have its answer before Triton's /stats counts its execution: the Python stub answers, then
    the backend reports the statistics (CI, 2026-12-06: /metrics had both executions of a
    reload's first two requests and /stats one, the two endpoints read 4.5 ms apart)."""
    deadline = time.monotonic() + timeout_s
    while True:
        sample = await source.sample()
        if ok(sample) or time.monotonic() > deadline:
            return sample
        await asyncio.sleep(0.05)


async def poll_window(source: TritonSource) -> Any:
    w = await source.poll()
    assert w is not None
    return w


async def test_reloads_and_a_restart_are_counter_resets() -> None:
    with TritonServer.on_free_ports(REPOSITORY, models=[M]) as server, httpx.Client(
        base_url=server.urls.http, timeout=30
    ) as client:
        source = TritonSource(server.urls.http, M, metrics_url=server.urls.metrics)
        infer(client, 8)
        assert await source.poll() is None
        infer(client, 4)
        w = await poll_window(source)
        assert not w.stale and w.success_rps > 0

        # 1. Reload with a config override: /metrics carries on, /stats starts again.
        before = await source.sample()
        reload_with_delay(client, 3000)
        infer(client, 2)
        after = await sample_when(source, lambda s: s.stats is not None and s.stats.execution_count >= 2)
        assert after.metrics.counters["nv_inference_exec_count"] == (
            before.metrics.counters["nv_inference_exec_count"] + 2
        )
        assert after.stats is not None and after.stats.execution_count == 2
        w = await poll_window(source)
        assert w.stale and w.stale_reason == "counter_reset", w
        infer(client, 3)
        assert not (await poll_window(source)).stale  # the next window is good again

        # 2. The same, but the new copy runs more than the old one had before the
        #    poll: no counter fell, the two endpoints' counts drifted apart.
        reload_with_delay(client, 4000)
        infer(client, 12)
        w = await poll_window(source)
        assert w.stale and w.stale_reason == "counter_reset"
        assert "drifted apart" in (w.stale_detail or ""), w.stale_detail
        infer(client, 1)
        assert not (await poll_window(source)).stale

        # 3. Unload: the model's statistics are gone at once (its /metrics series
        #    linger a few seconds); load it again: everything restarts at 0.
        assert client.post(f"/v2/repository/models/{M}/unload").status_code == 200
        with pytest.raises(ScrapeError) as info:
            await source.poll()
        assert info.value.reason == "missing_series"
        assert client.post(f"/v2/repository/models/{M}/load", timeout=120).status_code == 200
        infer(client, 2)
        w = await poll_window(source)
        assert w.stale and w.stale_reason == "counter_reset"
        infer(client, 2)
        assert not (await poll_window(source)).stale

        # 4. Restart (same ports): refused while down, then every counter back at 0.
        infer(client, 5)
        await source.poll()
        server.stop()
        with pytest.raises(ScrapeError) as info:
            await source.poll()
        assert info.value.reason == "unreachable" and "cannot reach" in str(info.value)
        server.start()
        infer(client, 2)
        w = await poll_window(source)
        assert w.stale and w.stale_reason == "counter_reset"
        assert "fell from" in (w.stale_detail or "")
        infer(client, 2)
        w = await poll_window(source)
        assert not w.stale and w.success_rps > 0
        await source.aclose()


@contextlib.contextmanager
def silent_listener() -> Iterator[int]:
    """A port that accepts connections (through the backlog) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


async def test_refused_and_hanging_endpoints_are_scrape_errors() -> None:
    port = free_port()
    async with TritonSource(f"127.0.0.1:{port}", M,
                            metrics_url=f"127.0.0.1:{port}/metrics") as source:
        with pytest.raises(ScrapeError) as info:
            await source.poll()
        assert info.value.reason == "unreachable" and "cannot reach" in str(info.value)
    with silent_listener() as port:
        async with TritonSource(f"127.0.0.1:{port}", M, metrics_url=f"127.0.0.1:{port}/metrics",
                                timeout_s=0.3) as source:
            with pytest.raises(ScrapeError) as info:
                await source.poll()
            assert "did not answer within 0.3 s" in str(info.value)


async def test_wrong_endpoints_and_models(triton: Any) -> None:
    # JSON where exposition text should be
    async with TritonSource(triton.urls.http, M, metrics_url=triton.urls.http + "/v2") as source:
        with pytest.raises(ScrapeError) as info:
            await source.poll()
        assert info.value.reason == "malformed"
    # an empty 200: a scrape without the model's series
    async with TritonSource(triton.urls.http, M,
                            metrics_url=triton.urls.http + "/v2/health/ready") as source:
        assert await source.poll() is None
        w = await source.poll()
        assert w is not None and w.stale and w.stale_reason == "missing_series"
    # a model the server does not have
    async with TritonSource(triton.urls.http, "no_such_model",
                            metrics_url=triton.urls.metrics) as source:
        with pytest.raises(ScrapeError) as info:
            await source.poll()
        assert info.value.reason == "missing_series" and "no_such_model" in str(info.value)


async def test_windows_loop_against_the_real_server(triton: Any) -> None:
    async with TritonSource(triton.urls.http, M, metrics_url=triton.urls.metrics) as source:
        got = [w async for w in windows(source, 0.2, count=2)]
    assert len(got) == 2 and not any(w.stale for w in got)
    assert got[0].end_s == got[1].start_s
