"""The direct source: one Triton's ``/metrics`` and ``/v2/models/M/stats``, differenced.

:func:`window_between` is the pure core: two :class:`TritonSample` in, one
:class:`~autobatch.signals.window.Window` out. :class:`TritonSource` is the
edge: it reads both endpoints concurrently (and a dcgm-exporter, if given)
through an injected ``httpx.AsyncClient`` and clock, and keeps the previous
sample.

What Triton 2.51 does to the counters, seen on the embedded server
(the integration test test_signals_triton.py checks it):

* **server restart**: every counter on both endpoints starts again from 0 and
  the summary quantiles read NaN until the first request.
* **unload, then load**: the model's ``/metrics`` series disappear a few
  seconds after the unload and come back at 0; ``/stats`` restarts at 0.
* **load with a config override of a READY model** (a profile switch): the
  ``/metrics`` counters carry on (Triton keeps one metric reporter per model
  name and version), but ``/stats``, ``batch_stats`` included, restarts at 0.
  An ``instance_group``-only change, applied in place, resets nothing.

So a window is a counter reset (stale) when any counter on either endpoint
went down, or when the gap between the two endpoints' execution counts moved:
that is how a reload shows up even after the new copy has caught up with the
old count.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from autobatch.access import RestrictedApi, http_headers, refusal
from autobatch.config import URL_RULE, http_url
from autobatch.curve import BatchCurve
from autobatch.errors import ConfigError, ScrapeError
from autobatch.signals.http import DEFAULT_MAX_BYTES, Body, get_bounded
from autobatch.signals.parse import (
    COUNTERS,
    DCGM_GPU_UTIL,
    MetricsSample,
    StatsSample,
    curve_from_batch_stats,
    parse_instance_count,
    parse_metrics,
    parse_stats,
    parse_utilization,
)
from autobatch.signals.stretch import DeviceView, device_view
from autobatch.signals.window import StaleReason, Window

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "TritonSample",
    "TritonSource",
    "normalize_url",
    "window_between",
]

DEFAULT_TIMEOUT_S = 2.0
"""Per-request timeout of a scrape. Triton answers /metrics in milliseconds; a
scrape slower than this is a sign of trouble, and the window is better stale."""

CLOCK_STEP_TOLERANCE_S = 0.25
CLOCK_STEP_TOLERANCE_RATIO = 0.05
"""How far the wall clock's time between two samples may differ from the monotonic clock's
before the window counts as spanning a clock step: NTP slews at most 500 ppm; a step or a
paused machine moves it by whole seconds."""

_OFFSET_TOLERANCE_EXECS = 2.0
_OFFSET_TOLERANCE_RATIO = 0.05
"""How far the gap between the two endpoints' execution counts may move within
a window without calling it a reload. The two reads run concurrently but not
atomically, so a few executions may land between them; on top of this, what the
window's execution rate runs in the time each sample's reads took
(:attr:`TritonSample.span_s`)."""


@dataclass(frozen=True)
class TritonSample:
    """Both endpoints of one Triton, read at (about) the same time."""

    taken_s: float
    """Wall-clock time of the read (the midpoint of the requests)."""
    metrics: MetricsSample
    stats: StatsSample | None = None
    """None when the source does not read ``/v2/models/M/stats``."""
    utilization: float | None = None
    """Accelerator utilisation 0..1 from wherever the source reads it, or None."""
    utilization_detail: str | None = None
    """Why the utilisation is None when a dcgm-exporter URL was given (``Window.utilization_detail``)."""
    instance_count: int | None = None
    """The model's execution instances from ``/v2/models/M/config``, or None."""
    span_s: float = 0.0
    """How long the concurrent reads took, first request out to last answer: Triton
    answers ``/metrics`` and ``/stats`` at moments up to this far apart, and a busy
    server runs executions in between (seconds on a loaded machine)."""
    monotonic_s: float | None = None
    """The monotonic clock at the read (None: not read): a window whose wall-clock length
    differs from the monotonic one spans a clock step."""

    @property
    def model(self) -> str:
        return self.metrics.model


