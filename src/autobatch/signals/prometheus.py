"""Fleet mode: the same :class:`~autobatch.signals.window.Window` from PromQL.

Prometheus scrapes every Triton replica; one instant query per signal, summed
by model across replicas (and versions), gives the fleet's window for one
model. The queries are built by :class:`PromQL` (pure), turned into a window by
:func:`window_from_results` (pure), and run by :class:`PrometheusSource`
against ``/api/v1/query`` through an injected ``httpx.AsyncClient``.

How the fleet window differs from the direct one (docs/signals.md, "Fleet
mode: Prometheus"):

* rates are ``rate(counter[range])``; a counter reset inside the range
  (``resets(...) > 0``) still marks the window stale, as the range then mixes
  two lives of a server;
* ``p95_ms``/``p99_ms`` are the **highest** replica's quantile: quantiles of
  different replicas cannot be added, and the worst one breaks the SLO;
* ``batch_curve_ms`` is empty (``batch_stats`` is not exported as metrics), so
  ``device_ms_per_request`` and ``busy_instances`` come from the per-request
  compute counters divided by the mean batch size (exact when the batches are
  of one size, a little high when they vary);
* ``end_s`` is the newest scraped sample's timestamp, so a stuck scrape shows
  up as an old window; ``start_s`` is ``end_s - range_s``;
* the queries are evaluated at the sidecar's wall clock, so each poll also asks
  Prometheus for its own time (``vector(time())``, no ``time`` parameter): a
  clock more than :data:`CLOCK_SKEW_TOLERANCE_S` off Prometheus's (stepped back
  an hour, a paused machine) would query the past and read it as fresh, and
  the window is stale (``bad_interval``) instead.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import httpx

from autobatch.curve import BatchCurve
from autobatch.errors import ConfigError, ScrapeError
from autobatch.signals.http import DEFAULT_MAX_BYTES, get_bounded
from autobatch.signals.stretch import device_view
from autobatch.signals.triton import DEFAULT_TIMEOUT_S, normalize_url
from autobatch.signals.window import StaleReason, Window

__all__ = ["CLOCK_SKEW_TOLERANCE_S", "PromQL", "PrometheusSource", "window_from_results"]

CLOCK_SKEW_TOLERANCE_S = 2.0
"""How far the sidecar's wall clock may read from Prometheus's (beyond the time the query
took) before a window counts as queried at the wrong time. NTP keeps two hosts within
milliseconds; a step or a paused virtual machine moves a clock by whole seconds."""

NOW_QUERY = "vector(time())"
"""Prometheus's own time, evaluated at its now (the query carries no ``time``)."""


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _duration(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


@dataclass(frozen=True)
class PromQL:
    """The PromQL of one model's window.

    ``selector`` is extra label matchers ANDed to every Triton series, e.g.
    ``job="triton",namespace="prod"``; ``utilization_selector`` picks the
    accelerator series (which carry no ``model`` label), by default the same
    ``selector``.
    """

    model: str
    selector: str = ""
    range_s: float = 30.0
    utilization_selector: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(f"model = {self.model!r}: must be a model name",
                              field="model", value=self.model)
        if not (isinstance(self.range_s, (int, float)) and math.isfinite(self.range_s)
                and self.range_s > 0):
            raise ConfigError(f"range_s = {self.range_s!r}: must be a number of seconds > 0",
                              field="range_s", value=self.range_s)
        for name in ("selector", "utilization_selector"):
            value = getattr(self, name)
            if value is not None and ("{" in value or "}" in value):
                raise ConfigError(
                    f"{name} = {value!r}: give label matchers without braces, "
                    'e.g. job="triton",namespace="prod"',
                    field=name,
                    value=value,
                )

    @property
    def matchers(self) -> str:
        own = f"model={_quote(self.model)}"
        extra = self.selector.strip().strip(",")
        return f"{own},{extra}" if extra else own

    def _series(self, name: str, more: str = "") -> str:
        return f"{name}{{{self.matchers}{more}}}"

    def queries(self) -> dict[str, str]:
        """Signal name -> instant query (evaluated at the window's end)."""
        r = _duration(self.range_s)

        def rate(name: str) -> str:
            return f"sum by (model) (rate({self._series(name)}[{r}]))"

        u = (self.selector if self.utilization_selector is None
             else self.utilization_selector).strip().strip(",")
        gpu = f"{{{u}}}" if u else ""
        p95 = self._series(SUMMARY, ',quantile="0.95"')
        p99 = self._series(SUMMARY, ',quantile="0.99"')
        return {
            "success": rate("nv_inference_request_success"),
            "failure": f"sum by (reason) (rate({self._series('nv_inference_request_failure')}[{r}]))",
            "count": rate("nv_inference_count"),
            "exec": rate("nv_inference_exec_count"),
            "queue_us": rate("nv_inference_queue_duration_us"),
            "compute_us": rate("nv_inference_compute_infer_duration_us"),
            "compute_input_us": rate("nv_inference_compute_input_duration_us"),
            "compute_output_us": rate("nv_inference_compute_output_duration_us"),
            "replicas": f"count by (model) ({self._series('nv_inference_exec_count')})",
            "request_us": rate("nv_inference_request_duration_us"),
            "pending": f"sum by (model) ({self._series('nv_inference_pending_request_count')})",
            "pending_delta": (
                f"sum by (model) (delta({self._series('nv_inference_pending_request_count')}[{r}]))"
            ),
            # `>= 0` drops the NaN an empty summary reads, so max sees only real quantiles.
            "p95_us": f"max by (model) ({p95} >= 0)",
            "p99_us": f"max by (model) ({p99} >= 0)",
            # resets() drops the metric name, so one regex over every counter would
            # collide; a restart resets them all, and these two are always exported.
            "resets": (
                f"sum by (model) (resets({self._series('nv_inference_exec_count')}[{r}])) + "
                f"sum by (model) (resets({self._series('nv_inference_request_success')}[{r}]))"
            ),
            "newest_s": f"max by (model) (timestamp({self._series('nv_inference_request_success')}))",
            "nv_gpu_util": f"avg(nv_gpu_utilization{gpu})",
            "dcgm_util": f"avg(DCGM_FI_DEV_GPU_UTIL{gpu}) / 100",
        }


SUMMARY = "nv_inference_request_summary_us"

Results = Mapping[str, list[Mapping[str, Any]]]
"""Signal name -> the ``data.result`` list of its instant query."""


def _values(result: list[Mapping[str, Any]], name: str) -> list[tuple[Mapping[str, str], float]]:
    out = []
    for item in result:
        try:
            labels = item.get("metric", {})
            value = float(item["value"][1])
        except (AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:
            raise ScrapeError(f"Prometheus result of {name!r} has an unexpected shape: {item!r:.200}",
                              reason="malformed") from exc
        out.append((labels, value))
    return out


def _one(results: Results, name: str) -> float | None:
    values = _values(list(results.get(name, [])), name)
    if not values:
        return None
    if len(values) > 1:
        raise ScrapeError(
            f"Prometheus query {name!r} returned {len(values)} series where one was expected",
            reason="malformed",
        )
    return values[0][1]


def _instances(results: Results, per_replica: int | None) -> int | None:
    """The model's instances across the replicas Prometheus counts, where the count is known."""
    replicas = _one(results, "replicas")
    if per_replica and replicas is not None and math.isfinite(replicas) and replicas > 0:
        return int(replicas) * per_replica
    return None


def window_from_results(
    results: Results,
    *,
    queries: PromQL,
    evaluated_s: float,
    instances_per_replica: int | None = None,
    curve: BatchCurve | None = None,
) -> Window:
    """The window the query results describe (pure). ``evaluated_s`` is the query's time;
    ``instances_per_replica`` turns the busy instances into a busy share; ``curve``, the
    reference of the stretch (approximated: every batch taken at the mean batch size)."""
    model, range_s = queries.model, float(queries.range_s)
    newest = _one(results, "newest_s")
    end_s = newest if newest is not None and math.isfinite(newest) else evaluated_s

    def stale(reason: StaleReason, detail: str) -> Window:
        return Window(model=model, start_s=end_s - range_s, end_s=end_s, stale=True,
                      stale_reason=reason.value, stale_detail=detail, source="prometheus")

    required = ("success", "count", "exec", "queue_us", "compute_us", "request_us", "pending",
                "pending_delta")
    values = {name: _one(results, name) for name in required}
    missing = [n for n, v in values.items() if v is None]
    if missing:
        return stale(
            StaleReason.MISSING_SERIES,
            f"Prometheus has no series for {', '.join(missing)} of {queries.matchers} in the "
            f"last {range_s:g} s (not scraped, or the selector matches nothing)",
        )
    resets = _one(results, "resets")
    failures = {
        labels.get("reason", "unknown"): v for labels, v in _values(
            list(results.get("failure", [])), "failure")
    }
    bad = [n for n, v in {**values, **failures}.items() if v is None or not math.isfinite(v)]
    if bad:
        return stale(StaleReason.NOT_FINITE, f"Prometheus returned NaN or infinity for {bad}")
    if resets is not None and math.isfinite(resets) and resets > 0:
        return stale(
            StaleReason.COUNTER_RESET,
            f"{resets:g} counter reset(s) within the last {range_s:g} s: a replica restarted "
            "or reloaded its model",
        )
    v: dict[str, float] = {n: float(x) for n, x in values.items() if x is not None}
    negative = [n for n in ("success", "count", "exec", "queue_us", "compute_us", "request_us",
                            "pending") if v[n] < 0]
    if negative or any(x < 0 for x in failures.values()):
        return stale(StaleReason.COUNTER_RESET, f"negative rates for {negative or 'failures'}")
    success = v["success"]

    def per_request_ms(name: str) -> float | None:
        return v[name] / success / 1000.0 if success > 0 else None

    def quantile_ms(name: str) -> float | None:
        q = _one(results, name)
        return q / 1000.0 if q is not None and math.isfinite(q) and q >= 0 else None

    batch = v["count"] / v["exec"] if v["exec"] > 0 else None
    device_ms = busy = None
    util = _utilization(results)
    view = device_view([], 1.0, curve, util)
    if batch is not None and success > 0:
        # Rates: a second's executions, each its batch's compute (counted once per request).
        view = device_view([(batch, v["exec"], v["compute_us"] / batch / 1000.0)], 1.0, curve, util)
        device_ms = v["compute_us"] / success / batch / 1000.0
        parts = [v["compute_us"]] + [
            x for x in (_one(results, "compute_input_us"), _one(results, "compute_output_us"))
            if x is not None and math.isfinite(x) and x >= 0
        ]
        busy = sum(parts) / batch / 1e6
    elif v["exec"] == 0:
        busy = 0.0
    instances = _instances(results, instances_per_replica)
    return Window(
        model=model,
        start_s=end_s - range_s,
        end_s=end_s,
        success_rps=success,
        failure_rps=dict(sorted(failures.items())),
        inference_rps=v["count"],
        exec_rps=v["exec"],
        mean_batch_size=batch,
        mean_queue_ms=per_request_ms("queue_us"),
        mean_compute_ms=per_request_ms("compute_us"),
        mean_request_ms=per_request_ms("request_us"),
        pending_requests=v["pending"],
        pending_delta=v["pending_delta"],
        p95_ms=quantile_ms("p95_us"),
        p99_ms=quantile_ms("p99_us"),
        batch_curve_ms={},
        utilization=util,
        device_ms_per_request=device_ms,
        busy_instances=busy,
        stretch=view.stretch,
        own_device_share=view.own_device_share,
        others_share=view.others_share,
        source="prometheus",
    ).with_instance_count(instances)


def clock_skew(now: list[Mapping[str, Any]], asked_s: float, answered_s: float,
               tolerance_s: float) -> str | None:
    """Why the clock that read ``asked_s`` before the queries and ``answered_s`` after them
    disagrees with Prometheus's time ``now`` (the result of :data:`NOW_QUERY`) by more than
    ``tolerance_s``, else None (pure). Prometheus read its time between the two."""
    values = _values(list(now), "now")
    if len(values) != 1 or not math.isfinite(values[0][1]):
        raise ScrapeError(f"Prometheus answered {NOW_QUERY!r} with {list(now)!r:.200}, not one time",
                          reason="malformed")
    prom_s = values[0][1]
    if asked_s - tolerance_s <= prom_s <= answered_s + tolerance_s:
        return None
    ahead = prom_s - answered_s if prom_s > answered_s else prom_s - asked_s
    return (f"its clock reads {prom_s:.3f} and this one {asked_s:.3f} ({ahead:+.1f} s, more than the "
            f"{tolerance_s:g} s allowed): a clock stepped or drifted, and the queries, evaluated at "
            "this clock, would read another time's data as now")


def _utilization(results: Results) -> float | None:
    for name in ("nv_gpu_util", "dcgm_util"):
        u = _one(results, name)
        if u is not None and math.isfinite(u) and 0.0 <= u <= 1.0:
            return u
    return None


class PrometheusSource:
    """Windows of one model across every replica Prometheus scrapes.

    Every poll gives a window (``range_s`` long, ending at the newest scrape);
    there is no previous sample to keep.

    Args:
        url: Prometheus's base URL (``/api/v1/query`` is appended).
        model: the model (``model`` label).
        selector: extra label matchers, e.g. ``job="triton"``.
        range_s: the range of ``rate()``; at least four scrape intervals, so
            every replica has two samples in it even when one scrape is late.
        utilization_selector: matchers for the accelerator series (default: ``selector``).
        client, clock, timeout_s: as for :class:`~autobatch.signals.triton.TritonSource`.
        max_age_s: a window whose newest scrape is older than this is stale
            (``too_old``); None turns the check off.
        instances_per_replica: the model's execution instances on each replica, for
            ``busy_share`` (None: the share is left unknown).
        max_bytes: the most one query's answer may send (``too_large`` past it).
        curve: the reference of each window's stretch (``policy.curve``; None: none).
        max_skew_s: how far ``clock`` may read from Prometheus's clock, beyond the time the
            queries took, before the window is stale (``bad_interval``); None turns the
            check off (a test that evaluates at a chosen past time).
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        selector: str = "",
        range_s: float = 30.0,
        utilization_selector: str | None = None,
        client: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.time,
        timeout_s: float = DEFAULT_TIMEOUT_S * 2,
        max_age_s: float | None = None,
        instances_per_replica: int | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        curve: BatchCurve | None = None,
        max_skew_s: float | None = CLOCK_SKEW_TOLERANCE_S,
    ) -> None:
        self.url = normalize_url(url, "prometheus_url")
        self.curve = curve
        self.instances_per_replica = instances_per_replica
        self.promql = PromQL(model, selector, range_s, utilization_selector)
        if max_age_s is not None and not (math.isfinite(max_age_s) and max_age_s > 0):
            raise ConfigError(f"max_age_s = {max_age_s!r}: must be a number > 0 (or None for off)",
                              field="max_age_s", value=max_age_s)
        self.model = model
        self.clock = clock
        self.timeout_s = float(timeout_s)
        self.max_age_s = max_age_s
        if max_skew_s is not None and not (math.isfinite(max_skew_s) and max_skew_s > 0):
            raise ConfigError(f"max_skew_s = {max_skew_s!r}: must be a number > 0 (or None for off)",
                              field="max_skew_s", value=max_skew_s)
        self.max_skew_s = max_skew_s
        self.max_bytes = int(max_bytes)
        self._client = client
        self._owns_client = client is None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient()
        return self._client

    async def query(self, promql: str, at_s: float | None) -> list[Mapping[str, Any]]:
        """One instant query at ``at_s`` (None: Prometheus's now); the ``data.result`` list.
        Raises ScrapeError or ConfigError."""
        endpoint = f"{self.url}/api/v1/query"
        params = {"query": promql} if at_s is None else {"query": promql, "time": f"{at_s:.3f}"}
        r = await get_bounded(
            self._http(), endpoint, params=params,
            timeout_s=self.timeout_s, max_bytes=self.max_bytes, what="Prometheus",
        )
        # Off the event loop: a large answer takes a while to decode.
        body = await asyncio.to_thread(_json_or_none, r.content)
        if not isinstance(body, Mapping):
            raise ScrapeError(
                f"Prometheus at {self.url} answered HTTP {r.status} without a JSON body "
                "(is this the Prometheus base URL?)",
                reason="malformed" if r.status == 200 else "unreachable",
                url=endpoint,
            )
        if body.get("status") != "success":
            message = str(body.get("error", "no error message"))[:300]
            if body.get("errorType") == "bad_data":
                # The only input in the query is the user's selector and model.
                raise ConfigError(
                    f"selector = {self.promql.selector!r}: Prometheus rejected the query: {message}",
                    field="selector",
                    value=self.promql.selector,
                )
            raise ScrapeError(f"Prometheus query failed ({body.get('errorType')}): {message}",
                              url=endpoint)
        data = body.get("data")
        if not isinstance(data, Mapping) or data.get("resultType") != "vector" or not isinstance(
            data.get("result"), list
        ):
            raise ScrapeError(f"Prometheus at {self.url}: expected an instant vector result",
                              reason="malformed", url=endpoint)
        return data["result"]

    async def poll(self) -> Window:
        """Run every query at the current time and build the window."""
        at_s = self.clock()
        queries = self.promql.queries()
        asked = [self.query(q, at_s) for q in queries.values()]
        if self.max_skew_s is not None:
            asked.append(self.query(NOW_QUERY, None))
        results = await asyncio.gather(*asked)
        answered_s = self.clock()
        window = window_from_results(
            dict(zip(queries, results[:len(queries)], strict=True)), queries=self.promql, evaluated_s=at_s,
            instances_per_replica=self.instances_per_replica, curve=self.curve,
        )
        if self.max_skew_s is not None:
            skew = clock_skew(results[-1], at_s, answered_s, self.max_skew_s)
            if skew is not None:
                return replace(window, stale=True, stale_reason=StaleReason.BAD_INTERVAL.value,
                               stale_detail=f"Prometheus at {self.url}: {skew}")
        return window.aged(answered_s, self.max_age_s)

    async def aclose(self) -> None:
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> PrometheusSource:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _json_or_none(content: bytes) -> Any:
    try:
        return json.loads(content)
    except (ValueError, RecursionError):
        return None
