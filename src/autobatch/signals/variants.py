"""Signals in gateway mode: every variant read on its own, for the guard and the policy.

Built by :mod:`autobatch.signals.factory`; the gateway actuator only receives them.

The guard judges one variant at a time (:class:`TritonStepSignals`,
:class:`PrometheusStepSignals`). The controller's policy sees one window
built from all of them (:class:`VariantsSource`, :func:`combine_windows`),
because the policy sizes the profile to the load, and the load is what all
variants serve together: during a shift the live variant's window alone would
show the load falling by the share moved away. Combined:

* rates, failures and the backlog add up; mean times are weighted by each
  variant's completed requests, the mean batch size by its executions;
* p95/p99 are the worst of the variants that completed requests in the window
  (an idle variant's summary still holds up to 60 s of its last stint);
* the live batch curve is averaged over the variants, utilisation too;
* device time per request is weighted by items; the busy share is that of the
  variants that served requests (an idle variant's instances are not
  capacity the live profile can use);
* one stale variant makes the combined window stale (naming it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from autobatch.errors import ScrapeError
from autobatch.signals.triton import TritonSample, TritonSource, window_between
from autobatch.signals.window import Window

__all__ = [
    "PrometheusStepSignals",
    "StepSignals",
    "TritonStepSignals",
    "VariantsSource",
    "combine_windows",
]


def combine_windows(windows: Mapping[str, Window], model: str) -> Window:
    """One window for the policy from each variant's window over (about) the same interval."""
    if not windows:
        raise ValueError("combine_windows needs at least one window")
    items = list(windows.items())
    start = min(w.start_s for _, w in items)
    end = max(w.end_s for _, w in items)
    stale = [(name, w) for name, w in items if w.stale]
    if stale:
        name, w = stale[0]
        return Window(
            model=model, start_s=start, end_s=end, stale=True, stale_reason=w.stale_reason,
            stale_detail=f"variant {name} ({w.model}): {w.stale_detail or w.stale_reason}",
            source="gateway",
        )

    def dt(w: Window) -> float:
        return max(w.end_s - w.start_s, 1e-9)

    span = max(end - start, 1e-9)

    def rate(values: Sequence[tuple[float, Window]]) -> float:
        # Each variant's count over its own interval, over the combined interval.
        return sum(v * dt(w) for v, w in values) / span

    success = [(w.success_rps, w) for _, w in items]
    reasons = sorted({r for _, w in items for r in w.failure_rps})
    failure_rps = {r: rate([(w.failure_rps.get(r, 0.0), w) for _, w in items]) for r in reasons}

    def weighted(field: str, by: str) -> float | None:
        num = den = 0.0
        for _, w in items:
            value = getattr(w, field)
            weight = getattr(w, by) * dt(w)
            if value is not None and weight > 0:
                num += value * weight
                den += weight
        return num / den if den > 0 else None

    served = [w for _, w in items if w.success_rps + w.failures_rps > 0]

    def worst(field: str) -> float | None:
        values = [getattr(w, field) for w in served if getattr(w, field) is not None]
        return max(values) if values else None

    pending = [w.pending_requests for _, w in items if w.pending_requests is not None]
    deltas = [w.pending_delta for _, w in items if w.pending_delta is not None]
    curve: dict[int, list[float]] = {}
    for _, w in items:
        for b, ms in w.batch_curve_ms.items():
            curve.setdefault(int(b), []).append(float(ms))
    utils = [w.utilization for _, w in items if w.utilization is not None]
    inference = rate([(w.inference_rps, w) for _, w in items])
    execs = rate([(w.exec_rps, w) for _, w in items])
    busy_known = [w for w in served if w.busy_instances is not None]
    busy = rate([(w.busy_instances or 0.0, w) for w in busy_known]) if busy_known else None
    counts = [w.instance_count for w in served]
    instances = sum(c for c in counts if c is not None) if counts and None not in counts else None
    combined = Window(
        model=model,
        start_s=start,
        end_s=end,
        success_rps=rate(success),
        failure_rps=failure_rps,
        inference_rps=inference,
        exec_rps=execs,
        mean_batch_size=inference / execs if execs > 0 else None,
        mean_queue_ms=weighted("mean_queue_ms", "success_rps"),
        mean_compute_ms=weighted("mean_compute_ms", "success_rps"),
        mean_request_ms=weighted("mean_request_ms", "success_rps"),
        pending_requests=sum(pending) if pending else None,
        pending_delta=sum(deltas) if deltas else None,
        p95_ms=worst("p95_ms"),
        p99_ms=worst("p99_ms"),
        batch_curve_ms={b: sum(v) / len(v) for b, v in sorted(curve.items())},
        utilization=sum(utils) / len(utils) if utils else None,
        utilization_detail=None if utils else next(
            (w.utilization_detail for _, w in items if w.utilization_detail), None),
        device_ms_per_request=weighted("device_ms_per_request", "inference_rps"),
        busy_instances=busy,
        **_device_shares(items, span, utils),
        source="gateway",
    )
    return combined.with_instance_count(instances)


