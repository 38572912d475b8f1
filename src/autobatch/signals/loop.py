"""Polling a source on a fixed interval: the async iterator the controller and ``watch`` share.

A failed read does not end the stream: it becomes a stale window that says why
(``unreachable``, ``malformed``, ``missing_series``), so a Triton restart shows
up as a few stale windows and then data again. Only the very first read may
raise, so a wrong URL or model name fails at once instead of printing stale
rows forever.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from autobatch.errors import ConfigError, ScrapeError, SignalError
from autobatch.signals.window import StaleReason, Window

__all__ = ["SOURCES", "SignalSource", "make_source", "watch", "windows"]


class SignalSource(Protocol):
    """What :func:`windows` polls: :class:`~autobatch.signals.TritonSource` or
    :class:`~autobatch.signals.PrometheusSource`."""

    model: str
    clock: Callable[[], float]

    async def poll(self) -> Window | None: ...

    async def aclose(self) -> None: ...


def _error_window(source: SignalSource, exc: SignalError, since_s: float) -> Window:
    now = source.clock()
    reason = getattr(exc, "reason", StaleReason.UNREACHABLE.value)
    return Window(
        model=source.model,
        start_s=min(since_s, now),
        end_s=now,
        stale=True,
        stale_reason=reason,
        stale_detail=str(exc),
        source=type(source).__name__.removesuffix("Source").lower(),
    )


async def windows(
    source: SignalSource,
    interval_s: float,
    *,
    count: int | None = None,
    strict_first: bool = True,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> AsyncIterator[Window]:
    """Poll ``source`` every ``interval_s`` and yield each window (``count`` of them, or forever).

    Polls are paced on ``monotonic`` from the first one, so a slow scrape does
    not push every later window back. A :class:`~autobatch.errors.SignalError`
    after the first successful poll is yielded as a stale window; with
    ``strict_first`` one before it is raised.
    """
    if not (isinstance(interval_s, (int, float)) and math.isfinite(interval_s) and interval_s > 0):
        raise ConfigError(f"interval_s = {interval_s!r}: must be a number of seconds > 0",
                          field="interval", value=interval_s)
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ConfigError(f"count = {count!r}: must be an integer >= 1", field="count", value=count)
    start = monotonic()
    tick = 0
    produced = 0
    ever_ok = False
    last_end_s = source.clock()
    while count is None or produced < count:
        try:
            window = await source.poll()
        except ScrapeError as exc:
            if strict_first and not ever_ok:
                raise
            window = _error_window(source, exc, last_end_s)
        else:
            ever_ok = True
        if window is not None:
            last_end_s = window.end_s
            produced += 1
            yield window
            if count is not None and produced >= count:
                return
        tick += 1
        # Skip ticks already missed rather than firing a burst of polls.
        now = monotonic()
        tick = max(tick, math.ceil((now - start) / interval_s))
        await sleep(max(0.0, start + tick * interval_s - now))


def watch(
    source: SignalSource,
    interval_s: float,
    on_window: Callable[[Window], object],
    *,
    count: int | None = None,
) -> int:
    """Blocking front-end of :func:`windows` for the CLI: call ``on_window`` per window.

    Returns the number of windows; closes the source at the end.
    """

    async def run() -> int:
        n = 0
        try:
            async for window in windows(source, interval_s, count=count):
                on_window(window)
                n += 1
        finally:
            await source.aclose()
        return n

    return asyncio.run(run())


SOURCES = ("triton", "prometheus")


def make_source(
    source: str,
    url: str,
    model: str,
    *,
    metrics_url: str | None = None,
    utilization_url: str | None = None,
    selector: str | None = None,
    range_s: float | None = None,
    max_age_s: float | None = None,
) -> SignalSource:
    """Build a source from command-line style options; errors name the flag and value."""
    from autobatch.signals.prometheus import PrometheusSource
    from autobatch.signals.triton import TritonSource, normalize_url

    if source not in SOURCES:
        raise ConfigError(f"--source = {source!r}: must be one of {', '.join(SOURCES)}",
                          field="source", value=source)
    if max_age_s is not None and not (math.isfinite(max_age_s) and max_age_s > 0):
        raise ConfigError(f"--max-age = {max_age_s!r}: must be a number of seconds > 0",
                          field="max_age", value=max_age_s)
    url = normalize_url(url, "--url")
    if source == "triton":
        for flag, value in (("--selector", selector), ("--range", range_s)):
            if value is not None:
                raise ConfigError(f"{flag} = {value!r}: only applies with --source prometheus",
                                  field=flag, value=value)
        return TritonSource(
            url,
            model,
            metrics_url=normalize_url(metrics_url, "--metrics-url") if metrics_url else None,
            utilization_url=(
                normalize_url(utilization_url, "--utilization-url") if utilization_url else None
            ),
            max_age_s=max_age_s,
        )
    for flag, value in (("--metrics-url", metrics_url), ("--utilization-url", utilization_url)):
        if value is not None:
            raise ConfigError(f"{flag} = {value!r}: only applies with --source triton "
                              "(Prometheus already scrapes those endpoints)", field=flag, value=value)
    if range_s is not None and not (math.isfinite(range_s) and range_s > 0):
        raise ConfigError(f"--range = {range_s!r}: must be a number of seconds > 0",
                          field="range", value=range_s)
    return PrometheusSource(
        url, model, selector=selector or "", range_s=range_s or 30.0, max_age_s=max_age_s
    )