def _stale(before: TritonSample, after: TritonSample, reason: StaleReason, detail: str) -> Window:
    return Window(
        model=after.model,
        start_s=before.taken_s,
        end_s=after.taken_s,
        stale=True,
        stale_reason=reason.value,
        stale_detail=detail,
        source="triton",
    )


def _clock_step(before: TritonSample, after: TritonSample) -> str | None:
    """What the wall clock did between the samples if it did not keep time with the monotonic
    clock (an NTP step, a virtual machine paused and resumed), else None."""
    if before.monotonic_s is None or after.monotonic_s is None:
        return None
    wall, mono = after.taken_s - before.taken_s, after.monotonic_s - before.monotonic_s
    if abs(wall - mono) <= max(CLOCK_STEP_TOLERANCE_S, CLOCK_STEP_TOLERANCE_RATIO * abs(mono)):
        return None
    return (f"the wall clock moved {wall:.3f} s between the samples while the monotonic clock moved "
            f"{mono:.3f} s: it stepped, or the machine paused; the rates would divide by the wrong time")


def _check(before: TritonSample, after: TritonSample) -> tuple[StaleReason, str] | None:
    """Why this pair cannot be differenced, or None."""
    if not after.taken_s > before.taken_s:
        return (
            StaleReason.BAD_INTERVAL,
            f"samples out of order ({before.taken_s:.3f} s then {after.taken_s:.3f} s): "
            "the wall clock stepped back",
        )
    step = _clock_step(before, after)
    if step is not None:
        return StaleReason.BAD_INTERVAL, step
    m0, m1 = before.metrics, after.metrics
    for label, sample in (("earlier", m0), ("later", m1)):
        missing = [n for n in COUNTERS if n not in sample.counters]
        if sample.pending is None:
            missing.append("nv_inference_pending_request_count")
        if missing:
            return (
                StaleReason.MISSING_SERIES,
                f"the {label} scrape has no {', '.join(missing)} for model {sample.model!r} "
                "(unloaded, loading, or a partial scrape)",
            )
    if set(m0.failures) != set(m1.failures):
        return (
            StaleReason.MISSING_SERIES,
            f"failure reasons changed between scrapes ({sorted(m0.failures)} -> "
            f"{sorted(m1.failures)}): a partial scrape",
        )
    values: dict[str, tuple[float, float]] = {n: (m0.counters[n], m1.counters[n]) for n in COUNTERS}
    values.update(
        {f"nv_inference_request_failure{{reason={r}}}": (m0.failures[r], m1.failures[r])
         for r in m1.failures}
    )
    for name, pair in values.items():
        if not all(math.isfinite(v) for v in pair):
            return StaleReason.NOT_FINITE, f"{name} read {pair[0]!r} then {pair[1]!r}"
    pending = (m0.pending, m1.pending)
    if not all(v is not None and math.isfinite(v) for v in pending):
        return StaleReason.NOT_FINITE, f"nv_inference_pending_request_count read {pending}"
    gauges = {"nv_inference_pending_request_count": (float(m0.pending), float(m1.pending))}
    for name, (v0, v1) in {**values, **gauges}.items():
        if v0 < 0 or v1 < 0:
            return StaleReason.MALFORMED, f"{name} read {v0:g} then {v1:g}; it cannot be negative"
    for name, (v0, v1) in values.items():
        if v1 < v0:
            return (
                StaleReason.COUNTER_RESET,
                f"{name} fell from {v0:g} to {v1:g}: the server restarted or the model "
                "was reloaded",
            )
    s0, s1 = before.stats, after.stats
    if s0 is not None and s1 is not None:
        pairs = {
            "execution_count": (s0.execution_count, s1.execution_count),
            "inference_count": (s0.inference_count, s1.inference_count),
        }
        rows0 = {b: c for b, c, _ in s0.batch_stats}
        for b, c, _ in s1.batch_stats:
            pairs[f"batch_stats[{b}].count"] = (rows0.get(b, 0), c)
        for b in set(rows0) - {b for b, _, _ in s1.batch_stats}:
            pairs[f"batch_stats[{b}].count"] = (rows0[b], 0)
        for name, (v0, v1) in pairs.items():
            if v1 < v0:
                return (
                    StaleReason.COUNTER_RESET,
                    f"/stats {name} fell from {v0} to {v1}: the model was reloaded",
                )
        exec0 = m0.counters["nv_inference_exec_count"]
        exec1 = m1.counters["nv_inference_exec_count"]
        moved = (s1.execution_count - exec1) - (s0.execution_count - exec0)
        # Executions the window's rate runs while each sample's two reads are in flight.
        between = (exec1 - exec0) / (after.taken_s - before.taken_s) * (before.span_s + after.span_s)
        tolerance = max(_OFFSET_TOLERANCE_EXECS, _OFFSET_TOLERANCE_RATIO * (exec1 - exec0)) + between
        if abs(moved) > tolerance:
            return (
                StaleReason.COUNTER_RESET,
                f"/stats and /metrics execution counts drifted apart by {moved:g} within the "
                f"window (more than {tolerance:.1f}): the model was reloaded (its /stats restarted)",
            )
    return None