def _device_shares(items: Sequence[tuple[str, Window]], span_s: float,
                   utils: Sequence[float]) -> dict[str, float | None]:
    """The variants' stretch and shares of one device: their own work adds up, and the
    stretch is their observed compute over their curve time, both summed."""
    known = [w for _, w in items if w.own_device_share is not None]
    if not known:
        return {"stretch": None, "own_device_share": None, "others_share": None}
    own = sum((w.own_device_share or 0.0) * max(w.end_s - w.start_s, 1e-9) for w in known) / span_s
    stretched = [w for w in known if w.stretch is not None and (w.own_device_share or 0.0) > 0]
    weight = sum((w.own_device_share or 0.0) * (w.end_s - w.start_s) for w in stretched)
    stretch = (sum((w.stretch or 0.0) * (w.own_device_share or 0.0) * (w.end_s - w.start_s)
                   for w in stretched) / weight) if weight > 0 else None
    util = sum(utils) / len(utils) if utils else None
    return {"stretch": stretch, "own_device_share": own,
            "others_share": None if util is None else max(0.0, util - own)}


class VariantsSource:
    """The controller's source in gateway mode: polls every variant's source at once.

    Args:
        sources: each variant's source (a ``TritonSource`` or ``PrometheusSource``),
            by profile name.
        model: the name the combined window carries (the sidecar's ``model``).

    A variant that cannot be read makes the poll raise its
    :class:`~autobatch.errors.ScrapeError`, naming the variant; the controller
    counts it and holds. Returns None until every variant has a baseline.
    """

    def __init__(
        self, sources: Mapping[str, Any], model: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        if not sources:
            raise ValueError("VariantsSource needs at least one variant source")
        self.sources = dict(sources)
        self.model = model
        self.clock = clock

    async def poll(self) -> Window | None:
        names = list(self.sources)
        results = await asyncio.gather(
            *(self.sources[n].poll() for n in names), return_exceptions=True
        )
        for name, result in zip(names, results):
            if isinstance(result, ScrapeError):
                raise ScrapeError(
                    f"variant {name}: {result}", reason=result.reason, url=result.url,
                    timed_out=result.timed_out,
                ) from result
            if isinstance(result, BaseException):
                raise result
        windows = {n: r for n, r in zip(names, results) if r is not None}
        if len(windows) < len(names):
            return None
        return combine_windows(windows, self.model)

    async def aclose(self) -> None:
        for source in self.sources.values():
            await source.aclose()


class StepSignals(Protocol):
    """One variant's signals, read around a gateway step (the guard's view)."""

    async def begin(self) -> Any:
        """A baseline taken just before the step; raises ``SignalError`` when unreadable."""
        ...

    async def window(self, baseline: Any) -> Any:
        """The variant's window from ``baseline`` to now; raises ``SignalError`` when unreadable."""
        ...

    def p95_ms(self, baseline: Any) -> float | None:
        """The summary p95 at the baseline, if the baseline carries one."""
        ...

    async def aclose(self) -> None: ...


class TritonStepSignals:
    """A variant's Triton, read before and after a step: the window is exactly the step.

    The source's own previous sample is not touched, so the same ``TritonSource``
    may not be shared with :class:`VariantsSource` (each gets its own).
    """

    def __init__(self, source: TritonSource) -> None:
        self.source = source

    async def begin(self) -> TritonSample:
        return await self.source.sample()

    async def window(self, baseline: TritonSample) -> Window:
        after = await self.source.sample()
        return window_between(baseline, after, self.source.curve)

    def p95_ms(self, baseline: TritonSample) -> float | None:
        p95 = baseline.metrics.p95_us
        return None if p95 is None else p95 / 1000.0

    async def aclose(self) -> None:
        await self.source.aclose()


class PrometheusStepSignals:
    """A variant's replicas through Prometheus: the window after a step is the query's
    range ending at the newest scrape, so the step must last longer than the range
    plus a scrape interval to be seen whole (set ``step_dwell_s`` accordingly)."""

    def __init__(self, source: Any) -> None:
        self.source = source

    async def begin(self) -> Window | None:
        return await self.source.poll()

    async def window(self, baseline: Window | None) -> Window:
        w = await self.source.poll()
        if w is None:
            raise ScrapeError("Prometheus returned no window", reason="missing_series")
        return w

    def p95_ms(self, baseline: Window | None) -> float | None:
        return None if baseline is None or baseline.stale else baseline.p95_ms

    async def aclose(self) -> None:
        await self.source.aclose()
