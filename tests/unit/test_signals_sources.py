"""The sources' I/O edges with httpx.MockTransport and fake clocks.

Each boundary also has an integration test against the real server:
tests/integration/test_signals_triton.py and test_signals_prometheus.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from autobatch.errors import ConfigError, ScrapeError
from autobatch.signals import PrometheusSource, TritonSource, make_source, windows
from autobatch.signals.prometheus import NOW_QUERY, clock_skew
from autobatch.signals.window import Window

M = "m"


def exposition(success: int, execs: int, *, pending: int = 0) -> str:
    lines = [
        f'nv_inference_request_success{{model="m",version="1"}} {success}',
        'nv_inference_request_failure{model="m",reason="REJECTED",version="1"} 0',
        f'nv_inference_count{{model="m",version="1"}} {success * 2}',
        f'nv_inference_exec_count{{model="m",version="1"}} {execs}',
        f'nv_inference_queue_duration_us{{model="m",version="1"}} {success * 1000}',
        f'nv_inference_compute_infer_duration_us{{model="m",version="1"}} {success * 5000}',
        f'nv_inference_request_duration_us{{model="m",version="1"}} {success * 7000}',
        f'nv_inference_pending_request_count{{model="m",version="1"}} {pending}',
    ]
    return "\n".join(lines) + "\n"


def stats_body(execs: int, items: int) -> dict[str, Any]:
    return {"model_stats": [{
        "name": M, "version": "1", "inference_count": items, "execution_count": execs,
        "inference_stats": {"success": {"count": items // 2, "ns": 0}},
        "batch_stats": [{"batch_size": 2, "compute_infer": {"count": execs, "ns": execs * 4_000_000}}],
    }]}


class FakeTriton:
    """A scripted Triton: each read serves the next state; ``fail`` makes the next read fail."""

    def __init__(self) -> None:
        self.success = 0
        self.fail: Callable[[httpx.Request], httpx.Response] | None = None
        self.dcgm: str | None = None
        self.instances: int | None = 2
        self.seen: list[str] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request.url.path)
        if self.fail is not None:
            return self.fail(request)
        if request.url.path == "/metrics" and request.url.port == 9400:
            return httpx.Response(200, text=self.dcgm or "")
        if request.url.path == "/metrics":
            return httpx.Response(200, text=exposition(self.success, self.success))
        if request.url.path == f"/v2/models/{M}/stats":
            return httpx.Response(200, json=stats_body(self.success, self.success * 2))
        if request.url.path == f"/v2/models/{M}/config" and self.instances is not None:
            return httpx.Response(200, json={"name": M, "instance_group": [
                {"kind": "KIND_CPU", "count": self.instances, "gpus": []}]})
        return httpx.Response(404, json={"error": "not found"})


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def source(fake: FakeTriton, clock: FakeClock, **kwargs: Any) -> TritonSource:
    client = httpx.AsyncClient(transport=httpx.MockTransport(fake.handler))
    return TritonSource("127.0.0.1:8000", M, client=client, clock=clock, **kwargs)


async def test_first_poll_is_a_baseline_then_windows() -> None:
    fake, clock = FakeTriton(), FakeClock()
    src = source(fake, clock)
    assert src.metrics_url == "http://127.0.0.1:8002/metrics"
    assert await src.poll() is None
    fake.success, clock.t = 50, 1002.0
    w = await src.poll()
    assert w is not None and not w.stale
    assert (w.start_s, w.end_s) == (1000.0, 1002.0)
    assert w.success_rps == 25.0 and w.mean_batch_size == 2.0 and w.mean_queue_ms == 1.0
    assert w.batch_curve_ms == {2: 4.0}
    # 50 executions of 4 ms in 2 s serving 100 items: 2 ms of device time per item,
    # 0.1 instances busy on average, out of the 2 the config lists.
    assert w.device_ms_per_request == pytest.approx(2.0)
    assert w.busy_instances == pytest.approx(0.1)
    assert (w.instance_count, w.busy_share) == (2, pytest.approx(0.05))
    assert sorted(set(fake.seen)) == ["/metrics", f"/v2/models/{M}/config", f"/v2/models/{M}/stats"]


async def test_a_window_across_a_step_of_the_wall_clock_is_stale() -> None:
    """The monotonic clock read beside the wall clock: 1 s passed, the wall clock says 13.3 s
    (a virtual machine paused, then resynced). The next window is good again."""
    fake, clock, mono = FakeTriton(), FakeClock(), FakeClock(500.0)
    src = source(fake, clock, monotonic=mono)
    assert await src.poll() is None
    fake.success, clock.t, mono.t = 50, 1013.3, 501.0
    w = await src.poll()
    assert w is not None and w.stale and w.stale_reason == "bad_interval"
    assert "the wall clock moved 13.300 s" in (w.stale_detail or "")
    fake.success, clock.t, mono.t = 80, 1014.3, 502.0
    w = await src.poll()
    assert w is not None and not w.stale and w.success_rps == 30.0
    # an injected wall clock alone reads no monotonic one: nothing to compare it with
    assert source(fake, clock).monotonic is None
    assert TritonSource("127.0.0.1:8000", M).monotonic is time.monotonic


async def test_an_unreadable_config_leaves_the_busy_share_unknown_and_the_window_good() -> None:
    fake, clock = FakeTriton(), FakeClock()
    fake.instances = None  # /config answers 404
    src = source(fake, clock)
    await src.poll()
    fake.success, clock.t = 50, 1002.0
    w = await src.poll()
    assert w is not None and not w.stale
    assert w.busy_instances == pytest.approx(0.1)
    assert (w.instance_count, w.busy_share) == (None, None)


def _refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


def _timeout(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("timed out", request=request)


@pytest.mark.parametrize(
    ("fail", "reason", "words"),
    [
        (_refused, "unreachable", "cannot reach"),
        (_timeout, "unreachable", "did not answer within"),
        (lambda r: httpx.Response(503, text="unavailable"), "unreachable", "HTTP 503"),
        (lambda r: httpx.Response(400, json={"error": "requested model 'm' is not available"}),
         "missing_series", "not available"),
        (lambda r: httpx.Response(200, text="{not exposition"), "malformed", "not valid"),
    ],
)
async def test_read_failures_are_scrape_errors(fail: Any, reason: str, words: str) -> None:
    fake, clock = FakeTriton(), FakeClock()
    src = source(fake, clock)
    fake.fail = fail
    with pytest.raises(ScrapeError) as info:
        await src.poll()
    assert info.value.reason == reason
    assert words in str(info.value)
    assert "\n" not in str(info.value)


async def test_stats_body_not_json() -> None:
    fake, clock = FakeTriton(), FakeClock()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/stats"):
            return httpx.Response(200, text="<html>")
        return fake.handler(request)

    src = TritonSource("127.0.0.1:8000", M, clock=clock,
                       client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    with pytest.raises(ScrapeError) as info:
        await src.poll()
    assert info.value.reason == "malformed"


async def test_a_failed_read_keeps_the_previous_sample() -> None:
    fake, clock = FakeTriton(), FakeClock()
    src = source(fake, clock)
    await src.poll()
    fake.fail, clock.t = _refused, 1001.0
    with pytest.raises(ScrapeError):
        await src.poll()
    fake.fail, fake.success, clock.t = None, 30, 1003.0
    w = await src.poll()
    assert w is not None and (w.start_s, w.interval_s, w.success_rps) == (1000.0, 3.0, 10.0)


async def test_max_age() -> None:
    fake = FakeTriton()
    # clock reads: sample 1 (two), sample 2 (two), then the age check 4 s after sample 2
    times = iter([0.0, 0.0, 5.0, 5.0, 9.0])
    src = source(fake, FakeClock(), max_age_s=3.0)
    src.clock = lambda: next(times)
    await src.poll()
    fake.success = 10
    w = await src.poll()
    assert w is not None and w.stale and w.stale_reason == "too_old"


async def test_utilization_from_a_dcgm_exporter() -> None:
    fake, clock = FakeTriton(), FakeClock()
    fake.dcgm = 'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 30\nDCGM_FI_DEV_GPU_UTIL{gpu="1"} 50\n'
    src = source(fake, clock, utilization_url="http://127.0.0.1:9400/metrics")
    await src.poll()
    fake.success, clock.t = 10, 1001.0
    w = await src.poll()
    assert w is not None and w.utilization == pytest.approx(0.4)


@pytest.mark.parametrize(
    ("dcgm", "reason", "words"),
    [
        (None, "unreachable", "dcgm-exporter"),  # the exporter is down: it answers 503
        ("nv_other 1\n", "missing_series", "without DCGM_FI_DEV_GPU_UTIL"),
        ("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 250\n", "missing_series", "outside 0-100"),
        ("DCGM_FI_DEV_GPU_UTIL{gpu= 3\n", "malformed", "9400/metrics: not valid"),
    ],
)
async def test_a_dcgm_exporter_that_fails_takes_the_utilization_out_not_the_window(
    dcgm: str | None, reason: str, words: str
) -> None:
    """A device exporter that is down or broken: the utilisation is absent, with the reason,
    never zero; the model's own signals in the same window stay good."""
    fake, clock = FakeTriton(), FakeClock()
    fake.dcgm = 'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 30\n'
    src = source(fake, clock, utilization_url="http://127.0.0.1:9400/metrics")
    await src.poll()
    fake.success, clock.t = 10, 1001.0
    inner = fake.handler

    def broken(request: httpx.Request) -> httpx.Response:
        if request.url.port == 9400 and dcgm is None:
            return httpx.Response(503, text="dcgm-exporter: no GPU")
        if request.url.port == 9400:
            return httpx.Response(200, text=dcgm)
        return inner(request)

    src._client = httpx.AsyncClient(transport=httpx.MockTransport(broken))
    w = await src.poll()
    assert w is not None and not w.stale and w.success_rps == pytest.approx(10.0)
    assert w.utilization is None
    assert w.utilization_detail is not None and w.utilization_detail.startswith(f"{reason}: ")
    assert words in w.utilization_detail and "\n" not in w.utilization_detail
    again = Window.from_dict(w.to_dict())
    assert again.utilization_detail == w.utilization_detail