def window_between(before: TritonSample, after: TritonSample, curve: BatchCurve | None = None) -> Window:
    """The window from ``before`` to ``after`` (same model), stale if it cannot be trusted;
    ``curve``: the reference batch curve its stretch is measured against."""
    if before.model != after.model:
        raise ValueError(f"samples of different models: {before.model!r} and {after.model!r}")
    problem = _check(before, after)
    if problem is not None:
        return _stale(before, after, *problem)
    window = _difference(before, after, curve)
    overflow = [name for name, v in _numbers(window) if not math.isfinite(v)]
    if overflow:
        # Finite counters can still overflow a float when divided by a tiny interval.
        return _stale(before, after, StaleReason.NOT_FINITE,
                      f"{', '.join(overflow)} came out infinite: the values or the interval are "
                      "out of range")
    return window


def _numbers(w: Window) -> list[tuple[str, float]]:
    out = [(name, getattr(w, name)) for name in (
        "success_rps", "inference_rps", "exec_rps", "mean_batch_size", "mean_queue_ms",
        "mean_compute_ms", "mean_request_ms", "pending_requests", "pending_delta", "p95_ms",
        "p99_ms", "utilization", "device_ms_per_request", "busy_instances", "busy_share", "stretch",
        "own_device_share", "others_share")]
    out += [(f"failure_rps[{r}]", v) for r, v in w.failure_rps.items()]
    out += [(f"batch_curve_ms[{b}]", v) for b, v in w.batch_curve_ms.items()]
    return [(n, v) for n, v in out if v is not None]


