"""The PromQL source against a real Prometheus (Debian ``prometheus`` 2.x) scraping the real Triton.

Prometheus scrapes the session Triton twice, as replicas ``a`` and ``b``, so a
fleet query summed across replicas must see twice the direct traffic, and one
narrowed to ``replica="a"`` the same as the direct source.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from autobatch.lab.process import poll_until
from autobatch.lab.prometheus import PrometheusServer
from autobatch.lab.prometheus import query as _query
from autobatch.lab.serve import EMULATOR_MODEL
from autobatch.signals import PrometheusSource, TritonSource, Window, window_between

from ..helpers import BackgroundLoad

pytestmark = pytest.mark.triton

M = EMULATOR_MODEL
SCRAPE_INTERVAL_S = 1


def _wait(condition: Any, what: str, timeout_s: float = 60.0) -> Any:
    return poll_until(condition, timeout_s=timeout_s, interval_s=0.1, what=what)


@contextlib.contextmanager
def running_prometheus(targets: dict[str, str]) -> Iterator[str]:
    """A real Prometheus on loopback scraping ``{replica: host:port}`` every second."""
    with PrometheusServer(targets, scrape_interval_s=SCRAPE_INTERVAL_S) as prom:
        yield prom.url


def _target(server: Any) -> str:
    return server.urls.metrics.split("://", 1)[1].split("/", 1)[0]


@pytest.fixture(scope="module")
def prometheus(triton: Any) -> Iterator[str]:
    """Prometheus scraping the session Triton as two replicas, ``a`` and ``b``."""
    with running_prometheus({"a": _target(triton), "b": _target(triton)}) as url:
        yield url


async def test_promql_window_agrees_with_the_direct_one(triton: Any, prometheus: str) -> None:
    rate_rps, window_s = 80.0, 8.0
    async with TritonSource(triton.urls.http, M, metrics_url=triton.urls.metrics) as direct:
        with BackgroundLoad(triton.urls.grpc, M, rate_rps, max_s=window_s + 6.0, drain_s=5.0) as load:
            load.wait_for(int(rate_rps * 1.5))
            a = await direct.sample()
            load.wait_for(len(load.done_at) + int(rate_rps * window_s))
            b = await direct.sample()
            # Prometheus must hold a scrape from after the window's end, from both replicas.
            newest = f'min(timestamp(nv_inference_request_success{{model="{M}"}}))'
            _wait(lambda: any(float(r["value"][1]) >= b.taken_s for r in _query(prometheus, newest)),
                  "Prometheus to scrape past the window")
    w = window_between(a, b)
    assert not w.stale, w.stale_detail
    range_s = b.taken_s - a.taken_s

    def fleet(selector: str) -> PrometheusSource:
        # Evaluated at the window's end, seconds ago: no check of this clock against
        # Prometheus's (it would call the pinned clock a stepped one).
        return PrometheusSource(prometheus, M, selector=selector, range_s=range_s,
                                clock=lambda: b.taken_s, max_skew_s=None)

    async with fleet('replica="a"') as one:
        p = await one.poll()
    assert not p.stale, p.stale_detail
    assert p.source == "prometheus"
    print(f"direct {w.success_rps:.2f} rps, queue {w.mean_queue_ms:.3f} ms, batch "
          f"{w.mean_batch_size:.3f} over {range_s:.2f} s; PromQL replica a {p.success_rps:.2f} rps, "
          f"queue {p.mean_queue_ms} ms, batch {p.mean_batch_size}")
    assert p.success_rps == pytest.approx(w.success_rps, rel=0.15)
    assert p.mean_queue_ms == pytest.approx(w.mean_queue_ms, rel=0.15)
    assert p.mean_batch_size == pytest.approx(w.mean_batch_size, rel=0.15)
    assert p.end_s <= b.taken_s and b.taken_s - p.end_s <= 2 * SCRAPE_INTERVAL_S
    assert p.p95_ms is not None and p.utilization is None and p.batch_curve_ms == {}
    # Device time per request: exact from batch_stats directly, approximated from the
    # per-request compute counters through PromQL (mean compute / mean batch). At 80
    # requests/s nearly every batch is of one or two, so the two agree closely.
    print(f"device ms/request: direct {w.device_ms_per_request}, PromQL {p.device_ms_per_request}; "
          f"busy instances: direct {w.busy_instances}, PromQL {p.busy_instances}")
    assert w.device_ms_per_request is not None and w.busy_share is not None
    assert p.device_ms_per_request == pytest.approx(w.device_ms_per_request, rel=0.25)
    assert p.busy_instances == pytest.approx(w.busy_instances, rel=0.25)

    # One query over both replicas: rates add up, means stay means.
    async with fleet('job="triton"') as both:
        f = await both.poll()
    assert not f.stale, f.stale_detail
    print(f"PromQL both replicas {f.success_rps:.2f} rps, queue {f.mean_queue_ms} ms")
    assert f.success_rps == pytest.approx(2 * w.success_rps, rel=0.15)
    assert f.mean_queue_ms == pytest.approx(w.mean_queue_ms, rel=0.15)


async def test_promql_missing_series_and_bad_selector(prometheus: str) -> None:
    from autobatch.errors import ConfigError

    async with PrometheusSource(prometheus, M, selector='job="nobody"', range_s=5) as source:
        w = await source.poll()
    assert w.stale and w.stale_reason == "missing_series"
    async with PrometheusSource(prometheus, M, selector='job=~"(', range_s=5) as source:
        with pytest.raises(ConfigError) as info:
            await source.poll()
    assert str(info.value).startswith("selector = ")


async def test_a_clock_behind_prometheus_is_a_bad_interval(prometheus: str) -> None:
    """This clock stepped back 10 s: the queries, evaluated at it, read data 10 s old that
    looks current by it (so ``max_age_s`` passes it); Prometheus's own time shows the step."""
    behind_s = 10.0

    def behind() -> float:
        return time.time() - behind_s

    loop = asyncio.get_running_loop()

    def poll(source: PrometheusSource) -> Window:
        return asyncio.run_coroutine_threadsafe(source.poll(), loop).result()

    async with PrometheusSource(prometheus, M, selector='replica="a"', range_s=4, clock=behind,
                                max_age_s=3.0, max_skew_s=None) as unchecked:
        # Prometheus may have scraped for less than 10 s yet: wait for the past to be there.
        past = await asyncio.to_thread(
            poll_until, lambda: (lambda w: None if w.stale else w)(poll(unchecked)),
            timeout_s=60, interval_s=0.5, what="Prometheus to hold a window 10 s back")
    assert not past.stale and time.time() - past.end_s > behind_s / 2, past
    async with PrometheusSource(prometheus, M, selector='replica="a"', range_s=4, clock=behind,
                                max_age_s=3.0) as checked:
        w = await checked.poll()
    assert w.stale and w.stale_reason == "bad_interval", (w.stale_reason, w.stale_detail)
    assert "stepped" in (w.stale_detail or "") and prometheus in (w.stale_detail or "")
    async with PrometheusSource(prometheus, M, selector='replica="a"', range_s=4,
                                max_age_s=3.0) as on_time:
        fresh = await asyncio.to_thread(
            poll_until, lambda: (lambda w: None if w.stale else w)(poll(on_time)),
            timeout_s=30, interval_s=0.5, what="a window on the true clock")
    assert fresh.end_s > past.end_s + behind_s / 2