async def test_without_batch_stats_only_metrics_is_read() -> None:
    fake, clock = FakeTriton(), FakeClock()
    src = source(fake, clock, batch_stats=False)
    await src.poll()
    fake.success, clock.t = 10, 1001.0
    w = await src.poll()
    assert w is not None and not w.stale and w.batch_curve_ms == {}
    assert set(fake.seen) == {"/metrics"}


# -- the polling loop ----------------------------------------------------------------------


class FakeTime:
    """Monotonic time that only moves when the loop sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


async def test_windows_turns_later_failures_into_stale_windows() -> None:
    fake, clock, t = FakeTriton(), FakeClock(), FakeTime()
    src = source(fake, clock)
    # what each poll after the first meets: good, refused, malformed, good
    script: list[Any] = [None, _refused, lambda r: httpx.Response(200, text="x{"), None]

    async def sleep(seconds: float) -> None:
        await t.sleep(seconds)
        clock.t += seconds
        fake.success += 10
        fake.fail = script.pop(0)

    got = [w async for w in windows(src, 1.0, count=4, monotonic=t.monotonic, sleep=sleep)]
    assert [w.stale_reason for w in got] == [None, "unreachable", "malformed", None]
    assert got[1].stale_detail and "Connection refused" in got[1].stale_detail
    assert [w.end_s for w in got] == [1001.0, 1002.0, 1003.0, 1004.0]
    # the last good window spans the two failed reads, from the last good sample
    assert (got[3].start_s, got[3].success_rps) == (1001.0, 10.0)
    assert t.sleeps == [1.0] * 4


async def test_windows_raises_on_a_first_failure() -> None:
    fake, t = FakeTriton(), FakeTime()
    fake.fail = _refused
    with pytest.raises(ScrapeError):
        async for _ in windows(source(fake, FakeClock()), 1.0, monotonic=t.monotonic,
                               sleep=t.sleep):
            pass


async def test_windows_pace_skips_missed_ticks() -> None:
    fake, clock, t = FakeTriton(), FakeClock(), FakeTime()
    src = source(fake, clock)
    slow = src.poll

    async def poll() -> Any:
        t.now += 2.5  # a scrape slower than the interval
        return await slow()

    src.poll = poll  # type: ignore[method-assign]
    async for _ in windows(src, 1.0, count=2, monotonic=t.monotonic, sleep=t.sleep):
        clock.t += 3.0
        fake.success += 1
    # each poll ends past the next tick: wait for the tick after, never a burst
    assert t.sleeps == pytest.approx([0.5, 0.5])


@pytest.mark.parametrize(("interval", "count"), [(0, None), (-1, None), (1, 0), (1, True)])
async def test_windows_bad_arguments(interval: float, count: Any) -> None:
    with pytest.raises(ConfigError):
        async for _ in windows(source(FakeTriton(), FakeClock()), interval, count=count):
            pass


# -- Prometheus ----------------------------------------------------------------------------


def prometheus_handler(request: httpx.Request, now_s: float = 1000.2) -> httpx.Response:
    query = request.url.params["query"]
    assert request.url.path == "/api/v1/query"
    if query == NOW_QUERY:  # Prometheus's own time: asked at its now
        assert "time" not in request.url.params
        return httpx.Response(200, json={"status": "success", "data": {
            "resultType": "vector", "result": [{"metric": {}, "value": [now_s, str(now_s)]}]}})
    assert request.url.params["time"] == "1000.000"
    value = {
        "rate(nv_inference_request_success": 40, "rate(nv_inference_count": 80,
        "rate(nv_inference_exec_count": 20, "rate(nv_inference_queue_duration_us": 80_000,
        "rate(nv_inference_compute_infer_duration_us": 200_000,
        "rate(nv_inference_request_duration_us": 400_000, "resets(": 0,
        "timestamp(": 999.0, "delta(": 0, "(nv_inference_pending_request_count": 1,
    }
    for needle, v in value.items():
        if needle in query:
            result = [{"metric": {"model": M}, "value": [1000.0, str(v)]}]
            break
    else:
        result = []
    return httpx.Response(200, json={"status": "success",
                                     "data": {"resultType": "vector", "result": result}})


async def test_prometheus_source() -> None:
    client = httpx.AsyncClient(transport=httpx.MockTransport(prometheus_handler))
    src = PrometheusSource("http://prom:9090/", M, range_s=10, client=client, clock=lambda: 1000.0)
    w = await src.poll()
    assert not w.stale and w.source == "prometheus"
    assert (w.start_s, w.end_s) == (989.0, 999.0)
    assert (w.success_rps, w.mean_batch_size, w.mean_queue_ms, w.mean_compute_ms) == (40, 4, 2, 5)
    assert w.pending_requests == 1 and w.p95_ms is None and w.utilization is None


@pytest.mark.parametrize(
    ("response", "error", "words"),
    [
        (httpx.Response(400, json={"status": "error", "errorType": "bad_data",
                                   "error": "parse error at char 5"}), ConfigError, "selector"),
        (httpx.Response(503, text="Service Unavailable"), ScrapeError, "without a JSON body"),
        (httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix",
                                                                 "result": []}}),
         ScrapeError, "instant vector"),
        (httpx.Response(422, json={"status": "error", "errorType": "execution",
                                   "error": "query timed out"}), ScrapeError, "timed out"),
    ],
)
async def test_prometheus_errors(response: httpx.Response, error: type, words: str) -> None:
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: response))
    src = PrometheusSource("prom:9090", M, selector="job=", client=client)
    with pytest.raises(error) as info:
        await src.poll()
    assert words in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("prom_now_s", "stale"),
    [
        (1000.2, False),
        (1001.9, False),   # within 2 s of the clock
        (998.5, False),
        (4600.0, True),    # this clock stepped back an hour: the queries would read the past
        (995.0, True),     # Prometheus's clock 5 s behind
    ],
)
async def test_prometheus_clock_skew_is_a_bad_interval(prom_now_s: float, stale: bool) -> None:
    client = httpx.AsyncClient(transport=httpx.MockTransport(
        lambda r: prometheus_handler(r, now_s=prom_now_s)))
    src = PrometheusSource("prom:9090", M, range_s=10, client=client, clock=lambda: 1000.0)
    w = await src.poll()
    assert w.stale is stale
    if stale:
        assert w.stale_reason == "bad_interval" and "stepped" in (w.stale_detail or "")
        assert "http://prom:9090" in (w.stale_detail or "")


async def test_prometheus_without_the_skew_check_asks_no_time() -> None:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.params["query"])
        return prometheus_handler(request, now_s=4600.0)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    src = PrometheusSource("prom:9090", M, range_s=10, client=client, clock=lambda: 1000.0,
                           max_skew_s=None)
    w = await src.poll()
    assert not w.stale and NOW_QUERY not in asked and len(asked) == len(src.promql.queries())


@pytest.mark.parametrize(
    ("now", "asked", "answered", "skewed"),
    [
        ([{"metric": {}, "value": [10.0, "10.0"]}], 10.0, 10.1, False),
        ([{"metric": {}, "value": [14.0, "14.0"]}], 10.0, 13.0, False),  # a slow answer
        ([{"metric": {}, "value": [15.5, "15.5"]}], 10.0, 13.0, True),
        ([{"metric": {}, "value": [7.5, "7.5"]}], 10.0, 10.1, True),
    ],
)
def test_clock_skew_table(now: list[dict[str, Any]], asked: float, answered: float,
                          skewed: bool) -> None:
    assert (clock_skew(now, asked, answered, 2.0) is not None) is skewed


@pytest.mark.parametrize("now", [[], [{"metric": {}, "value": [1.0, "NaN"]}],
                                 [{"metric": {}, "value": [1.0, "x"]}]])
def test_clock_skew_malformed(now: list[dict[str, Any]]) -> None:
    with pytest.raises(ScrapeError) as info:
        clock_skew(now, 1.0, 1.0, 2.0)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_prometheus_bad_skew_tolerance(bad: float) -> None:
    with pytest.raises(ConfigError) as info:
        PrometheusSource("prom:9090", M, max_skew_s=bad)
    assert str(info.value).startswith("max_skew_s")


async def test_prometheus_stale_scrape_is_too_old() -> None:
    client = httpx.AsyncClient(transport=httpx.MockTransport(prometheus_handler))
    src = PrometheusSource("prom:9090", M, range_s=10, client=client, clock=lambda: 1000.0,
                           max_age_s=0.5)
    w = await src.poll()  # newest scrape at 999.0, 1 s before now
    assert w.stale and w.stale_reason == "too_old"


# -- make_source (the CLI's options) -------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"source": "kafka"}, "source"),
        ({"url": "ftp://x"}, "url"),
        ({"url": ""}, "url"),
        ({"metrics_url": "ftp://x:1/metrics"}, "metrics_url"),
        ({"selector": 'job="x"'}, "selector"),
        ({"range_s": 10.0}, "range"),
        ({"source": "prometheus", "metrics_url": "x:1"}, "metrics_url"),
        ({"source": "prometheus", "range_s": -1.0}, "range"),
        ({"max_age_s": 0.0}, "max_age"),
    ],
)
def test_make_source_bad_input_names_the_flag(kwargs: dict[str, Any], flag: str) -> None:
    args = {"source": "triton", "url": "127.0.0.1:8000", "model": M, **kwargs}
    with pytest.raises(ConfigError) as info:
        make_source(args.pop("source"), args.pop("url"), args.pop("model"), **args)
    assert str(info.value).startswith(flag) and "\n" not in str(info.value)


def test_make_source() -> None:
    t = make_source("triton", "localhost:18000", M, metrics_url="localhost:18002/metrics")
    assert isinstance(t, TritonSource) and t.stats_url == "http://localhost:18000/v2/models/m/stats"
    p = make_source("prometheus", "localhost:9090", M, selector='job="t"', range_s=5)
    assert isinstance(p, PrometheusSource) and p.promql.range_s == 5


def test_json_is_not_used_as_metrics() -> None:
    # the JSON Triton serves on its HTTP port is not exposition text
    from autobatch.signals import parse_metrics

    with pytest.raises(ScrapeError):
        parse_metrics(json.dumps({"name": "triton", "version": "2.51.0"}), M)
