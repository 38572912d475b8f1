"""The PromQL source against a real Prometheus (Debian ``prometheus`` 2.x) scraping the real Triton.

Prometheus scrapes the session Triton twice, as replicas ``a`` and ``b``, so a
fleet query summed across replicas must see twice the direct traffic, and one
narrowed to ``replica="a"`` the same as the direct source.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from autobatch.serve import EMULATOR_MODEL, free_port
from autobatch.signals import PrometheusSource, TritonSource, window_between

from .helpers import BackgroundLoad

pytestmark = pytest.mark.triton

M = EMULATOR_MODEL
SCRAPE_INTERVAL_S = 1


def _wait(condition: Any, what: str, timeout_s: float = 60.0, proc: Any = None) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"prometheus exited with code {proc.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.1)


def _query(url: str, promql: str) -> list[dict[str, Any]]:
    try:
        r = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5)
    except httpx.HTTPError:
        return []
    return r.json()["data"]["result"] if r.status_code == 200 else []


@pytest.fixture(scope="module")
def prometheus(triton: Any) -> Iterator[str]:
    """A real Prometheus on loopback scraping the session Triton every second, as two replicas."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("the prometheus binary is missing: run scripts/system-deps.sh "
                    "(Debian package 'prometheus', listed in scripts/apt-packages.txt)")
    target = triton.urls.metrics.split("://", 1)[1].split("/", 1)[0]
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="autobatch-prometheus-") as tmp:
        config = Path(tmp) / "prometheus.yml"
        config.write_text(
            f"""\
global:
  scrape_interval: {SCRAPE_INTERVAL_S}s
  scrape_timeout: {SCRAPE_INTERVAL_S}s
scrape_configs:
  - job_name: triton
    metrics_path: /metrics
    static_configs:
      - targets: ["{target}"]
        labels: {{replica: a}}
      - targets: ["{target}"]
        labels: {{replica: b}}
""",
            encoding="utf-8",
        )
        log = (Path(tmp) / "prometheus.log").open("wb")
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait(lambda: _query(url, 'count(up{job="triton"} == 1) == 2'),
                  "both replicas to be scraped", proc=proc)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            log.close()


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
        return PrometheusSource(prometheus, M, selector=selector, range_s=range_s,
                                clock=lambda: b.taken_s)

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