async def test_a_restart_inside_the_range_is_a_counter_reset() -> None:
    """Triton restarted while Prometheus scrapes it: the fleet window says so, then recovers."""
    from autobatch.lab.serve import TritonServer

    from ..conftest import REPOSITORY

    with TritonServer.on_free_ports(REPOSITORY, models=[M]) as server, \
            running_prometheus({"a": _target(server)}) as prom:
        success = f'nv_inference_request_success{{model="{M}"}}'

        def scraped_above(n: float) -> bool:
            return any(float(r["value"][1]) >= n for r in _query(prom, success))

        with BackgroundLoad(server.urls.grpc, M, 50.0, max_s=4.0, drain_s=5.0) as load:
            load.wait_for(100)
        _wait(lambda: scraped_above(100), "Prometheus to see the first 100 requests")
        server.restart()  # same ports: the same target, its counters back at 0
        with BackgroundLoad(server.urls.grpc, M, 50.0, max_s=4.0, drain_s=5.0) as load:
            load.wait_for(50)
        # A scrape after the restart with fewer requests than before: the counter went down.
        _wait(lambda: any(0 < float(r["value"][1]) < 100 for r in _query(prom, success)),
              "Prometheus to scrape the restarted server")
        async with PrometheusSource(prom, M, selector='job="triton"', range_s=60) as source:
            w = await source.poll()
        assert w.stale and w.stale_reason == "counter_reset", (w.stale_reason, w.stale_detail)
        assert "restarted" in (w.stale_detail or "")
        # Once the restart has left a short range, windows are no longer discarded.
        async with PrometheusSource(prom, M, selector='job="triton"', range_s=5) as source:
            loop = asyncio.get_running_loop()

            def past_the_reset() -> Window | None:
                # poll_until waits in a worker thread; the source polls on this test's loop.
                # A scrape gap on a slow machine leaves a 5 s range with too few samples for a
                # rate (missing_series, fresh-ci 2026-12-01): waited out like the reset.
                w = asyncio.run_coroutine_threadsafe(source.poll(), loop).result()
                return None if w.stale_reason in ("counter_reset", "missing_series") else w

            fresh = await asyncio.to_thread(poll_until, past_the_reset, timeout_s=30, interval_s=0.5,
                                            what="the reset to leave a 5 s range")
        assert not fresh.stale, fresh.stale_detail