def _difference(before: TritonSample, after: TritonSample, reference: BatchCurve | None) -> Window:
    dt = after.taken_s - before.taken_s
    c0, c1 = before.metrics.counters, after.metrics.counters

    def d(name: str) -> float:
        return c1[name] - c0[name]

    success = d("nv_inference_request_success")
    execs = d("nv_inference_exec_count")

    def per_request_ms(name: str) -> float | None:
        # Triton adds these durations only for successful requests.
        return d(name) / success / 1000.0 if success > 0 else None

    curve: Mapping[int, float] = {}
    device_ms: float | None = None
    busy: float | None = None
    view = DeviceView(None, None, None)
    if before.stats is not None and after.stats is not None:
        live = curve_from_batch_stats(
            after.stats.batch_stats_rows(), before.stats.batch_stats_rows()
        )
        curve = dict(live.points) if live is not None else {}
        infer_ns = sum(ns for _, _, ns in after.stats.batch_stats) - sum(
            ns for _, _, ns in before.stats.batch_stats
        )
        items = after.stats.inference_count - before.stats.inference_count
        device_ms = infer_ns / items / 1e6 if items > 0 and infer_ns >= 0 else None
        busy = max(0, after.stats.busy_ns - before.stats.busy_ns) / 1e9 / dt
        view = device_view(_executions(before.stats, after.stats), dt, reference, after.utilization)
    pending0 = before.metrics.pending
    pending1 = after.metrics.pending
    assert pending0 is not None and pending1 is not None  # checked in _check
    return Window(
        model=after.model,
        start_s=before.taken_s,
        end_s=after.taken_s,
        success_rps=success / dt,
        failure_rps={
            r: (after.metrics.failures[r] - before.metrics.failures[r]) / dt
            for r in sorted(after.metrics.failures)
        },
        inference_rps=d("nv_inference_count") / dt,
        exec_rps=execs / dt,
        mean_batch_size=d("nv_inference_count") / execs if execs > 0 else None,
        mean_queue_ms=per_request_ms("nv_inference_queue_duration_us"),
        mean_compute_ms=per_request_ms("nv_inference_compute_infer_duration_us"),
        mean_request_ms=per_request_ms("nv_inference_request_duration_us"),
        pending_requests=pending1,
        pending_delta=pending1 - pending0,
        p95_ms=None if after.metrics.p95_us is None else after.metrics.p95_us / 1000.0,
        p99_ms=None if after.metrics.p99_us is None else after.metrics.p99_us / 1000.0,
        batch_curve_ms=curve,
        utilization=after.utilization,
        utilization_detail=after.utilization_detail,
        device_ms_per_request=device_ms,
        busy_instances=busy,
        stretch=view.stretch,
        own_device_share=view.own_device_share,
        others_share=view.others_share,
        source="triton",
    ).with_instance_count(after.instance_count)


def _executions(before: StatsSample, after: StatsSample) -> list[tuple[float, float, float]]:
    """``(batch size, executions, compute ms)`` of the executions between two samples."""
    then = {b: (c, ns) for b, c, ns in before.batch_stats}
    out = []
    for b, c, ns in after.batch_stats:
        c0, ns0 = then.get(b, (0, 0))
        if c > c0:
            out.append((float(b), float(c - c0), max(0, ns - ns0) / 1e6))
    return out


def normalize_url(url: str, field: str) -> str:
    """``host:port`` or ``http(s)://host:port[/path]``, without a trailing slash."""
    u = http_url(url)
    if u is None:
        raise ConfigError(f"{field} = {url!r}: {URL_RULE}", field=field, value=url)
    return u


def _default_metrics_url(http_url: str) -> str:
    # Triton's default metrics port; a server started with other ports needs --metrics-url.
    return str(httpx.URL(http_url).copy_with(port=8002, path="/metrics"))


async def fetch(
    client: httpx.AsyncClient, url: str, timeout_s: float, what: str, *, max_bytes: int = DEFAULT_MAX_BYTES,
    restricted_api: RestrictedApi | None = None,
) -> Body:
    """GET ``url`` within ``timeout_s`` and ``max_bytes`` (:func:`get_bounded`); every
    failure to get a 200 becomes a :class:`ScrapeError` naming it. ``restricted_api``:
    the key Triton's restricted APIs (statistics, model-config) expect, sent as a header;
    a refusal for want of it names the setting (reason ``forbidden``)."""
    r = await get_bounded(client, url, timeout_s=timeout_s, max_bytes=max_bytes, what=what,
                          headers=http_headers(restricted_api))
    if r.status != 200:
        text = r.excerpt()
        refused = refusal(f"the read of {url}", text, restricted_api) if r.status == 403 else None
        if refused is not None:
            raise ScrapeError(refused, reason="forbidden", url=url)
        reason = "missing_series" if r.status in (400, 404) and "model" in text else "unreachable"
        raise ScrapeError(f"{what} at {url} answered HTTP {r.status}: {text}", reason=reason, url=url)
    return r


class TritonSource:
    """Windows of one model, read straight from one Triton server.

    >>> async with TritonSource("127.0.0.1:8000", "dense_mlp") as source:  # doctest: +SKIP
    ...     await source.poll()          # first sample: None
    ...     window = await source.poll() # the window since the first sample

    Args:
        url: Triton's HTTP endpoint (``/v2/models/M/stats``).
        model: the model; its versions are summed.
        metrics_url: Triton's ``/metrics``; default: ``url``'s host on port 8002.
        utilization_url: a dcgm-exporter ``/metrics`` for ``DCGM_FI_DEV_GPU_UTIL``;
            default: read ``nv_gpu_utilization`` from Triton's own metrics.
        version: only this model version (default: all, summed).
        batch_stats: read ``/v2/models/M/stats`` for the live batch curve and the
            reload check; False reads ``/metrics`` only (no curve, and an
            override reload is then invisible).
        client: the HTTP client (default: one owned by the source).
        clock: wall-clock seconds; windows are stamped with it.
        monotonic: a monotonic clock read beside it, to tell a window that spans a step of
            the wall clock (stale, ``bad_interval``); default: ``time.monotonic`` with the
            default wall clock, none with an injected one.
        timeout_s: per-request timeout.
        max_age_s: a window whose newest data is older than this when built is
            stale (``too_old``); None turns the check off.
        max_bytes: the most a single response may send (``too_large`` past it).
        restricted_api: the header and key of Triton's restricted APIs, sent with the
            ``/stats`` and ``/config`` reads (never to ``/metrics`` or dcgm-exporter,
            which do not check it); None sends no key.
        curve: the model's batch curve with the device to itself (``policy.curve``): each
            window's ``stretch`` and device shares are measured against it (None: not).
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        metrics_url: str | None = None,
        utilization_url: str | None = None,
        version: str | None = None,
        batch_stats: bool = True,
        client: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_age_s: float | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        restricted_api: RestrictedApi | None = None,
        curve: BatchCurve | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigError(f"model = {model!r}: must be a model name", field="model", value=model)
        if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
            raise ConfigError(f"timeout_s = {timeout_s!r}: must be a number > 0",
                              field="timeout_s", value=timeout_s)
        if max_age_s is not None and not (math.isfinite(max_age_s) and max_age_s > 0):
            raise ConfigError(f"max_age_s = {max_age_s!r}: must be a number > 0 (or None for off)",
                              field="max_age_s", value=max_age_s)
        self.url = normalize_url(url, "url")
        self.metrics_url = (
            normalize_url(metrics_url, "metrics_url") if metrics_url
            else _default_metrics_url(self.url)
        )
        self.utilization_url = (
            normalize_url(utilization_url, "utilization_url") if utilization_url else None
        )
        self.model = model
        self.version = version
        self.batch_stats = batch_stats
        self.clock = clock
        self.monotonic = (monotonic if monotonic is not None
                          else time.monotonic if clock is time.time else None)
        self.timeout_s = float(timeout_s)
        self.max_age_s = max_age_s
        self.max_bytes = int(max_bytes)
        self.restricted_api = restricted_api
        self.curve = curve
        self._client = client
        self._owns_client = client is None
        self._previous: TritonSample | None = None

    @property
    def stats_url(self) -> str:
        base = f"{self.url}/v2/models/{self.model}"
        if self.version is not None:
            base += f"/versions/{self.version}"
        return base + "/stats"

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient()
        return self._client

    async def sample(self) -> TritonSample:
        """Read every endpoint once, concurrently. Raises :class:`ScrapeError`.

        The bodies are parsed in a worker thread: a large ``/metrics`` takes a
        while, and the event loop (``/healthz``) must not wait for it.
        """
        client = self._http()
        t0 = self.clock()
        m0 = self.monotonic() if self.monotonic is not None else None
        jobs: list[Any] = [self._fetch(client, self.metrics_url, "Triton metrics")]
        if self.batch_stats:
            jobs.append(self._fetch(client, self.stats_url, "Triton model statistics", restricted=True))
            jobs.append(self._instance_count(client))
        if self.utilization_url:
            jobs.append(self._fetch_utilization(client, self.utilization_url))
        responses = await asyncio.gather(*jobs)
        t1 = self.clock()
        m1 = self.monotonic() if self.monotonic is not None else None
        metrics, stats, (utilization, detail) = await asyncio.to_thread(self._parse, responses)
        instances = responses[2] if self.batch_stats else None
        return TritonSample(taken_s=(t0 + t1) / 2, metrics=metrics, stats=stats,
                            utilization=utilization, utilization_detail=detail,
                            instance_count=instances, span_s=t1 - t0,
                            monotonic_s=None if m0 is None or m1 is None else (m0 + m1) / 2)

    async def _fetch(
        self, client: httpx.AsyncClient, url: str, what: str, *, restricted: bool = False
    ) -> Body:
        """``restricted``: one of Triton's own API endpoints, which may need the key."""
        return await fetch(client, url, self.timeout_s, what, max_bytes=self.max_bytes,
                           restricted_api=self.restricted_api if restricted else None)

    async def _fetch_utilization(self, client: httpx.AsyncClient, url: str) -> Body | ScrapeError:
        """dcgm-exporter's /metrics, or the error reading it: a device exporter that is down
        takes the utilisation out of the window (with the reason), not the whole window."""
        try:
            return await self._fetch(client, url, "dcgm-exporter")
        except ScrapeError as exc:
            return exc

    def _utilization(self, response: Body | ScrapeError) -> tuple[float | None, str | None]:
        if isinstance(response, ScrapeError):
            return None, f"{response.reason}: {response}"
        url = self.utilization_url
        try:
            value = parse_utilization(response.text("dcgm-exporter"), source=url or "dcgm-exporter")
        except ScrapeError as exc:
            return None, f"{exc.reason}: {exc}"
        if value is None:
            return None, (f"{StaleReason.MISSING_SERIES.value}: {url} answered without "
                          f"{DCGM_GPU_UTIL} (or with a value outside 0-100)")
        return value, None

    def _parse(
        self, responses: list[Any]
    ) -> tuple[MetricsSample, StatsSample | None, tuple[float | None, str | None]]:
        metrics = parse_metrics(
            responses[0].text("Triton metrics"), self.model, version=self.version, source=self.metrics_url
        )
        stats = None
        if self.batch_stats:
            try:
                data = json.loads(responses[1].content)
            except (ValueError, RecursionError) as exc:
                raise ScrapeError(f"{self.stats_url}: the body is not JSON", reason="malformed",
                                  url=self.stats_url) from exc
            stats = parse_stats(data, self.model, version=self.version, source=self.stats_url)
        utilization: tuple[float | None, str | None] = (metrics.utilization, None)
        if self.utilization_url:
            utilization = self._utilization(responses[-1])
        return metrics, stats, utilization

    @property
    def config_url(self) -> str:
        base = f"{self.url}/v2/models/{self.model}"
        if self.version is not None:
            base += f"/versions/{self.version}"
        return base + "/config"

    async def _instance_count(self, client: httpx.AsyncClient) -> int | None:
        """The live instance count, read with every sample: an ``instance_group``-only
        change is applied in place and resets no counter, so nothing else would show it.
        A config that cannot be read leaves the busy share unknown; the window stays good."""
        try:
            r = await self._fetch(client, self.config_url, "Triton model config", restricted=True)
            return parse_instance_count(json.loads(r.content))
        except ScrapeError as exc:
            if exc.reason == "forbidden":
                raise  # a missing key is a setting to fix, not an unknown share
            return None
        except (ValueError, RecursionError):
            return None

    async def poll(self) -> Window | None:
        """Sample, and return the window since the previous good sample (None the first time).

        A failed read raises :class:`~autobatch.errors.ScrapeError` and keeps the previous sample,
        so the next window spans the gap. After a reset the new sample becomes
        the baseline: one window is lost, the next is good.
        """
        current = await self.sample()
        previous, self._previous = self._previous, current
        if previous is None:
            return None
        return window_between(previous, current, self.curve).aged(self.clock(), self.max_age_s)

    def reset(self) -> None:
        """Forget the previous sample (the next poll starts a new baseline)."""
        self._previous = None

    async def aclose(self) -> None:
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> TritonSource:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
